"""Size, memory, FLOPS, latency and quality of every learned index type on SciFact, from one encoding.

``python bench/index_sizes.py [--top-k 64] [--quick]`` prints one JSON object (``--quick``: SciFact's first
documents only, a smoke run whose quality figures are not the collection's).

SciFact's documents and test queries are encoded once with SPLADE-tiny and MiniLM; each index is
then built from those vectors (``store_texts=False``, so sizes are the search structures alone):
``impact`` float32 and 8-bit, each also pruned to the ``--top-k`` heaviest terms per document, and
dense ``exact``, ``flat``, ``ivf``, ``hnsw``. Per index: ``size_mb`` on disk, ``resident_mb`` (what a
search keeps in memory: the memory-mapped postings, or the faiss structure / memory-mapped vectors),
nDCG@10, the median single-query search latency (query encoding excluded) and, for sparse indexes,
FLOPS (expected multiply-adds per query-document pair, with SPLADE queries; ``inference-free`` rows
use IDF-weighted query tokens on the same documents).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
from pathlib import Path

import numpy as np

from corpus import CACHE_ROOT, QUICK_SCIFACT_DOCS, SCIFACT, emit, load_documents, machine

LATENCY_QUERIES = 200


def resident_bytes(index) -> int:
    from semiret.indexes.dense import DenseIndex

    if isinstance(index, DenseIndex):
        return index.memory_bytes()
    return sum(f.stat().st_size for f in index.path.rglob("*.npy") if not f.name.startswith("texts."))


def measure(index, queries, query_ids, qrels, search) -> dict:
    from semiret.evaluation.metrics import score_run

    hits = search(queries, 100)
    latencies = []
    for i in range(min(LATENCY_QUERIES, len(query_ids))):
        start = time.perf_counter()
        search(queries[i: i + 1], 10)
        latencies.append((time.perf_counter() - start) * 1000)
    return {"size_mb": round(index.size_on_disk() / 2**20, 2), "resident_mb": round(resident_bytes(index) / 2**20, 2),
            "nDCG@10": round(score_run(hits.as_run(query_ids), qrels)["nDCG@10"], 4),
            "latency_ms_median": round(statistics.median(latencies), 3)}


def main() -> None:
    from semiret import progress
    from semiret.data.collection import Collection
    from semiret.indexes.dense import DenseIndex
    from semiret.indexes.inverted import InvertedIndex
    from semiret.indexes.sparsity import sparsity_report
    from semiret.types import Embeddings, SparseQuery
    from semiret.models.dense import DenseEncoder
    from semiret.models.splade import SpladeEncoder
    from semiret.search.neural import encoder_config
    from semiret.text.wordpiece import WordPieceVocabulary

    progress.set_enabled(False)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top-k", type=int, default=64, help="terms kept per document in the pruned variants")
    parser.add_argument("--workdir", type=Path, default=CACHE_ROOT / "index-sizes")
    parser.add_argument("--quick", action="store_true",
                        help=f"SciFact's first {QUICK_SCIFACT_DOCS} documents only (a smoke run)")
    args = parser.parse_args()

    before = machine()
    collection = Collection(SCIFACT)
    documents = load_documents(SCIFACT, QUICK_SCIFACT_DOCS if args.quick else None)
    ids, texts = [d.id for d in documents], [d.full_text for d in documents]
    queries = collection.queries("test")
    qrels = collection.qrels("test")
    query_ids = [q for q in queries if q in qrels]
    query_texts = [queries[q] for q in query_ids]
    shutil.rmtree(args.workdir, ignore_errors=True)

    splade = SpladeEncoder.from_pretrained("splade-tiny")
    start = time.perf_counter()
    doc_vectors = splade.encode_document(texts, show_progress=False)
    splade_encode_s = time.perf_counter() - start
    splade_queries = splade.encode_query(query_texts).to_queries()
    vocabulary = WordPieceVocabulary("splade-tiny")
    rows = {}

    for pruned in (False, True):
        vectors = doc_vectors.prune(top_k=args.top_k) if pruned else doc_vectors
        for bits in (None, 8):
            name = f"impact-{'q8' if bits else 'f32'}" + (f"-top{args.top_k}" if pruned else "")
            start = time.perf_counter()
            index = InvertedIndex.build(args.workdir / name, "impact", [vectors.to_postings(ids)],
                                        vocab_size=splade.vocab_size, quantize_bits=bits, store_texts=False,
                                        analyzer=encoder_config("splade", "splade-tiny", splade.max_length))
            build_s = time.perf_counter() - start
            search = lambda q, k, index=index: index.search(q, k=k)  # noqa: E731
            rows[f"splade/{name}"] = {**measure(index, splade_queries, query_ids, qrels, search),
                                      "build_s_from_vectors": round(build_s, 2),
                                      "postings_per_doc": round(index.average_postings_per_document(), 1),
                                      "flops": round(sparsity_report(index, splade_queries)["flops"], 2)}
            if name == "impact-f32":  # the inference-free query side: distinct tokens weighted by corpus IDF
                idf = index.idf()
                idf_queries = [SparseQuery(terms, idf[terms]) for terms in
                               (np.unique(np.asarray(vocabulary.encode(t), np.int32)) for t in query_texts)]
                rows["inference-free/impact-f32 (corpus IDF)"] = {
                    **measure(index, idf_queries, query_ids, qrels, search),
                    "flops": round(sparsity_report(index, idf_queries)["flops"], 2)}

    minilm = DenseEncoder.from_pretrained("minilm")
    start = time.perf_counter()
    dense_vectors = minilm.encode_document(texts, show_progress=False)
    dense_encode_s = time.perf_counter() - start
    dense_queries = minilm.encode_query(query_texts)
    for ann in ("exact", "flat", "ivf", "hnsw"):
        start = time.perf_counter()
        index = DenseIndex.build(args.workdir / f"dense-{ann}", "dense", [Embeddings(ids, dense_vectors)],
                                 dim=minilm.dim, ann=ann, store_texts=False,
                                 analyzer=encoder_config("dense", "minilm", minilm.max_length, precision=minilm.precision))
        build_s = time.perf_counter() - start
        search = lambda q, k, index=index: index.search(q, k=k)  # noqa: E731  (nprobe 16, ef_search 128)
        rows[f"dense/{ann}"] = {**measure(index, dense_queries, query_ids, qrels, search),
                                "build_s_from_vectors": round(build_s, 2)}
    emit({"benchmark": "index_sizes", "dataset": "scifact", "documents": len(ids), "queries": len(query_ids),
               "splade_encode_s": round(splade_encode_s, 1), "minilm_encode_s": round(dense_encode_s, 1),
               "minilm_precision": minilm.precision, "indexes": rows,
               "machine_before": before, "machine_after": machine()})


if __name__ == "__main__":
    main()
