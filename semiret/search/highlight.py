"""Highlighted fragments of a hit's text (OpenSearch's and Elasticsearch's ``highlight``): the passages of a document
where the query's matches cluster, the matching words marked.

Which words match is the retriever's own notion where it has one: for retrievers that score by summing term weights,
a word matches when it encodes (as a query would) to a term that both the query and the document hold with a
weight, so a learned sparse model's expansions and BM25's stems both show; for others (dense, re-ranking, hybrid),
a word matches when its stem is one of the query's (English stemming, stopwords left out). Fragments are windows of
``fragment_words`` words, chosen greedily by the distinct matching terms they hold (then their number of matches,
then matches nearest their middle), never overlapping, and returned in the document's order; runs of white space
are shown as one space. The text is the document's title and text; over an index of BM25 over weighted fields
(``text_fields``), the fields its BM25 reads, a metadata field's fragments beginning with its name
(``keywords: <em>statins</em>; lipids``). Written here because no library highlights over
semiret's own analyzers and token vocabularies (Lucene's highlighter is Java).
"""

from __future__ import annotations

import bisect
import html
from typing import Callable, Sequence

import regex

from semiret.data.collection import Document
from semiret.text.analyzer import WORD, WordAnalyzer
from semiret.text.fields import OWN_FIELDS, TextFields, read_fields

SPACES = regex.compile(r"\s+")
FRAGMENT_WORDS = 25
FRAGMENTS = 3
TAGS = ("<em>", "</em>")
ENCODERS = ("default", "html")
ELLIPSIS = "…"
VALUES_JOIN = "; "
"""Between the values of a metadata field's list, shown in a highlight (``keywords: statins; <em>lipids</em>``)."""
STEMMER = WordAnalyzer(unicode_form="NFC", drop_invisible=True)
"""Words to their English stems, stopwords dropped, read as a new BM25 index reads them (an accent typed apart is one
word with its letter): how words match for retrievers without terms of their own."""

Pieces = list[tuple[str, bool]]
"""A fragment as pieces of text, each saying whether it is a matching word."""


def fragment_pieces(text: str, matches: Callable[[list[str]], list[frozenset]], fragment_words: int = FRAGMENT_WORDS,
                    count: int = FRAGMENTS) -> list[Pieces]:
    """The ``count`` best fragments of ``text``, each as pieces. ``matches`` gives, for the text's words, the matching
    terms each stands for (empty: no match). Windows are ranked by the distinct terms they hold, then their matches,
    then how near the middle the matches sit (a lone match gets words on both sides), then position. No match at
    all: no fragments."""
    return field_fragment_pieces([(None, text)], matches, fragment_words, count)


def field_fragment_pieces(texts: Sequence[tuple[str | None, str]], matches: Callable[[list[str]], list[frozenset]],
                          fragment_words: int = FRAGMENT_WORDS, count: int = FRAGMENTS) -> list[Pieces]:
    """:func:`fragment_pieces` of several fields' texts (``(name, text)``, :func:`field_texts`): the ``count`` best
    windows of any of them, ranked alike (an earlier field's first among equals), in the fields' order, then each
    field's. A fragment of a named field (a metadata field a BM25 index reads, ``text_fields``) begins with its name,
    a piece ``"keywords: "`` that is no match, as OpenSearch's highlight names each field's fragments; those of the
    unnamed one (the title and text) are as :func:`fragment_pieces` gives them."""
    if fragment_words < 1 or count < 1:
        raise ValueError("fragment_words and count must be at least 1")
    read: list[tuple[list[tuple[int, int]], list[frozenset]]] = []
    windows = []
    for field, (_, text) in enumerate(texts):
        spans = [m.span() for m in WORD.finditer(text)]
        terms = matches([text[start:end] for start, end in spans]) if spans else []
        read.append((spans, terms))
        matched = [n for n, held in enumerate(terms) if held]
        if not matched:
            continue
        for first in range(0, max(1, len(spans) - fragment_words + 1)):
            inside = matched[bisect.bisect_left(matched, first): bisect.bisect_left(matched, first + fragment_words)]
            if inside:
                distinct = frozenset().union(*(terms[n] for n in inside))
                off_centre = abs(sum(inside) / len(inside) - (first + (fragment_words - 1) / 2))
                windows.append((-len(distinct), -len(inside), off_centre, field, first))
    chosen: list[tuple[int, int]] = []
    for *_, field, first in sorted(windows):
        if all(field != other_field or abs(first - other) >= fragment_words for other_field, other in chosen):
            chosen.append((field, first))
            if len(chosen) == count:
                break
    out = []
    for field, first in sorted(chosen):
        name, text = texts[field]
        spans, terms = read[field]
        last = min(first + fragment_words, len(spans)) - 1
        pieces: Pieces = [(f"{name}: ", False)] if name is not None else []
        pieces += [(ELLIPSIS, False)] if first > 0 else []
        position = 0 if first == 0 else spans[first][0]  # the text's own start and end are kept
        for n in range(first, last + 1):
            start, end = spans[n]
            between = SPACES.sub(" ", text[position:start])
            pieces += [(between if n > first else between.lstrip(), False), (text[start:end], bool(terms[n]))]
            position = end
        pieces.append((SPACES.sub(" ", text[position:]).rstrip() if last == len(spans) - 1 else ELLIPSIS, False))
        out.append([(piece, hit) for piece, hit in pieces if piece])
    return out


def field_texts(document: Document, fields: TextFields | None) -> list[tuple[str | None, str]]:
    """What a highlight of ``document`` reads, for :func:`field_fragment_pieces`: the fields an index reading
    ``fields`` reads of it (:func:`~semiret.text.fields.read_fields`; None: its title and text), the title and text
    as one unnamed text (:attr:`Document.full_text`'s form), then each metadata field under its name, a list's values
    joined by ``VALUES_JOIN``."""
    if fields is None:
        return [(None, document.full_text)]
    read = read_fields(document, fields)
    own = " ".join(value for name, values in read if name in OWN_FIELDS for value in values)
    return ([(None, own)] if own else []) + [(name, VALUES_JOIN.join(values)) for name, values in read
                                             if name not in OWN_FIELDS]


def tagged(pieces: Pieces, tags: Sequence[str] = TAGS, encoder: str = "default") -> str:
    """A fragment as one string, its matching words between ``tags``; ``encoder="html"`` escapes the text (``<``,
    ``>``, ``&`` and quotes; never the tags), so that a page can show the fragment as HTML without running markup
    a document holds (OpenSearch's highlight encoder)."""
    open_tag, close_tag = tags
    escape = html.escape if encoder == "html" else str
    return "".join(f"{open_tag}{escape(piece)}{close_tag}" if hit else escape(piece) for piece, hit in pieces)


def fragments(text: str, matches: Callable[[list[str]], list[frozenset]], fragment_words: int = FRAGMENT_WORDS,
              count: int = FRAGMENTS, tags: Sequence[str] = TAGS, encoder: str = "default") -> list[str]:
    """:func:`fragment_pieces` as strings, matching words between ``tags`` (:func:`tagged`)."""
    return [tagged(pieces, tags, encoder) for pieces in fragment_pieces(text, matches, fragment_words, count)]


def field_fragments(texts: Sequence[tuple[str | None, str]], matches: Callable[[list[str]], list[frozenset]],
                    fragment_words: int = FRAGMENT_WORDS, count: int = FRAGMENTS, tags: Sequence[str] = TAGS,
                    encoder: str = "default") -> list[str]:
    """:func:`field_fragment_pieces` as strings (:func:`tagged`): ``"keywords: <em>statins</em>; lipids"``."""
    return [tagged(pieces, tags, encoder) for pieces in field_fragment_pieces(texts, matches, fragment_words, count)]
