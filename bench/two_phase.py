"""Two-phase search (high-IDF query tokens first, then rescoring) against exhaustive search: quality and
single-thread latency of the ``inference-free`` (or ``idf``) retriever for a grid of settings, one run.

``python bench/two_phase.py [--data scifact] [--model inference-free-scifact] [--retriever inference-free]``
prints one JSON object. The index is built once (``--index`` to reuse one); every setting searches it.
Latency: each query alone (``search([text], k=10)``), settings timed in rotating rounds (``corpus.timed_rounds``).
"""

from __future__ import annotations

import argparse
import statistics
from functools import partial
from pathlib import Path

import numpy as np
from corpus import CACHE_ROOT, emit, latency_queries, machine, model_key, timed_rounds

SETTINGS = [None, (0.2, 5.0), (0.3, 5.0), (0.4, 5.0), (0.4, 10.0), (0.5, 5.0), (0.6, 5.0), (0.4, 2.0)]


def main() -> None:
    from semiret import progress
    from semiret.evaluation.metrics import parse_measures, score_run
    from semiret.search.retrievers import retriever_class

    progress.set_enabled(False)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="scifact")
    parser.add_argument("--split", default="test")
    parser.add_argument("--retriever", default="inference-free", choices=("inference-free", "idf"))
    parser.add_argument("--model", default="inference-free-scifact")
    parser.add_argument("--index", type=Path, default=None)
    parser.add_argument("--depth", type=int, default=100)
    args = parser.parse_args()
    collection, qrels, query_ids, texts = latency_queries(args.data, args.split)
    cls = retriever_class(args.retriever)
    index = args.index or CACHE_ROOT / (f"two-phase-{collection.name}-{args.retriever}"
                                        + (f"-{model_key(args.model)}" if args.retriever == "inference-free" else ""))
    options = {"model": args.model} if args.retriever == "inference-free" else {}
    if not (index / "meta.json").is_file():
        cls.build(collection.corpus(), index, overwrite=True, store_texts=False, **options)
    # ",always": the approximation itself is measured, never the fallback to exact search
    searchers = {str(s): cls.open(index, two_phase=None if s is None else f"{s[0]},{s[1]},always") for s in SETTINGS}
    result = {"benchmark": "two_phase", "machine": machine(), "data": collection.name, "retriever": args.retriever,
              "model": args.model if args.retriever == "inference-free" else None, "queries": len(texts),
              "settings": []}
    exact_ids = None
    times = timed_rounds({label: partial(searcher.search, k=10) for label, searcher in searchers.items()},
                         [[text] for text in texts])
    for setting, (label, searcher) in zip(SETTINGS, searchers.items()):
        # the top 10 as timed (k = 10: two-phase keeps about expansion x k candidates, so a deeper search would
        # measure a more generous setting than the one timed), and R@100 of its own search 100 deep
        shown = searcher.search(texts, k=10)
        top10 = shown.ids
        figures = {**score_run(shown.as_run(query_ids), qrels, parse_measures(["nDCG@10"])),
                   **score_run(searcher.search(texts, k=args.depth).as_run(query_ids), qrels, parse_measures(["R@100"]))}
        if exact_ids is None:
            exact_ids = top10
        overlap = float(np.mean([len(set(a) & set(b)) / max(len(a), 1) for a, b in zip(exact_ids, top10)]))
        result["settings"].append({
            "two_phase": None if setting is None else {"prune_ratio": setting[0], "expansion": setting[1]},
            "nDCG@10": round(figures["nDCG@10"], 4), "R@100": round(figures["R@100"], 4),
            "top10_overlap_with_exhaustive": round(overlap, 4),
            "latency_ms_median": round(statistics.median(times[label]), 4),
            "latency_ms_mean": round(statistics.fmean(times[label]), 4)})
    base = result["settings"][0]
    for row in result["settings"]:
        row["speedup_mean"] = round(base["latency_ms_mean"] / row["latency_ms_mean"], 3)
    emit(result)


if __name__ == "__main__":
    main()
