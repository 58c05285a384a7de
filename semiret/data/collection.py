"""Corpora, queries and relevance judgements in the BEIR layout and in plain JSONL/TSV/TREC files.

A BEIR collection is a directory holding ``corpus.jsonl`` (``{"_id", "title", "text"}``),
``queries.jsonl`` (``{"_id", "text"}``) and ``qrels/<split>.tsv`` (``query-id corpus-id score``).
Corpora are streamed: nothing here holds a whole corpus in memory unless asked to.
"""

from __future__ import annotations

import csv
import itertools
import json
import logging
import math
import numbers
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Container, Iterable, Iterator, Mapping, Sequence

import numpy as np
from semiret.data.folder import DOCUMENT_KINDS, document_files, folder_documents, holds_documents
from semiret.data.ids import IdHashSet, document_id_problem, surrogate_problem
from semiret.data.jsonl import format_suffix, iter_jsonl, open_data_file
from semiret.errors import DataFormatError, SemiretError, warn, warn_once

log = logging.getLogger(__name__)

ID_FIELDS = ("_id", "id", "docid", "doc_id", "qid")
DOCUMENT_ID_FIELDS = ("_id", "id", "pid", "passage_id", "docid", "doc_id", "qid")
"""The names a document's record gives its id, the first found read: a passage's own id before its document's (MS
MARCO v2 passages carry both ``pid`` and ``docid``, as ir_datasets and Pyserini read them). A queries file keeps
:data:`ID_FIELDS` (a query judged against a passage may name it). ``pid`` and ``passage_id`` stay fields
``metadata_fields`` can keep."""
TEXT_FIELDS = ("text", "contents", "content", "body", "abstract", "passage", "query")
VECTOR_FIELD = "vector"
"""The field of a document's record (and of a query's, for ``--query-vectors``) holding an embedding of its own: a
list of numbers (a dense vector) or an object ``{term: weight}`` (a sparse one, Pyserini's JsonVectorCollection)."""
FLOAT32_MAX = float(np.finfo(np.float32).max)
MAX_DOC_CHARS = 1_000_000
"""Documents longer than this are truncated (with one warning per corpus): no retriever here reads further."""


@dataclass(frozen=True, slots=True)
class Document:
    """One corpus entry; ``full_text`` is what analyzers and encoders see. ``metadata`` (a JSON object, as in
    BEIR's ``corpus.jsonl``) is stored with the text and never encoded: searches filter on it (``filter=``).
    ``vector``: an embedding the user brings (a corpus line's ``vector`` field), what the ``vectors`` retriever
    indexes in place of encoding the text (other retrievers ignore it): a list of numbers, held as float32; or an
    object ``{term: weight}``, a sparse vector (SPLADE's, uniCOIL's, made elsewhere), what the ``sparse-vectors``
    retriever indexes, held as a dict of its terms of positive weight (:func:`sparse_vector`). Never stored with the
    text."""

    id: str
    text: str
    title: str = ""
    metadata: dict | None = field(default=None, compare=False)
    vector: np.ndarray | dict[str, float] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.vector is not None:
            try:
                object.__setattr__(self, "vector", brought_vector(self.vector, "its vector", document=True))
            except ValueError as exc:
                raise SemiretError(f"document {self.id!r}: {exc}") from None
        if isinstance(self.id, str) and isinstance(self.text, str) and isinstance(self.title, str) \
                and (self.metadata is None or isinstance(self.metadata, dict)):
            return  # the common case, at a corpus's every document: one test each
        for name, kind, types in (("id", "a string", str), ("text", "a string", str), ("title", "a string", str),
                                  ("metadata", "an object (dict)", (dict, type(None)))):
            value = getattr(self, name)
            if not isinstance(value, types):
                raise SemiretError(f"a document's {name} must be {kind}, got {type(value).__name__} "
                                   f"({value!r}{f' in document {self.id!r}' if name != 'id' else ''})")

    @property
    def full_text(self) -> str:
        return f"{self.title} {self.text}" if self.title else self.text

    def to_record(self) -> dict:
        """The document as a BEIR corpus line (``metadata`` only when it has some)."""
        record = {"_id": self.id, "title": self.title, "text": self.text}
        if self.metadata:
            record["metadata"] = self.metadata
        return record

    def to_json(self) -> str:
        """:meth:`to_record` as one line of JSON: what an index stores and ``semiret export`` writes."""
        return json.dumps(self.to_record(), ensure_ascii=False)

    @classmethod
    def from_record(cls, record: dict) -> "Document":
        """A document as :meth:`to_record` wrote it (an index's stored texts)."""
        return cls(record["_id"], record["text"], record.get("title", ""), record.get("metadata") or None)

    @classmethod
    def from_json(cls, line: str) -> "Document":
        """A document as :meth:`to_json` wrote it (an index's stored record)."""
        return cls.from_record(json.loads(line))


def _pick(record: dict, names: tuple[str, ...]) -> tuple[str, object] | None:
    """The first of ``names`` in ``record`` holding a value, as (name, value); when every one there is null or empty,
    the first of them (so ``{"text": null, "contents": "..."}`` reads the contents); None when none is there."""
    first = None
    for name in names:
        if name in record:
            value = record[name]
            if value is not None and value != "":
                return name, value
            if first is None:
                first = name
    return None if first is None else (first, record[first])


def _as_string(name: str, value, what: str) -> str:
    """A picked value as a string (a null text or title is empty); ids may be integers (many collections number
    their documents), texts are strings. Raises ValueError naming the field."""
    if value is None and what != "id":
        return ""
    allowed = (str, int) if what == "id" else str
    if not isinstance(value, allowed) or isinstance(value, bool):
        kind = "a string or an integer" if what == "id" else "a string"
        raise ValueError(f"field {name!r} must be {kind}, got {type(value).__name__}")
    if isinstance(value, str) and (problem := surrogate_problem(value, f"field {name!r}")):
        raise ValueError(problem)
    return value if isinstance(value, str) else str(value)


def _required(record: dict, names: tuple[str, ...], what: str) -> str:
    picked = _pick(record, names)
    if picked is None:
        raise ValueError(f"missing {what} field (one of {', '.join(map(repr, names))})")
    return _as_string(*picked, what)


def _document_fields(record: dict, fields: CorpusFields) -> tuple[tuple[str, object], tuple[str, object] | None,
                                                                object, object]:
    """(id, text or None, title, metadata) as ``fields`` picks them from a document's record, each field looked up
    once: its metadata is its ``metadata`` object with the other fields ``fields`` keeps beside it (the object's
    values win; one that is no object is left for the caller to refuse)."""
    doc_id, text, title = _pick(record, fields.id_names), _pick(record, fields.text_names), record.get("title")
    if doc_id is None:
        raise ValueError(fields.missing("id"))
    if text is None and not title and record.get(VECTOR_FIELD) is None:  # (a vector alone is a document to search)
        raise ValueError(fields.missing("text"))
    metadata = record.get("metadata") or None
    lifted = {name: record[name] for name in fields.kept(record)} if fields.metadata_fields else None
    if lifted and (metadata is None or isinstance(metadata, dict)):
        metadata = lifted | (metadata or {})
    return doc_id, text, title, metadata


def record_fields(record: dict, fields: CorpusFields | None = None) -> dict:
    """A JSON object describing a document, however it names its fields (BEIR's ``_id``/``title``/``text``,
    Pyserini's ``id``/``contents``, the other names of :data:`DOCUMENT_ID_FIELDS` and :data:`TEXT_FIELDS`, or those
    ``fields`` names; a ``metadata`` object is kept, with the other fields ``fields`` keeps, other fields are
    ignored), as ``{"_id", "title", "text"[, "metadata"]}`` with the values found (an integer id as its string; a
    text missing beside a title: empty). Raises ValueError when the id, or both text and title, are missing; the
    values' types are checked by the caller (:func:`record_document`, or the HTTP API's schema, which names the
    field)."""
    (_, doc_id), text, title, metadata = _document_fields(record, fields or CorpusFields())
    if isinstance(doc_id, int) and not isinstance(doc_id, bool):
        doc_id = str(doc_id)
    fields_found = {"_id": doc_id, "title": "" if title is None else title,
                    "text": "" if text is None or text[1] is None else text[1]}
    if metadata:
        fields_found["metadata"] = metadata
    if record.get(VECTOR_FIELD) is not None:
        fields_found[VECTOR_FIELD] = record[VECTOR_FIELD]
    return fields_found


def record_field_names(record: dict, fields: CorpusFields | None = None) -> dict[str, str]:
    """The fields of ``record`` that :func:`record_fields` read its id and text from, under the names it gives them
    (``{"_id": "doc_id", "text": "body"}``), where they differ: what an error about one of those values names (the
    HTTP API's 422s), the user's field rather than semiret's."""
    fields = fields or CorpusFields()
    read = {"_id": _pick(record, fields.id_names), "text": _pick(record, fields.text_names)}
    return {name: found[0] for name, found in read.items() if found is not None and found[0] != name}


VECTOR_KINDS = {"dense": "dense (a list of numbers)", "multi": "token vectors (a list of lists of numbers)",
                "sparse": "sparse ({term: weight})"}
"""The kinds of vector a document or query brings (:func:`vector_kind`), as errors name them."""


def vector_kind(vector: "np.ndarray | dict[str, float]") -> str:
    """What a checked vector (:func:`brought_vector`) is: ``sparse`` (a dict), ``multi`` (token vectors, 2-D) or
    ``dense``; the kinds of the ``sparse-vectors``, ``multivectors`` and ``vectors`` retrievers."""
    return "sparse" if isinstance(vector, dict) else "multi" if vector.ndim == 2 else "dense"


def brought_vector(value, name: str = f"field {VECTOR_FIELD!r}",
                   document: bool = False) -> "np.ndarray | dict[str, float]":
    """A vector a document or a query brings: an object (a mapping) is a sparse vector (:func:`sparse_vector`),
    anything else a dense one or token vectors (:func:`document_vector`). A ValueError names ``name``; a
    ``document``'s sparse vector must keep a term (a query's may not: it finds nothing)."""
    if not isinstance(value, Mapping):
        return document_vector(value, name)
    vector = sparse_vector(value, name)
    if document and not vector:
        raise ValueError(f"{name} holds no term of positive weight (a sparse vector's terms of weight 0 are left out)")
    return vector


def sparse_vector(value: Mapping, name: str = f"field {VECTOR_FIELD!r}") -> dict[str, float]:
    """``value`` (an object ``{term: weight}``, Pyserini's JsonVectorCollection vector) as the sparse vector an
    index holds, checked: at least one term; every term a non-empty string with no line break (an index's vocabulary
    file holds a term a line) that UTF-8 can write; every weight a number (not a boolean), finite, at least 0 and
    within float32. Terms of weight 0 (in float32, as the index holds it) are left out (the result may then be empty: a query that finds nothing).
    Anything else is a ValueError naming ``name`` and the term."""
    if not value:
        raise ValueError(f"{name} holds no term (a sparse vector is an object {{term: weight}} of at least one term)")
    kept = {}
    for term, weight in value.items():
        if type(term) is not str or not term or "\n" in term:
            if not isinstance(term, str):
                raise ValueError(f"{name} has a term that is not a string: {term!r} ({type(term).__name__})")
            if not term or "\n" in term:
                raise ValueError(f"{name} has the term {term!r}: a term is a string of at least one character, "
                                 "with no line break")
        elif not term.isascii() and (problem := surrogate_problem(term, f"{name}'s term {term!r}")):
            raise ValueError(problem)
        if type(weight) is not float:
            if not isinstance(weight, numbers.Real) or isinstance(weight, bool):
                raise ValueError(f"{name}: the weight of term {term!r} must be a number, got "
                                 f"{type(weight).__name__} {weight!r}")
            weight = float(weight)
        if not math.isfinite(weight) or abs(weight) > FLOAT32_MAX:
            raise ValueError(f"{name}: the weight of term {term!r} is {weight!r}; weights are finite numbers "
                             "(within float32)")
        if weight < 0:
            raise ValueError(f"{name}: the weight of term {term!r} is negative ({weight!r}); weights are at least 0 "
                             "(a term of weight 0 is left out)")
        if np.float32(weight):  # (a weight float32 holds as 0, 1e-46, is left out as a 0 is)
            kept[term] = weight
    return kept


def document_vector(value, name: str = f"field {VECTOR_FIELD!r}") -> np.ndarray:
    """``value`` (a list of numbers, an array) as the float32 vector an index holds, checked: one dimension, at least
    one number, all finite; or a list of such lists of one length (a 2-D array), a document's or a query's token
    vectors, one a row (what an index of the ``multivectors`` retriever holds). Anything else is a ValueError naming
    ``name`` (the field, or what holds it). Read by numpy whole (a Python loop over a 768-number list cost 30 times
    as much); only a refused list is read item by item, to say where it is wrong."""
    if isinstance(value, (list, tuple)):
        try:
            vector = np.asarray(value)
        except ValueError:  # ragged: lists of different lengths
            vector = None
        if vector is None or vector.dtype.kind not in "fiu":
            _say_where_wrong(value, name)
            vector = np.asarray(value, dtype=np.float64)  # (numbers and booleans: the booleans refused below)
    elif isinstance(value, np.ndarray):
        vector = value
    else:
        raise ValueError(f"{name} must be a list of numbers (a dense vector) or an object {{term: weight}} (a sparse "
                         f"one), got {type(value).__name__}")
    if vector.dtype.kind not in "fiu":
        raise ValueError(f"{name} must hold numbers only, got {vector.dtype.name} values")
    if vector.ndim not in (1, 2) or not vector.size:
        raise ValueError(f"{name} must be a flat list of at least one number (or a list of such lists, token "
                         "vectors), got " + (f"shape {vector.shape}" if vector.size else "none"))
    if not np.isfinite(vector).all():
        raise ValueError(f"{name} holds NaN or an infinity")
    return np.ascontiguousarray(vector, dtype=np.float32)


def _say_where_wrong(value: list | tuple, name: str) -> None:
    """Raise a ValueError naming where the list ``value`` that numpy could not read as numbers goes wrong: an item
    that is no number, or (token vectors: a list holding lists) an item that is no row, a row of another length or
    holding no number."""
    rows = any(isinstance(item, (list, tuple, np.ndarray)) for item in value)
    for position, item in enumerate(value):
        if not rows:
            if not isinstance(item, numbers.Real) or isinstance(item, bool):
                raise ValueError(f"{name} must hold numbers only, got {type(item).__name__} at position {position}")
            continue
        if not isinstance(item, (list, tuple, np.ndarray)):
            raise ValueError(f"{name} holds lists (token vectors, one a row) and {type(item).__name__} at position "
                             f"{position}: token vectors are a list of lists of numbers")
        if len(item) != len(value[0]):
            raise ValueError(f"{name}: token vector {position} has {len(item)} numbers, token vector 0 has "
                             f"{len(value[0])} (token vectors are rows of one length)")
        if isinstance(item, (list, tuple)):
            _say_where_wrong(item, f"{name}'s token vector {position}")
        elif np.ndim(item) != 1:
            raise ValueError(f"{name}: token vector {position} has shape {np.shape(item)}; token vectors are rows "
                             "of numbers")
    if rows:
        raise ValueError(f"{name} must be a flat list of numbers or a list of such lists (token vectors) of one "
                         "length")


EVERY_FIELD = "*"
"""As ``metadata_fields``: every field besides a document's id, text, title and metadata."""
NAMED_FIELDS = ("title", "metadata", VECTOR_FIELD)
"""The fields a record's title, metadata object and vector are always read from."""
READ_FIELDS = frozenset(ID_FIELDS + TEXT_FIELDS + NAMED_FIELDS)
"""The names of the fields a corpus reader reads as a document's id, text, title, metadata and vector."""


FIELD_OPTIONS = ("metadata_fields", "id_field", "text_field")
"""The options of :class:`CorpusFields`, as :func:`iter_corpus`'s ``recorded_fields`` names them."""


@dataclass(frozen=True)
class CorpusFields:
    """How a corpus's records become documents: the field holding each one's id and the one holding its text (None:
    the first of :data:`DOCUMENT_ID_FIELDS`, of :data:`TEXT_FIELDS`, a record holds; ``--id-field`` and
    ``--text-field``, as LangChain's JSONLoader's ``content_key``), and the other fields kept in its metadata
    (``metadata_fields``; :data:`EVERY_FIELD`: all of them). An index records them (:meth:`record`, in its
    ``meta.json``) and reads the documents added to it alike, from a file, over HTTP or from Python. A record
    lacking the field named is read from BEIR's name (``_id``, ``text``: what ``semiret export`` writes and the
    service's documents hold), and only that, so a misspelt field is still an error. A field named for one side
    that the other side reads by default (``id_field="text"`` alone) is refused rather than taken from the other's
    names: name both."""

    metadata_fields: tuple[str, ...] | None = None
    id_field: str | None = None
    text_field: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "metadata_fields", check_metadata_fields(self.metadata_fields))
        for what in ("id", "text"):
            name = getattr(self, f"{what}_field")
            if name is not None and (not isinstance(name, str) or not name.strip() or name.strip() in NAMED_FIELDS):
                raise SemiretError(f"{what}_field (--{what}-field) names the field of a corpus's records holding each "
                                   f"document's {what}, not one of {', '.join(NAMED_FIELDS)}; got {name!r}")
            if name is not None:
                object.__setattr__(self, f"{what}_field", name.strip())
        if self.id_field is not None and self.id_field == self.text_field:
            raise SemiretError(f"id_field and text_field (--id-field, --text-field) both name {self.id_field!r}: "
                               "a document's id and text are two fields")
        for what, other, defaults in (("id", "text", TEXT_FIELDS), ("text", "id", DOCUMENT_ID_FIELDS)):
            name = getattr(self, f"{what}_field")
            if name in defaults and getattr(self, f"{other}_field") is None:
                raise SemiretError(f"{what}_field (--{what}-field) {name!r} is one of the fields a document's {other} "
                                   f"is read from ({', '.join(defaults)}): name the {other}'s field too "
                                   f"({other}_field, --{other}-field)")

    @classmethod
    def of(cls, recorded: Mapping) -> "CorpusFields":
        """The fields ``recorded`` names (an index's ``meta.json``, or the service's description of the index)."""
        return cls(recorded.get("metadata_fields"), recorded.get("id_field"), recorded.get("text_field"))

    def record(self) -> dict:
        """The fields named, as ``meta.json`` records them and :func:`iter_corpus` and ``build`` take them."""
        return {name: list(value) if isinstance(value, tuple) else value for name in FIELD_OPTIONS
                if (value := getattr(self, name)) is not None}

    def keeping(self, names: Iterable[str]) -> "CorpusFields":
        """These fields with the metadata fields ``names`` kept as metadata too (the fields an index's analyzer reads
        as text; a dotted name, ``source.name``, keeps its top-level object)."""
        if not names or (self.metadata_fields and EVERY_FIELD in self.metadata_fields):
            return self
        kept = list(self.metadata_fields or ())
        added = [name for name in dict.fromkeys(name.split(".")[0] for name in names) if name not in kept]
        return replace(self, metadata_fields=tuple(kept + added) or None)

    @property
    def id_names(self) -> tuple[str, ...]:
        """The fields a record's id is read from, the first it holds: the field named, then BEIR's ``_id``."""
        return DOCUMENT_ID_FIELDS if self.id_field is None else _named_first(self.id_field, self.text_field, ("_id",))

    @property
    def text_names(self) -> tuple[str, ...]:
        """The fields a record's text is read from, the first it holds: the field named, then BEIR's ``text``."""
        return TEXT_FIELDS if self.text_field is None else _named_first(self.text_field, self.id_field, ("text",))

    @property
    def read_names(self) -> frozenset[str]:
        """The fields read as a document's id, text, title, metadata and vector (:data:`READ_FIELDS` by default; a
        named field's BEIR name only where a record's id or text is read from it: :meth:`others`)."""
        return frozenset((ID_FIELDS if self.id_field is None else (self.id_field,))
                         + (TEXT_FIELDS if self.text_field is None else (self.text_field,)) + NAMED_FIELDS)

    def columns(self) -> tuple:
        """A TSV or CSV corpus's columns (as :data:`CORPUS_COLUMNS`): the names a header gives the id and the text,
        those named first, then the usual ones, so that a first row naming those is a header too (``id<TAB>text``
        above documents added to an index read with ``--id-field DocNo``)."""
        id_name, text_name = (None if name is None else name.lower() for name in (self.id_field, self.text_field))
        return (_named_first(id_name, text_name, CORPUS_COLUMNS[0]),
                _named_first(text_name, id_name, CORPUS_COLUMNS[1]), *CORPUS_COLUMNS[2:])

    def missing(self, what: str) -> str:
        """The error of a record without its ``what`` ("id" or "text") field."""
        named, names = getattr(self, f"{what}_field"), getattr(self, f"{what}_names")
        if named is not None:
            beir = f", nor {names[1]!r} (BEIR's, which semiret export writes)" if len(names) > 1 else ""
            return f"missing {what} field {named!r} (the {what}_field the documents are read with){beir}"
        return (f"missing {what} field (one of {', '.join(map(repr, names))}; {what}_field, --{what}-field, names "
                "another)")

    def others(self, names: Iterable[str], header: bool = False) -> list[str]:
        """Those of ``names`` (a JSON record's fields, or a ``header``'s columns, named in any case) not read as a
        document's id, text, title or metadata, each once; of a record (a mapping), those its id and text are read
        from are left out too (``pid`` read as its id, ``text`` read where the text field named is missing)."""
        if header:
            read = {name.strip().lower() for name in self.read_names}
            return [name for name in dict.fromkeys(names) if name.strip().lower() not in read]
        read = self.read_names
        if isinstance(names, Mapping):
            read = read | {picked[0] for picked in (_pick(names, self.id_names), _pick(names, self.text_names))
                           if picked is not None}
        return [name for name in dict.fromkeys(names) if name not in read]

    def kept(self, names: Iterable[str], header: bool = False) -> list[str]:
        """Those of :meth:`others` that ``metadata_fields`` keeps (:data:`EVERY_FIELD`: all; a header's columns
        named in any case)."""
        others = self.others(names, header)
        if EVERY_FIELD in (self.metadata_fields or ()):
            return others
        key = (lambda name: name.strip().lower()) if header else (lambda name: name)
        wanted = {key(name) for name in self.metadata_fields or ()}
        return [name for name in others if key(name) in wanted]

    def unread(self, record: dict) -> list[str]:
        """The fields of ``record`` left out of its document: those of :meth:`others` that ``metadata_fields`` does
        not keep (all of them where it keeps none)."""
        kept = set(self.kept(record))
        return [name for name in self.others(record) if name not in kept]


def _named_first(named: str | None, other: str | None, fallback: tuple[str, ...]) -> tuple[str, ...]:
    """The field ``named`` (if any), then those of ``fallback`` but the one the other side names, each once."""
    return tuple(dict.fromkeys(((named,) if named is not None else ()) + tuple(n for n in fallback if n != other)))


def left_out_warning(where: str, names: Sequence[str], keep: str) -> str:
    """The warning that the fields ``names`` of the documents of ``where`` were left out, ``keep`` saying how to keep
    them."""
    listed = ", ".join(map(repr, names[:8])) + (", ..." if len(names) > 8 else "")
    return (f"{where}: the field{'s' * (len(names) > 1)} {listed} of its documents {'are' if len(names) > 1 else 'is'} "
            f"left out: {keep}")


def check_metadata_fields(fields: Sequence[str] | None) -> tuple[str, ...] | None:
    """``metadata_fields`` as a tuple of names (``*``: every other field), or a clear error."""
    if fields is None:
        return None
    if isinstance(fields, str) or not all(isinstance(f, str) and f.strip() for f in fields) or not fields:
        raise SemiretError(f"metadata fields (metadata_fields, --metadata-fields) are names of a corpus's fields, "
                           f"or {EVERY_FIELD} for all of them, got {fields!r}")
    return tuple(f.strip() for f in fields)


def record_document(record: dict, fields: CorpusFields | None = None) -> Document:
    """The :class:`Document` a JSON object describes, read with ``fields`` (:func:`record_fields`); a value of the
    wrong type is a ValueError naming its field. The fields ``fields`` keeps (:data:`EVERY_FIELD`: all of
    :meth:`CorpusFields.others`) join its metadata, where its ``metadata`` object does not hold them already."""
    doc_id, text, title, metadata = _document_fields(record, fields or CorpusFields())
    if metadata is not None and not isinstance(metadata, dict):
        raise ValueError(f"field 'metadata' must be an object, got {type(metadata).__name__}")
    if metadata:
        check_storable(metadata)
    vector = None if record.get(VECTOR_FIELD) is None else brought_vector(record[VECTOR_FIELD], document=True)
    return Document(_as_string(*doc_id, "id"), "" if text is None else _as_string(*text, "text"),
                    _as_string("title", title, "title"), metadata, vector)


def as_document(item, position: int, fields: CorpusFields | None = None) -> Document:
    """An item of the Python API's ``build``/``add``: a :class:`Document`, or a dict read as
    :func:`record_document` reads a corpus line (with ``fields``, an index's); anything else (a bare string has no
    id) is a clear error."""
    if isinstance(item, Document):
        return _stored_as_json(item, position)
    if isinstance(item, dict):
        try:
            return _stored_as_json(record_document(item, fields), position)
        except ValueError as exc:
            raise SemiretError(f"document {position}: {exc}") from None
    hint = (" (strings have no id: give Document(id, text), or {'_id': ..., 'text': ...}; e.g. "
            "[Document(str(i), t) for i, t in enumerate(texts)])" if isinstance(item, str) else "")
    raise SemiretError(f"document {position} is a {type(item).__name__}, not a Document or a dict{hint}")


def as_documents(items: Iterable, fields: CorpusFields | None = None, where: str = "documents",
                 keep: str = "") -> Iterator[Document]:
    """:func:`as_document` of each item (the Python API's ``build`` and ``add``, the service client's ``add``), dicts
    read with ``fields``; the fields of the first item that ``fields`` leaves out (keeping none as metadata) named in a
    warning (:func:`left_out_warning`, ``keep`` saying how to keep them), as :func:`iter_corpus` names a file's."""
    fields = fields or CorpusFields()
    for position, item in enumerate(items):
        if position == 0 and isinstance(item, dict) and (unread := fields.unread(item)):
            warn(log, left_out_warning(where, unread, keep))
        yield as_document(item, position, fields)


ADDED_FIELDS_HINT = ("the index keeps as metadata, beside each document's \"metadata\" object, only the fields its "
                     "metadata_fields name (none where it was made without them; they are named when an index is "
                     "made: semiret index --metadata-fields, PUT /indexes/NAME {\"metadata_fields\": [...]}): put "
                     "them in each document's \"metadata\" to filter on them")
"""How to keep the fields of documents added to an index that keeps none of them (``add``, the service's)."""


def _stored_as_json(document: Document, position: int) -> Document:
    """``document``, checked to be storable (its strings UTF-8, its metadata JSON) before anything is encoded."""
    for name in ("id", "title", "text"):
        problem = surrogate_problem(getattr(document, name), f"its {name}")
        if problem is not None:
            raise SemiretError(f"document {position}: {problem}")
    if document.metadata:
        try:
            check_storable(document.metadata)
        except (TypeError, ValueError) as exc:
            raise SemiretError(f"document {position} ({document.id!r}): its metadata cannot be stored ({exc})") from None
    return document


MAX_METADATA_DEPTH = 32
"""Most levels of objects and lists a document's metadata may nest (Elasticsearch's mappings take 20): deeper JSON
was stored, then answered by no read (the service's serializer stops near 255 levels: every read of the document a
500), and parsing it deeper still overflows Python's stack."""


def check_storable(metadata: dict) -> None:
    """Refuse metadata the index cannot store as UTF-8 JSON and give back (a ValueError naming the field; a
    TypeError for a value JSON has no form for): ``NaN`` and ``Infinity`` (stored, they were exported as no JSON
    reads them, and served as null), lone surrogates, and nesting deeper than :data:`MAX_METADATA_DEPTH`."""

    def unstorable(value) -> str | None:
        if _nesting(value) > MAX_METADATA_DEPTH:
            return f"objects or lists nested more than {MAX_METADATA_DEPTH} levels deep"
        try:
            text = json.dumps(value, ensure_ascii=False, allow_nan=False)
        except ValueError:
            return "NaN or Infinity, which JSON has no number for (null says there is no value)"
        return "a lone surrogate: half of a character, which cannot be stored as UTF-8" if surrogate_problem(
            text, "") else None

    if unstorable(metadata) is None:
        return
    field, problem = next((name, why) for name, value in metadata.items() if (why := unstorable([name, value])))
    raise ValueError(f"field {field!r} of the metadata holds {problem}")


def _nesting(value) -> int:
    """Levels of objects and lists in ``value`` (0 for a scalar), counted one level at a time (no recursion: the
    stack is what too deep a value overflows), stopping once past :data:`MAX_METADATA_DEPTH`."""
    depth, level = 0, [value]
    while depth <= MAX_METADATA_DEPTH:
        containers = [each for each in level if isinstance(each, (dict, list, tuple))]
        if not containers:
            return depth
        depth += 1
        level = [item for each in containers for item in (each.values() if isinstance(each, dict) else each)]
    return depth


def _read_rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    """The non-blank rows of a TSV or CSV file (:func:`_delimiter`) with the line each starts on."""

    def decoded(handle) -> Iterator[str]:
        for line_number, raw in enumerate(handle, 1):
            try:
                yield raw.decode("utf-8-sig" if line_number == 1 else "utf-8")  # tolerate a BOM
            except UnicodeDecodeError as exc:
                raise DataFormatError(f"invalid UTF-8 at byte {exc.start} of the line", path, line_number) from None

    delimiter = _delimiter(path)
    # the csv module refuses fields over 128 KiB by default (a process-wide limit): documents are cut at
    # MAX_DOC_CHARS with a warning instead, as JSONL ones are
    csv.field_size_limit(max(csv.field_size_limit(), CSV_FIELD_LIMIT))
    with open_data_file(path) as handle:
        # TSV: no quoting, one row per physical line (a quote is text); CSV: as spreadsheets write it, a quoted
        # field may hold commas, doubled quotes and line breaks
        rows = csv.reader(decoded(handle), delimiter=delimiter,
                          quoting=csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL, strict=True)
        ended = 0
        while True:
            try:
                row = next(rows)
            except StopIteration:
                return
            except csv.Error as exc:
                what = "not CSV as spreadsheets write it" if delimiter == "," else "unreadable TSV"
                raise DataFormatError(f"{what} ({exc})", path, ended + 1) from None
            started, ended = ended + 1, rows.line_num
            if row and any(cell.strip() for cell in row):
                yield started, row


CSV_FIELD_LIMIT = 2**31 - 1
"""The longest field the TSV and CSV readers take (the csv module's limit, a C long's largest on every platform)."""

BEIR_SUFFIXES = (".jsonl", ".jsonl.gz", ".tsv", ".tsv.gz", ".csv", ".csv.gz")
"""What a BEIR folder's ``corpus`` and ``queries`` files may be (the first found is read)."""


def beir_file(folder: Path, stem: str) -> Path:
    """A BEIR folder's ``corpus`` or ``queries`` file: ``STEM.jsonl``, gzipped or TSV (:data:`BEIR_SUFFIXES`, the
    first there); ``STEM.jsonl`` (to name) when there is none."""
    for suffix in BEIR_SUFFIXES:
        if (folder / f"{stem}{suffix}").is_file():
            return folder / f"{stem}{suffix}"
    return folder / f"{stem}.jsonl"


def corpus_file(path: str | Path) -> Path:
    """A corpus file, a BEIR folder's corpus (:func:`beir_file`), or a folder of documents (itself: one with no
    corpus file that holds document files, :mod:`semiret.data.folder`)."""
    path = Path(path)
    if not path.is_dir():
        return path
    corpus = beir_file(path, "corpus")
    return path if not corpus.is_file() and holds_documents(path) else corpus


def _read_corpus_file(path: str | Path) -> Path:
    """:func:`corpus_file`, which must be there to read: a folder with neither a corpus file nor documents is a
    clear error."""
    corpus = corpus_file(path)
    if corpus != Path(path) and not corpus.exists():
        raise DataFormatError(f"no corpus file (corpus.jsonl, .tsv or .csv) and no documents ({DOCUMENT_KINDS} "
                              "files) in this folder", path)
    return corpus


DELIMITERS = {".tsv": "\t", ".tab": "\t", ".txt": "\t", ".csv": ","}
"""The files read as rows of columns, by suffix, and what separates their columns."""
QUERY_ID_HEADERS = ("qid", "query-id", "query_id", "queryid")
QUERY_TEXT_HEADERS = ("query", "question")
DOCUMENT_ID_HEADERS = ("docno", "corpus-id", "corpus_id")
"""Other names a TSV or CSV corpus's header gives its id column (TREC's, MS MARCO's and Pyserini's, BEIR's qrels')."""
CORPUS_COLUMNS = (DOCUMENT_ID_FIELDS + DOCUMENT_ID_HEADERS, TEXT_FIELDS, ("title",), "id<TAB>text[<TAB>title]")
QUERY_COLUMNS = (ID_FIELDS + QUERY_ID_HEADERS, TEXT_FIELDS + QUERY_TEXT_HEADERS, (), "id<TAB>text")
"""A TSV or CSV file's columns: the names a header may give the id, the text and the title, and the layout without
one (``<TAB>`` standing for the file's delimiter)."""


def _delimiter(path: Path) -> str | None:
    """What separates a TSV or CSV file's columns (by its name); None for any other file (read as JSONL) and for a
    folder of documents."""
    return None if path.is_dir() else DELIMITERS.get(format_suffix(path))


def _header_columns(row: list[str], columns) -> tuple[int | None, int | None, int | None]:
    """The positions of the id, text and title columns a TSV or CSV file's first row names (in any order, in any
    case; other columns, named as they may be, even empty, are left unread): all None when the row names no id
    column (it holds a document or a query)."""
    names = [cell.strip().lower() for cell in row]
    position = {name: i for i, name in reversed(list(enumerate(names)))}  # the first of a repeated name
    found = [next((position[n] for n in group if n in position), None) for group in columns[:3]]
    return (None, None, None) if len(names) < 2 or found[0] is None else (found[0], found[1], found[2])


def _cell_value(cell: str):
    """A TSV or CSV cell as a metadata value: a number or true/false as written in JSON is that value (as
    ``--filter year=2020`` reads it), anything else its text (``00123`` stays text)."""
    try:
        value = json.loads(cell)
    except ValueError:
        return cell
    return value if isinstance(value, (bool, int)) or (isinstance(value, float) and math.isfinite(value)) else cell


@dataclass
class _FieldNotes:
    """What a corpus reader learns of the fields it does not read: the other fields of the first record (or a
    header's other columns), those of them ``metadata_fields`` leaves out, and the names of ``metadata_fields`` it
    found to keep."""

    unread: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)
    kept: set[str] = field(default_factory=set)


def _row_records(path: Path, columns, fields: CorpusFields | None = None, notes: _FieldNotes | None = None,
                 recorded: frozenset[str] = frozenset()) -> Iterator[tuple[int, str, str, str, dict | None]]:
    """``(line, id, text, title, metadata)`` of each row of a TSV or CSV file: columns by position (the layout of
    ``columns``), or by the names of a first row naming them, which also names the columns ``fields`` lifts into
    each row's metadata (:func:`_cell_value`; an empty cell is no value) and those left unread (``notes``). A row
    with more columns than that is an error rather than a text cut at its first tab (or comma). ``fields``: a
    corpus's (None: a queries file's), read by position where no first row names its columns, as
    :func:`_check_positional` says (``recorded``: the options of ``fields`` that are an index's record, not asked
    for)."""
    delimiter = _delimiter(path)
    layout = columns[3].replace("<TAB>", "<TAB>" if delimiter == "\t" else delimiter)
    named, width, lifted = (), columns[3].count("<TAB>") + 1, []  # no header: by position
    reading = fields or CorpusFields()
    rows = _read_rows(path)
    first = next(rows, None)
    header = (None, None, None) if first is None else _header_columns(first[1], columns)
    if header[0] is not None:
        header_line, row = first
        if header[1] is None and header[2] is None:
            raise DataFormatError(f"the first row names an id column but no text column ({', '.join(columns[1])}) "
                                  "nor a title: name the column of the texts so"
                                  + (", or name it with --text-field (text_field)" if fields is not None else ""),
                                  path, header_line)
        named, width = header, len(row)
        others, seen = {}, set()  # the other columns' names and positions: the first of a name, in any case
        for k, name in enumerate(cell.strip() for cell in row):
            if k not in named and name.lower() not in seen and reading.others([name], header=True):
                others[name] = k
                seen.add(name.lower())
        lifted = [(name, others[name]) for name in reading.kept(others, header=True)]
        if notes is not None:
            notes.unread.extend(others)
            notes.left_out.extend(name for name in others if name not in dict(lifted))
            kept = {name.lower() for name, _ in lifted}
            notes.kept.update(name for name in reading.metadata_fields or () if name.lower() in kept)
    elif first is not None:
        ahead = [first, *itertools.islice(rows, fields is not None)]  # (a corpus's second row tells a header)
        if fields is not None:
            _check_positional(path, ahead, columns, fields, recorded)
        rows = itertools.chain(ahead, rows)
    for line, row in rows:
        if named:
            if len(row) > width:
                raise DataFormatError(f"{len(row)} columns, but the header on line {header_line} names {width}",
                                      path, line)
            reached = [k is not None and k < len(row) for k in named]  # (id, text, title): a row cut short
            if not reached[0] or not (reached[1] or reached[2]):  # no id, or neither a text nor a title (as JSONL's)
                raise DataFormatError(f"{len(row)} of the {width} columns the header on line {header_line} names: "
                                      f"no {'id' if not reached[0] else 'text or title'} cell", path, line)
            metadata = {name: _cell_value(row[k]) for name, k in lifted if k < len(row) and row[k]}
            yield line, *(row[k] if k is not None and k < len(row) else "" for k in named), metadata or None
        else:
            if not 2 <= len(row) <= width:
                if len(row) > width:
                    hint = (" (a text holding a tab? Name the columns in a first row, or use JSONL)"
                            if delimiter == "\t" else " (a text holding a comma? Quote it, as spreadsheets do, or "
                                                       "name the columns in a first row)")
                elif delimiter == "," and ";" in row[0]:
                    hint = " (columns separated by semicolons? Save the file with commas, or as TSV)"
                else:
                    hint = (" (plain text, one document? Give the folder holding it: each file under a folder of "
                            "documents is one)" if fields is not None else
                            " (one query a line? Give each its id: id<TAB>text)") * (format_suffix(path) == ".txt")
                raise DataFormatError(f"expected '{layout}', got {len(row)} column{'s' * (len(row) != 1)}{hint}",
                                      path, line)
            yield line, row[0], row[1], row[2] if len(row) > 2 else "", None


COLUMN_NAME = re.compile(r"[^\W\d]+(?:[ ._-][^\W\d]+){0,3}")
"""A cell of a TSV or CSV file's first row that reads as a column's name: a few words without digits (``content``,
``Full Text``), as a header's names are, above rows whose ids are numbered."""


_SAID_OF_FILES: set[str] = set()
"""The warnings about a file's rows said already (:func:`~semiret.errors.warn_once`): a file read again (a sync
reads it twice, a repeated id's first line is looked up by reading it again, a watch reads it every pass) is warned
of once."""


def _check_positional(path: Path, ahead: list[tuple[int, list[str]]], columns, fields: CorpusFields,
                      recorded: frozenset[str]) -> None:
    """Before a corpus file's rows are read by position: refuse the fields ``fields`` names that were asked for (not
    ``recorded``: an index's record), since they are columns a first row names; warn, once per file, when the first
    row (of ``ahead``, the first two) reads as column names above a numbered document (``doc,content`` above
    ``T-5,Login fails``: a header naming no id column, indexed as a document) unless the fields are an index's
    record (an add to a corpus indexed before, whose ids may well be words)."""
    line, row = ahead[0]
    asked = [name for name in FIELD_OPTIONS if getattr(fields, name) is not None and name not in recorded]
    if asked:
        what = "metadata fields" if "metadata_fields" in asked else "the id and text fields (--id-field, --text-field)"
        raise DataFormatError(f"{what} are columns a first row names, and this file's first row names no id column "
                              f"({', '.join(columns[0])}) beside a text ({', '.join(columns[1])}) or title column",
                              path, line)
    if not recorded and len(row) > 1 and len(ahead) > 1 and all(COLUMN_NAME.fullmatch(cell.strip()) for cell in row) \
            and any(character.isdigit() for character in ahead[1][1][0]):
        header = _delimiter(path).join(["id", "text"]).replace("\t", "<TAB>")
        warn_once(log, f"{path}:{line}: the first row reads as column names "
                       f"({', '.join(cell.strip() for cell in row)}), but none is an id column (one of "
                       f"{', '.join(columns[0])}; the text's: one of {', '.join(columns[1])}), so it was indexed as a "
                       f"document of id {row[0]!r}: if it names the columns, name them so in a header row ({header}), "
                       "or give --id-field and --text-field (id_field, text_field) naming yours", _SAID_OF_FILES)


READ_CHUNK = 256
"""Documents the corpus reader parses before it checks their ids against those read (one compiled call); each is
cut to :data:`MAX_DOC_CHARS` as it is read, so a chunk holds at most 256 M characters."""


def iter_corpus(path: str | Path, metadata_fields: Sequence[str] | None = None,
                skip_ids: Container[str] = (), folder: bool = False,
                recorded_fields: bool | Iterable[str] = False, id_field: str | None = None,
                text_field: str | None = None) -> Iterator[Document]:
    """Stream documents from a JSONL corpus (BEIR or Pyserini field names: :func:`record_document`) or a TSV or CSV
    file (``id<TAB>text[<TAB>title]``, or columns named by a first row), either gzipped or not. ``metadata_fields``
    names the other fields (columns) to keep in each document's metadata (``["*"]``: all of them); without it, the
    other fields of the first document are named in a warning. ``id_field`` and ``text_field`` name the field (the
    column a first row names) holding each document's id and text, in place of the names read by default
    (:class:`CorpusFields`; not of a folder of documents, whose files' paths are their ids). ``skip_ids``: the
    documents of a folder of documents not to read (their files unchanged: ``Retriever.sync_folder``); other corpora
    take none. ``folder``: ``path`` is a folder of documents, read even when it holds none now (its files all
    removed: a sync deletes their documents).
    ``recorded_fields``: the fields named are those an index was built with (``semiret add``), not asked for (True:
    all of them; or the names, of :data:`FIELD_OPTIONS`, of those that are), so a TSV or CSV file without a first
    row naming its columns is read by position (its columns' names unused), and a folder of documents without the
    id and text fields, rather than refused as they are where asked for.

    A TSV or CSV file's first row that names no id column is read as a document, by position; where it reads as
    column names above a numbered document (``doc,content`` above ``T-5,...``: likely a header of other names) and
    no field is recorded, a warning (once per file) names the file and line, the id it was indexed under and how to
    name the columns.

    Raises :class:`DataFormatError` for malformed lines, missing fields and duplicate ids (kept as hashes,
    :class:`~semiret.data.ids.IdHashSet`: 16 to 32 bytes a document; a repeat is confirmed, and its first line found,
    by reading the file again).
    """
    path = Path(path) if folder else _read_corpus_file(path)
    recorded = frozenset(FIELD_OPTIONS if recorded_fields is True else recorded_fields or ())
    if path.is_dir():
        check_folder_fields(path, *(name for name, value in (("id_field", id_field), ("text_field", text_field))
                                    if value is not None and name not in recorded))
        id_field = text_field = None  # (recorded: an index built from a file, synced with a folder)
    fields = CorpusFields(metadata_fields, id_field, text_field)
    metadata_fields = fields.metadata_fields
    if skip_ids and not path.is_dir():
        raise SemiretError("skip_ids are the documents of a folder of documents not to read; a corpus file is read "
                           "whole")
    seen = IdHashSet()
    truncated, first_truncated, spaced, first_spaced, notes = 0, None, 0, None, _FieldNotes()
    awaited = set(metadata_fields or ()) - {EVERY_FIELD}  # named fields no document has yet (top level or metadata)
    malformed: list[DataFormatError] = []  # a bad line: raised once the documents before it are given

    def until_malformed() -> Iterator[tuple[int, Document]]:
        nonlocal truncated, first_truncated
        try:
            for line, document in _corpus_records(path, fields, notes, skip_ids, recorded):
                if len(document.text) > MAX_DOC_CHARS:
                    truncated, first_truncated = truncated + 1, first_truncated or document.id
                    document = replace(document, text=document.text[:MAX_DOC_CHARS])
                yield line, document
        except DataFormatError as error:
            malformed.append(error)

    for chunk in batched(until_malformed(), READ_CHUNK):
        repeat = next(((int(position), first) for position in seen.add_many([d.id for _, d in chunk])
                       if (first := _first_line_of(path, fields, recorded, chunk[position][1].id,
                                                   chunk[position][0]))
                       is not None),
                      (-1, None))  # the first hash seen before that is the same id: a repeat
        for position, (line, document) in enumerate(chunk):
            problem = document_id_problem(document.id)
            if problem is not None:
                raise DataFormatError(problem, path, line)
            if position == repeat[0]:
                raise DataFormatError(f"duplicate document id {document.id!r} (first seen on line {repeat[1]})",
                                      path, line)
            if " " in document.id:
                spaced, first_spaced = spaced + 1, first_spaced or document.id
            if awaited and document.metadata:
                awaited.difference_update(document.metadata)
            yield document
    if malformed:
        raise malformed[0]
    if truncated:
        log.warning("%s: %d document%s longer than %d characters cut there (the stored text too; e.g. %r): split "
                    "such documents before indexing them to keep all of their text", path, truncated,
                    "" if truncated == 1 else "s", MAX_DOC_CHARS, first_truncated)
    if spaced and not path.is_dir():  # searchable and served all the same; only the whitespace-separated evaluation
        # files cannot name them (a folder's files' names: spaces are no news there)
        log.warning("%s: %d document ids hold a space (e.g. %r): TREC runs and qrels cannot name them (search --json "
                    "can)", path, spaced, first_spaced)
    left_out = notes.left_out
    if left_out:
        named = ",".join(left_out[:8]) if metadata_fields is None else ",".join([*metadata_fields, *left_out[:8]])
        warn(log, left_out_warning(str(path), left_out, f"metadata_fields (semiret index and add: --metadata-fields "
                                                       f"{named}, or {EVERY_FIELD} for all) keeps them as metadata, "
                                                       "to filter on"))
    missed = [name for name in metadata_fields or () if name in awaited and name not in notes.kept
              and not skip_ids]  # (the documents not read may hold it)
    if "metadata_fields" in recorded and notes.kept:  # the index's record, some of it held: documents added need
        missed = []  # not hold every field an index keeps (optional metadata)
    if missed:
        log.warning("%s: no document has the field%s %s kept as metadata (metadata_fields, or a field text_fields "
                    "reads; fields read as the id, text or title are not kept; %s)", path, "s" * (len(missed) > 1),
                    ", ".join(map(repr, missed)),
                    f"the fields of the first document not kept: {', '.join(map(repr, left_out))}" if left_out else
                    "the first document's other fields are all kept" if notes.unread else
                    "the first document holds no other field")


def _corpus_records(path: Path, fields: CorpusFields, notes: _FieldNotes | None = None,
                    skip_ids: Container[str] = (), recorded: frozenset[str] = frozenset()
                    ) -> Iterator[tuple[int, Document]]:
    """``(line, document)`` for each record of a corpus file (of a folder's files, those ``skip_ids`` does not name)
    read with ``fields``, ids not checked yet; what ``notes`` learns of the fields it does not read, when given
    (``recorded``: the options of ``fields`` that are an index's record, :func:`iter_corpus`'s)."""
    metadata_fields = fields.metadata_fields
    if _delimiter(path):
        for line, doc_id, text, title, metadata in _row_records(path, fields.columns(), fields, notes, recorded):
            yield line, Document(doc_id, text, title, metadata)
    else:
        first, folder = True, path.is_dir()
        for line, record in (_folder_records(path, skip_ids) if folder else
                             ((line, record) for line, _, record in iter_jsonl(path))):
            if notes is not None:
                if first or folder:  # (a folder's documents' front matters differ: each one's fields are read)
                    notes.unread.extend(name for name in fields.others(record) if name not in notes.unread)
                    notes.left_out.extend(name for name in fields.unread(record) if name not in notes.left_out)
                if metadata_fields and EVERY_FIELD not in metadata_fields:
                    notes.kept.update(name for name in metadata_fields
                                      if name in record and name not in fields.read_names)
            first = False
            try:
                yield line, record_document(record, fields)
            except ValueError as exc:
                if not folder:
                    raise DataFormatError(str(exc), path, line) from None
                # a file's front matter holds what no index stores: that file skipped, as one that cannot be read
                log.warning("%s: %r skipped (its front matter: %s)", path, record["_id"], exc)


def check_folder_fields(path: Path, *asked: str) -> None:
    """Refuse the id and text fields ``asked`` (``"id_field"``, ``"text_field"``) of a folder of documents at
    ``path``: each file is one document, its path the id."""
    if asked:
        raise SemiretError(f"{path} is a folder of documents, each file one, its path the id: "
                           f"{' and '.join(asked)} ({', '.join('--' + name.replace('_', '-') for name in asked)}) "
                           f"name{'s' * (len(asked) == 1)} a field of a JSONL, TSV or CSV corpus's records")


def _folder_records(folder: Path, skip_ids: Container[str] = ()) -> Iterator[tuple[int, dict]]:
    """A folder's documents (:func:`~semiret.data.folder.folder_documents`, those of ``skip_ids`` not read) as JSONL
    records: ``(position, record)``, the file's fields its ``metadata`` object (kept, as a record's is), a front
    matter's fields the record's other fields (kept as ``metadata_fields`` says), those that a record's id, text or
    metadata would be read from left out."""
    for position, doc_id, text, title, file_fields, front_matter in folder_documents(folder, skip_ids):
        yield position, {name: value for name, value in front_matter.items() if name not in READ_FIELDS} | {
            "_id": doc_id, "title": title, "text": text, "metadata": file_fields}


def _first_line_of(path: Path, fields: CorpusFields, recorded: frozenset[str], doc_id: str,
                   before: int) -> int | None:
    """The first line before ``before`` holding ``doc_id``, the file read again as it was read (with ``fields``, of
    which ``recorded`` are an index's record; its hash was seen: a repeat, or rarely another id of the same hash,
    then None)."""
    for line, document in _corpus_records(path, fields, recorded=recorded):
        if line >= before:
            return None
        if document.id == doc_id:
            return line
    return None


def count_documents(path: str | Path, id_field: str | None = None, text_field: str | None = None) -> int:
    """How many documents :func:`iter_corpus` will read from a corpus file (its non-blank lines, less a TSV
    header; a CSV file's rows, whose quoted fields may span lines), without parsing them: a progress bar's total,
    and what an index that cannot hold them all checks before encoding any. ``id_field``, ``text_field``: the
    columns a header names, as :func:`iter_corpus` takes them."""
    columns = CorpusFields(id_field=id_field, text_field=text_field).columns()
    path = _read_corpus_file(path)
    if path.is_dir():
        return len(document_files(path)[0])
    delimiter = _delimiter(path)
    if delimiter == ",":
        rows = _read_rows(path)
        first = next(rows, None)
        return (first is not None and _header_columns(first[1], columns)[0] is None) + sum(1 for _ in rows)
    tsv = delimiter is not None
    count, first = 0, None
    with open_data_file(path) as handle:
        for raw in handle:  # blank as the reader finds it (str.strip: Unicode's spaces too, a no-break space)
            if raw.strip() and (raw.isascii() or raw.decode("utf-8", "replace").strip()):
                count += 1
                first = raw if first is None else first
    header = (first is not None and tsv and _header_columns(
        first.decode("utf-8-sig", "replace").rstrip("\r\n").split("\t"), columns)[0] is not None)
    return count - header


def query_texts(queries) -> list[str]:
    """The texts of a search's ``queries`` (a string: one; a list or another sequence of strings: each), checked:
    a dict (``read_queries``' ``{id: text}``) or a table would give its keys or column names, a set no order, so
    they are refused, saying what to pass; a text no file can hold (a lone surrogate) is refused naming it."""
    if isinstance(queries, str):
        texts = [queries]
    elif isinstance(queries, Mapping) or hasattr(queries, "columns"):
        raise SemiretError(f"queries is a {type(queries).__name__} (its keys would be searched): pass its texts, "
                           "search(list(queries.values())), and name the hits' queries with "
                           ".as_run(list(queries))")
    elif isinstance(queries, (set, frozenset, bytes, bytearray)) or not isinstance(queries, Iterable):
        raise SemiretError(f"queries must be a string or a list of strings, got {type(queries).__name__}")
    else:
        texts = list(queries)
    for position, text in enumerate(texts):
        if not isinstance(text, str):
            raise SemiretError(f"queries must be strings, got {type(text).__name__} (query {position})")
        problem = surrogate_problem(text, f"query {position}")
        if problem is not None:
            raise SemiretError(problem)
    return texts


def query_vectors(queries, token_vectors: bool | None = False
                  ) -> tuple[list[np.ndarray] | list[dict[str, float]], bool] | None:
    """A search's ``queries`` given as vectors (an index of vectors', searched as they are; :func:`query_texts` reads
    texts): a 1-D array or a list of numbers is one query, a 2-D array or a list of such lists a batch; an object
    ``{term: weight}`` (a dict) is one sparse query, a list of them a batch. With ``token_vectors`` (an index of the
    ``multivectors`` retriever, whose queries are token vectors, a row each): a 2-D array or a list of lists of
    numbers is one query, a 3-D array or a list of arrays (or of lists of lists) a batch; ``None``: token vectors
    where they nest three deep (what a caller that knows not the index reads). Returns the vectors checked
    (:func:`document_vector`, :func:`sparse_vector`: a sparse one may hold no term then, its weights all 0) and
    whether one was given alone; None where ``queries`` are not vectors (a dict of texts, ``{id: text}``, is left to
    :func:`query_texts` to refuse)."""
    if isinstance(queries, Mapping) and all(isinstance(value, numbers.Real) for value in queries.values()):
        rows, single = [queries], True  # (a dict of texts or arrays, {id: query}, is left to query_texts to refuse)
    elif isinstance(queries, (list, tuple)) and queries and all(isinstance(q, Mapping) for q in queries):
        rows, single = list(queries), False
    else:
        rows = None
    if rows is not None:
        try:
            return [sparse_vector(row, "the query vector" if single else f"query vector {position}")
                    for position, row in enumerate(rows)], single
        except ValueError as exc:
            raise SemiretError(str(exc)) from None
    if token_vectors is None:
        token_vectors = _nests_three_deep(queries)
    dims = 2 if token_vectors else 1  # of one query
    if isinstance(queries, np.ndarray) and queries.dtype.kind in "fiu":  # (an array of strings holds texts)
        if queries.ndim not in (dims, dims + 1):
            raise SemiretError(("query token vectors are one query's [tokens, dim] matrix or a batch of them"
                                if token_vectors else "query vectors are one vector or a matrix of them, one per row")
                               + f", got shape {queries.shape}")
        rows, single = ([queries], True) if queries.ndim == dims else (list(queries), False)
    elif isinstance(queries, (list, tuple)) and queries and not any(isinstance(q, str) for q in queries):
        first = queries[0]  # (token vectors: a list of lists of numbers is one query; a list of arrays, a batch)
        single = all(isinstance(q, numbers.Real) for q in queries) or bool(token_vectors) and isinstance(
            first, (list, tuple)) and all(isinstance(x, numbers.Real) for x in first)
        rows = [queries] if single else list(queries)
    else:
        return None
    vectors = []
    for position, row in enumerate(rows):
        name = "the query vector" if single else f"query vector {position}"
        try:
            vector = document_vector(row, name)
        except ValueError as exc:
            raise SemiretError(str(exc)) from None
        if vector.ndim != dims:
            raise SemiretError(f"{name} is a [tokens, dim] matrix of token vectors (what an index of the "
                               "multivectors retriever is searched by) among flat vectors: a batch holds queries of "
                               "one kind" if not token_vectors else
                               f"{name} is one flat vector; an index of the multivectors retriever is searched by "
                               "each query's token vectors, a [tokens, dim] matrix (a list of lists of numbers)")
        vectors.append(vector)
    return vectors, single


def _nests_three_deep(queries) -> bool:
    """Whether ``queries`` are a 3-D array, or a list whose first item is a matrix (an array, or a list of lists)."""
    if isinstance(queries, np.ndarray):
        return queries.ndim == 3
    first = queries[0] if isinstance(queries, (list, tuple)) and queries else None
    if isinstance(first, np.ndarray):
        return first.ndim == 2
    return isinstance(first, (list, tuple)) and bool(first) and isinstance(first[0], (list, tuple, np.ndarray))


def read_queries(path: str | Path) -> dict[str, str]:
    """Read queries from BEIR ``queries.jsonl`` or a TSV or CSV file (``id<TAB>text``, or columns named by a first
    row), either gzipped or not, as ``{id: text}``."""
    path = Path(path)
    if path.is_dir():
        path = beir_file(path, "queries")
    queries: dict[str, str] = {}
    if _delimiter(path):
        rows = ((line, query_id, text) for line, query_id, text, *_ in _row_records(path, QUERY_COLUMNS))
    else:
        def fields(record: dict, line: int) -> tuple[int, str, str]:
            try:
                return line, _required(record, ID_FIELDS, "id"), _required(record, TEXT_FIELDS, "text")
            except ValueError as exc:
                raise DataFormatError(str(exc), path, line) from None

        rows = (fields(record, line) for line, _, record in iter_jsonl(path))
    for line, query_id, text in rows:
        if query_id in queries:
            raise DataFormatError(f"duplicate query id {query_id!r}", path, line)
        queries[query_id] = text
    return queries


def read_query_vectors(path: str | Path) -> dict[str, np.ndarray] | dict[str, dict[str, float]]:
    """Read queries given as vectors from a JSONL file (gzipped or not), one ``{"_id": ..., "vector": [...]}`` per
    line (an ``id`` field of :data:`ID_FIELDS`; other fields, a text say, are left unread), as ``{id: vector}``; the
    vectors all dense and of one dimension, all token vectors (``"vector": [[...], ...]``, a matrix each) of one
    dimension, or all sparse (``"vector": {"term": weight, ...}``, as :func:`sparse_vector` reads them). Errors name
    the file and line."""
    path = Path(path)
    if _delimiter(path):
        raise DataFormatError(f"query vectors are read from JSONL (one {{\"_id\", \"{VECTOR_FIELD}\"}} object a "
                              "line), not a table", path)
    queries: dict[str, np.ndarray] = {}
    for line, _, record in iter_jsonl(path):
        try:
            query_id = _required(record, ID_FIELDS, "id")
            if record.get(VECTOR_FIELD) is None:
                raise ValueError(f"missing {VECTOR_FIELD!r} field (the query's vector)")
            vector = brought_vector(record[VECTOR_FIELD])
        except ValueError as exc:
            raise DataFormatError(str(exc), path, line) from None
        if query_id in queries:
            raise DataFormatError(f"duplicate query id {query_id!r}", path, line)
        first = next(iter(queries.values()), vector)
        if vector_kind(vector) != vector_kind(first):
            this, other = (VECTOR_KINDS[vector_kind(v)] for v in (vector, first))
            raise DataFormatError(f"a vector {this}; the file's first is {other}: a file holds vectors of one kind",
                                  path, line)
        if not isinstance(vector, dict) and vector.shape[-1] != first.shape[-1]:
            raise DataFormatError(f"a {vector.shape[-1]}-dimensional vector; the file's first is "
                                  f"{first.shape[-1]}-dimensional", path, line)
        queries[query_id] = vector
    return queries


QRELS_HEADER = (("query-id", "query_id", "qid", "query"),
                ("corpus-id", "corpus_id", "doc-id", "doc_id", "docid", "docno"),  # docno: TREC's own name
                ("score", "relevance", "grade", "label", "rel", "judgment"))
"""The names a qrels header may give its query, document and grade columns (BEIR's first); other columns are left
unread."""


def _qrels_header(fields: list[str], path: Path, line_number: int) -> tuple[int, int, int]:
    """The columns of the query id, the document id and the grade a qrels header names; an error when it names them
    not all, or one twice."""
    lowered = [f.lower() for f in fields]
    found = []
    for names in QRELS_HEADER:
        at = [i for i, name in enumerate(lowered) if name in names]
        if len(at) != 1:
            raise DataFormatError(f"the header {' '.join(fields)!r} does not name one {names[0]} column (a qrels header "
                                  "names query-id, corpus-id and score, in any order)", path, line_number)
        found.append(at[0])
    return tuple(found)


def read_qrels(path: str | Path) -> dict[str, dict[str, int]]:
    """Read relevance judgements as ``{query_id: {doc_id: grade}}``.

    Accepts the BEIR TSV (``query-id corpus-id score`` with a header, whose names say which column is which, others
    left unread) and TREC qrels
    (``qid iteration docid grade``, whitespace-separated), either gzipped or not. Grades are integers (``2`` or
    ``2.0``); a fractional grade, or a query-document pair judged twice with two grades, is an error naming the
    line rather than a judgement changed without a word.
    """
    path = Path(path)
    qrels: dict[str, dict[str, int]] = {}
    judged_on: dict[tuple[str, str], int] = {}
    first, named, width = True, None, 0
    with open_data_file(path) as handle:
        for line_number, raw in enumerate(handle, 1):
            try:
                fields = raw.decode("utf-8-sig" if line_number == 1 else "utf-8").split()
            except UnicodeDecodeError:
                raise DataFormatError("invalid UTF-8", path, line_number) from None
            if not fields:
                continue
            if first and {f.lower() for f in fields} & {name for names in QRELS_HEADER for name in names}:
                first, named, width = False, _qrels_header(fields, path, line_number), len(fields)
                continue  # a header (BEIR's): its names say which column is which
            first = False
            if named is not None:
                if len(fields) != width:
                    raise DataFormatError(f"{len(fields)} columns, but the header names {width}", path, line_number)
                query_id, doc_id, grade = (fields[i] for i in named)
            elif len(fields) == 3:
                query_id, doc_id, grade = fields
            elif len(fields) == 4:
                query_id, _, doc_id, grade = fields
            else:
                comma = ("; commas separate none: convert a CSV file to tab-separated columns"
                         if len(fields) < 3 and any("," in f for f in fields) else "")
                raise DataFormatError(f"expected 3 (BEIR) or 4 (TREC) columns, got {len(fields)} (columns are "
                                      f"separated by tabs or spaces{comma})", path, line_number)
            try:
                number = float(grade)
                value = int(number)
            except (ValueError, OverflowError):  # NaN, text / inf
                raise DataFormatError(f"relevance grade {grade!r} is not a number", path, line_number) from None
            if value != number:
                raise DataFormatError(f"relevance grade {grade!r} is not a whole number (grades are 0, 1, 2, ...)",
                                      path, line_number)
            judged = qrels.setdefault(query_id, {})
            if doc_id in judged and judged[doc_id] != value:
                raise DataFormatError(f"query {query_id!r} and document {doc_id!r} were judged {judged[doc_id]} on "
                                      f"line {judged_on[query_id, doc_id]} and {value} here", path, line_number)
            judged[doc_id] = value
            judged_on[query_id, doc_id] = line_number
    return qrels


@dataclass
class Collection:
    """A BEIR-layout test collection on disk: a folder, or a dataset's name under the shared data (``scifact``),
    as the CLI's ``--data`` takes it. ``queries_file`` and ``qrels_file`` (the CLI's ``--queries``, ``--qrels``)
    read queries and judgements from files of their own instead of the folder's ``queries.jsonl`` and
    ``qrels/<split>.tsv``; with a ``queries_file``, ``root`` may be a corpus file rather than a folder, as
    Pyserini takes a corpus, topics and qrels apart."""

    root: Path
    queries_file: Path | None = None
    qrels_file: Path | None = None
    query_vectors: bool = False
    """The queries file holds each query's vector, not its text (:func:`read_query_vectors`; ``--query-vectors``):
    :meth:`queries` gives ``{id: vector}``, for an index of vectors (dense or sparse) searched by vectors made
    elsewhere."""

    def __post_init__(self):
        from semiret.data.paths import dataset

        self.root = dataset(str(self.root))
        self.queries_file = Path(self.queries_file) if self.queries_file is not None else None
        self.qrels_file = Path(self.qrels_file) if self.qrels_file is not None else None
        if self._corpus_apart:
            if self.queries_file is None:
                what = "a corpus file" if self.root.is_file() else "a folder of documents"
                raise DataFormatError(f"{what}, not a BEIR folder: give its queries and judgements too (--queries "
                                      "FILE --qrels FILE)", self.root)
        elif not self.corpus_path.is_file():
            raise DataFormatError("not a BEIR collection (no corpus.jsonl, .jsonl.gz, .tsv or .tsv.gz)", self.root)
        for path in (self.queries_file, self.qrels_file):
            if path is not None and not path.is_file():
                raise DataFormatError("file not found", path)

    @property
    def name(self) -> str:
        return self.root.name.split(".")[0] if self.root.is_file() else self.root.name

    @property
    def corpus_path(self) -> Path:
        return corpus_file(self.root)

    @property
    def _corpus_apart(self) -> bool:
        """Whether the corpus is a file or a folder of documents rather than a BEIR folder's: its queries and
        judgements are files of their own."""
        return self.corpus_path == self.root

    def corpus(self, metadata_fields: Sequence[str] | None = None) -> Iterator[Document]:
        """The documents, each line's ``metadata_fields`` kept in its metadata (:func:`iter_corpus`)."""
        return iter_corpus(self.corpus_path, metadata_fields or None)

    def splits(self) -> list[str]:
        return sorted(p.stem for p in (self.root / "qrels").glob("*.tsv")) if self.root.is_dir() else []

    def qrels_path(self, split: str) -> Path:
        return self.qrels_file or self.root / "qrels" / f"{split}.tsv"

    def judged_split(self, split: str) -> str | None:
        """The split whose judgements are read: None where a qrels file of its own is given (``--qrels``), which
        ``split`` then does not choose, so that figures are never labelled with a split they were not scored on."""
        return split if self.qrels_file is None else None

    @property
    def queries_path(self) -> Path:
        return self.queries_file or beir_file(self.root, "queries")

    def qrels(self, split: str) -> dict[str, dict[str, int]]:
        path = self.qrels_path(split)
        if not path.is_file():
            if self._corpus_apart:
                raise DataFormatError("no judgements: give them with --qrels FILE", self.root)
            raise DataFormatError(f"no qrels for split {split!r} (have: {', '.join(self.splits()) or 'none'})", path)
        return read_qrels(path)

    def queries(self, split: str | None = None) -> dict[str, str]:
        """Queries (their vectors, with :attr:`query_vectors`), restricted to those judged in ``split`` when one is
        given.

        Raises :class:`SemiretError` naming the qrels file when ``split`` judges no query with a text (an empty or
        header-only qrels file, or one whose queries are all missing from the queries file).
        """
        queries = read_query_vectors(self.queries_path) if self.query_vectors else read_queries(self.queries_path)
        if split is None:
            return queries
        judged = self.qrels(split)
        missing = [q for q in judged if q not in queries]
        selected = {q: queries[q] for q in judged if q in queries}
        if not selected:  # nothing to search or score: fail before any index is opened
            found = (f"none of its {len(judged)} judged query ids, e.g. {missing[0]!r}, is there" if judged
                     else "the file holds no judgements")
            raise SemiretError(f"{self.qrels_path(split)}: judges no query that {self.queries_path} has a text for "
                               f"({found})")
        if missing:
            log.warning("%d judged queries of %s have no text (e.g. %r); skipped", len(missing),
                        self.qrels_file or f"split {split!r}", missing[0])
        return selected


def searched_qrels(collection: "Collection", split: str,
                   queries: dict[str, str] | None = None) -> dict[str, dict[str, int]]:
    """``split``'s judgements of the queries that have a text (what ``eval`` searches and scores: a judged query
    without one cannot be searched, so it is left out of every mean rather than averaged as a 0;
    :meth:`Collection.queries` warns of them). ``queries``: the split's, where the caller has read them already
    (read once, its warning is given once). Saved runs are scored on every judged query (:func:`judgements`)."""
    queries = collection.queries(split) if queries is None else queries
    return {query_id: judged for query_id, judged in collection.qrels(split).items() if query_id in queries}



def judgements(data: str | Path | None, split: str,
               qrels_file: str | Path | None = None) -> tuple[dict[str, dict[str, int]], Path]:
    """The judgements saved runs are scored on (``compare``), and the file they were read from: ``qrels_file``
    (``--qrels``), else the BEIR folder ``data``'s ``qrels/<split>.tsv`` (``data`` as ``--data`` takes it: a
    folder, a name under the shared data, ``irds:ID``). Every judged query is kept, with a text or without, as
    trec_eval scores a run: no corpus and no query text is read (scoring a run needs neither)."""
    if qrels_file is not None:
        path = Path(qrels_file)
        if not path.is_file():
            raise DataFormatError("file not found", path)
    elif data is None:
        raise SemiretError("give the judgements: --qrels FILE, or --data COLLECTION (a BEIR folder: its "
                           "qrels/SPLIT.tsv)")
    else:
        from semiret.data.paths import dataset

        root = dataset(str(data))
        if not root.is_dir():
            raise DataFormatError("a corpus file, not a BEIR folder: give the judgements with --qrels FILE", root)
        path = root / "qrels" / f"{split}.tsv"
        if not path.is_file():
            have = sorted(p.stem for p in (root / "qrels").glob("*.tsv"))
            raise DataFormatError(f"no qrels for split {split!r} (have: {', '.join(have) or 'none'}; or give "
                                  "--qrels FILE)", path)
    qrels = read_qrels(path)
    if not qrels:
        raise DataFormatError("holds no judgements", path)
    return qrels, path

def corpus_shard(documents: Iterable[Document], shard: str, total: int | None = None) -> tuple[Iterable[Document], int]:
    """Shard ``i/n`` of ``documents`` and its size: the i-th of n contiguous slices (0-based, sizes differing by
    one at most), so shards 0..n-1 merged in order hold the corpus in its order. With the corpus's ``total``
    (:func:`count_documents`) the shard is read as it is indexed (the documents before it are skipped), else the
    corpus is held to count it."""
    bounds = _shard_bounds(shard)
    if total is None:
        documents = list(documents)
        total = len(documents)
    start, stop = bounds(total)
    return itertools.islice(documents, start, stop), stop - start


def read_shard(path: str | Path, shard: str, metadata_fields: Sequence[str] | None = None,
               id_field: str | None = None, text_field: str | None = None) -> tuple[Iterator[Document], int, dict]:
    """Shard ``i/n`` of the corpus at ``path`` (:func:`corpus_shard`), its size, and its record (``{"number": i,
    "count": n, "corpus_documents": ...}``: what ``build(shard=...)`` keeps for the shards' merge to check), read
    with ``metadata_fields``, ``id_field`` and ``text_field`` (:func:`iter_corpus`); a folder of documents is sliced
    by its files, and only the shard's own are read."""
    corpus = _read_corpus_file(path)
    number, count = _shard_numbers(shard)
    if not corpus.is_dir():
        total = count_documents(corpus, id_field, text_field)
        documents, size = corpus_shard(iter_corpus(corpus, metadata_fields, id_field=id_field, text_field=text_field),
                                       shard, total)
    else:
        ids = [file.relative_to(corpus).as_posix() for file in document_files(corpus)[0]]
        total = len(ids)
        start, stop = _shard_bounds(shard)(total)
        documents = iter_corpus(corpus, metadata_fields, skip_ids=set(ids[:start]) | set(ids[stop:]),
                                id_field=id_field, text_field=text_field)
        size = stop - start
    return documents, size, {"number": number, "count": count, "corpus_documents": total}


def _shard_numbers(shard: str) -> tuple[int, int]:
    """Shard ``i/n``'s ``(i, n)``, checked."""
    try:
        number, count = (int(part) for part in shard.split("/"))
    except ValueError:
        number = count = -1
    if not 0 <= number < count:
        raise SemiretError(f"a shard is i/n with 0 <= i < n (say 0/4), not {shard!r}")
    return number, count


def _shard_bounds(shard: str) -> Callable[[int], tuple[int, int]]:
    """Shard ``i/n`` (checked) as the bounds of its slice of a corpus of a given size."""
    number, count = _shard_numbers(shard)
    return lambda total: (total * number // count, total * (number + 1) // count)


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
