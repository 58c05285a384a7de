"""Searches restricted by the documents' stored metadata or words (``search(..., filter={...})``, ``--filter``, the API's
``filter``), in the shape of Qdrant's ``match`` and ``range`` conditions, written as one JSON object:

- ``{"source": "pubmed"}``: the field equals the value (a field holding a list matches when any element does);
- ``{"year": [2019, 2020]}``: any of the values;
- ``{"year": {"gte": 2019, "lt": 2024}}``: a range (``gt``, ``gte``, ``lt``, ``lte``; numbers with numbers, strings
  with strings; ISO 8601 dates and times, bounds and values, compare as instants, whatever their offsets, a time
  without one read as UTC, as Qdrant's datetime range does; Python ``date`` and ``datetime`` bounds too);
- ``{"doi": {"exists": true}}``: the document has the field (any value, null included; ``false``: it has not);
- several fields: all of them; ``"a.b"`` reads the field ``b`` inside the object ``a`` (inside each object of a list
  of objects: ``authors.name``);
- ``{"$or": [filter, ...]}``: any of the filters; ``{"$and": [...]}``: all; ``{"$not": filter}``: documents that fail
  it (a document without the field passes ``{"$not": {"source": "web"}}``, as Qdrant's ``must_not``). These keys sit
  beside field conditions, which they join with AND: ``{"year": {"gte": 2019}, "$not": {"source": "web"}}``;
- ``{"$text": "statin \\"heart failure\\""}``: the stored title or text holds every word, and each quoted phrase
  (words matched exactly, case-folded: :class:`TextCondition`; an index of BM25 over weighted fields reads the
  fields its BM25 reads, ``text_fields``);
- ``{"$id": ["d1", "d7"]}``: the documents of those ids (Qdrant's ``has_id``, OpenSearch's ``ids`` query; one id: a
  string): a search among chosen documents, a run's candidates scored again, beside any other condition.

A segmented index applies a filter as deletions (:meth:`~semiret.indexes.segments.SegmentedIndex.restricted`): the
documents that fail it are hidden from one ordinary search, as deleted documents are, so every retriever ranks only
the matching ones, with the scores it gives them unfiltered (deleted documents count in statistics until a merge).
Which documents pass is worked out once per segment and filter and kept (segments never change their documents),
from the values of the fields read, kept as a :class:`Column` each. An index that cannot hide documents (Milvus) is
searched deeper until ``k`` hits pass (post-filtering).
"""

from __future__ import annotations

import array
import base64
import bisect
import datetime
import functools
import itertools
import json
import math
import logging
import operator
import threading
from collections import OrderedDict, defaultdict
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import regex

from semiret.data.chunking import CHUNK_FIELD, PARENT_FIELD
from semiret.data.collection import Document, check_storable
from semiret.errors import SemiretError, tell_caller
from semiret.text.analyzer import IDEOGRAPH, WORD, WORD_CHARACTER, normalised_text, plain_words
from semiret.text.token_counts import recorded_chunking
from semiret.text.fields import TEXT_FIELDS_KEY, TextFields, read_fields, recorded_fields
from semiret.types import DocumentPage

log = logging.getLogger(__name__)

RANGE_OPERATORS: dict[str, Callable[[Any, Any], bool]] = {"gt": operator.gt, "gte": operator.ge,
                                                           "lt": operator.lt, "lte": operator.le}
MISSING = object()
"""A field a document does not have (``null`` is a value: it matches a filter asking for null)."""


def equality_key(value) -> tuple:
    """Values compared for equality, by type: numbers by value (2020 and 2020.0 agree; large integers exactly),
    2020 and "2020" differ."""
    if _is_number(value):
        return ("number", value)
    if isinstance(value, str):
        return ("str", value)
    return (type(value).__name__, json.dumps(value, sort_keys=True))


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


DATE_LIKE = regex.compile(r"\d{4}-\d{2}-\d{2}")
"""How a range's bound meant as a date begins (a year, a month and a day): one that reads as no instant is an error,
not a string compared as such."""


def _scalar(value, field: str):
    """A filter's value as a JSON scalar (a numpy number as its Python one); anything else is an error, as is
    ``NaN`` or an infinity, which no stored value equals or is compared with (JSON has no such number)."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()  # numpy scalars
    if isinstance(value, float) and not math.isfinite(value):
        raise SemiretError(f"filter field {field!r}: {value!r} is no number a document holds (NaN and infinities are "
                           "not JSON numbers; a stored \"NaN\" is the string, matched by FIELD='\"NaN\"')")
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    raise SemiretError(f"filter field {field!r}: {value!r} is no single value (a string, number, boolean or null; "
                       "a list of them where any may match, not as a range's bound)")


ANY_OF = (list, tuple, set, frozenset)


COMBINATORS = ("$and", "$or", "$not")
"""Keys of a filter object that combine filters instead of naming a field (so no field name starts with ``$``)."""
TEXT = "$text"
"""The key of a full-text condition on the documents' stored title and text."""
ID = "$id"
"""The key of a condition on the documents' ids."""
PREFIX = regex.compile(WORD.pattern + rf"\*(?!{WORD_CHARACTER})")
"""A word of a ``$text`` condition ending in ``*``: any word it begins."""


class MetadataFilter:
    """A checked filter: :meth:`matches` says whether a document's metadata passes it, :meth:`mask` which of a
    segment's documents do."""

    def __init__(self, spec: dict):
        self.spec = _normalised_filter(spec, "a filter")
        self.key = json.dumps(self.spec, sort_keys=True)
        """The filter written one way (what segments cache their matching documents under)."""
        self._root = _clause(self.spec)

    @property
    def fields(self) -> list[tuple[str, ...]]:
        """The field paths the filter reads (``"a.b"`` as ``("a", "b")``), each once."""
        return list(dict.fromkeys(self._root.paths()))

    @property
    def reads_only_ids(self) -> bool:
        """Whether the filter's conditions are all ``$id`` ones (it reads no stored metadata nor words)."""
        stack = [self._root]
        while stack:
            node = stack.pop()
            if isinstance(node, _Combined):
                stack.extend(node.parts)
            elif not isinstance(node, IdCondition):
                return False
        return True

    def conditions(self, negated: bool = True) -> Iterator[tuple[str, Any]]:
        """Each field condition of the filter: (field name, normalised condition); ``negated=False``: not those under
        a ``$not``."""
        stack = [self._root]
        while stack:
            node = stack.pop()
            if isinstance(node, _Field):
                yield node.field, node.wanted
            elif isinstance(node, _Combined) and (negated or node.how != "not"):
                stack.extend(reversed(node.parts))

    def matches(self, metadata: dict | None, document: Document | None = None,
                fields: TextFields | None = None) -> bool:
        """Whether a document's ``metadata`` passes (a ``$text`` condition reads ``document``'s title and text, or
        the ``fields`` its index reads: :func:`text_condition_fields`, as :meth:`mask` reads them)."""
        return self._root.passes(metadata, document, fields)

    def mask(self, columns: Callable[[tuple[str, ...]], "Column"], texts: Callable[[], "TextIndex"],
             ids: Callable[[list[str]], np.ndarray]) -> np.ndarray:
        """bool per document, from ``columns(path)``: a field's values as a segment keeps them (:class:`Column`),
        each distinct value tested once, so a new filter reads no JSON; ``$text`` from ``texts()``, the
        segment's :class:`TextIndex`; and ``$id`` from ``ids(doc_ids)``, the segment's documents of those ids."""
        return self._root.mask(columns, texts, ids)


MAX_DEPTH = 32
"""Filters nested deeper than this (``$not`` inside ``$or`` inside ...) are refused: no one writes them, and a
client's could exhaust the interpreter's stack."""
MAX_CLAUSES = 1024
"""Keys in a filter a request may send, every level's (field conditions, operators, ``$and``/``$or``/``$not``,
``$text``): OpenSearch's default limit of a query's clauses. A server parses a filter where the request arrives: a
client's of 200,000 clauses took seconds of its interpreter. (The Python API and the command line take any filter.)"""
MAX_VALUES = 65_536
"""Values in the lists of a filter a request may send (an any-of list's values, ``$and``'s filters): OpenSearch's
limit of a terms query."""
MAX_STRING = 4_096
"""Characters in one string of a filter a request may send (a field name, a value, a ``$text`` condition's words; a
file's path as a folder document's id fits)."""


def check_filter_size(spec, what: str = "a filter") -> None:
    """Refuse a filter (or a boost's functions, ``what``) larger than any written by hand or by a program filtering on
    a few thousand values (:data:`MAX_CLAUSES`, :data:`MAX_VALUES`, :data:`MAX_STRING`), before any of it is parsed:
    what a server asks of the filters its clients send. Read without recursion."""
    keys = values = 0
    stack = [spec]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            keys += len(node)
            stack.extend(node.values())
            stack.extend(name for name in node if isinstance(name, str) and len(name) > MAX_STRING)
        elif isinstance(node, list):
            values += len(node)
            stack.extend(node)
        elif isinstance(node, str) and len(node) > MAX_STRING:
            raise SemiretError(f"a string of {what} holds at most {MAX_STRING:,} characters, got one of "
                               f"{len(node):,} ({node[:40]!r}...)")
        if keys > MAX_CLAUSES:
            raise SemiretError(f"{what} holds at most {MAX_CLAUSES:,} conditions and operators: filter on a field "
                               "many documents share (a metadata field of their group) instead of listing them")
        if values > MAX_VALUES:
            raise SemiretError(f"{what}'s lists hold at most {MAX_VALUES:,} values: filter on a field many documents "
                               "share (a metadata field of their group) instead of listing them")


def _normalised_filter(spec, where: str, depth: int = 1) -> dict:
    """A filter object checked and written one way: each field's condition (:func:`_normalised_condition`), and
    ``$and``/``$or`` (a non-empty list of filter objects, in one order; an ``$or``'s equality conditions on one
    field joined into one any-of list) and ``$not`` (one) with their filters normalised."""
    if not isinstance(spec, dict) or not spec:
        raise SemiretError(f"{where} is a non-empty JSON object of field conditions, got {spec!r}")
    if depth > MAX_DEPTH:
        raise SemiretError(f"a filter nests at most {MAX_DEPTH} levels of $and, $or and $not")
    normalised = {}
    for key, wanted in spec.items():
        if isinstance(key, str) and key.startswith("$"):
            if key == "$not":
                normalised[key] = _normalised_filter(wanted, "$not's filter", depth + 1)
            elif key in COMBINATORS:
                if not isinstance(wanted, list) or not wanted:
                    raise SemiretError(f"{key} takes a non-empty list of filter objects, got {wanted!r}")
                parts = [_normalised_filter(each, f"each filter of {key}", depth + 1) for each in wanted]
                if key == "$or":
                    parts = _any_of_joined(parts)
                normalised[key] = sorted({json.dumps(part, sort_keys=True): part for part in parts}.items())
                normalised[key] = [part for _, part in normalised[key]]
            elif key == TEXT:
                normalised[key] = text_condition(wanted).written
            elif key == ID:
                normalised[key] = IdCondition(wanted).ids
            else:
                raise SemiretError(f"filter key {key!r}: the keys starting with $ are {', '.join(COMBINATORS)}, "
                                   f"{TEXT} and {ID} (a field name does not start with $)")
        else:
            normalised[key] = _normalised_condition(key, wanted)
    return normalised


def _any_of_joined(parts: list[dict]) -> list[dict]:
    """An ``$or``'s filters with those that only ask one field for a value (or any of values) joined by field into
    one any-of list, which is tested once per distinct value of the field instead of once per filter."""
    values: dict[str, list] = {}
    rest = []
    for part in parts:
        field, wanted = next(iter(part.items()))
        if len(part) == 1 and not field.startswith("$") and not isinstance(wanted, dict):
            values.setdefault(field, []).extend(wanted if isinstance(wanted, list) else [wanted])
        else:
            rest.append(part)
    joined = [{field: _normalised_condition(field, each) if len(each) > 1 else each[0]}
              for field, each in values.items()]
    return joined + rest


def field_path(field) -> tuple[str, ...] | None:
    """A metadata field's name as its path (``"a.b"``: ``("a", "b")``), or None if it is no name (callers say
    which)."""
    if not isinstance(field, str) or not field or "" in field.split("."):
        return None
    return tuple(field.split("."))


def _normalised_condition(field: str, wanted):
    """A field's condition checked and written one way: a scalar, a sorted list of scalars (any of them), a range,
    or ``{"exists": bool}``."""
    if field_path(field) is None:
        raise SemiretError(f"filter field {field!r}: a field name, or names joined by dots for nested fields")
    if isinstance(wanted, dict):
        if "exists" in wanted:
            if len(wanted) != 1 or not isinstance(wanted["exists"], bool):
                raise SemiretError(f"filter field {field!r}: exists takes true or false, alone (got {wanted!r})")
            return dict(wanted)
        unknown = sorted(set(wanted) - set(RANGE_OPERATORS))
        if unknown or not wanted:
            raise SemiretError(f"filter field {field!r}: a range takes {', '.join(RANGE_OPERATORS)}, got "
                               f"{', '.join(map(str, unknown)) or 'none'} (the field's presence: "
                               '{"exists": true} alone)')
        bounds = {op: _scalar(bound.isoformat() if isinstance(bound, datetime.date) else bound, field)
                  for op, bound in wanted.items()}
        if not all(_is_number(v) for v in bounds.values()) and not all(isinstance(v, str) for v in bounds.values()):
            raise SemiretError(f"filter field {field!r}: a range's bounds are all numbers or all strings")
        moments = {op: parse_instant(bound) for op, bound in bounds.items() if isinstance(bound, str)}
        undated = next((op for op, moment in moments.items() if moment is None and (
            DATE_LIKE.match(bounds[op]) or any(moments.values()))), None)
        if undated is not None:  # it made the whole range compare as strings (offsets unread): wrong documents
            raise SemiretError(f"filter field {field!r}: the range's bound {undated} {bounds[undated]!r} is no ISO "
                               "8601 date or time (2026-02-28, 2026-02-28T09:30:00+01:00, 2026-02-28T08:30:00Z)")
        return bounds
    if isinstance(wanted, ANY_OF):
        if not wanted or any(isinstance(v, (dict, *ANY_OF)) for v in wanted):
            raise SemiretError(f"filter field {field!r}: a value, a non-empty list of values (any of them), a "
                               "range object or {\"exists\": true}")
        return sorted({equality_key(v): v for v in (_scalar(v, field) for v in wanted)}.values(), key=equality_key)
    return _scalar(wanted, field)


class _Field:
    """One field's condition: ``test`` takes the field's value as :func:`field_value` reads it (:data:`MISSING`
    included)."""

    def __init__(self, field: str, wanted):
        self.field, self.wanted = field, wanted
        self.path = tuple(field.split("."))
        self.test = _value_test(wanted)

    def paths(self) -> Iterator[tuple[str, ...]]:
        yield self.path

    def passes(self, metadata: dict | None, document: Document | None, fields: TextFields | None = None) -> bool:
        return self.test(field_value(metadata, self.path))

    def mask(self, columns, texts, ids) -> np.ndarray:
        column = columns(self.path)
        tested = np.fromiter(map(self.test, column.values), bool, len(column.values))
        return tested[column.codes]


class _Combined:
    """Filters joined: all of them (a filter object's keys, ``$and``), any (``$or``), or none (``$not``: so a
    document without the field a condition reads passes ``$not`` of it, as Qdrant's ``must_not``)."""

    def __init__(self, how: str, parts: list):
        self.how, self.parts = how, parts

    def paths(self) -> Iterator[tuple[str, ...]]:
        for part in self.parts:
            yield from part.paths()

    def passes(self, metadata: dict | None, document: Document | None, fields: TextFields | None = None) -> bool:
        found = (part.passes(metadata, document, fields) for part in self.parts)
        return any(found) if self.how == "any" else all(found) if self.how == "all" else not all(found)

    def mask(self, columns, texts, ids) -> np.ndarray:
        joined = self.parts[0].mask(columns, texts, ids).copy()
        for part in self.parts[1:]:
            if self.how == "any":
                joined |= part.mask(columns, texts, ids)
            else:
                joined &= part.mask(columns, texts, ids)
        return ~joined if self.how == "not" else joined


def _clause(spec: dict):
    """A normalised filter object as a tree of :class:`_Field` and :class:`_Combined` (its keys: all of them)."""
    parts = []
    for key, wanted in spec.items():
        if key == "$not":
            parts.append(_Combined("not", [_clause(wanted)]))
        elif key in COMBINATORS:
            parts.append(_Combined("all" if key == "$and" else "any", [_clause(each) for each in wanted]))
        elif key == TEXT:
            parts.append(text_condition(wanted))
        elif key == ID:
            parts.append(IdCondition(wanted))
        else:
            parts.append(_Field(key, wanted))
    return parts[0] if len(parts) == 1 else _Combined("all", parts)


class TextCondition:
    """``{"$text": "statin* \\"heart failure\\""}``: documents whose stored title or text (over an index of BM25
    over weighted fields, the fields it reads: ``text_fields``) holds every word of it (a word ending in ``*``: any
    word it begins), and each quoted phrase as consecutive words of one field (Qdrant's full-text
    ``match``; unlike MongoDB's ``$text``, every word, not any of them). Chinese and Japanese characters are each a
    word, and a run of them a phrase, quoted or not. Words are matched exactly, case-folded
    (:func:`~semiret.text.analyzer.plain_words`: no stemming, no stopwords), whatever the retriever: a filter on
    what the documents say, beside a ranking by what they mean."""

    def __init__(self, wanted):
        if not isinstance(wanted, str):
            raise SemiretError(f"{TEXT} takes a string of words (\"quoted\" for a phrase), got {wanted!r}")
        pieces = wanted.split('"')
        if len(pieces) % 2 == 0:
            raise SemiretError(f"{TEXT} {wanted!r}: a quote opens a phrase that no quote closes")
        loose = [normalised_text(piece) for piece in pieces[0::2]]
        if any("*" in piece for piece in pieces[1::2]) or any("*" in PREFIX.sub(" ", piece) for piece in loose):
            raise SemiretError(f"{TEXT} {wanted!r}: a * ends a word outside quotes (statin*), nowhere else")
        self.prefixes = sorted({prefix[:-1] for piece in loose for prefix in PREFIX.findall(piece)})
        if any(IDEOGRAPH.search(prefix) and len(prefix) > 1 for prefix in self.prefixes):
            raise SemiretError(f"{TEXT} {wanted!r}: each Chinese or Japanese character is a word, so no word of "
                               "several begins with them: write the characters alone (a phrase), or one before the *")
        unprefixed = [PREFIX.sub(" ", piece) for piece in loose]
        # a run of Chinese or Japanese characters written unquoted is one phrase of its characters (each a word)
        runs = [written for piece in unprefixed for written in WORD.findall(piece)]
        self.phrases = [list(words) for words in sorted({tuple(plain_words(piece)) for piece in pieces[1::2] + runs})
                        if len(words) > 1]
        self.words = sorted({word for piece in unprefixed + pieces[1::2] for word in plain_words(piece)})
        if not self.words and not self.prefixes:
            raise SemiretError(f"{TEXT} {wanted!r} holds no word to match")
        self.written = " ".join(self.words + [f"{prefix}*" for prefix in self.prefixes]
                                + [f'"{" ".join(phrase)}"' for phrase in self.phrases])
        """The condition written one way (words sorted, each once), as the filter's key records it."""

    def paths(self) -> Iterator[tuple[str, ...]]:
        yield from ()

    def passes(self, metadata: dict | None, document: Document | None, fields: TextFields | None = None) -> bool:
        """Whether ``document``'s title or text (or the ``fields`` its index reads) holds every word, a word each
        prefix begins and each phrase as consecutive words of one field (one value of a list), as a segment's word
        index finds them (:class:`TextIndex`, :meth:`TextIndex.holding_phrase`)."""
        if document is None:
            raise SemiretError(f"a {TEXT} filter reads the documents' stored texts, and none was given")
        read = [plain_words(value) for _, values in read_fields(document, fields) for value in values]
        held = set().union(*read)
        return all(word in held for word in self.words) and all(
            any(word.startswith(prefix) for word in held) for prefix in self.prefixes) and all(
            any(_holds_phrase(words, phrase) for words in read) for phrase in self.phrases)

    def mask(self, columns, texts, ids) -> np.ndarray:
        index = texts()
        found = index.holding(self.words)
        for prefix in self.prefixes:
            found &= index.holding_prefix(prefix)
        for phrase in self.phrases:  # among the documents holding every word (and prefix)
            found = index.holding_phrase(phrase, found)
        return found


class IdCondition:
    """``{"$id": ["d1", "d7"]}``: the documents of those ids (an integer id read as its string, as documents are
    added; one id: a string). Over an index of passages, passages' ids (``d1#0``): a document's passages are those
    whose ``parent`` is its id."""

    def __init__(self, wanted):
        listed = wanted if isinstance(wanted, list) else [wanted]
        if not listed or not all(isinstance(i, str) or (isinstance(i, int) and not isinstance(i, bool))
                                 for i in listed):
            raise SemiretError(f"{ID} takes a document id or a non-empty list of them, got {wanted!r}")
        self.ids = sorted({str(i) for i in listed})
        """The ids, each once, sorted (as the filter's key records them)."""
        self._held = frozenset(self.ids)

    def paths(self) -> Iterator[tuple[str, ...]]:
        yield from ()

    def passes(self, metadata: dict | None, document: Document | None, fields: TextFields | None = None) -> bool:
        if document is None:
            raise SemiretError(f"a {ID} filter reads the documents' ids, and no document was given")
        return document.id in self._held

    def mask(self, columns, texts, ids) -> np.ndarray:
        return ids(self.ids)


@functools.lru_cache(maxsize=256)
def _parsed_text_condition(wanted: str) -> TextCondition:
    return TextCondition(wanted)


def text_condition(wanted) -> TextCondition:
    """``TextCondition(wanted)``, parsed once per string (a filter is read twice, to normalise it and to test with
    it, and a search box's queries make one per query; a condition never changes once made)."""
    # (a long one is not kept: 256 conditions of megabytes, with their words, grew a server by GBs)
    return _parsed_text_condition(wanted) if isinstance(wanted, str) and len(wanted) <= MAX_STRING else TextCondition(
        wanted)


SPELLINGS_KEPT = 50_000
"""Words whose spelling a segment's word index keeps, once looked up for a suggestion."""


FIELD_END = -1
"""What follows each field's words in a :class:`TextIndex`'s word sequence: no phrase runs past it."""
PHRASE_WORDS_AT_ONCE = 1 << 22
"""Words of the candidate documents a phrase is looked for in at once (bounds the positions held: 32 MB)."""


class TextIndex:
    """Which documents of a segment hold each word of their stored title and text (:func:`plain_words`; an index of
    BM25 over weighted fields: of the ``fields`` it reads, :func:`~semiret.text.fields.read_fields`), and the
    words of each field in order (4 bytes a word: phrases are found without reading a document again): built from
    the stored documents on the segment's first ``$text`` filter and kept with it (a segment's documents never
    change), so later filters cost a few set intersections. Written here because the postings of a retriever's own
    index hold its terms (stems, word pieces, learned expansions), not the words as written."""

    def __init__(self, documents: Iterable[Document], n_docs: int, read: Callable[[np.ndarray], Iterator[Document]],
                 fields: TextFields | None = None):
        ids = self._ids = defaultdict()
        ids.default_factory = ids.__len__  # a new word's number: the words numbered before it
        sequence = array.array("i")  # every document's fields' words, each field's followed by FIELD_END
        starts = array.array("q", [0])
        for document in documents:
            for _, values in read_fields(document, fields):
                for value in values:  # (each value of a list a field of its own: no phrase runs across two)
                    sequence.extend([ids[word] for word in plain_words(value)])
                    sequence.append(FIELD_END)
            starts.append(len(sequence))
        ids.default_factory = None  # (looked up from here on: an unknown word is no word of the segment's)
        self._sequence, self._starts = np.frombuffer(sequence, np.int32), np.frombuffer(starts, np.int64)
        self.n_docs, self.read, self.fields = n_docs, read, fields
        self._postings = self._holders()
        self._sorted = sorted(self._postings)  # the words in order: those a prefix begins lie together
        self._spellings: dict[tuple[str, int], str] = {}  # a word's spelling by its live holders, once looked up

    def _holders(self) -> dict[str, np.ndarray]:
        """Each word's documents (local numbers, ascending), from the word sequence."""
        n_docs = max(len(self._starts) - 1, 1)
        words = self._sequence != FIELD_END
        pairs = self._sequence[words].astype(np.int64)  # (word, document) as word x n_docs + document, in place:
        pairs *= n_docs  # a few bytes a word at most while they are made
        pairs += np.repeat(np.arange(len(self._starts) - 1, dtype=np.int32), np.diff(self._starts))[words]
        pairs.sort()
        first = np.ones(len(pairs), bool)
        first[1:] = pairs[1:] != pairs[:-1]
        pairs = pairs[first]  # (np.unique hashes: 5x slower here)
        bounds = np.searchsorted(pairs, np.arange(len(self._ids) + 1, dtype=np.int64) * n_docs).tolist()
        holders = (pairs % n_docs).astype(np.int32)
        return {word: holders[bounds[i]:bounds[i + 1]] for word, i in self._ids.items()}

    def holding_phrase(self, phrase: list[str], among: np.ndarray) -> np.ndarray:
        """bool [n_docs]: the documents ``among`` (bool [n_docs]) whose title or text holds ``phrase`` (normalised
        words) as consecutive words, read from the word sequence of those documents alone."""
        found = np.zeros(self.n_docs, bool)
        ids = [self._ids.get(word) for word in phrase]
        candidates = np.flatnonzero(among)
        if any(i is None for i in ids) or not len(candidates):
            return found
        lengths = np.diff(self._starts)[candidates]
        ends = np.cumsum(lengths)
        # the candidates' words read PHRASE_WORDS_AT_ONCE at a time (a few bytes of positions for each)
        for lo, hi in itertools.pairwise(np.searchsorted(ends, np.arange(0, ends[-1], PHRASE_WORDS_AT_ONCE),
                                                          side="right").tolist() + [len(candidates)]):
            if lo == hi:
                continue
            first, size = self._starts[candidates[lo:hi]], lengths[lo:hi]
            positions = np.arange(size.sum()) + np.repeat(first - (np.cumsum(size) - size), size)
            at = positions[self._sequence[positions] == ids[0]]
            for offset, word in enumerate(ids[1:], 1):  # (each field ends in FIELD_END: at + offset stays in it)
                at = at[self._sequence[at + offset] == word]
            found[np.searchsorted(self._starts, at, side="right") - 1] = True
        return found

    def holding_prefix(self, prefix: str) -> np.ndarray:
        """bool [n_docs]: the documents holding a word that ``prefix`` begins."""
        found = np.zeros(self.n_docs, bool)
        start = bisect.bisect_left(self._sorted, prefix)
        for word in itertools.takewhile(lambda word: word.startswith(prefix), itertools.islice(self._sorted, start,
                                                                                                None)):
            found[self._postings[word]] = True
        return found

    def holds(self, word: str) -> bool:
        return word in self._postings

    def completions(self, fragment: str, among: np.ndarray, units: np.ndarray | None = None) -> dict[str, int]:
        """The words ``fragment`` begins, each with how many of the documents ``among`` (bool [n_docs]) hold it, or
        how many distinct ``units`` (a code per document: the passages of one document share their parent's) those
        documents make (words none holds left out)."""
        start = bisect.bisect_left(self._sorted, fragment)
        found = {}
        for word in itertools.takewhile(lambda word: word.startswith(fragment),
                                        itertools.islice(self._sorted, start, None)):
            holders = self._postings[word]
            holders = holders[among[holders]]
            count = len(holders) if units is None else len(np.unique(units[holders]))
            if count:
                found[word] = count
        return found

    def holding_all(self, words: list[str], among: np.ndarray, units: np.ndarray | None = None) -> np.ndarray:
        """bool [n_docs]: the documents ``among`` whose unit (``units``: a code per document; None: each document
        its own) holds every one of ``words`` in some document ``among``."""
        if units is None:
            return among & self.holding(words)
        allowed = None
        for word in words:
            holders = self._postings.get(word, np.empty(0, np.int32))
            held = np.unique(units[holders[among[holders]]])
            allowed = held if allowed is None else np.intersect1d(allowed, held, assume_unique=True)
        return among & np.isin(units, allowed) if allowed is not None else among

    def spelling(self, word: str, deleted: np.ndarray, documents: int = 5) -> str | None:
        """How the first few ``documents`` holding ``word`` and not ``deleted`` (the segment's flags) write it, the
        commonest spelling (``Straße`` for ``strasse``, ``Alzheimer`` for ``alzheimer``; the word itself where none
        is found); None where no live document holds it."""
        holders = self._postings.get(word)
        holders = None if holders is None else holders[~deleted[holders]]
        if holders is None or not len(holders):
            return None
        if IDEOGRAPH.search(word):
            return word
        key = (word, len(holders))  # (deletions only grow: as many live holders, the same ones)
        known = self._spellings.get(key)
        if known is not None:
            return known
        spellings: dict[str, int] = {}
        for document in self.read(holders[:documents]):
            for found in (found for _, values in read_fields(document, self.fields) for value in values
                          for found in WORD.findall(value)):
                if normalised_text(found) == word:
                    spellings[found] = spellings.get(found, 0) + 1
        spelt = max(spellings, key=lambda each: (spellings[each], each == word)) if spellings else word
        if len(self._spellings) >= SPELLINGS_KEPT:
            self._spellings.clear()  # a bound, not a policy: the common completions come back at once
        self._spellings[key] = spelt
        return spelt

    def holding(self, words: list[str]) -> np.ndarray:
        """bool [n_docs]: the documents holding every one of ``words``."""
        found = np.ones(self.n_docs, bool)
        for word in words:
            held = np.zeros(self.n_docs, bool)
            held[self._postings.get(word, np.empty(0, np.int32))] = True
            found &= held
        return found


def _holds_phrase(words: list[str], phrase: list[str]) -> bool:
    """Whether ``phrase`` occurs in ``words`` as consecutive words."""
    size = len(phrase)
    return any(words[at:at + size] == phrase for at, word in enumerate(words) if word == phrase[0])


def _value_test(wanted) -> Callable[[Any], bool]:
    """A normalised condition as a test of a field's value (:data:`MISSING` passes only ``{"exists": false}``; a
    list passes when one of its elements does)."""
    if isinstance(wanted, dict) and "exists" in wanted:
        present = wanted["exists"]
        return lambda value: (value is not MISSING) is present
    if isinstance(wanted, dict):
        bounds = list(wanted.items())
        numeric = _is_number(bounds[0][1])
        moments = None if numeric else [(op, parse_instant(bound)) for op, bound in bounds]
        if moments is not None and any(moment is None for _, moment in moments):
            moments = None  # strings, compared as strings

        def in_range(value) -> bool:
            if not (_is_number(value) if numeric else isinstance(value, str)):
                return False  # a string against numeric bounds (or the reverse) is outside the range
            if moments is not None:
                moment = parse_instant(value)  # a value that is no date is outside a range of dates
                return moment is not None and all(RANGE_OPERATORS[op](moment, bound) for op, bound in moments)
            return all(RANGE_OPERATORS[op](value, bound) for op, bound in bounds)
        condition = in_range
    else:
        keys = {equality_key(v) for v in (wanted if isinstance(wanted, list) else [wanted])}
        condition = lambda value: equality_key(value) in keys  # noqa: E731
    return lambda value: _passes(condition, value)


@functools.lru_cache(maxsize=65536)
def parse_instant(text: str) -> datetime.datetime | None:
    """An ISO 8601 date or time (``2026-01-01``, ``2026-01-01T09:30:00+02:00``, ``...Z``, a space for the ``T``) as an
    instant (UTC where it names no offset), or None for any other string (one without a ``-``: ``20260101`` is a
    code, not a date)."""
    if "-" not in text:
        return None
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=datetime.timezone.utc)


class Column:
    """One metadata field of a segment's documents: its distinct values (:data:`MISSING` among them) and each
    document's code, 4 bytes a document however long its value."""

    def __init__(self) -> None:
        self.values: list = []
        self.codes: list[int] | np.ndarray = []
        self._code: dict[tuple, int] = {}

    def append(self, value) -> None:
        key = _value_key(value)
        code = self._code.get(key)
        if code is None:
            code = self._code[key] = len(self.values)
            self.values.append(value)
        self.codes.append(code)

    @classmethod
    def missing(cls, n_docs: int) -> "Column":
        """The column of a field no document holds (a segment without metadata)."""
        column = cls()
        column.values, column.codes = [MISSING], np.zeros(n_docs, np.int32)
        return column

    def done(self) -> "Column":
        self.codes, self._code = np.asarray(self.codes, np.int32), {}
        return self

    def holding(self, values: list) -> np.ndarray:
        """bool per document: whether its value is one of ``values`` (scalars: the documents of a few parents, say),
        from a map of the column's values to their codes, made on first use and kept with the column."""
        lookup = self._lookup
        if lookup is None:
            lookup = self._lookup = {_value_key(value): code for code, value in enumerate(self.values)}
        codes = [lookup[key] for key in map(_value_key, values) if key in lookup]
        return np.isin(self.codes, np.asarray(codes, np.int32))

    _lookup: dict | None = None


def _value_key(value) -> tuple:
    """Distinct values of a column: as conditions compare them (:func:`equality_key`), lists and objects by their
    JSON."""
    if value is MISSING:
        return ("missing",)
    if isinstance(value, (list, dict)):
        return ("json", json.dumps(value, sort_keys=True))
    return equality_key(value)


def field_value(metadata: dict | None, path) -> Any:
    """The value at ``path`` in ``metadata``, or :data:`MISSING`. Nested objects are walked; a step that meets a
    list of objects collects the field from each of them (``{"authors": [{"name": "x"}]}`` holds ``x`` at
    ``authors.name``), giving a list."""
    values, crossed = ([metadata] if metadata is not None else []), False
    for name in path:
        found = []
        for value in values:
            if isinstance(value, dict):
                if name in value:
                    found.append(value[name])
            elif isinstance(value, list):
                crossed = True
                found.extend(item[name] for item in value if isinstance(item, dict) and name in item)
        values = found
    if not values:
        return MISSING
    if not crossed:
        return values[0]
    return [item for value in values for item in (value if isinstance(value, list) else [value])]


class Grouping:
    """Hits grouped by a metadata field's value (Qdrant's search groups; ``group_by="parent"`` over passages:
    documents ranked by their best passage): the first ``k`` distinct values met down a ranking, each with its
    best ``size`` hits. A document whose field holds a list is in the group of each value; one without the field, or
    with an object there, in none (null is a value: its documents are a group)."""

    def __init__(self, field: str, size: int = 1):
        self.path = field_path(field)
        if self.path is None:
            raise SemiretError(f"group_by {field!r}: a metadata field name, or names joined by dots for nested fields")
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise SemiretError(f"group_size must be a positive integer, got {size!r}")
        self.field, self.size = field, size

    def pick(self, ids: list[str], scores: list[float], values: dict, k: int,
             counts: dict[tuple, list] | None = None) -> tuple[list, list, list, bool]:
        """The grouped hits of one ranking (``values``: each id's value of the field, :func:`field_values`): ids,
        scores and group values, group by group (each group's hits best first, groups by their best hit), and
        whether they are complete: ``k`` groups (or every value there is, by ``counts``: the documents holding each
        value, where the index tells) of ``size`` hits each (or every document holding the value)."""
        groups: dict[tuple, tuple[Any, list]] = {}
        full = 0  # groups holding their ``size`` hits: once ``k`` are, no later hit changes anything
        for doc_id, score in zip(ids, scores):
            if full == k:
                break
            for key, each in distinct_values(values.get(doc_id, MISSING)).items():
                if key not in groups:
                    if len(groups) == k:
                        continue
                    groups[key] = (each, [])
                members = groups[key][1]
                if len(members) < self.size:
                    members.append((doc_id, score))
                    full += len(members) == self.size
        flat = [(doc_id, score, value) for value, members in groups.values() for doc_id, score in members]
        known = counts if counts is not None else {}
        complete = (len(groups) == min(k, len(known)) if counts is not None else len(groups) == k) and all(
            len(members) == min(self.size, known.get(key, (None, self.size))[1]) for key, (_, members) in groups.items())
        return [f[0] for f in flat], [f[1] for f in flat], [f[2] for f in flat], complete


def distinct_values(value) -> dict[tuple, Any]:
    """The values a document's field holds, by equality key, each once (a list: its scalar elements; ``[1, 1.0]``
    is one value): what it is grouped and counted by. Objects and a missing field hold none; null is a value."""
    if type(value) is str:  # the common cases, as equality_key reads them
        return {("str", value): value}
    if type(value) is int or type(value) is float:
        return {("number", value): value}
    found = {}
    for each in value if isinstance(value, list) else [value]:
        if each is not MISSING and not isinstance(each, (dict, list)):
            found.setdefault(equality_key(each), each)
    return found


def field_values(index, doc_ids: list[str], path: tuple[str, ...]) -> dict:
    """Each live id's value of a metadata field (:data:`MISSING` where it has none): from the values a segmented
    index keeps, else (Milvus) from the stored documents."""
    return hit_metadata(index, doc_ids).values([path])[path]


def hit_metadata(index, doc_ids: list[str]):
    """What a ranking's hits hold (``values(paths)``: each live id's value of each field; ``passing(wanted)``: the
    ids passing a filter): from the values and masks a segmented index keeps
    (:meth:`~semiret.indexes.segments.SegmentedIndex.hit_metadata`), else (Milvus) from the stored documents."""
    if hasattr(index, "hit_metadata"):
        return index.hit_metadata(doc_ids)
    return StoredMetadata(index.get_documents(doc_ids), text_condition_fields(index))


def text_condition_fields(index) -> TextFields | None:
    """The fields a ``$text`` condition reads of ``index``'s documents checked one at a time
    (:meth:`MetadataFilter.matches`), those its segments' word index reads (:attr:`Segment.text_fields
    <semiret.indexes.segments.Segment.text_fields>`): what its analyzer records (BM25F's ``text_fields``; of a
    composite index, its first part's, which holds the documents and restricts the others); None: the title and
    text."""
    return recorded_fields((index.first if hasattr(index, "parts") else index).meta)


class StoredMetadata:
    """:func:`hit_metadata` read from stored documents (``{id: Document}``, the live ones), their words read as the
    index reads them (``fields``: :func:`text_condition_fields`)."""

    def __init__(self, documents: dict[str, Document], fields: TextFields | None = None):
        self.documents, self.fields = documents, fields

    def values(self, paths: list[tuple[str, ...]]) -> dict[tuple[str, ...], dict]:
        return {path: {doc_id: field_value(document.metadata, path) for doc_id, document in self.documents.items()}
                for path in paths}

    def passing(self, wanted: MetadataFilter) -> set[str]:
        return {doc_id for doc_id, document in self.documents.items()
                if wanted.matches(document.metadata, document, self.fields)}


MAX_RANGES = 100
"""The most ranges one facet counts (each is a filter worked out over the documents)."""


def facet(index, field: str, spec: dict | None = None, limit: int = 10,
          ranges: list[dict] | None = None) -> list[tuple[Any, int]]:
    """The ``limit`` values of a metadata field the most live documents hold (those passing the filter ``spec``),
    with how many hold each, most first (ties: by value): Qdrant's facet, OpenSearch's terms aggregation. A document
    whose field holds a list counts for each value; objects and missing fields count for none (null is a value).
    ``ranges`` (``[{"lt": 2010}, {"gte": 2010, "lt": 2020}]``, as filters' ranges, dates too): how many documents
    have a value in each, in the order given, instead (OpenSearch's range aggregation; a document counts once in a
    range however many of its values lie there). In an index of passages (``meta.json``'s ``chunking``) a document
    counts once, however many of its passages pass (they share its metadata)."""
    path = Grouping(field).path  # the field's name checked as group_by's
    unit = (PARENT_FIELD,) if index.meta.get("chunking") else None
    if ranges is not None:
        return _range_counts(index, field, spec, ranges, unit)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise SemiretError(f"limit must be a positive integer, got {limit!r}")
    wanted = checked_filter(index, spec, "filter on")
    if index.stores_texts:
        say_if_unheld(index, field, None, "that a facet counts")
    if not index.stores_texts:
        raise SemiretError(f"{index.path} keeps no stored documents (built with --no-store-texts), so it has no "
                           "metadata to count")
    if hasattr(index, "field_counts"):
        view = index.restricted(wanted) if wanted is not None else index.pinned()
        counts = (view.field_counts(path) if unit is None else view.unit_field_counts(path, unit)).values()
    else:  # Milvus: its documents read through
        tally: dict[tuple, list] = {}
        for document in index.iter_documents(wanted):
            owner = _unit_of(document, unit)
            for key, each in distinct_values(field_value(document.metadata, path)).items():
                held = tally.setdefault(key, [each, set(), 0])
                if owner is None:
                    held[2] += 1
                else:
                    held[1].add(owner)
        counts = [(each, len(owners) + alone) for each, owners, alone in tally.values()]
    ranked = sorted(counts, key=lambda pair: (-pair[1], equality_key(pair[0])))
    return [(value, count) for value, count in ranked[:limit]]


def checked_ranges(field: str, ranges) -> list[dict]:
    """A facet's ``ranges`` on ``field`` checked (a list of range objects, as filters' ranges) and normalised."""
    if not isinstance(ranges, (list, tuple)) or not ranges or len(ranges) > MAX_RANGES:
        raise SemiretError(f"ranges is a list of 1 to {MAX_RANGES} range objects ({{\"gte\": 2010, \"lt\": 2020}}), "
                           f"got {ranges!r}")
    checked = []
    for number, each in enumerate(ranges):
        if not isinstance(each, dict) or not each or "exists" in each:
            raise SemiretError(f"range {number}: a range object of gt, gte, lt, lte ({{\"gte\": 2010}}), got {each!r}")
        checked.append(_normalised_condition(field, each))
    return checked


def _range_counts(index, field: str, spec: dict | None, ranges: list[dict],
                  unit: tuple[str, ...] | None = None) -> list[tuple[dict, int]]:
    """:func:`facet`'s counts of ``ranges``: each a filter on ``field`` joined to ``spec``, counted (documents
    sharing a value of ``unit`` once)."""
    checked = checked_ranges(field, ranges)
    if spec:
        checked_filter(index, spec, "filter on")  # (its errors first, named as a filter's)
    joined = [{"$and": [spec, {field: bounds}]} if spec else {field: bounds} for bounds in checked]
    if unit is None:
        return [(bounds, count_matching(index, each)) for bounds, each in zip(checked, joined)]
    return [(bounds, _units_counted(index, checked_filter(index, each, "filter on"), unit))
            for bounds, each in zip(checked, joined)]


def _unit_of(document: Document, unit: tuple[str, ...] | None):
    """The value of the field ``unit`` that makes ``document`` one with others (its parent's id, for a passage), or
    None: it counts on its own."""
    if unit is None:
        return None
    owner = field_value(document.metadata, unit)
    return owner if isinstance(owner, (str, int, float)) else None


def _units_counted(index, wanted: MetadataFilter | None, unit: tuple[str, ...]) -> int:
    """How many live documents pass ``wanted``, those sharing a value of the field ``unit`` counted once (the
    passages of one document, by ``("parent",)``)."""
    if hasattr(index, "field_counts"):
        view = index.restricted(wanted) if wanted is not None else index.pinned()
        held = view.field_counts(unit)  # (one parent's id is one value: a key each)
        return len(held) + view.count() - sum(count for _, count in held.values())
    owners, alone = set(), 0
    for document in index.iter_documents(wanted):
        owner = _unit_of(document, unit)
        if owner is None:
            alone += 1
        else:
            owners.add(owner)
    return len(owners) + alone


def checked_filter(index, spec: dict | None, doing: str) -> MetadataFilter | None:
    """The filter ``spec`` checked against ``index`` (None, or an empty filter as Qdrant's: every document); an
    index keeping no stored documents has no metadata to ``doing`` ("search by", "delete by", ...)."""
    if not spec:
        return None
    wanted = MetadataFilter(spec)
    if not index.stores_texts and not wanted.reads_only_ids:
        raise SemiretError(f"{index.path} keeps no stored documents (built with --no-store-texts), so it has no "
                           f"metadata or words to {doing}")
    segments = getattr(getattr(index, "first", index), "segments", None)  # a hybrid's first part holds the documents
    if wanted.fields and segments is not None and all(s.metadata is None for s in segments):
        message = (f"{index.path}: no document holds metadata, so a filter on "
                   f"{', '.join('.'.join(path) for path in wanted.fields)} matches none (a corpus's other fields are "
                   "kept by metadata_fields, --metadata-fields, when the index is made; set-metadata sets fields)")
        if index.path not in _SAID_NO_METADATA:
            _SAID_NO_METADATA.add(index.path)
            log.warning("%s (said once)", message)
        tell_caller(message)
    elif segments is not None:
        for message in _unheld_messages(index, wanted):
            _say_once(index, message)
    return wanted


_SAID_NO_METADATA: set = set()
"""The indexes a filter on metadata found without any (their warning given)."""


def value_kinds(value) -> set[str]:
    """The JSON kinds of a stored value (a list's: its elements'): number, string, boolean, null, object; none for a
    missing one."""
    if value is MISSING:
        return set()
    if isinstance(value, list):
        return set().union(*map(value_kinds, value)) if value else set()
    if value is None:
        return {"null"}
    if isinstance(value, bool):
        return {"boolean"}
    if _is_number(value):
        return {"number"}
    return {"string"} if isinstance(value, str) else {"object"}


def condition_kinds(wanted) -> frozenset[str] | None:
    """The kinds of stored value a normalised field condition can match (None: any, ``exists``)."""
    if isinstance(wanted, dict):
        if "exists" in wanted:
            return None
        return frozenset({"number"} if all(map(_is_number, wanted.values())) else {"string"})
    return frozenset().union(*(value_kinds(v) for v in (wanted if isinstance(wanted, list) else [wanted])))


_SAID_UNHELD: set = set()
"""(index, message) pairs of the fields a filter, an order or a facet found no document holding (logged once; at
most :data:`KEPT_CHECKS`, then forgotten)."""
_CHECKED: "OrderedDict[tuple, tuple[Any, list[str]]]" = OrderedDict()
"""(index, filter key) -> the commit a filter's fields were last checked at, and the warnings that found
(:func:`_unheld_messages`)."""
KEPT_CHECKS = 1024
_CHECKED_LOCK = threading.Lock()


def _unheld_messages(index, wanted: MetadataFilter) -> list[str]:
    """The warnings of the fields the filter ``wanted`` reads that no document of ``index`` holds, or none with a
    value of the kind it compares (:func:`unheld_message`), worked out once per commit and filter: a filter searched
    again on the same commit costs a lookup, not a pass over the stored metadata. (A ``$not`` may well name what no
    document holds yet, ``{"$not": {"archived": true}}``, and so may ``exists: false``: neither is said.)"""
    stamp = getattr(getattr(getattr(index, "first", index), "snapshot", None), "stamp", None)
    entry = (str(index.path), wanted.key)
    with _CHECKED_LOCK:
        checked = _CHECKED.get(entry)
        if stamp is not None and checked is not None and checked[0] == stamp:
            _CHECKED.move_to_end(entry)
            return checked[1]
    messages = [message for field, condition in wanted.conditions(negated=False) if condition != {"exists": False}
                and (message := unheld_message(index, field, condition_kinds(condition), "that a filter reads",
                                               wanted.fields))]
    with _CHECKED_LOCK:
        _CHECKED[entry] = (stamp, messages)
        while len(_CHECKED) > KEPT_CHECKS:
            _CHECKED.popitem(last=False)
    return messages


def unheld_message(index, field: str, kinds: frozenset[str] | None, reading: str,
                   along: list[tuple[str, ...]] = ()) -> str | None:
    """The warning that no document of ``index`` holds ``field`` (``reading``: what reads it), or none with a value
    of one of ``kinds`` (a misspelled field, or a value of another type than the field's, "2020" for 2020, matches
    nothing without a word otherwise); None when one does, or the index cannot tell (Milvus). ``along``: other
    fields read with it (a filter's: one pass over the stored metadata for all)."""
    index = getattr(index, "first", index)  # a hybrid's first part holds the documents
    if not hasattr(index, "holds_field") or not index.n_docs:
        return None
    if not index.holds_field(field, None, along):
        return (f"{index.path}: no document holds the field {field!r} {reading} (a misspelled field? `semiret facet "
                "INDEX FIELD` shows a field's values)")
    if kinds is not None and not index.holds_field(field, kinds, along):
        return (f"{index.path}: no document holds a {' or '.join(sorted(kinds))} in {field!r}, the kind of value a "
                "filter compares it with (2020 and \"2020\" differ)")
    return None


def say_if_unheld(index, field: str, kinds: frozenset[str] | None, reading: str) -> None:
    """Warn when no document of ``index`` holds ``field`` as :func:`unheld_message` reads it (an order's, a
    facet's): logged once per index and message, told to every caller."""
    message = unheld_message(index, field, kinds, reading)
    if message is not None:
        _say_once(index, message)


def _say_once(index, message: str) -> None:
    """Log ``message`` once per index (field names a client makes up: at most :data:`KEPT_CHECKS` remembered, then
    forgotten, not kept for ever), and tell it to the caller each time (:func:`~semiret.errors.tell_caller`)."""
    if (index.path, message) not in _SAID_UNHELD:
        if len(_SAID_UNHELD) >= KEPT_CHECKS:
            _SAID_UNHELD.clear()
        _SAID_UNHELD.add((index.path, message))
        log.warning("%s (said once)", message)
    tell_caller(message)


def delete_matching(index, spec: dict) -> int:
    """Delete every document of ``index`` whose stored metadata passes the filter ``spec`` (what
    ``Retriever.delete_where`` and ``semiret delete --filter`` do); returns how many."""
    wanted = checked_filter(index, spec, "delete by")
    if wanted is None:
        raise SemiretError(f"an empty filter would delete every document of {index.path}: give a condition")
    return index.delete_where(wanted)


def delete_documents(index, doc_ids: list[str], missing_ok: bool = False) -> int:
    """Delete documents by id (``Retriever.delete``, ``semiret delete``); an unknown id is an error (nothing is
    deleted) unless ``missing_ok``. In an index of passages (``meta.json``'s ``chunking``), a document's id deletes
    all its passages, and a passage's id that passage."""
    if not index.meta.get("chunking") or not doc_ids:
        return index.delete(doc_ids, missing_ok=missing_ok)
    with index.writing():
        of_documents = passage_ids(index, doc_ids)
        passages = {d for d in doc_ids if d in index}
        parents = set(field_values(index, of_documents, (PARENT_FIELD,)).values())
        unknown = set(doc_ids) - passages - parents
        if unknown and not missing_ok:
            raise SemiretError(f"no document or passage {sorted(unknown)[0]!r} in {index.path}: nothing was deleted")
        doomed = passages | set(of_documents)
        return index.delete(sorted(doomed), missing_ok=True) if doomed else 0


def text_field_names(index) -> set[str]:
    """The metadata fields an index's analyzer reads as text (BM25F's ``text_fields``), its parts' too."""
    names: set[str] = set()
    for part in (index.parts.values() if hasattr(index, "parts") else [index]):
        fields = TextFields.parse((part.meta.get("analyzer") or {}).get(TEXT_FIELDS_KEY))
        names.update(fields.metadata_names if fields is not None else ())
    return names


def set_metadata(index, metadata: dict, doc_ids: list[str] | None = None, spec: dict | None = None,
                 overwrite: bool = False, missing_ok: bool = False,
                 encode: Callable[[list[Document]], object] | None = None) -> int:
    """Give documents new metadata without encoding them again (Qdrant's ``set_payload`` and, with ``overwrite``,
    ``overwrite_payload``): ``metadata``'s fields set on each (``overwrite``: replacing all of its metadata), the
    documents named by ``doc_ids`` (an unknown id is an error, nothing changed, unless ``missing_ok``) or passing
    the filter ``spec``. Each
    is added again, replacing itself, from what the index stored for it (:meth:`SegmentedIndex.stored_batch`), in
    one commit. In an index of passages a document's metadata is all its passages' (which keep ``parent``,
    ``chunk`` and ``chunk_start``, whatever ``metadata`` says of them): its id, a passage's, or a filter a passage
    passes updates them all. Returns how many documents (or passages) changed.

    Where the index reads a field that changes as text (BM25F's ``text_fields``), its postings change too: the
    documents are encoded again by ``encode`` (the retriever's document side, passages as they are) instead, and
    without it the change is refused, naming the field."""
    if not isinstance(metadata, dict):
        raise SemiretError(f"metadata is a JSON object of fields to set, got {metadata!r}")
    try:
        check_storable(metadata)
    except (TypeError, ValueError) as exc:
        raise SemiretError(f"metadata that cannot be stored: {exc}") from None
    if (doc_ids is None) == (spec is None):
        raise SemiretError("name the documents to update by their ids or by a filter, one of the two")
    if not hasattr(index, "stored_batch") and not hasattr(index, "parts"):
        raise SemiretError(f"{index.path}: a Milvus collection's metadata changes by adding its documents again")
    if not index.stores_texts:
        raise SemiretError(f"{index.path} keeps no stored documents (built with --no-store-texts): it has no metadata "
                           "to update")
    wanted = checked_filter(index, spec, "update by") if doc_ids is None else None
    read = text_field_names(index)
    read_changed = sorted(read if overwrite else read & set(metadata))
    if read_changed and encode is None:
        raise SemiretError(f"the index reads the field{'s' * (len(read_changed) > 1)} {', '.join(map(repr, read_changed))} "
                           "as text (text_fields): set it through the retriever (semiret set-metadata, "
                           "Retriever.set_metadata), which encodes the documents again")
    with index.writing():
        targets = metadata_targets(index, doc_ids, wanted, missing_ok)
        if not targets:
            return 0
        chunked = bool(index.meta.get("chunking"))
        changed = {}
        own = recorded_chunking(index.meta["chunking"]).passage_fields if chunked else ()  # what makes a passage one
        for doc_id, document in index.get_documents(targets).items():
            kept = {k: v for k, v in (document.metadata or {}).items() if k in own}
            fields = {**(metadata if overwrite else {**(document.metadata or {}), **metadata}), **kept}
            changed[doc_id] = Document(document.id, document.text, document.title, fields or None)
        if chunked:  # each document's passages together, in order, the documents as first met
            order: dict = {}
            for document in changed.values():
                order.setdefault(document.metadata[PARENT_FIELD], len(order))
            changed = dict(sorted(changed.items(), key=lambda item: (order[item[1].metadata[PARENT_FIELD]],
                                                                     item[1].metadata[CHUNK_FIELD])))
        if read_changed:  # the words of a field the analyzer reads change: encoded again
            batch = encode(list(changed.values()))
        elif hasattr(index, "parts"):  # a composite index: every part re-adds them from what it stored
            batch = {name: part.stored_batch(changed) for name, part in index.parts.items()}
        else:
            batch = index.stored_batch(changed)
        index.add(batch, replace=True)
    return len(changed)


def metadata_targets(index, doc_ids: list[str] | None, wanted, missing_ok: bool = False) -> list[str]:
    """The documents (or passages) whose metadata :func:`set_metadata` sets: those of ``doc_ids`` (an unknown id an
    error unless ``missing_ok``), else those passing ``wanted`` (a checked filter; None: every document, as
    Qdrant's empty filter). In an index of passages, all the passages of each document named or passing."""
    if doc_ids is None:
        searched = index.first if hasattr(index, "parts") else index
        targets = (searched.restricted(wanted) if wanted is not None else searched).live_ids()
    else:
        asked = list(dict.fromkeys(doc_ids))
        direct = [d for d in asked if d in index]  # documents, or passages by their own ids
        of_documents = passage_ids(index, [d for d in asked if d not in index]) if index.meta.get("chunking") else []
        parents = set(field_values(index, of_documents, (PARENT_FIELD,)).values())
        unknown = set(asked) - set(direct) - parents
        if unknown and not missing_ok:
            raise SemiretError(f"no document {sorted(unknown)[0]!r} in {index.path}: no metadata was changed")
        targets = direct + of_documents
    if targets and index.meta.get("chunking"):  # a document's metadata is its passages': all of them change, added
        # again together, in order (a passage a filter or its id picked, added again alone, was stored apart from
        # the others: the document no longer read back, and its passages held different metadata)
        targets = passage_ids(index, list(dict.fromkeys(field_values(index, targets, (PARENT_FIELD,)).values())))
    return targets


def passage_ids(index, parents: list[str]) -> list[str]:
    """Ids of the live passages of the documents ``parents`` (those whose metadata names one as its ``parent``):
    from the segments' kept values where the index keeps them, else (Milvus) its documents read through."""
    if hasattr(index, "ids_holding"):
        return index.ids_holding((PARENT_FIELD,), parents)
    return [d.id for d in index.iter_documents(MetadataFilter({PARENT_FIELD: parents}))]


def count_matching(index, spec: dict | None = None) -> int:
    """How many live documents of ``index`` pass the filter ``spec`` (all of them without one): Qdrant's count,
    OpenSearch's ``_count``."""
    return index.count(checked_filter(index, spec, "count by"))


def matching_documents(index, spec: dict | None = None) -> Iterator[Document]:
    """The stored live documents of ``index`` that pass ``spec`` (all without one), in the index's order, from one
    commit."""
    return index.iter_documents(_stored_filter(index, spec))


def matching_records(index, spec: dict | None = None) -> Iterator[str]:
    """:func:`matching_documents` as JSON records (BEIR corpus lines), copied as stored where the index keeps them
    so, not parsed and written again: what ``semiret export`` writes."""
    wanted = _stored_filter(index, spec)
    if hasattr(index, "iter_records"):
        return index.iter_records(wanted)
    return (document.to_json() for document in index.iter_documents(wanted))


def _stored_filter(index, spec: dict | None):
    """``spec`` checked against ``index``, which must keep its documents' texts."""
    if not index.stores_texts:
        raise SemiretError(f"{index.path} keeps no stored documents (built with --no-store-texts): there is "
                           "nothing to read back")
    return checked_filter(index, spec, "filter on")


def documents_by_id(index, doc_ids: list[str]) -> dict[str, Document]:
    """The stored documents of those ``doc_ids`` the index holds, by id; over an index of passages the id of a whole
    document gives it joined again (:func:`joined_documents`), as recommend and export read one."""
    found = index.get_documents(doc_ids)
    missing = [doc_id for doc_id in doc_ids if doc_id not in found]
    if missing and index.meta.get("chunking"):
        found.update({document.id: document for document in joined_documents(index, {PARENT_FIELD: missing})})
    return found


def joined_documents(index, spec: dict | None = None) -> Iterator[Document]:
    """The documents of an index of passages (``meta.json``'s ``chunking``) joined again
    (:meth:`~semiret.data.chunking.Chunking.documents`), those with a passage that passes ``spec`` whole: what
    ``semiret export`` writes of such an index."""
    passages = matching_documents(index, spec)
    if spec:
        parents = sorted({passage.metadata[PARENT_FIELD] for passage in passages})
        passages = matching_documents(index, {PARENT_FIELD: parents}) if parents else iter(())
    if not hasattr(index, "segments"):  # Milvus gives its rows in id order (A#10 before A#2)
        passages = sorted(passages, key=lambda p: (p.metadata[PARENT_FIELD], p.metadata[CHUNK_FIELD]))
    return recorded_chunking(index.meta["chunking"]).documents(passages)


class Ordering:
    """A scroll's order by a metadata field's value (Qdrant's ``order_by``, OpenSearch's ``sort``): ``"published"``,
    or ``{"key": "published", "direction": "desc"}`` (``asc`` by default). Numbers first, then ISO 8601 dates and
    times (as instants), then other strings, then booleans; of a list, its least value ascending, its greatest
    descending (OpenSearch's default); documents without a value (null, an object, none) last either way; equal
    values in id order."""

    def __init__(self, spec):
        if isinstance(spec, str):
            spec = {"key": spec}
        if not isinstance(spec, dict) or set(spec) - {"key", "direction"} or "key" not in spec:
            raise SemiretError(f"order_by is a field name or {{\"key\": FIELD, \"direction\": \"asc\" or \"desc\"}}, "
                               f"got {spec!r}")
        field, direction = spec["key"], spec.get("direction", "asc")
        path = field_path(field)
        if path is None:
            raise SemiretError(f"order_by's key must be a metadata field name (names joined by dots for nested "
                               f"fields), got {field!r}")
        if direction not in ("asc", "desc"):
            raise SemiretError(f"order_by's direction must be asc or desc, got {direction!r}")
        self.field, self.path, self.descending = field, path, direction == "desc"

    def value_key(self, value) -> tuple | None:
        """A stored value's place in the order (comparable with every other's), or None: no value to order by."""
        keys = [key for key in map(_order_key, value if isinstance(value, list) else [value]) if key is not None]
        if not keys:
            return None
        return max(keys) if self.descending else min(keys)

    def compare(self, a: tuple, b: tuple) -> int:
        """Two ``(value key, id)`` entries in the order: keys (reversed descending), None last, then ids."""
        if (a[0] is None) != (b[0] is None):
            return 1 if a[0] is None else -1
        if a[0] != b[0]:
            before = a[0] < b[0]
            return (1 if before else -1) if self.descending else (-1 if before else 1)
        return (a[1] > b[1]) - (a[1] < b[1])

    def token(self, entry: tuple) -> str:
        """The offset a page starting at ``entry`` is asked for with: :data:`ORDER_TOKEN` and, base64-encoded, the
        field, the direction, the value key and the id (so that a token of another order is refused)."""
        record = {"k": self.field, "d": "desc" if self.descending else "asc",
                  "v": list(entry[0]) if entry[0] is not None else None, "id": entry[1]}
        return ORDER_TOKEN + base64.urlsafe_b64encode(json.dumps(record).encode("utf-8")).decode("ascii")

    def entry(self, token: str) -> tuple:
        """The ``(value key, id)`` a token of this order names (anything else: an error)."""
        record = ordered_token(token)
        if record is None:
            raise SemiretError(f"offset {token!r} is not a page offset of a scroll ordered by {self.field!r} (give "
                               "the next_offset an ordered page returned)")
        direction = "desc" if self.descending else "asc"
        if record["k"] != self.field or record["d"] != direction:
            raise SemiretError(f"offset {token!r} is a page offset of a scroll ordered by {record['k']!r} "
                               f"{record['d']}, not by {self.field!r} {direction}")
        key = record["v"]
        return (tuple(key) if key is not None else None, record["id"])


ORDER_TOKEN = "order:"
"""How an ordered scroll's page offsets begin (then base64): what tells them from ids."""

_KEY_KINDS = {0: lambda v: _is_number(v) and not (isinstance(v, float) and math.isnan(v)),
              1: lambda v: isinstance(v, int) and not isinstance(v, bool),
              2: lambda v: isinstance(v, str), 3: lambda v: v in (0, 1) and not isinstance(v, bool)}


def ordered_token(token) -> dict | None:
    """The record an ordered scroll's page offset carries, or None if ``token`` is none (an id, or malformed)."""
    if not isinstance(token, str) or not token.startswith(ORDER_TOKEN):
        return None
    try:
        record = json.loads(base64.urlsafe_b64decode(token[len(ORDER_TOKEN):].encode("ascii")))
    except (ValueError, UnicodeError):
        return None
    if not isinstance(record, dict) or set(record) != {"k", "d", "v", "id"} or not isinstance(record["id"], str):
        return None
    key = record["v"]
    if key is not None and not (isinstance(key, list) and len(key) == 2 and key[0] in _KEY_KINDS
                                and not isinstance(key[0], bool) and _KEY_KINDS[key[0]](key[1])):
        return None
    return record


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def _order_key(value) -> tuple | None:
    """A value's place in an order, exact: numbers as they are (Python compares int and float exactly), dates as
    whole microseconds since the epoch."""
    if _is_number(value):
        return None if isinstance(value, float) and math.isnan(value) else (0, value)
    if isinstance(value, str):
        moment = parse_instant(value)
        return (1, (moment - _EPOCH) // datetime.timedelta(microseconds=1)) if moment is not None else (2, value)
    if isinstance(value, bool):
        return (3, int(value))
    return None  # null, an object, or no value


def documents_page(index, spec: dict | None = None, limit: int = 10, offset: str | None = None,
                   order_by=None) -> DocumentPage:
    """One page of the live documents that pass ``spec``, in id order (Qdrant's scroll), or in ``order_by``'s
    (:class:`Ordering`): at most ``limit``, from ``offset`` on (included: an id, or, ordered, the ``next_offset`` of
    the page before; None: the first), with the offset the next page starts at. Pages stay consistent while
    documents change: each starts where the last ended, whatever was added or deleted before it."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise SemiretError(f"limit must be a positive integer, got {limit!r}")
    if isinstance(offset, int) and not isinstance(offset, bool):
        offset = str(offset)  # as ids are read: an integer id is its string
    if offset is not None and not isinstance(offset, str):
        raise SemiretError(f"offset is a document id (a string), got {type(offset).__name__} {offset!r}")
    order = order_by if isinstance(order_by, Ordering) or order_by is None else Ordering(order_by)
    view = index.pinned()  # the ids and their documents from one commit
    wanted = checked_filter(view, spec, "filter on")
    if order is None:
        if ordered_token(offset) is not None:
            raise SemiretError("offset is a page offset of a scroll in a field's order: give the same order_by")
        ids = view.sorted_ids(wanted)
        start = bisect.bisect_left(ids, offset) if offset is not None else 0
        page = ids[start: start + limit]
        following = ids[start + limit] if start + limit < len(ids) else None
    else:
        if not hasattr(view, "ordered_entries"):
            raise SemiretError(f"{view.path}: a Milvus collection is scrolled in id order only")
        if offset is None:  # (said on a first page)
            say_if_unheld(view, order.field, None, "that the order follows")
        entries = view.ordered_entries(order, wanted)
        by_order = functools.cmp_to_key(order.compare)
        start = bisect.bisect_left(entries, by_order(order.entry(offset)), key=by_order) if offset is not None else 0
        page = [doc_id for _, doc_id in entries[start: start + limit]]
        following = order.token(entries[start + limit]) if start + limit < len(entries) else None
    if not view.stores_texts:
        return DocumentPage(page, None, following)
    found = view.get_documents(page)
    page = [doc_id for doc_id in page if doc_id in found]  # (Milvus) deleted since its ids were read
    return DocumentPage(page, [found[doc_id] for doc_id in page], following)


def _passes(condition, value) -> bool:
    if value is MISSING:
        return False
    return any(condition(v) for v in value) if isinstance(value, list) else condition(value)
