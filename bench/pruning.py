"""Dynamic pruning against exhaustive search on existing indexes: same results, less work, less time.

``python bench/pruning.py INDEX_DIR [INDEX_DIR ...] [--queries scifact|zipf-N] [--n-queries 300]``
prints one JSON object. Each index is opened with its own retriever (BM25, inference-free, SiDR beta,
...), queries are encoded once, then ``index.search([query], k=10, prune=...)`` is timed for
``prune=True`` and ``prune=False``, one query at a time in rotating rounds (``corpus.timed_rounds``;
single thread). Reported per index: median and mean milliseconds, postings visited per query (read plus probed), the share of queries
whose top-10 ids agree, and ``speedup_median`` = exhaustive / pruned. Indexes come from the other
benchmarks run with ``--keep`` (for instance ``bench/inference_free_latency.py --keep`` leaves BM25 and
inference-free indexes of the 1M-document corpus in ``--workdir``).
"""

from __future__ import annotations

import statistics
from functools import partial
from pathlib import Path

import numpy as np
from corpus import SCIFACT, common_arguments, emit, ensure_corpus, load_queries, machine, timed_rounds


def query_texts(spec: str, n: int) -> list[str]:
    if spec == "scifact":
        return load_queries(SCIFACT, "test")[:n]
    if spec.startswith("zipf-"):
        return load_queries(ensure_corpus(int(spec.split("-", 1)[1]))[0], None)[:n]
    raise SystemExit(f"--queries: expected 'scifact' or 'zipf-N', got {spec!r}")


def compare(path: Path, texts: list[str]) -> dict:
    from semiret.search.retrievers import open_retriever

    retriever = open_retriever(path)
    index = retriever.index
    queries = retriever.encode_queries(texts)
    pruned, full = index.search(queries, k=10, prune=True), index.search(queries, k=10, prune=False)
    times = timed_rounds({prune: partial(index.search, k=10, prune=prune) for prune in (True, False)},
                         [[query] for query in queries])
    result = {"index": str(path), "kind": index.kind, "documents": index.n_docs,
              "query_terms_mean": round(float(np.mean([len(q.terms) for q in queries])), 1),
              "top10_agreement": round(float(np.mean([set(a) == set(b) for a, b in zip(pruned.ids, full.ids)])), 4),
              "postings_visited_pruned": round(float(np.mean(pruned.postings_visited)), 1),
              "postings_visited_exhaustive": round(float(np.mean(full.postings_visited)), 1)}
    for prune, label in ((True, "pruned"), (False, "exhaustive")):
        result[f"{label}_ms_median"] = round(statistics.median(times[prune]), 4)
        result[f"{label}_ms_mean"] = round(statistics.fmean(times[prune]), 4)
    result["speedup_median"] = round(result["exhaustive_ms_median"] / result["pruned_ms_median"], 3)
    result["speedup_mean"] = round(result["exhaustive_ms_mean"] / result["pruned_ms_mean"], 3)
    return result


def main() -> None:
    parser = common_arguments(__doc__.splitlines()[0])
    parser.add_argument("indexes", nargs="+", type=Path, help="index directories")
    parser.add_argument("--queries", default="scifact", help="'scifact' (test queries) or 'zipf-N'")
    parser.add_argument("--n-queries", type=int, default=300)
    args = parser.parse_args()
    texts = query_texts(args.queries, args.n_queries)
    emit({"benchmark": "pruning", "machine": machine(), "queries": args.queries, "n_queries": len(texts),
          "results": [compare(path, texts) for path in args.indexes]})


if __name__ == "__main__":
    main()
