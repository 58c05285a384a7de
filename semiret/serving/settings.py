"""What ``semiret serve`` serves and under which limits: one frozen settings object, passed to every worker
process as JSON (``SEMIRET_SERVE_SETTINGS``)."""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from semiret.errors import SemiretError

LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
"""What ``--log-level`` takes: the names uvicorn and Python's logging share."""
SETTINGS_VARIABLE = "SEMIRET_SERVE_SETTINGS"
"""The environment variable that hands the settings to uvicorn's worker processes (``--workers N``)."""


@dataclass(frozen=True)
class ServeSettings:
    """The indexes a server serves and its limits."""

    indexes: dict[str, str] = field(default_factory=dict)
    """Index name (the path's last part in URLs) -> index directory (collection name with a ``backend``)."""
    backend: str | None = None
    """``milvus:URI``: the indexes are collections there; None: index directories."""
    milvus_token: str | None = None
    """Token of the Milvus server (default: ``$MILVUS_TOKEN``)."""
    retrievers: dict[str, str] = field(default_factory=dict)
    """Index name -> the retriever that searches it, where not the one its ``meta.json`` records (e.g.
    ``sidr-beta-rerank`` over a ``sidr-beta`` index)."""
    api_key: str | None = None
    """Writes need it (without one the server is read-only); so does everything when ``host`` is not loopback."""
    read_api_key: str | None = None
    """A second key that reads take and writes refuse (Qdrant's read-only key): for clients that only search."""
    cors_origins: list[str] = field(default_factory=list)
    """Web origins whose pages may call the API from a browser (``https://app.example.com``, or ``*``)."""
    host: str = "127.0.0.1"
    max_request_bytes: int = 32 * 2**20
    """Largest request body; larger ones are answered 413."""
    max_batch: int = 10_000
    """Most documents in one add, ids in one delete, queries in one search (413 beyond)."""
    max_k: int = 1000
    """Largest ``k`` of a search (422 beyond)."""
    max_hits: int = 100_000
    """Most hits one search request asks for, over all its queries (413 beyond): ``max_batch`` queries of
    ``max_k`` would be 10 million, an answer of GBs."""
    max_segments: int = 8
    """After a write leaves more segments than this, the small recent ones are merged (searches visit every
    segment, so many small ones slow them down); those that filled the index's buffer, as large as it makes them,
    are not counted."""
    backup_dir: str | None = None
    """Where ``POST /indexes/{name}/backups`` writes backups (``NAME-<UTC time>``); None: no backups over HTTP."""
    data_dir: str | None = None
    """A directory of indexes the server owns (:mod:`~semiret.serving.data_dir`): each served under its folder's
    name, and more created (``PUT /indexes/{name}``) and deleted (``DELETE``) there over HTTP; None: only
    ``indexes``, none created or deleted."""
    cross_encoder: str | None = None
    """A cross-encoder (folder or hub id; a ColBERT checkpoint is read by late interaction) that a search may ask to
    rank its best hits again (``"rerank"``), loaded once at start; None: searches cannot ask (a client never names a
    model)."""
    colbert: str | None = None
    """In place of :attr:`cross_encoder`: a model whose token vectors rank the best hits again by late interaction
    (a ColBERT checkpoint, or any encoder's, untrained: ``minilm``)."""
    colbert_cache: str | None = None
    """With :attr:`colbert`: a folder where the hits' token vectors are kept for good (each document encoded once,
    across searches and restarts); None: kept in memory only (256 MB)."""
    ltr: str | None = None
    """In place of :attr:`cross_encoder`: a learned ranking (a folder ``semiret ltr`` wrote) that ranks the best hits
    again by its model of their first-stage and feature indexes' scores, loaded once at start, its feature indexes
    opened read-only from the paths it records or :attr:`ltr_feature_index` (and read as they stand at each search); a
    search may ask for it over an index whose retriever is its first stage."""
    ltr_feature_index: list[str] | None = None
    """With :attr:`ltr`: its feature indexes' folders, in its order, instead of those it records (the same kinds
    over the served corpus: a learned ranking taken to another collection, or its indexes moved)."""
    log_level: str = "warning"
    """The least severe messages the server logs: critical, error, warning, info or debug (uvicorn's and semiret's)."""
    access_log: bool = False
    """Log every request (uvicorn's access log: client, method, path, status; at info, whatever :attr:`log_level`)."""
    slow_query_ms: float | None = None
    """Log each search slower than this (milliseconds, the request's whole time) as a warning naming the index, its
    time, its queries and its options (Elasticsearch's search slow log); None: none logged."""
    write_process: bool = True
    """Do the writes in a process of their own (:mod:`~semiret.serving.writer`), so searches never wait on
    them for the GIL; False: in the serving process's threads. Milvus collections are written from the serving
    process either way (the work is Milvus's)."""

    def __post_init__(self):
        given = [flag for flag, value in (("--cross-encoder", self.cross_encoder), ("--colbert", self.colbert),
                                          ("--ltr", self.ltr)) if value is not None]
        if len(given) > 1:
            raise SemiretError(f"{' and '.join(given)} each rank searches' hits again: give one")
        if self.colbert_cache is not None and self.colbert is None:
            raise SemiretError("--colbert-cache keeps the token vectors of --colbert's model: give --colbert too")
        from semiret.search.learned_ranking import check_ltr_options  # (the search layer only where it serves)

        check_ltr_options(self.ltr, self.ltr_feature_index)
        if not self.indexes and self.data_dir is None:
            raise SemiretError("nothing to serve: give at least one --index DIR (or NAME=DIR), or a --data-dir")
        if self.data_dir is not None and self.backend is not None:
            raise SemiretError("--data-dir holds index directories: it does not go with --backend (Milvus "
                               "collections are made with `semiret index --backend`)")
        unknown = sorted(set(self.retrievers) - set(self.indexes))
        if unknown:
            raise SemiretError(f"--retriever names no served index: {', '.join(unknown)} (served: {', '.join(self.indexes)})")
        # a browser sends its origin without a path: https://app.example.com/ as given would never match it
        object.__setattr__(self, "cors_origins", [origin.strip().rstrip("/") for origin in self.cors_origins])
        for name in ("api_key", "read_api_key"):  # a secret file's newline: no HTTP header could send it
            key = getattr(self, name)
            if key is not None:
                object.__setattr__(self, name, key.strip())
                if not all(" " <= character <= "~" for character in key.strip()):
                    raise SemiretError(f"the {name.replace('_', ' ').replace('api', 'API')} holds a character "
                                       "other than printable ASCII, which HTTP headers do not carry alike from "
                                       "every client")
        if self.api_key is not None and not self.api_key:
            raise SemiretError("the API key is empty")
        if self.read_api_key is not None and (not self.read_api_key or self.read_api_key == self.api_key):
            raise SemiretError("the read-only API key is empty, or the same as the API key (--read-api-key)")
        if not (self.api_key or self.read_api_key) and not is_loopback(self.host):
            raise SemiretError(f"serving on {self.host} (not loopback) needs an API key: --api-key or SEMIRET_API_KEY "
                               "(or --read-api-key, for a server that only searches)")
        if self.backup_dir is not None and self.data_dir is not None and _within(self.backup_dir, self.data_dir):
            raise SemiretError(f"--backup-dir {self.backup_dir} is --data-dir {self.data_dir} or lies in it: each "
                               "backup would be served as an index, written and deleted over HTTP; keep backups "
                               "apart (on the same file system they still cost no space)")
        for name, value in (("max_request_bytes", self.max_request_bytes), ("max_batch", self.max_batch),
                            ("max_k", self.max_k), ("max_hits", self.max_hits), ("max_segments", self.max_segments)):
            if value < 1:
                raise SemiretError(f"{name} must be at least 1, got {value}")
        if self.log_level not in LOG_LEVELS:
            raise SemiretError(f"unknown log level {self.log_level!r} (known: {', '.join(LOG_LEVELS)})")
        if self.slow_query_ms is not None and not (isinstance(self.slow_query_ms, (int, float))
                                                   and math.isfinite(self.slow_query_ms) and self.slow_query_ms >= 0):
            raise SemiretError(f"slow_query_ms (--slow-query-ms) is a number of milliseconds, 0 or more, got "
                               f"{self.slow_query_ms!r}")
        if self.max_hits < self.max_k:  # (a query of the largest k, or none given, would be refused)
            raise SemiretError(f"max_hits ({self.max_hits}) must be at least max_k ({self.max_k}): a search of one "
                               "query may ask for max_k hits")

    @property
    def reads_need_key(self) -> bool:
        """Off loopback, or where a read-only key was given (it would say nothing otherwise): reads need a key.
        Keyless reads are answered to loopback host names only (:func:`loopback_host_header`)."""
        return not is_loopback(self.host) or self.read_api_key is not None

    @property
    def uvicorn_log_level(self) -> str:
        """uvicorn's own level: :attr:`log_level`, or info where that is higher and :attr:`access_log` is on (uvicorn
        writes its access lines at info: at warning, ``--access-log`` logged nothing)."""
        if self.access_log and LOG_LEVELS.index(self.log_level) < LOG_LEVELS.index("info"):
            return "info"
        return self.log_level

    def configure_logging(self) -> None:
        """Python's logging at :attr:`log_level` in this process (a worker process starts with none configured)."""
        logging.basicConfig(format="%(levelname)s: %(message)s")  # as `semiret`'s commands (no-op if configured)
        logging.getLogger().setLevel(self.log_level.upper())

    def to_environment(self) -> None:
        os.environ[SETTINGS_VARIABLE] = json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_environment(cls) -> "ServeSettings":
        try:
            return cls(**json.loads(os.environ[SETTINGS_VARIABLE]))
        except KeyError:
            raise SemiretError(f"{SETTINGS_VARIABLE} is not set: start the server with `semiret serve`") from None


def parse_retriever_specs(specs: list[str]) -> dict[str, str]:
    """``NAME=RETRIEVER`` arguments -> {index name: retriever name}."""
    retrievers: dict[str, str] = {}
    for spec in specs:
        name, separator, retriever = spec.partition("=")
        if not (separator and name and retriever):
            raise SemiretError(f"--retriever {spec!r}: expected NAME=RETRIEVER (an index name, a retriever)")
        retrievers[name] = retriever
    return retrievers


def parse_index_specs(specs: list[str], collections: bool = False) -> dict[str, str]:
    """``DIR`` or ``NAME=DIR`` arguments -> {name: directory}; a name is the directory's name unless given.
    ``collections``: they name Milvus collections (``COLLECTION`` or ``NAME=COLLECTION``), kept as given."""
    indexes: dict[str, str] = {}
    for spec in specs:
        name, separator, directory = spec.partition("=")
        if not separator:
            name, directory = (spec if collections else Path(spec).resolve().name), spec
        if not name or "/" in name:
            raise SemiretError(f"--index {spec!r}: an index name must be non-empty and hold no '/'")
        if name in indexes:
            raise SemiretError(f"two indexes are named {name!r}: name them (--index NAME=DIR)")
        indexes[name] = directory if collections else str(Path(directory).resolve())
    return indexes


def _within(folder: str, other: str) -> bool:
    """Whether ``folder`` is ``other`` or lies inside it (links followed)."""
    return Path(folder).resolve().is_relative_to(Path(other).resolve())


def loopback_host_header(host: str | None) -> bool:
    """Whether a request's ``Host`` header names this machine's loopback (``localhost``, ``127.0.0.1``, ``[::1]``,
    with any port), or is missing: a web page the browser was made to send here under another name (DNS rebinding)
    names that name, and may not read what a server without a key answers to local programs."""
    if host is None:
        return True
    name = host.strip().lower()
    if name.startswith("["):
        name = name[1:name.find("]")] if "]" in name else name
    elif name.count(":") == 1:
        name = name.partition(":")[0]
    return is_loopback(name.rstrip("."))


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
