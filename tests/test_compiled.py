"""The foundation's compiled kernels: the shared selection against sorting (floats, the tree's descent; integer keys, a
search's best hits; ties; only the first ``size`` values taken), and kernels compiled at their first call."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from semiret.compiled import Kernel, select_largest


@pytest.mark.parametrize("dtype", [np.float32, np.uint64])
def test_select_largest_puts_the_kth_of_a_descending_sort_in_place(dtype):
    rng = np.random.default_rng(7)
    for values in [rng.integers(0, 1000, 257), rng.integers(0, 3, 64), np.ones(5, np.int64), np.int64([2])]:
        values = values.astype(dtype)
        descending = np.sort(values)[::-1]
        for kth in range(len(values)):
            work = values.copy()
            select_largest(work, len(work), kth)
            assert work[kth] == descending[kth]
            assert np.all(work[:kth] >= work[kth]) and np.all(work[kth + 1:] <= work[kth])
            assert sorted(work.tolist()) == sorted(values.tolist())  # reordered, nothing lost


def test_select_largest_reads_only_the_first_size_values():
    values = np.float32([5, 1, 4, 9])
    select_largest(values, 3, 1)
    assert values[1] == 4 and values[3] == 9


def test_a_kernel_is_compiled_at_its_first_call_with_the_kernels_it_calls(tmp_path, monkeypatch):
    """Kernels are declared without numba and compiled when first called; a kernel calling another finds it
    compiled (numba cannot call the wrapper), and its module's name for the callee is the dispatcher after."""
    (tmp_path / "two_kernels.py").write_text(
        "from semiret.compiled import kernel\n\n"
        "@kernel\ndef inner(x):\n    return x * 2\n\n"
        "@kernel(fastmath=True)\ndef outer(values):\n    total = 0.0\n    for v in values:\n"
        "        total += inner(v)\n    return total\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import two_kernels

    assert isinstance(two_kernels.inner, Kernel) and two_kernels.outer._dispatcher is None
    assert two_kernels.outer(np.float64([1, 2, 3.5])) == 13.0
    assert not isinstance(two_kernels.inner, Kernel)  # rebound to the compiled dispatcher
    assert two_kernels.outer.compiled().targetoptions["fastmath"]


def test_the_command_line_starts_without_numba_or_scipy():
    """``semiret --help`` and every command that runs no kernel skip numba's and scipy's half-second imports."""
    code = "import sys, semiret.cli; print(sorted({m.split('.')[0] for m in sys.modules} & {'numba', 'scipy', 'torch'}))"
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert found == "[]"
