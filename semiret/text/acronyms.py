"""Abbreviations a corpus defines, as synonym rules: "myocardial infarction (MI)" gives ``mi, myocardial infarction``.

Schwartz and Hearst's algorithm (PSB 2003), the one scispaCy's abbreviation detector and most biomedical text
pipelines use: a short form in parentheses after its long form (or the other way round), the long form the shortest
run of the words before it in which the short form's characters occur in order, its first character starting a
word. By hand: it is a page of code, and the libraries that have it bring a spaCy pipeline with them.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from typing import Iterable

_PARENTHESES = re.compile(r"\(([^()]{1,60})\)")
_WRITTEN = re.compile(r"[\w-]+")
_WORD = re.compile(r"\S+")


def _short_form(candidate: str) -> bool:
    """Whether ``candidate`` can be an abbreviation: 2 to 10 characters, at most two words, a letter in it, its first
    character a letter or digit, not all lowercase (an abbreviation in lowercase is most often a word)."""
    words = candidate.split()
    return (2 <= len(candidate) <= 10 and len(words) <= 2 and candidate[0].isalnum()
            and any(c.isalpha() for c in candidate) and candidate != candidate.lower())


def _long_form(short: str, words: list[str]) -> str | None:
    """The shortest run of the last ``words`` whose characters hold ``short``'s letters and digits in order, right
    to left, its first character at the start of a word (Schwartz and Hearst's ``findBestLongForm``)."""
    text = " ".join(words)
    letters = [c.lower() for c in short if c.isalnum()]
    s, l = len(letters) - 1, len(text) - 1
    while s >= 0:
        wanted = letters[s]
        while l >= 0 and (text[l].lower() != wanted or (s == 0 and l > 0 and text[l - 1].isalnum())):
            l -= 1
        if l < 0:
            return None
        s -= 1
        l -= 1
    start = text.rfind(" ", 0, l + 1) + 1
    long_form = text[start:].strip(" ,;:-")
    if len(long_form.split()) < 2 and len(long_form) <= len(short):
        return None  # "the NIH (NIH)": no expansion
    return long_form if short.lower() not in long_form.lower().split() else None


_SENTENCE_END = re.compile(r"[.;:!?]\s")
_BEFORE = 300
"""Characters before a parenthesis a long form is looked for in (a long form has at most 20 words)."""


def _pairs(text: str) -> Iterable[tuple[str, str]]:
    for match in _PARENTHESES.finditer(text):
        inside = match.group(1).strip()
        before = text[max(0, match.start() - _BEFORE):match.start()].rstrip()
        sentence = _SENTENCE_END.split(before)[-1]
        if _short_form(inside):  # long form (SF)
            words = _WORD.findall(sentence)
            room = min(len(inside) + 5, 2 * len(inside))
            long_form = _long_form(inside, words[-room:])
            if long_form:
                yield inside, long_form
        else:  # SF (long form)
            words = _WORD.findall(sentence)
            if words and _short_form(words[-1]) and len(inside.split()) > 1:
                short = words[-1].strip(",;:")
                long_form = _long_form(short, _WORD.findall(inside))
                if long_form and long_form == inside.strip():
                    yield short, long_form


def mine_abbreviations(texts: Iterable[str], min_count: int = 1) -> list[tuple[str, str, int]]:
    """The abbreviations ``texts`` define, with their commonest long form and how many definitions name it
    (``min_count`` at least), most defined first. A short form also written in lowercase as often as in capitals
    (AIDS as "aids", CAT as "cat") is left out: as a synonym it would expand the ordinary word."""
    long_forms: dict[str, Counter] = defaultdict(Counter)
    written: Counter = Counter()  # each word as written: a short form's count in capitals, and in lowercase
    for text in texts:  # one pass: the texts may be an index's whole corpus, read as it streams
        for short, long_form in _pairs(text):
            long_forms[short][long_form.lower()] += 1
        written.update(_WRITTEN.findall(text))
    found = []
    for short, counted in long_forms.items():
        long_form, count = counted.most_common(1)[0]
        if count >= min_count and written[short.lower()] < max(written[short], 1):
            found.append((short, long_form, count))
    return sorted(found, key=lambda row: (-row[2], row[0]))
