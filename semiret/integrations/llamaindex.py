"""semiret as a LlamaIndex retriever (``llama-index-core``; ``pip install semiret[llamaindex]``), as LlamaIndex's query
engines, chat engines and agents take retrievers: :class:`SemiretRetriever` over an index opened in this process (any
retriever: BM25, inference-free, dense, hybrid, ...; an index of the vectors retriever with the LlamaIndex
``embed_model`` that made its vectors) or one served by ``semiret serve`` (through
:class:`~semiret.serving.client.Client`), ``retrieve(query)`` giving LlamaIndex nodes with their scores; and
:func:`semiret_documents`, LlamaIndex's documents and nodes (a reader's, a node parser's) as semiret documents to
index.

A hit becomes ``NodeWithScore(node=TextNode(id_=hit.id, text=title and text, metadata=stored metadata),
score=hit.score)`` (what the score means is the retriever's: BM25's, a cosine, ...). With ``search_kwargs={"context":
N}`` (an index of passages, ``--chunk-words``), the node's text is the hit's passage with up to ``N`` passages of its
document on each side, after its title (``semiret search --context``'s text; LlamaIndex's sentence window).

No download, ever: importing ``llama_index.core`` fetches nothing (0.13 and 0.14 checked), and this adapter never
calls what could: NLTK's stopwords and sentence tokenizer (``llama_index.core.utils.globals_helper``, which downloads
them where its bundled copy is missing) and tiktoken's encodings (``get_tokenizer``) are read by LlamaIndex's text
splitters, prompt helpers and keyword indexes only, none of which is used here.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from semiret.integrations._shared import framework_missing

try:
    from llama_index.core.callbacks import CallbackManager
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore, QueryBundle, TextNode
    from llama_index.core.vector_stores.types import FilterCondition, FilterOperator, MetadataFilter, MetadataFilters
except ImportError as error:
    raise framework_missing(error, "LlamaIndex", ("llama_index",), "llamaindex", "llama-index-core") from error

from semiret.data.collection import Document
from semiret.errors import SemiretError
from semiret.integrations._shared import (check_query_model, check_search_kwargs, check_searcher, hit_text,
                                          numbered_ids, search, stored_document)
from semiret.search.retrievers import Retriever, open_retriever
from semiret.serving.client import Client


class SemiretRetriever(BaseRetriever):
    """A LlamaIndex retriever over a semiret index: ``searcher`` is a :class:`~semiret.search.retrievers.Retriever`
    (:meth:`from_index`), or a :class:`~semiret.serving.client.Client` with the served ``index``'s name
    (:meth:`from_server`). Each query's best ``k`` hits passing ``filter``, searched with ``search_kwargs`` too
    (``group_by``, ``diversity``, ``boost``, ``score_threshold``, ..., as ``search`` takes them; another is an error
    naming those it takes), and ``context``: each node's text the hit's with that many passages of its document on
    each side. ``filter`` is
    semiret's (``{"year": {"gte": 2020}}``) or LlamaIndex's :class:`MetadataFilters`, read as semiret's filters read
    metadata (a field holding a list matches a value when any element does).

    ``embed_model``: a LlamaIndex embedding model (``BaseEmbedding``) whose query embeddings are searched, for an
    index of the vectors retriever (or any dense one) whose documents' vectors are that model's; a query bundle's own
    ``embedding`` is searched as it is, else its ``embedding_strs`` are embedded, as LlamaIndex's vector retriever
    does. ``callback_manager`` and ``verbose`` are LlamaIndex's; ``similarity_top_k``, LlamaIndex's name for ``k``.
    """

    def __init__(self, searcher: Retriever | Client, index: str | None = None, embed_model: Any = None, k: int = 4,
                 filter: dict | MetadataFilters | None = None, search_kwargs: dict | None = None,
                 callback_manager: CallbackManager | None = None, verbose: bool = False,
                 similarity_top_k: int | None = None):
        k = _top_k(k, similarity_top_k)
        check_searcher(searcher, index, "LlamaIndex")
        if embed_model is not None and not hasattr(embed_model, "get_agg_embedding_from_queries"):
            raise SemiretError(f"embed_model is a LlamaIndex embedding model (a BaseEmbedding, with "
                               f"get_agg_embedding_from_queries), got {type(embed_model).__name__}")
        check_query_model(searcher, embed_model is not None, "embed_model", "LlamaIndex")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise SemiretError(f"k is the number of nodes a query retrieves, at least 1, got {k!r}")
        check_search_kwargs(searcher, {} if search_kwargs is None else search_kwargs)
        self.searcher = searcher
        self.index = index
        self.embed_model = embed_model
        self.k = k
        self.filter = semiret_filter(filter) if isinstance(filter, MetadataFilters) else filter
        """The filter searched, semiret's (LlamaIndex's :class:`MetadataFilters` as :func:`semiret_filter` reads
        them)."""
        self.search_kwargs = dict(search_kwargs or {})
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    @classmethod
    def from_index(cls, path: str | Path, k: int = 4, filter: dict | MetadataFilters | None = None,
                   search_kwargs: dict | None = None, embed_model: Any = None, similarity_top_k: int | None = None,
                   **options) -> "SemiretRetriever":
        """Over the index directory at ``path``, opened with its retriever's search ``options``."""
        return cls(open_retriever(path, **options), embed_model=embed_model, k=_top_k(k, similarity_top_k),
                   filter=filter, search_kwargs=search_kwargs)

    @classmethod
    def from_server(cls, url: str, index: str, api_key: str | None = None, k: int = 4,
                    filter: dict | MetadataFilters | None = None, search_kwargs: dict | None = None,
                    embed_model: Any = None, similarity_top_k: int | None = None) -> "SemiretRetriever":
        """Over the index ``index`` of the semiret server at ``url``."""
        return cls(Client(url, api_key=api_key), index=index, embed_model=embed_model, k=_top_k(k, similarity_top_k),
                   filter=filter, search_kwargs=search_kwargs)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        searched: Any = query_bundle.query_str
        if self.embed_model is not None:
            embedding = query_bundle.embedding
            if embedding is None:
                embedding = self.embed_model.get_agg_embedding_from_queries(
                    query_bundle.embedding_strs or [query_bundle.query_str])
            searched = np.asarray(embedding, np.float32)
        hits = search(self.searcher, self.index, searched, self.k, self.filter, self.search_kwargs)
        return [_node(hit, context) for hit, context in hits]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        """:meth:`_retrieve` in a thread of its own, so an application's event loop never waits on a search (nor on a
        server's answer); semiret's retrievers and clients answer several threads at once."""
        return await asyncio.to_thread(self._retrieve, query_bundle)


def _top_k(k: int, similarity_top_k: int | None) -> int:
    """``k``, or LlamaIndex's ``similarity_top_k`` in its place (both given and different: an error)."""
    if similarity_top_k is None:
        return k
    if k not in (4, similarity_top_k):
        raise SemiretError(f"k ({k}) and similarity_top_k ({similarity_top_k}) both say how many nodes: give one")
    return similarity_top_k


def _node(hit, context: str | None) -> NodeWithScore:
    stored = stored_document(hit, "LlamaIndex")
    return NodeWithScore(node=TextNode(id_=hit.id, text=hit_text(stored, context),
                                       metadata=dict(stored.metadata or {})), score=hit.score)


_OPERATORS = {FilterOperator.GT: "gt", FilterOperator.GTE: "gte", FilterOperator.LT: "lt", FilterOperator.LTE: "lte"}


def semiret_filter(filters: MetadataFilters) -> dict | None:
    """LlamaIndex's metadata filters as semiret's (None for none): ``==``, ``!=``, ``>``, ``>=``, ``<``, ``<=``,
    ``in``, ``nin``, ``any``, ``all`` and ``contains``, joined by ``and``, ``or`` or ``not`` (none of them), nested
    too. A document without the field fails every condition but ``!=`` and ``nin``, as in LlamaIndex's own vector
    store (since llama-index-core 0.14.23; before, it failed those too); a field holding a list matches a value when
    any of its elements does (``==``, ``!=`` too, where LlamaIndex compares the list whole). ``text_match`` and
    ``is_empty`` have no semiret filter: an error."""
    if not isinstance(filters, MetadataFilters):
        raise SemiretError(f"a LlamaIndex filter is a MetadataFilters, got {type(filters).__name__}")
    conditions = [_condition(each) if isinstance(each, MetadataFilter) else semiret_filter(each)
                  for each in filters.filters]
    conditions = [each for each in conditions if each is not None]
    how = filters.condition or FilterCondition.AND  # (a str Enum, compared by value: older versions lack NOT)
    if how not in ("and", "or", "not"):
        raise SemiretError(f"LlamaIndex filters joined by {how!r}: semiret joins them by and, or, not")
    if not conditions:
        return None
    if how == "not":
        return {"$not": conditions[0] if len(conditions) == 1 else {"$or": conditions}}
    if len(conditions) == 1:
        return conditions[0]
    return {"$and" if how == "and" else "$or": conditions}


def _condition(condition: MetadataFilter) -> dict:
    key, value, op = condition.key, condition.value, condition.operator
    values = list(value) if isinstance(value, list) else [value]
    if op in (FilterOperator.EQ, FilterOperator.NE, FilterOperator.CONTAINS, *_OPERATORS):
        if isinstance(value, list):
            raise SemiretError(f"the LlamaIndex filter on {key!r} compares with {op.value!r} to a list: "
                               "semiret compares a field with one value there (use 'in' for any of several)")
        if op in _OPERATORS:
            return {key: {_OPERATORS[op]: value}}
        return {"$not": {key: value}} if op == FilterOperator.NE else {key: value}
    if op in (FilterOperator.IN, FilterOperator.ANY):
        return {key: values}
    if op == FilterOperator.NIN:
        return {"$not": {key: values}}
    if op == FilterOperator.ALL:
        return {"$and": [{key: each} for each in values]}
    raise SemiretError(f"the LlamaIndex filter on {key!r} uses {op.value!r}, which semiret's filters lack (they have "
                       "==, !=, >, >=, <, <=, in, nin, any, all, contains); give semiret's filter instead "
                       "(a dict: {\"$text\": ...} matches words of the text, {\"field\": {\"exists\": ...}})")


def semiret_documents(documents: Iterable[BaseNode], id_key: str | None = None) -> list[Document]:
    """LlamaIndex's documents and nodes (a reader's ``Document``\\ s, a node parser's ``TextNode``\\ s) as semiret's,
    to index (``BM25Retriever.build(semiret_documents(docs), path)``): each one's text (``get_content()`` without
    metadata), its metadata whole and its ``embedding``, where it has one (what an index of the vectors retriever
    indexes). Its id is its ``id_``, else, with ``id_key``, its metadata's ``id_key``
    (``SimpleDirectoryReader``'s documents name their file under ``file_path``, their ``id_`` a random one unless
    ``filename_as_id``: ``id_key="file_path"``), numbered ``path#0``, ``path#1``, ... where several share it (a
    splitter's chunks, a PDF's pages); one without it is a clear error, as is an item that is not a LlamaIndex node,
    or a node with no text but an image, audio or video."""
    read, named = [], []
    for position, node in enumerate(documents):
        if not isinstance(node, BaseNode):
            hint = " (a retrieved node: give its .node)" if isinstance(node, NodeWithScore) else ""
            raise SemiretError(f"item {position} is a {type(node).__name__}, not a LlamaIndex node (Document, "
                               f"TextNode){hint}")
        text = node.get_content(metadata_mode=MetadataMode.NONE)
        if not text and _media(node):
            raise SemiretError(f"LlamaIndex node {position} ({node.node_id!r}, a {type(node).__name__}) has no text, "
                               "only media: semiret indexes texts")
        if id_key is None:
            named.append((node.node_id, False))
        else:
            doc_id = (node.metadata or {}).get(id_key)
            if doc_id is None:
                raise SemiretError(f"LlamaIndex node {position} ({node.node_id!r}) has no metadata {id_key!r} to take "
                                   "its id from: name a metadata field every node has (id_key), or leave id_key out "
                                   "to keep the nodes' own ids")
            named.append((str(doc_id), True))
        read.append((node, text))
    return [Document(doc_id, text, metadata=dict(node.metadata or {}) or None, vector=node.embedding)
            for (node, text), doc_id in zip(read, numbered_ids(named))]


def _media(node: BaseNode) -> bool:
    """Whether ``node`` holds an image, audio or video (an ``ImageNode``, a ``Document`` of an image)."""
    return any(getattr(node, name, None) is not None
               for name in ("image", "image_path", "image_url", "image_resource", "audio_resource", "video_resource"))
