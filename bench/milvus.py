"""The Milvus backend beside semiret's own index: the same documents and queries, single-query latency.

``python bench/milvus.py [--docs N] [--quick] [--no-scifact] [--uri milvus:URI] [--dim 384] [--k 10]``
prints one JSON object.

Per corpus (SciFact, then the synthetic Zipf corpus of ``bench/corpus.py``), the same document vectors go into
semiret's own index and into a Milvus collection (default: Milvus Lite, a local file in ``--workdir``), and
queries, encoded once by semiret, are timed one at a time against each (``index.search([query], k)``: the
engines alone, the query side being the same code for both) in rounds whose order rotates
(``corpus.timed_rounds``). Systems:

- ``idf``: bag-of-tokens documents (the tokenizer alone), queries weighted by the MS MARCO IDF table (a
  Milvus collection cannot give corpus IDF);
- ``inference_free`` (SciFact only): the packaged inference-free model's document vectors (pruned at its
  threshold), queries weighted by the model's IDF table;
- ``dense``: **synthetic** unit vectors (``--dim``; seeded normal draws, normalised) for the documents and
  the queries: exact inner-product search in both (semiret ``exact``, Milvus ``FLAT``), whose cost depends
  only on the number and size of the vectors.

Reported per system: build seconds of each side, median / mean / p95 milliseconds, ``ratio_median`` (Milvus /
own), and how far the results agree: the share of queries with the same top-k scores and with the same top-k
ids (lower where documents tie at the k-th score: bag-of-tokens documents often do), the largest score
difference. semiret searches on one thread (``OPENBLAS_NUM_THREADS=1`` unless set); Milvus Lite runs as its own
process, with its own threads, reached over gRPC on a local socket.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy: single-thread search, as every latency benchmark
import statistics  # noqa: E402  (multi-threaded BLAS added ~10 ms to each 1-query matmul on the loaded machine)
import time  # noqa: E402
from functools import partial  # noqa: E402

import numpy as np  # noqa: E402
from corpus import (QUICK_SCIFACT_DOCS, bench_corpora, common_arguments, emit, load_documents, load_queries,
                    machine, timed_rounds)

BATCH_DOCS = 50_000
N_QUERIES = 200


def build_both(side_class, options, documents, path, name, backend, extra_meta) -> tuple:
    """semiret's own index and a Milvus collection of the same encoded documents, with each build's seconds."""
    from semiret import options as option_tools

    side = side_class.create(option_tools.build(side_class.Options, options))
    batches = [side.encode(documents[lo: lo + BATCH_DOCS]) for lo in range(0, len(documents), BATCH_DOCS)]
    return build_from_batches(side_class, side.index_config(), batches, path, name, backend, extra_meta)


def build_from_batches(side_class, config, batches, path, name, backend, extra_meta) -> tuple:
    start = time.perf_counter()
    ours = side_class.index_class.build(path, side_class.index_kind, batches, **config, store_texts=False,
                                        overwrite=True, extra_meta=extra_meta)
    own_seconds = time.perf_counter() - start
    start = time.perf_counter()
    theirs = backend.build(name, side_class.index_kind, batches, **config, store_texts=False, overwrite=True,
                           extra_meta=extra_meta)
    return ours, theirs, {"own_build_s": round(own_seconds, 2), "milvus_build_s": round(time.perf_counter() - start, 2)}


def compare(ours, theirs, queries: list, k: int) -> dict:
    """Latency of one query at a time on each index, and how far their top-k agree."""
    own_hits, milvus_hits = ours.search(queries, k=k), theirs.search(queries, k=k)
    same_ids = np.mean([set(a) == set(b) for a, b in zip(own_hits.ids, milvus_hits.ids)])
    same_scores = np.mean([len(a) == len(b) and np.allclose(a, b, rtol=1e-5, atol=1e-6)
                           for a, b in zip(own_hits.scores, milvus_hits.scores)])
    score_gap = max((float(np.max(np.abs(np.subtract(a, b)))) for a, b in zip(own_hits.scores, milvus_hits.scores)
                     if len(a) == len(b) and a), default=0.0)
    items = [queries[i: i + 1] for i in range(len(queries))]
    times = timed_rounds({"own": partial(ours.search, k=k), "milvus": partial(theirs.search, k=k)}, items)
    result = {"documents": ours.n_docs, "queries": len(queries), "same_top_k_ids": round(float(same_ids), 4),
              "same_top_k_scores": round(float(same_scores), 4), "max_score_difference": score_gap}
    for label, values in times.items():
        values = sorted(values)
        result[f"{label}_ms_median"] = round(statistics.median(values), 4)
        result[f"{label}_ms_mean"] = round(statistics.fmean(values), 4)
        result[f"{label}_ms_p95"] = round(values[int(0.95 * (len(values) - 1))], 4)
    result["ratio_median"] = round(result["milvus_ms_median"] / result["own_ms_median"], 2)
    return result


def unit_vectors(n: int, dim: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((n, dim), dtype=np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def run_corpus(corpus, directory, split, backend, args) -> dict:
    from semiret.search.lexical import IDFOptions, IDFQueries, TokenSets
    from semiret.search.neural import DenseDocuments, InferenceFreeDocuments
    from semiret.types import Embeddings

    neural = corpus == "scifact"  # encoded by the inference-free model: a quick run reads a few hundred
    documents = load_documents(directory, QUICK_SCIFACT_DOCS if neural and args.quick else None)
    texts = load_queries(directory, split)[: args.n_queries]
    results = {"corpus": corpus, "documents": len(documents)}
    prefix = f"bench_{corpus.replace('-', '_')}"
    collections = []

    systems = [("idf", TokenSets, IDFOptions(idf="msmarco"))]
    if neural:
        systems.append(("inference_free", InferenceFreeDocuments, IDFOptions()))  # the model's own IDF table
    for label, side_class, query_options in systems:
        ours, theirs, figures = build_both(side_class, {}, documents, args.workdir / f"{prefix}_{label}",
                                           f"{prefix}_{label}", backend, {"retriever": label.replace("_", "-")})
        collections.append(theirs.name)
        queries = IDFQueries.open(ours, query_options, None).encode_queries(texts)
        results[label] = {**figures, **compare(ours, theirs, queries, args.k)}

    config = {"dim": args.dim, "analyzer": {"type": "synthetic", "family": "dense"}, "ann": "exact"}
    vectors = unit_vectors(len(documents), args.dim, seed=0)
    ids = [d.id for d in documents]
    del documents
    batches = [Embeddings(ids[lo: lo + BATCH_DOCS], vectors[lo: lo + BATCH_DOCS])
               for lo in range(0, len(ids), BATCH_DOCS)]
    ours, theirs, figures = build_from_batches(DenseDocuments, config, batches, args.workdir / f"{prefix}_dense",
                                               f"{prefix}_dense", backend, {"retriever": "dense"})
    collections.append(theirs.name)
    results["dense"] = {**figures, "vectors": f"synthetic unit vectors, {args.dim} dimensions",
                        **compare(ours, theirs, unit_vectors(len(texts), args.dim, seed=1), args.k)}
    if not args.keep:
        for name in collections:
            backend.drop(name)
    return results


def main() -> None:
    parser = common_arguments(__doc__.splitlines()[0])
    parser.add_argument("--uri", default=None, help="milvus:URI (default: a Milvus Lite file in --workdir)")
    parser.add_argument("--dim", type=int, default=384, help="dimension of the synthetic dense vectors")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--n-queries", type=int, default=N_QUERIES)
    parser.add_argument("--keep", action="store_true", help="keep the indexes and collections")
    args = parser.parse_args()
    from semiret.indexes.milvus import MilvusBackend

    args.workdir.mkdir(parents=True, exist_ok=True)
    backend = MilvusBackend.parse(args.uri or f"milvus:{args.workdir / 'milvus.db'}")
    import pymilvus

    emit({"benchmark": "milvus", "machine": machine(), "milvus_uri": backend.uri, "pymilvus": pymilvus.__version__,
          "milvus_lite": _milvus_lite_version(), "k": args.k,
          "results": [run_corpus(name, directory, split, backend, args)
                      for name, directory, split in bench_corpora(args)]})


def _milvus_lite_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("milvus-lite")
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    main()
