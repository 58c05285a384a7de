"""HCE's incremental protocol (its §5.3, after IncDSI): train on 90% of a corpus, then add the other 10% to the
dense index without retraining, and compare queries whose relevant documents were added ("new") with those
whose relevant documents were all seen in training ("old"); then delete the added documents again.

``python bench/hce_incremental.py [--data scifact] [--out runs/hce-incremental] [--epochs 3] ...`` prints one
JSON object: per model (the HCE model trained on the 90%, and the encoder it started from, untrained),
nDCG@10 / R@10 / R@100 of the test queries, old and new, before adding, after adding and after deleting (the
protocol itself is ``bench/incremental.py``, shared with GDR's ``bench/gdr_incremental.py``).

The 10% held out are drawn at random (seeded) among the documents judged for test queries and the rest of
the corpus alike, so both query groups are large enough to compare; training pairs whose positive is held
out are dropped (their queries stay when they have other positives).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

from corpus import emit, machine
from incremental import dense, protocol


def split_corpus(data: Path, out: Path, fraction: float, seed: int) -> tuple[Path, list, list]:
    """Write ``out`` (a BEIR folder of the kept documents, their training qrels, all queries) and return it,
    the kept documents and the held-out ones."""
    from semiret.data.collection import Collection

    collection = Collection(data)
    documents = list(collection.corpus())
    held_out = set(random.Random(seed).sample([d.id for d in documents], round(fraction * len(documents))))
    kept = [d for d in documents if d.id not in held_out]
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    (out / "corpus.jsonl").write_text("".join(json.dumps(d.to_record()) + "\n" for d in kept))
    (out / "queries.jsonl").write_bytes((Path(collection.root) / "queries.jsonl").read_bytes())
    train = collection.qrels("train")
    lines = ["query-id\tcorpus-id\tscore"] + [f"{q}\t{d}\t{g}" for q, judged in train.items()
                                             for d, g in judged.items() if d not in held_out]
    (out / "qrels" / "train.tsv").write_text("\n".join(lines) + "\n")
    return out, kept, [d for d in documents if d.id in held_out]


def main() -> None:
    from semiret.data.collection import Collection
    from semiret.data.paths import dataset
    from semiret.methods.hce import HCETrainingConfig, train_hce

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="scifact")
    parser.add_argument("--out", default="runs/hce-incremental")
    parser.add_argument("--held-out", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--base", default="minilm")
    # training options: the recipe's defaults (`semiret train hce`) unless given
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--document-max-length", type=int, default=None)
    parser.add_argument("--learning-rate", type=float, default=None)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()

    out = Path(args.out)
    data = dataset(args.data)
    folder, kept, held_out = split_corpus(data, out / "data", args.held_out, args.seed)
    started = time.perf_counter()
    given = {name: getattr(args, name) for name in ("epochs", "batch_size", "document_max_length", "learning_rate",
                                                     "threads") if getattr(args, name) is not None}
    training = train_hce(HCETrainingConfig(data=str(folder), output=str(out / "train"), base=args.base, **given))
    test = Collection(data)
    queries, qrels = test.queries("test"), test.qrels("test")
    emit({"data": str(data), "documents": len(kept) + len(held_out), "held_out": len(held_out),
          "train_seconds": round(time.perf_counter() - started, 1), "train_summary": training.get("dev_nDCG@10_per_epoch"),
          "hce": protocol(dense(str(out / "train" / "model")), kept, held_out, queries, qrels),
          args.base: protocol(dense(args.base), kept, held_out, queries, qrels), "machine": machine()})


if __name__ == "__main__":
    main()
