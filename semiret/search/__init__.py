"""Retrievers and search pipelines, registered by name."""

from semiret.search.retrievers import (
    RETRIEVERS, BagOfTokensRetriever, BM25Retriever, IDFRetriever, Retriever, open_retriever, retriever_class,
)
from semiret.search.neural import DenseRetriever, InferenceFreeRetriever, SpladeRetriever  # registers them
from semiret.search.semiparametric import LateParametricRetriever, SiDRBetaRetriever, SiDRFullRetriever  # registers

__all__ = ["RETRIEVERS", "BagOfTokensRetriever", "BM25Retriever", "DenseRetriever", "IDFRetriever",
           "InferenceFreeRetriever", "LateParametricRetriever", "Retriever", "SiDRBetaRetriever", "SiDRFullRetriever", "SpladeRetriever", "open_retriever", "retriever_class"]
