"""The foundation's shared compiled selection against sorting: floats (the tree's descent) and integer keys (a
search's best hits), ties, and only the first ``size`` values taken."""

from __future__ import annotations

import numpy as np
import pytest

from semiret.compiled import select_largest


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
