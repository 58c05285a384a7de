"""Highlighted fragments of a hit's text (OpenSearch's and Elasticsearch's ``highlight``): the passages of a document
where the query's matches cluster, the matching words marked.

Which words match is the retriever's own notion where it has one: for retrievers that score by summing term weights,
a word matches when it encodes (as a query would) to a term that both the query and the document hold with a
weight, so a learned sparse model's expansions and BM25's stems both show; for others (dense, re-ranking, hybrid),
a word matches when its stem is one of the query's (English stemming, stopwords left out). Fragments are windows of
``fragment_words`` words, chosen greedily by the distinct matching terms they hold (then their number of matches),
never overlapping, and returned in the document's order. Written here because no library highlights over
semiret's own analyzers and token vocabularies (Lucene's highlighter is Java).
"""

from __future__ import annotations

import re
from typing import Callable, Sequence

from semiret.text.analyzer import WordAnalyzer

WORD = re.compile(r"\w+", re.UNICODE)
FRAGMENT_WORDS = 25
FRAGMENTS = 3
TAGS = ("<em>", "</em>")
ELLIPSIS = "…"
STEMMER = WordAnalyzer()
"""Words to their English stems, stopwords dropped: how words match for retrievers without terms of their own."""


def fragments(text: str, matches: Callable[[list[str]], list[frozenset]], fragment_words: int = FRAGMENT_WORDS,
              count: int = FRAGMENTS, tags: Sequence[str] = TAGS) -> list[str]:
    """The ``count`` best fragments of ``text`` with its matching words between ``tags``. ``matches`` gives, for
    the text's words, the matching terms each stands for (empty: no match). No match at all: no fragments."""
    if fragment_words < 1 or count < 1:
        raise ValueError("fragment_words and count must be at least 1")
    spans = [m.span() for m in WORD.finditer(text)]
    if not spans:
        return []
    terms = matches([text[start:end] for start, end in spans])
    if not any(terms):
        return []
    open_tag, close_tag = tags
    windows = []
    for first in range(0, max(1, len(spans) - fragment_words + 1)):
        held = terms[first: first + fragment_words]
        distinct = frozenset().union(*held)
        if distinct:
            windows.append((-len(distinct), -sum(1 for t in held if t), first))
    chosen: list[int] = []
    for _, _, first in sorted(windows):
        if all(abs(first - other) >= fragment_words for other in chosen):
            chosen.append(first)
            if len(chosen) == count:
                break
    out = []
    for first in sorted(chosen):
        last = min(first + fragment_words, len(spans)) - 1
        pieces, position = [], 0 if first == 0 else spans[first][0]  # the text's own start and end are kept
        for n in range(first, last + 1):
            start, end = spans[n]
            pieces.append(text[position:start])
            word = text[start:end]
            pieces.append(f"{open_tag}{word}{close_tag}" if terms[n] else word)
            position = end
        if last == len(spans) - 1:
            pieces.append(text[position:])
        fragment = " ".join("".join(pieces).split())
        out.append((ELLIPSIS if first > 0 else "") + fragment + (ELLIPSIS if last < len(spans) - 1 else ""))
    return out
