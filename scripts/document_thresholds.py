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
from pathlib import Path

import torch

from semiret import progress
from semiret.data.collection import Collection
from semiret.data.paths import dataset
from semiret.evaluation.pruning import largest_safe_threshold, threshold_sweep
from semiret.inference_free import IDF_FILE, resolve_model
from semiret.models.encoders import load_encoder
from semiret.search.retrievers import IDFRetriever
from semiret.text.wordpiece import WordPieceVocabulary


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
    path = Path(resolve_model(args.model))
    collection = Collection(str(dataset(args.data)))
    qrels, queries = collection.qrels(args.split), collection.queries(args.split)
    documents = list(collection.corpus())
    vectors = load_encoder(str(path), "splade").encode_document([d.full_text for d in documents])
    query_side = IDFRetriever(None, WordPieceVocabulary(str(path)), idf=path / IDF_FILE)
    rows = threshold_sweep(vectors, [d.id for d in documents], list(queries),
                           query_side.encode_queries(list(queries.values())), qrels, measures=("nDCG@10", "R@100"))
    print(json.dumps({"data": args.data, "split": args.split, "model": args.model, "rows": rows,
                      "rule_picks": largest_safe_threshold(rows)}, indent=1))


if __name__ == "__main__":
    main()
