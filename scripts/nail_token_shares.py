"""NAIL's Table 5 at our scale: how many of a relevant pair's gold-query tokens and passage tokens are among the
passage's top-k scored vocabulary tokens.

``python scripts/nail_token_shares.py --data scifact --split test LABEL=INDEX [LABEL=INDEX ...] [--k 100 1000]``
reads each NAIL score-matrix index (``semiret index -r bm25+nail`` or ``nail-exh``), and for every judged
(query, relevant document) pair of the split takes the document's k highest-scored tokens; the query tokens are
the query side's (the model's tokenizer, distinct non-special tokens), the passage tokens those of the document's
text at the length the model read it. Prints one JSON object: per index and k, the percentage of query tokens and
of passage tokens in the top k, averaged over pairs (the paper's Table 5 on NQ: 53/74% of query tokens in the
top 100 pre-trained/fine-tuned, 65/54% of passage tokens).
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from semiret.data.collection import Collection
from semiret.data.paths import dataset
from semiret.indexes import open_index
from semiret.search.nail import nail_vocabulary


def shares(index_path: str, data: str, split: str, ks: list[int]) -> dict:
    index = open_index(index_path)
    if len(index.segments) != 1 or index.n_docs != index.n_stored:
        raise SystemExit(f"{index_path}: expected one segment without deletions (merge it first)")
    config = index.meta["scores"]["scorer"]
    query_side = nail_vocabulary(config, index_path)
    passage_side = type(query_side)(config["model"], max_length=config.get("max_length"))
    scores = index.segments[0].score_array()  # float16 [|V|, n_docs]
    row_of = {doc_id: row for row, doc_id in enumerate(index.live_ids())}
    collection = Collection(dataset(data))
    queries, qrels = collection.queries(split), collection.qrels(split)
    excluded = query_side.excluded_mask
    totals = {k: {"query": [], "passage": []} for k in ks}
    for query_id, judged in qrels.items():
        query_tokens = set(query_side.encode(queries[query_id]))
        for doc_id, grade in judged.items():
            if grade <= 0 or doc_id not in row_of:
                continue
            document = index.get_document(doc_id)
            ids, _ = passage_side.encode_batch([document.full_text])
            passage_tokens = {int(t) for t in ids if not excluded[t]}
            column = np.asarray(scores[:, row_of[doc_id]], np.float32)
            order = np.argsort(-column, kind="stable")
            for k in ks:
                top = set(order[:k].tolist())
                totals[k]["query"].append(len(query_tokens & top) / max(len(query_tokens), 1))
                totals[k]["passage"].append(len(passage_tokens & top) / max(len(passage_tokens), 1))
    return {f"top-{k}": {"gold query tokens %": round(100 * float(np.mean(v["query"])), 1),
                         "input passage tokens %": round(100 * float(np.mean(v["passage"])), 1),
                         "pairs": len(v["query"])} for k, v in totals.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("indexes", nargs="+", help="LABEL=INDEX_DIR")
    parser.add_argument("--data", default="scifact")
    parser.add_argument("--split", default="test")
    parser.add_argument("--k", type=int, nargs="+", default=[100, 1000])
    args = parser.parse_args()
    result = {"data": args.data, "split": args.split}
    for spec in args.indexes:
        label, _, path = spec.partition("=")
        result[label] = shares(path, args.data, args.split, args.k)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
