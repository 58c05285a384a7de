"""SiDR beta search against BM25 on the same corpus: bag-of-tokens index build time and size,
and single-thread query latency (query encoding and search timed separately).

``python bench/sidr_beta.py [--docs N] [--quick] [--model sidr-scifact] [--keep]`` prints one JSON object.

Both indexes are built by semiret from the same texts (``store_texts=False``). BM25 queries are the
corpus's query texts; beta queries are the same texts encoded by the SiDR query encoder (top-768
token weights); ``beta64`` keeps each query's 64 heaviest terms (``--query-top-k 64``). Searches run
with the default dynamic pruning; ``beta_exhaustive`` is beta search with ``prune=False`` (same results).
``ratio_*`` = SiDR / BM25 (latency: lower is better for SiDR below 1).
"""

from __future__ import annotations

import shutil
import statistics
import time

import numpy as np
from corpus import bench_corpora, common_arguments, emit, load_documents, load_queries, machine

N_LATENCY_QUERIES = 300


def single_query_latencies_ms(index, queries, prune=None) -> list[float]:
    out = []
    for query in queries:
        start = time.perf_counter()
        index.search([query], k=10, prune=prune)
        out.append((time.perf_counter() - start) * 1000)
    return out


def heaviest(queries, n: int):
    from semiret.types import SparseQuery

    out = []
    for query in queries:
        weights = np.asarray(query.weights)
        keep = np.argsort(-weights, kind="stable")[:n]
        out.append(SparseQuery(np.asarray(query.terms)[keep], weights[keep]))
    return out


def run_corpus(name, directory, split, workdir, model: str, keep: bool) -> dict:
    from semiret.search import BagOfTokensRetriever, BM25Retriever
    from semiret.models.sidr import SiDRModel

    docs = load_documents(directory)
    texts = load_queries(directory, split)[:N_LATENCY_QUERIES]
    result = {"corpus": name, "documents": len(docs), "queries": len(texts)}
    searchers = {}
    for label, cls in (("bm25", BM25Retriever), ("bot", BagOfTokensRetriever)):
        path = workdir / f"sidr-beta-{name}-{label}"
        start = time.perf_counter()
        searchers[label] = cls.build(docs, path, store_texts=False, overwrite=True)
        result[f"{label}_build_s"] = round(time.perf_counter() - start, 2)
        result[f"{label}_size_mb"] = round(searchers[label].index.size_on_disk() / 2**20, 1)
    del docs
    encoder = SiDRModel.load(model).query_encoder
    start = time.perf_counter()
    beta_queries = encoder.encode_query(texts, batch_size=32).to_queries()
    result["beta_query_encoding_ms_per_query"] = round((time.perf_counter() - start) * 1000 / len(texts), 3)
    bm25_queries = searchers["bm25"].encode_queries(texts)
    bot = searchers["bot"].index
    for label, index, queries, prune in (("bm25", searchers["bm25"].index, bm25_queries, None),
                                         ("beta", bot, beta_queries, None),
                                         ("beta_exhaustive", bot, beta_queries, False),
                                         ("beta64", bot, heaviest(beta_queries, 64), None)):
        index.search(queries[:5], k=10)  # warm-up (numba, page cache)
        latencies = single_query_latencies_ms(index, queries, prune)
        result[f"{label}_search_ms_median"] = round(statistics.median(latencies), 3)
        result[f"{label}_search_ms_mean"] = round(statistics.fmean(latencies), 3)
    result["ratio_search_latency_median"] = round(result["beta_search_ms_median"] / result["bm25_search_ms_median"], 2)
    result["ratio_beta64_search_latency_median"] = round(
        result["beta64_search_ms_median"] / result["bm25_search_ms_median"], 2)
    result["ratio_build_time"] = round(result["bot_build_s"] / result["bm25_build_s"], 2)
    result["ratio_index_size"] = round(result["bot_size_mb"] / result["bm25_size_mb"], 2)
    for label in ("bm25", "bot"):
        if not keep:
            shutil.rmtree(workdir / f"sidr-beta-{name}-{label}", ignore_errors=True)
    return result


def main() -> None:
    parser = common_arguments(__doc__.splitlines()[0])
    parser.add_argument("--model", default="sidr-scifact", help="SiDR model (saved directory or packaged name)")
    parser.add_argument("--keep", action="store_true", help="keep the indexes")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    emit({"benchmark": "sidr_beta", "machine": machine(),
          "results": [run_corpus(n, d, s, args.workdir, args.model, args.keep) for n, d, s in bench_corpora(args)]})


if __name__ == "__main__":
    main()
