"""Lexical sides, no neural network: BM25 over words; token sets over a WordPiece vocabulary, queried as a
plain overlap count (``bot``) or weighted by IDF (``idf``, also the query side of ``inference-free``)."""

from __future__ import annotations

import bisect
import functools
import json
import logging
import re
import threading
import weakref
from collections import Counter, OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import Stemmer

from semiret.data.collection import Document
from semiret.errors import OptionError, SemiretError
from semiret.indexes.inverted import BM25Parameters, TwoPhase
from semiret.models.checkpoints import located
from semiret.options import local_field
from semiret.search.feedback import FeedbackTerms, RM3Options, expanded_queries
from semiret.search.retrievers import DocumentSide, QuerySide, Retriever, index_vocabulary, register_retriever
from semiret.text.analyzer import WORD_PATTERN, TermDictionary, WordAnalyzer
from semiret.text.fields import TEXT_FIELDS_KEY, TextFields
from semiret.text.languages import MARKED_WORD_PATTERN, guess_language, language
from semiret.text.postings import QueryTerms, token_set_postings, word_count_postings
from semiret.text.synonyms import SynonymMap, expansion, parse_synonyms, read_synonyms
from semiret.text.token_weights import load_token_weights
from semiret.text.wordpiece import WordPieceVocabulary
from semiret.types import Postings, SparseQuery

log = logging.getLogger(__name__)

DEFAULT_MIN_IDF = 1.0
"""Query tokens with a lower IDF are dropped by IDF-weighted query sides (see :class:`IDFQueries`)."""


@dataclass
class NoOptions:
    """A side without options."""


# ---------------------------------------------------------------------------------------------- BM25
@dataclass
class BM25Options:
    k1: float = 1.5
    """BM25 term-frequency saturation k1."""
    b: float = 0.75
    """BM25 length normalisation b."""
    variant: str = "lucene"
    """BM25 variant (Kamphuis et al. 2020, as bm25s computes them): lucene, robertson, atire, bm25l or bm25+: how the
    term frequency saturates and the IDF is computed."""
    delta: float = 0.5
    """BM25L's and BM25+'s delta (the other variants have none)."""
    language: str = "english"
    """Language of the documents, by English name or ISO 639-1 code ('german', 'de', 'chinese', ...): its Snowball
    stemmer and stopwords; Chinese, Japanese and Korean text cut into pairs of characters. Queries are read as the
    index's documents were."""
    stopwords: str | None = None
    """Stopword list, by code or language name ('en', 'de', 'german'), or 'none' (default: the language's)."""
    stemmer: str | None = None
    """Snowball stemmer, a PyStemmer language ('english', 'german', ...), or 'none' (default: the language's)."""
    unicode_form: str | None = None
    """Unicode normalization of non-ASCII text ('NFC', the default: "café" typed composed or decomposed is one word,
    every figure as bm25s's; 'NFKC', the default for Chinese, Japanese and Korean, also folds compatibility forms, the
    ligature of "ﬁnd", "µ", full-width and half-width letters, as Lucene's ICU normalizer and CJK width filter; or
    'none')."""
    text_fields: str | None = None
    """The fields BM25 reads and each one's weight, BM25F (Elasticsearch's combined_fields): 'title^2,text' counts a
    title's word twice; other names read the documents' metadata ('title^3,text^2,keywords'). Weights are whole
    numbers from 1 to 100 (default: the title and text, once each)."""


class WordCounts(DocumentSide):
    """Words (lowercase, the language's stopwords and Snowball stems) and their counts, into a ``bm25`` index."""

    Options = BM25Options
    index_kind = "bm25"

    def __init__(self, analyzer: WordAnalyzer, terms: TermDictionary, params: BM25Parameters,
                 fields: TextFields | None = None):
        self.analyzer, self.terms, self.params, self.fields = analyzer, terms, params, fields

    @classmethod
    def create(cls, options: BM25Options):
        spoken = language(options.language)
        form = options.unicode_form or ("NFKC" if spoken.cjk_bigrams else "NFC")
        if form.upper() not in ("NFC", "NFKC", "NONE"):
            raise OptionError(f"unicode_form: {options.unicode_form!r} is none of NFC, NFKC or none (the decomposed "
                              "forms would cut words at their accents, which no stopword list is written in)")
        english = spoken.code == "en"
        return cls(WordAnalyzer(stopwords=spoken.stopwords if options.stopwords is None else options.stopwords,
                                stemmer=spoken.stemmer if options.stemmer is None else options.stemmer,
                                pattern=WORD_PATTERN if english else MARKED_WORD_PATTERN,
                                unicode_form=None if form.upper() == "NONE" else form.upper(),
                                language=None if english else spoken.code, drop_invisible=True),
                   TermDictionary(),
                   BM25Parameters(options.k1, options.b, options.variant, options.delta),
                   TextFields.parse(options.text_fields))

    @classmethod
    def from_index(cls, index):
        config = {k: v for k, v in index.meta["analyzer"].items() if k not in ("type", TEXT_FIELDS_KEY)}
        fields = TextFields.parse(index.meta["analyzer"].get(TEXT_FIELDS_KEY))
        return cls(WordAnalyzer(**config), index.terms, index.bm25, fields)  # encodes into the index's own vocabulary

    def text(self, document) -> str:
        """What the analyzer reads of a document: its title and text, or its :attr:`fields`, weighted."""
        return document.full_text if self.fields is None else self.fields.text(document)

    def check_documents(self, documents, adding: bool = False):
        """Warns when the documents look written in another language than the English the analyzer reads (the
        default), and names the ``language`` that reads them (:func:`~semiret.text.languages.guess_language`); at
        an add, that the index must be created again with it (its analyzer is fixed). Warns too when none of the
        documents has a metadata field the index reads (misspelt, or a corpus field not kept as metadata)."""
        if self.fields is not None and documents:
            for name in self.fields.missing_from(documents):
                log.warning("none of these %d documents has the field %r the index reads (text_fields %s): a name "
                            "misspelt, or a corpus field not kept (--metadata-fields)", len(documents), name,
                            self.fields)
        if self.analyzer.language is not None or self.analyzer.stopwords != "en":
            return  # a language was chosen
        guess = guess_language([d.full_text for d in documents])
        if guess is None:
            return
        spoken, evidence = guess
        fix = "cuts them into pairs of characters" if spoken.cjk_bigrams else "reads them with its stems and stopwords"
        if adding:
            log.warning("the documents look %s (%s), and this index reads English: create it again with --language %s "
                        "(Python: language=%r), which %s", spoken.name.capitalize(), evidence, spoken.code,
                        spoken.code, fix)
            return
        log.warning("the documents look %s (%s): --language %s (Python: language=%r) %s", spoken.name.capitalize(),
                    evidence, spoken.code, spoken.code, fix)

    def index_config(self) -> dict:
        analyzer = self.analyzer.config()
        if self.fields is not None:  # written only when given: indexes built before read as before
            analyzer[TEXT_FIELDS_KEY] = self.fields.config()
        return {"vocab_size": 0, "analyzer": analyzer, "vocab": self.terms, "bm25": self.params}

    def encode(self, documents):
        return word_count_postings(documents, self.analyzer, self.terms, text=self.text)

    def analyze(self, document):
        """The document's words and counts, ids from the index's vocabulary (-1 for words it has not seen, which
        an add would give new ids) and the words themselves as names."""
        words = self.analyzer(self.text(document))
        counts = Counter(words)
        names = list(counts)
        ids = self.terms.ids
        return Postings(ids=[document.id], offsets=np.array([0, len(names)], np.int64),
                        terms=np.array([ids.get(word, -1) for word in names], np.int32),
                        values=np.array([counts[word] for word in names], np.float32),
                        lengths=np.array([len(words)], np.int32)), names


POSSESSIVE_END = re.compile(r"\w['’]\w$")
"""A query ending in a possessive's or a contraction's last letter ("Parkinson's", "don't")."""
COMPLETION_LETTERS = "abcdefghijklmnopqrstuvwxyz"
"""The letters a word being typed is completed by, one or two, to find the stems it runs past (``prefix``)."""


@functools.lru_cache(maxsize=10_000)
def _stems_run_past(stemmer: str, typed: str) -> tuple[str, ...]:
    """The stems of ``typed`` completed by one or two letters that do not begin with it: those of the words it may
    become whose stem it runs past ("generatio": generation's "generat"; "studyin": "studi"). Kept for the words typed
    most recently (typing repeats them): stemming 702 completions costs half a millisecond."""
    completions = [typed + a for a in COMPLETION_LETTERS] + [typed + a + b for a in COMPLETION_LETTERS
                                                             for b in COMPLETION_LETTERS]
    stems = Stemmer.Stemmer(stemmer).stemWords(completions)
    return tuple(sorted({stem for stem in stems if not stem.startswith(typed)}))


INSERTED_ONE_BY_ONE = 100
"""New words a sorted vocabulary takes in one at a time (each a list insert); more are sorted and merged in."""


class _SortedVocabulary:
    """A word vocabulary's words in sorted order, for the words a prefix begins; kept as the vocabulary grows (a few
    new words inserted, more sorted and merged in: Python's sort merges two sorted runs in one pass), made again
    after a write that failed took words back. One for every query side over the vocabulary
    (:func:`_sorted_vocabulary`)."""

    def __init__(self):
        self.words: list[str] = []
        self.ids: list[int] = []
        self.of: tuple[int, int] = (0, -1)  # (words taken in, the vocabulary's generation)
        self.lock = threading.Lock()

    def beginning_with(self, vocabulary: TermDictionary, prefix: str) -> list[int]:
        """The ids of ``vocabulary``'s words that begin with ``prefix``."""
        with self.lock:
            generation = vocabulary.generation
            if self.of != (len(vocabulary.terms), generation):
                words = vocabulary.terms[:]  # a copy: a writer may append words, or take them back, meanwhile
                known = self.of[0] if self.of[1] == generation and self.of[0] <= len(words) else 0
                if 0 < known and len(words) - known <= INSERTED_ONE_BY_ONE:
                    for term_id in range(known, len(words)):
                        at = bisect.bisect_right(self.words, words[term_id])
                        self.words.insert(at, words[term_id])
                        self.ids.insert(at, term_id)
                else:
                    ids = (self.ids if known else []) + sorted(range(known, len(words)), key=words.__getitem__)
                    ids.sort(key=words.__getitem__)
                    self.ids, self.words = ids, [words[i] for i in ids]
                self.of = (len(words), generation)
            start = bisect.bisect_left(self.words, prefix)
            return self.ids[start:bisect.bisect_left(self.words, prefix + "\U0010ffff", start)]


_sorted_vocabularies: "weakref.WeakKeyDictionary[TermDictionary, _SortedVocabulary]" = weakref.WeakKeyDictionary()
_sorted_vocabularies_lock = threading.Lock()


def _sorted_vocabulary(vocabulary: TermDictionary) -> _SortedVocabulary:
    """The sorted words of ``vocabulary``, shared by the query sides over it (a server's option variants)."""
    with _sorted_vocabularies_lock:
        return _sorted_vocabularies.setdefault(vocabulary, _SortedVocabulary())


def _held(index, term_ids, df: np.ndarray) -> np.ndarray:
    """bool per term id: whether a live document holds it (ids past ``df``, the index's document frequencies, are
    words no document holds). Frequencies count deleted documents until a merge; an index that can tell which
    terms its live documents hold (:meth:`~semiret.indexes.inverted.InvertedIndex.held_terms`) is asked too."""
    found = np.asarray(list(term_ids), np.int64)
    held = np.zeros(len(found), bool)
    inside = found < len(df)
    held[inside] = df[found[inside]] > 0
    if held.any() and hasattr(index, "held_terms"):
        held[held] = index.held_terms(found[held])
    return held


def _summed(query: SparseQuery, added: Counter) -> SparseQuery:
    """``query`` with ``added``'s weights added to its terms'."""
    weights = Counter(dict(zip(query.terms.tolist(), query.weights.tolist())))
    weights.update(added)
    return _query_of(weights)


def _query_of(weights: dict[int, float]) -> SparseQuery:
    """The sparse query of term id -> weight."""
    terms = sorted(weights)
    return SparseQuery(np.array(terms, np.int32), np.array([weights[t] for t in terms], np.float32))


COMPILED_KEPT = 8
"""Rule files kept compiled (the latest): shared by every query side that reads queries alike (a server's option
variants, a hybrid's parts of one analyzer, indexes with the same rules)."""
_compiled: OrderedDict = OrderedDict()  # (how queries are read, rules file) -> SynonymMap
_compiling = threading.Lock()


class QuerySynonyms:
    """A query side's synonym rules (:meth:`QuerySide.synonym_target`'s reader): the ``synonyms`` option's file
    (read when the side is made), else its index's own, compiled over the side's reading of queries (``analyze``:
    text -> its terms in order; ``reading``: what says how, the analyzer's or tokenizer's configuration) once per
    rules file, for every side that reads queries alike."""

    def __init__(self, analyze: Callable[[str], list], option: str | None, reading: dict):
        self.analyze, self.option = analyze, option
        self.reading = json.dumps(reading, sort_keys=True, default=str)
        self._given = self.compile(read_synonyms(option), option) if option not in (None, "none") else None

    def compile(self, lines: list[str], name: str = "synonyms") -> SynonymMap:
        """Rules read as queries are (an error names the line of a phrase that leaves no term)."""
        return SynonymMap(parse_synonyms(lines, name), self.analyze, name)

    def of(self, index) -> SynonymMap | None:
        """The rules queries over ``index`` (as its snapshot holds them) are expanded by: the option's file, else
        the index's own, or none."""
        if self.option is not None:
            return self._given
        key = self._key(index)
        if key is None:
            return None
        found = _compiled.get(key)
        if found is None:
            with _compiling:  # one compiles, the others wait for it
                found = _compiled.get(key)
                if found is None:
                    found = _compiled[key] = self.compile(index.synonym_lines(), "the index's synonyms")
                    while len(_compiled) > COMPILED_KEPT:
                        _compiled.popitem(last=False)
        return found

    def ready(self, index) -> bool:
        """Whether a search over ``index`` finds its rules compiled (none to compile first)."""
        key = None if self.option is not None else self._key(index)
        return key is None or key in _compiled

    def _key(self, index) -> tuple[str, str] | None:
        name = getattr(index, "synonyms_file", None)  # named by its content: the same name, the same rules
        return None if name is None else (self.reading, name)


NEIGHBOURS_KEPT = 10_000
"""Misspelled words whose neighbours a query side keeps (the most recently searched)."""

MAX_EXPANSIONS = 50
"""The most index words a misspelled query word may match (OpenSearch's ``max_expansions`` default)."""


def fuzzy_edits(term: str) -> int:
    """The typing errors a query term of this length may hold (OpenSearch's ``fuzziness: AUTO``): none up to 2
    characters, 1 up to 5, else 2."""
    return 0 if len(term) <= 2 else 1 if len(term) <= 5 else 2


@dataclass
class WordQueryOptions(RM3Options):
    fuzzy: bool = False
    """Words of a query that no document holds match the index's words nearest them instead, within a few typing
    errors (OpenSearch's fuzziness AUTO: 1 edit for 3-5 characters, 2 beyond; a transposition is one edit; those at
    the fewest edits found), weighted as Lucene's fuzzy query weighs them: by similarity, all with the commonest's
    IDF."""
    max_expansions: int = MAX_EXPANSIONS
    """fuzzy, prefix: the most index words one misspelled (or begun) query word matches (the fewest errors first, then
    the commonest)."""
    prefix: bool = False
    """Search as you type: the word the query ends in, unless a space or a mark ends it, also matches the index's
    words it begins ("statin thera": therapy, therapeutic; Elasticsearch's match_bool_prefix), the commonest
    max_expansions of them, weighing together one term of the commonest one's IDF, each by its share of their
    documents. Not for Chinese, Japanese and Korean, whose words are cut into pairs of characters."""
    synonyms: str | None = local_field(names=("none",))
    """A synonyms file (Solr's format: 'heart attack, myocardial infarction' equivalent, 'colour => color'
    replaced) whose rules queries are expanded by instead of the index's own (set with `semiret synonyms`), or
    'none' for no synonyms; the words typed weigh as ever, a synonym at most as much."""

    def __post_init__(self):
        super().__post_init__()
        if isinstance(self.max_expansions, bool) or not isinstance(self.max_expansions, int) or self.max_expansions < 1:
            raise SemiretError(f"max_expansions (--max-expansions) must be a positive whole number, got "
                               f"{self.max_expansions!r}")


class WordCountQueries(QuerySide):
    """The document side's analyzer; each query term weighted by its count (IDF is applied by the index).
    Shares the document side's term dictionary, so words of documents added later are searchable at once.
    With ``rm3``, each query is expanded by pseudo-relevance feedback first (:mod:`semiret.search.feedback`); with
    ``fuzzy``, its words no document holds match the index's words nearest them."""

    Options = WordQueryOptions

    def __init__(self, terms: QueryTerms, options: WordQueryOptions | None = None,
                 document_text: Callable[[Document], str] = Document.full_text.fget):
        self._query_terms = terms
        self._document_text = document_text  # what the index read of a document: RM3 reads its feedback alike
        self.options = options or WordQueryOptions()
        self.synonym_rules = QuerySynonyms(terms.analyzer, self.options.synonyms, terms.analyzer.config())
        self._feedback_terms = FeedbackTerms()
        self._said_stopwords = False
        self._near: OrderedDict[str, list[tuple[int, int]]] = OrderedDict()  # a misspelling -> (term id, edits)
        self._near_of: tuple[int, int] = (0, terms.terms.generation)  # the vocabulary they were found in
        self._near_lock = threading.Lock()  # a server's searches share this side while a writer adds words

    @property
    def searches_postings(self) -> bool:  # an expanded or corrected query needs the index's statistics first
        return not (self.options.rm3 or self.options.fuzzy or self.options.prefix)

    @property
    def completes_last_word(self) -> bool:
        """Whether a query's last word, with no space after it, is read as still being typed (``prefix``)."""
        return self.options.prefix

    @classmethod
    def open(cls, index, options: WordQueryOptions, documents: WordCounts):
        if options.rm3 and not index.stores_texts:
            raise SemiretError(f"{index.path} keeps no stored documents (built with --no-store-texts): RM3 reads the "
                               "words of its feedback documents from them")
        return cls(QueryTerms(documents.analyzer, documents.terms), options, documents.text)

    def synonym_target(self, index):
        return index, self.synonym_rules

    def encode_queries(self, texts):
        return [self.encode_query(t) for t in texts]

    def word_terms(self, words: list[str]) -> list[list[int]]:
        """Each word's term ids as a query's words are read, without a query's feedback or warnings: what a
        highlight matches a document's words with."""
        return [self._query_terms(word) for word in words]

    def encode_query(self, text: str) -> SparseQuery:
        # what np.unique(ids, return_counts=True) gives, without its per-call cost (queries are short)
        ids = self._query_terms(text)
        if not ids and not self._said_stopwords and text.strip() and not self._query_terms.analyzer(text):
            self._said_stopwords = True
            log.warning("every word of the query %r is a stopword of the index's analyzer or shorter than two "
                        "characters, so it scores no document (an index built with stopwords=none keeps stopwords; "
                        "said once)", text)
        terms = sorted(set(ids))
        if len(terms) == len(ids):
            counts = np.ones(len(terms), np.float32)
        else:
            counts = np.array([ids.count(t) for t in terms], np.float32)
        return SparseQuery(np.array(terms, np.int32), counts)

    @property
    def sums_term_weights(self) -> bool:  # RM3's expanded query too
        return True

    def unknown_terms(self, text: str) -> list[str]:
        known = self._query_terms.terms.ids
        return list(dict.fromkeys(term for term in self._query_terms.analyzer(text) if term not in known))

    def scored_queries(self, index, texts, n_threads: int = 1):
        """The queries with their synonyms, their misspelled words matched to the index's (``fuzzy``), then each
        expanded by RM3's feedback from ``index`` when it is on."""
        queries = [self.matched_query(index, text) for text in texts]
        if not self.options.rm3:
            return queries
        # the whole corpus's counts, as the frequencies are, even where a filter hides documents from the search
        allowed = self._feedback_terms.allowed(self._query_terms.terms, index.document_frequencies(), index.n_stored)
        lengths = [len(self._query_terms.analyzer(text)) for text in texts]
        return expanded_queries(index, queries, lengths, self.options, n_threads,
                                lambda document: self._query_terms(self._document_text(document)), allowed)

    def search(self, index, texts, k, n_threads):
        return index.search(self.scored_queries(index, texts, n_threads), k=k, n_threads=n_threads)

    def matched_query(self, index, text: str) -> SparseQuery:
        query, matched = self.encode_query(text), set()
        synonyms = self.synonym_rules.of(index)
        if synonyms is not None:
            query, matched = self._with_synonyms(index, text, query, synonyms)
        typing = self._word_being_typed(text) if self.options.prefix else None
        begun = self._prefixed(index, query, typing) if typing else query
        if begun is not query:  # the word being typed begins words: it is no misspelling (yet)
            matched = matched | {self._query_terms.analyzer.term(typing) or typing}
        return self._corrected(index, text, begun, matched) if self.options.fuzzy else begun

    def _word_being_typed(self, text: str) -> str | None:
        """The word ``text`` ends inside (normalized as the analyzer reads it; one letter too), or None where a space
        or a mark ends it, or words are pairs of characters (Chinese, Japanese, Korean)."""
        analyzer = self._query_terms.analyzer
        if analyzer.language and language(analyzer.language).cjk_bigrams or POSSESSIVE_END.search(text):
            return None  # "Parkinson's": no word "s" being typed
        extended = analyzer.words(text + "x")  # a letter more lengthens the word being typed, else stands alone
        if not extended or not extended[-1].endswith("x"):
            return None
        return extended[-1][:-1] or None

    def _prefixed(self, index, query: SparseQuery, typed: str) -> SparseQuery:
        """``query`` with the words ``typed`` (the word being typed) begins: the index's words that begin with it;
        where none does and it is no word documents hold, those its stem begins ("mögl": "mogl", as German's
        stemmer keeps "möglich"); where none does either, it has run past a word's stem ("generatio": "generat";
        "alignme": "align"), and the longest index word it or its stem begins with, and the stems of its completions
        by one or two letters ("studyin": "studi"), stand for them. Less the
        word typed whole (searched as ever, or as a synonym rule replaced it) and the query's own; the commonest
        ``max_expansions`` that documents hold. Together they weigh one term of the commonest one's IDF, each by its
        share of their documents (the likeliest completion the most): a document holding many of them never
        outscores one holding the query's other words (Elasticsearch scores the prefix as one clause)."""
        analyzer, vocabulary = self._query_terms.analyzer, self._query_terms.terms
        df = index.document_frequencies()
        own = vocabulary.ids.get(analyzer.term(typed) or typed, -1)

        def held(term_ids) -> np.ndarray:  # those documents hold, less the word typed whole and the query's own
            found = np.array(sorted({t for t in term_ids if t is not None and t < len(df) and t != own}), np.int64)
            found = found[~np.isin(found, query.terms)]
            return found[_held(index, found, df)]

        found = self._words_begun(typed, held, typed_whole=own >= 0 and bool(_held(index, [own], df)[0]))
        if not len(found):
            return query
        commonest = found[np.argsort(-df[found], kind="stable")[:self.options.max_expansions]]
        shares = df[commonest] / df[commonest].sum()
        return _summed(query, self._blended(index, dict(zip(commonest.tolist(), shares.tolist()))))

    def _words_begun(self, typed: str, held: Callable, typed_whole: bool) -> np.ndarray:
        """The term ids :meth:`_prefixed` expands ``typed`` by, as ``held`` keeps them (see there)."""
        analyzer, vocabulary = self._query_terms.analyzer, self._query_terms.terms
        sorted_words = _sorted_vocabulary(vocabulary)
        found = held(sorted_words.beginning_with(vocabulary, typed))
        if len(found) or typed_whole:  # none, and documents hold it: typed whole ("studies": not "studio")
            return found
        stem = analyzer.stem(typed)  # a stopword too: "über" begins "uberleg"
        found = held(sorted_words.beginning_with(vocabulary, stem))
        if len(found) or not analyzer.stemmer:
            return found
        shorter = held(map(vocabulary.ids.get, (word[:end] for word in {typed, stem}
                                                for end in range(len(word) - 1, 2, -1))))
        longest = shorter[np.argmax([len(vocabulary.terms[t]) for t in shorter])] if len(shorter) else None
        return held([*map(vocabulary.ids.get, _stems_run_past(analyzer.stemmer, typed)), longest])

    def _blended(self, index, factors: dict[int, float]) -> Counter:
        """Query weights of expansions, each term's ``factor`` scaled so that its IDF is the commonest term's (as
        Lucene's top-terms blended rewrite weighs a fuzzy or prefix query's terms): a rare expansion never outweighs
        a common one."""
        df, idf = index.document_frequencies(), index.idf()
        factors = {term_id: factor for term_id, factor in factors.items() if idf[term_id] > 0}  # (robertson: <= 0)
        if not factors:
            return Counter()
        blended = float(idf[max(factors, key=lambda term_id: df[term_id])])  # the commonest's
        return Counter({term_id: factor * blended / float(idf[term_id]) for term_id, factor in factors.items()})

    def _with_synonyms(self, index, text: str, query: SparseQuery, synonyms: SynonymMap) -> tuple[SparseQuery, set]:
        """``query`` with the synonyms of each phrase of ``text`` a rule matches, weighted by
        :func:`~semiret.text.synonyms.expansion` (the words typed as ever, a synonym at most as heavy; on SciFact,
        weighing a multi-word synonym by its words' own IDFs, as OpenSearch's phrase clauses are, ranked lower:
        docs/results.md, "Synonyms"), and the terms the rules matched (fuzzy leaves them be). Over an index of words
        without positions a multi-word synonym matches its words anywhere in a document."""
        terms = self._query_terms.analyzer(text)
        ids, df, idf = self._query_terms.terms.ids, index.document_frequencies(), index.idf()

        def held(term: str) -> bool:  # a document holds it
            return bool(_held(index, [ids.get(term, len(df))], df)[0])

        found = expansion(terms, synonyms, lambda term: float(idf[ids[term]]), held)
        if not found.matched:
            return query, set()
        weights: Counter = Counter()
        for position, term in enumerate(terms):
            if position not in found.replaced and term in ids:  # as encode_query keeps them
                weights[ids[term]] += 1.0
        for term, factor in found.added.items():  # a term typed and in a synonym weighs what it weighs typed
            weights[ids[term]] = max(weights[ids[term]], factor)
        return _query_of(weights), {terms[position] for position in found.matched}

    def _corrected(self, index, text: str, query: SparseQuery, matched: set = frozenset()) -> SparseQuery:
        """``query`` with each of ``text``'s terms that no document holds matched to the index's terms nearest it,
        within :func:`fuzzy_edits` (those at the fewest edits found, as typo-tolerant engines try one typo before
        two; at most ``max_expansions``, the commonest), each weighted as Lucene's fuzzy query (top terms, blended
        frequencies) weighs it: the word's count times ``1 - edits / shorter length``, scaled so that its IDF is the
        commonest one's (a rare neighbour, "stat3" for "statn", never outweighs a common one, "statin")."""
        df = index.document_frequencies()
        counts = Counter(self._query_terms.analyzer(text))
        ids = self._query_terms.terms.ids
        typed = [term for term in counts if term not in matched]
        missing = [term for term, held in zip(typed, _held(index, [ids.get(term, len(df)) for term in typed], df))
                   if not held]
        added: Counter = Counter()
        words = self._query_terms.terms.terms
        for term in missing:
            near = self._neighbours(term)
            near = [found for found, held in zip(near, _held(index, [term_id for term_id, _ in near], df)) if held]
            if not near:
                continue
            fewest = min(edits for _, edits in near)  # "canser": cancer, not also manner and answer at two edits
            near = sorted((found for found in near if found[1] == fewest),
                          key=lambda found: -int(df[found[0]]))[:self.options.max_expansions]
            similar = {term_id: counts[term] * (1.0 - edits / min(len(term), len(words[term_id])))
                       for term_id, edits in near}
            added.update(self._blended(index, similar))
        return _summed(query, added) if added else query

    def _neighbours(self, term: str) -> list[tuple[int, int]]:
        """The vocabulary's terms within :func:`fuzzy_edits` of ``term`` (optimal string alignment distance:
        a transposition is one edit, as Lucene's default), as (term id, edits); found by rapidfuzz's compiled
        search, once per term until the vocabulary grows."""
        vocabulary = self._query_terms.terms
        edits = fuzzy_edits(term)
        if not edits:
            return []
        state = (len(vocabulary), vocabulary.generation)
        with self._near_lock:
            if state != self._near_of:
                self._near, self._near_of = OrderedDict(), state
            found = self._near.get(term)
            if found is not None:
                self._near.move_to_end(term)
                return found
        from rapidfuzz import process
        from rapidfuzz.distance import OSA

        words = vocabulary.terms[:state[0]]  # a copy: a writer may append words meanwhile
        found = [(term_id, int(distance)) for _, distance, term_id in process.extract(
            term, words, scorer=OSA.distance, score_cutoff=edits, limit=None)]
        with self._near_lock:
            if state == self._near_of:  # not found in a vocabulary another search has seen grow since
                self._near[term] = found
                if len(self._near) > NEIGHBOURS_KEPT:
                    self._near.popitem(last=False)
        return found


@register_retriever
class BM25Retriever(Retriever):
    """Okapi BM25 over words (lowercase, the language's stopwords and Snowball stems), Lucene IDF; ``rm3=True`` expands
    queries by pseudo-relevance feedback; ``fuzzy=True`` matches misspelled query words to the index's."""

    name = "bm25"
    documents = WordCounts
    queries = WordCountQueries


# ---------------------------------------------------------------------------------------------- token sets
@dataclass
class TokenizerOptions:
    tokenizer: str = "bert-base-uncased"
    """Tokenizer of token-space indexes: a registry name, a directory or a hub id."""
    max_length: int | None = None
    """Truncate texts to this many tokens."""

    def __post_init__(self) -> None:
        if self.max_length is not None and self.max_length < 2:  # (a negative one failed deep in the tokenizer)
            raise SemiretError(f"max_length (--max-length) must be at least 2 tokens, got {self.max_length}")


class TokenSets(DocumentSide):
    """Each document's distinct tokens, built by the tokenizer alone, into a ``binary`` index."""

    Options = TokenizerOptions
    index_kind = "binary"

    def __init__(self, vocabulary: WordPieceVocabulary):
        self.vocabulary = vocabulary

    @classmethod
    def create(cls, options: TokenizerOptions):
        return cls(WordPieceVocabulary(options.tokenizer, max_length=options.max_length))

    @classmethod
    def from_index(cls, index):
        if index.meta["analyzer"].get("type") != "wordpiece":
            raise SemiretError(f"{index.path} was not built with a WordPiece tokenizer")
        return cls(index_vocabulary(index))

    def index_config(self) -> dict:
        return {"vocab_size": self.vocabulary.size, "analyzer": self.vocabulary.config()}

    def encode(self, documents):
        return token_set_postings(documents, self.vocabulary)


def query_tokens(vocabulary: WordPieceVocabulary, text: str) -> np.ndarray:
    """The distinct tokens of a query, sorted (``np.unique`` costs more than this for a short query)."""
    return np.array(sorted(set(vocabulary.encode(text))), np.int32)


class TokenSetQueries(QuerySide):
    """The query's distinct tokens, each weighing 1: the score is the number of them a document contains."""

    Options = NoOptions
    searches_postings = True

    def __init__(self, vocabulary: WordPieceVocabulary):
        self.vocabulary = vocabulary

    @classmethod
    def open(cls, index, options, documents):
        return cls(index_vocabulary(index))

    def encode_queries(self, texts):
        out = []
        for text in texts:
            terms = query_tokens(self.vocabulary, text)
            out.append(SparseQuery(terms, np.ones(len(terms), np.float32)))
        return out


@register_retriever
class BagOfTokensRetriever(Retriever):
    """Number of distinct query tokens a document contains (SiDR's "BoT overlap")."""

    name = "bot"
    documents = TokenSets
    queries = TokenSetQueries


# ---------------------------------------------------------------------------------------------- IDF
@dataclass
class IDFOptions:
    idf: str | None = local_field(names=("corpus", "msmarco"))
    """Query token weights: 'corpus' (IDF over the index, kept current as documents are added), 'msmarco'
    (the shared MS MARCO table) or a JSON {token: weight} table; default: the table a trained inference-free
    model was saved with, else 'corpus'."""
    two_phase: str | TwoPhase | None = None
    """Two-phase search: 'on' (prune ratio 0.4, window 5k), 'RATIO' or 'RATIO,EXPANSION'; queries it cannot
    speed up are searched exactly unless ',always' follows."""
    min_idf: float = DEFAULT_MIN_IDF
    """Drop query tokens with a lower IDF (query-side stopwords; 0 keeps all)."""
    synonyms: str | None = local_field(names=("none",))
    """A synonyms file (Solr's format, as bm25's) whose rules queries are expanded by instead of the index's own
    (set with `semiret synonyms`), or 'none'; phrases are read as the tokenizer cuts them."""


class IDFQueries(QuerySide):
    """Query tokens weighted by IDF, over a bag-of-tokens or impact index: no network at query time.

    ``idf="corpus"`` computes Lucene IDF from the index's document frequencies (kept current as documents are
    added); a path (or ``msmarco``) loads a ``{token: weight}`` JSON table.

    ``min_idf`` drops query tokens weighted below it: query-side stopwords chosen by IDF, as BM25 drops a
    stopword list. The default, 1.0, drops tokens found in more than about a third of the documents (with the
    MS MARCO table exactly ``. the , of and a to in is for``): they add almost nothing to a score but own the
    longest posting lists (docs/results.md: a third fewer postings per query, nDCG@10 unchanged).
    """

    Options = IDFOptions

    def __init__(self, vocabulary: WordPieceVocabulary, index=None, idf: str | Path = "corpus",
                 two_phase: str | TwoPhase | None = None, min_idf: float = DEFAULT_MIN_IDF,
                 synonyms: str | None = None):
        if not np.isfinite(min_idf) or min_idf < 0:
            raise SemiretError(f"min_idf must be a finite number >= 0, got {min_idf}")
        self.vocabulary, self.index = vocabulary, index
        self.idf_source = str(idf)
        if self.idf_source == "corpus" and index is None:
            raise SemiretError("corpus IDF needs an index")
        self._table = None if self.idf_source == "corpus" else load_token_weights(idf, vocabulary)
        self.two_phase = TwoPhase.parse(two_phase)
        """Two-phase search (high-IDF query tokens first, then rescoring): None for exhaustive search."""
        self.min_idf = float(min_idf)
        self._min_weight = max(self.min_idf, float(np.finfo(np.float32).tiny))  # zero-weight tokens never score
        self._said_all_dropped = False
        self.synonym_rules = QuerySynonyms(vocabulary.encode, synonyms, vocabulary.config())

    @classmethod
    def open(cls, index, options: IDFOptions, documents):
        from semiret.models.checkpoints import IDF_FILE, inference_free_token_weights, token_weights_fingerprint

        idf = options.idf
        if idf is None:
            analyzer = index.meta["analyzer"]
            model = analyzer.get("model")
            idf = (inference_free_token_weights(located(model)) if model else None) or "corpus"
            recorded = analyzer.get("query_weights")
            if recorded is not None and idf == "corpus":
                raise SemiretError(f"{index.path} was built with {model}, whose query weights ({IDF_FILE}) are not "
                                   "there now (moved or deleted?): give the index its model files again, or its "
                                   "queries a table (--idf FILE)")
            if recorded is not None and token_weights_fingerprint(idf) != recorded:
                raise SemiretError(f"{index.path} was built with {model}, whose query weights ({IDF_FILE}) are "
                                   "not those it held then (retrained or replaced since): rebuild the index with this "
                                   "model (--overwrite), or give it the model files it was built with")
        return cls(index_vocabulary(index), index, idf, options.two_phase, options.min_idf, options.synonyms)

    @classmethod
    def from_table(cls, table: str | Path, vocabulary: WordPieceVocabulary, min_idf: float = DEFAULT_MIN_IDF):
        """A query side over a token-weight table alone, without an index (e.g. to encode queries for a sweep)."""
        return cls(vocabulary, None, table, min_idf=min_idf)

    def token_weights(self, index) -> np.ndarray:
        """Each token's weight: the table's, or the IDF of ``index`` (the commit a search reads, not the latest)."""
        return self._table if self._table is not None else index.idf()

    def synonym_target(self, index):
        return index, self.synonym_rules

    def encode_queries(self, texts):
        return self._encoded(self.index, texts)[0]

    def scored_queries(self, index, texts):
        return self._encoded(index, texts)[0]

    def _encoded(self, index, texts) -> tuple[list[SparseQuery], bool]:
        """The queries, expanded by the synonym rules of ``index`` (as its snapshot holds them), and whether any
        was."""
        weights_of = self.token_weights(index)
        synonyms = self.synonym_rules.of(index)
        out, expanded = [], False
        for text in texts:
            if synonyms is None:
                terms = query_tokens(self.vocabulary, text)
                own = weights = weights_of[terms]
            else:
                terms, weights, matched = self._with_synonyms(index, self.vocabulary.encode(text), weights_of, synonyms)
                expanded |= matched
                own = weights_of[terms]  # min_idf drops tokens by their own weight, not as a synonym scaled it
            kept = own >= self._min_weight
            n_kept = np.count_nonzero(kept)
            if not n_kept and (own > 0).any() and not self._said_all_dropped:  # min_idf's doing
                self._said_all_dropped = True
                why = ("with the corpus's IDF: it is in more than about a third of the documents, common in a small "
                       "corpus" if self.idf_source == "corpus" else
                       f"in the IDF table {self.idf_source}: a token as common as a stopword there")
                log.warning("every token of the query %r weighs less than min_idf=%g (%s), so it finds nothing; "
                            "min_idf=0 keeps every token (said once)", text, self.min_idf, why)
            out.append(SparseQuery(terms, weights) if n_kept == len(kept) else SparseQuery(terms[kept], weights[kept]))
        return out, expanded

    def _with_synonyms(self, index, tokens: list[int], weights_of: np.ndarray,
                       synonyms: SynonymMap) -> tuple[np.ndarray, np.ndarray, bool]:
        """A query's distinct tokens and weights with the synonyms of the whole words of its ``tokens`` a rule matches
        (a token begins a word unless WordPiece marks it a continuation, ``##``), weighted by
        :func:`~semiret.text.synonyms.expansion` (the tokens typed as ever, a synonym at most as heavy; a token
        weighs its IDF once, the largest of its factors), and whether a rule matched. Tokens below ``min_idf``
        weigh nothing in that balance and are dropped after, as the typed ones are ("in" of "in ##far ##ction")."""
        starts = [not self.vocabulary.token(token).startswith("##") for token in tokens]
        # a bag of tokens holds a document's tokens exactly: a token no document holds is left out; over impacts (a
        # model's expansion of each document), where a phrase's every piece need not score, one that weighs
        df = index.document_frequencies() if index is not None and index.kind == "binary" else None

        def weight(token: int) -> float:
            return float(weights_of[token]) if weights_of[token] >= self._min_weight else 0.0

        def held(token: int) -> bool:
            return bool(_held(index, [token], df)[0]) if df is not None else bool(weights_of[token] > 0)

        found = expansion(tokens, synonyms, weight, held, starts)
        if not found.matched:
            terms = np.array(sorted(set(tokens)), np.int32)  # as query_tokens gives them
            return terms, weights_of[terms], False
        weighed = {token: float(weights_of[token]) for position, token in enumerate(tokens)
                   if position not in found.replaced}
        for token, factor in found.added.items():
            weighed[token] = max(weighed.get(token, 0.0), float(weights_of[token]) * factor)
        ordered = np.array(sorted(weighed), np.int32)
        return ordered, np.array([weighed[t] for t in ordered.tolist()], np.float32), True

    searches_postings = True  # its search differs only by two-phase, an approximation

    def search(self, index, texts, k, n_threads):
        # two-phase defers a query's lighter tokens to its second phase: a synonym's, each lighter than the words
        # typed, would add no documents; a batch a rule expanded is searched exactly
        queries, expanded = self._encoded(index, texts)
        return index.search(queries, k=k, n_threads=n_threads, two_phase=None if expanded else self.two_phase)


@register_retriever
class IDFRetriever(Retriever):
    """Query tokens weighted by IDF over a bag-of-tokens index (or any impact index over the same tokens)."""

    name = "idf"
    documents = TokenSets
    queries = IDFQueries
    index_kinds = ("binary", "impact")

