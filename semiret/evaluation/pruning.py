"""Static pruning of learned sparse document vectors: a weight threshold that keeps quality, chosen per model.

Dropping every document weight below a threshold shrinks an impact index and the postings each query
reads; the small weights it drops add little to any score. How far a model can be pruned depends on its
weight scale, so the threshold is chosen per model on labelled queries (a training split, never the test
one): the sweep walks the thresholds upwards until the first that costs more than ``tolerance`` of the
measure against the unpruned index, then backs off ``margin`` steps, because quality falls off a cliff
that a few hundred queries place only roughly (docs/results.md: on SciFact the train queries lost nothing
at 0.4, the test queries 0.008 and Vaswani's 0.010; at 0.3 they lost nothing, 0.000 and 0.002).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Sequence

import numpy as np

from semiret.evaluation.metrics import parse_measures, score_run
from semiret.indexes.inverted import InvertedIndex
from semiret.types import SparseQuery
from semiret.models.sparse import SparseVectors

DOCUMENT_THRESHOLDS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 1.0)
"""Thresholds tried, in the units of SPLADE weights (``log(1 + relu(logit))``)."""
THRESHOLD_TOLERANCE = 0.002
THRESHOLD_MARGIN = 1
THRESHOLD_MEASURE = "nDCG@10"


def threshold_sweep(vectors: SparseVectors, doc_ids: Sequence[str], query_ids: Sequence[str],
                    queries: Sequence[SparseQuery], qrels: dict, thresholds: Sequence[float] = DOCUMENT_THRESHOLDS,
                    measures: Sequence[str] = (THRESHOLD_MEASURE,), depth: int = 100,
                    added=None) -> list[dict]:
    """One row per threshold (the first, ``None``, unpruned): the measures, terms per document and
    postings read per query, each from an exact search of ``queries`` over the pruned vectors, plus
    ``added`` (a scipy matrix the index adds unpruned: a lexical prior) when given."""
    rows = []
    for threshold in (None, *sorted(thresholds)):
        pruned = vectors if threshold is None else vectors.prune(threshold=threshold)
        if added is not None:
            pruned = SparseVectors.from_csr(pruned.to_csr() + added)
        figures, postings = search_vectors(pruned, doc_ids, query_ids, queries, qrels, measures, depth)
        rows.append({"threshold": threshold, **figures, "avg_nnz_per_doc": round(float(pruned.nnz().mean()), 1),
                     "postings_per_query": postings})
    return rows


def search_vectors(vectors: SparseVectors, doc_ids: Sequence[str], query_ids: Sequence[str],
                   queries: Sequence[SparseQuery], qrels: dict, measures: Sequence[str] = (THRESHOLD_MEASURE,),
                   depth: int = 100) -> tuple[dict, float]:
    """(measures rounded to 4 places, postings read per query) of an exact search of ``queries`` over
    document ``vectors`` in a throwaway impact index."""
    with tempfile.TemporaryDirectory(prefix="semiret-vectors-") as scratch:
        index = InvertedIndex.build(Path(scratch) / "index", "impact", [vectors.to_postings(list(doc_ids))],
                                    vocab_size=vectors.dim, analyzer={"type": "vectors"}, store_texts=False)
        hits = index.search(queries, k=depth)
    figures = score_run(hits.as_run(list(query_ids)), qrels, parse_measures(list(measures)))
    return {m: round(figures[m], 4) for m in measures}, round(float(np.mean(hits.postings_visited)), 1)


def largest_safe_threshold(rows: list[dict], measure: str = THRESHOLD_MEASURE,
                           tolerance: float = THRESHOLD_TOLERANCE, margin: int = THRESHOLD_MARGIN) -> float | None:
    """``margin`` steps below the last threshold of the sweep that loses at most ``tolerance`` before one loses
    more (None: no pruning). A threshold scoring 0 is never safe: queries that find nothing relevant even
    unpruned (an untrained model, too few labels) give no evidence for pruning."""
    floor = rows[0][measure] - tolerance
    safe = 0
    while safe + 1 < len(rows) and rows[safe + 1][measure] >= floor and rows[safe + 1][measure] > 0:
        safe += 1
    return rows[safe - margin]["threshold"] if safe - margin > 0 else None
