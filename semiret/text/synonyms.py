"""Synonym rules for queries, in the Solr format OpenSearch's and Elasticsearch's synonym filters read:

- ``heart attack, myocardial infarction, mi``: equivalent phrases; a query holding any of them also matches the
  others (``expand``, the filters' default);
- ``colour, hue => color``: explicit; the phrases on the left are replaced by those on the right;
- ``#`` starts a comment, blank lines are skipped, ``\\,`` and ``\\=`` write a comma or an equals sign.

Phrases are read with the index's analyzer (lowercase, stopwords, stems), so ``Heart Attacks`` in a query matches
the rule's ``heart attack``; a query's words are matched to rules longest phrase first, left to right, never two
rules over one word (Lucene's ``SynonymGraphFilter``). By hand, not with a library: the parsing is a few lines, and
the matching must run over the index analyzer's terms, which no synonym library takes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from semiret.errors import SemiretError

MAX_RULES = 100_000
"""The most rules one set may hold (Elasticsearch's synonyms sets hold as many)."""

_SPLIT_ARROW = re.compile(r"(?<!\\)=>")
_SPLIT_COMMA = re.compile(r"(?<!\\),")


@dataclass(frozen=True)
class SynonymRule:
    """One line of a synonyms file: its phrases as written, and where it stands (for error messages)."""

    line: int
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    """The phrases the inputs become: the inputs themselves for an equivalence, the right side for ``=>``."""

    @property
    def explicit(self) -> bool:
        return self.inputs != self.outputs


def read_synonyms(source: str | Path | Iterable[str], name: str | None = None) -> list[str]:
    """The lines of a synonyms file (a path), or the rule lines given, checked by :func:`parse_synonyms`."""
    if isinstance(source, (str, Path)):
        path = Path(source)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise SemiretError(f"{path}: no such synonyms file") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise SemiretError(f"{path}: cannot read it as a UTF-8 synonyms file ({exc})") from None
        lines, name = text.splitlines(), name or str(path)
    else:
        lines = list(source)
        if any(not isinstance(line, str) for line in lines):
            raise SemiretError("synonym rules are lines of text, one rule each")
        lines = [piece for line in lines for piece in line.splitlines() or [""]]
    parse_synonyms(lines, name or "synonyms")
    return lines


def parse_synonyms(lines: list[str], name: str = "synonyms") -> list[SynonymRule]:
    """The rules of a synonyms file's lines; a malformed line is an error naming ``name`` and the line."""
    rules = []
    for number, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        sides = _SPLIT_ARROW.split(line)
        if len(sides) > 2:
            raise SemiretError(f"{name}, line {number}: {raw.strip()!r} holds '=>' more than once")
        phrases = [_phrases(side, name, number, raw) for side in sides]
        if len(sides) == 1 and len(phrases[0]) < 2:
            raise SemiretError(f"{name}, line {number}: {raw.strip()!r} names one phrase; write its equivalents "
                               "after commas (a, b) or what it becomes after '=>' (a => b)")
        rules.append(SynonymRule(number, phrases[0], phrases[-1]))
        if len(rules) > MAX_RULES:
            raise SemiretError(f"{name}: more than {MAX_RULES:,} rules")
    return rules


def _phrases(side: str, name: str, number: int, raw: str) -> tuple[str, ...]:
    phrases = tuple(piece.strip().replace("\\,", ",").replace("\\=", "=") for piece in _SPLIT_COMMA.split(side))
    if not all(phrases):
        raise SemiretError(f"{name}, line {number}: {raw.strip()!r} has an empty phrase (two commas in a row, or a "
                           "comma or '=>' at an end)")
    return phrases


@dataclass
class SynonymMatch:
    """Where a rule matched a query's terms (``terms[start:end]``), the phrases it stands for (each a tuple of
    analyzed terms), and whether the words matched stay in the query (an equivalence) or are replaced."""

    start: int
    end: int
    alternatives: list[tuple[str, ...]]
    keeps_original: bool


@dataclass
class _Entry:
    alternatives: dict[tuple[str, ...], None] = field(default_factory=dict)  # ordered, without repeats
    keeps_original: bool = False


class SynonymMap:
    """Rules compiled over an analyzer (``analyze``: text -> its terms): an analyzed phrase -> what it matches.

    Each phrase must keep a term once analyzed: a phrase of stopwords alone is an error naming its line. Rules
    with the same phrase on the left are merged (their alternatives together, as Solr's parser merges them)."""

    def __init__(self, rules: list[SynonymRule], analyze: Callable[[str], list[str]], name: str = "synonyms"):
        self._entries: dict[tuple[str, ...], _Entry] = {}
        self.longest = 0
        for rule in rules:
            inputs = [self._analyzed(phrase, analyze, name, rule) for phrase in rule.inputs]
            outputs = inputs if not rule.explicit else [self._analyzed(p, analyze, name, rule) for p in rule.outputs]
            for phrase in inputs:
                entry = self._entries.setdefault(phrase, _Entry())
                entry.keeps_original |= phrase in outputs  # "a => a, b" keeps a as "a, b" does
                for other in outputs:
                    if other != phrase:
                        entry.alternatives[other] = None
                self.longest = max(self.longest, len(phrase))
        # "run, running": one stem, nothing to add
        self._entries = {phrase: entry for phrase, entry in self._entries.items() if entry.alternatives}

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def _analyzed(phrase: str, analyze: Callable[[str], list[str]], name: str, rule: SynonymRule) -> tuple[str, ...]:
        terms = tuple(analyze(phrase))
        if not terms:
            raise SemiretError(f"{name}, line {rule.line}: {phrase!r} leaves no word once analyzed (stopwords "
                               "only), so no query could match it")
        return terms

    def matches(self, terms: list[str]) -> list[SynonymMatch]:
        """The rules ``terms`` (a query's, analyzed) hold: the longest phrase at each position, left to right,
        a matched word never matched again."""
        found, start = [], 0
        while start < len(terms):
            for end in range(min(len(terms), start + self.longest), start, -1):
                entry = self._entries.get(tuple(terms[start:end]))
                if entry is not None:
                    found.append(SynonymMatch(start, end, list(entry.alternatives), entry.keeps_original))
                    start = end
                    break
            else:
                start += 1
        return found
