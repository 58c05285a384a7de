"""Test nDCG@10 / R@100 of saved dense encoders, encoded on ``DEVICE`` (HCE's exact dev-split search, given the
test queries): ``python scripts/device/dense_test_figures.py DATA DEVICE MODEL [MODEL ...]``, one JSON line a model."""
import json
import sys
from pathlib import Path

from semiret.data.collection import Collection
from semiret.methods.hce import CoTraining, Corpus, HCETrainingConfig
from semiret.models.encoders import load_encoder

data, device, models = sys.argv[1], sys.argv[2], sys.argv[3:]
collection = Collection(Path(data))
qrels = collection.qrels("test")
queries = {q: t for q, t in collection.queries().items() if q in qrels}
scorer = CoTraining(HCETrainingConfig(data=data), Corpus(list(collection.corpus())), queries, qrels)
for model in models:
    if not Path(model).is_dir():
        continue
    encoder = load_encoder(model, "dense").to(device)
    figures = scorer.measure(encoder, scorer.embed(encoder), ["nDCG@10", "R@100"])
    rounded = {k: round(v, 4) for k, v in figures.items()}
    print(json.dumps({"model": model, "max_length": encoder.max_length, **rounded}), flush=True)
