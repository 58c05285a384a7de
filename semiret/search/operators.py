"""A search box's operators in query texts (``search(..., operators=True)``, ``search --operators``, the API's
``"operators": true``), read as Meilisearch and Typesense read them by default and as OpenSearch's
``simple_query_string`` does:

- ``"heart failure"``: a hit holds the phrase, its words one after the other;
- ``+statin``: a hit holds the word (``+statin*``: a word it begins);
- ``-mouse``, ``-"animal model"``: a hit holds neither;
- every other word as written (``COVID-19``, ``e-mail``: a ``+`` or ``-`` counts only at a word's start);
- typographic quotes (“heart failure”, „…“, «…») and the minus sign (−) read as ``"`` and ``-``.

What a query requires or excludes becomes a ``$text`` filter beside the search's own (the stored title or text, words
matched as written and case-folded: :class:`~semiret.indexes.filters.TextCondition`; a word of several, ``-COVID-19``,
a phrase of them); the retriever scores the query's words without the excluded ones, as it scores any text, so a
required phrase also counts towards the score. The documents that hold what a query requires and that its words score
nothing follow its scored hits at 0 (``+stat*`` alone: every document holding a word it begins), as a required
clause matches in OpenSearch. A query is never refused for its syntax: a quote that no quote closes, or a sign before
no word, is read as written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import regex

from semiret.indexes.filters import TEXT
from semiret.text.analyzer import plain_words

_TOKEN = regex.compile(r'(?P<sign>[+-]?)"(?P<phrase>[^"]*)"|(?P<word>\S+)')
"""A quoted phrase (with its sign), else a run of anything but spaces (a quote no quote closes is part of it)."""
_TYPOGRAPHIC = str.maketrans({"\u201c": '"', "\u201d": '"', "\u201e": '"', "\u201f": '"', "\u00ab": '"',
                              "\u00bb": '"', "\u2212": "-"})
"""Typographic quotes (a phone's keyboard writes them for ") and the minus sign, read as a search box's own."""


@dataclass(frozen=True)
class ParsedQuery:
    """A query text read for its operators (:func:`parse_operators`)."""

    text: str
    """What the retriever scores: the query without its operators and excluded words."""
    required: tuple[str, ...] = ()
    """What a hit must hold: words, ``prefix*`` and ``"phrases"``, as a ``$text`` condition reads them."""
    excluded: tuple[str, ...] = ()
    """What a hit must not hold, each as a ``$text`` condition."""
    finished: bool = False
    """Whether the query ends in an operator or a phrase, not a plain word: its scored words are all typed."""

    def scored(self, query_side=None) -> str:
        """:attr:`text` as ``query_side`` reads it: a side that completes a last word still being typed (BM25's
        ``prefix``) reads a finished query's text with the space that says so (else "heart -mouse", scored as "heart",
        found heartburn first); others the text alone (a trailing space is a token to some tokenizers)."""
        finished = self.finished and self.text and getattr(query_side, "completes_last_word", False)
        return self.text + " " if finished else self.text

    def filter(self, given: dict | None) -> dict | None:
        """``given`` (the search's own filter) and this query's conditions, all of them."""
        conditions = ([{TEXT: " ".join(self.required)}] if self.required else []) + [
            {"$not": {TEXT: each}} for each in self.excluded]
        if not conditions:
            return given
        if given:
            conditions.insert(0, given)
        return conditions[0] if len(conditions) == 1 else {"$and": conditions}

    def filter_key(self, given: dict | None) -> str:
        """:meth:`filter` written one way: queries with equal keys are searched in one batch."""
        return json.dumps(self.filter(given), sort_keys=True, default=str)


def _condition(written: str, prefix: bool = False) -> str | None:
    """``written`` as a ``$text`` condition: one word, ``prefix*``, or a ``"phrase"`` of its words (None: no word); a
    prefix of several words (``l'hom*``, ``e-mai*``) holds each word, the last as a prefix, anywhere (a phrase
    ends in a whole word)."""
    words = plain_words(written)
    if not words:
        return None
    if len(words) > 1:
        return " ".join(words) + "*" if prefix else '"' + " ".join(words) + '"'
    return words[0] + "*" * prefix


def parse_operators(text: str) -> ParsedQuery:
    """The words ``text`` scores, requires and excludes (this module's syntax)."""
    scored, required, excluded = [], [], []
    typed = text.translate(_TYPOGRAPHIC)
    open_word = False  # whether the query ends in a plain word (one a prefix search may complete)
    for token in _TOKEN.finditer(typed):
        open_word = False
        phrase = token["phrase"]
        if phrase is not None:
            condition = _condition(phrase)
            if condition is None:
                continue  # "" or a phrase of marks only: nothing to match
            (excluded if token["sign"] == "-" else required).append(condition)
            if token["sign"] != "-":
                scored.append(phrase)
            continue
        word = token["word"]
        sign, body = word[0], word[1:]
        condition = _condition(body.removesuffix("*"), prefix=body.endswith("*")) if sign in "+-" else None
        if condition is None:  # no operator, or a sign before no word (a lone "-" is a dash)
            scored.append(word)
            open_word = token.end() == len(typed)
        elif sign == "+":
            required.append(condition)
            scored.append(body.removesuffix("*"))
        else:
            excluded.append(condition)
    return ParsedQuery(" ".join(scored), tuple(dict.fromkeys(required)), tuple(dict.fromkeys(excluded)),
                       finished=not open_word)


def query_filter(text: str, operators: bool, given: dict | None) -> dict | None:
    """The filter a search read ``text`` with (``given``, and its operators' conditions when ``operators`` is set):
    what explaining and highlighting its hits read the query against too."""
    return parse_operators(text).filter(given) if operators else given


def scored_text(text: str, operators: bool, query_side=None) -> str:
    """What a retriever (its ``query_side``) scores of ``text`` (highlights and explanations read the same words):
    without its operators and excluded words when ``operators`` is set (:meth:`ParsedQuery.scored`), else ``text``."""
    return parse_operators(text).scored(query_side) if operators else text
