"""Diversified search: maximal marginal relevance (Carbonell and Goldstein, 1998) over a retriever's best hits.

A RAG prompt of ten near-copies of one passage wastes nine slots. MMR picks hits one at a time, each the candidate
with the best ``(1 - diversity) * relevance - diversity * (its largest similarity to a hit already picked)``:
Qdrant's ``mmr`` (``diversity``, ``candidates_limit``), LangChain's and LlamaIndex's MMR search, Elasticsearch's
diversify retriever. Relevance is the retriever's score divided by the best one (scores of different retrievers are
in different units; dividing by the best, which every candidate set shares, keeps more candidates from reordering
the picks a smaller set makes, as a min-max rescaling would); similarity is the cosine of the documents' vectors as
the index stores them (:meth:`~semiret.indexes.segments.SegmentedIndex.similarities`). Written here: a greedy loop over a few hundred
candidates that no library offers apart from a vector store.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from semiret.errors import SemiretError
from semiret.search.candidates import candidate_depth, check_candidates

@dataclass(frozen=True)
class Diversity:
    """How far to trade relevance for variety (``diversity``: 0 the plain ranking, 1 variety alone after the best
    hit) and among how many of the best hits (``candidates``; None: :data:`~semiret.search.candidates.CANDIDATES`,
    or ``k`` when more)."""

    diversity: float
    candidates: int | None = None

    def __post_init__(self):
        if isinstance(self.diversity, bool) or not isinstance(self.diversity, numbers.Real) or not (
                0.0 <= self.diversity <= 1.0):
            raise SemiretError(f"diversity (--diversity) must be a number from 0 to 1, got {self.diversity!r}")
        check_candidates(self.candidates)

    def depth(self, k: int) -> int:
        """How many of the best hits to search for, to pick ``k`` among (given ``candidates``: at least ``k``)."""
        return candidate_depth(k, self.candidates)


def maximal_marginal_relevance(scores: np.ndarray, similarities: np.ndarray, k: int, diversity: float) -> list[int]:
    """The positions of at most ``k`` candidates in the order MMR picks them, from candidates ranked best first
    (``scores`` descending) and their ``[n, n]`` similarities; relevance is a score over the best one (rescaled
    over the candidates when none is positive); ties go to the better ranked candidate, so ``diversity`` 0 gives the
    ranking back."""
    scores = np.asarray(scores, np.float64)
    n = len(scores)
    if n == 0:
        return []
    best, span = scores.max(), scores.max() - scores.min()
    if best > 0:
        relevance = scores / best
    else:  # no positive score to measure by (some models' logits): rescaled over the candidates
        relevance = (scores - scores.min()) / span if span > 0 else np.ones(n)
    closest = np.full(n, -np.inf)  # each candidate's largest similarity to those picked
    left = np.ones(n, bool)
    picked: list[int] = []
    for _ in range(min(k, n)):
        penalty = np.where(np.isfinite(closest), closest, 0.0)
        marginal = np.where(left, (1.0 - diversity) * relevance - diversity * penalty, -np.inf)
        best = int(np.argmax(marginal))
        picked.append(best)
        left[best] = False
        closest = np.maximum(closest, similarities[best])
    return picked
