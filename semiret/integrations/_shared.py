"""What the adapters (:mod:`~semiret.integrations.langchain`, :mod:`~semiret.integrations.llamaindex`) share, free of
any framework: checking what an adapter searches (a :class:`~semiret.search.retrievers.Retriever` opened in this
process, or a :class:`~semiret.serving.client.Client` and the name of a served index), searching it, a hit's stored
document, and the ids of a framework's documents indexed by semiret. ``framework`` names the framework in errors."""

from __future__ import annotations

from collections import Counter
from typing import Any

from semiret.data.collection import Document
from semiret.errors import SemiretError
from semiret.search.retrievers import Retriever
from semiret.serving.client import Client


def check_searcher(searcher: Any, index: str | None, framework: str) -> None:
    """That ``searcher`` is a Retriever over an index storing its documents (``index`` left out), or a Client with the
    ``index`` it searches."""
    if isinstance(searcher, Client):
        if index is None:
            raise SemiretError("a SemiretRetriever over a semiret server searches one of its indexes: give index")
    elif isinstance(searcher, Retriever):
        if index is not None:
            raise SemiretError("index names a served index; a Retriever is over its own (leave index out)")
        if not searcher.index.stores_texts:
            raise SemiretError(f"{searcher.index.path} keeps no stored documents (built with --no-store-texts): "
                               f"there is no text to give {framework}")
    else:
        raise SemiretError(f"searcher is a semiret Retriever or Client, got {type(searcher).__name__}")


def check_query_model(searcher: Any, has_model: bool, model: str, framework: str) -> None:
    """That a Retriever whose queries are vectors only (an index of the vectors retriever) comes with the
    framework's embedding model (its argument ``model``) that makes them."""
    if isinstance(searcher, Retriever) and not searcher.query_side.reads_texts and \
            getattr(searcher.query_side, "vector_kind", "dense") == "sparse":
        raise SemiretError(f"{searcher.index.path} holds sparse vectors brought with its documents and reads no query "
                           f"text (built without --query-tokenizer); {framework}'s embedding models make dense "
                           "vectors: build it with query_tokenizer, the tokenizer that made its terms")
    if isinstance(searcher, Retriever) and getattr(searcher.query_side, "vector_kind", "dense") == "multi":
        raise SemiretError(f"{searcher.index.path} holds token vectors brought with its documents, searched by each "
                           f"query's matrix of them; {framework}'s embedding models make one vector a text: search it "
                           "with semiret's own Retriever.search")
    if isinstance(searcher, Retriever) and not searcher.query_side.reads_texts and not has_model:
        raise SemiretError(f"{searcher.index.path} holds vectors brought with its documents and has no model for "
                           f"query texts: give {model}, the {framework} model that made its vectors")


def search(searcher: Retriever | Client, index: str | None, query: Any, k: int, filter: dict | None,
           search_kwargs: dict) -> list:
    """One query's hits (a text, or a vector), best first, each carrying its stored document."""
    if isinstance(searcher, Client):
        return searcher.search(index, query, k=k, filter=filter, with_text=True, **search_kwargs)
    return searcher.search(query, k=k, filter=filter, **search_kwargs)


def stored_document(hit, framework: str) -> Document:
    """The document a hit found, as the index stored it."""
    stored = hit.document
    if stored is None:  # (a served index without stored texts)
        raise SemiretError(f"the index keeps no stored document {hit.id!r}: there is no text to give {framework}")
    return stored


def numbered_ids(named: list[tuple[str, bool]]) -> list[str]:
    """The ids of documents, each ``(id, from_metadata)``: an id taken from a metadata field that several documents
    share (a splitter's chunks, a PDF's pages, under their file's ``source``) numbered ``id#0``, ``id#1``, ... in
    their order; the others as they are."""
    shared = Counter(doc_id for doc_id, from_metadata in named if from_metadata)
    seen: Counter = Counter()
    ids = []
    for doc_id, from_metadata in named:
        if from_metadata and shared[doc_id] > 1:
            seen[doc_id] += 1
            doc_id = f"{doc_id}#{seen[doc_id] - 1}"
        ids.append(doc_id)
    return ids
