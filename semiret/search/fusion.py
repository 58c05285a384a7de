"""Each hit's share in a fusion of rankings, shared by the hybrid retriever (two rankings fused as they are
searched) and ``semiret fuse`` (saved runs fused): min-max normalised scores, and reciprocal rank fusion's
``1 / (rrf_k + rank)`` (Cormack et al., 2009); for saved runs also z-scores (OpenSearch's ``z_score``
normalisation) and distribution-based scores (Qdrant's ``dbsf``)."""

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


Z_SCORE_FLOOR = 0.001
"""OpenSearch's ``z_score``: what a score at or below its ranking's mean counts (above a document not retrieved)."""


def _standardised(scores: Sequence[float]) -> np.ndarray | None:
    """float64: a ranking's scores less their mean, over their sample standard deviation (``n - 1``, as OpenSearch's
    and Qdrant's); None when they are equal (one score alone)."""
    values = np.array(scores, np.float64)
    spread = values.std(ddof=1) if len(values) > 1 else 0.0
    return (values - values.mean()) / spread if spread > 0 else None


def z_scores(scores: Sequence[float]) -> np.ndarray:
    """float64: each score's z-score among its ranking's, as OpenSearch's ``z_score`` normalisation: those at or below
    0 count :data:`Z_SCORE_FLOOR`, so that being retrieved never counts less than not being; equal scores (one alone)
    1 each."""
    standardised = _standardised(scores)
    return np.ones(len(scores)) if standardised is None else np.maximum(standardised, Z_SCORE_FLOOR)


def distribution_normalised(scores: Sequence[float]) -> np.ndarray:
    """float64: a ranking's scores mapped from [mean - 3 std, mean + 3 std] onto [0, 1] (distribution-based score
    fusion, Qdrant's ``dbsf``, with its sample standard deviation: the tails of a ranking's scores, not its extremes,
    as its range); equal scores (one alone) 0.5 each."""
    standardised = _standardised(scores)
    return np.full(len(scores), 0.5) if standardised is None else 0.5 + standardised / 6.0


SCORE_SHARES = {"score": min_max_normalised, "zscore": z_scores, "dbsf": distribution_normalised}
"""The fusions by scores, each a ranking's scores (best first) to its hits' shares: the hybrid retriever's and
``semiret fuse``'s."""
