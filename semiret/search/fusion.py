"""Each hit's share in a fusion of rankings, shared by the hybrid retriever (two rankings fused as they are
searched) and ``semiret fuse`` (saved runs fused): min-max normalised scores, and reciprocal rank fusion's
``1 / (rrf_k + rank)`` (Cormack et al., 2009)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

RRF_K = 60
"""Reciprocal rank fusion's constant, Cormack et al.'s: the default of every fusion by rank."""


def reciprocal_ranks(count: int, rrf_k: int) -> np.ndarray:
    """float64 [count]: ``1 / (rrf_k + rank)`` for ranks 1..count."""
    return 1.0 / (rrf_k + np.arange(1, count + 1, dtype=np.float64))


def min_max_normalised(scores_best_first: Sequence[float]) -> np.ndarray:
    """float64: a ranking's scores mapped onto [0, 1] (the best 1, the last 0; all 1 when they are equal). The
    scores come best first, so their extremes are the first and the last."""
    if not len(scores_best_first):
        return np.empty(0)
    high, low = scores_best_first[0], scores_best_first[-1]
    if not high > low:
        return np.ones(len(scores_best_first))
    values = np.array(scores_best_first, np.float64)
    values -= low
    values *= 1.0 / (high - low)
    return values
