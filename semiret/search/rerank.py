"""A second stage for any retriever whose index stores its documents: the best hits of a search scored again by a
cross-encoder reading the query and each hit's stored title and text together (sentence-transformers'
``CrossEncoder.rank``, OpenSearch's ``rerank`` response processor, PyTerrier's ``retriever >> reranker``).
``Retriever.search(..., rerank=Reranking("cross-encoder/ms-marco-MiniLM-L-6-v2", depth=50))``."""

from __future__ import annotations

from typing import Callable

from semiret.data.collection import Document
from semiret.errors import SemiretError
from semiret.types import SearchHits


class Reranking:
    """The best ``depth`` hits of each query (or ``k``, when more) scored by the cross-encoder ``model`` (a folder,
    a hub id, or a loaded :class:`~semiret.models.cross_encoder.CrossEncoder`, loaded once and kept), ranked by that
    score, the first stage's order breaking ties; ``batch_size`` pairs read at once, ``max_length`` tokens of each
    (default: the model's, at most 512)."""

    def __init__(self, model, depth: int = 100, batch_size: int = 32, max_length: int | None = None):
        for name, value in (("depth", depth), ("batch_size", batch_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SemiretError(f"the re-ranking {name} must be a whole number, at least 1, got {value!r}")
        if isinstance(model, str):
            from semiret.models.cross_encoder import CrossEncoder  # (torch: only where a search re-ranks)

            model = CrossEncoder.from_pretrained(model, max_length)
        self.model, self.depth, self.batch_size = model, depth, batch_size

    def describe(self) -> dict:
        """What an evaluation records of it."""
        return {"model": self.model.name, "depth": self.depth}

    def reranked(self, queries: list[str], found: SearchHits, documents: Callable[[list[str]], dict[str, Document]],
                 k: int) -> SearchHits:
        """Each query's hits in ``found`` ranked by the model's score of the query and the hit's stored document
        (``documents(ids)``: by id), the best ``k``, each with that score."""
        ids, scores = [], []
        for query, hit_ids in zip(queries, found.ids):
            stored = documents(hit_ids)
            if len(stored) < len(hit_ids):
                raise SemiretError(f"hit {next(d for d in hit_ids if d not in stored)!r} has no stored text to "
                                   "re-rank by")
            given = self.model.score(query, [stored[d].full_text for d in hit_ids], self.batch_size)
            order = sorted(range(len(hit_ids)), key=lambda j: (-given[j], j))[:k]
            ids.append([hit_ids[j] for j in order])
            scores.append([float(given[j]) for j in order])
        return SearchHits(ids, scores)
