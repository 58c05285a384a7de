"""``hybrid`` (BM25 fused with a neural retriever) against each of its parts alone: quality and single-query
latency in one run, and the hybrid's latency as a ratio of its slower part's (the target: <= 1.10).

``python bench/hybrid_latency.py [--data scifact] [--neural inference-free] [--model ...] [--fusion bound]
[--threads 1] [--docs N] [--also-fusion score]`` prints one JSON object. The hybrid index is built once (its two
parts are complete indexes, searched alone by the part retrievers, so all three systems read the same postings).
Latency: each query alone (``search(text, k=10, n_threads=THREADS)``, every system given the same threads), systems
timed in rotating rounds (``corpus.timed_rounds``). ``--docs N`` times the synthetic Zipf corpus of N documents and its queries
(``corpus.py``; no qrels, so no quality) instead of ``--data``: a larger index than SciFact's.
"""

from __future__ import annotations

import statistics
from functools import partial
from pathlib import Path

from corpus import (CACHE_ROOT, emit, ensure_corpus, latency_arguments, latency_queries, load_documents, load_queries,
                    machine, model_key, timed_rounds)


def main() -> None:
    from semiret.evaluation.metrics import parse_measures, score_run
    from semiret.search import HybridRetriever, open_retriever

    parser = latency_arguments(__doc__.splitlines()[0])
    parser.add_argument("--neural", default="inference-free")
    parser.add_argument("--model", default=None)
    parser.add_argument("--fusion", default=None, choices=("bound", "score", "rrf"),
                        help="default: the hybrid's own ('bound' for two parts that search postings)")
    parser.add_argument("--also-fusion", default=None, choices=("bound", "score", "rrf"),
                        help="time the same index fused this way too, in the same rounds (system 'hybrid-FUSION')")
    parser.add_argument("--index", type=Path, default=None, help="reuse (or build) the hybrid index here")
    parser.add_argument("--threads", type=int, default=1, help="n_threads of every system's searches")
    parser.add_argument("--docs", type=int, default=None, help="the synthetic Zipf corpus of this many documents")
    args = parser.parse_args()
    if args.docs:
        directory, _ = ensure_corpus(args.docs)
        name, qrels, texts = f"zipf-{args.docs}", None, load_queries(directory)[:300]
        documents = partial(load_documents, directory)
    else:
        collection, qrels, query_ids, texts = latency_queries(args.data, args.split)
        name, documents = collection.name, collection.corpus
    index = args.index or CACHE_ROOT / f"hybrid-{name}-{args.neural}-{model_key(args.model)}"
    if not (index / "meta.json").is_file():
        HybridRetriever.build(documents(), index, overwrite=True, neural=args.neural, model=args.model)
    hybrid = open_retriever(index, fusion=args.fusion)
    systems = {"hybrid": hybrid, **hybrid.query_side.parts}  # the parts: BM25 ("lexical") and the neural one
    if args.also_fusion:
        systems[f"hybrid-{args.also_fusion}"] = open_retriever(index, fusion=args.also_fusion)
    result = {"benchmark": "hybrid_latency", "machine": machine(), "data": name, "neural": args.neural,
              "model": args.model, "fusion": hybrid.query_side.fusion, "threads": args.threads, "queries": len(texts),
              "systems": {}}
    times = timed_rounds({label: partial(system.search, k=10, n_threads=args.threads)
                          for label, system in systems.items()}, texts, rounds=args.rounds)
    for label, system in systems.items():
        quality = {} if qrels is None else score_run(system.search(texts, k=100).as_run(query_ids), qrels,
                                                     parse_measures(None))
        result["systems"][label] = {**quality, "latency_ms_median": round(statistics.median(times[label]), 4),
                                    "latency_ms_mean": round(statistics.fmean(times[label]), 4)}
    deep = timed_rounds({label: partial(system.search, k=hybrid.query_side.options.fusion_depth,
                                        n_threads=args.threads)
                         for label, system in hybrid.query_side.parts.items()}, texts, rounds=args.rounds)
    for label in hybrid.query_side.parts:  # what each part costs at the depth the hybrid reads it
        result["systems"][label]["latency_ms_median_at_fusion_depth"] = round(statistics.median(deep[label]), 4)
    slower = max(result["systems"][part]["latency_ms_median"] for part in hybrid.query_side.parts)
    result["ratio_to_slower_part_median"] = round(result["systems"]["hybrid"]["latency_ms_median"] / slower, 3)
    slower_deep = max(statistics.median(deep[part]) for part in hybrid.query_side.parts)
    result["ratio_to_slower_part_at_fusion_depth"] = round(result["systems"]["hybrid"]["latency_ms_median"]
                                                           / slower_deep, 3)
    if args.also_fusion:
        result[f"ratio_to_slower_part_median_{args.also_fusion}"] = round(
            result["systems"][f"hybrid-{args.also_fusion}"]["latency_ms_median"] / slower, 3)
    result["target"] = "hybrid median latency <= 1.10 x its slower part's"
    result["target_met"] = result["ratio_to_slower_part_median"] <= 1.10
    emit(result)


if __name__ == "__main__":
    main()
