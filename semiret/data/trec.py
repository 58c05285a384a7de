"""TREC run files: ``qid Q0 docid rank score tag``, one line per retrieved document."""

from __future__ import annotations

import math
import re
from pathlib import Path

from semiret.errors import DataFormatError, SemiretError
from semiret.files import write_output_text

Run = dict[str, dict[str, float]]
"""A ranking per query: ``{query_id: {doc_id: score}}`` (the ir_measures / pytrec_eval convention)."""


def write_trec_run(run: Run, path: str | Path, tag: str = "semiret") -> None:
    """Write a run in TREC format (``-``: standard output), each query's documents ranked in trec_eval's order
    (score descending, ties by document id descending), scores written as the shortest text that reads back as the
    same number: a run read back scores as it did in memory (rounded to a few decimals, scores closer than that
    would tie, and trec_eval would order them by document id). Ids holding whitespace, which the format's columns
    cannot hold, are refused before anything is written."""
    lines = []
    for query_id, scores in run.items():
        ranked = sorted(scores.items(), key=lambda item: (item[1], item[0]), reverse=True)
        _check_column(query_id, "query", path)
        for doc_id in scores:
            _check_column(doc_id, "document", path)
        lines += (f"{query_id} Q0 {doc_id} {rank} {float(score)!r} {tag}\n" for rank, (doc_id, score) in enumerate(ranked, 1))
    write_output_text(path, "".join(lines))  # atomic: a run cut short by a crash would score as a worse system


_WHITESPACE = re.compile(r"\s")


def _check_column(value: str, what: str, path) -> None:
    if not value or _WHITESPACE.search(value):
        raise SemiretError(f"{what} id {value!r} holds whitespace or is empty, which a TREC run's columns cannot "
                           f"hold: nothing written to {path} (search --json keeps any id)")


def read_trec_run(path: str | Path) -> Run:
    """Read a TREC run file into ``{query_id: {doc_id: score}}``."""
    path = Path(path)
    if not path.is_file():
        raise DataFormatError("is a folder, not a run file" if path.is_dir() else "file not found", path)
    run: Run = {}
    with open(path, "rb") as handle:
        for line_number, raw in enumerate(handle, 1):
            try:
                fields = raw.decode("utf-8-sig" if line_number == 1 else "utf-8").split()
            except UnicodeDecodeError as exc:
                raise DataFormatError(f"invalid UTF-8 at byte {exc.start} of the line", path, line_number) from None
            if not fields:
                continue
            if len(fields) != 6:
                raise DataFormatError(f"expected 6 columns 'qid Q0 docid rank score tag', got {len(fields)}", path, line_number)
            try:
                score = float(fields[4])
            except ValueError:
                score = math.nan
            if math.isnan(score):  # NaN has no order: the run's ranking would be arbitrary
                raise DataFormatError(f"score {fields[4]!r} is not a number", path, line_number)
            if math.isinf(score):  # ties every document it meets, and normalises to NaN in a fusion
                raise DataFormatError(f"score {fields[4]!r} is not a finite number", path, line_number)
            ranking = run.setdefault(fields[0], {})
            if fields[2] in ranking:  # which of its scores counts would be a guess
                raise DataFormatError(f"document {fields[2]!r} is ranked twice for query {fields[0]!r}", path,
                                      line_number)
            ranking[fields[2]] = score
    return run
