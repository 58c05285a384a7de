"""`bm25+nail` on a GPU, for training runs judged on the device machine: each NAIL model re-ranks a saved first-stage
run (BM25's top 100 of each test query, a TREC run from `semiret eval --run` on the CPU) by the sum of its scores of
the query's distinct tokens, plus W times the first stage's score (W = 0: the paper's setting). What the retriever
does, with the documents scored on the model's device in float32 (the index stores them in float16) and only the
candidates scored, not the whole corpus.

    python scripts/device/nail_rerank.py DATA FIRST_STAGE.trec OUT_DIR MODEL [MODEL ...] [--weights 0,1.5] [--device cuda]

writes OUT_DIR/<model's folder names>-w<W>.trec for `semiret compare` back on the CPU; one JSON line a model."""
import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

from semiret.data.collection import Collection
from semiret.data.trec import read_trec_run, write_trec_run
from semiret.models.nail import NailModel
from semiret.search.lexical import query_tokens
from semiret.text.wordpiece import WordPieceVocabulary

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("data", type=Path)
parser.add_argument("first_stage", type=Path)
parser.add_argument("out", type=Path)
parser.add_argument("models", nargs="+")
parser.add_argument("--weights", default="0,1.5", help="first-stage weights W, comma-separated")
parser.add_argument("--device", default="cuda")
args = parser.parse_args()

collection = Collection(args.data)
first_stage = read_trec_run(args.first_stage)
queries = {q: t for q, t in collection.queries().items() if q in first_stage}
candidates = sorted({d for hits in first_stage.values() for d in hits})
wanted = set(candidates)
texts = {d.id: d.full_text for d in collection.corpus() if d.id in wanted}  # title and text, as the index reads
row = {d: i for i, d in enumerate(candidates)}  # a candidate's row in each model's score matrix
weights = [float(w) for w in args.weights.split(",")]
args.out.mkdir(parents=True, exist_ok=True)
for model_path in args.models:
    if not Path(model_path).is_dir():
        continue
    started = time.perf_counter()
    model = NailModel.load(model_path).to(args.device)
    phi = model.score_documents([texts[d] for d in candidates], batch_size=128)
    vocabulary = WordPieceVocabulary(model.tokenizer_source)
    runs = {w: defaultdict(dict) for w in weights}
    for qid, text in queries.items():
        tokens = query_tokens(vocabulary, text)
        for doc_id, bm25 in first_stage[qid].items():
            nail = float(phi[row[doc_id], tokens].sum()) if len(tokens) else 0.0
            for w in weights:
                runs[w][qid][doc_id] = nail + w * bm25
    name = "-".join(part.lstrip(".") for part in Path(model_path).parts[-2:])
    for w, run in runs.items():
        write_trec_run(run, args.out / f"{name}-w{w:g}.trec")
    print(json.dumps({"model": model_path, "documents": len(candidates), "queries": len(queries),
                      "seconds": round(time.perf_counter() - started, 1)}), flush=True)
