"""Saved runs fused into one (``semiret fuse``; Pyserini's and ranx's fusion): each run's ranking of a query turned
into shares (reciprocal ranks, or min-max normalised scores, z-scores or distribution-based scores), weighted and
summed per document, as the hybrid
retriever fuses its two rankings (:mod:`semiret.search.fusion`)."""

from __future__ import annotations

from typing import Sequence

from semiret.data.trec import Run
from semiret.errors import SemiretError
from semiret.search.fusion import RRF_K, check_fusion, fused_ranking


def fuse_runs(runs: Sequence[Run], method: str = "rrf", weights: Sequence[float] | None = None, rrf_k: int = RRF_K,
              depth: int | None = None, k: int = 1000) -> Run:
    """One run from several: per query, each run's top ``depth`` (all by default) in trec_eval's order (score
    descending, ties by document id descending), each hit's share (``rrf``: ``1 / (rrf_k + rank)``; ``score``: its
    min-max normalised score; ``zscore``: its z-score among the ranking's, floored at 0.001, OpenSearch's
    ``z_score``; ``dbsf``: its score mapped from the ranking's mean +- 3 standard deviations onto [0, 1], Qdrant's
    distribution-based score fusion; both with the sample standard deviation) times its run's weight (equal by
    default), summed per document; the best ``k`` (:func:`~semiret.search.fusion.fused_ranking`). A query missing
    from a run gets nothing from it."""
    weights = check_fusion(method, weights, len(runs), rrf_k)
    if depth is not None and depth < 1 or k < 1:
        raise SemiretError(f"depth and k must be at least 1, got depth={depth}, k={k}")
    fused: Run = {}
    for query_id in dict.fromkeys(q for run in runs for q in run):
        rankings = []
        for run in runs:
            ranking = sorted(run.get(query_id, {}).items(), key=lambda item: (item[1], item[0]), reverse=True)[:depth]
            rankings.append(([doc_id for doc_id, _ in ranking], [score for _, score in ranking]))
        fused[query_id] = dict(fused_ranking(rankings, method, weights, rrf_k, k))
    return fused
