"""``bm25+nail`` (BM25's top 100 re-ranked by NAIL's score-matrix lookups) against BM25 alone on the same index:
single-query latency in one run, and the ratio of the two medians (the target: <= 1.5, single thread).

``python bench/nail_latency.py [--data scifact] [--model SAVED_NAIL_MODEL] [--index DIR] [--rounds 4]``
prints one JSON object. Without ``--model`` a quick model is made: a random 2-layer, 32-wide BERT with
splade-tiny's tokenizer under NAIL's decoder (the paper's decoder-only scores), saved beside the index; latency
does not depend on what the scores are, only on the vocabulary (30,522 tokens, as splade-tiny's) and the corpus.
The score-matrix index is built once (``--index``, default ``/tmp/semiret-bench/nail-<corpus>-<model>``) and
opened as ``bm25`` (the same postings), ``bm25+nail`` (also with ``--bm25-weight``) and ``nail-exh``; quality
is reported too (meaningless for the quick model). ``--sparse`` also builds ``nail-sparse`` (each document's top
``--sparse-top-k`` tokens in an impact index, beside the score matrix's; use a trained ``--model``: a random
model's top tokens are not a trained one's) and times it in the same rounds. Latency: each query alone (``search(text, k=10)``), the
systems timed in rotating rounds (``corpus.timed_rounds``); ``bm25@100`` is BM25 read 100 deep, the first
stage's own cost.

FLOPs beside latency (the paper's Table 1, 16-token queries and 128-token documents, counted by torch's
``FlopCounterMode`` on one forward pass rather than estimated): NAIL's document model once per document at
indexing; at query time one addition per query token and candidate (the lookups are memory reads), with the
SciFact queries' mean number of distinct tokens; for comparison the packaged MiniLM (``--no-minilm`` skips it)
as a cross-encoder would run per pair (query and document together) and as a query encoder runs per query.
"""

from __future__ import annotations

import statistics
from functools import partial
from pathlib import Path

from corpus import CACHE_ROOT, emit, latency_arguments, latency_queries, machine, model_key, timed_rounds

TARGET = 1.5


def quick_model(directory: Path) -> Path:
    """A random tiny NAIL model with splade-tiny's tokenizer (the vocabulary is what latency depends on)."""
    import torch
    from transformers import BertConfig, BertForMaskedLM

    from semiret.models.loading import load_tokenizer
    from semiret.models.nail import NailConfig, NailModel

    if (directory / "nail.json").is_file():
        return directory
    torch.manual_seed(0)
    lm = BertForMaskedLM(BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                    intermediate_size=64, max_position_embeddings=512))
    model = NailModel(lm, load_tokenizer("splade-tiny"), NailConfig(residual=False), "quick")
    return model.save(directory, training={"quick": "random weights, for latency only"})


def forward_flops(module, length: int) -> int:
    """FLOPs of ``module(input_ids, attention_mask)`` on one text of ``length`` tokens (values do not matter)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    ids = torch.full((1, length), 1000, dtype=torch.long)
    with FlopCounterMode(display=False) as counter:  # (under no_grad its module tracker fails)
        module(ids, torch.ones_like(ids))
    return int(counter.get_total_flops())


def flops(model: str, query_tokens: float, n_docs: int, minilm: bool) -> dict:
    """Per (query, document) pair and per query, at the paper's lengths (16 and 128 tokens)."""
    from semiret.models.nail import NailModel

    per_pair = round(query_tokens, 1)  # one addition per query token
    table = {"nail_document_model_per_document_at_indexing": forward_flops(NailModel.load(model), 128),
             "bm25+nail_per_pair": per_pair, "bm25+nail_per_query": round(100 * per_pair),
             "nail-exh_per_query": round(n_docs * per_pair), "mean_distinct_query_tokens": per_pair}
    if minilm:
        from semiret.models.encoders import load_encoder

        encoder = load_encoder("minilm", "dense")
        table["minilm_cross_encoder_per_pair"] = forward_flops(encoder, 16 + 128)
        table["minilm_query_encoder_per_query"] = forward_flops(encoder, 16)
    return table


def main() -> None:
    from semiret.evaluation.metrics import parse_measures, score_run
    from semiret.search import open_retriever
    from semiret.search.nail import BM25NailRetriever

    parser = latency_arguments(__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="a saved NAIL model (default: a quick random one)")
    parser.add_argument("--index", type=Path, default=None, help="reuse (or build) the score-matrix index here")
    parser.add_argument("--bm25-weight", type=float, default=None, help="also time bm25+nail with this weight")
    parser.add_argument("--no-minilm", dest="minilm", action="store_false", help="skip MiniLM's FLOPs")
    parser.add_argument("--sparse", action="store_true", help="also time nail-sparse (its own index, built once)")
    parser.add_argument("--sparse-top-k", type=int, default=None, help="nail-sparse's tokens per document "
                        "(default: the retriever's, 2,000)")
    args = parser.parse_args()
    collection, qrels, query_ids, texts = latency_queries(args.data, args.split)
    if args.model:
        from semiret.models.checkpoints import NAIL

        model = str(NAIL.read(args.model)[0])  # a saved model's directory, or the packaged nail-scifact's
    else:
        model = str(quick_model(CACHE_ROOT / "nail-quick-model"))
    index = args.index or CACHE_ROOT / f"nail-{collection.name}-{model_key(model) if args.model else 'quick'}"
    if not (index / "meta.json").is_file():
        BM25NailRetriever.build(collection.corpus(), index, overwrite=True, model=model)
    systems = {"bm25": open_retriever(index, "bm25"), "bm25+nail": open_retriever(index, "bm25+nail"),
               "nail-exh": open_retriever(index, "nail-exh")}
    if args.sparse:
        from semiret.search.nail import NailSparseRetriever

        top_k = {"top_k": args.sparse_top_k} if args.sparse_top_k else {}
        sparse = index.with_name(index.name + f"-sparse{args.sparse_top_k or ''}")
        if not (sparse / "meta.json").is_file():
            NailSparseRetriever.build(collection.corpus(), sparse, overwrite=True, model=model, **top_k)
        systems["nail-sparse"] = open_retriever(sparse)
    if args.bm25_weight is not None:
        systems[f"bm25+nail(bm25_weight={args.bm25_weight})"] = open_retriever(index, "bm25+nail",
                                                                                bm25_weight=args.bm25_weight)
    result = {"benchmark": "nail_latency", "machine": machine(), "data": collection.name, "model": model,
              "index": str(index), "queries": len(texts), "rounds": args.rounds, "systems": {}}
    timed = {name: partial(system.search, k=10) for name, system in systems.items()}
    timed["bm25@100"] = partial(systems["bm25"].search, k=100)
    times = timed_rounds(timed, texts, rounds=args.rounds)
    for name in timed:
        entry = {"latency_ms_median": round(statistics.median(times[name]), 4),
                 "latency_ms_mean": round(statistics.fmean(times[name]), 4),
                 "latency_ms_p95": round(sorted(times[name])[int(0.95 * (len(times[name]) - 1))], 4)}
        if name in systems:
            entry = {**score_run(systems[name].search(texts, k=100).as_run(query_ids), qrels,
                                 parse_measures(None)), **entry}
        result["systems"][name] = entry
    bm25 = result["systems"]["bm25"]["latency_ms_median"]
    result["ratio_to_bm25_median"] = {name: round(entry["latency_ms_median"] / bm25, 3)
                                      for name, entry in result["systems"].items() if name != "bm25"}
    result["target"] = f"bm25+nail median latency <= {TARGET} x bm25's (k = 10, one thread, same run)"
    result["target_met"] = result["ratio_to_bm25_median"]["bm25+nail"] <= TARGET
    from semiret.text.wordpiece import WordPieceVocabulary

    vocabulary = WordPieceVocabulary(model)  # the query side's tokenizer
    query_tokens = statistics.fmean(len(set(vocabulary.encode(text))) for text in texts)
    result["flops"] = flops(model, query_tokens, systems["bm25"].index.n_docs, args.minilm)
    emit(result)


if __name__ == "__main__":
    main()
