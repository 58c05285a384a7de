"""Long documents as passages (``--chunk-words``): each document split into windows of words that overlap, so that a
neural encoder, which reads a few hundred tokens, sees all of it; searches then rank the documents by their best
passage (``search(..., group_by="parent")``: MaxP, Dai & Callan 2019).

A passage keeps its document's title (its context in every window) and metadata, with two fields added: ``parent``
(the document's id) and ``chunk`` (its number, from 0). A document that fits in one window stays one passage with its
own id; longer ones become ``ID#0``, ``ID#1``, ... Words are runs of non-space characters, and each Chinese or
Japanese character (Han, hiragana, katakana) one of its own, as those languages put no spaces between words: the
windows are model-agnostic (a word is about 1.3 WordPiece tokens in English text, a character about one).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterable, Iterator

import regex

from semiret.data.collection import Document
from semiret.errors import SemiretError

log = logging.getLogger(__name__)

PARENT_FIELD, CHUNK_FIELD = "parent", "chunk"
"""The metadata fields a passage gets: its document's id, and its number within the document."""


_SPACELESS = r"\p{Han}\p{Hiragana}\p{Katakana}"
_SPACELESS_CHARACTER = regex.compile(rf"[{_SPACELESS}]")
_SPACE = r"\s\x1c-\x1f"
"""What separates words: Unicode's white space and the four separators Python's ``str.split`` counts too (U+001C to
U+001F), so that both ways of cutting a text into words count the same words (else a window's overlap was cut wrong)."""
_PIECE = regex.compile(rf"(?P<word>[{_SPACELESS}]|[^{_SPACE}{_SPACELESS}]+)(?P<space>[{_SPACE}]*)")


def _pieces(text: str, spaceless: bool = True) -> list[str]:
    """The words a window counts, each with the one space that followed it, if any: runs of non-space characters,
    each Chinese or Japanese character one of its own (those languages put no spaces between words) where
    ``spaceless`` (indexes made before it counted runs alone)."""
    if not spaceless or not _SPACELESS_CHARACTER.search(text):
        return [word + " " for word in text.split()]
    return [found["word"] + " " * bool(found["space"]) for found in _PIECE.finditer(text)]


def _text_of(pieces: list[str]) -> str:
    return "".join(pieces).rstrip()


def _spaced(before: str, after: str) -> bool:
    """Whether two windows' words met at a space: yes, unless one is a Chinese or Japanese character."""
    return not (_SPACELESS_CHARACTER.match(before[-1]) or _SPACELESS_CHARACTER.match(after[0]))


@dataclass(frozen=True)
class Chunking:
    """Windows of ``words`` words, each starting ``words - overlap`` words after the one before."""

    words: int
    overlap: int = 0
    spaceless: bool = True
    """Each Chinese or Japanese character counts as a word (False: runs of non-space characters only, as indexes made
    before this counted them, whose passages are read back so)."""

    def __post_init__(self) -> None:
        if self.words < 1:
            raise SemiretError(f"passages need at least one word (--chunk-words), got {self.words}")
        if not 0 <= self.overlap < self.words:
            raise SemiretError(f"the overlap of passages (--chunk-overlap) must be at least 0 and less than their "
                               f"{self.words} words, got {self.overlap}")

    @classmethod
    def of(cls, value) -> "Chunking | None":
        """A chunking as the Python API takes one: a :class:`Chunking`, a dict of its fields (as ``meta.json``
        records it), a number of words, or None (whole documents); anything else is a clear error."""
        if value is None or isinstance(value, Chunking):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return cls(value)
        if isinstance(value, dict) and set(value) <= {"words", "overlap", "spaceless"} and "words" in value:
            return cls(**value)
        raise SemiretError(f"chunking is a Chunking(words, overlap), a dict {{'words': N, 'overlap': M}} or a number "
                           f"of words, got {value!r}")

    @classmethod
    def of_options(cls, words: int | None, overlap: int = 0) -> "Chunking | None":
        """The chunking ``--chunk-words`` and ``--chunk-overlap`` ask for (None: whole documents)."""
        if words is None:
            if overlap:
                raise SemiretError("--chunk-overlap is the overlap of passages: give --chunk-words too")
            return None
        return cls(words, overlap)

    @classmethod
    def recorded(cls, record: dict) -> "Chunking":
        """The chunking an index's ``meta.json`` records (one made before ``spaceless`` counted runs alone)."""
        return cls(**{"spaceless": False, **record})

    def record(self) -> dict:
        """What an index records of it (``meta.json``'s ``chunking``)."""
        return {"words": self.words, "overlap": self.overlap, "spaceless": self.spaceless}

    def split(self, documents: Iterable[Document]) -> Iterator[Document]:
        """Each document's passages, in order."""
        for document in documents:
            yield from self.passages(document)

    def documents(self, passages: Iterable[Document]) -> Iterator[Document]:
        """The documents back from their passages, as an index stores them (each document's passages together, in
        order): a document's words joined again without the overlaps (its spacing: one space between words, where
        a window ends none beside a Chinese or Japanese character; a document of one window comes back as it was
        given), its metadata without the passage fields. A passage
        deleted on its own leaves its words out (the windows on both sides are joined whole)."""
        parent, pieces, done, gapped = None, [], set(), []
        for passage in passages:
            owner = (passage.metadata or {}).get(PARENT_FIELD)
            if owner is None:
                raise SemiretError(f"{passage.id!r} is not a passage (its metadata names no {PARENT_FIELD})")
            if owner != parent and pieces:
                yield self._joined(pieces, gapped)
                done.add(parent)
                pieces = []
            if owner in done:
                raise SemiretError(f"the passages of {owner!r} are not stored together: export --passages")
            parent = owner
            pieces.append(passage)
        if pieces:
            yield self._joined(pieces, gapped)
        if gapped:
            log.warning("%d document(s) lack passages deleted on their own (%s%s): joined without their words",
                        len(gapped), ", ".join(map(repr, gapped[:3])), ", ..." if len(gapped) > 3 else "")

    def joined(self, passages: list[Document]) -> Document:
        """One document's passages (some of them, in order) as one text without their overlaps: a run of them, say,
        around a passage a search found (``Retriever.context``)."""
        return self._joined(passages, [])

    def _joined(self, pieces: list[Document], gapped: list) -> Document:
        """One document from its passages; its id is added to ``gapped`` when passages before its last are gone."""
        first = pieces[0]
        numbers = [p.metadata[CHUNK_FIELD] for p in pieces]
        if numbers != sorted(set(numbers)):
            raise SemiretError(f"the passages of {first.metadata[PARENT_FIELD]!r} are not in order (chunks "
                               f"{numbers}): export --passages")
        if numbers != list(range(len(numbers))):
            gapped.append(first.metadata[PARENT_FIELD])
        metadata = {k: v for k, v in first.metadata.items() if k not in (PARENT_FIELD, CHUNK_FIELD)} or None
        if numbers == [0] and first.id == first.metadata[PARENT_FIELD]:  # a document of one window, as given
            return Document(first.id, first.text, first.title, metadata)
        words = _pieces(first.text, self.spaceless)
        for before, passage in zip(numbers, pieces[1:]):
            following = _pieces(passage.text, self.spaceless)
            consecutive = passage.metadata[CHUNK_FIELD] == before + 1
            if consecutive and words and 0 < self.overlap < len(following) and following[self.overlap - 1] == (
                    words[-1] + " "):  # the overlap shows the space after the window's last word
                words[-1] += " "
            following = following[self.overlap:] if consecutive else following
            if words and following and not words[-1].endswith(" ") and _spaced(words[-1], following[0]):
                # a window's text ends in no space: whether its last word was followed by one is not known
                words[-1] += " "
            words += following
        return Document(first.metadata[PARENT_FIELD], _text_of(words), first.title, metadata)

    def passages(self, document: Document) -> list[Document]:
        metadata = document.metadata or {}
        taken = sorted({PARENT_FIELD, CHUNK_FIELD} & set(metadata))
        if taken:
            raise SemiretError(f"document {document.id!r} has metadata field(s) {', '.join(taken)}, which its "
                               "passages' metadata would hold: rename them, or index the documents whole")
        words = _pieces(document.text, self.spaceless)
        step = self.words - self.overlap
        starts = range(0, max(len(words) - self.overlap, 1), step)
        if len(starts) == 1:
            return [Document(document.id, document.text, document.title, {**metadata, PARENT_FIELD: document.id,
                                                                          CHUNK_FIELD: 0})]
        return [Document(f"{document.id}#{number}", _text_of(words[start: start + self.words]), document.title,
                         {**metadata, PARENT_FIELD: document.id, CHUNK_FIELD: number})
                for number, start in enumerate(starts)]
