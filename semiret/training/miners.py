"""In-training hard-negative retrieval from a *fixed* index (SiDR §3.5): never stale, never rebuilt."""

from __future__ import annotations

import random
import re
import unicodedata
from typing import Sequence

from semiret.data.collection import Document
from semiret.indexes.inverted import InvertedIndex
from semiret.types import SparseQuery


def normalize_answer_text(text: str) -> str:
    """Lowercase, strip accents and punctuation, squeeze spaces (DPR-style answer matching)."""
    text = unicodedata.normalize("NFD", text)
    text = "".join(c for c in text if unicodedata.category(c) != "Mn").lower()
    return " ".join(re.findall(r"\w+", text))


def has_answer(text: str, answers: Sequence[str]) -> bool:
    """True when any answer string occurs in ``text`` as a whole token sequence."""
    haystack = f" {normalize_answer_text(text)} "
    return any(f" {normalize_answer_text(a)} " in haystack for a in answers if a.strip())


class RetrievedNegativeMiner:
    """Beta-search the fixed index with the current (detached) query vectors and sample negatives.

    For each query, the top ``depth`` results are scanned in rank order; judged positives (and, when the
    data has answer strings, passages containing an answer) are skipped; the first ``pool_size`` others
    form the pool, from which ``per_query`` negatives are drawn uniformly. Short pools are padded with
    random corpus documents, as in the authors' code.
    """

    def __init__(self, index: InvertedIndex, documents: dict[str, Document], positives: dict[str, set[str]],
                 pool_size: int = 20, depth: int = 100, per_query: int = 1, seed: int = 0):
        self.index = index
        self.documents = documents
        self.positives = positives
        self.pool_size = pool_size
        self.depth = max(depth, pool_size)
        self.per_query = per_query
        self.rng = random.Random(seed)
        self._ids = list(documents)

    def mine(self, query_ids: Sequence[str], queries: Sequence[SparseQuery],
             answers: Sequence[Sequence[str]] | None = None) -> list[list[Document]]:
        hits = self.index.search(list(queries), k=self.depth)
        mined = []
        for i, (query_id, ranked) in enumerate(zip(query_ids, hits.ids)):
            excluded = self.positives.get(query_id, set())
            pool = []
            for doc_id in ranked:
                if doc_id in excluded or doc_id not in self.documents:
                    continue
                if answers and answers[i] and has_answer(self.documents[doc_id].full_text, answers[i]):
                    continue
                pool.append(doc_id)
                if len(pool) == self.pool_size:
                    break
            while len(pool) < self.per_query:
                candidate = self.rng.choice(self._ids)
                if candidate not in excluded:
                    pool.append(candidate)
            mined.append([self.documents[d] for d in self.rng.sample(pool, self.per_query)])
        return mined
