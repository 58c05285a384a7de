"""Separately built indexes of one corpus searched together (:class:`FusedSearch`): each query searched by every
retriever (BM25, a dense index, an inference-free one, ...) and their rankings fused at query time, by reciprocal rank
or by normalised scores (:mod:`semiret.search.fusion`), as PyTerrier's ``bm25 + dense``, Qdrant's prefetches fused
and OpenSearch's hybrid query do. The ``hybrid`` retriever keeps two parts in one directory, changed together; a
fused search reads indexes that live, and change, apart (a document must have one id in all of them).
"""

from __future__ import annotations

from typing import Sequence

from semiret.data.chunking import PARENT_FIELD
from semiret.data.collection import query_texts, query_vectors
from semiret.errors import SemiretError
from semiret.search.candidates import CANDIDATES
from semiret.search.fusion import RRF_K, check_fusion, fused_ranking
from semiret.search.retrievers import Retriever, check_count
from semiret.types import Hit, SearchHits


class FusedSearch:
    """``retrievers`` searched for each query, each for its best ``depth`` hits (at least ``k``), fused by ``method``
    (``rrf``; ``score``, ``zscore``, ``dbsf``: normalised scores) with ``weights`` (equal by default); hits read their
    stored documents from the first retriever that stores them. An index of passages takes part with its documents,
    ranked by their best passage (the hits are documents whatever the indexes hold)."""

    def __init__(self, retrievers: Sequence[Retriever], method: str = "rrf", weights: Sequence[float] | None = None,
                 depth: int = CANDIDATES, rrf_k: int = RRF_K):
        self.retrievers = list(retrievers)
        if not all(isinstance(r, Retriever) for r in self.retrievers):
            raise SemiretError("a fused search fuses semiret retrievers (open_retriever(path)), got "
                               + ", ".join(sorted({type(r).__name__ for r in self.retrievers})))
        self.weights = check_fusion(method, weights, len(self.retrievers), rrf_k)
        check_count(depth, "depth (--fuse-depth), the hits of each retriever fused,")
        self.method, self.depth, self.rrf_k = method, depth, rrf_k
        self.stored = next((r for r in self.retrievers if r.index.stores_texts), None)

    def search(self, queries: str | Sequence[str], k: int = 10, n_threads: int = 1, filter: dict | None = None,
               score_threshold: float | None = None) -> SearchHits | list[Hit]:
        """As :meth:`Retriever.search <semiret.search.retrievers.Retriever.search>`: one query's fused hits (a
        string), or a batch's; ``filter`` applies to every retriever; ``score_threshold`` reads the fused scores."""
        if query_vectors(queries, token_vectors=None) is not None:
            raise SemiretError("a fused search takes query texts, which each of its indexes reads its own way (query "
                               "vectors search one dense index)")
        single = isinstance(queries, str)
        texts = query_texts(queries)
        check_count(k, "k")
        rankings = [self._rankings(retriever, texts, max(k, self.depth), n_threads, filter)
                    for retriever in self.retrievers]
        ids, scores = [], []
        for number in range(len(texts)):
            ranked = fused_ranking([ranking[number] for ranking in rankings], self.method, self.weights, self.rrf_k, k)
            ids.append([doc_id for doc_id, _ in ranked])
            scores.append([score for _, score in ranked])
        hits = SearchHits(ids, scores, lookup=self.stored.get_document if self.stored is not None else None)
        if score_threshold is not None:
            hits = hits.at_least(score_threshold)
        return hits[0] if single else hits

    @staticmethod
    def _rankings(retriever: Retriever, texts: list[str], depth: int, n_threads: int, filter: dict | None
                  ) -> list[tuple[list[str], list[float]]]:
        """Each query's ranking of documents by ``retriever`` (ids and scores, best first): over an index of passages,
        its documents by their best passage, so that every index ranks documents alike."""
        if retriever.chunking is None:
            found = retriever.search(texts, k=depth, n_threads=n_threads, filter=filter)
            return list(zip(found.ids, found.scores))
        found = retriever.search(texts, k=depth, n_threads=n_threads, filter=filter, group_by=PARENT_FIELD)
        return [(list(groups), list(scores)) for groups, scores in zip(found.groups, found.scores)]


def check_fusion_asked(fuse_with, method: str, weights, depth: int) -> None:
    """Refuse a fusion's settings given without the indexes to fuse (``--fuse-method`` and the rest without
    ``--fuse-with``: a search that would ignore them)."""
    if not fuse_with and (method != "rrf" or weights or depth != CANDIDATES):
        raise SemiretError("--fuse-method, --fuse-weight and --fuse-depth set a fused search: give the indexes to "
                           "fuse with --fuse-with")
