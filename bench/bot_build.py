"""Bag-of-tokens index build throughput (docs/s) against the bare tokenizer on the same texts.

``python bench/bot_build.py [--docs N] [--quick]`` prints one JSON object.

semiret: ``BagOfTokensRetriever.build(docs, path, store_texts=False)`` (bert-base-uncased WordPiece:
tokenize, count, transpose to term-major postings, write the index to disk). The peer is the
Hugging Face fast tokenizer alone, with the same ``tokenizer.json`` and settings (no padding, no
truncation, ``TOKENIZERS_PARALLELISM=true`` for both), over the same texts in the same batches
(semiret's build batch size): ``encode_batch_fast(texts, add_special_tokens=False)`` then
``[e.ids for e in encodings]`` (ids into Python: ``ids`` peer, the one ``ratio`` is against) and
``encode_batch_fast`` alone (``rust_only``). ``ratio = semiret docs/s / ids-peer docs/s``, target >= 0.8.
The tokenizer and numba kernels are warmed up first; SciFact figures are the best of a few runs.
"""

from __future__ import annotations

import os

os.environ["TOKENIZERS_PARALLELISM"] = "true"  # what semiret sets by default, for both sides

import shutil
import time

from corpus import bench_corpora, common_arguments, emit, load_documents, machine

TARGET = 0.8


def run_corpus(name: str, directory, workdir, repeat: int) -> dict:
    from tokenizers import Tokenizer

    from semiret.search import BagOfTokensRetriever
    from semiret.search.lexical import TokenSets
    from semiret.text.wordpiece import resolve_tokenizer_file

    docs = load_documents(directory)
    texts = [d.full_text for d in docs]
    tokenizer = Tokenizer.from_file(str(resolve_tokenizer_file("bert-base-uncased")))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    BATCH_SIZE = TokenSets.batch_size
    batches = [texts[i: i + BATCH_SIZE] for i in range(0, len(texts), BATCH_SIZE)]
    index_path = workdir / f"{name}-bot"

    def rust_only():
        for batch in batches:
            tokenizer.encode_batch_fast(batch, add_special_tokens=False)

    def ids_peer():
        n_tokens = 0
        for batch in batches:
            ids = [e.ids for e in tokenizer.encode_batch_fast(batch, add_special_tokens=False)]
            n_tokens += sum(map(len, ids))
        return n_tokens

    def semiret_build():
        BagOfTokensRetriever.build(docs, index_path, store_texts=False, overwrite=True)

    # warm-up: numba kernels (compiled or loaded from cache) and the tokenizer's thread pool
    BagOfTokensRetriever.build(docs[:500], workdir / f"{name}-warmup", store_texts=False, overwrite=True)
    shutil.rmtree(workdir / f"{name}-warmup", ignore_errors=True)
    tokenizer.encode_batch_fast(texts[:500], add_special_tokens=False)

    times: dict[str, float] = {}
    n_tokens = 0
    for _ in range(repeat):  # interleaved, so a burst of load elsewhere hits all alike
        for label, fn in (("semiret", semiret_build), ("ids", ids_peer), ("rust", rust_only)):
            t = time.perf_counter()
            out = fn()
            times[label] = min(times.get(label, float("inf")), time.perf_counter() - t)
            if label == "ids":
                n_tokens = out
    index_mb = sum(f.stat().st_size for f in index_path.rglob("*") if f.is_file()) / 2**20
    shutil.rmtree(index_path, ignore_errors=True)
    n = len(docs)
    rate = {label: round(n / seconds, 1) for label, seconds in times.items()}
    return {
        "documents": n, "tokens": n_tokens, "batch_size": BATCH_SIZE, "runs": repeat,
        "seconds": {label: round(s, 3) for label, s in times.items()},
        "semiret_docs_per_s": rate["semiret"],
        "tokenizer_ids_docs_per_s": rate["ids"],
        "tokenizer_rust_only_docs_per_s": rate["rust"],
        "ratio": round(times["ids"] / times["semiret"], 3),
        "ratio_vs_rust_only": round(times["rust"] / times["semiret"], 3),
        "index_mb": round(index_mb, 1),
    }


def main() -> None:
    parser = common_arguments(__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=None,
                        help="runs per figure (default: 3 for corpora under 200k documents, else 1)")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    corpora = {}
    for name, directory, _ in bench_corpora(args):
        n_docs = sum(1 for _ in open(directory / "corpus.jsonl", "rb"))
        repeat = args.repeat or (1 if n_docs > 200_000 else (2 if args.quick else 3))
        corpora[name] = run_corpus(name, directory, args.workdir, repeat)
    ratio = {name: c["ratio"] for name, c in corpora.items()}
    emit({
        "benchmark": "bot_build",
        "description": "bag-of-tokens index build throughput (docs/s) vs the HF fast tokenizer producing ids into Python",
        "ratio": ratio,
        "target": f"ratio >= {TARGET} on every corpus",
        "target_met": all(r >= TARGET for r in ratio.values()),
        "corpora": corpora,
        "machine": machine(),
    })


if __name__ == "__main__":
    main()
