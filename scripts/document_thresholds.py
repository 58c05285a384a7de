"""Static pruning of an inference-free model's document weights: quality and postings per threshold.

``python scripts/document_thresholds.py --data scifact --split test [--model inference-free-scifact]``
encodes the corpus once, then for each threshold of
:data:`~semiret.evaluation.pruning.DOCUMENT_THRESHOLDS` searches the split's queries (weighted as the
``inference-free`` retriever weights them) over the pruned vectors and prints one JSON object: nDCG@10,
R@100, terms per document and postings read per query, and the threshold the training-time rule
(:func:`~semiret.evaluation.pruning.largest_safe_threshold`) would pick from these rows.
"""

from __future__ import annotations

import argparse
import json

import torch

from semiret import progress
from semiret.data.paths import dataset
from semiret.evaluation.pruning import largest_safe_threshold
from semiret.methods.inference_free import document_threshold_sweep


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="scifact")
    parser.add_argument("--split", default="test")
    parser.add_argument("--model", default="inference-free-scifact")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    progress.set_enabled(False)
    rows = document_threshold_sweep(args.model, str(dataset(args.data)), args.split, measures=("nDCG@10", "R@100"))
    print(json.dumps({"data": args.data, "split": args.split, "model": args.model, "rows": rows,
                      "rule_picks": largest_safe_threshold(rows)}, indent=1))


if __name__ == "__main__":
    main()
