"""semiret as a LangChain retriever (``langchain-core``; ``pip install semiret[langchain]``), as RAG pipelines take
retrievers: :class:`SemiretRetriever` over an index opened in this process (any retriever: BM25, inference-free,
dense, hybrid, ...; an index of the vectors retriever with the LangChain ``embeddings`` that made its vectors) or one
served by ``semiret serve`` (through :class:`~semiret.serving.client.Client`),
``invoke(query)`` giving LangChain documents; and :func:`semiret_documents`, LangChain's documents (a loader's, a
splitter's) as semiret documents to index.

A hit becomes ``Document(id=hit.id, page_content=title and text, metadata=stored metadata + relevance_score)``:
``relevance_score`` is the name LangChain's re-rankers give a score in metadata (what the score means is the
retriever's: BM25's, a cosine, ...); a stored field of that name is kept under it instead of the score. With
``search_kwargs={"context": N}`` (an index of passages, ``--chunk-words``), ``page_content`` is the hit's passage with
up to ``N`` passages of its document on each side, after its title (``semiret search --context``'s text): what a RAG
prompt is given.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

import numpy as np

from semiret.integrations._shared import framework_missing

try:
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document as LangChainDocument
    from langchain_core.retrievers import BaseRetriever
except ImportError as error:
    raise framework_missing(error, "LangChain", ("langchain_core",), "langchain", "langchain-core") from error
from pydantic import ConfigDict, Field, model_validator

from semiret.data.collection import Document
from semiret.errors import SemiretError
from semiret.integrations._shared import (check_query_model, check_search_kwargs, check_searcher, hit_text,
                                          numbered_ids, search, stored_document)
from semiret.search.retrievers import open_retriever
from semiret.serving.client import Client

SCORE_KEY = "relevance_score"
"""The metadata key of a hit's score in the documents a :class:`SemiretRetriever` gives."""


class SemiretRetriever(BaseRetriever):
    """A LangChain retriever over a semiret index: ``searcher`` is a :class:`~semiret.search.retrievers.Retriever`
    (:meth:`from_index`), or a :class:`~semiret.serving.client.Client` with the served ``index``'s name
    (:meth:`from_server`). Each query's best ``k`` hits passing ``filter`` (semiret's filters: ``{"year": {"gte":
    2020}}``), searched with ``search_kwargs`` too (``group_by``, ``diversity``, ``boost``, ``score_threshold``, ...,
    as ``search`` takes them; another is an error naming those it takes), and ``context``: each hit's text with that
    many passages of its document on each side."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    searcher: Any = Field(description="A semiret Retriever, or a semiret Client (give index too).")
    index: str | None = Field(None, description="With a Client: the name of the served index searched.")
    embeddings: Any = Field(None, description="A LangChain Embeddings model whose embed_query gives the query "
                            "vectors searched (an index of the vectors retriever, or any dense one): its documents' "
                            "vectors must be that model's too.")
    k: int = Field(4, ge=1, description="Documents per query.")
    filter: dict | None = Field(None, description="Only documents whose stored metadata passes it.")
    search_kwargs: dict = Field(default_factory=dict, description="Other arguments of the search.")

    @model_validator(mode="after")
    def _searcher_and_index(self) -> "SemiretRetriever":
        check_searcher(self.searcher, self.index, "LangChain")
        if self.embeddings is not None and not hasattr(self.embeddings, "embed_query"):
            raise SemiretError(f"embeddings is a LangChain Embeddings model (with embed_query), got "
                               f"{type(self.embeddings).__name__}")
        check_query_model(self.searcher, self.embeddings is not None, "embeddings", "LangChain")
        check_search_kwargs(self.searcher, self.search_kwargs)
        return self

    @classmethod
    def from_index(cls, path: str | Path, k: int = 4, filter: dict | None = None, search_kwargs: dict | None = None,
                   embeddings: Any = None, **options) -> "SemiretRetriever":
        """Over the index directory at ``path``, opened with its retriever's search ``options``."""
        return cls(searcher=open_retriever(path, **options), embeddings=embeddings, k=k, filter=filter,
                   search_kwargs=search_kwargs or {})

    @classmethod
    def from_server(cls, url: str, index: str, api_key: str | None = None, k: int = 4, filter: dict | None = None,
                    search_kwargs: dict | None = None, embeddings: Any = None) -> "SemiretRetriever":
        """Over the index ``index`` of the semiret server at ``url``."""
        return cls(searcher=Client(url, api_key=api_key), index=index, embeddings=embeddings, k=k, filter=filter,
                   search_kwargs=search_kwargs or {})

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun
                                ) -> list[LangChainDocument]:
        searched = query if self.embeddings is None else np.asarray(self.embeddings.embed_query(query), np.float32)
        hits = search(self.searcher, self.index, searched, self.k, self.filter, self.search_kwargs)
        return [_langchain_document(hit, context) for hit, context in hits]


def _langchain_document(hit, context: str | None) -> LangChainDocument:
    stored = stored_document(hit, "LangChain")
    return LangChainDocument(id=hit.id, page_content=hit_text(stored, context),
                             metadata={SCORE_KEY: hit.score, **(stored.metadata or {})})


def semiret_documents(documents: Iterable[LangChainDocument], id_key: str = "id") -> list[Document]:
    """LangChain's documents as semiret's, to index (``BM25Retriever.build(semiret_documents(docs), path)``): each
    document's id is its ``id``, else its metadata's ``id_key`` (LangChain's loaders put a file's path under
    ``source``: ``id_key="source"``), numbered ``source#0``, ``source#1``, ... where several documents share it (a
    splitter's chunks, a PDF's pages); one with neither is a clear error. Its metadata is kept whole (``source`` too:
    a filter reads it)."""
    documents = list(documents)
    named = []
    for position, document in enumerate(documents):
        doc_id = document.id if document.id is not None else (document.metadata or {}).get(id_key)
        if doc_id is None:
            raise SemiretError(f"LangChain document {position} has no id and no metadata {id_key!r} to take one "
                               "from: give the documents ids, or name the metadata field that identifies them "
                               "(id_key)")
        named.append((str(doc_id), document.id is None))
    return [Document(doc_id, document.page_content, metadata=dict(document.metadata) or None)
            for document, doc_id in zip(documents, numbered_ids(named))]
