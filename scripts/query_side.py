"""Query-side token weights and a lexical floor for a saved inference-free model on one collection.

``python scripts/query_side.py --model M [--data vaswani] [--split test] [--lexical 0.9,0.4 1.2,0.75]
[--floor-weights 0.25 0.5 1 2]`` prints one JSON object.

The collection's documents are encoded once and searched exactly and unpruned, their query tokens
weighted by the model's own table and by the collection's IDF (:func:`semiret.text.token_weights.corpus_idf`:
WordPiece tokens of the text, not of the expanded documents). Then each document's learned weights get a
BM25-saturated frequency of its own WordPiece tokens added (``w * tf (k1 + 1) / (tf + k1 (1 - b + b
len / avglen))``, one index, the same query side): how far does a lexical floor go where BM25 leads?
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from semiret.data.collection import Collection
from semiret.data.paths import dataset
from semiret.evaluation.pruning import search_vectors
from semiret.models.checkpoints import IDF_FILE, resolve_inference_free
from semiret.text.token_weights import corpus_idf, weights_table
from semiret.models.encoders import load_encoder
from semiret.models.sparse import SparseVectors
from semiret.search.lexical import IDFQueries
from semiret.text.wordpiece import WordPieceVocabulary

MEASURES = ("nDCG@10", "R@100")


def saturated_term_frequencies(texts: list[str], vocabulary, k1: float, b: float) -> sp.csr_matrix:
    """BM25's term-frequency factor of every WordPiece token of each text [docs, vocabulary]."""
    flat, offsets = vocabulary.encode_batch(texts)
    lengths = np.diff(offsets).astype(np.float64)
    rows = np.repeat(np.arange(len(texts)), np.diff(offsets))
    tf = sp.coo_matrix((np.ones(len(flat)), (rows, flat)), shape=(len(texts), vocabulary.size)).tocsr()
    tf.sum_duplicates()
    tf = tf.tocoo()
    norm = k1 * (1 - b + b * lengths[tf.row] / max(lengths.mean(), 1e-9))
    return sp.csr_matrix((tf.data * (k1 + 1) / (tf.data + norm), (tf.row, tf.col)), shape=tf.shape)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", default="vaswani")
    parser.add_argument("--split", default="test")
    parser.add_argument("--lexical", nargs="*", default=["0.9,0.4", "1.2,0.75"], help="k1,b pairs")
    parser.add_argument("--floor-weights", nargs="*", type=float, default=[0.25, 0.5, 1.0, 2.0])
    args = parser.parse_args()

    path = Path(resolve_inference_free(args.model))
    collection = Collection(dataset(args.data))
    documents = list(collection.corpus())
    texts, doc_ids = [d.full_text for d in documents], [d.id for d in documents]
    queries, qrels = collection.queries(args.split), collection.qrels(args.split)
    vocabulary = WordPieceVocabulary(str(path))
    learned = load_encoder(str(path), "splade").encode_document(texts).to_csr()

    rows = []
    with tempfile.TemporaryDirectory(prefix="semiret-idf-") as scratch:
        corpus_table = Path(scratch) / "corpus-idf.json"
        corpus_table.write_text(json.dumps(weights_table(corpus_idf([d.full_text for d in documents], vocabulary), vocabulary)))
        for name, table in (("model", path / IDF_FILE), ("corpus", corpus_table)):
            query_side = IDFQueries.from_table(table, vocabulary).encode_queries(list(queries.values()))

            def measure(matrix: sp.csr_matrix, **row) -> None:
                figures, _ = search_vectors(SparseVectors.from_csr(matrix), doc_ids, list(queries), query_side, qrels, MEASURES)
                rows.append({"query_weights": name, **row, **figures})

            measure(learned, lexical=None)
            for pair in args.lexical:
                k1, b = map(float, pair.split(","))
                lexical = saturated_term_frequencies(texts, vocabulary, k1, b)
                measure(lexical, lexical={"k1": k1, "b": b}, learned=False)
                for weight in args.floor_weights:
                    measure(learned + weight * lexical, lexical={"k1": k1, "b": b, "weight": weight})
    print(json.dumps({"model": str(path), "data": args.data, "split": args.split, "rows": rows}))


if __name__ == "__main__":
    main()
