"""Word analyzer for BM25: lowercase, a word regex, stopwords, Snowball stemming (PyStemmer); for Chinese, Japanese
and Korean, pairs of characters (:mod:`semiret.text.languages`).

The defaults reproduce bm25s's ``tokenize(..., stopwords="en", stemmer=Stemmer("english"))`` so that
BM25 scores can be compared with it directly.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field

import Stemmer
import regex

from semiret.errors import OptionError
from semiret.text import languages
from semiret.text.languages import CJK_RUN, cjk_bigrams, stopword_code, stopword_set

WORD_PATTERN = r"(?u)\b\w\w+\b"
UNICODE_FORMS = ("NFC", "NFKC", "NFD", "NFKD")
INVISIBLE = "\u00ad\u200c\u200d\u2060\ufeff"
"""Characters a reader does not see inside a word: the soft hyphen (HTML's ``&shy;``, a place to hyphenate), the
zero-width non-joiner and joiner, the word joiner and the byte-order mark; dropped before words are read, as Lucene's
ICU normalizer (``nfkc_cf``) drops Unicode's default ignorables, so "Be&shy;handlung" is "Behandlung". Not the
zero-width space: it separates words (Thai, Khmer, Lao and Burmese text puts it between them; UAX #29 and Lucene's
tokenizer break words there)."""
_DROP_INVISIBLE = str.maketrans("", "", INVISIBLE)
_INVISIBLE_CHARACTER = re.compile(f"[{INVISIBLE}]")
LETTERS = r"\p{L}\p{N}\p{Pc}"
"""What a word begins with (a character class's body): a letter, a digit or a connector (``_``)."""
WORD = regex.compile(rf"[{LETTERS}][{LETTERS}\p{{M}}{INVISIBLE}]*")
"""A word as a reader sees one (highlights, full-text filters): a letter or digit, then letters and digits with their
combining marks (an accent written apart, an Indic vowel sign) and the invisible characters that may lie inside a word
(:data:`INVISIBLE`); a mark or joiner alone, as an emoji's variation selector or joiner, is none."""
WORD_CHARACTER = rf"[{LETTERS}\p{{M}}]"
"""What a word of a normalised text (:func:`normalised_text`, no invisible character left) is made of."""


def drop_invisible(text: str) -> str:
    """``text`` without the characters of :data:`INVISIBLE`."""
    if text.isascii() or not _INVISIBLE_CHARACTER.search(text):  # a search is 10x cheaper than a translation
        return text
    return text.translate(_DROP_INVISIBLE)


_WIDTH_FORMS = regex.compile(r"[\uff00-\uffef]+")
"""Full-width letters and digits (ＡＢＣ) and half-width katakana (ｶﾀｶﾅ), as Chinese and Japanese text writes them."""


def normalised_text(text: str) -> str:
    """``text`` NFC-normalised and case-folded, its invisible characters dropped (:data:`INVISIBLE`) and its full-width
    and half-width forms folded (ＡＢＣ is abc, ｶﾀｶﾅ is カタカナ, as Chinese, Japanese and Korean BM25 indexes read
    them): as a full-text filter compares words (Turkish's dotted capital İ folded to i, not to i and a combining
    dot)."""
    if text.isascii():
        return text.casefold()
    text = _WIDTH_FORMS.sub(lambda found: unicodedata.normalize("NFKC", found.group()), drop_invisible(text))
    return unicodedata.normalize("NFC", text).casefold().replace("i\u0307", "i")


IDEOGRAPH = regex.compile(r"[\p{Han}\p{Hiragana}]")
"""A character that is a word of its own, as Unicode's word boundaries (UAX #29) and Lucene's standard tokenizer
have it: Chinese and Japanese put no spaces between words."""
_IDEOGRAPHS_APART = regex.compile(r"[\p{Han}\p{Hiragana}]|[^\p{Han}\p{Hiragana}]+")


ASCII_WORD = re.compile(r"[A-Za-z0-9_]+")
""":data:`WORD` in ASCII text (its letters, digits and connector; no mark, no invisible character, no ideograph),
found by the standard library's engine: twice as fast over SciFact's texts, most of them ASCII."""


ALPHABETIC_WORD = re.compile(r"\w+")
""":data:`WORD` in normalised text (:func:`normalised_text`) of the Latin, Greek and Cyrillic letters that
:data:`_BEYOND_ALPHABETS` lets pass (accents composed, as NFC writes them; no combining mark, no ideograph, no
invisible character left): the standard library's engine reads the same words there (tested on each of those
characters), 1.6-1.8x as fast as the ``regex`` engine's :data:`WORD` (docs/results.md)."""
_BEYOND_ALPHABETS = re.compile(r"[^\x00-\u02ff\u0370-\u0482]")
"""A character outside Latin (with IPA and spacing modifiers), Greek and Cyrillic's letters: a combining mark
(U+0300-U+036F, U+0483 on), or another script's character, which :data:`WORD` reads."""


def plain_words(text: str) -> list[str]:
    """The words of ``text`` (:data:`WORD`; each Han and hiragana character a word), normalised
    (:func:`normalised_text`), none dropped or stemmed: what a full-text filter matches exactly."""
    if text.isascii():
        return ASCII_WORD.findall(text.casefold())
    normalised = normalised_text(text)
    if not _BEYOND_ALPHABETS.search(normalised):
        return ALPHABETIC_WORD.findall(normalised)
    words = WORD.findall(normalised)
    if not IDEOGRAPH.search(text):
        return words
    return [piece for word in words for piece in _IDEOGRAPHS_APART.findall(word)]


JOINERS = ("'", "\u2019", ".")
"""What joins two words into one a reader sees (it's, e.g): the second is no word being typed."""


def word_being_typed(text: str) -> tuple[int, str] | None:
    """Where the last word of ``text`` starts and the word as :func:`plain_words` reads it, if ``text`` ends inside
    it (a search box's word being typed); None if it ends in a space or a mark, or the word is joined to the one
    before it (``it's``, ``e.g``)."""
    last = None
    for last in WORD.finditer(text):
        pass
    if last is None or last.end() != len(text):
        return None
    start = last.start()
    if start > 1 and text[start - 1] in JOINERS and WORD.match(text[start - 2]):
        return None
    pieces = list(_IDEOGRAPHS_APART.finditer(last.group())) if IDEOGRAPH.search(last.group()) else []
    if pieces:
        start += pieces[-1].start()  # a Han or hiragana character is a word of its own; so is the run after one
    words = plain_words(text[start:])
    return (start, words[-1]) if words else None


@dataclass
class WordAnalyzer:
    """Turns text into a list of normalized terms; its config is stored in an index's ``meta.json``."""

    stopwords: str = "en"
    """A stopword list by ISO 639-1 code or language name ('en', 'de', 'german'; 'none'), kept as its code."""
    stemmer: str | None = "english"
    lowercase: bool = True
    pattern: str = WORD_PATTERN
    unicode_form: str | None = None
    """Unicode normalization of non-ASCII text before anything else (new BM25 indexes: ``NFC`` unless told
    otherwise, so "café" typed composed or decomposed is one word; ``NFKC``, as Lucene's ICU normalizer, also makes
    the ligature in "ﬁnd" "fi"); None, as in indexes built before the option, leaves text as it comes."""
    language: str | None = None
    """The ISO 639-1 code of a language whose own rules apply beyond stemmer and stopwords: Chinese, Japanese and
    Korean (runs of Han, kana and Hangul cut into overlapping pairs, the rest of the text into words as otherwise),
    Turkish (dotted and dotless i lowercased as Turkish does); None for English (indexes built before the option)."""
    drop_invisible: bool = False
    """Drop the characters a reader does not see inside words (:data:`INVISIBLE`: soft hyphens, zero-width joiners,
    word joiners) and read the dotted capital İ as i (in every language but Turkish's, which has its own rule), as Lucene's
    ICU normalizer and lowercase filter read them; new BM25 indexes do, indexes built before it read words as they
    did (their terms were written so)."""
    _regex: re.Pattern = field(init=False, repr=False)
    _stem_cache: dict = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self):
        if self.stemmer == "none":  # spelled out where None means "unset" (retriever options, the CLI)
            self.stemmer = None
        self.stopwords = stopword_code(self.stopwords)
        if self.unicode_form is not None and self.unicode_form not in UNICODE_FORMS:
            raise OptionError(f"unicode_form: unknown Unicode normalization {self.unicode_form!r} (known: "
                              f"{', '.join(UNICODE_FORMS)})")
        if self.stemmer is not None:
            self.stemmer = self.stemmer.lower()
        rules = None if self.language is None else languages.language(self.language)
        self.language = None if rules is None else rules.code
        self._pairs = rules is not None and rules.cjk_bigrams
        self._dotted_i = self.language in languages.DOTTED_I_LANGUAGES
        if self.stemmer is not None and self.stemmer not in Stemmer.algorithms():
            raise OptionError(f"stemmer: unknown stemmer {self.stemmer!r} (known: {', '.join(Stemmer.algorithms())})")
        # the regex module where a pattern needs it (\p{M}, as in other languages than English); re, a hair faster,
        # for the pattern bm25s has
        self._regex = regex.compile(self.pattern) if r"\p" in self.pattern else re.compile(self.pattern)
        self._stopset = stopword_set(self.stopwords)
        self._stem = Stemmer.Stemmer(self.stemmer).stemWord if self.stemmer else None

    def words(self, text: str) -> list[str]:
        """The surface words of ``text`` (normalized and lowercased when configured), stopwords included."""
        ascii_only = text.isascii()
        if not ascii_only:
            if self.drop_invisible:
                text = drop_invisible(text)
            if self.unicode_form is not None:
                text = unicodedata.normalize(self.unicode_form, text)
        if self.lowercase:
            text = (text.replace("I", "ı").replace("İ", "i") if self._dotted_i else text).lower()
            if self.drop_invisible and not ascii_only and not self._dotted_i and "\u0307" in text:
                text = text.replace("i\u0307", "i")  # İ lowercases to i and a combining dot (Python's full mapping)
        if not self._pairs:
            return self._regex.findall(text)
        words, last = [], 0
        for run in CJK_RUN.finditer(text):
            words += self._regex.findall(text[last:run.start()])  # a slice: the pattern's \b must not see the run
            words += cjk_bigrams(run.group())
            last = run.end()
        return words + self._regex.findall(text[last:])

    def term(self, word: str) -> str | None:
        """The term one surface word becomes: None for a stopword, else its (cached) stem."""
        return None if word in self._stopset else self.stem(word)

    def stem(self, word: str) -> str:
        """The (cached) stem of one surface word, a stopword too (the beginning of a word being typed may be one)."""
        if self._stem is None:
            return word
        stem = self._stem_cache.get(word)
        if stem is None:
            stem = self._stem_cache[word] = self._stem(word)
        return stem

    def __call__(self, text: str) -> list[str]:
        words = [w for w in self.words(text) if w not in self._stopset]
        if self._stem is None:
            return words
        cache = self._stem_cache
        out = []
        for word in words:
            stem = cache.get(word)
            if stem is None:
                stem = cache[word] = self._stem(word)
            out.append(stem)
        return out

    def config(self) -> dict:
        config = {"type": "word", "stopwords": self.stopwords, "stemmer": self.stemmer,
                  "lowercase": self.lowercase, "pattern": self.pattern, "unicode_form": self.unicode_form}
        if self.language is not None:  # written only when set: indexes built before it describe themselves as before
            config["language"] = self.language
        if self.drop_invisible:  # so too
            config["drop_invisible"] = True
        return config


class TermDictionary:
    """A growable term -> id map for word vocabularies (ids are dense; only :meth:`truncate` takes any back)."""

    def __init__(self, terms: list[str] | None = None):
        self.terms: list[str] = terms if terms is not None else []  # shared with the index, not copied
        self.ids: dict[str, int] = {t: i for i, t in enumerate(self.terms)}
        self.generation = 0
        """Counts :meth:`truncate` calls that took ids back: caches of term ids made before are stale."""

    def truncate(self, size: int) -> None:
        """Forget the terms from id ``size`` on (those a write that failed had added), so that other terms can
        take their ids."""
        if len(self.terms) <= size:
            return
        for term in self.terms[size:]:
            if self.ids.get(term, -1) >= size:
                del self.ids[term]
        del self.terms[size:]
        self.generation += 1

    def __len__(self) -> int:
        return len(self.terms)

    def lookup(self, tokens: list[str], add: bool) -> list[int]:
        """Term ids of ``tokens``; unknown tokens are added when ``add`` else dropped."""
        ids = self.ids
        if not add:
            return [ids[t] for t in tokens if t in ids]
        out = []
        for token in tokens:
            term_id = ids.get(token)
            if term_id is None:
                term_id = ids[token] = len(self.terms)
                self.terms.append(token)
            out.append(term_id)
        return out
