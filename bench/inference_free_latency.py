"""Inference-free search against BM25 on the same corpus: single-thread query latency, measured in one run.

``python bench/inference_free_latency.py [--docs N] [--quick] [--model inference-free-scifact] [--sample S]``
prints one JSON object (``--quick``: SciFact's first 500 documents, which the model encodes in seconds, and the small
synthetic corpus: a smoke run).

Per corpus, these systems are timed one query at a time (``retriever.search([text], k=K)``, ``--k``,
default 10: query analysis or tokenization plus IDF lookup, search, id decoding), in rounds over all
queries whose system order rotates, so load changes hit all of them alike (``corpus.timed_rounds``):

- ``bm25``: the BM25 retriever (words, Snowball, Lucene IDF, English stopwords dropped);
- ``if``: the inference-free retriever as it indexes and searches by default: exhaustive search over the
  model's document vectors without the weights below the threshold recorded with the model (static
  pruning, ``--threshold`` overrides it), query tokens with IDF below ``--min-idf`` dropped (the
  retriever's default, 1.0: query-side stopwords);
- ``if_unpruned``: the same over every document weight (no threshold);
- ``if_all``: the same keeping every query token (``min_idf=0``, the paper's query side as written);
- ``if_min<M>``: the same with a higher threshold, for each ``--also-min-idf`` M (default 3: the
  latency/quality trade-off of query-side pruning, measured beside the others);
- ``if2``: ``if`` with two-phase search (``--prune-ratio``, ``--expansion``), which searches a query exactly
  where deferring its light tokens would spare fewer postings than the window costs;
- ``if2_always``: the same without that fallback (every query in two phases).

SciFact documents are encoded by the model (once: both indexes come from the same vectors). For the
synthetic Zipf corpus, encoding every document
with the model is too slow for this machine, so document vectors are a **proxy**: ``--sample`` documents
of that corpus are encoded by the model, and document i receives the vector of sample document
``i mod S`` with every weight multiplied by an independent log-normal factor (sigma 0.1). Posting-list
lengths of each term are therefore ``N / S`` times those of the encoded sample (same per-document
expansion, same term distribution: Zipf documents are i.i.d.), which is what search cost depends on.
``ratio_*`` = inference-free / BM25 (below 1: inference-free is faster). ``*_postings_visited_mean`` is the
search kernel's work per query (postings read plus documents probed by dynamic pruning).
"""

from __future__ import annotations

import shutil
import statistics
import time
from dataclasses import replace
from functools import partial

import numpy as np
from corpus import (QUICK_SCIFACT_DOCS, bench_corpora, common_arguments, emit, load_documents, load_queries, machine,
                    timed_rounds)

from semiret.search.lexical import DEFAULT_MIN_IDF

N_LATENCY_QUERIES = 300
PROXY_SIGMA = 0.1


def encode_sample(model: str, texts: list[str]):
    from semiret.models.checkpoints import resolve_inference_free
    from semiret.models.encoders import load_encoder

    path = resolve_inference_free(model)
    encoder = load_encoder(path, "splade")
    return encoder, encoder.encode_document(texts, show_progress=False), path


def prune_postings(postings, threshold: float):
    """``postings`` without the weights below ``threshold`` (what the retriever's static pruning drops)."""
    from semiret.models.sparse import SparseVectors

    vectors = SparseVectors(postings.offsets, postings.terms, postings.values, 0).prune(threshold=threshold)
    return replace(postings, offsets=vectors.offsets, terms=vectors.terms, values=vectors.weights,
                   lengths=vectors.nnz().astype(np.int32))


def tiled_postings(vectors, n_docs: int, seed: int = 0):
    """Document i gets sample row ``i mod S`` with weights times log-normal noise (see the module doc)."""
    from semiret.types import Postings

    s = len(vectors)
    nnz = vectors.nnz()
    rows = np.arange(n_docs) % s
    lengths = nnz[rows]
    offsets = np.zeros(n_docs + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    starts = vectors.offsets[rows]
    gather = np.arange(int(offsets[-1]), dtype=np.int64) + np.repeat(starts - offsets[:-1], lengths)
    rng = np.random.default_rng(seed)
    values = vectors.weights[gather] * rng.lognormal(0.0, PROXY_SIGMA, len(gather)).astype(np.float32)
    return Postings(ids=[f"d{i}" for i in range(n_docs)], offsets=offsets, terms=vectors.terms[gather],
                    values=values, lengths=lengths.astype(np.int32), documents=None)


def run_corpus(name, directory, split, workdir, args) -> dict:
    from semiret.indexes.inverted import InvertedIndex
    from semiret.models.checkpoints import inference_free_document_threshold
    from semiret.search.neural import InferenceFreeRetriever, encoder_config
    from semiret.search import BM25Retriever

    docs = load_documents(directory, QUICK_SCIFACT_DOCS if args.quick and name == "scifact" else None)
    texts = load_queries(directory, split)[:N_LATENCY_QUERIES]
    result = {"corpus": name, "documents": len(docs), "queries": len(texts)}
    bm25_path = workdir / f"if-lat-{name}-bm25"
    if_path, unpruned_path = workdir / f"if-lat-{name}-if", workdir / f"if-lat-{name}-if-unpruned"
    start = time.perf_counter()
    bm25 = BM25Retriever.build(docs, bm25_path, store_texts=False, overwrite=True)
    result["bm25_build_s"] = round(time.perf_counter() - start, 2)
    start = time.perf_counter()
    if name == "scifact":
        encoder, vectors, path = encode_sample(args.model, [d.full_text for d in docs])
        postings = vectors.to_postings([d.id for d in docs])
        result["if_vectors"] = "encoded by the model"
    else:
        sample = docs[: args.sample]
        encoder, vectors, path = encode_sample(args.model, [d.full_text for d in sample])
        postings = tiled_postings(vectors, len(docs))
        result["if_vectors"] = (f"proxy: {len(sample)} documents encoded by the model, tiled to {len(docs)} "
                                f"with log-normal({PROXY_SIGMA}) weight noise")
        result["if_sample_avg_nnz"] = round(float(vectors.nnz().mean()), 1)
    result["if_encode_s"] = round(time.perf_counter() - start, 2)
    threshold = inference_free_document_threshold(path) if args.threshold is None else args.threshold
    result["if_threshold"] = threshold
    for target, kept in ((unpruned_path, None), (if_path, threshold or None)):
        analyzer = encoder_config("splade", path, encoder.max_length, encoder, top_k=None, threshold=kept)
        InvertedIndex.build(target, "impact", [postings if kept is None else prune_postings(postings, kept)],
                            vocab_size=encoder.vocab_size, analyzer=analyzer, store_texts=False, overwrite=True,
                            extra_meta={"retriever": "inference-free"})
    del docs, postings
    searchers = {"bm25": bm25, "if": InferenceFreeRetriever.open(if_path, min_idf=args.min_idf),
                 "if_unpruned": InferenceFreeRetriever.open(unpruned_path, min_idf=args.min_idf),
                 "if_all": InferenceFreeRetriever.open(if_path, min_idf=0.0),
                 **{f"if_min{m:g}": InferenceFreeRetriever.open(if_path, min_idf=m) for m in args.also_min_idf},
                 "if2": InferenceFreeRetriever.open(if_path, two_phase=f"{args.prune_ratio},{args.expansion}",
                                                    min_idf=args.min_idf),
                 "if2_always": InferenceFreeRetriever.open(
                     if_path, two_phase=f"{args.prune_ratio},{args.expansion},always", min_idf=args.min_idf)}
    result["if_avg_nnz_per_doc"] = round(searchers["if"].index.average_postings_per_document(), 1)
    result["if_unpruned_avg_nnz_per_doc"] = round(searchers["if_unpruned"].index.average_postings_per_document(), 1)
    times = timed_rounds({label: partial(searcher.search, k=args.k) for label, searcher in searchers.items()},
                         [[text] for text in texts])
    for label, values in times.items():
        result[f"{label}_ms_median"] = round(statistics.median(values), 4)
        result[f"{label}_ms_mean"] = round(statistics.fmean(values), 4)
        result[f"{label}_ms_p95"] = round(sorted(values)[int(0.95 * (len(values) - 1))], 4)
    for label, searcher in searchers.items():  # the work behind the times: postings read plus documents probed
        result[f"{label}_postings_visited_mean"] = round(float(np.mean(searcher.search(texts, k=args.k).postings_visited)), 1)
    for label in [name for name in searchers if name != "bm25"]:
        result[f"ratio_{label}_median"] = round(result[f"{label}_ms_median"] / result["bm25_ms_median"], 3)
        result[f"ratio_{label}_mean"] = round(result[f"{label}_ms_mean"] / result["bm25_ms_mean"], 3)
    exact = [ids[:10] for ids in searchers["if_unpruned"].search(texts, k=args.k).ids]
    for label in [name for name in searchers if name not in ("bm25", "if_unpruned")]:  # top 10 kept by each shortcut
        approx = [ids[:10] for ids in searchers[label].search(texts, k=args.k).ids]
        result[f"{label}_top10_overlap"] = round(float(np.mean([len(set(a) & set(b)) / max(len(a), 1)
                                                               for a, b in zip(exact, approx)])), 4)
    if not args.keep:
        for path in (bm25_path, if_path, unpruned_path):
            shutil.rmtree(path, ignore_errors=True)
    return result


def main() -> None:
    parser = common_arguments(__doc__.splitlines()[0])
    parser.add_argument("--model", default="inference-free-scifact", help="inference-free model (directory or name)")
    parser.add_argument("--sample", type=int, default=5000, help="documents encoded for the synthetic-corpus proxy")
    parser.add_argument("--min-idf", type=float, default=DEFAULT_MIN_IDF, help="query-side stopwords for if, if2")
    parser.add_argument("--threshold", type=float, default=None,
                        help="static pruning of document weights for if (default: the model's recorded threshold)")
    parser.add_argument("--also-min-idf", type=float, nargs="*", default=[3.0],
                        help="further min_idf thresholds timed as if_min<M>")
    parser.add_argument("--prune-ratio", type=float, default=0.4)
    parser.add_argument("--expansion", type=float, default=5.0)
    parser.add_argument("--k", type=int, default=10, help="hits per query (two-phase keeps expansion x k candidates)")
    parser.add_argument("--keep", action="store_true", help="keep the indexes")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    args.workdir.mkdir(parents=True, exist_ok=True)
    emit({"benchmark": "inference_free_latency", "machine": machine(), "model": args.model,
          "min_idf": args.min_idf, "k": args.k, "two_phase": {"prune_ratio": args.prune_ratio, "expansion": args.expansion},
          "results": [run_corpus(n, d, s, args.workdir, args) for n, d, s in bench_corpora(args)]})


if __name__ == "__main__":
    main()
