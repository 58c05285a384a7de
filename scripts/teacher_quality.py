"""How good are distillation teachers, alone and as an ensemble? The ceiling a distilled student aims at.

``python scripts/teacher_quality.py [--data scifact] [--split test] [--teachers SPEC ...] [--depth 100]
[--cache runs/if-teachers]`` prints one JSON object.

Each teacher spec is what ``semiret train inference-free --teachers`` takes. Per spec, every teacher
scores the union of all teachers' top ``--depth`` documents of each query; the ensemble is the training
target of :func:`semiret.training.losses.ensemble_teacher_scores` (per-query min-max over those candidates,
averaged) or, with ``simply add``, the raw sum. Figures are ``nDCG@10`` / ``R@100`` of re-ranking the
candidates by that score, so they are the best a student distilled from the teacher can hope to copy.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

from semiret.data.collection import Collection
from semiret.data.paths import dataset
from semiret.evaluation.metrics import score_run
from semiret.training.losses import ensemble_teacher_scores
from semiret.training.teachers import TeacherScores, make_teacher, parse_teachers


def ranking_figures(scores: np.ndarray, candidates: np.ndarray, query_ids, doc_ids, qrels) -> dict:
    run = {q: {doc_ids[d]: float(s) for d, s in zip(candidates[i], scores[i])} for i, q in enumerate(query_ids)}
    return {name: round(value, 4) for name, value in score_run(run, qrels).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="scifact")
    parser.add_argument("--split", default="test")
    parser.add_argument("--teachers", nargs="+", default=["dense:minilm@128,sparse:splade-tiny,bm25"])
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--cache", default="runs/if-teachers")
    args = parser.parse_args()

    collection = Collection(dataset(args.data))
    documents = list(collection.corpus())
    doc_ids = [d.id for d in documents]
    qrels = collection.qrels(args.split)
    queries = collection.queries(args.split)
    query_ids = [q for q in qrels if q in queries]
    texts = [queries[q] for q in query_ids]

    specs = {spec: parse_teachers(spec) for spec in args.teachers}
    distinct = {t for parsed in specs.values() for t in parsed}
    scored = {t: TeacherScores(make_teacher(*t), documents, query_ids, texts, args.cache) for t in distinct}
    tops = {t: s.top(args.depth) for t, s in scored.items()}
    width = max(len(np.unique(np.concatenate([top[i] for top in tops.values()]))) for i in range(len(query_ids)))
    candidates = np.full((len(query_ids), width), -1, np.int64)
    for i in range(len(query_ids)):
        union = np.unique(np.concatenate([top[i] for top in tops.values()]))
        candidates[i, : len(union)] = union
        candidates[i, len(union):] = union[0]  # padding repeats a candidate: it cannot change a ranking
    raw = {t: torch.from_numpy(s.scores(query_ids, candidates)) for t, s in scored.items()}

    report = {"data": args.data, "split": args.split, "depth": args.depth, "candidates_per_query": width,
              "teachers": {}, "ensembles": {}}
    for t in sorted(distinct, key=str):
        report["teachers"][scored[t].teacher.name] = ranking_figures(raw[t].numpy(), candidates, query_ids,
                                                                     doc_ids, qrels)
    for spec, parsed in specs.items():
        members = [raw[t] for t in parsed]
        report["ensembles"][spec] = {
            "normalized": ranking_figures(ensemble_teacher_scores(members, 1.0).numpy(), candidates, query_ids,
                                          doc_ids, qrels),
            "simply_add": ranking_figures(ensemble_teacher_scores(members, 1.0, normalize=False).numpy(),
                                          candidates, query_ids, doc_ids, qrels)}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
