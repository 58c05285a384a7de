"""Collections of ir_datasets (``--data irds:beir/trec-covid``), as PyTerrier's ``pt.get_dataset("irds:...")``: the
dataset's documents, queries and judgements written once into a BEIR folder in the user's cache, which every command
then reads as any other collection.

Splits: the dataset's own judgements, if it has them, are the ``test`` split; each sub-dataset one level down with
judgements (``beir/scifact/train`` under ``beir/scifact``) is the split of its name. Queries of all of them go into
one ``queries.jsonl`` (a dataset without judgements: its own queries); a query id that two splits give two texts is
refused, naming the splits to load one at a time. ir_datasets downloads what it needs the first time (its own
cache, ``IR_DATASETS_HOME``); the folder written here is reused until removed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable

from semiret import progress
from semiret.errors import SemiretError
from semiret.files import staged_directory

PREFIX = "irds:"
WRITTEN = ".written"
"""A file the folder holds once every part was written (a folder without it was interrupted and is written anew)."""


def cache_root() -> Path:
    """Where semiret keeps what it derives for the user: ``$SEMIRET_CACHE``, else ``~/.cache/semiret``."""
    if os.environ.get("SEMIRET_CACHE"):
        return Path(os.environ["SEMIRET_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "semiret"


def irds_collection(name: str) -> Path:
    """The BEIR folder of the ir_datasets dataset ``irds:ID``, written on first use."""
    dataset_id = name.removeprefix(PREFIX)
    folder = cache_root() / "irds" / dataset_id.replace("/", "__")
    if (folder / WRITTEN).is_file():
        return folder
    try:
        import ir_datasets
    except ImportError:
        raise SemiretError(f"--data {name}: reading ir_datasets collections needs the ir_datasets package (pip "
                           "install ir_datasets)") from None
    try:
        dataset = ir_datasets.load(dataset_id)
    except KeyError:
        raise SemiretError(f"--data {name}: ir_datasets has no dataset {dataset_id!r} (its catalogue: "
                           "https://ir-datasets.com)") from None
    if not dataset.has_docs():
        raise SemiretError(f"--data {name}: the ir_datasets dataset {dataset_id!r} has no documents (name the "
                           "collection, or one of its splits, that has them)")
    splits = {"test": dataset} if dataset.has_qrels() and dataset.has_queries() else {}
    for other in list(ir_datasets.registry):
        split = other[len(dataset_id) + 1:]
        if other.startswith(dataset_id + "/") and "/" not in split and split not in splits:
            each = ir_datasets.load(other)
            if each.has_qrels() and each.has_queries():
                splits[split] = each
    with staged_directory(folder) as staged:
        (staged / "qrels").mkdir()
        _write_jsonl(staged / "corpus.jsonl", (_document(doc) for doc in progress.track(
            dataset.docs_iter(), f"reading {dataset_id} (ir_datasets)", total=_count(dataset))))
        queries: dict[str, str] = {}
        read_from: dict[str, str] = {}
        with_queries = {**splits, **({"": dataset} if dataset.has_queries() and not splits else {})}
        loaded_as = {split: dataset_id if each is dataset else f"{dataset_id}/{split}" for split, each in splits.items()}
        for split, each in with_queries.items():  # (a dataset's queries without judgements are written too)
            for query in each.queries_iter():
                text = queries.setdefault(query.query_id, _text(query))
                if text != _text(query):  # one queries file cannot hold both: evaluating one would read the other's
                    first = read_from[query.query_id]
                    where = (f"twice in {PREFIX}{loaded_as.get(split, dataset_id)}" if first == split else
                             f"in {PREFIX}{loaded_as[first]} and in {PREFIX}{loaded_as[split]}: give --data one of them")
                    raise SemiretError(f"--data {name}: the query {query.query_id!r} has two texts, {where}")
                read_from.setdefault(query.query_id, split)
        for split, each in splits.items():
            with open(staged / "qrels" / f"{split}.tsv", "w", encoding="utf-8") as qrels:
                qrels.write("query-id\tcorpus-id\tscore\n")
                qrels.writelines(f"{q.query_id}\t{q.doc_id}\t{int(q.relevance)}\n" for q in each.qrels_iter())
        _write_jsonl(staged / "queries.jsonl", ({"_id": qid, "text": text} for qid, text in queries.items()))
        (staged / WRITTEN).write_text(json.dumps({"ir_datasets": dataset_id, "splits": sorted(splits)}))
    return folder


def _document(doc: Any) -> dict:
    """An ir_datasets document as a BEIR record: its ``title`` and ``text`` fields where it has both, else its
    default text (the fields ir_datasets reads as the document's text, joined)."""
    fields = getattr(doc, "_fields", ())
    if "text" in fields:
        return {"_id": doc.doc_id, "title": getattr(doc, "title", "") or "", "text": doc.text or ""}
    return {"_id": doc.doc_id, "title": "", "text": doc.default_text()}


def _text(query: Any) -> str:
    return query.text if "text" in getattr(query, "_fields", ()) else query.default_text()


def _count(dataset) -> int | None:
    try:
        return dataset.docs_count()
    except (AttributeError, NotImplementedError, TypeError):
        return None


def _write_jsonl(path: Path, records: Iterable[dict]) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
