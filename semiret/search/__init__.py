"""Retrievers and search pipelines, registered by name."""

from semiret.search.retrievers import (
    RETRIEVERS, BagOfTokensRetriever, BM25Retriever, IDFRetriever, Retriever, open_retriever, retriever_class,
)

__all__ = ["RETRIEVERS", "BagOfTokensRetriever", "BM25Retriever", "IDFRetriever", "Retriever", "open_retriever",
           "retriever_class"]
