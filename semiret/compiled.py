"""What every compiled (numba) kernel shares, in the foundation so that any layer's kernels can use it: the
decorator that compiles them (:func:`kernel`), and the in-place selection both the tree's descent (clustering) and a
search's best hits (indexes) run."""

from __future__ import annotations

import functools
import threading

NUMBA_OPTIONS = {"nogil": True, "cache": True}
"""Every semiret kernel releases the GIL (searches run in threads) and is cached on disk after its first compile."""

_COMPILING = threading.RLock()
"""Held while a kernel and the kernels it calls are compiled (reentrant: a kernel compiles its callees first)."""


class Kernel:
    """A numba kernel compiled at its first call rather than at import: importing numba costs about half a
    second, which every command (``semiret --help``, ``semiret get``) and every ``import semiret`` paid before
    any kernel ran. The compiled dispatcher is :meth:`compiled`; calling the kernel calls it."""

    def __init__(self, function, options: dict):
        functools.update_wrapper(self, function)
        self._function = function
        self._options = options
        self._dispatcher = None

    def compiled(self):
        """The numba dispatcher, made at the first call. The kernels this one calls by a global name are compiled
        first and their names in its module rebound to their dispatchers: numba can call a dispatcher from
        compiled code, not this wrapper."""
        if self._dispatcher is None:
            with _COMPILING:
                if self._dispatcher is None:
                    import numba

                    names = self._function.__globals__
                    for name in self._function.__code__.co_names:
                        if isinstance(names.get(name), Kernel):
                            names[name] = names[name].compiled()
                    self._dispatcher = numba.njit(**self._options)(self._function)
        return self._dispatcher

    def __call__(self, *args, **kwargs):
        return (self._dispatcher or self.compiled())(*args, **kwargs)


def kernel(function=None, **options):
    """Declare a compiled kernel, ``@kernel`` or ``@kernel(fastmath=True)``: ``numba.njit`` with
    :data:`NUMBA_OPTIONS` (and ``options``), applied at the first call (:class:`Kernel`)."""
    if function is None:
        return lambda f: Kernel(f, {**NUMBA_OPTIONS, **options})
    return Kernel(function, dict(NUMBA_OPTIONS))


@kernel
def select_largest(values, size, kth):
    """Reorder ``values[:size]`` in place so that ``values[kth]`` holds what a descending sort would put there,
    the larger values before it (quickselect, median-of-three pivots). Hand-written: numpy's partition has no
    in-place, allocation-free form in numba, and its copy at every call was a tenth of a tree descent. No NaN: a
    caller compiled with fastmath lets its scans run past the array on one (callers check their input)."""
    lo, hi = 0, size
    while hi - lo > 1:
        a, b, c = values[lo], values[(lo + hi) >> 1], values[hi - 1]
        if a < b:
            a, b = b, a
        if b < c:
            b = min(a, c)
        pivot = b
        i, j = lo, hi - 1
        while i <= j:
            while values[i] > pivot:
                i += 1
            while values[j] < pivot:
                j -= 1
            if i <= j:
                values[i], values[j] = values[j], values[i]
                i += 1
                j -= 1
        if kth <= j:
            hi = j + 1
        elif kth >= i:
            lo = i
        else:
            return
