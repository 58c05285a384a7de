"""Each hit's share in a fusion of rankings, shared by the hybrid retriever (two rankings fused as they are
searched), :class:`~semiret.search.fused.FusedSearch` (separate indexes' rankings fused at query time) and ``semiret
fuse`` (saved runs fused): min-max normalised scores, and reciprocal rank fusion's ``1 / (rrf_k + rank)`` (Cormack et
al., 2009); also z-scores (OpenSearch's ``z_score`` normalisation) and distribution-based scores (Qdrant's
``dbsf``). :func:`fused_ranking` sums a query's rankings' weighted shares per document."""

from __future__ import annotations

import heapq
import math
from typing import Sequence

import numpy as np

from semiret.errors import SemiretError

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

FUSIONS = ("rrf", *SCORE_SHARES)
"""The fusions of several rankings, by name: reciprocal ranks, or one of :data:`SCORE_SHARES`."""


def check_fusion(method: str, weights: Sequence[float] | None, count: int, rrf_k: int) -> list[float]:
    """The weights of ``count`` rankings fused by ``method`` (equal by default), checked with the method and
    ``rrf_k``: clear errors for an unknown method, a weight per ranking missing, weights negative, not finite or all
    0, a negative ``rrf_k``."""
    if count < 2:
        raise SemiretError(f"fusion takes two rankings or more, got {count}")
    if method not in FUSIONS:
        raise SemiretError(f"fusion method must be one of {', '.join(FUSIONS)}, not {method!r}")
    weights = [1.0] * count if weights is None else [float(w) for w in weights]
    if len(weights) != count:
        raise SemiretError(f"{len(weights)} weights for {count} rankings: give one weight each, in their order")
    if not all(math.isfinite(w) and w >= 0 for w in weights) or not sum(weights) > 0:
        raise SemiretError(f"weights must be finite, at least 0 and not all 0, got {weights}")
    if rrf_k < 0:
        raise SemiretError(f"rrf_k must be at least 0, got {rrf_k}")
    return weights


def fused_ranking(rankings: Sequence[tuple[Sequence[str], Sequence[float]]], method: str, weights: Sequence[float],
                  rrf_k: int, k: int) -> list[tuple[str, float]]:
    """One query's rankings (each its ids and scores, best first) fused: each hit's share (``rrf``: ``1 / (rrf_k +
    rank)``, else its ranking's :data:`SCORE_SHARES`) times its ranking's weight, summed per document; the best ``k``
    as (id, fused score), ties by id descending (trec_eval's order)."""
    totals: dict[str, float] = {}
    for (ids, scores), weight in zip(rankings, weights):
        if not len(ids) or not weight:
            continue
        shares = reciprocal_ranks(len(ids), rrf_k) if method == "rrf" else SCORE_SHARES[method](scores)
        for doc_id, share in zip(ids, shares.tolist()):
            totals[doc_id] = totals.get(doc_id, 0.0) + weight * share
    return heapq.nlargest(k, totals.items(), key=lambda item: (item[1], item[0]))
