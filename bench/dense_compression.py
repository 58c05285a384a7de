"""Compressed dense indexes (``--ann faiss:FACTORY``) against ``exact`` and ``ivf``: recall@10 against exact search,
single-query latency on one thread (query encoding excluded), the faiss index's bytes on disk (``ann.faiss``) beside
the float vectors (``vectors.npy``), and what a search keeps resident.

``python bench/dense_compression.py [--docs 100000] [--dim 384] [--lists 256] [--pq 48] [--nprobe 16]`` prints one
JSON object.

The vectors are synthetic (``tree_ann.synthetic_vectors``: seeded unit vectors around ``--centers`` random centers,
queries drawn the same way). Each structure is built once, as one segment; IVF-PQ and IVF-SQ8 share ``ivf``'s lists
and ``nprobe`` and are searched twice, with faiss's own approximate scores (``rescore`` 1) and with ``k * 4``
candidates re-scored exactly from ``vectors.npy`` (``rescore`` 4, the default for lossy codes); ``binary`` (a bit a
dimension, every segment's codes compared by Hamming distance) is always re-scored, from ``k * 4`` and ``k * 16``
candidates. Latencies are timed
side by side (``corpus.timed_rounds``: rounds over the same queries, the structures' order rotating), and
``over_ivf`` gives each structure's ratio to ``ivf``'s figures from the same run.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
from pathlib import Path

import numpy as np

from corpus import CACHE_ROOT, emit, machine, timed_rounds
from tree_ann import exact_top, synthetic_vectors

LATENCY_QUERIES = 200


def structures(lists: int, pq: int) -> dict[str, tuple[str, dict]]:
    """Each measured structure: the ``ann`` it is built with and the search options it is searched with."""
    ivf_pq, ivf_sq8 = f"faiss:IVF{lists},PQ{pq}", f"faiss:IVF{lists},SQ8"
    return {"exact": ("exact", {}), "ivf": ("ivf", {}),
            "ivf-pq": (ivf_pq, {"rescore": 1}), "ivf-pq-rescore4": (ivf_pq, {"rescore": 4}),
            "ivf-sq8": (ivf_sq8, {"rescore": 1}), "ivf-sq8-rescore4": (ivf_sq8, {"rescore": 4}),
            "binary-rescore4": ("binary", {"rescore": 4}), "binary-rescore16": ("binary", {"rescore": 16})}


def file_bytes(index, name: str) -> int:
    return sum(f.stat().st_size for f in index.path.glob(f"seg-*/{name}"))


def main() -> None:
    from threadpoolctl import threadpool_limits

    import faiss

    from semiret import progress
    from semiret.indexes.dense import DenseIndex
    from semiret.types import Embeddings

    progress.set_enabled(False)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--centers", type=int, default=1000)
    parser.add_argument("--spread", type=float, default=1.0)
    parser.add_argument("--queries", type=int, default=1000, help="queries whose recall@10 is measured")
    parser.add_argument("--lists", type=int, default=256, help="IVF lists of ivf and of the factory strings")
    parser.add_argument("--pq", type=int, default=48, help="PQ sub-quantizers (8 bits each: bytes a vector)")
    parser.add_argument("--nprobe", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=4, help="rotated rounds timing single queries")
    parser.add_argument("--workdir", type=Path, default=CACHE_ROOT / "dense-compression")
    args = parser.parse_args()

    result = {"benchmark": "dense_compression", "documents": args.docs, "dim": args.dim, "centers": args.centers,
              "spread": args.spread, "queries": args.queries, "latency_queries": LATENCY_QUERIES, "k": 10,
              "nprobe": args.nprobe, "machine_before": machine()}
    documents, queries = synthetic_vectors(args.docs, args.dim, args.centers, args.queries, args.spread)
    truth = exact_top(documents, queries, 10)
    ids = [str(i) for i in range(len(documents))]
    shutil.rmtree(args.workdir, ignore_errors=True)
    built, build_s, figures, searches = {}, {}, {}, {}
    for name, (ann, options) in structures(args.lists, args.pq).items():
        if ann not in built:
            started = time.perf_counter()
            built[ann] = DenseIndex.build(args.workdir / name, "dense", [Embeddings(ids, documents)], dim=args.dim,
                                          analyzer={}, ann=ann, nlist=args.lists, store_texts=False)
            build_s[ann] = time.perf_counter() - started
        index = built[ann]
        found = index.search(queries, k=10, nprobe=args.nprobe, **options).ids
        recall = float(np.mean([len({int(i) for i in f} & set(t.tolist())) / 10 for f, t in zip(found, truth)]))
        figures[name] = {"ann": ann, **options, "build_s": round(build_s[ann], 1), "recall@10": round(recall, 4),
                         "ann_faiss_bytes": file_bytes(index, "ann.faiss"),
                         "vectors_npy_bytes": file_bytes(index, "vectors.npy"),
                         "memory_bytes": index.memory_bytes()}
        searches[name] = lambda query, index=index, options=options: index.search(
            query[None, :], k=10, nprobe=args.nprobe, **options)
    faiss.omp_set_num_threads(1)
    with threadpool_limits(1):
        times = timed_rounds(searches, list(queries[:LATENCY_QUERIES]), rounds=args.rounds)
    for name, measured in times.items():
        figures[name]["latency_ms_median"] = round(statistics.median(measured), 4)
        figures[name]["latency_ms_p95"] = round(float(np.percentile(measured, 95)), 4)
    shutil.rmtree(args.workdir, ignore_errors=True)
    ivf = figures["ivf"]
    result["structures"] = figures
    result["over_ivf"] = {name: {"latency": round(f["latency_ms_median"] / ivf["latency_ms_median"], 3),
                                 "ann_faiss_bytes": round(f["ann_faiss_bytes"] / ivf["ann_faiss_bytes"], 4),
                                 "memory_bytes": round(f["memory_bytes"] / ivf["memory_bytes"], 4),
                                 "recall@10_difference": round(f["recall@10"] - ivf["recall@10"], 4)}
                          for name, f in figures.items() if name != "ivf"}
    result["machine_after"] = machine()
    emit(result)


if __name__ == "__main__":
    main()
