"""``hybrid``: BM25 fused with a neural retriever, what practitioners reach for when a model is out of its
domain. Both indexes live in one composite index directory (:class:`~semiret.indexes.composite.CompositeIndex`)
and change together; each query searches both and fuses the two rankings (reciprocal rank fusion, or
min-max normalised scores), with a configurable weight.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from semiret.errors import SemiretError
from semiret.indexes.composite import CompositeIndex
from semiret.search.retrievers import (
    DocumentSide,
    QuerySide,
    Retriever,
    register_retriever,
    retriever_class,
)
from semiret.types import SearchHits

LEXICAL, NEURAL = "lexical", "neural"
FUSIONS = ("rrf", "score")


@dataclass
class HybridDocumentOptions:
    neural: str = "inference-free"
    """The retriever fused with BM25 (any registered one: inference-free, dense, splade, sidr-full, ...)."""
    model: str | None = None
    """Model of the neural retriever (default: its own default)."""


class HybridDocuments(DocumentSide):
    """Each document into a BM25 index and into the neural retriever's index, under one directory."""

    Options = HybridDocumentOptions
    index_kind = "hybrid"
    index_class = CompositeIndex
    batch_size = 1024

    def __init__(self, sides: dict[str, tuple[str, DocumentSide]]):
        self.sides = sides  # part -> (retriever name, its document side)

    @classmethod
    def create(cls, options: HybridDocumentOptions):
        neural = retriever_class(options.neural)
        if neural.documents is cls or neural.name == "bm25":
            raise SemiretError(f"hybrid fuses BM25 with a neural retriever, not with {options.neural!r}")
        neural_fields = {f.name for f in fields(neural.documents.Options)}
        if options.model is not None and "model" not in neural_fields:
            raise SemiretError(f"retriever {options.neural!r} takes no model")
        neural_options = neural.documents.Options(**({"model": options.model} if options.model else {}))
        bm25 = retriever_class("bm25")
        return cls({LEXICAL: (bm25.name, bm25.documents.create(bm25.documents.Options())),
                    NEURAL: (neural.name, neural.documents.create(neural_options))})

    @classmethod
    def from_index(cls, index: CompositeIndex):
        return cls({name: (part.meta["retriever"], retriever_class(part.meta["retriever"]).documents.from_index(part))
                    for name, part in index.parts.items()})

    def prepare(self, documents):
        for _, side in self.sides.values():
            side.prepare(documents)

    def encode(self, documents):
        return {name: side.encode(documents) for name, (_, side) in self.sides.items()}

    def index_config(self) -> dict:
        parts = {}
        for name, (retriever, side) in self.sides.items():
            parts[name] = {"index_class": side.index_class, "kind": side.index_kind, "retriever": retriever,
                           **side.index_config()}
        return {"parts": parts}


@dataclass
class HybridQueryOptions:
    fusion: str = "rrf"
    """How the two rankings combine: 'rrf' (reciprocal rank fusion) or 'score' (min-max normalised scores)."""
    weight: float = 0.5
    """Share of BM25 in the fused score, in [0, 1] (the neural retriever gets the rest)."""
    rrf_k: int = 60
    """RRF's rank offset k: 1 / (k + rank)."""
    fusion_depth: int = 100
    """Documents taken from each ranking before fusing."""


class HybridQueries(QuerySide):
    """Search both parts with their own retrievers, then fuse. One after the other: BM25 costs a tenth of a
    millisecond, less than handing a search to a thread (bench/hybrid_latency.py)."""

    Options = HybridQueryOptions

    def __init__(self, parts: dict[str, Retriever], options: HybridQueryOptions):
        if options.fusion not in FUSIONS:
            raise SemiretError(f"fusion must be one of {', '.join(FUSIONS)}, not {options.fusion!r}")
        if not (math.isfinite(options.weight) and 0.0 <= options.weight <= 1.0):
            raise SemiretError(f"the BM25 weight must be between 0 and 1 (the neural retriever gets 1 - weight), "
                               f"got {options.weight}")
        if options.rrf_k < 0 or options.fusion_depth < 1:
            raise SemiretError("rrf_k must be >= 0 and fusion_depth >= 1")
        self.parts, self.options = parts, options

    @classmethod
    def open(cls, index: CompositeIndex, options: HybridQueryOptions, documents):
        # each part's retriever shares the hybrid's document side of that part (BM25's growing vocabulary)
        parts = {name: retriever_class(retriever).from_index(index.parts[name], document_side=side)
                 for name, (retriever, side) in documents.sides.items()}
        return cls(parts, options)

    def encode_queries(self, texts):
        """Each query as both parts search it: ``{"lexical": ..., "neural": ...}``."""
        encoded = {name: part.encode_queries(texts) for name, part in self.parts.items()}
        return [{name: queries[i] for name, queries in encoded.items()} for i in range(len(texts))]

    def search(self, index, texts, k, n_threads):
        depth = max(k, self.options.fusion_depth)
        lexical, neural = (self.parts[name].search(texts, depth, n_threads) for name in (LEXICAL, NEURAL))
        return self.fuse(lexical, neural, k)

    def fuse(self, lexical: SearchHits, neural: SearchHits, k: int) -> SearchHits:
        weights = {LEXICAL: self.options.weight, NEURAL: 1.0 - self.options.weight}
        out_ids, out_scores = [], []
        for query in range(len(lexical)):
            fused: dict[str, float] = {}
            for name, hits in ((LEXICAL, lexical), (NEURAL, neural)):
                if not weights[name]:
                    continue  # a part weighted 0 adds no documents either
                ids, scores = hits.ids[query], hits.scores[query]
                for doc_id, contribution in zip(ids, self._contributions(scores)):
                    fused[doc_id] = fused.get(doc_id, 0.0) + weights[name] * contribution
            ranked = sorted(fused.items(), key=lambda item: -item[1])[:k]
            out_ids.append([d for d, _ in ranked])
            out_scores.append([s for _, s in ranked])
        return SearchHits(out_ids, out_scores)

    def _contributions(self, scores: list[float]) -> list[float]:
        if self.options.fusion == "rrf":
            return [1.0 / (self.options.rrf_k + rank) for rank in range(1, len(scores) + 1)]
        if not scores:
            return []
        low, high = min(scores), max(scores)
        return [(s - low) / (high - low) if high > low else 1.0 for s in scores]


@register_retriever
class HybridRetriever(Retriever):
    """BM25 and a neural retriever (``neural``, default ``inference-free``) over one composite index, their
    rankings fused by RRF or normalised scores."""

    name = "hybrid"
    documents = HybridDocuments
    queries = HybridQueries
