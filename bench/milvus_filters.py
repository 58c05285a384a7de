"""Filtered search in a Milvus collection: the filter pushed down against the same collection read through.

``python bench/milvus_filters.py [--docs 20000] [--queries 30] [--tenants 100] [--uri milvus:URI]`` prints one JSON
object.

A bag-of-tokens collection (Milvus Lite by default) of ``--docs`` synthetic documents (``bench/corpus.py``), each
with the metadata ``{"tenant": "tI"}`` (I = its number modulo ``--tenants``: a filter on one tenant passes 1/tenants
of them), and semiret's own index of the same documents. Each query (2-6 words, as ``bench/corpus.py`` draws them)
searches for its top 10 of one tenant (``filter={"tenant": ...}``), timed one at a time in rotating rounds
(``corpus.timed_rounds``) three ways: the collection with the filter pushed down (Milvus searches that tenant's
documents), the same collection opened as one made before the metadata field (``metadata_field`` false: searched
deeper, 4x at a time, and each hit's stored metadata read, up to Milvus's 16,384 hits), and semiret's own index
(documents that fail hidden as deletions). Reported: median / p95 milliseconds, ``ratio_read_through`` (read
through / pushed down), and the share of queries whose top-10 scores equal the own index's (a read-through search
stops at 16,384 hits and can miss the tenant's documents below them).
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from corpus import SEED, common_arguments, emit, machine, synthetic_texts, timed_rounds  # noqa: E402


def main() -> None:
    parser = common_arguments(__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--tenants", type=int, default=100)
    parser.add_argument("--uri", default=None, help="milvus:URI (default: a Milvus Lite file in --workdir)")
    parser.add_argument("--k", type=int, default=10)
    args = parser.parse_args()
    n_docs = args.docs or (5_000 if args.quick else 20_000)

    from semiret.data.collection import Document
    from semiret.indexes.milvus import MilvusBackend, MilvusIndex
    from semiret.search import BagOfTokensRetriever, open_retriever

    args.workdir.mkdir(parents=True, exist_ok=True)
    backend = MilvusBackend.parse(args.uri or f"milvus:{args.workdir / 'milvus-filters.db'}")  # $MILVUS_TOKEN too
    documents = [Document(f"d{i}", text, metadata={"tenant": f"t{i % args.tenants}"})
                 for i, text in enumerate(synthetic_texts(n_docs, SEED))]
    start = time.perf_counter()
    collection = BagOfTokensRetriever.build(documents, "bench_filters", backend=backend, overwrite=True)
    milvus_build = time.perf_counter() - start
    start = time.perf_counter()
    own = BagOfTokensRetriever.build(documents, args.workdir / "own-filters", overwrite=True)
    own_build = time.perf_counter() - start
    read_through = open_retriever("bench_filters", backend=backend)
    read_through.index = MilvusIndex(backend, "bench_filters", {**collection.index.meta, "metadata_field": False})

    rng = np.random.default_rng(SEED + 1)
    texts = synthetic_texts(args.queries, SEED + 2)
    items = [(" ".join(text.split()[: int(rng.integers(2, 7))]), {"tenant": f"t{int(rng.integers(args.tenants))}"})
             for text in texts]
    systems = {label: (lambda item, r=retriever: r.search(item[0], k=args.k, filter=item[1]))
               for label, retriever in (("pushed_down", collection), ("read_through", read_through), ("own", own))}
    times = timed_rounds(systems, items, rounds=2, warm_up=2)
    expected = [[hit.score for hit in own.search(q, k=args.k, filter=f)] for q, f in items]

    def agreement(retriever) -> float:
        same = [np.allclose([hit.score for hit in retriever.search(q, k=args.k, filter=f)], want, rtol=1e-5)
                for (q, f), want in zip(items, expected)]
        return round(sum(same) / len(same), 3)

    summary = {label: {"median_ms": round(statistics.median(t), 2),
                       "p95_ms": round(float(np.percentile(t, 95)), 2)} for label, t in times.items()}
    summary["pushed_down"]["same_top_k_as_own"] = agreement(collection)
    summary["read_through"]["same_top_k_as_own"] = agreement(read_through)
    emit({"benchmark": "milvus_filters", "machine": machine(), "docs": n_docs, "tenants": args.tenants,
          "queries": len(items), "k": args.k, "milvus_uri": backend.uri, "build_seconds": {"milvus": round(milvus_build, 1),
                                                                                  "own": round(own_build, 1)},
          "systems": summary,
          "ratio_read_through": round(summary["read_through"]["median_ms"] / summary["pushed_down"]["median_ms"], 1)})


if __name__ == "__main__":
    main()
