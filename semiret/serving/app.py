"""The HTTP API of ``semiret serve`` (FastAPI), in the shape of vector databases' collections and points:

=========================================  =========================================================
``GET /indexes``                           the served indexes, described
``GET /indexes/{name}``                    one index: retriever, analyzer, counts, size, its search options
                                           (a hybrid's: each part's, ``parts``, with its retriever and analyzer),
                                           what ``"rerank"`` ranks its hits by (``rerank``)
``PUT /indexes/{name}``                    ``{"retriever", "options", "chunk_words" (or "chunk_tokens"),
                                           "chunk_overlap", "chunk_sentences"}``: create an
                                           empty index in ``--data-dir`` (``DELETE``: delete one made there)
``POST /indexes/{name}/search``            ``{"queries": [...] (or "vectors": [[...]]), "k": 10, "offset", "filter", "group_by",
                                           "group_size", "score_threshold", "highlight" (true, or
                                           ``{"fragment_words", "fragments", "tags", "encoder"}``), "diversity",
                                           "boost", "candidates", "context", "explain", "operators", "rerank"
                                           (true, or ``{"depth"}``), "with_text" (or "with_fields": [...]),
                                           "options"}`` ->
                                           ``{"results": [[{"id", "score"}, ...], ...]}``
``GET /indexes/{name}/search?q=..&k=..``   the same for quick use (``q`` may repeat)
``POST /indexes/{name}/search/batch``      ``{"searches": [search, ...]}``, each a body as above with settings of its own
                                           -> ``{"searches": [{"results": ...}, ...]}``, in order
``POST /indexes/{name}/suggest``           ``{"text", "k", "filter"}`` -> completions of the word being typed
``POST /indexes/{name}/recommend``         ``{"positive": [ids], "negative": [ids], "k", "filter",
                                           "score_threshold", "with_text", "options"}`` -> documents like
                                           some of the index's (one list)
``POST /indexes/{name}/explain``           ``{"query" (or "vector"), "id", "filter", "operators", "options"}``
                                           -> how the document's score adds up, term by term, for the query (a
                                           sparse vector: ``{term: weight}``) as a search with that filter and
                                           operators reads it, and whether that search finds it (``{"id",
                                           "score", "matched", "unmatched", "terms"}``)
``POST /indexes/{name}/analyze``           ``{"text", "side", "limit", "options"}`` or ``{"id"}`` -> the terms a
                                           text becomes (as a query or a document), or a stored document's
                                           (``{"terms": [{"term", "weight", "document_frequency"}], "total"}``)
``PUT /indexes/{name}/documents``          upsert ``{"documents": [{"_id", "title", "text"}]}``, or a
                                           JSONL body (``application/x-ndjson``), streamed
``POST /indexes/{name}/documents/delete``  ``{"ids": [...]}``, or ``{"filter": {...}}``
``POST /indexes/{name}/documents/scroll``  ``{"filter", "limit", "offset", "order_by"}`` -> a page of documents in id
                                           order (or a field's) and ``next_page_offset``
``POST /indexes/{name}/documents/metadata`` set stored metadata fields of documents given by id or by filter
``POST /indexes/{name}/documents/count``   ``{"filter", "query"}`` -> ``{"count": N}``
``POST /indexes/{name}/facet``             ``{"field", "filter", "limit", "ranges", "query" (or "vector"), "depth"}`` -> the values the most documents
                                           hold (or how many in each range)
``GET /indexes/{name}/documents/{id}``     a stored document (``DELETE``: delete it)
``POST /indexes/{name}/documents/retrieve`` ``{"ids": [...]}`` -> ``{"documents", "missing"}``: many at once
``GET/PUT/DELETE /indexes/{name}/synonyms`` the index's synonym rules
``POST /indexes/{name}/merge``             fold the segments (into one each buffer), drop deleted documents
``POST /indexes/{name}/backups``           a backup in ``--backup-dir`` (``GET``: those taken, oldest first);
                                           ``PUT /indexes/{name}`` ``{"from_backup": NAME}`` restores one
``PUT /aliases/{alias}``                   ``{"index"}``: a name standing for an index (``DELETE``; ``GET
                                           /aliases`` lists them)
``GET /``                                   the version and the server's limits
``GET /healthz``, ``GET /readyz``          liveness; readiness (every index opens)
``GET /metrics``                           Prometheus's text: requests, durations, queries, index figures
=========================================  =========================================================

A write is answered only once it is durable (``"status": "acknowledged"``); a request that fails changes
nothing. Errors: 401 missing or wrong API key (``X-API-Key`` or ``Authorization: Bearer``), 403 a write to a
server started without a key (read-only), or what needs ``--data-dir`` or ``--backup-dir`` without it, 404 unknown
index, alias, document or backup, 409 a name taken (by an index or an alias), 413 a body over
``--max-request-bytes`` or a batch over ``--max-batch``, 415 an unknown body type, 422 malformed JSON, invalid
UTF-8, a wrong field or type (each naming where), a document without an id or a text (or title) field under
any name the corpus reader takes, an id repeated within one add (ids must
be unique within a request: which of two versions to keep would be a guess), an option the retriever does
not have, an option value of the wrong JSON type or naming a file or model of the server; 503 an index directory
that no longer opens, or a writer process that died and could not be started again.
"""

from __future__ import annotations

import errno
import gc
import hmac
import importlib.metadata
import json
import logging
import math
import re
import threading
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exception_handlers import http_exception_handler, request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.middleware.cors import CORSMiddleware
from fastapi.routing import APIRoute
from pydantic import TypeAdapter, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from semiret.data.chunking import Chunking
from semiret.data.collection import (ADDED_FIELDS_HINT, MAX_METADATA_DEPTH, VECTOR_KINDS, CorpusFields, Document,
                                     left_out_warning)
from semiret.errors import IndexFormatError, SemiretError, UnknownDocumentError, told_warnings, warn
from semiret.options import OptionValueError, check_json_values
from semiret.indexes.filters import Grouping, MetadataFilter, Ordering, check_filter_size, checked_ranges
from semiret.indexes.storage import META_FILE
from semiret.search.boosting import Boost
from semiret.search.candidates import candidate_depth
from semiret.search.learned_ranking import LearnedRanking
from semiret.search.rerank import Reranking
from semiret.search.retrievers import RETRIEVER_OF_KIND, open_index_at, open_retriever, retriever_class
from semiret.serving.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from semiret.serving.metrics import RequestMetrics, Telemetry
from semiret.serving.schemas import (
    AliasInfo,
    AliasList,
    AliasRequest,
    AnalyzeRequest,
    AnalyzeResponse,
    BackupInfo,
    BackupList,
    CountRequest,
    CountResponse,
    CreateIndexRequest,
    DeleteRequest,
    DocumentIn,
    ErrorDetail,
    ExplainRequest,
    ExplainResponse,
    FacetRequest,
    FacetResponse,
    HighlightOptions,
    IndexInfo,
    IndexList,
    MetadataRequest,
    RecommendRequest,
    ScrollRequest,
    ScrollResponse,
    SearchBatchRequest,
    SearchBatchResponse,
    SearchRequest,
    SearchResponse,
    RerankOptions,
    RetrieveRequest,
    RetrieveResponse,
    StoredDocument,
    SuggestRequest,
    SuggestResponse,
    SynonymRules,
    UpsertRequest,
    WriteResponse,
)
from semiret.serving.data_dir import (
    DataDirectory, IndexExists, IndexGone, UnknownAlias, check_model_options, check_name,
)
from semiret.serving.served import BACKUP_FOLDER, ServedIndex
from semiret.serving.writer import WriterProcess, WriterUnavailable
from semiret.serving.settings import ServeSettings, loopback_host_header

log = logging.getLogger(__name__)

INLINE_SEARCH_MS = 2.0
"""A search expected to take at most this long runs on the event loop itself; longer ones go to the thread
pool. Handing a sub-millisecond search to a pool thread and back costs two thread wake-ups and GIL hand-offs
that, on the 2-core reference machine, doubled a BM25 search's server time under load (p50 0.9 -> 0.55 ms, p99
4.2 -> 2.2 ms; docs/results.md), while blocking the loop for a millisecond or two delays other requests by no
more than that. Expected time: the index's recent time per query (:attr:`ServedIndex.query_ms`) times the
queries asked; queries longer than :data:`INLINE_QUERY_CHARS` in all always go to the pool (a query's cost grows
with its length, which the average does not know: one 400 KB query held the loop for 3 s)."""
INLINE_QUERY_CHARS = 2_000
"""The most characters, all queries of a search together, that may be searched on the event loop."""
GET_SEARCH_PARAMETERS = frozenset({"q", "k", "with_text"})
JSONL_TYPES = ("application/x-ndjson", "application/jsonl", "application/json-lines")
ERRORS = {401: "Missing or wrong API key.", 403: "A write to a server started without a key (read-only), or what "
               "needs --data-dir or --backup-dir without it.",
          404: "No such index (or alias, document or backup).", 409: "The name is taken (by an index or an alias).",
          413: "A body over --max-request-bytes, or a batch over --max-batch.",
          415: "A body of another type than JSON (or JSON lines for an add).",
          503: "The index directory no longer opens, or the writer process could not be started again."}
"""What each error status means, for the OpenAPI description of the routes that can answer it (422, a field named
by ``loc``, is FastAPI's own)."""


SECURITY_SCHEMES = {"ApiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
                    "Bearer": {"type": "http", "scheme": "bearer"}}
"""The two ways a request carries the key (``--api-key``, ``--read-api-key``), as the OpenAPI description states them."""


def _same(given: str, key: str | None) -> bool:
    """Whether a request's key is ``key``, compared in constant time."""
    return key is not None and hmac.compare_digest(given.encode(), key.encode())


ERROR_CONTENT = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorDetail"}}}
"""An error's body in a route's OpenAPI description: :class:`ErrorDetail`, by reference (a ``model`` in each route's
``responses`` had FastAPI build a pydantic field per route and status: half of making the app)."""


def _errors(*codes: int) -> dict:
    """The OpenAPI description of the error statuses a route answers (the schema referred to: :func:`create_app`'s
    description adds it)."""
    return {code: {"description": ERRORS[code], "content": ERROR_CONTENT} for code in codes}


DOCUMENT = TypeAdapter(DocumentIn)


class BodyTooLarge(HTTPException):
    """A request body grew past the limit while it was read (413)."""

    def __init__(self, max_bytes: int):
        super().__init__(413, f"request body over the limit of {max_bytes} bytes (--max-request-bytes)")


class BodyLimit:
    """ASGI middleware: a request body over ``max_bytes`` is answered 413, whether its ``Content-Length`` says
    so up front or a streamed (chunked) body grows past it while the endpoint reads it."""

    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            too_large = BodyTooLarge(self.max_bytes)
            return await JSONResponse({"detail": too_large.detail}, status_code=413)(scope, receive, send)
        received = 0

        async def limited_receive():
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        await self.app(scope, limited_receive, send)


class CheckedRoute(APIRoute):
    """A route whose JSON body must be valid UTF-8: a clear 422 (FastAPI alone answers 400 "There was an error
    parsing the body"); a body of another type than JSON is a 415 (FastAPI alone: 422 "Input should be a valid
    dictionary"), and so is a body sent without a type (``requests.put(url, data=...)``: FastAPI reads it as no
    JSON, a browser page may send one without asking first; Qdrant and OpenSearch refuse it too)."""

    def get_route_handler(self):
        handle = super().get_route_handler()
        takes_json = self.body_field is not None  # routes that read their body themselves check its type

        async def checked(request: Request):
            content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
            if takes_json and content_type not in ("", "application/json"):
                raise HTTPException(415, f"body type {content_type!r}: send application/json")
            if not content_type and await request.body():
                raise HTTPException(415, "a body without a content-type: send it as application/json")
            sends_body = takes_json or request.headers.get("content-length", "0") != "0" or (
                "transfer-encoding" in request.headers)  # (a probe's GET with the header alone: no key asked)
            if content_type == "application/json" and sends_body:
                # a request no key admits is refused before its body is read (every route taking one needs a key
                # to read at least, where reads need one): scanning megabytes cost seconds before the 401
                request.app.state.check_key(request, write=False)
                body = await request.body()  # kept by the request: the endpoint reads it again for free
                try:
                    text = body.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise validation_error(("body",), f"invalid UTF-8 at byte {exc.start}", "utf8_invalid") from None
                if len(text) > SCANNED_IN_THREAD:  # the event loop answers other requests meanwhile
                    await run_in_threadpool(check_json_text, text, ("body",))
                else:
                    check_json_text(text, ("body",))
            return await handle(request)

        return checked


STORAGE_ERRNOS = (errno.EIO, errno.EROFS, errno.EACCES, errno.EPERM, errno.EMFILE, errno.ENFILE)
"""What a disk or file system refuses a read or write with (besides a full disk): a JSON 500 naming it."""

SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
"""A JSON escape of a UTF-16 surrogate: paired, it is one character; alone, a string no file can store."""


LARGE_NUMBER = re.compile(r"\d[eE]\+?\d{3}|(?<!\d)\d{300}")
"""A number that may overflow a float (``1e400``): Python's parser reads it as infinity. A run of digits is tried
from its first only (from each of its digits, the search took seconds over a body of long runs)."""
SCANNED_IN_THREAD = 1 << 20
"""Characters of a JSON body above which :func:`check_json_text` runs in a worker thread, not on the event loop."""


class _NonFinite:
    """Where ``NaN``, ``Infinity`` or ``-Infinity`` stood in a JSON text (Python's parser takes them; JSON has no such
    number)."""

    def __init__(self, name: str):
        self.name = name


def check_json_text(text: str, loc: tuple) -> None:
    """Refuse what Python's JSON parser takes but no valid JSON holds, before anything reads it, naming where it
    stands: a lone surrogate (``"\\ud800"``: not a character, it cannot be written as UTF-8, so a write would fail
    half-way with a 500) and ``NaN``/``Infinity`` (stored as null, then matching no filter). The text is parsed again
    only when one of them may appear in it at all (paired surrogate escapes, emoji, are fine)."""
    if not (SURROGATE_ESCAPE.search(text) or "NaN" in text or "Infinity" in text or LARGE_NUMBER.search(text)):
        return
    try:
        found = _invalid_at(json.loads(text, parse_constant=_NonFinite, parse_float=_finite_float))
    except ValueError:  # (JSONDecodeError among them; an integer past Python's digits limit too)
        return  # malformed: the endpoint's own parsing says where
    except RecursionError:
        raise _too_deep(loc) from None
    if found is not None:
        place, problem = found
        place = tuple(part.encode("utf-8", "backslashreplace").decode() if isinstance(part, str) else part
                      for part in place)  # a key holding the surrogate, written so that the answer can hold it
        if isinstance(problem, _NonFinite):
            raise validation_error((*loc, *place), f"{problem.name} is not a finite number: send a finite number, "
                                   "or null", "finite_number")
        raise validation_error((*loc, *place), "a lone UTF-16 surrogate (an unpaired \\ud800-\\udfff escape): "
                               "not a character; send valid Unicode", "string_unicode")


def _too_deep(loc: tuple) -> RequestValidationError:
    return validation_error(loc, f"JSON nested too deeply to read (metadata may nest {MAX_METADATA_DEPTH} levels)",
                            "json_invalid")


def _finite_float(text: str):
    """A JSON number as a float, or where it overflows one (``1e400``), its :class:`_NonFinite`."""
    value = float(text)
    return value if math.isfinite(value) else _NonFinite(text)


def _invalid_at(value, place: tuple = ()) -> tuple[tuple, object] | None:
    """Where in parsed JSON a string (a key or a value) holds a lone surrogate, or a non-finite number stood, and
    which (the string, or its :class:`_NonFinite`); None if nowhere."""
    if isinstance(value, _NonFinite):
        return place, value
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return place, value
        return None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        if isinstance(key, str) and _invalid_at(key) is not None:
            return (*place, key), key
        found = _invalid_at(item, (*place, key))
        if found is not None:
            return found
    return None


def validation_error(loc: tuple, message: str, kind: str = "value_error") -> RequestValidationError:
    """A 422 in FastAPI's own shape, naming where the input is wrong."""
    return RequestValidationError([{"loc": loc, "msg": message, "type": kind}])


def check_vector_kinds(index: ServedIndex, vectors: list, where: tuple, one: bool = False) -> None:
    """A 422 at ``where`` (and the vector's place) for query ``vectors`` (as JSON gave them) of another kind than the
    index's retriever is searched by: none (texts only), dense (lists of numbers), sparse (objects) or token vectors
    (lists of lists, one a query)."""
    side = index.retriever.query_side
    if not side.searches_vectors:
        raise validation_error(where, f"index {index.name!r} is searched by query texts (retriever "
                               f"{index.retriever.name}): query vectors search a dense index, one of sparse vectors "
                               "or one of token vectors", where[-1] + "_invalid")
    for position, vector in enumerate(vectors):
        kind = "sparse" if isinstance(vector, dict) else "multi" if isinstance(vector[0], list) else "dense"
        if kind != side.vector_kind:
            raise validation_error(where if one else (*where, position), (
                f"index {index.name!r} (retriever {index.retriever.name}) is searched by query vectors "
                f"{VECTOR_KINDS[side.vector_kind]}; this is {VECTOR_KINDS[kind]}: search an index of the "
                f"{RETRIEVER_OF_KIND[kind]} retriever with it") + (
                " (vectors is a list of queries: each query's token vectors a list of lists)"
                if side.vector_kind == "multi" and not one else ""), where[-1] + "_invalid")


def create_app(settings: ServeSettings) -> FastAPI:
    """The application serving ``settings.indexes`` (each opened, its search kernels compiled and, when writes
    are allowed, its document encoder loaded, before this returns)."""
    backend = None
    if settings.backend is not None:
        from semiret.indexes.milvus import MilvusBackend

        backend = MilvusBackend.parse(settings.backend, settings.milvus_token)
    data = DataDirectory(settings.data_dir) if settings.data_dir is not None else None
    owned = set(data.names()) if data is not None else set()
    """The served indexes that live in the data directory: created and deleted over HTTP, and found there."""
    if owned & set(settings.indexes):
        raise SemiretError(f"--index names {', '.join(sorted(owned & set(settings.indexes)))}, which --data-dir "
                           f"{data.path} holds too: give that --index another name (NAME=DIR)")
    if data is not None and set(data.aliases()) & set(settings.indexes):
        raise SemiretError(f"--index names {', '.join(sorted(set(data.aliases()) & set(settings.indexes)))}, an "
                           f"alias in --data-dir {data.path}: give that --index another name (NAME=DIR)")
    specs = {**{name: str(data.path_of(name)) for name in sorted(owned)}, **settings.indexes}
    served = {name: ServedIndex(name, path, settings.max_segments, settings.retrievers.get(name), backend)
              for name, path in specs.items()}
    for name in owned:
        served[name].in_data_dir = True
    writable = settings.api_key is not None
    reranker = None  # the model (or learned ranking) a search's "rerank" asks for
    if settings.ltr is not None:
        reranker = learned_ranking(settings, {name: index.retriever for name, index in served.items()})
    elif settings.cross_encoder is not None or settings.colbert is not None:
        from semiret.search.rerank import reranking_model

        reranker = reranking_model(settings.cross_encoder or settings.colbert,
                                   "late-interaction" if settings.colbert is not None else None)
        if settings.colbert_cache is not None:  # (the hits' token vectors kept for good, across restarts)
            from semiret.indexes.embedding_cache import EmbeddingCache

            reranker.store = EmbeddingCache(settings.colbert_cache, "tokens", reranker.identity)
    writer = None
    if writable and settings.write_process and backend is None:
        writer = WriterProcess({name: (path, settings.retrievers.get(name)) for name, path in specs.items()},
                               settings.max_segments)  # it opens the indexes while this process does
        for index in served.values():
            index.writer = writer
    try:
        for index in served.values():
            index.warm_up(searches=True, writes=writable and writer is None)
        if writer is not None:
            writer.wait_until_open()
    except BaseException:
        if writer is not None:
            writer.close()
        raise
    gc.freeze()  # what start-up made lives as long as the server: keep it out of the collector's full passes

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        if writer is not None:
            writer.close()

    app = FastAPI(title="semiret", summary="Semi-parametric retrieval over HTTP: search, add, delete.",
                  description=__doc__, lifespan=lifespan)
    app.state.writer = writer
    app.router.route_class = CheckedRoute
    app.add_middleware(BodyLimit, max_bytes=settings.max_request_bytes)
    if settings.cors_origins:  # browsers' preflight requests answered before any key is asked for
        app.add_middleware(CORSMiddleware, allow_origins=list(settings.cors_origins), allow_methods=["*"],
                           allow_headers=["*"], max_age=600)
    telemetry = Telemetry()
    app.add_middleware(RequestMetrics, telemetry=telemetry)  # outermost: requests refused as too large count too

    def check_key(request: Request, write: bool) -> None:
        if settings.api_key is None and write:
            raise HTTPException(403, "this server is read-only: start it with --api-key (or SEMIRET_API_KEY) "
                                     "to allow writes")
        given = request.headers.get("x-api-key")
        authorization = request.headers.get("authorization", "")
        if given is None and authorization.lower().startswith("bearer "):
            given = authorization[7:].strip()
        if not write and (not settings.reads_need_key or not (settings.api_key or settings.read_api_key)):
            if not (loopback_host_header(request.headers.get("host")) or (
                    given is not None and (_same(given, settings.api_key) or _same(given, settings.read_api_key)))):
                raise HTTPException(403, "reads without a key are answered to loopback names only (localhost, "
                                         "127.0.0.1, [::1]), not to a request for another host (a web page's DNS "
                                         "rebinding, or a proxy passing its Host on): send the key, or give reads "
                                         "one (--read-api-key)")
            return
        if given is None:
            raise HTTPException(401, "missing API key (header X-API-Key, or Authorization: Bearer KEY)",
                                headers={"WWW-Authenticate": "Bearer"})
        if _same(given, settings.api_key):
            return
        if _same(given, settings.read_api_key):
            if write:
                raise HTTPException(403, "this key only reads (--read-api-key): writes need the API key")
            return
        raise HTTPException(401, "wrong API key", headers={"WWW-Authenticate": "Bearer"})

    app.state.check_key = check_key  # (CheckedRoute's, before a body is read)

    # every handler is async: blocking work goes to the thread pool once (run_in_threadpool); a sync handler or
    # dependency would cost a thread hop each
    opening = threading.Lock()

    def opened_anew(name: str, path, retriever: str | None, in_data_dir: bool) -> ServedIndex:
        """An index opened (again) while serving: written by the server's writer, its first search and write warm."""
        index = ServedIndex(name, path, settings.max_segments, retriever)
        index.writer, index.in_data_dir = writer, in_data_dir
        index.warm_up(searches=True, writes=writable and writer is None)
        return index

    def current_owned(name: str) -> ServedIndex | None:
        """The data directory's index ``name`` as it is now: opened where this process has not opened it (another
        process created it) or has another index open under that name; None, and forgotten here, when there is
        none (another process deleted it)."""
        with opening:
            index = served.get(name)
            if index is not None and name in owned and data.holds(name) and not index.replaced():
                return index
            if not data.holds(name):
                if name in owned:
                    served.pop(name, None)
                    owned.discard(name)
                return None
            try:
                index = opened_anew(name, data.path_of(name), None, in_data_dir=True)
            except (IndexFormatError, OSError):
                if data.holds(name):
                    raise
                return None  # deleted by another process while this one opened it
            served[name] = index
            owned.add(name)
            return index

    def sync_owned() -> dict[str, str]:
        """Every index of the data directory served here, none it no longer holds; returns those that do not open,
        with why (the others are served all the same)."""
        failed = {}
        for name in sorted(set(owned) | set(data.names())):
            try:
                current_owned(name)
            except (SemiretError, OSError) as exc:
                failed[name] = str(exc)
        return failed

    def current_given(name: str) -> ServedIndex:
        """The index ``--index`` gave as ``name`` as it is now: opened again where another index has been made at
        its path since (a backup restored over it, a build with --overwrite), so that it is searched and written as
        it now is, not answered as gone."""
        with opening:
            index = served[name]
            if not index.replaced():
                return index
            served[name] = fresh = opened_anew(name, index.path, index.retriever_name, in_data_dir=False)
            return fresh

    async def lookup(name: str, through_alias: bool = True) -> ServedIndex:
        index = served.get(name)
        if data is not None and (index is None or name in owned):
            if index is None or not data.holds(name) or index.replaced():  # stats: the common case stays inline
                index = await run_in_threadpool(current_owned, name)
        elif index is not None and backend is None and index.replaced():
            index = await run_in_threadpool(current_given, name)
        if index is None and through_alias and data is not None:
            target = data.aliases().get(name)
            if target is not None:  # the index the alias stands for now
                try:
                    return await lookup(target, through_alias=False)
                except HTTPException:
                    raise HTTPException(404, f"alias {name!r} stands for the index {target!r}, which is gone") from None
        if index is None:
            raise HTTPException(404, f"no index {name!r} (served: {', '.join(served)})")
        return index

    async def readable(name: str, request: Request) -> ServedIndex:
        check_key(request, write=False)
        index = await lookup(name)
        request.state.metrics_index = index.name  # a served index's name: the metrics' label, never a client's
        return index

    async def writable(name: str, request: Request) -> ServedIndex:
        check_key(request, write=True)
        index = await lookup(name)
        request.state.metrics_index = index.name
        return index

    def without_paths(message: str) -> str:
        """``message`` with the server's folders named as a client knows them: an index's path as ``index 'NAME'``,
        the data and backup directories as such (a client is told what it asked about, not where the server
        keeps it)."""
        places = [(index.path, f"index {name!r}") for name, index in list(served.items())]
        places += [(settings.data_dir, "the data directory"), (settings.backup_dir, "the backup directory")]
        named = {}
        for place, said in places:
            if place:  # as messages write it (absolute), and as the links it goes through resolve
                named.update({str(Path(place).absolute()): said, str(Path(place).resolve()): said})
        for path in sorted(named, key=len, reverse=True):  # whole paths only: "data" is not in "metadata"
            message = re.sub(rf"(?<![\w.-]){re.escape(path)}(?![\w.-])", lambda _, said=named[path]: said, message)
        return message

    def warned(answer: dict, warnings: list[str]) -> dict:
        """``answer`` with the ``warnings`` its request drew (:func:`~semiret.errors.told_warnings`), where it drew
        any, naming no folder of the server's (:func:`without_paths`)."""
        return {**answer, "warnings": [without_paths(message) for message in warnings]} if warnings else answer

    @app.exception_handler(IndexFormatError)
    async def unavailable(request: Request, exc: IndexFormatError):
        return JSONResponse({"detail": without_paths(str(exc))}, status_code=503)

    @app.exception_handler(IndexGone)
    async def gone(request: Request, exc: IndexGone):
        return JSONResponse({"detail": without_paths(str(exc))}, status_code=404)

    @app.exception_handler(WriterUnavailable)
    async def writer_unavailable(request: Request, exc: WriterUnavailable):
        return JSONResponse({"detail": without_paths(str(exc))}, status_code=503)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        """FastAPI's answer, its message naming no folder of the server's (:func:`without_paths`)."""
        if isinstance(exc.detail, str):
            exc = StarletteHTTPException(exc.status_code, without_paths(exc.detail), headers=exc.headers)
        return await http_exception_handler(request, exc)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError):
        """FastAPI's 422, each message naming no folder of the server's (a backup that is no index said where the
        server keeps it)."""
        errors = [{**error, "msg": without_paths(error["msg"])} if isinstance(error.get("msg"), str) else error
                  for error in exc.errors()]
        return await request_validation_exception_handler(request, RequestValidationError(errors, body=exc.body))

    @app.exception_handler(SemiretError)
    async def refused(request: Request, exc: SemiretError):
        return JSONResponse({"detail": without_paths(str(exc))}, status_code=422)

    @app.exception_handler(OSError)
    async def storage_failed(request: Request, exc: OSError):
        """The disk refused a read or write: JSON as every other error (a commit is atomic, so a write that failed
        here left the index as it was), 507 when it is full; the server's paths are not named."""
        if exc.errno in (errno.ENOSPC, errno.EDQUOT) or (exc.errno is None and SHORT_WRITE.search(str(exc))):
            return JSONResponse({"detail": "no space left on the server's disk: nothing of this request was "
                                           "written"}, status_code=507)
        if exc.errno in STORAGE_ERRNOS:
            return JSONResponse({"detail": f"the server's storage failed ({exc.strerror}): nothing of this request "
                                           "was written"}, status_code=500)
        raise exc  # not the disk (a network error, say): the server's plain 500

    def check_batch(count: int, what: str) -> None:
        if count > settings.max_batch:
            raise HTTPException(413, f"{count} {what} in one request; the limit is {settings.max_batch} (--max-batch)")

    def check_hits(queries: int, per_query: int) -> None:
        """A batch's hits in all (each query's k + offset, times group_size where grouped): what the answer holds
        and the server builds at once (1,000 queries of k = 1,000 with their texts: a 1 GB answer, 3 GB of memory)."""
        if queries * per_query > settings.max_hits:
            raise HTTPException(413, f"{queries} queries of {per_query} hits each ask for {queries * per_query:,} hits "
                                     f"in one request; the limit is {settings.max_hits:,} (--max-hits): send fewer "
                                     "queries a request, or page through them")

    def check_k(k: int, loc: tuple) -> None:
        if k > settings.max_k:
            raise validation_error(loc, f"k must be at most {settings.max_k}", "less_than_equal")

    def check_options(index: ServedIndex, options: dict) -> None:
        try:
            check_json_values([index.retriever.queries.Options], options,
                              f"searches with retriever {index.retriever.name!r}")
        except OptionValueError as exc:
            raise validation_error(("body", "options", exc.name), str(exc), "option_invalid") from None

    def check_filter(spec: dict | None) -> None:
        if spec:
            try:
                check_filter_size(spec)
                MetadataFilter(spec)
            except SemiretError as exc:
                raise validation_error(("body", "filter"), str(exc), "filter_invalid") from None

    # ------------------------------------------------------------------ health
    try:
        version = importlib.metadata.version("semiret")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout on PYTHONPATH, not installed
        version = None

    @app.get("/", tags=["health"], responses=_errors(401))
    async def about(request: Request) -> dict:
        """The server: its version, whether it takes writes, and the limits a request must keep (what a client
        sizes its batches, pages and ``k`` by)."""
        check_key(request, write=False)
        return {"name": "semiret", "version": version, "writable": settings.api_key is not None,
                "limits": {"max_batch": settings.max_batch, "max_k": settings.max_k, "max_hits": settings.max_hits,
                           "max_request_bytes": settings.max_request_bytes}}

    @app.get("/healthz", tags=["health"])
    async def healthz() -> dict:
        """The process answers."""
        return {"status": "ok"}

    @app.get("/metrics", tags=["health"], response_class=Response, responses={
        200: {"content": {"text/plain": {}}, "description": "Prometheus's text format."}, **_errors(401)})
    async def metrics(request: Request):
        """Requests by route, method, status and the served index they reached, their durations, queries searched
        by index, and each index's documents, deletions, segments and size (Prometheus's text format: every
        ``--workers`` process's counts summed)."""
        check_key(request, write=False)
        if data is not None:
            await run_in_threadpool(sync_owned)
        body = await run_in_threadpool(telemetry.exposition, [index.describe for index in list(served.values())])
        return Response(body, media_type=METRICS_CONTENT_TYPE)

    @app.get("/readyz", tags=["health"])
    async def readyz(request: Request):
        """Every index still opens (its ``meta.json`` reads) and the writer process runs (started again if it
        died); 503 naming what does not. A probe needs no key; without one where reads need it (off loopback),
        the answer is its status alone (no index names)."""
        failed = await run_in_threadpool(sync_owned) if data is not None else {}
        for name, index in list(served.items()):
            try:
                await run_in_threadpool(index.refresh)
            except IndexGone:
                continue  # deleted meanwhile: not served, not broken
            except (SemiretError, OSError) as exc:
                failed[name] = str(exc)
        writer_failed = None
        if writer is not None:
            try:
                await run_in_threadpool(writer.ensure_running)
            except WriterUnavailable as exc:
                writer_failed = str(exc)
        try:
            check_key(request, write=False)
        except HTTPException:
            return JSONResponse({"status": "unavailable" if failed or writer_failed else "ready"},
                                status_code=503 if failed or writer_failed else 200)
        if failed or writer_failed:
            return JSONResponse({"status": "unavailable", "indexes": {name: without_paths(why) for name, why in
                                                                      failed.items()},
                                 **({"writer": without_paths(writer_failed)} if writer_failed else {})},
                                status_code=503)
        return {"status": "ready", "indexes": list(served)}

    def named_in_data_dir(request: Request, name: str, field: str, off: str) -> None:
        """A write that makes ``name`` (an index's or an alias's) in the data directory: the key, a data directory
        (else 403, ``off`` saying why), and a name a client may give (else 422 on the path's ``field``)."""
        check_key(request, write=True)
        if data is None:
            raise HTTPException(403, f"{off}: start the server with --data-dir DIR")
        try:
            check_name(name)
        except SemiretError as exc:
            raise validation_error(("path", field), str(exc), "name_invalid") from None

    # ------------------------------------------------------------------ indexes
    @app.get("/indexes", response_model=IndexList, tags=["indexes"], responses=_errors(401, 503))
    async def list_indexes(request: Request):
        check_key(request, write=False)
        if data is not None:
            await run_in_threadpool(sync_owned)
        listed = await run_in_threadpool(lambda: [described_if_there(name) for name in list(served)])
        return {"indexes": [info for info in listed if info is not None]}

    @app.put("/indexes/{name}", response_model=IndexInfo, status_code=201, tags=["indexes"],
             responses=_errors(401, 403, 404, 409, 503))
    async def create_index(name: str, body: CreateIndexRequest, request: Request):
        """An empty index ``name`` in the server's ``--data-dir``, built by ``retriever`` with the index ``options``
        it takes (a ``model`` among those ``semiret models`` lists as installed), its documents split into passages
        of ``chunk_words`` where given; documents are then added with ``PUT /indexes/{name}/documents``. 409 when
        the name is taken; 403 without a data directory."""
        named_in_data_dir(request, name, "name", "creating indexes over HTTP is off")
        if name in settings.indexes or data.holds(name):
            raise HTTPException(409, f"index {name!r} exists already")
        if body.from_backup is not None:
            restored = await run_in_threadpool(restore_backup, name, body)
            return await run_in_threadpool(restored.describe)
        try:
            built_by = retriever_class(body.retriever)
        except SemiretError as exc:
            raise validation_error(("body", "retriever"), str(exc), "retriever_unknown") from None
        misplaced = next((name for name in body.options if name in CreateIndexRequest.model_fields), None)
        if misplaced is not None:
            raise validation_error(("body", "options", misplaced), f"{misplaced} is a field of the request beside "
                                   f"options, not an option: {{\"{misplaced}\": ..., \"options\": {{...}}}}",
                                   "option_invalid")
        read_as = {}
        for field in ("metadata_fields", "id_field", "text_field"):  # each checked as it joins the others
            read_as[field] = getattr(body, field)
            try:
                CorpusFields(**read_as)
            except SemiretError as exc:
                raise validation_error(("body", field), str(exc), "fields_invalid") from None
        try:
            check_json_values([built_by.documents.Options], body.options, f"indexes of retriever {body.retriever!r}")
            check_model_options(body.options, body.retriever)
        except OptionValueError as exc:
            raise validation_error(("body", "options", exc.name), str(exc), "option_invalid") from None
        try:
            check_model_options({"tokenizer": body.chunk_tokenizer})
        except OptionValueError as exc:
            raise validation_error(("body", "chunk_tokenizer"), str(exc).replace("option 'tokenizer'", "chunk_tokenizer"),
                                   "chunking_invalid") from None
        try:
            chunking = Chunking.of_options(body.chunk_words, body.chunk_overlap, body.chunk_sentences,
                                           body.chunk_tokens, body.chunk_tokenizer)
        except SemiretError as exc:
            raise validation_error(("body", "chunk_words"), str(exc), "chunking_invalid") from None
        try:
            await run_in_threadpool(data.create, name, lambda path: built_by.build(
                [], path, chunking=chunking, **read_as, **body.options))
        except IndexExists as exc:
            raise HTTPException(409, str(exc)) from None
        return await run_in_threadpool((await lookup(name)).describe)

    def restore_backup(name: str, body: CreateIndexRequest) -> ServedIndex:
        """The index ``name`` made in the data directory as a copy of the backup ``body.from_backup`` (files that
        never change hard-linked where the two directories share a file system, as a backup's are)."""
        mixed = sorted(body.model_fields_set - {"from_backup"})
        if mixed:
            raise validation_error(("body", mixed[0]), "a restored index has the retriever, options and passages of "
                                   "its backup: give from_backup alone", "restore_mixed")
        backup = backup_directory() / body.from_backup
        if not BACKUP_FOLDER.fullmatch(body.from_backup) or not (backup / META_FILE).is_file():
            raise HTTPException(404, f"no backup {body.from_backup!r} in the server's --backup-dir (GET "
                                     "/indexes/{name}/backups lists an index's)")

        def restore(path: Path) -> None:
            open_index_at(backup).backup(path)  # takes the backup's write lock (a write.lock file), nothing else
            open_retriever(path)  # one this server cannot open is never put in place

        try:
            data.create(name, restore)
        except IndexExists as exc:
            raise HTTPException(409, str(exc)) from None
        except SemiretError as exc:  # not an index, or one of a retriever or model this server has not
            raise validation_error(("body", "from_backup"), str(exc), "backup_invalid") from None
        index = current_owned(name)
        if index is None:  # deleted by another request as soon as it was made
            raise HTTPException(404, f"no index {name!r}: deleted meanwhile")
        return index

    @app.delete("/indexes/{name}", response_model=WriteResponse, response_model_exclude_none=True, tags=["indexes"],
                responses=_errors(401, 403, 404, 409, 503))
    async def delete_index(name: str, request: Request):
        """Delete an index the server made in its ``--data-dir`` (one given with ``--index`` is the operator's:
        403), once no write is under way in it."""
        check_key(request, write=True)
        if data is not None and name in data.aliases():
            raise HTTPException(409, f"{name!r} is an alias of the index {data.aliases()[name]!r}: DELETE "
                                     f"/aliases/{name} removes the alias, DELETE /indexes/{data.aliases()[name]} "
                                     "the index")
        index = await lookup(name)
        if name not in owned:
            raise HTTPException(403, f"index {name!r} was given with --index, not made in --data-dir: the server "
                                     "does not delete it")

        def delete() -> None:
            data.delete(name, index.index)  # waits for a write under way, holding nothing this process needs
            with opening:
                if served.get(name) is index:
                    served.pop(name)
                    owned.discard(name)

        await run_in_threadpool(delete)  # IndexGone: 404
        return {"status": "acknowledged"}

    # ------------------------------------------------------------------ aliases
    @app.get("/aliases", response_model=AliasList, response_model_exclude_none=True, tags=["aliases"],
             responses=_errors(401))
    async def list_aliases(request: Request):
        """Each alias of the data directory and the index it stands for (none without --data-dir)."""
        check_key(request, write=False)
        aliases = data.aliases() if data is not None else {}
        return {"aliases": [{"alias": alias, "index": index} for alias, index in sorted(aliases.items())]}

    @app.put("/aliases/{alias}", response_model=AliasInfo, response_model_exclude_none=True, tags=["aliases"],
             responses=_errors(401, 403, 404, 409))
    async def set_alias(alias: str, body: AliasRequest, request: Request):
        """Make ``alias`` stand for the index ``index``, or switch it there from the index it stood for, at once for
        every request that follows (Qdrant's collection aliases): build ``docs-v2`` beside ``docs-v1``, then point
        ``docs`` at it. Searches and writes name the alias as they would the index. 404 when there is no such
        index, 409 when an index has the alias's name; 403 without a data directory."""
        named_in_data_dir(request, alias, "alias", "aliases are kept in the data directory")

        def exists(name: str) -> bool:
            return name in settings.indexes or data.holds(name)

        try:
            previous = await run_in_threadpool(data.set_alias, alias, body.index, exists)
        except IndexExists as exc:
            raise HTTPException(409, str(exc)) from None
        return {"alias": alias, "index": body.index, "previous": previous}

    @app.delete("/aliases/{alias}", response_model=WriteResponse, response_model_exclude_none=True,
                tags=["aliases"], responses=_errors(401, 403, 404))
    async def remove_alias(alias: str, request: Request):
        """Remove an alias (the index it stood for stays)."""
        check_key(request, write=True)
        if data is None:
            raise HTTPException(403, "aliases are kept in the data directory: start the server with --data-dir DIR")
        try:
            await run_in_threadpool(data.remove_alias, alias)
        except UnknownAlias as exc:
            raise HTTPException(404, str(exc)) from None
        return {"status": "acknowledged"}

    @app.get("/indexes/{name}", response_model=IndexInfo, tags=["indexes"], responses=_errors(401, 404, 503))
    async def describe_index(index: ServedIndex = Depends(readable)):
        return await run_in_threadpool(described, index)

    def described(index: ServedIndex) -> dict:
        """``index.describe()``, the aliases that stand for it where there are any, and what a search's ``"rerank"``
        ranks its hits by where it may ask for it."""
        aliases = sorted(a for a, target in data.aliases().items() if target == index.name) if data is not None else []
        rerank = _rerank_described(index, reranker, settings.max_k)
        return {**index.describe(), **({"aliases": aliases} if aliases else {}),
                **({"rerank": rerank} if rerank is not None else {})}

    def described_if_there(name: str) -> dict | None:
        """:func:`described` of the index served as ``name``; None where it went meanwhile (deleted while listed)."""
        index = served.get(name)
        try:
            return None if index is None else described(index)
        except IndexGone:
            return None

    @app.post("/indexes/{name}/merge", response_model=IndexInfo, tags=["indexes"],
              responses=_errors(401, 403, 404, 503))
    async def merge_index(index: ServedIndex = Depends(writable)):
        """Fold the segments into as few as hold them (one each buffer the index was built with; those that filled
        it, nothing deleted since, left be) and drop deleted documents."""
        return await run_in_threadpool(index.merge)

    @app.post("/indexes/{name}/backups", response_model=BackupInfo, tags=["indexes"],
              responses=_errors(401, 403, 404, 503))
    async def back_up(index: ServedIndex = Depends(writable)):
        """A backup of the index as its last commit stands, in the server's ``--backup-dir`` (Qdrant's snapshots):
        searches go on, writes wait while it is taken (an instant: its files are hard-linked where they can be)."""
        return await run_in_threadpool(index.backup, backup_directory())

    @app.get("/indexes/{name}/backups", response_model=BackupList, tags=["indexes"], responses=_errors(401, 403, 404))
    async def list_backups(index: ServedIndex = Depends(readable)):
        """The backups the server took of the index, oldest first."""
        return {"backups": await run_in_threadpool(index.backups, backup_directory())}

    @app.get("/indexes/{name}/synonyms", response_model=SynonymRules, tags=["indexes"],
             responses=_errors(401, 404, 503))
    async def get_synonyms(index: ServedIndex = Depends(readable)):
        """The index's synonym rules as they were set (an index of a retriever that reads no words: 422)."""
        return {"rules": await run_in_threadpool(index.synonyms)}

    @app.put("/indexes/{name}/synonyms", response_model=WriteResponse, response_model_exclude_none=True,
             tags=["indexes"], responses=_errors(401, 403, 404, 503))
    async def put_synonyms(body: SynonymRules, index: ServedIndex = Depends(writable)):
        """Replace the index's synonym rules (BM25's, or a hybrid's BM25 part's; Elasticsearch's updatable synonyms
        sets): the next search expands its queries by them, no document is encoded again. A malformed rule, or a
        phrase of stopwords only, is a 422 naming its line (counted from 1) before anything is written; answered
        once durable: ``{"synonym_rules": N}``."""
        return {"synonym_rules": await run_in_threadpool(index.set_synonyms, body.rules)}

    @app.delete("/indexes/{name}/synonyms", response_model=WriteResponse, response_model_exclude_none=True,
                tags=["indexes"], responses=_errors(401, 403, 404, 503))
    async def delete_synonyms(index: ServedIndex = Depends(writable)):
        """Remove every synonym rule of the index."""
        return {"synonym_rules": await run_in_threadpool(index.set_synonyms, [])}

    def backup_directory() -> Path:
        if settings.backup_dir is None:
            raise HTTPException(403, "backups over HTTP are off: start the server with --backup-dir DIR")
        return Path(settings.backup_dir)

    # ------------------------------------------------------------------ search
    @app.post("/indexes/{name}/search", response_model=SearchResponse, response_model_exclude_unset=True,
              tags=["search"], responses=_errors(401, 404, 413, 415, 503))
    async def search(body: SearchRequest, index: ServedIndex = Depends(readable)):
        started = time.perf_counter()
        check_batch(len(body.searched), "queries" if body.vectors is None else "vectors")
        return await searched_by(body, index, started, ("body",))

    @app.post("/indexes/{name}/search/batch", response_model=SearchBatchResponse, response_model_exclude_unset=True,
              tags=["search"], responses=_errors(401, 404, 413, 415, 503))
    async def search_batch(body: SearchBatchRequest, index: ServedIndex = Depends(readable)):
        """Several searches, each with its own queries (or vectors) and settings (k, filter, groups, ...), answered
        in order, one after another (Qdrant's search batch, OpenSearch's ``_msearch``): one request for a page's
        several differently filtered searches. Each search reads the index as it stands when it runs (a write
        committed meanwhile is seen by the searches after it). The limits hold for the batch's queries and hits in
        all."""
        started = time.perf_counter()
        check_batch(sum(len(each.searched) for each in body.searches), "queries (texts or vectors)")
        total = sum(len(each.searched) * (requested_k(each) + each.offset) * each.group_size for each in body.searches)
        if total > settings.max_hits:
            raise HTTPException(413, f"the batch's searches ask for {total:,} hits in all; the limit is "
                                     f"{settings.max_hits:,} (--max-hits): send fewer searches a request")
        for number, each in enumerate(body.searches):  # every search checked before the first runs
            await searched_by(each, index, started, ("body", "searches", number), check_only=True)
        answers = [await searched_by(each, index, time.perf_counter(), ("body", "searches", number), inline=False)
                   for number, each in enumerate(body.searches)]
        return {"searches": answers, "took_ms": _milliseconds_since(started)}

    def requested_k(body: SearchRequest) -> int:
        """A search's k: as asked, else the default within the server's --max-k."""
        return body.k if "k" in body.model_fields_set else min(body.k, settings.max_k)

    async def searched_by(body: SearchRequest, index: ServedIndex, started: float, where: tuple,
                          check_only: bool = False, inline: bool = True) -> dict | None:
        """A search's answer (``{"results", "took_ms"}``), its settings checked against the server's limits and the
        index first, each error located at ``where`` in the request (``check_only``: those checks alone, None);
        ``inline``: a quick search may run on the event loop (not a batch's, whose many would hold it)."""
        searched = body.searched
        if body.vectors is not None:
            check_vector_kinds(index, body.vectors, (*where, "vectors"))
        k = requested_k(body)
        check_k(k, (*where, "k"))
        if k + body.offset > settings.max_k:
            raise validation_error((*where, "offset"), f"k + offset must be at most {settings.max_k} (--max-k)",
                                   "less_than_equal")
        check_options(index, body.options)
        check_filter(body.filter)
        if body.group_by is None and body.group_size != 1:
            raise validation_error((*where, "group_size"), "group_size is the hits of each group: give group_by too",
                                   "group_size_invalid")
        if body.group_by is not None:
            try:
                Grouping(body.group_by, body.group_size)
            except SemiretError as exc:
                raise validation_error((*where, "group_by"), str(exc), "group_by_invalid") from None
            if (k + body.offset) * body.group_size > settings.max_k:
                raise validation_error((*where, "group_size"), f"(k + offset) x group_size, the hits a grouped search "
                                       f"may read, must be at most {settings.max_k} (--max-k)", "less_than_equal")
        check_hits(len(searched), (k + body.offset) * body.group_size)
        if body.candidates is not None and body.diversity is None and body.boost is None:
            raise validation_error((*where, "candidates"), "candidates is for a diversified or boosted search: give "
                                   "diversity or boost too", "candidates_invalid")
        picking = {}
        if body.boost is not None:
            try:
                check_filter_size(body.boost, "a boost")  # (its functions' filters together)
                picking["boost"] = Boost(body.boost)
            except SemiretError as exc:
                raise validation_error((*where, "boost"), str(exc), "boost_invalid") from None
            if not index.index.stores_texts:
                raise validation_error((*where, "boost"), f"index {index.name!r} keeps no stored documents: there is "
                                       "no metadata to boost by", "boost_invalid")
        if body.diversity is not None:
            if body.group_by is not None:
                raise validation_error((*where, "diversity"), "a search is grouped (group_by) or diversified "
                                       "(diversity), not both", "diversity_invalid")
            picking["diversity"] = body.diversity
        if picking and (body.group_by is None or body.candidates is not None):
            # as in Python for a page's k, whatever its offset: every page of a ranking chooses from the same hits (a
            # grouped search given none searches deeper until it has its groups, as in Python)
            candidates = body.candidates or min(candidate_depth(k, None, body.group_size if body.group_by else 1),
                                                settings.max_k)
            if candidates > settings.max_k:
                raise validation_error((*where, "candidates"), f"candidates must be at most {settings.max_k} "
                                       "(--max-k)", "less_than_equal")
            if k + body.offset > candidates:  # pages of one ranking share their candidates
                raise validation_error((*where, "candidates"), f"k + offset ({k + body.offset}) is more than the "
                                       f"{candidates} candidates hits are chosen from: give candidates, at least k + "
                                       "offset and the same for every page", "candidates_invalid")
            picking["candidates"] = candidates
        if body.rerank:
            picking["rerank"] = _reranking(body, k, index, reranker, settings.max_k, (*where, "rerank"))
            check_hits(len(searched), picking["rerank"].depth)  # the pairs the cross-encoder reads
        highlight = (body.highlight.model_dump() if isinstance(body.highlight, HighlightOptions)
                     else {} if body.highlight else None)
        if highlight is not None and not index.index.stores_texts:
            raise validation_error((*where, "highlight"), f"index {index.name!r} keeps no stored documents: there is "
                                   "no text to highlight", "highlight_invalid")
        if body.explain:
            try:
                await run_in_threadpool(index.check_explainable, body.options)
            except SemiretError as exc:
                raise validation_error((*where, "explain"), str(exc), "explain_invalid") from None
        if body.context is not None and not index.index.stores_texts:
            raise validation_error((*where, "context"), f"index {index.name!r} keeps no stored documents: there is "
                                   "no text to give as context", "context_invalid")
        if check_only:
            return None
        with told_warnings() as told:
            results = await _search(index, searched, k, body.options, body.with_fields or body.with_text,
                                    body.filter, body.offset, body.group_by, body.group_size, body.score_threshold,
                                    highlight, picking, body.context, body.explain, body.operators, inline)
        telemetry.queries.labels(index.name).inc(len(searched))
        took = _milliseconds_since(started)
        _log_if_slow(settings.slow_query_ms, index.name, took, searched,
                     body.model_dump(exclude_unset=True, exclude={"queries", "vectors"}))
        return warned({"results": results, "took_ms": took}, told)

    @app.post("/indexes/{name}/recommend", response_model=SearchResponse, response_model_exclude_unset=True,
              tags=["search"], responses=_errors(401, 404, 413, 415, 503))
    async def recommend(body: RecommendRequest, index: ServedIndex = Depends(readable)):
        """Documents like the ``positive`` ones and unlike the ``negative`` ones (ids of documents in the index):
        ``results`` holds one list of hits (404: an example the index does not hold)."""
        started = time.perf_counter()
        check_batch(len(body.positive) + len(body.negative), "examples")
        k = body.k if "k" in body.model_fields_set else min(body.k, settings.max_k)
        check_k(k, ("body", "k"))
        check_options(index, body.options)
        check_filter(body.filter)
        try:
            with told_warnings() as told:
                hits = await run_in_threadpool(index.recommend, body.positive, body.negative, k, body.options,
                                               body.with_text, body.filter, body.score_threshold)
        except UnknownDocumentError as exc:
            raise HTTPException(404, f"no document {exc.doc_id!r} in index {index.name!r} to recommend from"
                                     f"{exc.hint}") from None
        return warned({"results": [hits], "took_ms": _milliseconds_since(started)}, told)

    @app.post("/indexes/{name}/explain", response_model=ExplainResponse, response_model_exclude_unset=True,
              tags=["search"], responses=_errors(401, 404, 415, 503))
    async def explain(body: ExplainRequest, index: ServedIndex = Depends(readable)):
        """How a document's score for a query (a text, or a sparse query vector: ``"vector"``) adds up, term by term
        (422: a retriever that does not sum term weights, or a vector given to an index that holds no sparse vectors;
        404: no such document)."""
        check_options(index, body.options)
        check_filter(body.filter)
        if body.vector is not None and getattr(index.retriever.query_side, "vector_kind", None) != "sparse":
            raise validation_error(("body", "vector"), f"index {index.name!r} holds no sparse vectors (retriever "
                                   f"{index.retriever.name}): explain a query text", "vector_invalid")
        try:
            with told_warnings() as told:
                explained = await run_in_threadpool(index.explain, body.explained, body.id, body.options, body.filter,
                                                    body.operators)
        except UnknownDocumentError as exc:
            raise HTTPException(404, f"no document {exc.doc_id!r} in index {index.name!r}{exc.hint}") from None
        return warned(explained, told)

    @app.post("/indexes/{name}/analyze", response_model=AnalyzeResponse, tags=["search"],
              responses=_errors(401, 404, 415, 503))
    async def analyze(body: AnalyzeRequest, index: ServedIndex = Depends(readable)):
        """The terms a text becomes as a query or a document, or a stored document's (``id``), heaviest first,
        with their weights and document frequencies (422: a retriever that does not sum term weights; 404: no
        such document)."""
        check_options(index, body.options)
        try:
            return await run_in_threadpool(index.analyze, body.text, body.id, body.side, body.limit, body.options)
        except UnknownDocumentError as exc:
            raise HTTPException(404, f"no document {exc.doc_id!r} in index {index.name!r}{exc.hint}") from None

    @app.post("/indexes/{name}/suggest", response_model=SuggestResponse, response_model_exclude_unset=True,
              tags=["search"], responses=_errors(401, 404, 415, 503))
    async def suggest(body: SuggestRequest, index: ServedIndex = Depends(readable)):
        """Completions of the word ``text`` ends with, from the words of the stored documents, those the most
        documents hold first (beside the earlier words typed); a segment's first one builds its word index, so
        they run off the event loop."""
        check_filter(body.filter)
        if not index.index.stores_texts:
            raise validation_error(("body", "text"), f"index {index.name!r} keeps no stored documents: there are no "
                                   "words to suggest", "suggest_invalid")
        with told_warnings() as told:
            suggested = await run_in_threadpool(index.suggest, body.text, body.k, body.filter)
        return warned(suggested, told)

    @app.get("/indexes/{name}/search", response_model=SearchResponse, response_model_exclude_unset=True,
             tags=["search"], responses=_errors(401, 404, 413, 503))
    async def search_get(request: Request,
                         q: Annotated[list[str], Query(min_length=1, description="A query; repeat for more.")],
                         index: ServedIndex = Depends(readable), k: Annotated[int | None, Query(ge=1)] = None,
                         with_text: bool = False):
        """The POST search's for quick use: ``k`` defaults to 10 (or ``--max-k`` if lower); no options."""
        started = time.perf_counter()
        unknown = sorted(set(request.query_params) - GET_SEARCH_PARAMETERS)
        if unknown:
            raise validation_error(("query", unknown[0]), f"unknown parameter(s) {', '.join(unknown)} (this search "
                                   f"takes q, k and with_text; search options: POST)", "extra_forbidden")
        check_batch(len(q), "queries")
        k = min(10, settings.max_k) if k is None else k
        check_k(k, ("query", "k"))
        check_hits(len(q), k)
        with told_warnings() as told:
            results = await _search(index, q, k, {}, with_text)
        telemetry.queries.labels(index.name).inc(len(q))
        took = _milliseconds_since(started)
        _log_if_slow(settings.slow_query_ms, index.name, took, q, {"k": k, "with_text": with_text})
        return warned({"results": results, "took_ms": took}, told)

    # ------------------------------------------------------------------ documents
    @app.put("/indexes/{name}/documents", response_model=WriteResponse, response_model_exclude_none=True,
             tags=["documents"], responses=_errors(401, 403, 404, 413, 415, 503),
             openapi_extra={"requestBody": {"required": True, "content": {
                 "application/json": {"schema": _inlined_schema(UpsertRequest)},
                 "application/x-ndjson": {"schema": {"type": "string", "description":
                                                     "One document per line: {\"_id\", \"title\", \"text\", \"metadata\"}"}}}}})
    async def upsert(request: Request, index: ServedIndex = Depends(writable)):
        """Add documents; those whose ids exist are replaced (in the same commit). Ids must be unique within
        one request. Answered once durable, ``{"upserted": N}``: the documents sent (and ``"passages"``, those
        they were split into, where the index holds passages); a bad document anywhere changes nothing."""
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()  # given: CheckedRoute
        reading = {"fields": index.retriever.corpus_fields(), "unread": []}  # read as `semiret add` reads a file
        if content_type in JSONL_TYPES:
            documents = await _read_jsonl(request, settings.max_batch, reading)
        elif content_type == "application/json":
            documents = _parse_json_documents(await request.body(), reading)  # UTF-8 checked by CheckedRoute
        else:
            raise HTTPException(415, f"body type {content_type!r}: send application/json ({{\"documents\": [...]}}) "
                                     f"or application/x-ndjson (one document per line)")
        check_batch(len(documents), "documents")
        _check_unique(documents)
        upserted = await run_in_threadpool(index.upsert, [Document(d.id, d.text, d.title, d.metadata or None, d.vector)
                                                          for _, d in documents])
        with told_warnings() as told:
            if reading["unread"]:
                warn(log, left_out_warning(f"index {index.name!r}", reading["unread"], ADDED_FIELDS_HINT))
        return warned(upserted.answer("upserted"), told)

    @app.post("/indexes/{name}/documents/delete", response_model=WriteResponse, response_model_exclude_none=True,
              tags=["documents"], responses=_errors(401, 403, 404, 413, 415, 503))
    async def delete(body: DeleteRequest, index: ServedIndex = Depends(writable)):
        """Delete documents by id (unknown ids are skipped), or those whose metadata matches ``filter``; answered once
        durable, ``{"deleted": N}``: the ids the index held (by a filter, the documents; and ``"passages"``, those
        deleted, where the index holds passages)."""
        if body.filter is not None:
            check_filter(body.filter)
            with told_warnings() as told:
                deleted = await run_in_threadpool(index.delete_where, body.filter)
            return warned(deleted.answer("deleted"), told)
        check_batch(len(body.ids), "ids")
        return (await run_in_threadpool(index.delete, body.ids)).answer("deleted")

    @app.post("/indexes/{name}/documents/metadata", response_model=WriteResponse, response_model_exclude_none=True,
              tags=["documents"], responses=_errors(401, 403, 404, 413, 415, 503))
    async def set_metadata(body: MetadataRequest, index: ServedIndex = Depends(writable)):
        """Set ``metadata``'s fields on the documents of ``ids`` (unknown ones skipped) or passing ``filter``
        (``overwrite``: replace their metadata), without encoding any of them again (Qdrant's set_payload); the
        next search filters on the new values. Answered once durable: ``{"updated": N}``."""
        if body.filter is not None:
            check_filter(body.filter)
        else:
            check_batch(len(body.ids), "ids")
        with told_warnings() as told:
            updated = await run_in_threadpool(index.set_metadata, body.metadata, body.ids, body.filter,
                                              body.overwrite)
        return warned({"updated": updated}, told)

    @app.post("/indexes/{name}/documents/scroll", response_model=ScrollResponse, response_model_exclude_unset=True,
              response_model_by_alias=True, tags=["documents"], responses=_errors(401, 404, 503))
    async def scroll(body: ScrollRequest, index: ServedIndex = Depends(readable)):
        """A page of the stored documents in id order, those whose metadata matches ``filter`` if given (Qdrant's
        scroll): ``{"documents": [...], "next_page_offset": ID}``; ask again with ``"offset": ID`` until it is null.
        Pages stay consistent while documents change: each starts where the last ended."""
        if body.limit > settings.max_batch:
            raise validation_error(("body", "limit"), f"limit must be at most {settings.max_batch} (--max-batch)",
                                   "less_than_equal")
        check_filter(body.filter)
        if body.order_by is not None:
            try:
                Ordering(body.order_by)
            except SemiretError as exc:
                raise validation_error(("body", "order_by"), str(exc), "order_by_invalid") from None
        with told_warnings() as told:
            page = await run_in_threadpool(index.scroll, body.filter, body.limit, body.offset, body.with_text,
                                           body.order_by)
        return warned(page, told)

    @app.post("/indexes/{name}/documents/count", response_model=CountResponse, response_model_exclude_unset=True,
              tags=["documents"],
              responses=_errors(401, 404, 503))
    async def count(body: CountRequest, index: ServedIndex = Depends(readable)):
        """How many documents the index holds, or how many match ``filter`` (Qdrant's count, OpenSearch's
        ``_count``), and ``query`` where given (its total hits)."""
        check_filter(body.filter)
        if body.vector is not None and getattr(index.retriever.query_side, "vector_kind", None) != "sparse":
            raise validation_error(("body", "vector"), f"index {index.name!r} holds no sparse vectors (retriever "
                                   f"{index.retriever.name}): count by a query text", "vector_invalid")
        query = body.query if body.vector is None else body.vector
        with told_warnings() as told:
            counted = await run_in_threadpool(index.count, body.filter, query)
        return warned({"count": counted}, told)

    @app.post("/indexes/{name}/facet", response_model=FacetResponse, response_model_exclude_unset=True,
              tags=["documents"],
              responses=_errors(401, 404, 503))
    async def facet(body: FacetRequest, index: ServedIndex = Depends(readable)):
        """The values of a stored metadata field the most documents hold (those matching ``filter``), with their
        counts (Qdrant's facet, OpenSearch's terms aggregation): ``{"values": [{"value", "count"}, ...]}``."""
        if body.limit > settings.max_batch:
            raise validation_error(("body", "limit"), f"limit must be at most {settings.max_batch} (--max-batch)",
                                   "less_than_equal")
        check_filter(body.filter)
        try:
            Grouping(body.field)
        except SemiretError as exc:
            raise validation_error(("body", "field"), str(exc), "field_invalid") from None
        if body.ranges is not None:
            try:
                checked_ranges(body.field, body.ranges)
            except SemiretError as exc:
                raise validation_error(("body", "ranges"), str(exc), "ranges_invalid") from None
        depth = body.depth if "depth" in body.model_fields_set else min(body.depth, settings.max_k)
        if (body.query is not None or body.vector is not None) and depth > settings.max_k:
            raise validation_error(("body", "depth"), f"depth must be at most {settings.max_k} (--max-k)",
                                   "less_than_equal")
        if body.vector is not None:
            check_vector_kinds(index, [body.vector], ("body", "vector"), one=True)
        check_options(index, body.options)
        query = body.query if body.vector is None else body.vector
        with told_warnings() as told:
            values = await run_in_threadpool(index.facet, body.field, body.filter, body.limit, body.ranges, query,
                                             depth, body.operators, body.options)
        return warned({"values": values}, told)

    @app.delete("/indexes/{name}/documents/{doc_id:path}", response_model=WriteResponse,
                response_model_exclude_none=True, tags=["documents"], responses=_errors(401, 403, 404, 503))
    async def delete_document(doc_id: str, index: ServedIndex = Depends(writable)):
        """Delete one document (the resource ``GET`` reads; OpenSearch's ``DELETE /{index}/_doc/{id}``): 404 when the
        index holds none of that id; answered once durable, ``{"deleted": 1}`` (and ``"passages"``, its passages
        deleted, where the index holds passages)."""
        deleted = await run_in_threadpool(index.delete, [doc_id])
        if not deleted.documents:
            raise HTTPException(404, f"no document {doc_id!r} in index {index.name!r}")
        return deleted.answer("deleted")

    @app.post("/indexes/{name}/documents/retrieve", tags=["documents"], response_model=RetrieveResponse,
              response_model_exclude_unset=True, response_model_by_alias=True,
              responses=_errors(401, 404, 413, 415, 503))
    async def retrieve(body: RetrieveRequest, index: ServedIndex = Depends(readable)):
        """The stored documents of many ids in one request (Qdrant's retrieve, OpenSearch's ``_mget``), in the order
        asked, and the ids the index does not hold (``missing``)."""
        check_batch(len(body.ids), "ids")
        documents, missing = await run_in_threadpool(index.documents, body.ids)
        return {"documents": documents, "missing": missing}

    @app.get("/indexes/{name}/documents/{doc_id:path}", tags=["documents"], response_model=StoredDocument,
             response_model_exclude_unset=True, response_model_by_alias=True, responses=_errors(401, 404, 503))
    async def get_document(doc_id: str, index: ServedIndex = Depends(readable)):
        """The stored document: ``{"_id", "title", "text"}`` and its ``metadata`` if it has some (only ``_id`` if the
        index keeps no texts)."""
        found = await run_in_threadpool(index.document, doc_id)
        if found is None:
            raise HTTPException(404, f"no document {doc_id!r} in index {index.name!r}")
        return found

    routes_described = app.openapi

    def described_with_keys() -> dict:
        """The OpenAPI description with the key's two headers, for its page's Authorize button (its requests went
        without the key)."""
        schema = routes_described()  # made once, then kept by FastAPI
        schema.setdefault("components", {}).setdefault("securitySchemes", SECURITY_SCHEMES)
        schema["components"].setdefault("schemas", {}).setdefault("ErrorDetail", ErrorDetail.model_json_schema())
        schema.setdefault("security", [{}, *({name: []} for name in SECURITY_SCHEMES)])  # {}: reads on loopback
        return schema

    app.openapi = described_with_keys
    return app


def app_from_environment() -> FastAPI:
    """The application of the settings ``semiret serve`` put in the environment (uvicorn's factory for
    ``--workers N``: each worker process calls it)."""
    settings = ServeSettings.from_environment()
    settings.configure_logging()
    return create_app(settings)


async def _search(index: ServedIndex, queries: list[str], k: int, options: dict, with_text: bool | list[str],
                  filter: dict | None = None, offset: int = 0, group_by: str | None = None,
                  group_size: int = 1, score_threshold: float | None = None,
                  highlight: dict | None = None, picking: dict | None = None,
                  context: int | None = None, explain: bool = False, operators: bool = False,
                  inline: bool = True) -> list[list[dict]]:
    """``index.search(...)`` on the event loop when it is expected to be quick (:data:`INLINE_SEARCH_MS`) and
    ``inline`` allows it, else in the thread pool (also the first search, and one whose options need a retriever
    variant made)."""
    expected = index.query_ms
    if (inline and expected is not None and expected * len(queries) <= INLINE_SEARCH_MS and index.ready_for(options)
            and sum(map(len, queries)) <= INLINE_QUERY_CHARS and not filter  # a new filter reads every document
            and group_by is None and highlight is None  # groups and highlights read their hits' stored documents
            and not picking  # a first diversified search reads all a segment's postings, a boost its metadata
            and not options.get("fuzzy")  # a misspelling's neighbours are looked for over the whole vocabulary
            and not options.get("prefix")  # a prefix's words, in a sorted copy of the vocabulary made at first
            and context is None and not explain  # contexts and explanations read stored passages and postings
            and not operators):  # what a query requires or excludes is a new filter
        return index.search(queries, k, options, with_text, filter, offset, score_threshold=score_threshold)
    return await run_in_threadpool(index.search, queries, k, options, with_text, filter, offset, group_by, group_size,
                                   score_threshold, highlight, picking, context, explain, operators)


SHORT_WRITE = re.compile(r"^\d+ requested and \d+ written$")
"""numpy's error for an array file the disk took only part of (``np.save`` on a full disk), which carries no errno."""


def _inlined_schema(model) -> dict:
    """A pydantic model's JSON schema with its definitions written in place of their references, for a request
    body given to OpenAPI by hand (its ``#/$defs/...`` references would point nowhere in the OpenAPI document)."""
    schema = model.model_json_schema()
    definitions = schema.pop("$defs", {})

    def inline(node):
        if isinstance(node, dict):
            reference = node.get("$ref", "")
            if reference.startswith("#/$defs/"):
                return inline(definitions[reference.removeprefix("#/$defs/")])
            return {key: inline(value) for key, value in node.items()}
        if isinstance(node, list):
            return [inline(value) for value in node]
        return node

    return inline(schema)


def _reranking(body: SearchRequest, k: int, index: ServedIndex, reranker, max_k: int, where: tuple
               ) -> Reranking | LearnedRanking:
    """The re-ranking a search asks for (``"rerank"``), by the server's cross-encoder or late-interaction model, or
    its learned ranking (which ranks as deep as it was trained: a depth given must be that one), or a 422 saying
    why not (a learned ranking asked for over an index whose retriever is not its first stage, say)."""
    asked = body.rerank.depth if isinstance(body.rerank, RerankOptions) else None
    learned = isinstance(reranker, LearnedRanking)
    depth = reranker.depth if learned else min(DEFAULT_RERANK_DEPTH, max_k) if asked is None else asked
    problem = None
    if reranker is None:
        problem = ("this server has no model to rank hits again: start it with --cross-encoder MODEL, --colbert "
                   "MODEL or --ltr DIR (a learned ranking)")
    elif body.group_by is not None or body.diversity is not None or body.boost is not None:
        problem = "a re-ranked search is not also grouped, diversified or boosted"
    elif body.explain:  # (an explanation adds up the first stage's score, which a re-ranked hit no longer carries)
        problem = ("a re-ranked search's hits carry the re-ranking model's scores, which no term adds up to: leave "
                   "out explain")
    elif learned:
        problem = _learned_ranking_refuses(reranker, index.retriever)
        if problem is None and asked is not None and asked != depth:
            problem = (f"this server's learned ranking (--ltr) ranks the best {depth} hits, as deep as it was "
                       f"trained: leave out depth (or give {depth})")
        elif problem is None and k + body.offset > depth:
            problem = (f"k + offset ({k + body.offset}) is more than the {depth} hits the learned ranking ranks (as "
                       "deep as it was trained): ask for fewer, pages of one ranking within them")
    elif not index.index.stores_texts:
        problem = f"index {index.name!r} keeps no stored documents: there is no text to rank hits again by"
    elif depth > max_k:
        problem = f"the re-ranking depth must be at most {max_k} (--max-k)"
    elif k + body.offset > depth:
        problem = (f"k + offset ({k + body.offset}) is more than the {depth} hits ranked again: give a depth "
                   "({\"depth\": N}), at least k + offset and the same for every page")
    if problem is not None:
        raise validation_error(where, problem, "rerank_invalid")
    return reranker if learned else Reranking(reranker, depth)


def _learned_ranking_refuses(ranking: LearnedRanking, retriever) -> str | None:
    """Why ``ranking`` cannot rank the hits of ``retriever`` (a served index's): not the first stage it was trained
    on, or one of passages or of query vectors; or None."""
    try:
        ranking.check_first_stage(retriever)
    except SemiretError as exc:
        return str(exc)
    return None


def learned_ranking(settings: ServeSettings, retrievers: dict) -> LearnedRanking:
    """``--ltr``'s learned ranking, loaded once at start (its feature indexes opened from ``--ltr-feature-index``'s
    folders where given, else from the paths it records), or a :class:`SemiretError` before anything is served:
    LightGBM missing, a folder that is not a learned ranking, a feature index that is not there or not of the kinds
    it was trained with, a depth over ``--max-k``, or, without ``--data-dir``, no index of
    ``retrievers`` (served name -> retriever) whose retriever is its first stage. Served indexes it cannot rank are
    logged (their searches' ``"rerank"`` is refused, as over indexes made later in ``--data-dir``)."""
    ranking = LearnedRanking.load(settings.ltr, settings.ltr_feature_index)
    if ranking.depth > settings.max_k:
        raise SemiretError(f"--ltr {settings.ltr} ranks the best {ranking.depth} hits of a search (as deep as it was "
                           f"trained), more than --max-k {settings.max_k}: raise --max-k to at least {ranking.depth}")
    refused = {name: problem for name, retriever in retrievers.items()
               if (problem := _learned_ranking_refuses(ranking, retriever)) is not None}
    if refused and settings.data_dir is None and len(refused) == len(retrievers):
        said = [problem if len(refused) == 1 else f"index {name!r}: {problem}" for name, problem in refused.items()]
        raise SemiretError(f"--ltr {settings.ltr} can rank no served index's hits: {'; '.join(said)}")
    for name, problem in refused.items():
        log.warning("index %r: its searches' \"rerank\" is refused: %s", name, problem)
    for feature in ranking.features:  # (kernels compiled and models run once, as the served indexes' warm-up)
        feature.search(["warm up"], k=1)
    return ranking


def _rerank_described(index: ServedIndex, reranker, max_k: int) -> dict | None:
    """What a search's ``"rerank"`` ranks ``index``'s hits by (its kind and depth; a learned ranking's first stage
    and feature indexes), or None where the server has nothing to rank them by, or this index cannot ask."""
    if reranker is None:
        return None
    if isinstance(reranker, LearnedRanking):
        if _learned_ranking_refuses(reranker, index.retriever) is not None:
            return None
        return {**{key: value for key, value in reranker.describe().items() if key != "path"},  # (a server's folder)
                "first_stage": reranker.first_stage}
    if not index.index.stores_texts:
        return None
    from semiret.models.late_interaction import LateInteraction

    return {"kind": "late-interaction" if isinstance(reranker, LateInteraction) else "cross-encoder",
            "depth": min(DEFAULT_RERANK_DEPTH, max_k)}


DEFAULT_RERANK_DEPTH = 100
"""Hits a search's ``"rerank": true`` ranks again (``--max-k`` where lower)."""


def _milliseconds_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


SLOW_LOG_CHARS = 300
"""Characters of a slow search's queries and of its options that the slow log writes (each, at most)."""


def _log_if_slow(threshold: float | None, index: str, took_ms: float, queries: list[str], options: dict) -> None:
    """The search slow log (``--slow-query-ms``, Elasticsearch's): a search that took longer than ``threshold``
    milliseconds, its index, time, queries and ``options`` (what the request set beside its queries)."""
    if threshold is None or took_ms <= threshold:
        return
    shown = json.dumps(queries, ensure_ascii=False)
    set_ = json.dumps(options, ensure_ascii=False, sort_keys=True, default=str)
    log.warning("slow search of index %s: %.1f ms for %d quer%s %s%s, %s%s", index, took_ms, len(queries),
                "y" if len(queries) == 1 else "ies", shown[:SLOW_LOG_CHARS], "..." * (len(shown) > SLOW_LOG_CHARS),
                set_[:SLOW_LOG_CHARS], "..." * (len(set_) > SLOW_LOG_CHARS))


Located = tuple[tuple, DocumentIn]
"""A document to add and where it was in the request (the start of an error's ``loc``)."""


def _parse_json_documents(body: bytes, reading: dict) -> list[Located]:
    """Documents of a JSON body, read with ``reading`` (:class:`DocumentIn`'s validation context)."""
    try:
        documents = UpsertRequest.model_validate_json(body, context=reading).documents
    except ValidationError as exc:
        raise RequestValidationError([{**error, "loc": ("body", *error["loc"])} for error in exc.errors()]) from None
    return [(("body", "documents", position), document) for position, document in enumerate(documents)]


async def _read_jsonl(request: Request, max_documents: int, reading: dict) -> list[Located]:
    """Documents of a JSONL body, read with ``reading`` (:class:`DocumentIn`'s validation context) and validated
    line by line as the body streams in (blank lines skipped)."""
    documents: list[Located] = []
    pending = b""
    line_number = 0

    def parse(line: bytes) -> None:
        nonlocal line_number
        line_number += 1
        if not line.strip():
            return
        loc = ("body", "line", line_number)
        try:
            text = line.decode("utf-8-sig" if line_number == 1 else "utf-8")  # tolerate a BOM, as files are read
        except UnicodeDecodeError as exc:
            raise validation_error(loc, f"invalid UTF-8 at byte {exc.start} of the line", "utf8_invalid") from None
        check_json_text(text, loc)
        try:
            documents.append((loc, DOCUMENT.validate_python(json.loads(text), context=reading)))
        except json.JSONDecodeError as exc:
            raise validation_error(loc, f"malformed JSON: {exc.msg} (column {exc.colno})", "json_invalid") from None
        except RecursionError:
            raise _too_deep(loc) from None
        except ValidationError as exc:
            raise RequestValidationError([{**error, "loc": (*loc, *error["loc"])} for error in exc.errors()]) from None
        if len(documents) > max_documents:
            raise HTTPException(413, f"more than {max_documents} documents in one request (--max-batch)")

    async for chunk in request.stream():
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            parse(line)
    parse(pending)
    return documents


def _check_unique(documents: list[Located]) -> None:
    """Refuse an id given twice in one request (422 naming both places)."""
    first_seen: dict[str, tuple] = {}
    for loc, document in documents:
        earlier = first_seen.setdefault(document.id, loc)
        if earlier != loc:
            raise validation_error((*loc, "_id"), f"duplicate id {document.id!r} (also at {'/'.join(map(str, earlier[1:]))}): "
                                                  "ids must be unique within one request", "duplicate_id")
