"""Synonym rules for queries, in the Solr format OpenSearch's and Elasticsearch's synonym filters read:

- ``heart attack, myocardial infarction, mi``: equivalent phrases; a query holding any of them also matches the
  others (``expand``, the filters' default);
- ``colour, hue => color``: explicit; the phrases on the left are replaced by those on the right;
- a line starting with ``#`` is a comment (a ``#`` further on is a character: ``c#, csharp``), blank lines are
  skipped, ``\\,`` and ``\\=`` write a comma or an equals sign.

Phrases are read with the index's analyzer (lowercase, stopwords, stems), so ``Heart Attacks`` in a query matches
the rule's ``heart attack``; a query's words are matched to rules longest phrase first, left to right, never two
rules over one word (Lucene's ``SynonymGraphFilter``). By hand, not with a library: the parsing is a few lines, and
the matching must run over the index analyzer's terms, which no synonym library takes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Hashable, Iterable, Sequence

from semiret.errors import SemiretError

MAX_RULES = 100_000
"""The most rules one set may hold (Elasticsearch's synonyms sets hold as many)."""
MAX_PHRASES = 1_000
"""The most phrases one rule may name (a query matching one of them is expanded by all the others)."""

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
    """The lines of a synonyms file (a path; a byte-order mark dropped), or the rule lines given (each one line),
    checked by :func:`parse_synonyms`."""
    if isinstance(source, (str, Path)):
        path = Path(source)
        try:
            text = path.read_text(encoding="utf-8-sig")
        except FileNotFoundError:
            hint = " (rules themselves are given as a list of lines)" if "," in str(source) or "=>" in str(source) else ""
            raise SemiretError(f"{path}: no such synonyms file{hint}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise SemiretError(f"{path}: cannot read it as a UTF-8 synonyms file ({exc})") from None
        lines, name = text.splitlines(), name or str(path)
    else:
        lines = list(source)
        name = name or "synonyms"
        for number, line in enumerate(lines, 1):
            if not isinstance(line, str):
                raise SemiretError(f"{name}, line {number}: {line!r} is no text (synonym rules are lines of text)")
            if len(line.splitlines()) > 1:
                raise SemiretError(f"{name}, line {number}: {line!r} holds a line break: one rule a line")
        if lines and lines[0].startswith("\ufeff"):
            lines[0] = lines[0][1:]
    parse_synonyms(lines, name)
    return lines


def parse_synonyms(lines: list[str], name: str = "synonyms") -> list[SynonymRule]:
    """The rules of a synonyms file's lines; a malformed line is an error naming ``name`` and the line."""
    rules = []
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        sides = _SPLIT_ARROW.split(line)
        if len(sides) > 2:
            raise SemiretError(f"{name}, line {number}: {line!r} holds '=>' more than once")
        phrases = [_phrases(side, name, number, line) for side in sides]
        if len(sides) == 1 and len(phrases[0]) < 2:
            raise SemiretError(f"{name}, line {number}: {line!r} names one phrase; write its equivalents "
                               "after commas (a, b) or what it becomes after '=>' (a => b)")
        if sum(map(len, phrases)) > MAX_PHRASES:
            raise SemiretError(f"{name}, line {number}: more than {MAX_PHRASES:,} phrases in one rule")
        rules.append(SynonymRule(number, phrases[0], phrases[-1]))
        if len(rules) > MAX_RULES:
            raise SemiretError(f"{name}: more than {MAX_RULES:,} rules")
    return rules


def _phrases(side: str, name: str, number: int, line: str) -> tuple[str, ...]:
    phrases = tuple(piece.strip().replace("\\,", ",").replace("\\=", "=") for piece in _SPLIT_COMMA.split(side))
    if not all(phrases):
        raise SemiretError(f"{name}, line {number}: {line!r} has an empty phrase (two commas in a row, or a comma or "
                           "'=>' at an end)")
    return phrases


def escaped(phrase: str) -> str:
    """``phrase`` written for a rule: its commas and equals signs escaped."""
    return phrase.replace(",", "\\,").replace("=", "\\=")


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
    groups: list[tuple[tuple[str, ...], ...]] = field(default_factory=list)  # rules' outputs, shared, not copied
    keeps_original: bool = False


class SynonymMap:
    """Rules compiled over an analyzer (``analyze``: text -> its terms): an analyzed phrase -> what it matches.

    Each phrase must keep a term once analyzed: a phrase of stopwords alone is an error naming its line. Rules
    with the same phrase on the left are merged (their alternatives together, as Solr's parser merges them).
    Memory grows with the phrases written, not with their pairs: an entry refers to its rules' outputs."""

    def __init__(self, rules: list[SynonymRule], analyze: Callable[[str], list[str]], name: str = "synonyms"):
        self._entries: dict[tuple[str, ...], _Entry] = {}
        self.longest = 0
        self.rules = len(rules)
        """How many rules were compiled."""
        self.idle_lines: list[int] = []
        """Lines of rules that add nothing once analyzed ("run, running": one stem)."""
        for rule in rules:
            inputs = tuple(self._analyzed(phrase, analyze, name, rule) for phrase in rule.inputs)
            outputs = inputs if not rule.explicit else tuple(self._analyzed(p, analyze, name, rule)
                                                             for p in rule.outputs)
            distinct = set(outputs)
            if len(distinct) == 1 and set(inputs) == distinct:
                self.idle_lines.append(rule.line)
                continue
            for phrase in inputs:
                entry = self._entries.setdefault(phrase, _Entry())
                entry.groups.append(outputs)
                entry.keeps_original |= phrase in distinct  # "a => a, b" keeps a as "a, b" does
                self.longest = max(self.longest, len(phrase))
        # a phrase whose rules name only itself ("a, a b" analyzed: only "a b" gains one)
        self._entries = {phrase: entry for phrase, entry in self._entries.items()
                         if any(other != phrase for group in entry.groups for other in group)}

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def _analyzed(phrase: str, analyze: Callable[[str], list[str]], name: str, rule: SynonymRule) -> tuple[str, ...]:
        terms = tuple(analyze(phrase))
        if not terms:
            raise SemiretError(f"{name}, line {rule.line}: {phrase!r} leaves no word once analyzed (stopwords "
                               "only), so no query could match it")
        return terms

    def matches(self, terms: list, word_starts: Sequence[bool] | None = None) -> list[SynonymMatch]:
        """The rules ``terms`` (a query's, analyzed) hold: the longest phrase at each position, left to right,
        a matched word never matched again. ``word_starts``: which terms begin a word, where terms are pieces of
        words (WordPiece tokens): a phrase then matches whole words only ("car" not in "car ##cino ##ma")."""
        found, start = [], 0
        while start < len(terms):
            if word_starts is not None and not word_starts[start]:
                start += 1
                continue
            for end in range(min(len(terms), start + self.longest), start, -1):
                if word_starts is not None and end < len(terms) and not word_starts[end]:
                    continue
                phrase = tuple(terms[start:end])
                entry = self._entries.get(phrase)
                if entry is not None:
                    alternatives = dict.fromkeys(other for group in entry.groups for other in group if other != phrase)
                    found.append(SynonymMatch(start, end, list(alternatives), entry.keeps_original))
                    start = end
                    break
            else:
                start += 1
        return found


@dataclass
class Expansion:
    """What a query's synonyms add: each synonym term with the largest factor a synonym scales its own weight by,
    the positions of the query's terms a rule replaces, and those of the terms rules matched."""

    added: dict[Hashable, float]
    replaced: set[int]
    matched: set[int]


def expansion(terms: Sequence[Hashable], synonyms: SynonymMap, weight: Callable[[Hashable], float],
              held: Callable[[Hashable], bool], word_starts: Sequence[bool] | None = None) -> Expansion:
    """The synonyms of ``terms`` (a query's, analyzed as the rules were; ``word_starts``: see
    :meth:`SynonymMap.matches`), each term's ``weight`` its weight in a search (IDF; 0 where it counts for nothing),
    ``held`` whether the index holds it. The terms typed weigh as ever (unless a rule replaces them); a synonym at
    most as much: its terms scaled down, where they weigh more, so that their weights add up to the typed phrase's.
    So a rare synonym never outweighs the words typed (Lucene's synonym query blends a word and its synonyms to the
    commonest one's IDF for the same reason), and a common one never lowers them. A term of several synonyms takes
    the largest factor: a query weighs each term once, whatever phrases hold it. A synonym the index does not hold
    whole is left out; where every one of a rule's is, the terms typed stay as they are."""
    found = Expansion({}, set(), set())
    for match in synonyms.matches(list(terms), word_starts):
        alternatives = [phrase for phrase in match.alternatives if all(map(held, phrase))]
        if not alternatives:
            continue
        span = range(match.start, match.end)
        found.matched.update(span)
        if not match.keeps_original:
            found.replaced.update(span)
        typed = terms[match.start:match.end]
        cap = sum(map(weight, typed)) if all(map(held, typed)) else float("inf")
        for phrase in alternatives:
            total = sum(map(weight, phrase))
            factor = 1.0 if total <= 0 or cap == float("inf") else max(0.0, min(1.0, cap / total))
            for term in phrase:
                found.added[term] = max(found.added.get(term, 0.0), factor)
    return found
