"""Test nDCG@10 / R@100 of saved dense encoders, encoded on ``DEVICE`` (HCE's exact dev-split search, given the
test queries): ``python scripts/device/dense_test_figures.py DATA DEVICE MODEL [MODEL ...] [--runs DIR]``, one JSON
line a model; with ``--runs``, each model's top 100 also as a TREC run ``DIR/<model's folder names>.trec``, for
``semiret compare`` (paired tests) back on the CPU."""
import argparse
import json
from pathlib import Path

from semiret.data.collection import Collection
from semiret.data.trec import write_trec_run
from semiret.evaluation.metrics import parse_measures, score_run
from semiret.methods.hce import CoTraining, Corpus, HCETrainingConfig
from semiret.models.encoders import load_encoder

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("data")
parser.add_argument("device")
parser.add_argument("models", nargs="+")
parser.add_argument("--runs", type=Path, help="folder for each model's TREC run")
args = parser.parse_args()

collection = Collection(Path(args.data))
qrels = collection.qrels("test")
queries = {q: t for q, t in collection.queries().items() if q in qrels}
scorer = CoTraining(HCETrainingConfig(data=args.data), Corpus(list(collection.corpus())), queries, qrels)
for model in args.models:
    if not Path(model).is_dir():
        continue
    encoder = load_encoder(model, "dense").to(args.device)
    run = scorer.search(encoder, scorer.embed(encoder))  # searched once, measured and written
    figures = score_run(run, qrels, parse_measures(["nDCG@10", "R@100"]))
    if args.runs:
        name = "-".join(part.lstrip(".") for part in Path(model).parts[-2:])  # run/model: "run-model"
        write_trec_run(run, args.runs / f"{name}.trec")
    rounded = {k: round(v, 4) for k, v in figures.items()}
    print(json.dumps({"model": model, "max_length": encoder.max_length, **rounded}), flush=True)
