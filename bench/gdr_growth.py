"""GDR against the per-document-id baseline when the corpus grows (the direction of the paper's Figure 2): the
same recipe trained on SciFact alone and on SciFact plus distractor documents (by default Vaswani's corpus, its
ids prefixed ``vaswani-``), both evaluated on SciFact's test queries; the figure is each system's R@100 drop.

``python bench/gdr_growth.py data [--out runs/data/scifact+vaswani]`` writes the grown collection (SciFact's
corpus, queries and qrels, then the distractors; data, never committed). Train on it with ``semiret train gdr
--data <out> ...`` (and ``--identifiers document`` for the baseline) with the settings of the SciFact-only runs.

``python bench/gdr_growth.py index --run RUN --out DIR`` builds a run's ``gdr`` index from the E_D vectors its
training cached (the corpus is not embedded again); ``semiret eval -r gdr --index DIR`` then evaluates it.

``python bench/gdr_growth.py eval --system NAME SMALL_RUN SMALL_INDEX GROWN_RUN GROWN_INDEX [--system ...]
[--threads 1]`` evaluates each system's two models (run folders of ``semiret train gdr``) on the test queries of
the collection each was trained on, in the given index directories (built with the run's model when missing,
from the E_D vectors its training cached when they cover the corpus; or an earlier ``semiret eval -r gdr
--json`` output of that model, whose figures are then reused), and prints one JSON object: per system and
corpus nDCG@10 / R@100 / documents scored per query, and the drops (absolute, and relative as the paper's
Figure 2 reports them); BM25 on both corpora as the lexical reference.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from corpus import emit, machine

MEASURES = ["nDCG@10", "R@100"]


def grown_collection(base: Path, distractors: Path, out: Path, prefix: str) -> dict:
    """Write ``out``: ``base``'s corpus, queries and qrels, and ``distractors``' documents with ``prefix`` on their
    ids (a clash with a base id is an error)."""
    from semiret.data.collection import Collection

    base_collection = Collection(base)
    base_ids = {d.id for d in base_collection.corpus()}
    added = []
    for document in Collection(distractors).corpus():
        record = document.to_record() | {"_id": prefix + document.id}
        if record["_id"] in base_ids:
            raise SystemExit(f"distractor id {record['_id']} is also a document id of {base}: choose another prefix")
        added.append(json.dumps(record) + "\n")
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    root = Path(base_collection.root)
    with open(out / "corpus.jsonl", "w") as corpus:
        corpus.write((root / "corpus.jsonl").read_text())
        corpus.writelines(added)
    (out / "queries.jsonl").write_bytes((root / "queries.jsonl").read_bytes())
    for qrels in (root / "qrels").iterdir():
        (out / "qrels" / qrels.name).write_bytes(qrels.read_bytes())
    return {"out": str(out), "base_documents": len(base_ids), "distractors": len(added)}


def build_from_run_vectors(run: Path, index: Path) -> bool:
    """Build ``run``'s ``gdr`` index of its collection at ``index`` from the E_D vectors its training cached
    (``document-vectors.npz``: the same encoder and length limit the index would use), so that the corpus is not
    embedded a second time; False (nothing built) when the cache does not cover the collection."""
    from semiret.data.collection import Collection
    from semiret.methods.gdr import run_document_vectors
    from semiret.search.gdr import GDRDocuments, GDRRetriever

    config = json.loads((run / "summary.json").read_text())["config"]
    documents = list(Collection(config["data"]).corpus())
    vectors = run_document_vectors(run, config["document_encoder"] or config["base"], config["document_max_length"],
                                   documents)
    if vectors is None:
        return False
    rows = {d.full_text: row for row, d in enumerate(documents)}  # equal texts have equal vectors

    class CachedEncoder:
        def encode_document(self, texts, batch_size=None, show_progress=False):
            return vectors[[rows[t] for t in texts]]

    class RunVectors(GDRDocuments):
        encoder = CachedEncoder()

    class Retriever(GDRRetriever):  # not registered: the index records "gdr", opened by the usual retriever
        documents = RunVectors

    Retriever.build(documents, index, model=str(run / "model"))
    return True


def evaluate_run(run: Path, index: Path, split: str, threads: int) -> dict:
    """``run``'s model on its collection's ``split``, searched in ``index`` (built when missing); ``index`` may
    instead be the output of an earlier ``semiret eval -r gdr --json`` of that model (its figures are reused)."""
    from semiret.evaluation.evaluate import evaluate

    config = json.loads((run / "summary.json").read_text())["config"]
    built = False
    if index.suffix == ".json":
        figures = json.loads(index.read_text())
        if figures.get("retriever") != "gdr" or figures.get("split") != split:
            raise SystemExit(f"{index} is not a GDR evaluation on the {split} split")
    else:
        built = not index.exists() and build_from_run_vectors(run, index)
        figures = evaluate(config["data"], "gdr", split=split, index=index, measures=MEASURES, n_threads=threads,
                           model=str(run / "model"))
    return {"run": str(run), "data": config["data"], "index": str(index), "documents": figures["documents"],
            "index_from": str(index) if index.suffix == ".json" else
            "the run's cached E_D vectors" if built else "an existing index" if figures["index_build_s"] is None
            else "E_D encoding the corpus",
            **{m: round(figures[m], 4) for m in MEASURES},
            "documents_scored_per_query": figures.get("documents_scored_per_query"),
            "documents_scored_fraction": figures.get("documents_scored_fraction"),
            "latency_ms_median": figures["latency_ms_median"]}


def drops(small: dict, grown: dict) -> dict:
    return {f"{m}_drop": round(small[m] - grown[m], 4) for m in MEASURES} | {
        f"{m}_relative_drop": round((small[m] - grown[m]) / small[m], 4) if small[m] else None for m in MEASURES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    data = commands.add_parser("data", help="write the grown collection")
    data.add_argument("--base", default="scifact")
    data.add_argument("--distractors", default="vaswani")
    data.add_argument("--prefix", default="vaswani-")
    data.add_argument("--out", default="runs/data/scifact+vaswani")
    index = commands.add_parser("index", help="build a run's index from the E_D vectors its training cached")
    index.add_argument("--run", required=True)
    index.add_argument("--out", required=True)
    run = commands.add_parser("eval", help="evaluate the systems on both corpora")
    run.add_argument("--system", nargs=5, action="append", required=True,
                     metavar=("NAME", "SMALL_RUN", "SMALL_INDEX", "GROWN_RUN", "GROWN_INDEX"))
    run.add_argument("--split", default="test")
    run.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    from semiret.data.paths import dataset

    if args.command == "data":
        emit(grown_collection(dataset(args.base), dataset(args.distractors), Path(args.out), args.prefix))
        return
    if args.command == "index":
        started = time.perf_counter()
        if not build_from_run_vectors(Path(args.run), Path(args.out)):
            raise SystemExit(f"{args.run}'s cached vectors do not cover its collection: use semiret index -r gdr")
        emit({"run": args.run, "index": args.out, "seconds": round(time.perf_counter() - started, 1)})
        return
    import torch

    torch.set_num_threads(args.threads)
    from semiret.evaluation.evaluate import evaluate

    started = time.perf_counter()
    result = {"split": args.split, "systems": {}}
    data_of = {}
    for name, small_run, small_index, grown_run, grown_index in args.system:
        small = evaluate_run(Path(small_run), Path(small_index), args.split, args.threads)
        grown = evaluate_run(Path(grown_run), Path(grown_index), args.split, args.threads)
        data_of.update(small=small["data"], grown=grown["data"])
        result["systems"][name] = {"small": small, "grown": grown, **drops(small, grown)}
    bm25 = {}
    for size, data in data_of.items():  # no index kept: BM25 builds in seconds
        figures = evaluate(data, "bm25", split=args.split, measures=MEASURES, n_threads=args.threads)
        bm25[size] = {"data": data, "documents": figures["documents"], **{m: round(figures[m], 4) for m in MEASURES}}
    if len(bm25) == 2:
        result["systems"]["bm25"] = {**bm25, **drops(bm25["small"], bm25["grown"])}
    result["seconds"] = round(time.perf_counter() - started, 1)
    result["machine"] = machine()
    emit(result)


if __name__ == "__main__":
    main()
