"""``GET /metrics``: requests counted by route template, method, status and index, their durations, queries searched
and each index's figures, in Prometheus's text format; read access as the server's other reads."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from semiret.search import BM25Retriever
from semiret.serving import ServeSettings, create_app

from helpers import LocalClient, TINY_DOCS

KEY = {"X-API-Key": "key"}


def scraped(client, headers=None) -> dict[tuple, float]:
    """Every sample of a scrape: (name, sorted labels) -> value."""
    answer = client.get("/metrics", headers=headers or {})
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(answer.text) for sample in family.samples}


def _requests(samples, **labels) -> float:
    wanted = {"method": "POST", "route": "/indexes/{name}/search", "status": "200", "index": "docs", **labels}
    return samples.get(("semiret_requests_total", tuple(sorted(wanted.items()))), 0.0)


def test_requests_queries_and_indexes_are_counted(tmp_path):
    BM25Retriever.build(TINY_DOCS, tmp_path / "index")
    settings = ServeSettings({"docs": str(tmp_path / "index")}, api_key="key", write_process=False,
                             max_request_bytes=10_000)
    with LocalClient(create_app(settings)) as client:
        before = scraped(client)
        assert _requests(before) == 0 and before[("semiret_index_documents", (("index", "docs"),))] == len(TINY_DOCS)
        for _ in range(3):
            assert client.post("/indexes/docs/search", json={"queries": ["cats", "dogs"]}).status_code == 200
        assert client.get("/indexes/docs/search", params={"q": "cats"}).status_code == 200
        assert client.post("/indexes/nope/search", json={"queries": ["cats"]}).status_code == 404
        assert client.post("/indexes/docs/search", json={"queries": []}).status_code == 200
        assert client.post("/indexes/docs/search", json={"k": 1}).status_code == 422
        assert client.post("/indexes/docs/search", content=b"x" * 20_000,
                           headers={"content-type": "application/json"}).status_code == 413
        assert client.get("/no/such/route").status_code == 404
        assert client.post("/indexes/docs/documents/delete", json={"ids": [TINY_DOCS[0].id]},
                           headers=KEY).status_code == 200
        after = scraped(client)
        assert _requests(after) == 4 and _requests(after, method="GET") == 1 and _requests(after, status="422") == 1
        assert _requests(after, status="404", index="") == 1  # an index the server has not: no series of its name
        assert _requests(after, route="unmatched", method="GET", status="404", index="") == 1
        assert _requests(after, status="413", route="unmatched", index="") == 1  # refused before any route
        assert after[("semiret_search_queries_total", (("index", "docs"),))] == 3 * 2 + 1
        durations = ("semiret_request_duration_seconds_count", (("method", "POST"), ("route", "/indexes/{name}/search")))
        assert after[durations] == 6 and after[(durations[0].replace("count", "sum"), durations[1])] > 0
        assert after[("semiret_index_documents", (("index", "docs"),))] == len(TINY_DOCS) - 1
        assert after[("semiret_index_deleted_documents", (("index", "docs"),))] == 1
        assert after[("semiret_index_segments", (("index", "docs"),))] == 1
        assert after[("semiret_index_size_bytes", (("index", "docs"),))] > 0


def test_metrics_are_read_as_the_other_reads(tmp_path):
    BM25Retriever.build(TINY_DOCS, tmp_path / "index")
    settings = ServeSettings({"docs": str(tmp_path / "index")}, api_key="key", host="0.0.0.0", write_process=False)
    with LocalClient(create_app(settings)) as client:
        assert client.get("/metrics").status_code == 401
        assert scraped(client, KEY)[("semiret_index_segments", (("index", "docs"),))] == 1
        # names a client makes up never become series: refused before their index is found, they count under none
        for number in range(3):
            assert client.get(f"/indexes/made-up-{number}").status_code == 401
            assert client.post(f"/indexes/other-{number}/search", content=b"x", headers={
                "content-type": "text/plain", **KEY}).status_code == 415
        labels = {dict(labels).get("index") for _, labels in scraped(client, KEY)}
        assert labels == {"", "docs", None}  # None: the gauges' own samples without the label, if any


def test_an_index_that_no_longer_opens_leaves_the_rest_of_the_metrics(tmp_path):
    BM25Retriever.build(TINY_DOCS, tmp_path / "a")
    BM25Retriever.build(TINY_DOCS, tmp_path / "b")
    settings = ServeSettings({"a": str(tmp_path / "a"), "b": str(tmp_path / "b")}, write_process=False)
    with LocalClient(create_app(settings)) as client:
        assert client.post("/indexes/a/search", json={"queries": ["cats"]}).status_code == 200
        (tmp_path / "b" / "meta.json").write_text("{broken")
        after = scraped(client)
        assert after[("semiret_search_queries_total", (("index", "a"),))] == 1
        assert ("semiret_index_documents", (("index", "a"),)) in after
        assert ("semiret_index_documents", (("index", "b"),)) not in after
        assert client.get("/readyz").status_code == 503


def test_searches_slower_than_the_threshold_are_logged(tmp_path, caplog):
    """A server's log said nothing of a search (uvicorn's access log off, no level to set): which query was slow
    could not be found. `--slow-query-ms` logs each search slower than it (Elasticsearch's search slow log), with
    its index, time, queries and options; `--log-level` and `--access-log` set the rest."""
    import logging

    import pytest
    from typer.testing import CliRunner

    from semiret.cli import app
    from semiret.errors import SemiretError

    BM25Retriever.build(TINY_DOCS, tmp_path / "index")
    with caplog.at_level(logging.WARNING, logger="semiret.serving.app"):
        for threshold, logged in ((0.0, True), (60_000.0, False), (None, False)):
            caplog.clear()
            settings = ServeSettings({"docs": str(tmp_path / "index")}, write_process=False, slow_query_ms=threshold)
            with LocalClient(create_app(settings)) as client:
                body = {"queries": ["cats chase", "dogs"], "k": 3, "filter": {"$text": "cats"}}
                took = client.post("/indexes/docs/search", json=body).json()["took_ms"]
                assert client.get("/indexes/docs/search", params={"q": "mailman"}).status_code == 200
            slow = [r.getMessage() for r in caplog.records if r.getMessage().startswith("slow search")]
            assert len(slow) == (2 if logged else 0), threshold
            if logged:
                assert slow[0].startswith(f"slow search of index docs: {took:.1f} ms for 2 queries "
                                          '["cats chase", "dogs"], {"filter": {"$text": "cats"}, "k": 3}')
                assert '["mailman"], {"k": 10, "with_text": false}' in slow[1]
    for bad in ({"slow_query_ms": -1.0}, {"slow_query_ms": float("nan")}, {"log_level": "loud"}):
        with pytest.raises(SemiretError, match="slow_query_ms|unknown log level"):
            ServeSettings({"docs": str(tmp_path / "index")}, **bad)
    # uvicorn writes its access lines at info: --access-log lowers uvicorn's level to it, not semiret's
    quiet = ServeSettings({"docs": str(tmp_path / "index")}, access_log=True)
    assert (quiet.uvicorn_log_level, quiet.log_level) == ("info", "warning")
    assert ServeSettings({"docs": str(tmp_path / "index")}, access_log=True, log_level="debug").uvicorn_log_level == \
        "debug"
    assert ServeSettings({"docs": str(tmp_path / "index")}).uvicorn_log_level == "warning"
    refused = CliRunner().invoke(app, ["serve", "--index", str(tmp_path / "index"), "--log-level", "loud"])
    assert refused.exit_code != 0 and "unknown log level 'loud'" in refused.output
