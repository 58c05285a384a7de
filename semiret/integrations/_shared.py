"""What the adapters (:mod:`~semiret.integrations.langchain`, :mod:`~semiret.integrations.llamaindex`) share, free of
any framework: the error of a framework not installed, checking what an adapter searches (a
:class:`~semiret.search.retrievers.Retriever` opened in this process, or a :class:`~semiret.serving.client.Client` and
the name of a served index) and the arguments it searches with, searching it, a hit's stored document and the text
a framework is given of it (with its ``context``, where asked), and the ids of a framework's documents indexed by
semiret. ``framework`` names the framework in errors."""

from __future__ import annotations

import inspect
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


class FrameworkMissing(SemiretError, ImportError):
    """An adapter's framework is not installed: the error says what to ``pip install`` (an ImportError too, so
    ``except ImportError`` around an optional import still catches it)."""


def framework_missing(error: ImportError, framework: str, modules: tuple[str, ...], extra: str,
                      package: str) -> ImportError:
    """What importing an adapter raises where its framework's ``modules`` (top-level names) are not installed: an
    error saying what to install (the ``extra`` of semiret that brings ``package``); any other import error as it
    is (a module the framework itself lacks: a broken or too old install, its own words)."""
    if (error.name or "").split(".")[0] not in modules:
        return error
    return FrameworkMissing(f"semiret's {framework} retriever needs {framework} ({package}), which is not installed: "
                            f"pip install 'semiret[{extra}]' (or pip install {package})", name=error.name)


ADAPTER_ARGUMENTS = ("k", "filter")
"""The arguments of a search an adapter gives itself, from its own fields (``search_kwargs`` may not repeat them)."""
CONTEXT = "context"
"""The search argument asking for each hit's text with the passages around it (as ``semiret search --context`` and
the HTTP API's ``"context"`` do): what the framework is given of the hit in place of the passage alone."""


def search_arguments(searcher: Any) -> list[str]:
    """The ``search_kwargs`` an adapter over ``searcher`` takes: those of its ``search`` (a Retriever's, a
    Client's) but the queries and what the adapter gives itself, and ``context``."""
    taken = inspect.signature(type(searcher).search).parameters
    own = {"self", "queries", "index", "with_text", *ADAPTER_ARGUMENTS}
    return sorted({name for name, parameter in taken.items()
                   if name not in own and parameter.kind is not inspect.Parameter.VAR_KEYWORD} | {CONTEXT})


def check_search_kwargs(searcher: Any, search_kwargs: Any) -> None:
    """That ``search_kwargs`` are arguments of ``searcher``'s search (a Client's also takes the served retriever's
    search options, which the server checks), ``context`` a number of passages; each refused with what it takes."""
    if not isinstance(search_kwargs, dict):
        raise SemiretError(f"search_kwargs is a dict of search's arguments, got {type(search_kwargs).__name__}")
    allowed = search_arguments(searcher)
    repeated = sorted(set(search_kwargs) & {*ADAPTER_ARGUMENTS, "queries", "index", "with_text"})
    if repeated:
        raise SemiretError(f"search_kwargs {', '.join(map(repr, repeated))}: the retriever gives that itself (give "
                           f"k and filter as its own arguments); search_kwargs takes {', '.join(allowed)}")
    unknown = sorted(set(search_kwargs) - set(allowed))
    if unknown and not isinstance(searcher, Client):
        raise SemiretError(f"search_kwargs {', '.join(map(repr, unknown))}: not an argument of a search; it takes "
                           f"{', '.join(allowed)} (search options, such as two_phase, are given where the index is "
                           "opened: from_index(path, two_phase=...))")
    window = search_kwargs.get(CONTEXT)
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 0):
        raise SemiretError(f"search_kwargs' context is the number of passages on each side of a hit to give with it, "
                           f"at least 0, got {window!r}")


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
           search_kwargs: dict) -> list[tuple[Any, str | None]]:
    """One query's hits (a text, or a vector), best first, each carrying its stored document, with its context
    where ``search_kwargs`` asks for it (``context``: :meth:`Retriever.context
    <semiret.search.retrievers.Retriever.context>`, as the server and ``semiret search --context`` give it; from the
    commit the search read), else None: ``(hit, context)`` pairs."""
    arguments = dict(search_kwargs)
    window = arguments.pop(CONTEXT, None)
    if isinstance(searcher, Client):
        hits = searcher.search(index, query, k=k, filter=filter, with_text=True, context=window, **arguments)
        return [(hit, hit.context) for hit in hits]
    view = searcher.pinned() if window is not None else searcher  # the hits and their contexts from one commit
    hits = view.search(query, k=k, filter=filter, **arguments)
    return [(hit, None if window is None else view.context(hit.id, window)) for hit in hits]


def stored_document(hit, framework: str) -> Document:
    """The document a hit found, as the index stored it."""
    stored = hit.document
    if stored is None:  # (a served index without stored texts)
        raise SemiretError(f"the index keeps no stored document {hit.id!r}: there is no text to give {framework}")
    return stored


def hit_text(stored: Document, context: str | None) -> str:
    """What a framework is given of a hit: its context where the search gave one (the passage with its neighbours,
    after the document's title), else its stored title and text."""
    return stored.full_text if context is None else context


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
