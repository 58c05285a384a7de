"""A Python client of ``semiret serve`` (as qdrant-client is Qdrant's): the HTTP API as methods named after the
:class:`~semiret.search.retrievers.Retriever`'s, returning semiret's own types (:class:`~semiret.types.Hit`,
:class:`~semiret.data.collection.Document`, :class:`~semiret.types.DocumentPage`), so that code written against an
index opened in-process moves to a served one by changing how it is reached::

    from semiret.serving.client import Client

    client = Client("http://localhost:8000", api_key="...")
    client.add("notes", [Document("n1", "statins lower cholesterol")])
    hits = client.search("notes", "statins", k=5, filter={"$text": "cholesterol"})

Standard library only (``http.client``, one kept-alive connection per thread): a client machine needs nothing of the
server's dependencies. An error answer raises :class:`ServerError` with its status and the server's words.
"""

from __future__ import annotations

import asyncio
import functools
import http.client
import inspect
import json
import logging
import ssl
import threading
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

from semiret.data.collection import (ADDED_FIELDS_HINT, VECTOR_FIELD, CorpusFields, Document, as_documents, query_texts,
                                     query_vectors)
from semiret.data.ids import document_id_problem
from semiret.errors import SemiretError, warn_once
from semiret.types import DocumentPage, Explanation, Hit, SearchHits, Suggestion, TermContribution, TermWeight

log = logging.getLogger(__name__)

Transport = Callable[[str, str, bytes | None, dict], tuple[int, bytes]]
"""``(method, path, body, headers) -> (status, body)``: how a request reaches the server (HTTP by default; a test
may hand requests to an application in-process)."""
ADD_BATCH = 1000
"""Documents sent per request by :meth:`Client.add` at most (fewer where the server's ``--max-batch`` is lower)."""
PAGE_SIZE = 100
"""Documents per page of :meth:`Client.iter_documents` at most (fewer where the server's ``--max-batch`` is lower)."""


class ServerError(SemiretError):
    """The server answered with an error: ``status`` (404: no such index, alias, document or backup; 409: a name
    taken; 422: a bad request; 401/403: the key) and ``detail``, its words."""

    def __init__(self, status: int, detail: Any, added: int = 0):
        self.status, self.detail = status, detail
        self.added = added
        """Documents an :meth:`Client.add` of several requests had added (durably) before this one failed."""
        super().__init__(f"{status}: {detail}")


@dataclass(frozen=True)
class ServedHit(Hit):
    """A hit from the server: its stored document is the one the answer carried (``with_text``), ``highlights``
    the passages the server marked (``highlight``), and ``context`` its text with the passages around it
    (``context``)."""

    highlights: list[str] | None = None
    context: str | None = None
    explanation: Explanation | None = None
    """With ``explain``: how the hit's score adds up, as ``Retriever.explain`` gives it."""


@dataclass
class ServedSearchHits(SearchHits):
    """A batch's hits from the server, as ``Retriever.search`` gives them for a list of queries (``ids``, ``scores``,
    ``groups``; ``hits[i]``: query ``i``'s hits), each hit carrying what the answer carried (:class:`ServedHit`)."""

    served: list[list[ServedHit]] = field(default_factory=list, repr=False, compare=False)

    def __getitem__(self, query: int) -> list[ServedHit]:
        super().__getitem__(query)  # the same checks
        return list(self.served[query])

    @classmethod
    def of(cls, rankings: list[list[ServedHit]], grouped: bool, diversified: bool = False) -> "ServedSearchHits":
        return cls([[h.id for h in hits] for hits in rankings], [[h.score for h in hits] for hits in rankings],
                   groups=[[h.group for h in hits] for hits in rankings] if grouped else None, served=rankings,
                   diversified=diversified)


class Client:
    """The HTTP API of one server at ``url``; ``api_key`` for writes (and for reads off loopback)."""

    def __init__(self, url: str = "http://127.0.0.1:8000", api_key: str | None = None, timeout: float = 60.0,
                 transport: Transport | None = None, ssl_context: ssl.SSLContext | None = None):
        """``ssl_context``: for an ``https`` URL, how to trust the server (default: the system's certificate
        authorities; ``ssl.create_default_context(cafile="cert.pem")`` for a certificate of one's own)."""
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise SemiretError(f"a server's URL is http://HOST[:PORT] or https://..., not {url!r}")
        self.url, self.timeout = url.rstrip("/"), timeout
        self._base = parsed.path.rstrip("/")
        self._headers = {"content-type": "application/json", **({"x-api-key": api_key} if api_key else {})}
        self._transport = transport or self._http
        self._local = threading.local()
        self._parsed, self._ssl_context = parsed, ssl_context
        self._about: dict | None = None
        self._said: set[str] = set()  # the server's warnings logged already (each once: a search repeated repeats it)

    # ------------------------------------------------------------------ indexes and aliases
    def indexes(self) -> list[dict]:
        """What ``GET /indexes`` describes of each served index (name, retriever, documents, ...)."""
        return self._call("GET", "/indexes")["indexes"]

    def describe(self, index: str) -> dict:
        return self._call("GET", f"/indexes/{_name(index)}")

    def create_index(self, index: str, retriever: str = "bm25", options: dict | None = None,
                     chunk_words: int | None = None, chunk_overlap: int = 0, chunk_tokens: int | None = None,
                     chunk_sentences: bool = False, chunk_tokenizer: str | None = None,
                     metadata_fields: list[str] | None = None, id_field: str | None = None,
                     text_field: str | None = None) -> dict:
        """An empty index in the server's ``--data-dir`` (``options``: the retriever's index options; ``chunk_*``:
        its passages, as ``semiret index --chunk-*`` gives them; ``chunk_tokenizer``: a model the server has
        installed; ``metadata_fields``, ``id_field``, ``text_field``: how the documents added are read, as
        ``Retriever.build`` takes them)."""
        body = {"retriever": retriever, "options": options or {}, "chunk_overlap": chunk_overlap,
                **_given(chunk_words=chunk_words, chunk_tokens=chunk_tokens, chunk_tokenizer=chunk_tokenizer,
                         metadata_fields=metadata_fields, id_field=id_field, text_field=text_field),
                **({"chunk_sentences": True} if chunk_sentences else {})}
        return self._call("PUT", f"/indexes/{_name(index)}", body)

    def restore_index(self, index: str, backup: str) -> dict:
        """A new index ``index``, a copy of the server's backup ``backup`` (as :meth:`backups` names it)."""
        return self._call("PUT", f"/indexes/{_name(index)}", {"from_backup": backup})

    def delete_index(self, index: str) -> None:
        self._call("DELETE", f"/indexes/{_name(index)}")

    def merge(self, index: str) -> dict:
        return self._call("POST", f"/indexes/{_name(index)}/merge")

    def synonyms(self, index: str) -> list[str]:
        """The index's synonym rules as they were set."""
        return self._call("GET", f"/indexes/{_name(index)}/synonyms")["rules"]

    def set_synonyms(self, index: str, rules: list[str] | None) -> int:
        """Replace the index's synonym rules (Solr's format, one a line; None or ``[]``: none, as ``Retriever.
        set_synonyms``); returns how many are set."""
        if not rules:
            return self._call("DELETE", f"/indexes/{_name(index)}/synonyms")["synonym_rules"]
        return self._call("PUT", f"/indexes/{_name(index)}/synonyms", {"rules": list(rules)})["synonym_rules"]

    def backup(self, index: str) -> dict:
        """A backup of the index in the server's ``--backup-dir``: its ``name``, ``created`` and ``documents``."""
        return self._call("POST", f"/indexes/{_name(index)}/backups")

    def backups(self, index: str) -> list[dict]:
        return self._call("GET", f"/indexes/{_name(index)}/backups")["backups"]

    def aliases(self) -> dict[str, str]:
        """Each alias and the index it stands for."""
        return {each["alias"]: each["index"] for each in self._call("GET", "/aliases")["aliases"]}

    def set_alias(self, alias: str, index: str) -> str | None:
        """Point ``alias`` at ``index``; returns the index it stood for before, if any."""
        return self._call("PUT", f"/aliases/{_name(alias)}", {"index": index}).get("previous")

    def remove_alias(self, alias: str) -> None:
        self._call("DELETE", f"/aliases/{_name(alias)}")

    # ------------------------------------------------------------------ search
    def about(self) -> dict:
        """The server's version, whether it takes writes, and its ``limits`` (``max_batch``, ``max_k``,
        ``max_request_bytes``); asked once."""
        if self._about is None:
            self._about = self._call("GET", "/")
        return self._about

    def _max_batch(self, most: int) -> int:
        """``most``, or the server's ``--max-batch`` where that is lower (``most`` from a server that does not say)."""
        return min(most, self._limit("max_batch", most))

    def _limit(self, name: str, default: int) -> int:
        """One of the server's ``limits`` (``default`` from a server that does not say)."""
        try:
            return self.about()["limits"].get(name, default)
        except ServerError as error:
            if error.status != 404:  # (a server older than GET /)
                raise
            return default

    def _batches(self, sizes: list[int], batch_size: int) -> Iterator[tuple[int, int]]:
        """``(start, end)`` of each request's documents (of these ``sizes`` in JSON): at most ``batch_size``, and a
        body within the server's ``--max-request-bytes``, so that a call the server would take whole in smaller
        requests is not refused half-way; a document alone over it is refused before the first is sent."""
        most_bytes = self._limit("max_request_bytes", 0)
        empty = len('{"documents": []}')
        too_large = next((position for position, size in enumerate(sizes) if most_bytes and empty + size > most_bytes),
                         None)
        if too_large is not None:
            raise SemiretError(f"document {too_large} is {sizes[too_large]:,} bytes as JSON, over the server's "
                               f"--max-request-bytes ({most_bytes:,}): it would be refused (nothing was sent)")
        start = 0
        while start < len(sizes):
            end, size = start, empty
            while end < len(sizes) and end - start < batch_size:
                size += sizes[end] + 2 * (end > start)  # ", " between documents
                if most_bytes and size > most_bytes and end > start:
                    break
                end += 1
            yield start, end
            start = end

    def search(self, index: str, queries: str | list[str], k: int | None = None, filter: dict | None = None,
               offset: int = 0, with_text: bool = False, group_by: str | None = None, group_size: int = 1,
               score_threshold: float | None = None, highlight: bool | dict = False, diversity: float | None = None,
               candidates: int | None = None, context: int | None = None, explain: bool = False,
               boost: dict | list[dict] | None = None, operators: bool = False, rerank: bool | int = False,
               with_fields: list[str] | None = None, **options) -> list[ServedHit] | ServedSearchHits:
        """Hits of one query (a string: a list of hits) or of each of several (a list: :class:`ServedSearchHits`),
        best first, as ``Retriever.search``; queries may be vectors, as there (an array, a list of numbers or of
        lists of them), over a dense index; or ``{term: weight}`` over sparse vectors; or over token vectors
        (multivectors) a list of queries' matrices (one query: ``[matrix]``, a batch of one); ``options``: the retriever's search options (``two_phase="on"``, ...).
        ``highlight``: each hit's ``highlights``, as ``Retriever.highlight``'s keyword arguments say when a dict
        (``{"encoder": "html"}``). ``diversity``, ``boost``, ``candidates``: hits picked by maximal marginal
        relevance, scores boosted by the documents' metadata, as ``Retriever.search``'s. ``context``: each hit's ``context``, as ``Retriever.context`` gives it; ``explain``:
        its ``explanation``, as ``Retriever.explain``; ``operators``: the queries' ``"phrases"``, ``+word`` and
        ``-word`` read as a search box's; ``rerank``: the best hits (100, or this many) ranked again by the server's
        cross-encoder (or late-interaction model; a learned ranking ranks as deep as it was trained: ``True``);
        ``with_fields``: only these of each hit's stored document (``title``, ``text``, ``metadata``,
        ``metadata.FIELD``). ``k``: hits per query (default: the server's, 10 or its ``--max-k`` if lower)."""
        searched, one = _searched(queries)
        body = self._search_body(searched, k, filter, offset, with_text, group_by, group_size, score_threshold,
                                 highlight, diversity, candidates, context, explain, boost, operators, rerank,
                                 with_fields, **options)
        results = [_hits(hits) for hits in self._call("POST", f"/indexes/{_name(index)}/search", body)["results"]]
        return results[0] if one else ServedSearchHits.of(results, group_by is not None, diversity is not None)

    @staticmethod
    def _search_body(searched: dict, k: int | None = None, filter: dict | None = None, offset: int = 0,
                     with_text: bool = False, group_by: str | None = None, group_size: int = 1,
                     score_threshold: float | None = None, highlight: bool | dict = False,
                     diversity: float | None = None, candidates: int | None = None, context: int | None = None,
                     explain: bool = False, boost: dict | list[dict] | None = None, operators: bool = False,
                     rerank: bool | int = False, with_fields: list[str] | None = None, **options) -> dict:
        """The body of ``POST .../search`` that :meth:`search`'s arguments ask for (``searched``: its queries or
        vectors, :func:`_searched`)."""
        return {**searched, "offset": offset, "with_text": with_text,
                "group_size": group_size, "highlight": highlight, "options": options,
                **_given(k=k, filter=filter, group_by=group_by, score_threshold=score_threshold, diversity=diversity,
                         candidates=candidates, context=context, boost=boost, with_fields=with_fields),
                **({"explain": True} if explain else {}), **({"operators": True} if operators else {}),
                **({"rerank": {"depth": rerank} if rerank is not True else True} if rerank else {})}

    def search_batch(self, index: str, searches: list[dict]) -> list[ServedSearchHits]:
        """Several searches in one request, each a dict of :meth:`search`'s arguments (``{"queries": ..., "k": 5,
        "filter": ...}``; ``queries`` a text, a list of them, or vectors), answered in order, each as the hits of its
        queries (:class:`ServedSearchHits`)."""
        bodies, groupings = [], []
        for number, asked in enumerate(searches):
            asked = dict(asked)
            if "queries" not in asked:
                raise SemiretError(f"search {number} of the batch names no queries")
            queries, options = asked.pop("queries"), asked.pop("options", {})
            bodies.append(self._search_body(_searched(queries)[0], **asked, **options))
            groupings.append((asked.get("group_by") is not None, asked.get("diversity") is not None))
        answers = self._call("POST", f"/indexes/{_name(index)}/search/batch", {"searches": bodies})["searches"]
        for answer in answers:
            self._say_warnings(answer)
        return [ServedSearchHits.of([_hits(hits) for hits in answer["results"]], *grouping)
                for answer, grouping in zip(answers, groupings)]

    def recommend(self, index: str, positive: list[str], negative: list[str] = (), k: int | None = None,
                  filter: dict | None = None, with_text: bool = False, score_threshold: float | None = None
                  ) -> list[ServedHit]:
        """Documents like the ``positive`` ones (ids) and unlike the ``negative`` ones."""
        body = {"positive": list(positive), "negative": list(negative), "with_text": with_text,
                **_given(k=k, filter=filter, score_threshold=score_threshold)}
        return _hits(self._call("POST", f"/indexes/{_name(index)}/recommend", body)["results"][0])

    def explain(self, index: str, query: "str | dict[str, float]", doc_id: str, filter: dict | None = None,
                operators: bool = False, **options) -> Explanation:
        """How the document's score for the query adds up, term by term, read as a search with ``filter`` and
        ``operators`` reads it, and whether that search finds the document (``Retriever.explain``); ``query`` a
        text, or over an index of sparse vectors a sparse query vector ``{term: weight}``."""
        vectors = query_vectors(query) if not isinstance(query, str) else None
        if vectors is not None and (not vectors[1] or not isinstance(vectors[0][0], dict)):
            raise SemiretError("explain reads one query text or one sparse query vector ({term: weight})")
        asked = {"query": query} if vectors is None else {"vector": _json_vector(vectors[0][0])}
        body = {**asked, "id": doc_id, "options": options, **_given(filter=filter),
                **({"operators": True} if operators else {})}
        return _explanation(self._call("POST", f"/indexes/{_name(index)}/explain", body))

    def analyze(self, index: str, text: str | None = None, side: str = "query", doc_id: str | None = None,
                limit: int | None = None, **options) -> list[TermWeight]:
        """The terms ``text`` becomes as a query or a document (``side``), or those of the stored document
        ``doc_id``, heaviest first (as :meth:`Retriever.analyze <semiret.search.retrievers.Retriever.analyze>`);
        the heaviest ``limit`` (None or 0: all)."""
        body = {"options": options, **_given(text=text, id=doc_id, limit=limit)}
        if doc_id is None or side != "query":
            body["side"] = side
        found = self._call("POST", f"/indexes/{_name(index)}/analyze", body)
        return [TermWeight(**term) for term in found["terms"]]

    def suggest(self, index: str, text: str, k: int | None = None, filter: dict | None = None) -> list[Suggestion]:
        """Completions of the word ``text`` ends with (as :meth:`Retriever.suggest
        <semiret.search.retrievers.Retriever.suggest>`)."""
        found = self._call("POST", f"/indexes/{_name(index)}/suggest", {"text": text, **_given(k=k, filter=filter)})
        return [Suggestion(**each) for each in found["suggestions"]]

    # ------------------------------------------------------------------ documents
    def add(self, index: str, documents: Iterable[Document | dict], batch_size: int | None = None) -> int:
        """Add documents, replacing those of the same ids (the API's ``PUT`` is an upsert, where ``Retriever.add``
        refuses them without ``replace=True``); returns how many documents were added, as many as were sent (over an
        index of passages, ``chunk_words``, the documents too, not the passages ``Retriever.add`` counts: the
        answers' ``passages``). Documents are :class:`Document` objects or records
        (``{"_id", "text", "title", "metadata"}``) read as the index reads them (its ``metadata_fields``, ``id_field``
        and ``text_field``, asked of the server first), every one checked before the first is sent (its fields, its id,
        NaN or Infinity, its size, and ids repeated within the call, as the server checks a request), so a bad
        document changes nothing. More than
        ``batch_size`` (default: :data:`ADD_BATCH`, or the server's ``--max-batch`` if lower), or more than its
        ``--max-request-bytes`` take, go in several requests,
        each durable once answered: one the server refuses after others were answered raises :class:`ServerError`
        saying how many were added (its ``added``)."""
        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int)
                                       or batch_size < 1):
            raise SemiretError(f"batch_size is a positive number of documents a request, got {batch_size!r}")
        fields = CorpusFields.of(self.describe(index))  # (held in memory: every one checked before the first is sent)
        read = list(as_documents(documents, fields, f"index {index!r}", ADDED_FIELDS_HINT))
        records = [_request_record(document, fields) for document in read]
        first: dict[str, int] = {}
        sizes = []  # each record's bytes in a request's JSON (ASCII: this client escapes the rest)
        for position, (document, record) in enumerate(zip(read, records)):
            problem = document_id_problem(document.id)
            if problem is not None:
                raise SemiretError(f"document {position}: {problem} (nothing was sent)")
            if first.setdefault(document.id, position) != position:
                raise SemiretError(f"document {position}: id {document.id!r} repeats document {first[document.id]}"
                                   " of this call (nothing was sent)")
            sizes.append(len(json.dumps(record)))  # (NaN and Infinity refused already, by as_documents)
        added = 0
        for start, end in self._batches(sizes, batch_size or self._max_batch(ADD_BATCH)):
            try:
                added += self._call("PUT", f"/indexes/{_name(index)}/documents",
                                    {"documents": records[start: end]})["upserted"]
            except ServerError as error:
                if not added:
                    raise
                raise ServerError(error.status, f"documents 0 to {start - 1} were added; from document {start} "
                                  f"(the request of documents {start} to {end - 1}) none were: {error.detail}",
                                  added) from None
        return added

    def delete(self, index: str, ids: list[str] | None = None, filter: dict | None = None) -> int:
        """Delete documents by id, or those the filter passes; returns how many documents (by id: the ids the index
        held; over an index of passages, the documents, not their passages)."""
        body = _given(ids=list(ids) if ids is not None else None, filter=filter)
        return self._call("POST", f"/indexes/{_name(index)}/documents/delete", body)["deleted"]

    def set_metadata(self, index: str, metadata: dict, ids: list[str] | None = None, filter: dict | None = None,
                     overwrite: bool = False) -> int:
        """Set ``metadata``'s fields on the documents of ``ids`` or passing ``filter`` (``overwrite``: replace their
        metadata), none encoded again; returns how many changed."""
        body = {"metadata": metadata, "overwrite": overwrite,
                **_given(ids=list(ids) if ids is not None else None, filter=filter)}
        return self._call("POST", f"/indexes/{_name(index)}/documents/metadata", body)["updated"]

    def get_document(self, index: str, doc_id: str) -> Document | None:
        """The stored document, or None when the index has none of that id (``Retriever.get_document``)."""
        try:
            record = self._call("GET", f"/indexes/{_name(index)}/documents/{urllib.parse.quote(doc_id, safe='')}")
        except ServerError as error:
            if error.status == 404 and str(error.detail).startswith("no document "):
                return None
            raise
        return _document(record)

    def get_documents(self, index: str, doc_ids: Iterable[str]) -> dict[str, Document]:
        """The stored documents of those ids the index holds, by id (``Retriever.get_documents``), in requests of at
        most :data:`ADD_BATCH` ids (fewer where the server's ``--max-batch`` is lower)."""
        if isinstance(doc_ids, str):
            raise SemiretError(f"get_documents takes a list of ids, got the string {doc_ids!r} (one id: "
                               "get_document)")
        wanted, found = list(dict.fromkeys(doc_ids)), {}
        step = self._max_batch(ADD_BATCH)
        for start in range(0, len(wanted), step):
            try:
                answer = self._call("POST", f"/indexes/{_name(index)}/documents/retrieve",
                                    {"ids": wanted[start: start + step]})
            except ServerError as error:
                if error.status != 405 and not (error.status == 404 and error.detail == "Not Found"):
                    raise
                # (a server older than documents/retrieve, whose GET documents/{id} route takes no POST: one each)
                read = ((doc_id, self.get_document(index, doc_id)) for doc_id in wanted[start:])
                return {**found, **{doc_id: document for doc_id, document in read if document is not None}}
            found.update((record["_id"], _document(record)) for record in answer["documents"])
        return found

    def count(self, index: str, filter: dict | None = None, query: str | None = None) -> int:
        """The documents passing ``filter`` (that ``query`` matches too), as ``Retriever.count``."""
        return self._call("POST", f"/indexes/{_name(index)}/documents/count",
                          _given(filter=filter, query=query))["count"]

    def scroll(self, index: str, filter: dict | None = None, limit: int = 100, offset: str | None = None,
               order_by: str | dict | None = None) -> DocumentPage:
        """One page of the documents in id order (or ``order_by``'s, as ``Retriever.scroll``), from ``offset`` on
        (Qdrant's scroll)."""
        page = self._call("POST", f"/indexes/{_name(index)}/documents/scroll",
                          {"limit": limit, **_given(filter=filter, offset=offset, order_by=order_by)})
        documents = [_document(record) for record in page["documents"]]
        return DocumentPage([d.id for d in documents], documents, page["next_page_offset"])

    def iter_documents(self, index: str, filter: dict | None = None, page_size: int | None = None
                       ) -> Iterator[Document]:
        """Every stored document (those the filter passes), in id order, a page at a time (``page_size``: default
        :data:`PAGE_SIZE`, or the server's ``--max-batch`` if lower)."""
        page_size = page_size or self._max_batch(PAGE_SIZE)
        offset = None
        while True:
            page = self.scroll(index, filter, page_size, offset)
            yield from page.documents
            if page.next_offset is None:
                return
            offset = page.next_offset

    def facet(self, index: str, field: str, filter: dict | None = None, limit: int = 10,
              ranges: list[dict] | None = None, query=None, depth: int | None = None, operators: bool = False,
              **options) -> list[tuple[Any, int]]:
        """The values of a metadata field the most documents hold, with their counts (``ranges``: how many have a
        value in each range instead; ``query``, a text or a vector: among its best ``depth`` hits, searched with
        ``operators`` and the search ``options``; as ``Retriever.facet``; a matrix: one query's token vectors, over
        an index of the multivectors retriever)."""
        vectors = query_vectors(query, token_vectors=None) if query is not None else None
        if vectors is not None and not vectors[1]:  # a matrix: the one query's token vectors (a facet reads one)
            try:
                vectors = query_vectors(query, token_vectors=True) if vectors[0][0].ndim == 1 else vectors
            except SemiretError:  # (a list of flat vectors: several queries)
                vectors = None, False
            if not vectors[1]:
                raise SemiretError("a facet counts the hits of one query: give one vector (or one matrix of token "
                                   "vectors, over an index of the multivectors retriever), not a list of them")
        asked = ({} if query is None else {"query": query} if vectors is None
                 else {"vector": _json_vector(vectors[0][0])})
        found = self._call("POST", f"/indexes/{_name(index)}/facet",
                           {"field": field, "limit": limit, **asked,
                            **_given(filter=filter, ranges=ranges, depth=depth),
                            **({"operators": True} if operators else {}), **({"options": options} if options else {})})
        return [(each["value"], each["count"]) for each in found["values"]]

    # ------------------------------------------------------------------ health
    def ready(self) -> bool:
        """Whether ``/readyz`` answers 200 (every index opens, the writer process runs)."""
        try:
            self._call("GET", "/readyz")
        except (ServerError, OSError):  # (no server listening: the connection refused)
            return False
        return True

    def metrics(self) -> str:
        """``/metrics``, Prometheus's text."""
        return self._request("GET", "/metrics", None).decode()

    def close(self) -> None:
        """Close this thread's connection (a server shutting down gracefully waits for open ones)."""
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            connection.close()
            self._local.connection = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ requests
    def _call(self, method: str, path: str, body: dict | None = None) -> dict:
        """The server's JSON answer, its ``warnings`` logged (a filter's field no document holds, say)."""
        answer = self._request(method, path, body)
        try:
            return self._say_warnings(json.loads(answer))
        except ValueError:
            raise ServerError(200, f"an answer that is not JSON (not a semiret server?): {answer[:200]!r}") from None

    def _say_warnings(self, answer):
        """``answer``, the ``warnings`` it carries told to the caller (:func:`~semiret.errors.told_warnings`) each
        time and logged once by this client, as in-process calls log a filter's."""
        for message in answer.get("warnings") or () if isinstance(answer, dict) else ():
            warn_once(log, message, self._said)
        return answer

    def _request(self, method: str, path: str, body: dict | None) -> bytes:
        data = json.dumps(body).encode() if body is not None else None
        status, answer = self._transport(method, self._base + path, data, self._headers)
        if not 200 <= status < 300:  # an error, or a redirect (a proxy's to https, say) this client does not follow
            try:
                detail = json.loads(answer).get("detail", answer.decode(errors="replace"))
            except (ValueError, AttributeError):
                detail = answer.decode(errors="replace")
            raise ServerError(status, detail)
        return answer

    def _http(self, method: str, path: str, body: bytes | None, headers: dict) -> tuple[int, bytes]:
        """One request over this thread's kept-alive connection: a connection that failed is dropped (the next
        request opens another); one the server closed while idle is tried once more on a new one. A request that may
        not be repeated (the server may have acted on it) goes on a new connection, once."""
        if not _repeatable(method, path[len(self._base):]):
            self.close()  # sent once, on a connection of its own: never on one the server may have closed meanwhile
            return self._send(method, path, body, headers)
        try:
            return self._send(method, path, body, headers)
        except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
            return self._send(method, path, body, headers)  # (_send dropped the closed connection)

    def _send(self, method: str, path: str, body: bytes | None, headers: dict) -> tuple[int, bytes]:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            if self._parsed.scheme == "https":
                connection = http.client.HTTPSConnection(self._parsed.hostname, self._parsed.port,
                                                         timeout=self.timeout, context=self._ssl_context)
            else:
                connection = http.client.HTTPConnection(self._parsed.hostname, self._parsed.port, timeout=self.timeout)
            self._local.connection = connection
        try:
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            return response.status, response.read()
        except BaseException:
            self.close()
            raise


def _repeatable(method: str, path: str) -> bool:
    """Whether sending a request twice does what sending it once does and answers the same: all of this API's but
    creating an index (a second create answers 409), taking a backup (a second one is another backup), deletes (a
    second answers that it deleted nothing, or 404) and setting an alias (a second answers the new target as the
    previous one)."""
    path = path.rstrip("/")
    creates = method == "PUT" and path.count("/") == 2 and path.startswith(("/indexes/", "/aliases/"))
    deletes = method == "DELETE" or (method == "POST" and path.endswith("/documents/delete"))
    return not (creates or deletes or (method == "POST" and path.endswith("/backups")))


def _name(name: str) -> str:
    """An index's or alias's name as a path segment."""
    return urllib.parse.quote(name, safe="")


def _searched(queries) -> tuple[dict, bool]:
    """A search's queries as its request gives them (``{"queries": [...]}`` or ``{"vectors": [...]}``), read as
    ``Retriever.search`` reads them, and whether one was given alone. Token vectors (an index of the multivectors
    retriever) are a batch, a list of matrices or a 3-D array: one matrix alone reads as a batch of dense vectors, as
    the client knows not the index (give ``[matrix]``)."""
    vectors = query_vectors(queries, token_vectors=None)
    if vectors is None:
        return {"queries": query_texts(queries)}, isinstance(queries, str)
    return {"vectors": [_json_vector(vector) for vector in vectors[0]]}, vectors[1]


def _json_vector(vector) -> list[float] | list[list[float]] | dict[str, float]:
    """A vector as JSON gives it: a dense one's list of numbers, token vectors' list of lists, a sparse one's object
    ``{term: weight}``."""
    return vector if isinstance(vector, dict) else vector.tolist()


def _request_record(document: Document, fields: CorpusFields) -> dict:
    """A document as an upsert request sends it: its record, its id and text under the names the index reads
    (``fields``, which never name one field for both), and its own vector where it brings one."""
    record = document.to_record()
    doc_id, text = record.pop("_id"), record.pop("text")
    record |= {fields.id_field or "_id": doc_id, fields.text_field or "text": text}
    if document.vector is not None:
        record[VECTOR_FIELD] = _json_vector(document.vector)
    return record


def _given(**fields) -> dict:
    """The fields that are not None (the server's defaults stand for the others)."""
    return {name: value for name, value in fields.items() if value is not None}


def _document(record: dict) -> Document:
    """A stored document as the server writes one (``_id`` or a hit's ``id``; title and metadata may be null)."""
    return Document(record.get("_id", record.get("id")), record.get("text") or "", record.get("title") or "",
                    record.get("metadata") or None)


def _explanation(found: dict) -> Explanation:
    """An explanation as the API answers it (``POST .../explain``, a hit's ``explanation``)."""
    return Explanation(found["id"], found["score"], [TermContribution(**term) for term in found["terms"]],
                       found.get("boost_factor"), found.get("unmatched"))


def _hits(rows: list[dict]) -> list[ServedHit]:
    """A ranking's rows as hits; with ``with_text`` (or ``with_fields``), each carries its stored document (as much of
    it as was asked for)."""
    hits = []
    for row in rows:
        document = _document(row) if row.keys() & {"title", "text", "metadata"} else None
        hits.append(ServedHit(row["id"], row["score"], (lambda _, kept=document: kept) if document else None,
                              row.get("group"), row.get("highlights"), row.get("context"),
                              _explanation(row["explanation"]) if row.get("explanation") else None))
    return hits


class AsyncClient:
    """:class:`Client`'s methods as coroutines, for an asyncio application (a FastAPI or aiohttp RAG service):
    ``await client.search("docs", "statins")``; ``async for document in client.iter_documents("docs")``. Each call
    runs in one of ``max_connections`` threads of its own, each with its kept-alive connection (a :class:`Client`'s
    connections are per thread), so the event loop never waits on the network and calls made at once run at once.
    Takes :class:`Client`'s arguments; ``await client.close()`` (or ``async with``) ends the threads."""

    def __init__(self, url: str = "http://127.0.0.1:8000", api_key: str | None = None, timeout: float = 60.0,
                 transport: Transport | None = None, ssl_context: ssl.SSLContext | None = None,
                 max_connections: int = 8):
        if isinstance(max_connections, bool) or not isinstance(max_connections, int) or max_connections < 1:
            raise SemiretError(f"max_connections must be a whole number, at least 1, got {max_connections!r}")
        self.sync = Client(url, api_key, timeout, transport, ssl_context)
        """The synchronous client whose methods these are."""
        self._threads = ThreadPoolExecutor(max_connections, thread_name_prefix="semiret-client")

    def __getattr__(self, name: str):
        method = getattr(Client, name, None)
        if name.startswith("_") or not callable(method) or name in ("close", "__enter__", "__exit__"):
            raise AttributeError(f"AsyncClient has no method {name!r} (Client's public methods, awaited)")
        bound = getattr(self.sync, name)
        if inspect.isgeneratorfunction(method):
            @functools.wraps(method)
            async def iterate(*args, **kwargs):
                items = await self._run(bound, *args, **kwargs)
                while (item := await self._run(next, items, _EXHAUSTED)) is not _EXHAUSTED:
                    yield item
            return iterate

        @functools.wraps(method)
        async def call(*args, **kwargs):
            return await self._run(bound, *args, **kwargs)
        return call

    async def _run(self, function, *args, **kwargs):
        return await asyncio.get_running_loop().run_in_executor(self._threads,
                                                                functools.partial(function, *args, **kwargs))

    async def close(self) -> None:
        """End the client's threads, and with them their connections."""
        await asyncio.get_running_loop().run_in_executor(None, self._threads.shutdown)

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


_EXHAUSTED = object()
"""What ``next`` gives an :class:`AsyncClient`'s iteration when its iterator ends."""
