"""SPLADE document encoding of SciFact: semiret's encoder against the naive forward, same run, same results.

``python bench/encode_splade.py [--docs N] [--model splade-tiny] [--max-length 256] [--sweep]`` prints one JSON object.

The peer is the usual SPLADE forward (as in the issue and in model cards): tokenize a batch of 32
with padding, run ``AutoModelForMaskedLM``, take ``log(1 + ReLU(logits))`` of the full
[batch, length, 30522] tensor, mask padding and max-pool. semiret's ``SpladeEncoder.encode_document``
sorts texts by length, projects only unpadded positions, one vocabulary tile at a time, screens in
bfloat16 and recomputes the surviving entries in float32 (see ``semiret/models/vocabulary.py``).
Both vectors are compared entry by entry: ``max_abs_diff`` and ``same_nonzeros`` say they agree.
``--sweep`` also times semiret over thread counts and batch sizes on the first 500 documents.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from corpus import SCIFACT, emit, machine

NAIVE_BATCH = 32


def scifact_texts(limit: int | None) -> list[str]:
    from semiret.data.collection import iter_corpus

    texts = [d.full_text for d in iter_corpus(SCIFACT)]
    return texts[:limit] if limit else texts


def naive_encode(model, tokenizer, texts: list[str], max_length: int) -> np.ndarray:
    rows = []
    with torch.inference_mode():
        for start in range(0, len(texts), NAIVE_BATCH):
            batch = tokenizer(texts[start: start + NAIVE_BATCH], max_length=max_length, padding=True, truncation=True,
                              return_tensors="pt")
            logits = model(**batch).logits
            weights = torch.log1p(torch.relu(logits)) * batch["attention_mask"].unsqueeze(-1)
            rows.append(weights.amax(dim=1).numpy())
    return np.concatenate(rows)


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def sweep(encoder, texts: list[str]) -> list[dict]:
    rows = []
    default_threads = torch.get_num_threads()
    for threads in sorted({1, default_threads}):
        torch.set_num_threads(threads)
        for batch_size in (8, 32, 128):
            seconds, _ = timed(lambda: encoder.encode_document(texts, batch_size=batch_size, show_progress=False))
            rows.append({"threads": threads, "batch_size": batch_size, "docs_per_s": round(len(texts) / seconds, 1)})
    torch.set_num_threads(default_threads)
    return rows


def main() -> None:
    from semiret import progress
    from semiret.models.splade import SpladeEncoder

    progress.set_enabled(False)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=None, help="first N SciFact documents (default: all 5,183)")
    parser.add_argument("--model", default="splade-tiny")
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--sweep", action="store_true", help="also time thread counts and batch sizes (500 docs)")
    args = parser.parse_args()

    before = machine()
    texts = scifact_texts(args.docs)
    encoder = SpladeEncoder.from_pretrained(args.model, max_length=args.max_length)
    encoder.encode_document(texts[:64], show_progress=False)  # warm-up (both share the model and its weights)
    ours_s, ours = timed(lambda: encoder.encode_document(texts, batch_size=args.batch_size, show_progress=False))
    naive_s, naive = timed(lambda: naive_encode(encoder.backbone, encoder.tokenizer, texts, args.max_length))
    ours = ours.to_dense()
    result = {
        "benchmark": "encode_splade", "model": args.model, "docs": len(texts), "max_length": args.max_length,
        "threads": torch.get_num_threads(), "batch_size": args.batch_size,
        "semiret_s": round(ours_s, 2), "naive_s": round(naive_s, 2), "speedup": round(naive_s / ours_s, 2),
        "semiret_docs_per_s": round(len(texts) / ours_s, 1), "naive_docs_per_s": round(len(texts) / naive_s, 1),
        "max_abs_diff": float(np.abs(ours - naive).max()), "same_nonzeros": bool(((ours > 0) == (naive > 0)).all()),
        "nonzeros_per_doc": round(float((ours > 0).sum(1).mean()), 1),
        "machine_before": before, "machine_after": machine(),
    }
    if args.sweep:
        result["sweep_500_docs"] = sweep(encoder, texts[:500])
    emit(result)


if __name__ == "__main__":
    main()
