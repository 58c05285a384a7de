"""Hard negatives: candidate pools from rankings and draws from them (shared by SiDR and the inference-free
teachers' mining), SiDR's in-training retrieval from a *fixed* index (§3.5): never stale, never rebuilt, and
:func:`mined_tuples`, any index's hard negatives of a collection's judged pairs written for any trainer (``semiret
mine-negatives``)."""

from __future__ import annotations

import logging
import random
import re
import unicodedata
from functools import partial
from typing import Callable, Collection, Iterator, Sequence, TypeVar

from semiret.data.chunking import PARENT_FIELD
from semiret.data.collection import Document
from semiret.errors import SemiretError
from semiret.indexes.inverted import InvertedIndex
from semiret.types import SparseQuery

log = logging.getLogger(__name__)

T = TypeVar("T")


def normalize_answer_text(text: str) -> str:
    """Lowercase, strip accents and punctuation, squeeze spaces (DPR-style answer matching)."""
    text = unicodedata.normalize("NFD", text)
    text = "".join(c for c in text if unicodedata.category(c) != "Mn").lower()
    return " ".join(re.findall(r"\w+", text))


def has_answer(text: str, answers: Sequence[str]) -> bool:
    """True when any answer string occurs in ``text`` as a whole token sequence."""
    haystack = f" {normalize_answer_text(text)} "
    return any(f" {normalize_answer_text(a)} " in haystack for a in answers if a.strip())


def negative_pool(rankings: Sequence[Sequence[T]], excluded: Collection[T], size: int | None = None,
                  keep: Callable[[T], bool] | None = None) -> list[T]:
    """Hard-negative candidates: ``rankings`` (best first) read rank by rank, one entry from each in turn, each
    candidate once, skipping ``excluded`` (the judged positives) and any that ``keep`` rejects, up to ``size``."""
    pool: list[T] = []
    seen = set(excluded)
    for rank in range(max(map(len, rankings), default=0)):
        for ranking in rankings:
            if rank >= len(ranking) or ranking[rank] in seen:
                continue
            candidate = ranking[rank]
            seen.add(candidate)
            if keep is not None and not keep(candidate):
                continue
            pool.append(candidate)
            if len(pool) == size:
                return pool
    return pool


def sample_negatives(pool: Sequence[T], n: int, rng: random.Random, corpus: Sequence[T],
                     excluded: Collection[T]) -> list[T]:
    """``n`` negatives drawn uniformly from ``pool``; a shorter pool is kept whole and padded with random
    ``corpus`` entries outside ``excluded`` (as the SiDR authors' code pads)."""
    if len(pool) >= n:
        return rng.sample(list(pool), n)
    if all(c in excluded for c in corpus):
        raise SemiretError("no negative to draw: every document of the corpus is a positive of the query")
    padded = list(pool)
    while len(padded) < n:
        candidate = corpus[rng.randrange(len(corpus))]
        if candidate not in excluded:
            padded.append(candidate)
    return padded


class RetrievedNegativeMiner:
    """Beta-search the fixed index with the current (detached) query vectors and sample negatives.

    For each query, the top ``depth`` results are scanned in rank order; judged positives (and, when the
    data has answer strings, passages containing an answer) are skipped; the first ``pool_size`` others
    form the pool (:func:`negative_pool`), from which ``per_query`` negatives are drawn with the caller's
    ``rng`` (:func:`sample_negatives`).
    """

    def __init__(self, index: InvertedIndex, documents: dict[str, Document], positives: dict[str, set[str]],
                 pool_size: int = 20, depth: int = 100, per_query: int = 1):
        self.index = index
        self.documents = documents
        self.positives = positives
        self.pool_size = pool_size
        self.depth = max(depth, pool_size)
        self.per_query = per_query
        self._ids = list(documents)

    def mine(self, query_ids: Sequence[str], queries: Sequence[SparseQuery], rng: random.Random,
             answers: Sequence[Sequence[str]] | None = None) -> list[list[Document]]:
        hits = self.index.search(list(queries), k=self.depth)
        mined = []
        for i, (query_id, ranked) in enumerate(zip(query_ids, hits.ids)):
            excluded = self.positives.get(query_id, set())
            usable = partial(self._usable, answers=answers[i] if answers else None)
            pool = negative_pool([ranked], excluded, self.pool_size, usable)
            mined.append([self.documents[d] for d in sample_negatives(pool, self.per_query, rng, self._ids, excluded)])
        return mined

    def _usable(self, doc_id: str, answers: Sequence[str] | None) -> bool:
        """In the corpus and, when the query has answer strings, containing none of them."""
        return doc_id in self.documents and not (answers and has_answer(self.documents[doc_id].full_text, answers))


class PooledNegatives:
    """``per_query`` hard negatives for each query of a batch, drawn (with the batch's rng) from the query's fixed
    pool, e.g. BM25's top documents minus the judged positives; a short pool is padded with random documents."""

    def __init__(self, pools: dict[str, list[str]], documents: dict[str, Document], positives: dict[str, set[str]],
                 per_query: int):
        if per_query < 0:
            raise SemiretError(f"the number of hard negatives per query must be >= 0, got {per_query}")
        self.pools, self.documents, self.positives, self.per_query = pools, documents, positives, per_query
        self._ids = list(documents)

    def sample(self, query_ids: Sequence[str], rng: random.Random) -> list[list[Document]]:
        return [[self.documents[d] for d in sample_negatives(self.pools.get(q, []), self.per_query, rng, self._ids,
                                                             self.positives.get(q, set()))]
                for q in query_ids]


SAMPLINGS = ("top", "random")


def mined_tuples(retriever, queries: dict[str, str], qrels: dict[str, dict[str, int]], negatives: int = 5,
                 skip_top: int = 0, depth: int = 50, sampling: str = "top", seed: int = 0,
                 batch_size: int = 256) -> Iterator[dict]:
    """Hard negatives for each judged (query, positive) pair, as sentence-transformers' ``mine_hard_negatives``
    writes them (n-tuples: ``query``, ``positive``, ``negative_1`` ... ``negative_n``, texts, with their ids): each
    query searched by ``retriever`` for its best ``depth`` hits, the first ``skip_top`` of them passed over (the
    likeliest false negatives: relevant but unjudged), its judged positives (grade > 0) never taken; of the rest, the
    best ``negatives`` (``sampling="top"``) or as many drawn at random (``"random"``, seeded: the same each run). A
    query with fewer such hits gets fewer negatives; one with no judged positive, or no stored text, is left out. Over
    an index of passages, documents are ranked by their best passage (as judged: by document) and written whole."""
    if sampling not in SAMPLINGS:
        raise SemiretError(f"sampling is one of {', '.join(SAMPLINGS)}, got {sampling!r}")
    for name, value, least in (("negatives", negatives, 1), ("skip_top", skip_top, 0), ("depth", depth, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise SemiretError(f"{name} must be a whole number of at least {least}, got {value!r}")
    if skip_top >= depth:
        raise SemiretError(f"skip_top ({skip_top}) leaves no hit of the {depth} searched (depth) to take")
    if not retriever.index.stores_texts:
        raise SemiretError(f"{retriever.index.path} keeps no stored documents (built with --no-store-texts): mined "
                           "negatives are written as texts")
    rng = random.Random(seed)
    judged = [q for q in queries if any(grade > 0 for grade in qrels.get(q, {}).values())]
    unheld = bare = 0  # pairs left out (a positive the index lacks), pairs written without a negative
    passages = retriever.chunking is not None  # documents ranked by their best passage, as judged
    for start in range(0, len(judged), batch_size):
        batch = judged[start:start + batch_size]
        found = retriever.search([queries[q] for q in batch], k=depth, **({"group_by": PARENT_FIELD} if passages
                                                                           else {}))
        for query_id, hits in zip(batch, found):
            ranked = [hit.group if passages else hit.id for hit in hits]
            positives = sorted(d for d, grade in qrels[query_id].items() if grade > 0)
            pool = negative_pool([ranked[skip_top:]], set(positives))
            chosen = pool[:negatives] if sampling == "top" else rng.sample(pool, min(negatives, len(pool)))
            texts = retriever.get_documents([*positives, *chosen])
            for positive in positives:
                if positive not in texts:
                    unheld += 1  # a judged document the index does not hold
                    continue
                bare += not chosen
                yield {"query_id": query_id, "query": queries[query_id], "positive_id": positive,
                       "positive": texts[positive].full_text, "negative_ids": chosen,
                       **{f"negative_{n}": texts[d].full_text for n, d in enumerate(chosen, 1)}}
    if unheld:
        log.warning("%d judged pairs left out: %s does not hold their positive (an index of part of the corpus?)",
                    unheld, retriever.index.path)
    if bare:
        log.warning("%d pairs written without a negative: their query's best %d hits held none but its positives "
                    "(a deeper search, --depth, or a smaller --skip-top finds some)", bare, depth)
