"""``GET /metrics``: the server's figures in Prometheus's text format (Qdrant's and OpenSearch's ``/metrics``), what a
monitoring stack scrapes: requests by route, method, status and index, their durations, queries searched, and each
index's documents, deletions, segments and size as the scrape finds them.

With ``--workers N`` each worker process counts its own requests; ``semiret serve`` gives them one directory
(prometheus_client's multiprocess mode, ``PROMETHEUS_MULTIPROC_DIR``) so that whichever worker answers a scrape
reports every worker's counts summed.
"""

from __future__ import annotations

import os
import tempfile
import time
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector

from semiret.errors import SemiretError

MULTIPROCESS_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The text format every Prometheus reads (what ``generate_latest`` writes)."""
DURATION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""Seconds: from a BM25 search's half millisecond to a large batch of documents encoded on a CPU."""
INDEX_FIGURES = {"documents": ("semiret_index_documents", "Live documents"),
                 "deleted": ("semiret_index_deleted_documents", "Deleted documents not yet merged away"),
                 "segments": ("semiret_index_segments", "Segments"),
                 "size_bytes": ("semiret_index_size_bytes", "Bytes on disk")}
"""What ``GET /indexes/{name}`` describes of an index (its keys) exported as a gauge per index: name, help."""


@contextmanager
def worker_counts() -> Iterator[None]:
    """While the block runs (``--workers N``: before uvicorn starts the workers, which inherit it), a directory where
    every worker process keeps its counts for the others to read, removed afterwards; one a user set already in
    ``PROMETHEUS_MULTIPROC_DIR`` is theirs, used and kept."""
    if os.environ.get(MULTIPROCESS_VARIABLE):
        yield
        return
    with tempfile.TemporaryDirectory(prefix="semiret-metrics-") as directory:
        os.environ[MULTIPROCESS_VARIABLE] = directory
        try:
            yield
        finally:
            del os.environ[MULTIPROCESS_VARIABLE]


class Telemetry:
    """The counters of one server process, and the scrape's text."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.requests = Counter("semiret_requests", "HTTP requests answered",
                                ["method", "route", "status", "index"], registry=self.registry)
        self.durations = Histogram("semiret_request_duration_seconds", "Time to answer an HTTP request",
                                   ["method", "route"], buckets=DURATION_BUCKETS, registry=self.registry)
        self.queries = Counter("semiret_search_queries", "Queries searched (a search request may hold many)",
                               ["index"], registry=self.registry)

    def observe(self, method: str, route: str, status: int, index: str, seconds: float) -> None:
        self.requests.labels(method, route, str(status), index).inc()
        self.durations.labels(method, route).observe(seconds)

    def exposition(self, describe: Iterable[Callable[[], dict]]) -> bytes:
        """The text a scrape gets: the counters (every worker's, summed, in multiprocess mode) and a gauge per
        index figure from ``describe`` (each served index's ``describe``)."""
        scrape = CollectorRegistry(auto_describe=False)
        if os.environ.get(MULTIPROCESS_VARIABLE):
            MultiProcessCollector(scrape)
        else:
            scrape.register(_Collected(self.registry))
        described = []
        for each in describe:
            try:
                described.append(each())
            except (SemiretError, OSError):  # an index that no longer opens (/readyz names it): no figures
                continue
        scrape.register(_IndexFigures(described))
        return generate_latest(scrape)


class RequestMetrics:
    """ASGI middleware counting and timing every HTTP request by its route's template (``/indexes/{name}/search``,
    not the path asked, so that the series stay few), and by the served index it reached (through an alias too;
    none for a request refused before: a client's made-up names never become series)."""

    def __init__(self, app, telemetry: Telemetry):
        self.app, self.telemetry = app, telemetry

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started, status = time.perf_counter(), 500

        async def sending(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            served = scope.get("state", {}).get("metrics_index", "")  # set once a request found its index
            self.telemetry.observe(scope["method"], getattr(scope.get("route"), "path", "unmatched"), status,
                                   served, time.perf_counter() - started)


class _Collected:
    """A registry's metrics as one collector of another registry (the scrape's)."""

    def __init__(self, registry: CollectorRegistry):
        self.collect = registry.collect


class _IndexFigures:
    """Each served index's figures as gauges, read when scraped (not counted: every worker sees the same index)."""

    def __init__(self, described: list[dict]):
        self.described = described

    def collect(self):
        for figure, (name, help_text) in INDEX_FIGURES.items():
            gauge = GaugeMetricFamily(name, help_text, labels=["index"])
            for info in self.described:
                if info.get(figure) is not None:  # a Milvus collection reports no segments or size
                    gauge.add_metric([info["name"]], float(info[figure]))
            yield gauge
