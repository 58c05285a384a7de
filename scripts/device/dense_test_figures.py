"""Test nDCG@10 / R@100 of saved dense encoders, encoded on the GPU; one JSON line per model."""
import json
import sys
from pathlib import Path

from semiret.data.collection import Collection
from semiret.evaluation.metrics import parse_measures, score_run
from semiret.methods.hce import Corpus
from semiret.models.encoders import load_encoder

import numpy as np

data, device, models = sys.argv[1], sys.argv[2], sys.argv[3:]
collection = Collection(Path(data))
corpus = Corpus(list(collection.corpus()))
qrels = collection.qrels("test")
queries = {q: t for q, t in collection.queries().items() if q in qrels}
ids = list(queries)
doc_ids = corpus.ids
for model in models:
    if not Path(model).is_dir():
        continue
    encoder = load_encoder(model, "dense").to(device)
    vectors = encoder.encode_document(corpus.texts, batch_size=64, show_progress=False)
    scores = encoder.encode_query([queries[q] for q in ids], batch_size=64) @ vectors.T
    top = np.argsort(-scores, axis=1)[:, :100]
    run = {q: {doc_ids[d]: float(scores[i, d]) for d in top[i]} for i, q in enumerate(ids)}
    figures = score_run(run, qrels, parse_measures(["nDCG@10", "R@100"]))
    print(json.dumps({"model": model, "max_length": encoder.max_length, **{k: round(v, 4) for k, v in figures.items()}}),
          flush=True)
