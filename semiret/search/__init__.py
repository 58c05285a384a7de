"""Retrievers: an index plus a document side and a query side, registered by name
(:mod:`semiret.search.retrievers`); the lexical, neural and semi-parametric sides and retrievers, and the vectors
retrievers of embeddings brought by the user, dense, sparse and token vectors."""

from semiret.search.gdr import GDRRetriever
from semiret.search.hybrid import HybridRetriever
from semiret.search.late_interaction import ColbertRetriever
from semiret.search.lexical import BagOfTokensRetriever, BM25Retriever, IDFRetriever
from semiret.search.multivectors import MultiVectorsRetriever
from semiret.search.nail import BM25NailRetriever, NailExhaustiveRetriever, NailSparseRetriever
from semiret.search.neural import (
    DenseRetriever,
    InferenceFreeRetriever,
    SpladeRetriever,
)
from semiret.search.retrievers import (
    RETRIEVERS,
    DocumentSide,
    QuerySide,
    Retriever,
    open_retriever,
    register_retriever,
    retriever_class,
)
from semiret.search.semiparametric import (
    LateParametricRetriever,
    SiDRBetaRetriever,
    SiDRFullRetriever,
)
from semiret.search.sparse_vectors import SparseVectorsRetriever
from semiret.search.vectors import VectorsRetriever

__all__ = ["RETRIEVERS", "BagOfTokensRetriever", "BM25NailRetriever", "BM25Retriever", "ColbertRetriever", "DenseRetriever",
           "DocumentSide",
           "GDRRetriever", "HybridRetriever", "IDFRetriever", "InferenceFreeRetriever", "LateParametricRetriever", "MultiVectorsRetriever",
           "NailExhaustiveRetriever", "NailSparseRetriever", "QuerySide", "Retriever", "SiDRBetaRetriever",
           "SiDRFullRetriever", "SparseVectorsRetriever", "SpladeRetriever", "VectorsRetriever", "open_retriever",
           "register_retriever", "retriever_class"]
