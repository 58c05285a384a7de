"""Separately built indexes of one corpus searched together (:class:`FusedSearch`): each query searched by every
retriever (BM25, a dense index, an inference-free one, ...) and their rankings fused at query time, by reciprocal rank
or by normalised scores (:mod:`semiret.search.fusion`), as PyTerrier's ``bm25 + dense``, Qdrant's prefetches fused
and OpenSearch's hybrid query do. The ``hybrid`` retriever keeps two parts in one directory, changed together; a
fused search reads indexes that live, and change, apart (a document must have one id in all of them).
"""

from __future__ import annotations

from typing import Sequence

from semiret.data.collection import query_texts
from semiret.errors import SemiretError
from semiret.search.candidates import CANDIDATES
from semiret.search.fusion import RRF_K, check_fusion, fused_ranking
from semiret.search.retrievers import Retriever, _check_count
from semiret.types import Hit, SearchHits


class FusedSearch:
    """``retrievers`` searched for each query, each for its best ``depth`` hits (at least ``k``), fused by ``method``
    (``rrf``; ``score``, ``zscore``, ``dbsf``: normalised scores) with ``weights`` (equal by default); hits read their
    stored documents from the first retriever that stores them."""

    def __init__(self, retrievers: Sequence[Retriever], method: str = "rrf", weights: Sequence[float] | None = None,
                 depth: int = CANDIDATES, rrf_k: int = RRF_K):
        self.retrievers = list(retrievers)
        if not all(isinstance(r, Retriever) for r in self.retrievers):
            raise SemiretError("a fused search fuses semiret retrievers (open_retriever(path)), got "
                               + ", ".join(sorted({type(r).__name__ for r in self.retrievers})))
        self.weights = check_fusion(method, weights, len(self.retrievers), rrf_k)
        _check_count(depth, "depth (--fuse-depth), the hits of each retriever fused,")
        self.method, self.depth, self.rrf_k = method, depth, rrf_k
        self.stored = next((r for r in self.retrievers if r.index.stores_texts), None)

    def search(self, queries: str | Sequence[str], k: int = 10, n_threads: int = 1, filter: dict | None = None,
               score_threshold: float | None = None) -> SearchHits | list[Hit]:
        """As :meth:`Retriever.search <semiret.search.retrievers.Retriever.search>`: one query's fused hits (a
        string), or a batch's; ``filter`` applies to every retriever; ``score_threshold`` reads the fused scores."""
        single = isinstance(queries, str)
        texts = query_texts(queries)
        _check_count(k, "k")
        found = [retriever.search(texts, k=max(k, self.depth), n_threads=n_threads, filter=filter)
                 for retriever in self.retrievers]
        ids, scores = [], []
        for number in range(len(texts)):
            ranked = fused_ranking([(hits.ids[number], hits.scores[number]) for hits in found], self.method,
                                   self.weights, self.rrf_k, k)
            ids.append([doc_id for doc_id, _ in ranked])
            scores.append([score for _, score in ranked])
        hits = SearchHits(ids, scores, lookup=self.stored.index.get_document if self.stored is not None else None)
        if score_threshold is not None:
            hits = hits.at_least(score_threshold)
        return hits[0] if single else hits
