"""Token vectors the user brings (retriever ``multivectors``): each document carries its own matrix of vectors, one a
token (a corpus line's ``vector`` field as a list of lists of numbers, :attr:`~semiret.data.collection.Document.
vector`), made by a late-interaction model run elsewhere (ColBERT, ColPali's page images, Jina's multi-vector
embeddings on a GPU or from an API), and each query is such a matrix too (``search(matrix)``, a list of them for a
batch; ``--query-vectors``; the service's ``"vectors"``). Qdrant's multivectors: a document scores the MaxSim of the
query's vectors and its own, the sum over the query's vectors of the best similarity with any of the document's.

The documents go into a multi-vector index (:class:`~semiret.indexes.multivector.MultiVectorIndex`), searched as the
``colbert`` retriever searches its own (PLAID's candidates, or exact MaxSim), with no model: torch is never imported.

``similarity``: ``cosine`` (the default, as ColBERT compares its vectors: each scaled to unit length as it is added and
searched; the index then compresses them as ColBERTv2 does, ``nbits``) or ``dot`` (inner products of the vectors as
given, kept whole in float16; PLAID's centroids then only choose the candidates, scored exactly).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from semiret.clustering.kmeans import unit_rows
from semiret.data.collection import Document
from semiret.errors import SemiretError
from semiret.indexes.multivector import MultiVectorIndex
from semiret.search.late_interaction import (
    DEFAULT_NBITS,
    MaxSimSearchOptions,
    MultiVectorIndexOptions,
    pooled_tokens,
    token_embeddings,
)
from semiret.search.neural import are_vectors
from semiret.search.retrievers import register_retriever
from semiret.search.vectors import (
    MULTI_RETRIEVER,
    BroughtVectorOptions,
    BroughtVectorsRetriever,
    VectorDocuments,
    VectorQueries,
    vector_of,
)
from semiret.types import TokenEmbeddings

FLOAT16_MAX = float(np.finfo(np.float16).max)


@dataclass
class MultiVectorDocumentOptions(MultiVectorIndexOptions, BroughtVectorOptions):
    def __post_init__(self) -> None:
        BroughtVectorOptions.__post_init__(self)
        MultiVectorIndexOptions.__post_init__(self)
        if self.similarity == "dot" and self.nbits:
            raise SemiretError("nbits (--nbits) compresses unit vectors (ColBERTv2's residuals from unit centroids): "
                               "with --similarity dot the token vectors are kept whole (leave out --nbits, or "
                               "give 0)")


class MultiVectorDocuments(VectorDocuments):
    """Documents' own token vectors into a ``multivector`` index, checked (each document brings a matrix, all of one
    dimension) and, for the cosine similarity, each row scaled to unit length."""

    Options = MultiVectorDocumentOptions
    index_kind = "multivector"
    index_class = MultiVectorIndex
    batch_size = 256
    retriever = MULTI_RETRIEVER

    @classmethod
    def create(cls, options: MultiVectorDocumentOptions):
        ann = {"ann": options.ann, "centroids": options.centroids, "nbits": options.nbits}
        pooling = {"pool_factor": options.pool_factor} if options.pool_factor > 1 else {}
        return cls({"type": MULTI_RETRIEVER, "similarity": options.similarity, **pooling}, options.dim, ann)

    def index_config(self) -> dict:
        nbits = self.ann_options.get("nbits")
        if nbits is None and self.dim is not None:  # (ColBERTv2's compression, unit vectors of a dimension that packs)
            nbits = DEFAULT_NBITS if self.ann_options.get("ann", "plaid") == "plaid" and self.normalize and \
                self.dim * DEFAULT_NBITS % 8 == 0 else 0
        return {"dim": self.dim, "analyzer": self.config, **self.ann_options, "nbits": nbits or None}

    def stored_vectors(self, document: Document) -> np.ndarray:
        """``document``'s token vectors as the index takes them (float32; unit rows for the cosine; pooled where the
        index pools), checked: of the index's dimension, within float16 (as the index stores them), no zero row for
        the cosine."""
        vectors = self._checked_vectors(document)
        pool_factor = self.config.get("pool_factor", 1)
        return pooled_tokens(vectors, pool_factor, 0, self.normalize) if pool_factor > 1 else vectors

    def _checked_vectors(self, document: Document) -> np.ndarray:
        """``document``'s token vectors checked (:meth:`stored_vectors`), unit rows for the cosine, not pooled."""
        vectors = vector_of(document, MULTI_RETRIEVER)
        if vectors.shape[1] != self.dim:
            raise SemiretError(f"document {document.id!r} has {vectors.shape[1]}-dimensional token vectors; the index "
                               f"holds {self.dim}-dimensional ones")
        if not self.normalize:
            if np.abs(vectors).max() > FLOAT16_MAX:
                raise SemiretError(f"document {document.id!r} has a token vector value beyond float16's range "
                                   f"(±{FLOAT16_MAX:g}), in which the index stores them: scale the vectors down")
            return vectors
        zero = np.flatnonzero(~vectors.any(axis=1))
        if len(zero):
            raise SemiretError(f"document {document.id!r}'s token vector {zero[0]} is zero, which has no cosine with "
                               "any other (index with --similarity dot, or leave that row out)")
        wide = vectors.astype(np.float64)  # (norms of rows of 1e20 or 1e-30 overflow or vanish in float32)
        return (wide / np.linalg.norm(wide, axis=1, keepdims=True)).astype(np.float32)

    def encode(self, documents: list[Document]) -> TokenEmbeddings:
        return token_embeddings(documents, [self.stored_vectors(document) for document in documents], self.dim)

    def holds_alike(self, index, document: Document) -> bool:
        """Whether the index holds the token vectors ``document`` brings, as they would be added (a sync replaces
        the documents whose vectors alone changed)."""
        try:
            vectors = self.stored_vectors(document)
        except SemiretError:
            return False  # (to be added again, and refused there naming what is wrong)
        return index.holds_token_vectors(document.id, vectors)


class MultiVectorQueries(VectorQueries):
    """Queries' token vectors, searched as the index's documents were added: of its dimension, rows scaled to unit
    length for the cosine (a zero row then matches nothing)."""

    Options = MaxSimSearchOptions
    vector_kind = "multi"
    retriever = MULTI_RETRIEVER
    searched_by = ("each query's token vectors (search(matrix), --query-vectors FILE, the service's \"vectors\": a "
                   "[tokens, dim] matrix each)")

    def search(self, index, texts, k, n_threads):
        if texts and not are_vectors(texts):
            self.encode_queries(texts)
        dim = index.meta["dim"]
        for position, matrix in enumerate(texts):
            if matrix.shape[1] != dim:
                raise SemiretError(f"{index.path} holds {dim}-dimensional token vectors; query {position}'s are "
                                   f"{matrix.shape[1]}-dimensional")
        queries = [unit_rows(matrix) if self.documents.normalize else matrix for matrix in texts]
        return self.options.search(index, queries, k, n_threads)


@register_retriever
class MultiVectorsRetriever(BroughtVectorsRetriever):
    """Documents and queries that bring their own token vectors, in a multi-vector index searched by MaxSim (``ann``:
    plaid or exact)."""

    name = MULTI_RETRIEVER
    documents = MultiVectorDocuments
    queries = MultiVectorQueries
