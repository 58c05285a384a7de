"""Turning document batches into index postings: word counts for BM25, token sets for bag-of-tokens."""

from __future__ import annotations

import weakref
from itertools import chain
from typing import Callable

import numpy as np

from semiret.data.collection import Document
from semiret.text import kernels
from semiret.text.analyzer import TermDictionary, WordAnalyzer
from semiret.text.wordpiece import WordPieceVocabulary
from semiret.types import Postings


def word_count_postings(documents: list[Document], analyzer: WordAnalyzer, terms: TermDictionary,
                        keep_documents: bool = True,
                        text: Callable[[Document], str] = Document.full_text.fget) -> Postings:
    """Term counts per document over a growable word vocabulary (new words get new ids), of what ``text`` reads of
    each document (its title and text; weighted fields, :mod:`semiret.text.fields`).

    Gives what ``terms.lookup(analyzer(text), add=True)`` gives for each document, in the same
    order (so new words get the same ids), through a cache from surface words straight to term
    ids (-1 for stopwords): each distinct word goes through the analyzer once.
    """
    word_ids = _word_ids(analyzer, terms)
    word_lists = [analyzer.words(text(d)) for d in documents]
    n_words = np.fromiter(map(len, word_lists), dtype=np.int64, count=len(word_lists))
    flat = np.fromiter(map(word_ids.__getitem__, chain.from_iterable(word_lists)), dtype=np.int32,
                       count=int(n_words.sum()))
    kept = flat >= 0
    lengths = np.bincount(np.repeat(np.arange(len(word_lists)), n_words)[~kept], minlength=len(word_lists))
    lengths = n_words - lengths
    offsets = np.zeros(len(word_lists) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return _counted(documents, flat[kept], offsets, len(terms), np.empty(0, bool), keep_documents)


class _WordIds(dict):
    """Surface word -> term id (-1: dropped by the analyzer), filled on first sight, for one generation of the
    dictionary."""

    def __init__(self, analyzer: WordAnalyzer, terms: TermDictionary):
        super().__init__()
        self.analyzer, self.terms, self.generation = analyzer, terms, terms.generation

    def __missing__(self, word: str) -> int:
        # what WordAnalyzer.__call__ does to each word its pattern found
        analyzer = self.analyzer
        if word in analyzer._stopset:
            term_id = -1
        else:
            term_id = self.terms.lookup([analyzer._stem(word) if analyzer._stem else word], add=True)[0]
        self[word] = term_id
        return term_id


_WORD_ID_CACHES: "weakref.WeakKeyDictionary[TermDictionary, dict]" = weakref.WeakKeyDictionary()


def _word_ids(analyzer: WordAnalyzer, terms: TermDictionary) -> _WordIds:
    """The cache for this term dictionary and analyzer configuration (entries stay valid while the
    dictionary grows, until it takes ids back)."""
    caches = _WORD_ID_CACHES.setdefault(terms, {})
    key = tuple(sorted(analyzer.config().items(), key=lambda kv: kv[0]))
    cache = caches.get(key)
    if cache is None or cache.generation != terms.generation:
        cache = caches[key] = _WordIds(analyzer, terms)
    return cache


def token_set_postings(documents: list[Document], vocabulary: WordPieceVocabulary,
                       keep_documents: bool = True) -> Postings:
    """Binary bag-of-tokens rows: which (non-excluded) vocabulary ids occur in each document."""
    flat, offsets = vocabulary.encode_batch([d.full_text for d in documents])
    return _counted(documents, flat, offsets, vocabulary.size, vocabulary.excluded_mask, keep_documents)


def _counted(documents, flat, offsets, vocab_size, excluded, keep_documents) -> Postings:
    terms, counts, doc_offsets, lengths = kernels.count_terms(flat, offsets, excluded, vocab_size)
    return Postings(ids=[d.id for d in documents], offsets=doc_offsets, terms=terms,
                    values=counts.astype(np.float32), lengths=lengths,
                    documents=documents if keep_documents else None)


class QueryTerms:
    """Query text -> ids of its known terms, as ``terms.lookup(analyzer(text), add=False)`` gives them,
    through a cache from surface words to term ids (a query word is analyzed once, not per query).

    Words unknown to the vocabulary are not cached: documents added later may bring them in. The cache is
    dropped when the dictionary takes ids back (:meth:`TermDictionary.truncate`).
    """

    def __init__(self, analyzer: WordAnalyzer, terms: TermDictionary):
        self.analyzer, self.terms = analyzer, terms
        self._cache: dict[str, int] = {}  # word -> term id, or -1 for a stopword
        self._generation = terms.generation

    def __call__(self, text: str) -> list[int]:
        if self._generation != self.terms.generation:
            self._cache, self._generation = {}, self.terms.generation
        cache = self._cache
        out = []
        for word in self.analyzer.words(text):
            term_id = cache.get(word)
            if term_id is None:
                term_id = self._resolve(word, cache)
            if term_id >= 0:
                out.append(term_id)
        return out

    def _resolve(self, word: str, cache: dict[str, int]) -> int:
        term = self.analyzer.term(word)
        if term is None:  # a stopword, for good
            cache[word] = -1
            return -1
        term_id = self.terms.ids.get(term)
        if term_id is None:
            return -1
        cache[word] = term_id
        return term_id
