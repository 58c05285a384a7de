"""What every compiled (numba) kernel shares, in the foundation so that any layer's kernels can use it: the options
they are compiled with, and the in-place selection both the tree's descent (clustering) and a search's best hits
(indexes) run."""

from __future__ import annotations

import numba

NUMBA_OPTIONS = {"nogil": True, "cache": True}
"""Every semiret kernel releases the GIL (searches run in threads) and is cached on disk after its first compile."""


@numba.njit(**NUMBA_OPTIONS)
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
