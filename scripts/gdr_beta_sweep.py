"""GDR's beta (S = S_inter + beta * sigmoid(<r_q, r_d>)) swept over a GDR index without retraining.

``python scripts/gdr_beta_sweep.py --index DIR --data scifact --split train [--betas 0,0.1,1,10,100,1e5]
[--beams 100] [--length-penalty 0.8] [--unseen-by RUN]`` decodes the split's queries once (the beam search is most of a GDR
search's cost), then scores the decoded clusters' documents with each beta; prints one JSON object of
nDCG@10 / R@100 / MRR@10 and documents scored per query, per beta. Choose beta on training or dev queries,
never on the test queries a figure is reported for. ``--unseen-by RUN``: only the split's queries that training
run (``semiret train gdr --held-out-fraction``) did not train on: those with a relevant document among the
documents it held out (a dev set for a model trained the same way on all of them).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from semiret.data.collection import Collection
from semiret.data.paths import dataset
from semiret.evaluation.metrics import parse_measures, score_run
from semiret.search.retrievers import open_retriever


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", required=True, help="a GDR index directory (its model is the one it records)")
    parser.add_argument("--data", default="scifact")
    parser.add_argument("--split", default="train")
    parser.add_argument("--betas", default="0,0.1,1,10,100,1e5")
    parser.add_argument("--beams", type=int, default=100)
    parser.add_argument("--length-penalty", type=float, default=0.8)
    parser.add_argument("--unseen-by", type=Path, default=None, help="a GDR run folder that held documents out")
    args = parser.parse_args()

    collection = Collection(dataset(args.data))
    qrels, queries = collection.qrels(args.split), collection.queries(args.split)
    ids = [q for q in queries if q in qrels]
    if args.unseen_by is not None:
        held_out = set(json.loads((args.unseen_by / "held-out.json").read_text()))
        ids = [q for q in ids if any(d in held_out for d, grade in qrels[q].items() if grade > 0)]
    retriever = open_retriever(args.index, "gdr", beams=args.beams)
    leaves, inter, vectors = retriever.query_side.model.search_clusters([queries[q] for q in ids], args.beams,
                                                                      args.length_penalty)
    judged = {q: qrels[q] for q in ids}  # measures average over the judged queries: only those searched
    measures = parse_measures(None)
    report = {"index": args.index, "data": args.data, "split": args.split, "queries": len(ids),
              "unseen_by": str(args.unseen_by) if args.unseen_by else None,
              "beams": args.beams, "length_penalty": args.length_penalty, "betas": {}}
    for beta in (float(b) for b in args.betas.split(",")):
        hits, scored = retriever.index.search_clusters(vectors, leaves, inter, 100, beta)
        report["betas"][f"{beta:g}"] = {**score_run(hits.as_run(ids), judged, measures),
                                        "documents_scored_per_query": float(np.mean(scored))}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
