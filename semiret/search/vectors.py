"""Vectors the user brings (retriever ``vectors``): each document carries its own embedding (a corpus line's
``vector`` field, :attr:`~semiret.data.collection.Document.vector`), made by any model outside semiret (an
embedding API, another framework's model), and each query is a vector too (``search(array)``, ``--query-vectors``,
the service's ``"vectors"``). A dense index with no model, as a vector database's collection: exact or ANN search,
filters, groups, boosts and the rest as over any dense index, and the index never loads torch.

``similarity``: ``cosine`` (the default, as most embedding APIs mean their vectors to be compared; vectors scaled to
unit length as they are added and searched, so scores are cosines) or ``dot`` (inner products of the vectors as
given). The dimension is the first document's, or ``dim``; every later vector must have it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from semiret.clustering.kmeans import unit_rows
from semiret.data.collection import VECTOR_FIELD, VECTOR_KINDS, Document, vector_kind
from semiret.errors import SemiretError, UnknownDocumentError
from semiret.indexes.dense import DenseIndex
from semiret.search.neural import AnnOptions, AnnSearchOptions, are_vectors, given_vectors
from semiret.search.retrievers import RETRIEVER_OF_KIND, DocumentSide, QuerySide, Retriever, register_retriever
from semiret.types import Embeddings

SIMILARITIES = ("cosine", "dot")


@dataclass
class BroughtVectorOptions:
    """The dimension and similarity of the vectors documents bring (dense ones, or token vectors)."""

    dim: int | None = None
    """Dimension of the documents' vectors (default: the first document's; an index built empty needs it)."""
    similarity: str = "cosine"
    """How vectors compare: cosine (scaled to unit length as they are added and searched) or dot (inner product of
    the vectors as given)."""

    def __post_init__(self) -> None:
        if self.similarity not in SIMILARITIES:
            raise SemiretError(f"similarity (--similarity) is one of {', '.join(SIMILARITIES)}, got "
                               f"{self.similarity!r}")
        if self.dim is not None and (isinstance(self.dim, bool) or not isinstance(self.dim, int) or self.dim < 1):
            raise SemiretError(f"dim (--dim) must be a whole number of at least 1, got {self.dim!r}")


@dataclass
class VectorDocumentOptions(AnnOptions, BroughtVectorOptions):
    def __post_init__(self) -> None:
        AnnOptions.__post_init__(self)
        BroughtVectorOptions.__post_init__(self)


class VectorDocuments(DocumentSide):
    """Documents' own vectors into a ``dense`` index, checked (each document has one, all of one dimension) and
    scaled to unit length for the cosine similarity."""

    Options = VectorDocumentOptions
    index_kind = "dense"
    index_class = DenseIndex
    batch_size = 1024
    takes_vectors = True
    retriever: ClassVar[str] = "vectors"
    """The retriever, and its indexes' analyzer type, whose documents the side reads."""

    def __init__(self, config: dict, dim: int | None, ann_options: dict | None = None):
        self.config, self.dim, self.ann_options = config, dim, ann_options or {}

    @classmethod
    def create(cls, options: VectorDocumentOptions):
        return cls({"type": "vectors", "similarity": options.similarity}, options.dim, options.index_options())

    @classmethod
    def from_index(cls, index):
        check_vectors_index(index, cls.retriever)
        return cls(index.meta["analyzer"], index.meta["dim"])

    @property
    def normalize(self) -> bool:
        return self.config["similarity"] == "cosine"

    def prepare(self, documents: list[Document]) -> None:
        if self.dim is None:  # the dimension of the first document's vector(s), which every other must have
            self.dim = vector_of(documents[0], self.retriever).shape[-1]

    def index_config(self) -> dict:
        return {"dim": self.dim, "analyzer": self.config, **self.ann_options}

    def encode(self, documents: list[Document]) -> Embeddings:
        for document in documents:
            if len(vector_of(document, "vectors")) != self.dim:
                raise SemiretError(f"document {document.id!r} has a {len(document.vector)}-dimensional vector; the "
                                   f"index holds {self.dim}-dimensional ones")
        vectors = np.stack([d.vector for d in documents]) if documents else np.zeros((0, self.dim), np.float32)
        if self.normalize:
            zero = np.flatnonzero(~vectors.any(axis=1))
            if len(zero):
                raise SemiretError(f"document {documents[zero[0]].id!r} has a zero vector, which has no cosine "
                                   "with any other (index it with --similarity dot, or leave it out)")
            vectors = unit_rows(vectors)
        return Embeddings([d.id for d in documents], vectors, documents)

    def holds_alike(self, index, document: Document) -> bool:
        """Whether the index holds the vector ``document`` brings, as it would be added (a sync replaces the
        documents whose vectors alone changed)."""
        held = index.get_vector(document.id)
        if not isinstance(document.vector, np.ndarray) or held is None or len(document.vector) != len(held):
            return False
        brought = unit_rows(document.vector[None])[0] if self.normalize else document.vector
        return bool(np.array_equal(brought, held))


SPARSE_RETRIEVER = RETRIEVER_OF_KIND["sparse"]
"""The retriever of sparse vectors brought by the user (:mod:`semiret.search.sparse_vectors`): its name is its
index's analyzer type too, as ``vectors`` is the dense one's."""
MULTI_RETRIEVER = RETRIEVER_OF_KIND["multi"]
"""The retriever of token vectors brought by the user (:mod:`semiret.search.multivectors`), its index's analyzer
type."""


def vector_of(document: Document, retriever: str) -> "np.ndarray | dict[str, float]":
    """The vector ``document`` brings, of the kind an index of ``retriever`` (``vectors``, dense; ``sparse-vectors``,
    sparse; ``multivectors``, token vectors) holds: none, or one of another kind, is an error naming the document."""
    vector = document.vector
    if vector is None:
        raise SemiretError(f"document {document.id!r} has no vector: an index of the {retriever} retriever holds the "
                           f"vectors its documents bring (a corpus line's {VECTOR_FIELD!r} field, Document.vector)")
    brings = vector_kind(vector)
    if RETRIEVER_OF_KIND[brings] != retriever:
        holds = next(kind for kind, name in RETRIEVER_OF_KIND.items() if name == retriever)
        raise SemiretError(f"document {document.id!r} brings a vector {VECTOR_KINDS[brings]}; an index of the "
                           f"{retriever} retriever holds {VECTOR_KINDS[holds]}: index such documents with the "
                           f"{RETRIEVER_OF_KIND[brings]} retriever")
    return vector


def check_vectors_index(index, retriever: str) -> None:
    """Refuse an index not built from documents' own vectors by ``retriever`` (its analyzer type)."""
    if index.meta["analyzer"].get("type") != retriever:
        raise SemiretError(f"{index.path} was not built from documents' own vectors (retriever {retriever}) but by "
                           f"{index.meta.get('retriever') or 'an encoder'}: search it with that retriever")


class VectorQueries(QuerySide):
    """Query vectors, searched as the index's documents were added: of its dimension, scaled for the cosine."""

    Options = AnnSearchOptions
    reads_texts = False
    searches_vectors = True

    def __init__(self, index, documents: VectorDocuments, options: AnnSearchOptions):
        self.path, self.documents, self.options = index.path, documents, options

    retriever: ClassVar[str] = "vectors"
    """The retriever, and its indexes' analyzer type, whose queries the side reads."""
    searched_by: ClassVar[str] = "query vectors (search(array), --query-vectors FILE, the service's \"vectors\")"
    """What the index is searched by instead of texts, as an error says it."""

    @classmethod
    def reads(cls, index) -> bool:
        return index.meta["analyzer"].get("type") == cls.retriever

    @classmethod
    def open(cls, index, options, documents):
        check_vectors_index(index, cls.retriever)
        return cls(index, documents, options)

    def encode_queries(self, texts):
        raise SemiretError(f"{self.path} holds the vectors its documents brought and has no model to embed query "
                           f"texts: search it with {self.searched_by}")

    def search(self, index, texts, k, n_threads):
        if texts and not are_vectors(texts):
            self.encode_queries(texts)
        vectors = given_vectors(texts, index, self.documents.normalize) if texts else \
            np.zeros((0, index.meta["dim"]), np.float32)
        return self.options.search(index, vectors, k, n_threads)


class BroughtVectorsRetriever(Retriever):
    """A retriever of the vectors documents bring (dense or sparse): recommendations search by the examples' own
    vectors as the index holds them (``index.get_vector``)."""

    def _example_texts(self, index, examples: list[str]) -> tuple[list, set[str]]:
        """A recommendation's examples as their vectors in the index (there may be no model to read their texts)."""
        vectors = []
        for doc_id in examples:
            vector = index.get_vector(doc_id)
            if vector is None:
                raise UnknownDocumentError(f"no document {doc_id!r} in {index.path} to recommend from", doc_id)
            vectors.append(vector if isinstance(vector, dict) else np.asarray(vector, dtype=np.float32))
        return vectors, set(examples)


@register_retriever
class VectorsRetriever(BroughtVectorsRetriever):
    """Documents and queries that bring their own vectors, in a dense index (exact, flat, ivf, hnsw or tree)."""

    name = "vectors"
    documents = VectorDocuments
    queries = VectorQueries
