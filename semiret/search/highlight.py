"""Highlighted fragments of a hit's text (OpenSearch's and Elasticsearch's ``highlight``): the passages of a document
where the query's matches cluster, the matching words marked.

Which words match is the retriever's own notion where it has one: for retrievers that score by summing term weights,
a word matches when it encodes (as a query would) to a term that both the query and the document hold with a
weight, so a learned sparse model's expansions and BM25's stems both show; for others (dense, re-ranking, hybrid),
a word matches when its stem is one of the query's (English stemming, stopwords left out). Fragments are windows of
``fragment_words`` words, chosen greedily by the distinct matching terms they hold (then their number of matches,
then matches nearest their middle), never overlapping, and returned in the document's order; runs of white space
are shown as one space. Written here because no library highlights over
semiret's own analyzers and token vocabularies (Lucene's highlighter is Java).
"""

from __future__ import annotations

import bisect
import html
from typing import Callable, Sequence

import regex

from semiret.text.analyzer import WORD, WordAnalyzer

SPACES = regex.compile(r"\s+")
FRAGMENT_WORDS = 25
FRAGMENTS = 3
TAGS = ("<em>", "</em>")
ENCODERS = ("default", "html")
ELLIPSIS = "…"
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
    if fragment_words < 1 or count < 1:
        raise ValueError("fragment_words and count must be at least 1")
    spans = [m.span() for m in WORD.finditer(text)]
    if not spans:
        return []
    terms = matches([text[start:end] for start, end in spans])
    matched = [n for n, held in enumerate(terms) if held]
    if not matched:
        return []
    windows = []
    for first in range(0, max(1, len(spans) - fragment_words + 1)):
        inside = matched[bisect.bisect_left(matched, first): bisect.bisect_left(matched, first + fragment_words)]
        if inside:
            distinct = frozenset().union(*(terms[n] for n in inside))
            off_centre = abs(sum(inside) / len(inside) - (first + (fragment_words - 1) / 2))
            windows.append((-len(distinct), -len(inside), off_centre, first))
    chosen: list[int] = []
    for *_, first in sorted(windows):
        if all(abs(first - other) >= fragment_words for other in chosen):
            chosen.append(first)
            if len(chosen) == count:
                break
    out = []
    for first in sorted(chosen):
        last = min(first + fragment_words, len(spans)) - 1
        pieces: Pieces = [(ELLIPSIS, False)] if first > 0 else []
        position = 0 if first == 0 else spans[first][0]  # the text's own start and end are kept
        for n in range(first, last + 1):
            start, end = spans[n]
            between = SPACES.sub(" ", text[position:start])
            pieces += [(between if n > first else between.lstrip(), False), (text[start:end], bool(terms[n]))]
            position = end
        pieces.append((SPACES.sub(" ", text[position:]).rstrip() if last == len(spans) - 1 else ELLIPSIS, False))
        out.append([(piece, hit) for piece, hit in pieces if piece])
    return out


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
