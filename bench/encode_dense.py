"""MiniLM document encoding of SciFact: semiret's dense encoder against sentence-transformers, same run.

``python bench/encode_dense.py [--docs N] [--model minilm] [--threads T]`` prints one JSON object.

The peer is ``SentenceTransformer(model).encode(texts, batch_size=32)`` (float32, its own length
sorting, mean pooling and normalisation). semiret's ``DenseEncoder.encode_document`` is timed in
float32 (same arithmetic: vectors must agree to 1e-5) and with ``precision="auto"``, its default
(bfloat16 matmuls on CPUs with native support; vectors agree to a cosine above 0.999, and SciFact
nDCG@10 is unchanged: see docs/results.md). ``ratio_*`` = semiret throughput / sentence-transformers'.
The peer runs before and after semiret; its faster time is used.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from corpus import emit, machine
from encode_splade import scifact_texts, timed


def main() -> None:
    from sentence_transformers import SentenceTransformer

    from semiret import progress
    from semiret.models.dense import DenseEncoder
    from semiret.data.packaged import model_directory

    progress.set_enabled(False)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=None, help="first N SciFact documents (default: all 5,183)")
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=None, help="torch threads for both (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    before = machine()
    texts = scifact_texts(args.docs)
    peer = SentenceTransformer(str(model_directory(args.model)), device="cpu")
    exact = DenseEncoder.from_pretrained(args.model, precision="float32")
    fast = DenseEncoder.from_pretrained(args.model, precision="auto")
    for model in (peer, exact, fast):  # warm-up
        (model.encode if model is peer else model.encode_document)(texts[:32])

    def peer_encode():
        return peer.encode(texts, batch_size=args.batch_size, show_progress_bar=False)

    peer_s, reference = timed(peer_encode)
    exact_s, exact_vectors = timed(lambda: exact.encode_document(texts, args.batch_size, show_progress=False))
    fast_s, fast_vectors = timed(lambda: fast.encode_document(texts, args.batch_size, show_progress=False))
    peer_s = min(peer_s, timed(peer_encode)[0])
    result = {
        "benchmark": "encode_dense", "model": args.model, "docs": len(texts), "max_length": exact.max_length,
        "threads": torch.get_num_threads(), "batch_size": args.batch_size,
        "sentence_transformers_s": round(peer_s, 2),
        "semiret_float32_s": round(exact_s, 2), "semiret_auto_s": round(fast_s, 2),
        "auto_precision": fast.precision,
        "ratio_float32": round(peer_s / exact_s, 2), "ratio_auto": round(peer_s / fast_s, 2),
        "docs_per_s": {"sentence_transformers": round(len(texts) / peer_s, 1),
                       "semiret_float32": round(len(texts) / exact_s, 1), "semiret_auto": round(len(texts) / fast_s, 1)},
        "float32_max_abs_diff": float(np.abs(exact_vectors - reference).max()),
        "auto_min_cosine": float(np.min(np.sum(fast_vectors * reference, axis=1))),
        "machine_before": before, "machine_after": machine(),
    }
    emit(result)


if __name__ == "__main__":
    main()
