"""The lexical prior's weight, swept over a saved inference-free (or SPLADE) model without retraining.

``python scripts/lexical_prior_sweep.py --data vaswani --split test [--model inference-free-scifact]
[--weights 0,0.1,0.3,0.5,1] [--stems] [--idf corpus]`` encodes the corpus once, then for each weight W
searches the split's queries (weighted as the ``inference-free`` retriever weights them) over the model's
document vectors (pruned at its recorded threshold) plus W x BM25 over the documents' own tokens
(:class:`~semiret.text.bm25.LexicalPrior`), and the prior alone; prints one JSON object of nDCG@10 and R@100.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch

from semiret import progress
from semiret.data.collection import Collection
from semiret.data.paths import dataset
from semiret.evaluation.pruning import search_vectors
from semiret.models.checkpoints import (inference_free_document_threshold, inference_free_token_weights,
                                        resolve_inference_free)
from semiret.models.encoders import load_encoder
from semiret.models.sparse import SparseVectors
from semiret.search.lexical import IDFQueries
from semiret.text.bm25 import LexicalPrior
from semiret.text.token_weights import corpus_idf, weights_table
from semiret.text.wordpiece import WordPieceVocabulary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="scifact")
    parser.add_argument("--split", default="test")
    parser.add_argument("--model", default="inference-free-scifact")
    parser.add_argument("--weights", default="0,0.1,0.3,0.5,1")
    parser.add_argument("--stems", action="store_true", help="the prior credits stem variants")
    parser.add_argument("--idf", default="model", help="'model' (the table it was trained with) or 'corpus'")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    progress.set_enabled(False)
    model = resolve_inference_free(args.model)
    collection = Collection(dataset(args.data))
    qrels, queries = collection.qrels(args.split), collection.queries(args.split)
    documents = list(collection.corpus())
    texts, ids = [d.full_text for d in documents], [d.id for d in documents]
    vocabulary = WordPieceVocabulary(model)
    table = inference_free_token_weights(model)
    with tempfile.TemporaryDirectory() as scratch:
        if args.idf == "corpus":  # Lucene IDF of this corpus's tokens, as `--idf corpus` computes it
            table = Path(scratch) / "idf.json"
            table.write_text(json.dumps(weights_table(corpus_idf(texts, vocabulary), vocabulary)))
        encoded = IDFQueries.from_table(table, vocabulary).encode_queries(list(queries.values()))
    learned = load_encoder(model, "splade").encode_document(texts).prune(
        threshold=inference_free_document_threshold(model)).to_csr()
    prior = LexicalPrior(1.0, stems=args.stems).vectors(vocabulary, texts)
    rows = []
    for weight in [float(w) for w in args.weights.split(",")] + [None]:
        vectors = (SparseVectors.from_csr(prior) if weight is None
                   else SparseVectors.from_csr(learned + weight * prior))
        figures, _ = search_vectors(vectors, ids, list(queries), encoded, qrels, ("nDCG@10", "R@100"))
        rows.append({"weight": "prior alone" if weight is None else weight, **figures})
    print(json.dumps({"data": args.data, "split": args.split, "model": args.model, "stems": args.stems,
                      "idf": args.idf, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
