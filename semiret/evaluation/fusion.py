"""Saved runs fused into one (``semiret fuse``; Pyserini's and ranx's fusion): each run's ranking of a query turned
into shares (reciprocal ranks, or min-max normalised scores, z-scores or distribution-based scores), weighted and
summed per document, as the hybrid
retriever fuses its two rankings (:mod:`semiret.search.fusion`)."""

from __future__ import annotations

import heapq
import math
from typing import Sequence

from semiret.data.trec import Run
from semiret.errors import SemiretError
from semiret.search.fusion import RRF_K, SCORE_SHARES, reciprocal_ranks

RUN_FUSIONS = ("rrf", *SCORE_SHARES)


def fuse_runs(runs: Sequence[Run], method: str = "rrf", weights: Sequence[float] | None = None, rrf_k: int = RRF_K,
              depth: int | None = None, k: int = 1000) -> Run:
    """One run from several: per query, each run's top ``depth`` (all by default) in trec_eval's order (score
    descending, ties by document id descending), each hit's share (``rrf``: ``1 / (rrf_k + rank)``; ``score``: its
    min-max normalised score; ``zscore``: its z-score among the ranking's, floored at 0.001, OpenSearch's
    ``z_score``; ``dbsf``: its score mapped from the ranking's mean +- 3 standard deviations onto [0, 1], Qdrant's
    distribution-based score fusion; both with the sample standard deviation) times its run's weight (equal by
    default), summed per document; the best ``k``. A query missing from a run gets nothing from it."""
    if len(runs) < 2:
        raise SemiretError(f"fusion takes two runs or more, got {len(runs)}")
    if method not in RUN_FUSIONS:
        raise SemiretError(f"fusion method must be one of {', '.join(RUN_FUSIONS)}, not {method!r}")
    weights = [1.0] * len(runs) if weights is None else [float(w) for w in weights]
    if len(weights) != len(runs):
        raise SemiretError(f"{len(weights)} weights for {len(runs)} runs: give one weight per run, in their order")
    if not all(math.isfinite(w) and w >= 0 for w in weights) or not sum(weights) > 0:
        raise SemiretError(f"weights must be finite, at least 0 and not all 0, got {weights}")
    if rrf_k < 0:
        raise SemiretError(f"rrf_k must be at least 0, got {rrf_k}")
    if depth is not None and depth < 1 or k < 1:
        raise SemiretError(f"depth and k must be at least 1, got depth={depth}, k={k}")
    fused: Run = {}
    for query_id in dict.fromkeys(q for run in runs for q in run):
        totals: dict[str, float] = {}
        for run, weight in zip(runs, weights):
            ranking = sorted(run.get(query_id, {}).items(), key=lambda item: (item[1], item[0]), reverse=True)[:depth]
            if not ranking or not weight:
                continue
            shares = (reciprocal_ranks(len(ranking), rrf_k) if method == "rrf"
                      else SCORE_SHARES[method]([score for _, score in ranking]))
            for (doc_id, _), share in zip(ranking, shares.tolist()):
                totals[doc_id] = totals.get(doc_id, 0.0) + weight * share
        best = heapq.nlargest(k, totals.items(), key=lambda item: (item[1], item[0]))
        fused[query_id] = dict(best)
    return fused
