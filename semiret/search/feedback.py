"""Pseudo-relevance feedback: RM3, as Anserini and Pyserini compute it (``--rm3``); and vector PRF over dense
indexes (``--prf-depth``, :class:`VectorFeedbackOptions`).

A query is searched once; its top ``fb_docs`` documents are taken as relevant, and the relevance model of
Lavrenko and Croft (RM1: each term's share of a document's words, weighted by the document's score, summed over
the documents) gives the ``fb_terms`` terms that best describe them. RM3 interpolates that model with the query
itself (both normalised to sum to 1, the query's share ``original_query_weight``) and searches again with the
expanded, weighted query. As Anserini's ``Rm3Reranker``: raw first-round scores as document weights, each
document's term counts cut to its ``fb_terms`` most frequent and normalised by their sum, terms of fewer than 2 or
more than 20 characters skipped, and terms in more than a tenth of the corpus skipped (its stopword list). Unlike
Anserini's, words outside ``[a-z0-9]`` are kept, so that documents in other scripts than English expand too.

The computation is a few hundred integers per document: numpy over each document's term ids, no library does it
over semiret's analyzer and term dictionary.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from semiret.data.collection import Document
from semiret.errors import SemiretError
from semiret.types import SparseQuery

MAX_DOCUMENT_FREQUENCY = 0.1
"""Terms found in more than this share of the corpus are left out of the relevance model (Anserini's rule)."""
TERM_CHARACTERS = (2, 20)
"""The shortest and longest terms the relevance model takes (Anserini's rule)."""
MAX_FEEDBACK_DOCUMENTS = 1000
"""The most feedback documents a query may ask for (each is read back and analyzed)."""
MAX_FEEDBACK_TERMS = 1000
"""The most expansion terms a query may ask for (each is one more posting list to read)."""


@dataclass
class RM3Options:
    rm3: bool = False
    """Expand each query by RM3 pseudo-relevance feedback (Pyserini's --rm3): the words of its first search's top
    documents, weighted by a relevance model, then a second search. Needs stored texts."""
    fb_docs: int = 10
    """RM3: documents of the first search taken as relevant."""
    fb_terms: int = 10
    """RM3: terms of the relevance model added to the query."""
    original_query_weight: float = 0.5
    """RM3: the original query's share of the expanded query (1: no expansion)."""

    def __post_init__(self):
        if not 1 <= self.fb_docs <= MAX_FEEDBACK_DOCUMENTS:
            raise SemiretError(f"fb_docs (--fb-docs) must be between 1 and {MAX_FEEDBACK_DOCUMENTS}, "
                               f"got {self.fb_docs}")
        if not 1 <= self.fb_terms <= MAX_FEEDBACK_TERMS:
            raise SemiretError(f"fb_terms (--fb-terms) must be between 1 and {MAX_FEEDBACK_TERMS}, "
                               f"got {self.fb_terms}")
        if not 0.0 <= self.original_query_weight <= 1.0:
            raise SemiretError("original_query_weight (--original-query-weight) must be between 0 and 1, got "
                               f"{self.original_query_weight}")


class FeedbackTerms:
    """Which term ids of a growing word vocabulary (a :class:`~semiret.text.analyzer.TermDictionary`) the relevance
    model may take: of 2 to 20 characters and in at most a tenth of the documents. Each term's length is
    measured once (a vocabulary only grows, unless a failed write takes its words back: its ``generation``)."""

    def __init__(self):
        self._lengths, self._generation = np.empty(0, np.int32), None
        self._lock = threading.Lock()  # searches of a server share a query side while its vocabulary grows

    def allowed(self, dictionary, document_frequencies: np.ndarray, n_docs: int) -> np.ndarray:
        """A mask over the term ids of ``document_frequencies`` (terms past it, words of an add not yet committed,
        are not taken); ``n_docs``: the documents the frequencies count."""
        n = len(document_frequencies)
        with self._lock:
            if self._generation != dictionary.generation:
                self._lengths, self._generation = self._lengths[:0], dictionary.generation
            known = len(self._lengths)
            if known < n:
                added = dictionary.terms[known:n]  # one slice: the list may grow meanwhile
                self._lengths = np.concatenate([self._lengths, np.fromiter(map(len, added), np.int32, len(added))])
            lengths = self._lengths[:n]
        shortest, longest = TERM_CHARACTERS
        n = len(lengths)
        return ((lengths >= shortest) & (lengths <= longest)
                & (document_frequencies[:n] <= MAX_DOCUMENT_FREQUENCY * max(n_docs, 1)))


def relevance_model(documents: Sequence[np.ndarray], scores: Sequence[float], allowed: np.ndarray,
                    fb_terms: int) -> SparseQuery:
    """RM1 over feedback documents, each given as its term ids (repeated as often as it holds them): each document
    reduced to its ``fb_terms`` most frequent ``allowed`` terms (ties by term id; see :class:`FeedbackTerms`); per
    term, the sum over documents of (its count / the document's count of those terms) x the document's score; the
    ``fb_terms`` heaviest (ties by term id), normalised to sum to 1."""
    weights: dict[int, float] = {}
    for term_ids, score in zip(documents, scores):
        unique, counts = np.unique(term_ids[term_ids < len(allowed)], return_counts=True)
        kept = allowed[unique]
        unique, counts = unique[kept], counts[kept]
        if len(unique) > fb_terms:  # a document's own most frequent terms only, as Anserini prunes its vectors
            top = np.lexsort((unique, -counts))[:fb_terms]
            unique, counts = unique[top], counts[top]
        if not len(unique):
            continue
        for term, share in zip(unique.tolist(), (counts * (float(score) / counts.sum())).tolist()):
            weights[term] = weights.get(term, 0.0) + share
    kept = sorted((item for item in weights.items() if item[1] > 0), key=lambda item: (-item[1], item[0]))[:fb_terms]
    if not kept:
        return SparseQuery(np.empty(0, np.int32), np.empty(0, np.float32))
    kept.sort()
    values = np.array([w for _, w in kept], np.float64)
    return SparseQuery(np.array([t for t, _ in kept], np.int32), (values / values.sum()).astype(np.float32))


def interpolate(query: SparseQuery, model: SparseQuery, query_weight: float, query_terms: float = 0.0) -> SparseQuery:
    """RM3: ``query_weight`` x the query's weights (normalised to sum to 1, or to ``query_terms``: the terms the
    query was analyzed into, those the index does not know included, as Anserini counts them) + the rest x the
    relevance model's."""
    total = max(float(query.weights.sum()), query_terms)
    if total <= 0 or not len(model.terms):
        return query
    ids = np.union1d(query.terms, model.terms).astype(np.int32)
    weights = np.zeros(len(ids), np.float64)
    weights[np.searchsorted(ids, query.terms)] += query_weight * query.weights / total
    weights[np.searchsorted(ids, model.terms)] += (1.0 - query_weight) * model.weights
    keep = weights > 0
    return SparseQuery(ids[keep], weights[keep].astype(np.float32))


def expanded_queries(index, queries: list[SparseQuery], query_terms: list[int], options: RM3Options, n_threads: int,
                     document_terms: Callable[[Document], list[int]], allowed: np.ndarray) -> list[SparseQuery]:
    """``queries`` expanded by RM3 over ``index``: a first search for ``options.fb_docs`` documents each, their
    stored documents read back and turned into term ids by ``document_terms`` (the index's own analyzer and term
    dictionary), the relevance model of each query (over the ``allowed`` terms, :class:`FeedbackTerms`)
    interpolated with it (``query_terms``: how many terms each query was analyzed into, unknown ones included). A
    document deleted in between is skipped."""
    first = index.search(queries, k=options.fb_docs, n_threads=n_threads)
    stored = index.get_documents({d for ids in first.ids for d in ids})
    parsed: dict[str, np.ndarray] = {}
    expanded = []
    for query, length, ids, scores in zip(queries, query_terms, first.ids, first.scores):
        found = [(d, s) for d, s in zip(ids, scores) if d in stored]
        for doc_id, _ in found:
            if doc_id not in parsed:
                parsed[doc_id] = np.array(document_terms(stored[doc_id]), np.int64)
        model = relevance_model([parsed[d] for d, _ in found], [s for _, s in found], allowed, options.fb_terms)
        expanded.append(interpolate(query, model, options.original_query_weight, length))
    return expanded


PRF_METHODS = ("avg", "rocchio")


@dataclass
class VectorFeedbackOptions:
    """Vector pseudo-relevance feedback over a dense index (Li et al. 2021, "Pseudo Relevance Feedback with Deep
    Language Models and Dense Retrievers"; Pyserini's ``--prf-depth``, PyTerrier-DR's ``vector_prf``): each query's
    vector moved towards the vectors of its first search's best ``prf_depth`` documents, then searched again. Its
    length is kept (a cosine stays a cosine)."""

    prf_depth: int = 0
    """Vector pseudo-relevance feedback (Pyserini's --prf-depth): each query vector moved towards its first search's
    best PRF_DEPTH documents' vectors, then searched again (0: none)."""
    prf_method: str = "avg"
    """How (--prf-depth): avg, the mean of the query's and the documents' vectors; rocchio, --rocchio-alpha times the
    query's plus --rocchio-beta times the documents' mean."""
    rocchio_alpha: float = 0.9
    """The query's weight (--prf-method rocchio; Pyserini's default)."""
    rocchio_beta: float = 0.1
    """The feedback documents' weight (--prf-method rocchio; Pyserini's default)."""

    def __post_init__(self) -> None:
        depth = self.prf_depth
        if isinstance(depth, bool) or not isinstance(depth, int) or not 0 <= depth <= MAX_FEEDBACK_DOCUMENTS:
            raise SemiretError(f"prf_depth (--prf-depth) must be a whole number from 0 to {MAX_FEEDBACK_DOCUMENTS}, "
                               f"got {depth!r}")
        if self.prf_method not in PRF_METHODS:
            raise SemiretError(f"prf_method (--prf-method) is one of {', '.join(PRF_METHODS)}, got "
                               f"{self.prf_method!r}")
        for name in ("rocchio_alpha", "rocchio_beta"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
                raise SemiretError(f"{name} (--{name.replace('_', '-')}) must be a finite number of at least 0, got "
                                   f"{value!r}")

    def moved(self, queries: np.ndarray, feedback: Sequence[np.ndarray]) -> np.ndarray:
        """``queries`` (float32 [n, dim]) each moved towards its ``feedback`` documents' vectors ([depth, dim]; none:
        left as it is), its length kept."""
        moved = np.array(queries, np.float32, copy=True)
        for row, documents in enumerate(feedback):
            query = moved[row]
            length = float(np.linalg.norm(query))
            if not len(documents) or not length:
                continue
            if self.prf_method == "avg":
                new = (query + documents.sum(axis=0)) / (len(documents) + 1)
            else:
                new = self.rocchio_alpha * query + self.rocchio_beta * documents.mean(axis=0)
            new_length = float(np.linalg.norm(new))
            if new_length:
                moved[row] = new * (length / new_length)
        return moved
