"""Long documents as passages (``--chunk-words``, ``--chunk-tokens``): each document split into windows that overlap,
so that a neural encoder, which reads a few hundred tokens, sees all of it; searches then rank the documents by their
best passage (``search(..., group_by="parent")``: MaxP, Dai & Callan 2019).

A passage keeps its document's title (its context in every window, not counted in the window's budget) and metadata,
with two fields added: ``parent`` (the document's id) and ``chunk`` (its number, from 0); passages of sentences or of
tokens, whose overlaps vary, a third: ``chunk_start``, the number of their first word among the document's words (as
LangChain's ``add_start_index`` records a chunk's first character), so that they join back into their document exactly
even where its text repeats itself at a window's edge. A document holding one of these fields is refused. A document
that fits in one window stays one passage with its own id; longer ones become ``ID#0``, ``ID#1``, ... Words are runs of
non-space
characters, and each Chinese or Japanese character (Han, hiragana, katakana) one of its own, as those languages put
no spaces between words: windows of words are model-agnostic (a word is about 1.3 WordPiece tokens in English text, a
character about one).

Two refinements, as LangChain's, LlamaIndex's and Haystack's splitters make them:

- a budget in tokens (``tokens``, ``--chunk-tokens``): each word weighs the tokens a tokenizer cuts it into, counted by
  the ``count_tokens`` the layers above give a chunking (:mod:`semiret.text.token_counts`: by default the tokenizer of
  the index's model, which the chunking records by name and fingerprint);
- whole sentences (``sentences``, ``--chunk-sentences``): a window packs as many whole sentences as its budget holds
  and starts with the last whole sentences of the window before that fit ``overlap``; a sentence over the budget is
  cut alone, into windows of words overlapping as plain windows do. A sentence ends after a word ending in ``.``,
  ``!`` or ``?`` (closing quotes or brackets may follow) that is no common abbreviation (:data:`ABBREVIATIONS`) nor
  letters each followed by a full stop (``e.g.``, ``U.S.``, an initial); after a word ending in ``。``, ``！`` or
  ``？`` (Chinese and Japanese put no space after them); and at a blank line (a paragraph's end). No sentence splitter
  is among semiret's dependencies (NLTK's Punkt needs data downloaded, spaCy's models too): this rule does what they
  do in the common cases, and a boundary missed only makes a longer sentence.
"""

from __future__ import annotations

import itertools
import logging
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

import regex

from semiret.data.collection import Document
from semiret.errors import SemiretError

log = logging.getLogger(__name__)

PARENT_FIELD, CHUNK_FIELD, START_FIELD = "parent", "chunk", "chunk_start"
"""The metadata fields a passage gets: its document's id, its number within the document, and (passages of sentences
or tokens) the number of its first word among the document's words."""


_SPACELESS = r"\p{Han}\p{Hiragana}\p{Katakana}"
_SPACELESS_CHARACTER = regex.compile(rf"[{_SPACELESS}]")
_SPACE = r"\s\x1c-\x1f"
"""What separates words: Unicode's white space and the four separators Python's ``str.split`` counts too (U+001C to
U+001F), so that both ways of cutting a text into words count the same words (else a window's overlap was cut wrong)."""
_PIECE = regex.compile(rf"(?P<word>[{_SPACELESS}]|[^{_SPACE}{_SPACELESS}]+)(?P<space>[{_SPACE}]*)")
_RUN = regex.compile(rf"(?P<word>[^{_SPACE}]+)(?P<space>[{_SPACE}]*)")
"""A run of non-space characters and the space after it: a word as ``str.split`` cuts them."""

ABBREVIATIONS = frozenset("al approx ca cf corp dept dr eq eqs fig figs inc jr ltd mr mrs ms prof ref refs sr st "
                          "vol vs".split())
"""Words that a full stop follows without ending a sentence ("et al.", "Fig. 2", "Dr. Smith"), casefolded. "etc." and
"no." are left out: they end sentences as often."""
_CLOSING = "\"'”’)\\]}»」』）"  # (in a character class) what may close a sentence after its final mark
_OPENING = "\"'“‘([{«「『（"  # what may open a word before an abbreviation: "(Fig."
_MARK_AT_END = regex.compile(rf"[!?。！？][{_CLOSING}]*\Z")
_FULL_STOP_AT_END = regex.compile(rf"(?P<stem>.*)\.[{_CLOSING}]*\Z")
_LETTERS_WITH_STOPS = regex.compile(r"(?:\p{L}\.)*\p{L}")
_PARAGRAPH_BREAK = regex.compile(r"\n\s*\n|\u2029")


def _pieces(text: str, spaceless: bool = True) -> list[str]:
    """The words a window counts, each with the one space that followed it, if any: runs of non-space characters,
    each Chinese or Japanese character one of its own (those languages put no spaces between words) where
    ``spaceless`` (indexes made before it counted runs alone)."""
    if not spaceless or not _SPACELESS_CHARACTER.search(text):
        return [word + " " for word in text.split()]
    return [found["word"] + " " * bool(found["space"]) for found in _PIECE.finditer(text)]


def _text_of(pieces: list[str]) -> str:
    return "".join(pieces).rstrip()


def _gaps(text: str, spaceless: bool) -> list[str]:
    """The white space after each word :func:`_pieces` cuts ``text`` into (where a paragraph ends)."""
    pattern = _PIECE if spaceless and _SPACELESS_CHARACTER.search(text) else _RUN
    return [found["space"] for found in pattern.finditer(text)]


def ends_sentence(word: str) -> bool:
    """Whether a sentence ends with this word (see the module's rule), whatever space follows it."""
    if _MARK_AT_END.search(word):
        return True
    found = _FULL_STOP_AT_END.match(word)
    if found is None:
        return False
    stem = found["stem"].lstrip(_OPENING)
    return stem.casefold() not in ABBREVIATIONS and not _LETTERS_WITH_STOPS.fullmatch(stem)


def _sentence_stops(pieces: list[str], gaps: list[str]) -> list[int]:
    """Where each sentence of a text's words stops (the number of words up to its end), the last at the text's end."""
    stops = [number for number, (piece, gap) in enumerate(zip(pieces, gaps), 1)
             if ends_sentence(piece.rstrip()) or _PARAGRAPH_BREAK.search(gap)]
    return stops if stops and stops[-1] == len(pieces) else [*stops, len(pieces)]


def _packed(sizes: list[int], budget: int, overlap: int) -> list[tuple[int, int]]:
    """Windows over units of these sizes (words, sentences), as ranges of units: each holds as many units as fit
    ``budget`` (at least one), and the next starts with the last of its units that fit ``overlap`` and leave room for
    the unit after them. Units of one word each give windows of ``budget`` words, ``budget - overlap`` apart."""
    totals = [0, *itertools.accumulate(sizes)]
    windows, start = [], 0
    while True:
        stop = max(bisect_right(totals, totals[start] + budget) - 1, start + 1)
        windows.append((start, stop))
        if stop >= len(sizes):
            return windows
        carried = min(overlap, budget - sizes[stop])
        start = stop if carried < 0 else bisect_left(totals, totals[stop] - carried, start + 1, stop)


def _spaced(before: str, after: str) -> bool:
    """Whether two windows' words met at a space: yes, unless one is a Chinese or Japanese character."""
    return not (_SPACELESS_CHARACTER.match(before[-1]) or _SPACELESS_CHARACTER.match(after[0]))


_RECORDED = {"words", "overlap", "spaceless", "sentences", "tokens", "tokenizer", "tokenizer_fingerprint"}
"""The fields of a chunking that an index records."""


@dataclass(frozen=True)
class Chunking:
    """Windows of at most ``words`` words (or ``tokens`` tokens), each starting with the last ``overlap`` words (tokens)
    of the one before; with ``sentences``, of whole sentences (see the module)."""

    words: int | None = None
    overlap: int = 0
    spaceless: bool = True
    """Each Chinese or Japanese character counts as a word (False: runs of non-space characters only, as indexes made
    before this counted them, whose passages are read back so)."""
    sentences: bool = False
    """Windows of whole sentences, overlapping by whole sentences (``--chunk-sentences``)."""
    tokens: int | None = None
    """The budget in tokens instead of words (``--chunk-tokens``), counted by ``count_tokens``."""
    tokenizer: str | None = None
    """The tokenizer that counts ``tokens`` (a registry name, a model folder, a ``tokenizer.json``); an index built
    without one counts with its model's and records that."""
    tokenizer_fingerprint: str | None = None
    """A hash of that tokenizer's ``tokenizer.json`` as an index records it: a tokenizer changed since is refused."""
    count_tokens: Callable[[list[str]], list[int]] | None = field(default=None, compare=False, repr=False)
    """The tokens each of a list of words is cut into, given by the layers above (:mod:`semiret.text.token_counts`)."""

    def __post_init__(self) -> None:
        if self.words is not None and self.tokens is not None:
            raise SemiretError("passages are counted in words (--chunk-words) or in tokens (--chunk-tokens), not both")
        if self.words is None and self.tokens is None:
            raise SemiretError("passages need a budget: a number of words (--chunk-words) or tokens (--chunk-tokens)")
        if self.tokenizer is not None and self.tokens is None:
            raise SemiretError("a tokenizer (--chunk-tokenizer) counts tokens: give --chunk-tokens, not --chunk-words")
        if self.budget < 1:
            raise SemiretError(f"passages need at least one {self.unit[:-1]} ({self._flag}), got {self.budget}")
        if not 0 <= self.overlap < self.budget:
            raise SemiretError(f"the overlap of passages (--chunk-overlap) must be at least 0 and less than their "
                               f"{self.budget} {self.unit}, got {self.overlap}")

    @property
    def budget(self) -> int:
        """The most words or tokens a window holds."""
        return self.words if self.tokens is None else self.tokens

    @property
    def unit(self) -> str:
        return "words" if self.tokens is None else "tokens"

    @property
    def _flag(self) -> str:
        return f"--chunk-{self.unit}"

    @property
    def records_starts(self) -> bool:
        """Whether passages record where they start (``chunk_start``): those of sentences or tokens, whose overlaps
        vary (windows of words overlap by ``overlap`` words, and their passages' metadata stays as it always was)."""
        return self.sentences or self.tokens is not None

    @property
    def passage_fields(self) -> tuple[str, ...]:
        """The metadata fields this chunking's passages get, which their documents may not hold."""
        return (PARENT_FIELD, CHUNK_FIELD, START_FIELD) if self.records_starts else (PARENT_FIELD, CHUNK_FIELD)

    def describe(self) -> str:
        """The windows in words, for messages: "passages of 6 words overlapping by 2"."""
        counted = f" (by {self.tokenizer})" if self.tokenizer else ""
        return (f"passages of {'whole sentences up to ' if self.sentences else ''}{self.budget} {self.unit}{counted} "
                f"overlapping by {self.overlap}")

    @classmethod
    def of(cls, value) -> "Chunking | None":
        """A chunking as the Python API takes one: a :class:`Chunking`, a dict of its fields (as ``meta.json``
        records it), a number of words, or None (whole documents); anything else is a clear error."""
        if value is None or isinstance(value, Chunking):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return cls(value)
        if isinstance(value, dict) and set(value) <= _RECORDED and value.keys() & {"words", "tokens"}:
            return cls(**value)
        raise SemiretError(f"chunking is a Chunking(words, overlap), a dict {{'words': N, 'overlap': M}} (or "
                           f"{{'tokens': N, 'sentences': True, ...}}) or a number of words, got {value!r}")

    @classmethod
    def of_options(cls, words: int | None, overlap: int = 0, sentences: bool = False, tokens: int | None = None,
                   tokenizer: str | None = None) -> "Chunking | None":
        """The chunking ``--chunk-words`` (or ``--chunk-tokens``), ``--chunk-overlap``, ``--chunk-sentences`` and
        ``--chunk-tokenizer`` ask for (None: whole documents)."""
        if words is None and tokens is None:
            for given, what in ((overlap, "--chunk-overlap is the overlap of passages"),
                                (sentences, "--chunk-sentences packs whole sentences into passages"),
                                (tokenizer, "--chunk-tokenizer counts the tokens of passages")):
                if given:
                    raise SemiretError(f"{what}: give --chunk-words too (or --chunk-tokens)")
            return None
        return cls(words, overlap, sentences=sentences, tokens=tokens, tokenizer=tokenizer)

    @classmethod
    def recorded(cls, record: dict) -> "Chunking":
        """The chunking an index's ``meta.json`` records (one made before ``spaceless`` counted runs alone)."""
        return cls(**{"spaceless": False, **record})

    def record(self) -> dict:
        """What an index records of it (``meta.json``'s ``chunking``): the keys of windows of words as before, the
        others only where used."""
        budget = {"words": self.words} if self.tokens is None else {
            "tokens": self.tokens, "tokenizer": self.tokenizer, "tokenizer_fingerprint": self.tokenizer_fingerprint}
        return {**budget, "overlap": self.overlap, "spaceless": self.spaceless,
                **({"sentences": True} if self.sentences else {})}

    def split(self, documents: Iterable[Document]) -> Iterator[Document]:
        """Each document's passages, in order."""
        for document in documents:
            yield from self.passages(document)

    def documents(self, passages: Iterable[Document]) -> Iterator[Document]:
        """The documents back from their passages, as an index stores them (each document's passages together, in
        order): a document's words joined again without the overlaps (its spacing: one space between words, where
        a window ends none beside a Chinese or Japanese character; a document of one window comes back as it was
        given), its metadata without the passage fields. A passage deleted on its own leaves its words out (the
        windows on both sides are joined whole; passages that record their starts, without what they share)."""
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
        metadata = {k: v for k, v in first.metadata.items() if k not in self.passage_fields} or None
        if numbers == [0] and first.id == first.metadata[PARENT_FIELD]:  # a document of one window, as given
            return Document(first.id, first.text, first.title, metadata)
        if self.records_starts and any(START_FIELD not in p.metadata for p in pieces):
            raise SemiretError(f"the passages of {first.metadata[PARENT_FIELD]!r} do not record where they start "
                               f"({START_FIELD}): they were cut before passages of sentences or tokens recorded it; "
                               "rebuild the index")
        words = previous = _pieces(first.text, self.spaceless)
        for before, passage in zip(pieces, pieces[1:]):
            following = _pieces(passage.text, self.spaceless)
            shared = self._shared(before, len(previous), passage)
            previous = following
            if words and 0 < shared < len(following) and following[shared - 1] == (
                    words[-1] + " "):  # the overlap shows the space after the window's last word
                words[-1] += " "
            following = following[shared:]
            if words and following and not words[-1].endswith(" ") and _spaced(words[-1], following[0]):
                # a window's text ends in no space: whether its last word was followed by one is not known
                words[-1] += " "
            words += following
        return Document(first.metadata[PARENT_FIELD], _text_of(words), first.title, metadata)

    def _shared(self, before: Document, words_before: int, passage: Document) -> int:
        """How many of ``passage``'s first words are the last of the passage ``before`` it (of ``words_before``
        words): the words both cover, where passages record their starts; else (windows of words) ``overlap`` words
        between consecutive passages, none across passages deleted on their own."""
        if self.records_starts:
            return max(before.metadata[START_FIELD] + words_before - passage.metadata[START_FIELD], 0)
        return self.overlap if passage.metadata[CHUNK_FIELD] == before.metadata[CHUNK_FIELD] + 1 else 0

    def passages(self, document: Document) -> list[Document]:
        metadata = document.metadata or {}
        taken = sorted(set(self.passage_fields) & set(metadata))
        if taken:
            raise SemiretError(f"document {document.id!r} has metadata field(s) {', '.join(taken)}, which its "
                               "passages' metadata would hold: rename them, or index the documents whole")
        words = _pieces(document.text, self.spaceless)
        windows = self._windows(words, document.text) if words else []
        if len(windows) <= 1:
            return [Document(document.id, document.text, document.title,
                             {**metadata, **self._fields(document.id, 0, 0)})]
        return [Document(f"{document.id}#{number}", _text_of(words[start:stop]), document.title,
                         {**metadata, **self._fields(document.id, number, start)})
                for number, (start, stop) in enumerate(windows)]

    def _fields(self, parent: str, number: int, start: int) -> dict:
        """A passage's own metadata fields (:attr:`passage_fields`): its document, its number, where it starts."""
        return {PARENT_FIELD: parent, CHUNK_FIELD: number, **({START_FIELD: start} if self.records_starts else {})}

    def _sizes(self, pieces: list[str]) -> list[int]:
        """What each word weighs in a window's budget: 1, or its tokens."""
        if self.tokens is None:
            return [1] * len(pieces)
        if self.count_tokens is None:
            raise SemiretError(f"{self.describe()} are counted by a tokenizer, which this chunking was given none of "
                               "(an index gives it one; semiret.text.token_counts.counting(chunking) the one it names)")
        return self.count_tokens([piece.rstrip() for piece in pieces])

    def _windows(self, pieces: list[str], text: str) -> list[tuple[int, int]]:
        """The windows of a text's words, as ranges of them."""
        sizes = self._sizes(pieces)
        if not self.sentences:
            return _packed(sizes, self.budget, self.overlap)
        totals = [0, *itertools.accumulate(sizes)]
        stops = _sentence_stops(pieces, _gaps(text, self.spaceless))
        sentences = list(zip([0, *stops], stops))
        windows = []
        for too_long, run in itertools.groupby(sentences, key=lambda s: totals[s[1]] - totals[s[0]] > self.budget):
            run = list(run)
            if too_long:  # each cut alone, by words
                windows += [(begin + start, begin + stop) for begin, end in run
                            for start, stop in _packed(sizes[begin:end], self.budget, self.overlap)]
            else:
                windows += [(run[first][0], run[last - 1][1]) for first, last in
                            _packed([totals[end] - totals[begin] for begin, end in run], self.budget, self.overlap)]
        return windows
