"""The incremental protocol the HCE and GDR benchmarks share (HCE's §5.3 after IncDSI, GDR's Table 6): index the
documents a model was trained on, add the held-out ones without retraining, and compare the test queries whose
relevant documents were all trained on ("old") with those that have a relevant document among the added ones
("new"); then delete the added documents again.

Used by ``bench/hce_incremental.py`` and ``bench/gdr_incremental.py``; it takes any retriever class, so a
benchmark only says how its model was trained and which corpus split it used.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

MEASURES = ("nDCG@10", "R@10", "R@100")


def query_groups(qrels: dict, added: Iterable[str]) -> dict[str, dict]:
    """``qrels`` split in ``old`` (no relevant document among ``added``) and ``new`` (at least one)."""
    added = set(added)
    relevant = {q: {d for d, g in judged.items() if g > 0} for q, judged in qrels.items()}
    return {"old": {q: j for q, j in qrels.items() if not added & relevant[q]},
            "new": {q: j for q, j in qrels.items() if added & relevant[q]}}


def figures(retriever, queries: dict, qrels: dict, measures: Iterable[str] = MEASURES) -> dict:
    """The ``measures`` of ``retriever`` on the queries ``qrels`` judges (searched at depth 100)."""
    from semiret.evaluation.metrics import parse_measures, score_run

    if not qrels:
        return {"queries": 0}
    ids = [q for q in queries if q in qrels]
    run = retriever.search([queries[q] for q in ids], k=100).as_run(ids)
    return {name: round(value, 4) for name, value in
            score_run(run, qrels, parse_measures(list(measures))).items()} | {"queries": len(qrels)}


def protocol(build: Callable[[list], object], kept: list, held_out: list, queries: dict, qrels: dict,
             measures: Iterable[str] = MEASURES) -> dict:
    """``build(kept)`` (a retriever over the trained documents), add ``held_out``, delete them again: the figures
    of both query groups before and after adding, of the old ones after deleting, and the seconds each step took
    (building includes encoding ``kept``; adding, encoding ``held_out``)."""
    added = {d.id for d in held_out}
    groups = query_groups(qrels, added)
    started = time.perf_counter()
    retriever = build(kept)
    result = {"documents_indexed": len(kept), "documents_added": len(held_out),
              "query_groups": {g: len(judged) for g, judged in groups.items()},
              "build_seconds": round(time.perf_counter() - started, 1)}
    result["before_adding"] = {g: figures(retriever, queries, judged, measures) for g, judged in groups.items()}
    started = time.perf_counter()
    retriever.add(held_out)
    result["add_seconds"] = round(time.perf_counter() - started, 1)
    result["after_adding"] = {g: figures(retriever, queries, judged, measures) for g, judged in groups.items()}
    retriever.delete(sorted(added))
    result["after_deleting"] = {"old": figures(retriever, queries, groups["old"], measures)}
    return result


def dense(model: str) -> Callable[[list], object]:
    """A ``build`` for :func:`protocol`: flat dense search with ``model`` in a temporary index."""
    from semiret.search import DenseRetriever

    return lambda documents: DenseRetriever.build(documents, model=model)
