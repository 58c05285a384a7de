"""semiret as a LangChain retriever (``langchain-core``; ``pip install semiret[langchain]``), as RAG pipelines take
retrievers: :class:`SemiretRetriever` over an index opened in this process (any retriever: BM25, inference-free,
dense, hybrid, ...; an index of the vectors retriever with the LangChain ``embeddings`` that made its vectors) or one
served by ``semiret serve`` (through :class:`~semiret.serving.client.Client`),
``invoke(query)`` giving LangChain documents; and :func:`semiret_documents`, LangChain's documents (a loader's, a
splitter's) as semiret documents to index.

A hit becomes ``Document(id=hit.id, page_content=title and text, metadata=stored metadata + relevance_score)``:
``relevance_score`` is the name LangChain's re-rankers give a score in metadata (what the score means is the
retriever's: BM25's, a cosine, ...); a stored field of that name is kept under it instead of the score.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document as LangChainDocument
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, model_validator

from semiret.data.collection import Document
from semiret.errors import SemiretError
from semiret.search.retrievers import Retriever, open_retriever
from semiret.serving.client import Client

SCORE_KEY = "relevance_score"
"""The metadata key of a hit's score in the documents a :class:`SemiretRetriever` gives."""


class SemiretRetriever(BaseRetriever):
    """A LangChain retriever over a semiret index: ``searcher`` is a :class:`~semiret.search.retrievers.Retriever`
    (:meth:`from_index`), or a :class:`~semiret.serving.client.Client` with the served ``index``'s name
    (:meth:`from_server`). Each query's best ``k`` hits passing ``filter`` (semiret's filters: ``{"year": {"gte":
    2020}}``), searched with ``search_kwargs`` too (``group_by``, ``diversity``, ``boost``, ``score_threshold``, ...,
    as ``search`` takes them)."""

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
        if isinstance(self.searcher, Client):
            if self.index is None:
                raise SemiretError("a SemiretRetriever over a semiret server searches one of its indexes: give index")
        elif isinstance(self.searcher, Retriever):
            if self.index is not None:
                raise SemiretError("index names a served index; a Retriever is over its own (leave index out)")
            if not self.searcher.index.stores_texts:
                raise SemiretError(f"{self.searcher.index.path} keeps no stored documents (built with "
                                   "--no-store-texts): there is no text to give LangChain")
        else:
            raise SemiretError(f"searcher is a semiret Retriever or Client, got {type(self.searcher).__name__}")
        if self.embeddings is not None and not hasattr(self.embeddings, "embed_query"):
            raise SemiretError(f"embeddings is a LangChain Embeddings model (with embed_query), got "
                               f"{type(self.embeddings).__name__}")
        if isinstance(self.searcher, Retriever) and not self.searcher.query_side.reads_texts \
                and self.embeddings is None:
            raise SemiretError(f"{self.searcher.index.path} holds vectors brought with its documents and has no model "
                               "for query texts: give embeddings, the LangChain model that made its vectors")
        return self

    @classmethod
    def from_index(cls, path: str | Path, k: int = 4, filter: dict | None = None, search_kwargs: dict | None = None,
                   **options) -> "SemiretRetriever":
        """Over the index directory at ``path``, opened with its retriever's search ``options``."""
        return cls(searcher=open_retriever(path, **options), k=k, filter=filter, search_kwargs=search_kwargs or {})

    @classmethod
    def from_server(cls, url: str, index: str, api_key: str | None = None, k: int = 4, filter: dict | None = None,
                    search_kwargs: dict | None = None) -> "SemiretRetriever":
        """Over the index ``index`` of the semiret server at ``url``."""
        return cls(searcher=Client(url, api_key=api_key), index=index, k=k, filter=filter,
                   search_kwargs=search_kwargs or {})

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun
                                ) -> list[LangChainDocument]:
        searched = query if self.embeddings is None else np.asarray(self.embeddings.embed_query(query), np.float32)
        if isinstance(self.searcher, Client):
            hits = self.searcher.search(self.index, searched, k=self.k, filter=self.filter, with_text=True,
                                        **self.search_kwargs)
        else:
            hits = self.searcher.search(searched, k=self.k, filter=self.filter, **self.search_kwargs)
        return [_langchain_document(hit) for hit in hits]


def _langchain_document(hit) -> LangChainDocument:
    stored = hit.document
    if stored is None:  # (a served index without stored texts)
        raise SemiretError(f"the index keeps no stored document {hit.id!r}: there is no text to give LangChain")
    return LangChainDocument(id=hit.id, page_content=stored.full_text,
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
    shared = Counter(doc_id for doc_id, from_metadata in named if from_metadata)
    seen: Counter = Counter()
    read = []
    for document, (doc_id, from_metadata) in zip(documents, named):
        if from_metadata and shared[doc_id] > 1:
            seen[doc_id] += 1
            doc_id = f"{doc_id}#{seen[doc_id] - 1}"
        read.append(Document(doc_id, document.page_content, metadata=dict(document.metadata) or None))
    return read
