"""Training pairs as a BEIR collection (``semiret import-pairs``): a file of (query, positive passage[, negatives])
texts, as sentence-transformers' datasets hold them (``anchor``/``positive``/``negative_1``..., or ``query``/
``positive``/``negatives``), written as ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv``, so that every
``semiret train`` recipe and ``semiret eval`` reads them as they read SciFact.

Each distinct text becomes one document (its id ``d<n>``, in the order first met) or one query (``q<n>``): a query
given several positives, on one line or several, is one query judged against each. Negatives are documents of the
corpus (what in-batch and mined negatives are drawn from), not judged: judging them 0 would tell the evaluation more
than the file does. A pair-class file (``sentence1``, ``sentence2``, ``label``: quora duplicates, NLI) gives a pair
whose label is above 0 as a query and its positive, and the second text of the others as a negative; a file of graded
similarity (a ``score`` column: STS) is refused.

Read from JSONL (objects) or a TSV/CSV file whose first row names the columns; a TSV/CSV without such a row is read
as ``query<TAB>positive[<TAB>negative...]``.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Iterator

from semiret.data.collection import _delimiter, _read_rows
from semiret.data.jsonl import iter_jsonl
from semiret.errors import DataFormatError, SemiretError
from semiret.files import staged_directory

QUERY_NAMES = ("query", "anchor", "question", "sentence1", "text1")
POSITIVE_NAMES = ("positive", "positives", "pos", "passage", "document", "answer", "sentence2", "text2")
NEGATIVE_NAMES = ("negative", "negatives", "neg", "hard_negative", "hard_negatives")
"""The names a pairs file gives its columns (any case), the first found read; a negative's also numbered
(``negative_1``, ``negative2``, ...)."""
LABEL = "label"
"""A pair-class dataset's column (quora duplicates, NLI): above 0, the pair is a query and its positive; else the
second text is a negative of the first."""
GRADED = ("score", "similarity")
"""Columns of graded similarity (STS): not pairs to train retrieval on, refused."""


def read_pairs(path: str | Path) -> Iterator[tuple[int, str, list[str], list[str]]]:
    """``(line, query, positives, negatives)`` of each line of a pairs file (see the module); a line without a query
    or a positive, or with a value that is no text, is an error naming the file and line."""
    path = Path(path)
    if not path.is_file():
        raise DataFormatError("file not found", path)
    records = _rows_as_records(path) if _delimiter(path) else (
        (line, record) for line, _, record in iter_jsonl(path))
    for line, record in records:
        try:
            columns = {name.strip().lower(): value for name, value in record.items()}
            graded = next((name for name in GRADED if name in columns), None)
            if graded is not None:
                raise ValueError(f"a {graded!r} column grades how alike two texts are (STS): semiret reads pairs of a "
                                 "query and a relevant text, or a 'label' saying whether they are")
            query = _texts(columns, QUERY_NAMES, "query")
            positives = _texts(columns, POSITIVE_NAMES, "positive")
            negatives = [text for name in columns if _is_negative(name) for text in _texts(columns, (name,), name)]
            if LABEL in columns and not _relevant(columns[LABEL]):
                positives, negatives = [], positives + negatives
        except ValueError as exc:
            raise DataFormatError(str(exc), path, line) from None
        if len(query) != 1:
            raise DataFormatError(f"a line holds one query, got {len(query)}", path, line)
        yield line, query[0], positives, negatives


def _relevant(label) -> bool:
    """Whether a pair's label says its texts match: a number (or a text of one) above 0, or true."""
    try:
        return float(label) > 0
    except (TypeError, ValueError):
        raise ValueError(f"field 'label' must be a number (1: the texts match, 0: they do not), got {label!r}") from None


def _is_negative(name: str) -> bool:
    return any(name == base or (name.startswith(base) and name[len(base):].lstrip("_").isdigit())
               for base in NEGATIVE_NAMES)


def _texts(columns: dict, names: tuple[str, ...], what: str) -> list[str]:
    """The non-empty texts of the first of ``names`` in ``columns`` (a text, or a list of texts)."""
    name = next((n for n in names if n in columns), None)
    if name is None:
        raise ValueError(f"no {what} column (one of {', '.join(names)})")
    value = columns[name]
    values = value if isinstance(value, list) else [value]
    if not all(isinstance(v, str) for v in values):
        raise ValueError(f"field {name!r} must be a text or a list of texts")
    texts = [v.strip() for v in values if v and v.strip()]
    if not texts and what in ("query", "positive"):
        raise ValueError(f"field {name!r} is empty: a pair needs a {what}")
    return texts


def _rows_as_records(path: Path) -> Iterator[tuple[int, dict]]:
    """A TSV or CSV file's rows as records: by a first row naming a query and a positive column, else by position
    (query, positive, negatives)."""
    names, first = None, True
    for line, row in _read_rows(path):
        if first:
            first, lowered = False, [cell.strip().lower() for cell in row]
            if any(n in lowered for n in QUERY_NAMES) and any(n in lowered for n in POSITIVE_NAMES):
                names = lowered
                continue
        if names is not None and len(row) > len(names):
            raise DataFormatError(f"{len(row)} columns, more than the {len(names)} the file's header names", path,
                                  line)
        positional = ["query", "positive", *(f"negative_{n}" for n in range(1, len(row) - 1))]
        yield line, dict(zip(names or positional, row))


def write_pairs_collection(path: str | Path, out: str | Path, split: str = "train", overwrite: bool = False) -> dict:
    """The pairs file at ``path`` as a BEIR collection folder at ``out`` (written whole in a staging folder, then
    renamed: an existing one is replaced only with ``overwrite``, and never left half-written). Returns its counts:
    ``{"pairs", "queries", "documents", "judgements"}``."""
    out = Path(out)
    if not split or any(c in split for c in "/\\") or split.startswith("."):
        raise SemiretError(f"split names a qrels file (qrels/SPLIT.tsv): a plain name, got {split!r}")
    if out.exists() and not overwrite:
        raise SemiretError(f"{out} exists: give another folder, or --overwrite to replace it")
    documents: dict[str, str] = {}
    queries: dict[str, str] = {}
    judged: dict[tuple[str, str], None] = {}
    pairs = 0
    for _, query, positives, negatives in read_pairs(path):
        pairs += 1
        query_id = queries.setdefault(query, f"q{len(queries)}") if positives else None  # (a query only judged)
        for number, text in enumerate([*positives, *negatives]):
            doc_id = documents.setdefault(text, f"d{len(documents)}")
            if number < len(positives):
                judged[(query_id, doc_id)] = None
    if not judged:
        raise SemiretError(f"{path}: no pair of a query and a relevant text in it" + (" (every label is 0)" if pairs
                                                                                      else ""))
    with staged_directory(out, overwrite) as staging:
        _write_jsonl(staging / "corpus.jsonl", ({"_id": i, "title": "", "text": t} for t, i in documents.items()))
        _write_jsonl(staging / "queries.jsonl", ({"_id": i, "text": t} for t, i in queries.items()))
        (staging / "qrels").mkdir()
        with open(staging / "qrels" / f"{split}.tsv", "w", encoding="utf-8", newline="") as file:
            writer = csv.writer(file, delimiter="\t", lineterminator="\n")
            writer.writerow(["query-id", "corpus-id", "score"])
            writer.writerows((query_id, doc_id, 1) for query_id, doc_id in judged)
    return {"pairs": pairs, "queries": len(queries), "documents": len(documents), "judgements": len(judged)}


def _write_jsonl(path: Path, records) -> None:
    with open(path, "w", encoding="utf-8") as file:
        for record in records:
            file.write(json.dumps(record, ensure_ascii=False) + "\n")
