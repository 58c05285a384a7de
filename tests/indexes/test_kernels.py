"""The deep top-k selection of the search kernels against sorting, on its every route."""

from __future__ import annotations

import numpy as np
import pytest

from semiret.indexes.kernels import key_hit, select_best_keys


def expected_best(scores: np.ndarray, live: np.ndarray, k: int) -> list[tuple[float, int]]:
    docs = [d for d in np.lexsort((np.arange(len(scores)), -scores)) if scores[d] > 0 and live[d]]
    return [(float(scores[d]), int(d)) for d in docs[:k]]


def selected(buffer, touched, n, in_order, deleted, k) -> list[tuple[float, int]]:
    keys = np.empty(4 * k, np.uint64)
    size = select_best_keys(buffer, touched, n, in_order, deleted, deleted.shape[0] > 0, keys, k)
    return sorted((tuple(map(float, key_hit(key))) for key in keys[:size]), key=lambda h: (-h[0], h[1]))


@pytest.mark.parametrize("k,n_docs", [(32, 3000), (100, 3000), (400, 3000), (32, 40_000)])
@pytest.mark.parametrize("in_order", [True, False])
def test_selection_equals_sorting_with_ties_deletions_and_a_sampled_bar(k, n_docs, in_order):
    """Scores with many ties, some documents deleted: the best k (equal scores: the earlier document), whether
    the bar starts from a sample (at least 16k hits, however many more) or not (k = 400); the scores cleared."""
    rng = np.random.default_rng(k)
    scores = np.where(rng.random(n_docs) < 0.8, rng.integers(1, 40, n_docs) / 4, 0).astype(np.float32)
    deleted = rng.random(n_docs) < 0.05
    buffer = scores.copy()
    touched = rng.permutation(np.flatnonzero(scores > 0)).astype(np.uint32)
    n = n_docs if in_order else len(touched)
    got = selected(buffer, touched, n, in_order, deleted, k)
    assert got == [(s, d) for s, d in expected_best(scores, ~deleted, k)]
    assert not buffer.any()


def test_a_sampled_bar_too_high_falls_back_to_a_full_pass():
    """The hits the sample reads are the only high ones: fewer than k reach the sample's bar, so the pass is
    repeated without it and still finds the true best k."""
    k, n = 40, 1000
    stride = k // 8
    scores = np.full(n, 1.0, np.float32)
    scores[np.arange(0, 16 * stride, stride)] = 10.0 + np.arange(16)  # the 16 best, all at sampled positions
    scores[7] = 0.5
    buffer = scores.copy()
    got = selected(buffer, np.empty(0, np.uint32), n, True, np.empty(0, bool), k)
    assert got == expected_best(scores, np.ones(n, bool), k)
    assert not buffer.any()
