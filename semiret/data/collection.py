"""Corpora, queries and relevance judgements in the BEIR layout and in plain JSONL/TSV/TREC files.

A BEIR collection is a directory holding ``corpus.jsonl`` (``{"_id", "title", "text"}``),
``queries.jsonl`` (``{"_id", "text"}``) and ``qrels/<split>.tsv`` (``query-id corpus-id score``).
Corpora are streamed: nothing here holds a whole corpus in memory unless asked to.
"""

from __future__ import annotations

import csv
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from semiret.data.jsonl import iter_jsonl
from semiret.errors import DataFormatError, SemiretError

log = logging.getLogger(__name__)

ID_FIELDS = ("_id", "id", "docid", "doc_id", "qid")
TEXT_FIELDS = ("text", "contents", "content", "body", "query")
MAX_DOC_CHARS = 1_000_000
"""Documents longer than this are truncated (with one warning per corpus): no retriever here reads further."""
_CONTROL_CHARACTER = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def document_id_problem(doc_id: str) -> str | None:
    """What makes ``doc_id`` unusable as a document id, or None: blank, or holding a control character (a
    newline or a tab breaks TREC runs, TSV files and the URL that names the document)."""
    if not doc_id.strip():
        return "empty document id"
    control = _CONTROL_CHARACTER.search(doc_id)
    if control is not None:
        return (f"document id {doc_id!r} holds the control character {control.group()!r}: ids may not hold "
                "newlines, tabs or other control characters")
    return None


@dataclass(frozen=True, slots=True)
class Document:
    """One corpus entry; ``full_text`` is what analyzers and encoders see."""

    id: str
    text: str
    title: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.id, str) and isinstance(self.text, str) and isinstance(self.title, str):
            return  # the common case, at a corpus's every document: one test each
        name = next(n for n in ("id", "text", "title") if not isinstance(getattr(self, n), str))
        value = getattr(self, name)
        raise SemiretError(f"a document's {name} must be a string, got {type(value).__name__} "
                           f"({value!r}{f' in document {self.id!r}' if name != 'id' else ''})")

    @property
    def full_text(self) -> str:
        return f"{self.title} {self.text}" if self.title else self.text

    def to_record(self) -> dict:
        return {"_id": self.id, "title": self.title, "text": self.text}


def _field(record: dict, names: tuple[str, ...], what: str, path, line: int) -> str:
    """The first of ``names`` in ``record``, as a string: ids may be integers (many collections number their
    documents), texts are strings or null (empty)."""
    for name in names:
        if name in record:
            value = record[name]
            if value is None and what != "id":
                value = ""
            allowed = (str, int) if what == "id" else str
            if not isinstance(value, allowed) or isinstance(value, bool):
                kind = "a string or an integer" if what == "id" else "a string"
                raise DataFormatError(f"field {name!r} must be {kind}, got {type(value).__name__}", path, line)
            return str(value)
    raise DataFormatError(f"missing {what} field (one of {', '.join(map(repr, names))})", path, line)


def _read_tsv_rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    if not path.is_file():
        raise DataFormatError("file not found", path)

    def decoded(handle) -> Iterator[str]:
        for line_number, raw in enumerate(handle, 1):
            try:
                yield raw.decode("utf-8-sig" if line_number == 1 else "utf-8")  # tolerate a BOM
            except UnicodeDecodeError as exc:
                raise DataFormatError(f"invalid UTF-8 at byte {exc.start} of the line", path, line_number) from None

    with open(path, "rb") as handle:
        # QUOTE_NONE: one row per physical line, so row numbers are line numbers
        for line_number, row in enumerate(csv.reader(decoded(handle), delimiter="\t", quoting=csv.QUOTE_NONE), 1):
            if row and any(cell.strip() for cell in row):
                yield line_number, row


def _corpus_file(path: str | Path) -> Path:
    """A corpus file, or a BEIR folder's ``corpus.jsonl``."""
    path = Path(path)
    return path / "corpus.jsonl" if path.is_dir() else path


QUERY_ID_HEADERS = ("qid", "query-id", "query_id", "queryid")
QUERY_TEXT_HEADERS = ("query", "question")


def _is_header(row: list[str], ids: tuple[str, ...] = (), texts: tuple[str, ...] = ("title",)) -> bool:
    """Whether a TSV file's first row names its columns (``id<TAB>text[<TAB>title]``; a queries file's also
    ``qid<TAB>query`` and the like) rather than holding a document or query."""
    names = [field.strip().lower() for field in row]
    return len(names) >= 2 and names[0] in ID_FIELDS + ids and names[1] in TEXT_FIELDS + texts


def iter_corpus(path: str | Path) -> Iterator[Document]:
    """Stream documents from a JSONL corpus (BEIR or Pyserini field names) or a ``id<TAB>text`` TSV file.

    Raises :class:`DataFormatError` for malformed lines, missing fields and duplicate ids.
    """
    path = _corpus_file(path)
    seen: dict[str, int] = {}
    truncated = 0

    def checked(doc_id: str, text: str, title: str, line: int) -> Document:
        nonlocal truncated
        problem = document_id_problem(doc_id)
        if problem is not None:
            raise DataFormatError(problem, path, line)
        if doc_id in seen:
            raise DataFormatError(f"duplicate document id {doc_id!r} (first seen on line {seen[doc_id]})", path, line)
        seen[doc_id] = line
        if len(text) > MAX_DOC_CHARS:
            truncated += 1
            text = text[:MAX_DOC_CHARS]
        return Document(doc_id, text, title)

    if path.suffix.lower() in (".tsv", ".tab"):
        for line, row in _read_tsv_rows(path):
            if line == 1 and _is_header(row):
                continue
            if len(row) < 2:
                raise DataFormatError("expected 'id<TAB>text' (optionally '<TAB>title')", path, line)
            yield checked(row[0], row[1], row[2] if len(row) > 2 else "", line)
    else:
        for line, _, record in iter_jsonl(path):
            doc_id = _field(record, ID_FIELDS, "id", path, line)
            text = _field(record, TEXT_FIELDS, "text", path, line)
            title = record.get("title") or ""
            if not isinstance(title, str):
                raise DataFormatError(f"field 'title' must be a string, got {type(title).__name__}", path, line)
            yield checked(doc_id, text, title, line)
    if truncated:
        log.warning("%s: %d documents longer than %d characters were truncated", path, truncated, MAX_DOC_CHARS)


def count_documents(path: str | Path) -> int:
    """How many documents :func:`iter_corpus` will read from a corpus file (its non-blank lines), without parsing
    them: a progress bar's total, and what an index that cannot hold them all checks before encoding any."""
    path = _corpus_file(path)
    if not path.is_file():
        raise DataFormatError("file not found", path)
    count, first = 0, None
    with open(path, "rb") as handle:
        for raw in handle:
            if raw.strip():
                count += 1
                first = raw if first is None else first
    tsv = path.suffix.lower() in (".tsv", ".tab")
    header = tsv and first is not None and _is_header(first.decode("utf-8-sig", "replace").rstrip("\r\n").split("\t"))
    return count - header


def read_queries(path: str | Path) -> dict[str, str]:
    """Read queries from BEIR ``queries.jsonl`` or an ``id<TAB>text`` TSV file, as ``{id: text}``."""
    path = Path(path)
    if path.is_dir():
        path = path / "queries.jsonl"
    queries: dict[str, str] = {}
    if path.suffix.lower() in (".tsv", ".tab", ".txt"):
        rows = ((line, row[0], row[1] if len(row) > 1 else None) for line, row in _read_tsv_rows(path)
                if not (line == 1 and _is_header(row, QUERY_ID_HEADERS, QUERY_TEXT_HEADERS)))
    else:
        rows = (
            (line, _field(r, ID_FIELDS, "id", path, line), _field(r, TEXT_FIELDS, "text", path, line))
            for line, _, r in iter_jsonl(path)
        )
    for line, query_id, text in rows:
        if text is None:
            raise DataFormatError("expected 'id<TAB>text'", path, line)
        if query_id in queries:
            raise DataFormatError(f"duplicate query id {query_id!r}", path, line)
        queries[query_id] = text
    return queries


def read_qrels(path: str | Path) -> dict[str, dict[str, int]]:
    """Read relevance judgements as ``{query_id: {doc_id: grade}}``.

    Accepts the BEIR TSV (``query-id corpus-id score`` with a header) and TREC qrels
    (``qid iteration docid grade``, whitespace-separated).
    """
    path = Path(path)
    if not path.is_file():
        raise DataFormatError("file not found", path)
    qrels: dict[str, dict[str, int]] = {}
    with open(path, "rb") as handle:
        for line_number, raw in enumerate(handle, 1):
            try:
                fields = raw.decode("utf-8-sig" if line_number == 1 else "utf-8").split()
            except UnicodeDecodeError:
                raise DataFormatError("invalid UTF-8", path, line_number) from None
            if not fields:
                continue
            if line_number == 1 and fields[0].lower() in ("query-id", "query_id", "qid", "query"):
                continue  # BEIR header
            if len(fields) == 3:
                query_id, doc_id, grade = fields
            elif len(fields) == 4:
                query_id, _, doc_id, grade = fields
            else:
                raise DataFormatError(
                    f"expected 3 (BEIR) or 4 (TREC) columns, got {len(fields)}", path, line_number
                )
            try:
                value = int(float(grade))
            except (ValueError, OverflowError):  # NaN, text / inf
                raise DataFormatError(f"relevance grade {grade!r} is not a number", path, line_number) from None
            qrels.setdefault(query_id, {})[doc_id] = value
    return qrels


@dataclass
class Collection:
    """A BEIR-layout test collection on disk: a folder, or a dataset's name under the shared data (``scifact``),
    as the CLI's ``--data`` takes it."""

    root: Path

    def __post_init__(self):
        from semiret.data.paths import dataset

        self.root = dataset(str(self.root))
        if not (self.root / "corpus.jsonl").is_file():
            raise DataFormatError("not a BEIR collection (no corpus.jsonl)", self.root)

    @property
    def name(self) -> str:
        return self.root.name

    @property
    def corpus_path(self) -> Path:
        return self.root / "corpus.jsonl"

    def corpus(self) -> Iterator[Document]:
        return iter_corpus(self.corpus_path)

    def splits(self) -> list[str]:
        return sorted(p.stem for p in (self.root / "qrels").glob("*.tsv"))

    def qrels(self, split: str) -> dict[str, dict[str, int]]:
        path = self.root / "qrels" / f"{split}.tsv"
        if not path.is_file():
            raise DataFormatError(f"no qrels for split {split!r} (have: {', '.join(self.splits()) or 'none'})", path)
        return read_qrels(path)

    def queries(self, split: str | None = None) -> dict[str, str]:
        """Queries, restricted to those judged in ``split`` when one is given.

        Raises :class:`SemiretError` naming the qrels file when ``split`` judges no query with a text (an empty or
        header-only qrels file, or one whose queries are all missing from ``queries.jsonl``).
        """
        queries = read_queries(self.root / "queries.jsonl")
        if split is None:
            return queries
        judged = self.qrels(split)
        missing = [q for q in judged if q not in queries]
        selected = {q: queries[q] for q in judged if q in queries}
        if not selected:  # nothing to search or score: fail before any index is opened
            path = self.root / "qrels" / f"{split}.tsv"
            found = (f"none of its {len(judged)} judged query ids, e.g. {missing[0]!r}, is there" if judged
                     else "the file holds no judgements")
            raise SemiretError(f"{path}: judges no query that {self.root / 'queries.jsonl'} has a text for "
                               f"({found})")
        if missing:
            log.warning("%d judged queries of split %r have no text (e.g. %r); skipped", len(missing), split, missing[0])
        return selected


def searched_qrels(collection: "Collection", split: str) -> dict[str, dict[str, int]]:
    """``split``'s judgements of the queries that have a text (what ``eval`` searches and ``compare`` scores:
    a judged query without one cannot be searched, so it is left out of every mean rather than averaged as a 0;
    :meth:`Collection.queries` warns of them)."""
    queries = collection.queries(split)
    return {query_id: judged for query_id, judged in collection.qrels(split).items() if query_id in queries}


def corpus_shard(documents: Iterable[Document], shard: str) -> list[Document]:
    """Shard ``i/n`` of ``documents``: the i-th of n contiguous slices (0-based, sizes differing by one at
    most), so shards 0..n-1 merged in order hold the corpus in its order."""
    try:
        number, count = (int(part) for part in shard.split("/"))
    except ValueError:
        number = count = -1
    if not 0 <= number < count:
        raise SemiretError(f"a shard is i/n with 0 <= i < n (say 0/4), not {shard!r}")
    documents = list(documents)
    bounds = [len(documents) * k // count for k in range(count + 1)]
    return documents[bounds[number]: bounds[number + 1]]


def batched(items: Iterable, size: int) -> Iterator[list]:
    """Split an iterable into lists of at most ``size`` items."""
    batch = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch
