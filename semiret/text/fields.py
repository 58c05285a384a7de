"""Which of a document's fields a BM25 index reads, and how much a word in each counts: BM25F.

A word in a field of weight w counts w times in the document, and the document's length is its fields' lengths
each times its weight (Robertson, Zaragoza & Taylor 2004, "Simple BM25 extension to multiple weighted fields";
Elasticsearch's ``combined_fields`` query, Lucene's ``CombinedFieldQuery``). The index is then an ordinary BM25
index over these weighted counts: one IDF per term over the whole document, the same saturation, nothing more read
or computed per query. Summing a BM25 score per field instead (Elasticsearch's ``most_fields``) saturates each
field apart, so a word in the title and the text counts twice over; BM25F is the form shown to rank better.

Weights are whole numbers from 1 to 100, as a count is: a merge reads the counts back from the stored weights
exactly, and a weight below 1 would let a word count less than once, past BM25's saturation (Elasticsearch refuses
it too). A ratio of 1.5 is ``title^3,text^2``.
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass

from semiret.data.collection import Document
from semiret.errors import SemiretError


OWN_FIELDS = ("title", "text")
"""The fields every document has; any other name is a key of its metadata."""
FIELD_SPEC = re.compile(r"^\s*([^\s^,]+)\s*(?:\^\s*([^\s,]+)\s*)?$")
"""One field of a ``"title^2,text"`` list: its name and, after ``^``, its weight (default 1)."""
MAX_WEIGHT = 100
"""A field's weight at most: the analyzer reads a field once per unit of its weight, so a weight costs its size in
time and memory (a title of weight 10^6 is megabytes of words); ratios of a few to one are what BM25F is tuned to."""
TEXT_FIELDS_KEY = "text_fields"
"""Where an index's analyzer record keeps its fields and their weights (only when given)."""
JOIN = "\n"
"""Between the values of a document's fields: no analyzer reads a word across it."""


@dataclass(frozen=True)
class TextFields:
    """The fields a BM25 index reads (``title``, ``text`` or a metadata key, whose value is a string, a number or a
    list of them) and each one's weight, in order."""

    weights: tuple[tuple[str, int], ...]

    @classmethod
    def parse(cls, spec: "str | dict | list | tuple | None", option: str = "text_fields (--text-fields)") -> "TextFields | None":
        """``"title^2,text,keywords"``, ``["title^2", "text"]`` or ``{"title": 2, "text": 1}`` (None: the title
        and text as always read, :attr:`Document.full_text`); a clear error naming ``option`` otherwise."""
        if spec is None or isinstance(spec, TextFields):
            return spec
        if isinstance(spec, dict):
            pairs = list(spec.items())
        elif isinstance(spec, (str, list, tuple)):
            items = spec.split(",") if isinstance(spec, str) else list(spec)
            pairs = [cls._parsed_item(item, option) for item in items]
        else:
            raise SemiretError(f"{option} must be a list of fields like 'title^2,text', got {type(spec).__name__}")
        if not pairs:
            raise SemiretError(f"{option} names no field: give one or more, like 'title^2,text'")
        weights, seen = [], set()
        for name, weight in pairs:
            if not isinstance(name, str) or not name.strip():
                raise SemiretError(f"{option}: a field's name must be a non-empty string, got {name!r}")
            name = name.strip()
            if name in seen:
                raise SemiretError(f"{option} names the field {name!r} twice")
            seen.add(name)
            weights.append((name, cls._whole_weight(name, weight, option)))
        return cls(tuple(weights))

    @staticmethod
    def _parsed_item(item, option: str) -> tuple[str, object]:
        if not isinstance(item, str):
            raise SemiretError(f"{option}: each field is written as a string like 'title^2', got {item!r}")
        match = FIELD_SPEC.match(item)
        if match is None:
            raise SemiretError(f"{option}: cannot read {item!r} as a field and its weight ('title^2', or 'text' for "
                               "a weight of 1)")
        name, weight = match.groups()
        if weight is None:
            return name, 1
        try:
            return name, float(weight)
        except ValueError:
            raise SemiretError(f"{option}: the weight of {name!r} must be a number, got {weight!r}") from None

    @staticmethod
    def _whole_weight(name: str, weight, option: str) -> int:
        if isinstance(weight, bool) or not isinstance(weight, numbers.Real) or not math.isfinite(weight):
            raise SemiretError(f"{option}: the weight of {name!r} must be a number, got {weight!r}")
        if weight > MAX_WEIGHT:
            raise SemiretError(f"{option}: the weight of {name!r} is {weight:g}, more than {MAX_WEIGHT}: BM25F weights "
                               "are ratios of a few to one (each unit reads the field once more)")
        if weight < 1 or weight != int(weight):
            raise SemiretError(
                f"{option}: the weight of {name!r} is {weight:g}; BM25F counts a word of a field w times, so weights "
                "are whole numbers of at least 1 (a ratio of 1.5 is 'title^3,text^2'; leave a field out to not read "
                "it)")
        return int(weight)

    def text(self, document: Document) -> str:
        """What the analyzer reads of ``document``: each field's value as many times as its weight (the title and
        text as they are; a metadata value: a string, a number, or a list of them), fields a document lacks
        skipped. A metadata value of another kind is an error naming the document and the field."""
        parts = []
        for name, weight in self.weights:
            value = self.value(document, name)
            if value:
                parts.extend([value] * weight)
        return JOIN.join(parts)

    @staticmethod
    def value(document: Document, name: str) -> str:
        """``document``'s field ``name`` as text ('' where it has none)."""
        return JOIN.join(TextFields.values(document, name))

    @staticmethod
    def values(document: Document, name: str) -> list[str]:
        """``document``'s field ``name`` as texts, a list's values each apart (none where it has none)."""
        if name in OWN_FIELDS:
            value = getattr(document, name) or ""
            return [value] if value else []
        value = _metadata_value(document.metadata or {}, name)
        values = value if isinstance(value, list) else [value]
        for item in values:
            if item is not None and (isinstance(item, bool) or not isinstance(item, (str, numbers.Real))):
                raise SemiretError(f"document {document.id!r}: its field {name!r}, read as text (text_fields), must "
                                   f"be a string, a number or a list of them, got {type(item).__name__}")
        return [str(item) for item in values if item is not None and item != ""]

    @property
    def metadata_names(self) -> list[str]:
        """The fields read from documents' metadata (all but the title and text)."""
        return [name for name, _ in self.weights if name not in OWN_FIELDS]

    def missing_from(self, documents: list[Document]) -> list[str]:
        """The metadata fields none of ``documents`` has (a misspelt name, or a corpus field not kept)."""
        return [name for name in self.metadata_names
                if not any(_metadata_value(document.metadata or {}, name) is not None for document in documents)]

    def config(self) -> dict[str, int]:
        """As an index records it: ``{"title": 2, "text": 1}`` (order kept)."""
        return dict(self.weights)

    def __str__(self) -> str:
        return ",".join(name if weight == 1 else f"{name}^{weight}" for name, weight in self.weights)


def recorded_fields(meta: dict | None) -> TextFields | None:
    """The fields an index reads as text, as its ``meta.json`` records them in its analyzer (None: its documents'
    title and text, as every index built without ``text_fields``)."""
    return TextFields.parse(((meta or {}).get("analyzer") or {}).get(TEXT_FIELDS_KEY))


def read_fields(document: Document, fields: TextFields | None) -> list[tuple[str, list[str]]]:
    """The fields an index reading ``fields`` reads of ``document`` (None: its title and text), each once and
    unweighted, as ``(name, texts)``, a list's values each apart and the fields it lacks left out: the words a
    search box's operators, full-text filters, highlights and suggestions read of it, what BM25 counts
    (:meth:`TextFields.text` gives the same values, each field as many times as its weight)."""
    names = OWN_FIELDS if fields is None else [name for name, _ in fields.weights]
    return [(name, values) for name in names if (values := TextFields.values(document, name))]


def _metadata_value(metadata: dict, name: str):
    """``metadata``'s field ``name``: a key of that name, else a dotted path into nested objects (``source.name``), as
    filters read it; None where there is neither."""
    if name in metadata:
        return metadata[name]
    value = metadata
    for part in name.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value

