"""Languages the word analyzer knows: each one's Snowball stemmer (PyStemmer), stopword list and word splitting.

What ``--language`` sets for BM25, as Pyserini's ``--language`` and Lucene's per-language analyzers do: a
language's stemmer and stopwords, either of which ``--stemmer`` and ``--stopwords`` still override. Stopword lists
other than English come from bm25s (the Snowball project's lists, as NLTK ships them; imported only when one is
asked for, since importing bm25s costs a third of a second). Chinese, Japanese and Korean are written without
spaces between words (Korean between phrases): their text is cut into overlapping pairs of characters, as Lucene's
``CJKAnalyzer`` does, which finds words without a dictionary; they take the English stopwords (for the Latin words
such texts hold, as ``CJKAnalyzer``) and no stemmer.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

import regex

from semiret.errors import OptionError


@dataclass(frozen=True)
class Language:
    """What one language's analyzer uses: a PyStemmer algorithm (None: no stemming), a stopword list's code
    ('none': none) and whether its text is cut into character pairs."""

    name: str
    code: str
    stemmer: str | None
    stopwords: str
    cjk_bigrams: bool = False


MARKED_WORD_PATTERN = r"[\w\p{M}]{2,}"
r"""BM25's words in every language but English: letters and digits with their combining marks (Devanagari's and
Tamil's vowel signs, Hebrew's points), two code points or more. English keeps the pattern bm25s has, ``\b\w\w+\b``,
which cuts words at a mark."""
DOTTED_I_LANGUAGES = ("tr",)
"""Languages whose capital I lowercases to dotless ı, and dotted İ to i (Lucene's ``TurkishLowerCaseFilter``)."""


ENGLISH_STOPWORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these "
    "they this to was will with".split()
)
"""The Lucene/Elasticsearch English stop set (also bm25s's "en" list): BM25's default, kept here so that English
text never imports bm25s."""

# bm25s's list per ISO 639-1 code
_BM25S_LISTS = {"en": "STOPWORDS_EN", "da": "STOPWORDS_DANISH", "de": "STOPWORDS_GERMAN", "es": "STOPWORDS_SPANISH",
                "fr": "STOPWORDS_FRENCH", "it": "STOPWORDS_ITALIAN", "ko": "STOPWORDS_KOREAN", "nl": "STOPWORDS_DUTCH",
                "no": "STOPWORDS_NORWEGIAN", "pt": "STOPWORDS_PORTUGUESE", "ru": "STOPWORDS_RUSSIAN",
                "sv": "STOPWORDS_SWEDISH", "tr": "STOPWORDS_TURKISH", "zh": "STOPWORDS_CHINESE"}
STOPWORD_LIST_CODES = ("none", *_BM25S_LISTS)

# every PyStemmer algorithm with its ISO 639-1 code (the stopwords its language has in bm25s, else none)
_SNOWBALL = {"arabic": "ar", "armenian": "hy", "basque": "eu", "catalan": "ca", "czech": "cs", "danish": "da",
             "dutch": "nl", "english": "en", "esperanto": "eo", "estonian": "et", "finnish": "fi", "french": "fr",
             "german": "de", "greek": "el", "hindi": "hi", "hungarian": "hu", "indonesian": "id", "irish": "ga",
             "italian": "it", "lithuanian": "lt", "nepali": "ne", "norwegian": "no", "persian": "fa", "polish": "pl",
             "portuguese": "pt", "romanian": "ro", "russian": "ru", "serbian": "sr", "sesotho": "st",
             "spanish": "es", "swedish": "sv", "tamil": "ta", "turkish": "tr", "yiddish": "yi"}
LANGUAGES = {name: Language(name, code, name, code if code in _BM25S_LISTS else "none")
             for name, code in _SNOWBALL.items()}
LANGUAGES.update({name: Language(name, code, None, "en", cjk_bigrams=True)
                  for name, code in (("chinese", "zh"), ("japanese", "ja"), ("korean", "ko"))})
_BY_CODE = {language.code: language for language in LANGUAGES.values()}
_LIST_NAMES = {language.name: language.code for language in LANGUAGES.values() if language.code in _BM25S_LISTS}


def language(name: str) -> Language:
    """The language named by its English name or ISO 639-1 code ('german', 'de'), any case."""
    key = name.strip().lower()
    found = LANGUAGES.get(key) or _BY_CODE.get(key)
    if found is None:
        raise OptionError(f"language: unknown language {name!r} (known: "
                          f"{', '.join(f'{lang.name} ({lang.code})' for lang in sorted(LANGUAGES.values(), key=lambda lang: lang.name))})")
    return found


def stopword_code(name: str) -> str:
    """A stopword list's code ('de') from its code or language name ('german'), any case; 'none' for none."""
    key = name.strip().lower()
    code = _LIST_NAMES.get(key, key)
    if code not in STOPWORD_LIST_CODES:
        raise OptionError(f"stopwords: unknown stopword list {name!r} (known: none, "
                          f"{', '.join(f'{code} ({lang})' for lang, code in sorted(_LIST_NAMES.items()))})")
    return code


def stopword_set(code: str) -> frozenset[str]:
    """The words of one stopword list (:func:`stopword_code`), NFC-normalised and lowercased as analyzed text is."""
    if code == "none":
        return frozenset()
    if code == "en":
        return ENGLISH_STOPWORDS
    import bm25s.stopwords  # a third of a second to import: only when a list is asked for

    return frozenset(unicodedata.normalize("NFC", word).lower() for word in getattr(bm25s.stopwords, _BM25S_LISTS[code]))


CJK_RUN = regex.compile(r"[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}\u30fc\uff70]+")
"""Characters of the scripts written without spaces between words (Han, kana with its long-vowel mark ー, Hangul),
one run at a time."""


def cjk_bigrams(run: str) -> list[str]:
    """A run of CJK characters as its overlapping pairs ('北京大学': '北京', '京大', '大学'); one character alone
    stays itself (Lucene's ``CJKBigramFilter``)."""
    if len(run) < 2:
        return [run]
    return [run[i:i + 2] for i in range(len(run) - 1)]


_LETTERS = regex.compile(r"[^\W\d_]+")
_ONLY_ENGLISH = frozenset({"the", "of", "and", "to", "is", "that", "with", "this", "was", "are"})
"""English stopwords no other of the lists' languages writes as words ('a', 'in', 'no', 'as' are Portuguese, Italian,
German or Spanish ones too)."""
_SCRIPTS = {code: (script, regex.compile(rf"\p{{{script}}}")) for code, script in (
    ("ru", "Cyrillic"), ("el", "Greek"), ("hi", "Devanagari"), ("ar", "Arabic"), ("yi", "Hebrew"), ("hy", "Armenian"),
    ("ta", "Tamil"))}
_KANA = regex.compile(r"[\p{Hiragana}\p{Katakana}]")
_HANGUL = regex.compile(r"\p{Hangul}")
GUESS_CHARACTERS = 200_000
"""How much text :func:`guess_language` reads at most."""
GUESS_LETTERS = 200
"""How many letters :func:`guess_language` needs to guess at all (a few product names hold stopwords by chance)."""


def guess_language(texts: list[str]) -> tuple[Language, str] | None:
    """The language ``texts`` look written in, and the evidence in words: the share of their letters in CJK runs for Chinese,
    Japanese (kana among them) and Korean (Hangul), or in a script (Cyrillic: Russian, Greek, Devanagari: Hindi, Arabic,
    Hebrew: Yiddish, Armenian, Tamil; the first of the languages writing it), else the share of their words in the
    language's stopword list (stopwords are a language's most frequent words, so a list that holds a tenth of a text's
    words names its language; the classic identification by stopwords). None below :data:`GUESS_LETTERS` letters,
    when words only English writes make 3% of the words, or when no other list holds 10% of them and twice the English
    share. Reads the first :data:`GUESS_CHARACTERS` characters only."""
    sample, size = [], 0
    for text in texts:
        sample.append(text[:GUESS_CHARACTERS - size])
        size += len(sample[-1])
        if size >= GUESS_CHARACTERS:
            break
    text = " ".join(sample).lower()
    words = _LETTERS.findall(text)
    letters = sum(map(len, words))
    if letters < GUESS_LETTERS:
        return None
    runs = "".join(CJK_RUN.findall(text))
    if len(runs) >= 0.3 * letters:
        code = "ko" if len(_HANGUL.findall(runs)) >= 0.5 * len(runs) else "ja" if _KANA.search(runs) else "zh"
        return _BY_CODE[code], f"{len(runs) / letters:.0%} of their letters are Han, kana or Hangul"
    for code, (script, letters_of) in _SCRIPTS.items():  # a script only one language of the list writes in
        share = len(letters_of.findall(text)) / letters
        if share >= 0.5:
            return _BY_CODE[code], f"{share:.0%} of their letters are {script}"
    if sum(word in _ONLY_ENGLISH for word in words) >= 0.03 * len(words):  # English prose: 'the' alone is 5-7%
        return None
    english = sum(word in ENGLISH_STOPWORDS for word in words) / len(words)
    shares = {code: sum(word in stopwords for word in words) / len(words)
              for code in _BM25S_LISTS if code not in ("en", "zh", "ko") for stopwords in [stopword_set(code)]
              if len(stopwords.intersection(words)) >= 5}  # prose holds many of them; names hold one by chance
    if not shares:
        return None
    code = max(shares, key=shares.get)
    if shares[code] < 0.1 or shares[code] <= 2 * english:
        return None
    return _BY_CODE[code], f"{shares[code]:.0%} of their words are {_BY_CODE[code].name.capitalize()} stopwords"
