"""``semiret.serving.client.Client``: the HTTP API through methods named as the Retriever's, answering semiret's own
types, equal to what the index answers in-process; errors as :class:`ServerError` with the server's status; and one
real server reached over HTTP (a kept-alive connection, a closed one opened again)."""

from __future__ import annotations

import pytest

from semiret.data import Document
from semiret.errors import SemiretError
from semiret.search import BM25Retriever
from semiret.serving import ServeSettings, create_app
from semiret.serving.client import Client, ServerError
from semiret.types import SearchHits

from helpers import LocalClient, client_of

DOCS = [Document(f"d{i}", text, metadata={"year": 2000 + i, "kind": "odd" if i % 2 else "even"})
        for i, text in enumerate(["statins lower cholesterol", "aspirin and heart attacks", "statins and the heart",
                                  "sleep and memory", "heart failure trials of statins", "diet and blood pressure"])]


def in_process(app) -> Client:
    """A client whose requests go to ``app`` in this process (FastAPI's test client), not over a socket."""
    return client_of(LocalClient(app), api_key="key")


@pytest.fixture
def served(tmp_path):
    settings = ServeSettings({}, api_key="key", write_process=False, data_dir=str(tmp_path / "data"),
                             backup_dir=str(tmp_path / "backups"))
    with LocalClient(create_app(settings)) as app_client:
        yield in_process(app_client.app), tmp_path


def test_the_client_answers_as_the_index_does_in_process(served):
    client, tmp_path = served
    assert client.create_index("notes", "bm25", {"k1": 1.2})["documents"] == 0
    assert client.add("notes", DOCS[:4], batch_size=3) == 4 and client.add("notes", [DOCS[4].to_record(), DOCS[5]]) == 2
    local = BM25Retriever.build(DOCS, tmp_path / "local", k1=1.2)
    for query in ("statins heart", "blood pressure"):
        assert [tuple(h) for h in client.search("notes", query, k=4)] == [tuple(h) for h in local.search(query, k=4)]
    both = client.search("notes", ["statins", "memory"], k=2, with_text=True, filter={"kind": "even"})
    expected = local.search(["statins", "memory"], k=2, filter={"kind": "even"})
    assert [[h.id for h in hits] for hits in both] == [[h.id for h in hits] for hits in expected]
    assert isinstance(both, SearchHits) and both.ids == expected.ids and len(both) == 2  # a batch, as in process
    import copy
    import pickle

    for kept in (copy.copy(both), copy.deepcopy(both)):  # copies keep what the answer carried
        assert type(kept) is type(both) and kept[0][0].text == both[0][0].text and kept[0][0].metadata["kind"] == "even"
    sent = pickle.loads(pickle.dumps(both))
    assert type(sent) is type(both) and sent.ids == both.ids and type(sent[0][0]) is type(both[0][0])
    assert both.scores == [pytest.approx(scores) for scores in expected.scores] and both[0][0].text == expected[0][0].text
    assert both[0][0].document == local.index.get_document(both[0][0].id) and both[0][0].metadata["kind"] == "even"
    marked = client.search("notes", "statins", k=1, highlight=True)[0]
    assert marked.highlights and "<em>statins</em>" in marked.highlights[0]
    shaped = client.search("notes", "statins", k=1, highlight={"tags": ["[", "]"], "fragment_words": 3})[0]
    assert shaped.highlights == local.highlight("statins", shaped.id, tags=("[", "]"), fragment_words=3)
    assert client.analyze("notes", "statins heart") == local.analyze("statins heart")
    grouped = client.search("notes", "heart", k=2, group_by="kind")
    assert [(h.id, h.group) for h in grouped] == [(h.id, h.group) for h in local.search("heart", k=2, group_by="kind")]
    assert {h.group for h in grouped} == {"even", "odd"}
    assert client.count("notes") == 6 and client.count("notes", {"year": {"gte": 2004}}) == 2
    assert client.facet("notes", "kind") == [("even", 3), ("odd", 3)]
    assert [d.id for d in client.iter_documents("notes", page_size=4)] == sorted(d.id for d in DOCS)
    assert client.get_document("notes", "d3") == DOCS[3] and client.get_document("notes", "nope") is None
    assert client.get_documents("notes", ["d3", "nope", "d3"]) == {"d3": DOCS[3]}
    assert [h.id for h in client.recommend("notes", ["d0"], k=2)] == [h.id for h in local.recommend(["d0"], k=2)]
    explained = client.explain("notes", "statins heart", "d2")
    assert explained.score == pytest.approx(local.explain("statins heart", "d2").score, rel=1e-6)
    assert client.delete("notes", ids=["d0"]) == 1 and client.delete("notes", filter={"kind": "odd"}) == 3
    assert client.count("notes") == 2 and client.describe("notes")["deleted"] == 4
    # backups, restores and aliases
    backup = client.backup("notes")["name"]
    assert [b["name"] for b in client.backups("notes")] == [backup]
    assert client.restore_index("notes-copy", backup)["documents"] == 2
    assert client.set_alias("live", "notes") is None and client.set_alias("live", "notes-copy") == "notes"
    assert client.aliases() == {"live": "notes-copy"} and client.count("live") == 2
    client.remove_alias("live")
    client.delete_index("notes-copy")
    assert [index["name"] for index in client.indexes()] == ["notes"] and client.ready()
    assert 'semiret_search_queries_total{index="notes"}' in client.metrics()



def test_a_server_that_does_not_answer_is_not_ready():
    """``ready()`` is False where nothing listens (it raised ConnectionRefusedError: a readiness loop crashed)."""
    from semiret.serving.process import free_port

    assert Client(f"http://127.0.0.1:{free_port()}").ready() is False

def test_errors_carry_the_server_status_and_words(served):
    client, _ = served
    with pytest.raises(ServerError) as missing:
        client.search("nowhere", "statins")
    assert missing.value.status == 404 and "no index 'nowhere'" in str(missing.value)
    client.create_index("notes")
    with pytest.raises(ServerError) as taken:
        client.create_index("notes")
    assert taken.value.status == 409
    with pytest.raises(ServerError) as bad:
        client.search("notes", "statins", filter={"year": {"after": 1}})
    assert bad.value.status == 422 and bad.value.detail[0]["loc"] == ["body", "filter"]
    keyless = Client("http://testserver", transport=client._transport)  # the same app, no key
    with pytest.raises(ServerError) as refused:
        keyless.add("notes", DOCS)
    assert refused.value.status == 401
    with pytest.raises(SemiretError, match="a server's URL is"):
        Client("localhost:8000")
    import semiret.serving

    assert semiret.serving.Client is Client  # as qdrant_client.QdrantClient: at the package's top
    assert client.get_document("notes", "nope") is None
    with pytest.raises(ServerError) as no_index:  # "no index 'documents'": not a missing document
        client.get_document("documents", "a")
    assert no_index.value.status == 404
    redirected = Client("http://testserver", transport=lambda *_: (308, b""))  # a proxy's redirect, not followed
    with pytest.raises(ServerError) as moved:
        redirected.indexes()
    assert moved.value.status == 308
    with pytest.raises(ServerError, match="not JSON"):
        Client("http://testserver", transport=lambda *_: (200, b"<html>")).indexes()


def test_the_client_keeps_within_a_servers_lower_limits(tmp_path):
    """Against a server with a small ``--max-batch`` and ``--max-k``, the client's defaults fit: adds and pages as
    large as the server takes, ``k`` the server's default (as a request without it gets)."""
    from semiret import __version__

    settings = ServeSettings({}, api_key="key", write_process=False, data_dir=str(tmp_path / "data"), max_batch=5,
                             max_k=3)
    with LocalClient(create_app(settings)) as app_client:
        client = in_process(app_client.app)
        assert client.about() == {"name": "semiret", "version": __version__, "writable": True,
                                  "limits": {"max_batch": 5, "max_k": 3, "max_hits": settings.max_hits,
                                             "max_request_bytes": settings.max_request_bytes}}
        client.create_index("notes")
        documents = [{"_id": f"d{i:02d}", "text": f"statins trial {i}"} for i in range(12)]
        assert client.add("notes", documents) == 12 and client.count("notes") == 12
        assert len(client.search("notes", "statins")) == 3 and len(client.recommend("notes", ["d00"])) == 3
        assert [d.id for d in client.iter_documents("notes")] == [d["_id"] for d in documents]
        with pytest.raises(ServerError, match="at most 3"):
            client.search("notes", "statins", k=4)  # asked for: the server's answer
        sent = client._transport
        older = Client("http://testserver", api_key="key", transport=lambda method, path, body, headers: (
            (404, b'{"detail": "Not Found"}') if path == "/" else sent(method, path, body, headers)))
        assert older.add("notes", documents[:2]) == 2  # a server without GET /: the client's own batch size
        with pytest.raises(ServerError) as missing:
            older.about()
        assert missing.value.status == 404


def test_an_add_of_several_requests_checks_every_document_before_the_first(served):
    """A bad document or an id repeated across the call's requests is refused before anything is sent; a request the
    server refuses after others were answered says how many were added."""
    client, _ = served
    client.create_index("notes")
    documents = [{"_id": f"d{i}", "text": "statins"} for i in range(25)]
    with pytest.raises(SemiretError, match="document 21: .*text"):
        client.add("notes", documents[:21] + [{"_id": "bad"}] + documents[21:], batch_size=10)
    with pytest.raises(SemiretError, match="document 24: id 'd3' repeats document 3"):
        client.add("notes", documents[:24] + [{"_id": "d3", "text": "again"}], batch_size=10)
    for bad, problem in (({"_id": " ", "text": "x"}, "empty document id"),
                         ({"_id": "a\nb", "text": "x"}, "control character"),
                         ({"_id": "s", "text": "half \ud800"}, "lone surrogate"),
                         ({"_id": "n", "text": "x", "metadata": {"x": float("nan")}}, "NaN or Infinity"),
                         (Document("i", "x", metadata={"x": [float("inf")]}), "NaN or Infinity")):
        with pytest.raises(SemiretError, match=f"document 21\\b.*{problem}"):  # (the server's 422s, after 20 added)
            client.add("notes", documents[:21] + [bad] + documents[21:], batch_size=10)
    assert client.count("notes") == 0
    for wrong in (0, -1):
        with pytest.raises(SemiretError, match="batch_size is a positive number"):
            client.add("notes", documents, batch_size=wrong)
    sent = client._transport

    def refusing_the_third_request(method, path, body, headers, calls=[]):
        if method == "PUT" and path.endswith("/documents"):
            calls.append(path)
            if len(calls) == 3:
                return 503, b'{"detail": "the write queue is full"}'
        return sent(method, path, body, headers)

    partial = Client("http://testserver", api_key="key", transport=refusing_the_third_request)
    with pytest.raises(ServerError, match="documents 0 to 19 were added; from document 20 .* none were") as failed:
        partial.add("notes", documents, batch_size=10)
    assert failed.value.added == 20 and failed.value.status == 503 and client.count("notes") == 20


def test_a_failed_connection_is_dropped_and_creates_are_never_sent_twice(monkeypatch):
    """After a timeout or a refused connection the thread's next request opens a new connection; a connection the
    server closed is tried once more, except for a request the server may have acted on and would answer otherwise
    a second time (creating an index, deleting, setting an alias)."""
    import http.client

    sent = []

    class Flaky:
        failures = [TimeoutError("timed out")]

        def __init__(self, *args, **kwargs):
            self.closed = False

        def request(self, method, path, body=None, headers=None):
            if getattr(self, "stale", False):  # the server closed it while idle: nothing reaches the server
                raise BrokenPipeError("broken pipe")
            sent.append((method, path))
            if Flaky.failures:
                raise Flaky.failures.pop(0)

        def getresponse(self):
            return type("Answer", (), {"status": 200, "read": lambda self: b'{"indexes": []}'})()

        def close(self):
            self.closed = True

    monkeypatch.setattr(http.client, "HTTPConnection", Flaky)
    client = Client("http://127.0.0.1:9")
    with pytest.raises(TimeoutError):
        client.indexes()
    assert client.indexes() == [] and len(sent) == 2  # a new connection, not the broken one
    Flaky.failures = [http.client.RemoteDisconnected("closed while idle")]
    assert client.indexes() == [] and len(sent) == 4  # a read: once more
    Flaky.failures = [http.client.RemoteDisconnected("closed while idle")]
    with pytest.raises(http.client.RemoteDisconnected):
        client.create_index("notes")
    assert sent[-1] == ("PUT", "/indexes/notes") and len(sent) == 5  # a create: never twice
    assert client.indexes() == []
    client._local.connection.stale = True  # idle past the server's keep-alive
    assert client.create_index("notes") == {"indexes": []} and sent[-1] == ("PUT", "/indexes/notes")  # a new one
    prefixed = Client("http://127.0.0.1:9/api")  # behind a path: still a create, never sent twice
    Flaky.failures = [http.client.RemoteDisconnected("closed")]
    with pytest.raises(http.client.RemoteDisconnected):
        prefixed.create_index("notes")
    assert sent.count(("PUT", "/api/indexes/notes")) == 1
    # deletes and alias sets, which a second time answer otherwise (0 deleted, a 404, the new target as the old)
    for call, request in ((lambda: client.delete("notes", ids=["d1"]), ("POST", "/indexes/notes/documents/delete")),
                          (lambda: client.delete_index("notes"), ("DELETE", "/indexes/notes")),
                          (lambda: client.set_alias("live", "notes"), ("PUT", "/aliases/live"))):
        Flaky.failures = [http.client.RemoteDisconnected("closed")]
        with pytest.raises(http.client.RemoteDisconnected):
            call()
        assert sent.count(request) == 1, request


def test_a_real_server_over_http(tmp_path):
    from semiret.serving.process import ServerProcess

    BM25Retriever.build(DOCS, tmp_path / "index")
    with ServerProcess({"docs": tmp_path / "index"}, api_key="key") as server:
        client = Client(server.url, api_key="key")
        assert [h.id for h in client.search("docs", "statins", k=3)] == [
            h.id for h in BM25Retriever.open(tmp_path / "index").search("statins", k=3)]
        client._local.connection.close()  # as a server closes an idle connection: the next request reconnects
        assert client.add("docs", [Document("new", "statins statins statins")]) == 1
        assert client.search("docs", "statins", k=1)[0].id == "new"


def test_add_splits_its_requests_by_the_servers_byte_limit_too(tmp_path):
    """More documents than ``--max-request-bytes`` takes in one body go in several requests, each within it: the
    whole call is added, not its first request alone."""
    settings = ServeSettings({}, api_key="key", write_process=False, data_dir=str(tmp_path / "data"),
                             max_request_bytes=2000)
    documents = [Document(f"d{n}", f"statins and the heart, note number {n} " + "word " * (5 + n % 30))
                 for n in range(40)]
    with LocalClient(create_app(settings)) as app_client:
        client = in_process(app_client.app)
        sent = []
        send = client._transport
        client._transport = lambda method, url, data, headers: sent.append(len(data or b"")) or send(method, url,
                                                                                                      data, headers)
        client.create_index("notes", "bm25")
        assert client.add("notes", documents) == 40
        puts = [size for size in sent if size > 200]
        assert len(puts) > 1 and max(puts) <= 2000
        assert client.count("notes") == 40
        huge = Document("huge", "word " * 1000)  # alone over the limit: refused before the first is sent
        with pytest.raises(SemiretError, match=r"document 1 is 5,0\d\d bytes as JSON, over the server's "
                                               r"--max-request-bytes \(2,000\).*nothing was sent"):
            client.add("notes", [Document("small", "statins"), huge])
        assert client.count("notes") == 40


def test_documents_are_retrieved_many_at_once(tmp_path):
    """``Client.get_documents`` made one request per id (a RAG app reading its hits' documents: a thousand round
    trips); ``POST .../documents/retrieve`` reads many in one (Qdrant's retrieve, OpenSearch's _mget), in the order
    asked, each once, and names the ids the index does not hold. A server older than it is read one id at a time."""
    BM25Retriever.build(DOCS, tmp_path / "notes")
    BM25Retriever.build(DOCS[:2], tmp_path / "bare", store_texts=False)
    app = create_app(ServeSettings({"notes": str(tmp_path / "notes"), "bare": str(tmp_path / "bare")},
                                   write_process=False, max_batch=3))
    with LocalClient(app) as http:
        answer = http.post("/indexes/notes/documents/retrieve", json={"ids": ["d4", "nope", "d4"]})
        assert answer.status_code == 200
        assert answer.json() == {"documents": [DOCS[4].to_record()], "missing": ["nope"]}
        answer = http.post("/indexes/notes/documents/retrieve", json={"ids": ["d1", "d0"]})
        assert answer.json() == {"documents": [DOCS[1].to_record(), DOCS[0].to_record()], "missing": []}
        assert http.post("/indexes/bare/documents/retrieve", json={"ids": [0, "d1"]}).json() == {
            "documents": [{"_id": "d1"}], "missing": ["0"]}  # (an integer id read as its string)
        assert http.post("/indexes/notes/documents/retrieve", json={"ids": ["d1"] * 4}).status_code == 413
        assert http.post("/indexes/nope/documents/retrieve", json={"ids": ["d1"]}).status_code == 404
        calls = []
        client = client_of(http)
        sent = client._transport

        def counted(method, route, body, headers):
            calls.append(route)
            return sent(method, route, body, headers)

        client._transport = counted
        assert client.get_documents("notes", ["d5", "d0", "nope", "d3", "d5"]) == {d.id: d for d in DOCS
                                                                                  if d.id in ("d5", "d0", "d3")}
        assert calls.count("/indexes/notes/documents/retrieve") == 2  # 4 distinct ids in requests of --max-batch 3

        def older(method, route, body, headers):  # a server from before documents/retrieve: its GET route's 405
            return (405, b'{"detail": "Method Not Allowed"}') if route.endswith("/retrieve") else sent(
                method, route, body, headers)

        client._transport = older
        assert client.get_documents("notes", ["d2", "nope"]) == {"d2": DOCS[2]}


def test_an_async_client_awaits_what_the_client_answers_and_calls_at_once(tmp_path):
    """``AsyncClient`` (for an asyncio RAG service): every ``Client`` method awaited, run in threads of its own so that
    calls made at once wait on the network at once, ``iter_documents`` as an async iteration, errors as ``Client``'s."""
    import asyncio
    import threading
    import time

    from semiret.serving import AsyncClient

    BM25Retriever.build(DOCS, tmp_path / "notes")
    queries = ["statins", "heart", "sleep memory", "diet blood pressure"]
    with LocalClient(create_app(ServeSettings({"notes": str(tmp_path / "notes")}, write_process=False))) as http:
        state = {"inside": 0, "most": 0, "threads": set()}
        counting, one_at_a_time = threading.Lock(), threading.Lock()

        def network(method, route, body, headers):
            with counting:
                state["inside"] += 1
                state["most"] = max(state["most"], state["inside"])
                state["threads"].add(threading.current_thread().name)
            time.sleep(0.05)  # the network's wait, during which the other calls go on
            try:
                with one_at_a_time:  # (the in-process test client takes one request at a time)
                    answer = http.request(method, route, content=body, headers=headers)
            finally:
                with counting:
                    state["inside"] -= 1
            return answer.status_code, answer.content

        async def use():
            async with AsyncClient("http://testserver", transport=network, max_connections=4) as client:
                found = await asyncio.gather(*(client.search("notes", query, k=3) for query in queries))
                documents = [document async for document in client.iter_documents("notes", page_size=4)]
                with pytest.raises(ServerError, match="404"):
                    await client.count("nope")
                return found, documents

        found, documents = asyncio.run(use())
        expected = client_of(http)
        assert [[hit.id for hit in hits] for hits in found] == [[hit.id for hit in expected.search("notes", query, k=3)]
                                                                  for query in queries]
        assert documents == list(expected.iter_documents("notes"))
        assert state["most"] > 1 and all(name.startswith("semiret-client") for name in state["threads"])
    for name in ("_call", "nothing", "close_all"):
        with pytest.raises(AttributeError):
            getattr(AsyncClient(), name)
    with pytest.raises(SemiretError, match="max_connections must be a whole number, at least 1"):
        AsyncClient(max_connections=0)


def test_a_search_returns_only_the_fields_asked_for(tmp_path):
    """``with_fields`` (Qdrant's with_payload list, OpenSearch's _source): a RAG app reading only the text and one
    metadata field got every hit's whole document with ``with_text``."""
    docs = [Document("a", "statins and the heart", "Statins", {"year": 2020, "venue": {"name": "v1", "city": "x"},
                                                               "tags": ["t"]}),
            Document("b", "statins lower cholesterol", metadata={"year": 2021})]
    BM25Retriever.build(docs, tmp_path / "notes")
    with LocalClient(create_app(ServeSettings({"notes": str(tmp_path / "notes")}, write_process=False))) as http:
        def rows(fields):
            answer = http.post("/indexes/notes/search", json={"queries": ["statins"], "with_fields": fields})
            assert answer.status_code == 200, answer.text
            return {row["id"]: {k: v for k, v in row.items() if k not in ("id", "score")}
                    for row in answer.json()["results"][0]}
        assert rows(["text"]) == {"a": {"text": "statins and the heart"}, "b": {"text": "statins lower cholesterol"}}
        assert rows(["title", "metadata.venue.name", "metadata.year"]) == {
            "a": {"title": "Statins", "metadata": {"venue": {"name": "v1"}, "year": 2020}},
            "b": {"title": "", "metadata": {"year": 2021}}}  # (b has no venue: nothing of it)
        assert rows(["metadata"])["a"] == {"metadata": docs[0].metadata}
        whole = http.post("/indexes/notes/search", json={"queries": ["statins"], "with_text": True}).json()
        assert rows(["title", "text", "metadata"]) == {row["id"]: {k: v for k, v in row.items()
                                                                    if k not in ("id", "score")}
                                                        for row in whole["results"][0]}
        for bad in (["body"], ["metadata."], [], ["metadata..x"]):
            refused = http.post("/indexes/notes/search", json={"queries": ["statins"], "with_fields": bad})
            assert refused.status_code == 422, bad
        hit = client_of(http).search("notes", "statins", with_fields=["metadata.year"])[0]
        assert hit.metadata == {"year": 2020} and hit.text == ""


def test_vectors_brought_by_documents_and_queries_over_http(served):
    import numpy as np

    from semiret.search import VectorsRetriever

    client, tmp_path = served
    rng = np.random.default_rng(3)
    documents = [Document(f"v{i}", f"text {i}", metadata={"kind": "odd" if i % 2 else "even"},
                          vector=rng.normal(size=5)) for i in range(20)]
    assert client.create_index("vectors", "vectors", {"dim": 5})["documents"] == 0
    assert client.add("vectors", documents[:10]) == 10
    assert client.add("vectors", [{**d.to_record(), "vector": d.vector.tolist()} for d in documents[10:]]) == 10
    local = VectorsRetriever.build(documents, tmp_path / "local")
    query = rng.normal(size=5)
    served_hits = client.search("vectors", query, k=4, filter={"kind": "odd"})
    local_hits = local.search(query, k=4, filter={"kind": "odd"})
    assert [h.id for h in served_hits] == [h.id for h in local_hits]
    assert [h.score for h in served_hits] == pytest.approx([h.score for h in local_hits], rel=1e-5)
    batch = client.search("vectors", [documents[2].vector, list(documents[7].vector)], k=1)
    assert batch.ids == [["v2"], ["v7"]]
    assert client.facet("vectors", "kind", query=query, depth=5) == local.facet("kind", query=query, depth=5)
    with pytest.raises(SemiretError, match="one query"):
        client.facet("vectors", "kind", query=[query, query])
    for body, message in (({"vectors": [[1.0, 2.0]]}, "5-dimensional"),
                          ({"vectors": [[1.0, "2"]]}, "valid number"),
                          ({"queries": ["x"], "vectors": [[1.0] * 5]}, "one of the two"),
                          ({"vectors": [[1.0] * 5], "highlight": True}, "highlight cannot read them"),
                          ({"queries": ["text"]}, "no model to embed query texts")):
        with pytest.raises(ServerError, match=message) as raised:
            client._call("POST", "/indexes/vectors/search", body)
        assert raised.value.status == 422
    with pytest.raises(ServerError, match="'novector' has no vector") as raised:
        client.add("vectors", [Document("novector", "text")])
    assert client.count("vectors") == 20
    client.create_index("words", "bm25")
    client.add("words", DOCS)
    with pytest.raises(ServerError, match="searched by query texts") as raised:
        client.search("words", [0.1, 0.2])
    assert raised.value.status == 422


def test_a_batch_of_searches_each_with_its_own_settings(served):
    client, tmp_path = served
    client.create_index("notes", "bm25")
    client.add("notes", DOCS)
    local = BM25Retriever.build(DOCS, tmp_path / "local")
    searches = [{"queries": "statins heart", "k": 2},
                {"queries": ["statins", "memory"], "k": 1, "filter": {"kind": "odd"}},
                {"queries": "heart", "k": 3, "group_by": "kind", "with_text": True}]
    answers = client.search_batch("notes", searches)
    assert answers[0].ids == [[h.id for h in local.search("statins heart", k=2)]]
    assert answers[1].ids == local.search(["statins", "memory"], k=1, filter={"kind": "odd"}).ids
    grouped = local.search("heart", k=3, group_by="kind")
    assert answers[2].ids == [[h.id for h in grouped]] and answers[2][0][0].group == grouped[0].group
    assert answers[2][0][0].text == DOCS[int(grouped[0].id[1:])].text
    with pytest.raises(ServerError) as raised:  # a bad setting is named where it is in the batch
        client._call("POST", "/indexes/notes/search/batch", {"searches": [{"queries": ["x"]},
                                                                          {"queries": ["x"], "group_size": 2}]})
    assert raised.value.status == 422 and "searches" in str(raised.value) and "group_size" in str(raised.value)
    detail = client._transport("POST", client._base + "/indexes/notes/search/batch", b'{"searches": [{"queries": '
                               b'["x"]}, {"queries": ["x"], "group_size": 2}]}', client._headers)[1]
    assert '"loc":["body","searches",1,"group_size"]' in detail.decode()
    with pytest.raises(ServerError) as raised:
        client._call("POST", "/indexes/notes/search/batch", {"searches": [{"queries": ["x"], "k": 900}] * 112})
    assert raised.value.status == 413 and "100,800 hits" in str(raised.value)  # each search within the limit


def test_a_batch_is_checked_whole_before_a_search_runs_and_runs_in_the_pool(served, monkeypatch):
    from semiret.serving import app as app_module

    client, tmp_path = served
    client.create_index("notes", "bm25")
    client.add("notes", DOCS)
    ran = []
    searched = app_module.ServedIndex.search
    monkeypatch.setattr(app_module.ServedIndex, "search", lambda self, *a, **k: ran.append(1) or searched(self, *a, **k))
    with pytest.raises(ServerError, match="group_size"):
        client.search_batch("notes", [{"queries": "statins"}, {"queries": "heart", "group_size": 2}])
    assert not ran  # the bad last search refused before the first ran
    inline = []
    monkeypatch.setattr(app_module, "run_in_threadpool", _counting(app_module.run_in_threadpool, inline))
    assert len(client.search_batch("notes", [{"queries": "statins"}] * 5)) == 5
    pooled = [f for f in inline if getattr(f, "__name__", "") == "<lambda>"]  # the searches (patched above)
    assert len(pooled) == 5 and len(ran) == 5  # each search in the pool, never on the event loop


def _counting(run, calls):
    async def counted(function, *args, **kwargs):
        calls.append(function)
        return await run(function, *args, **kwargs)
    return counted


TICKETS = [{"id": f"T-{n}", "body": f"{what} fails again", "priority": priority, "product": product,
            "created": f"2024-03-0{n}", "votes": n}
           for n, (what, priority, product) in enumerate([("login", "high", "web"), ("sync", "low", "desktop"),
                                                          ("export", "low", "web"), ("login", "high", "mobile"),
                                                          ("search", "low", "web")], start=1)]


def test_a_servers_warning_is_logged_once_by_a_client_and_told_to_every_caller(served, caplog):
    """The client logged every warning of every answer (a search repeated: its misspelt filter again); in-process
    calls log one once: so does a client, telling it to every caller (:func:`~semiret.errors.told_warnings`)."""
    from semiret.errors import told_warnings

    client, _ = served
    client.create_index("notes", "bm25")
    client.add("notes", DOCS)
    with caplog.at_level("WARNING", logger="semiret.serving.client"):
        for _ in range(3):
            with told_warnings() as told:
                assert client.count("notes", {"yaer": 2020}) == 0
            assert len(told) == 1 and "no document holds the field 'yaer'" in told[0]
    assert [record.name for record in caplog.records if "'yaer'" in record.getMessage()].count(
        "semiret.serving.client") == 1


def test_documents_added_over_http_keep_the_fields_the_index_was_built_to_keep(tmp_path, caplog):
    """The review's reproduction: an index built with --metadata-fields, served; the same JSONL sent over HTTP kept
    none of those fields (a filter found nothing, the warning only in the server's log). An upsert, ``Client.add``
    and a dict read them as ``semiret add`` does; a filter's misspelled field is said in the answer, to every
    caller, and by the client."""
    from helpers import invoke_cli, write_jsonl

    corpus = write_jsonl(tmp_path / "tickets.jsonl", TICKETS)
    invoke_cli("index", "--data", corpus, "--out", tmp_path / "tickets", "--metadata-fields",
               "priority,product,created,votes")
    settings = ServeSettings({"tickets": str(tmp_path / "tickets")}, api_key="key", write_process=False)
    with LocalClient(create_app(settings)) as http:
        assert http.get("/indexes/tickets").json()["metadata_fields"] == ["priority", "product", "created", "votes"]
        put = http.put("/indexes/tickets/documents", content=corpus.read_bytes(),
                       headers={"X-API-Key": "key", "content-type": "application/x-ndjson"})
        assert put.json() == {"status": "acknowledged", "upserted": 5}
        assert http.get("/indexes/tickets/documents/T-5").json()["metadata"] == {
            "priority": "low", "product": "web", "created": "2024-03-05", "votes": 5}
        found = http.post("/indexes/tickets/search", json={"queries": ["fails"], "filter": {"product": "web"}}).json()
        assert sorted(hit["id"] for hit in found["results"][0]) == ["T-1", "T-3", "T-5"] and "warnings" not in found
        for _ in range(2):  # logged once, answered to every caller
            typo = http.post("/indexes/tickets/search", json={"queries": ["fails"], "filter": {"prioity": "low"}})
            assert typo.json()["results"] == [[]]
            assert len(typo.json()["warnings"]) == 1 and "no document holds the field 'prioity'" in typo.json()[
                "warnings"][0]
        counted = http.post("/indexes/tickets/documents/count", json={"filter": {"prioity": "low"}}).json()
        assert counted["count"] == 0 and "'prioity'" in counted["warnings"][0]
        assert http.post("/indexes/tickets/documents/count", json={}).json() == {"count": 5}
        client = in_process(http.app)
        assert client.add("tickets", [{"id": "T-6", "body": "login loops", "priority": "high", "assignee": "kim"},
                                      Document("T-7", "login again", metadata={"product": "web"})]) == 2
        assert client.get_document("tickets", "T-6").metadata == {"priority": "high"}
        caplog.clear()
        with caplog.at_level("WARNING", logger="semiret.serving.client"):
            assert client.count("tickets", {"prioity": "high"}) == 0
        assert "no document holds the field 'prioity'" in caplog.text


def test_server_error_is_at_the_packages_top_and_imported_on_first_use():
    """docs/serving.md: an error answer raises ``ServerError``; ``from semiret.serving import ServerError`` (an
    ImportError before), with the client's module still imported only where used."""
    import subprocess
    import sys

    from semiret.serving import ServerError as exported

    assert exported is ServerError
    code = ("import sys, semiret.serving; assert 'semiret.serving.client' not in sys.modules; "
            "from semiret.serving import ServerError; print(ServerError.__module__)")
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert ran.returncode == 0 and ran.stdout.strip() == "semiret.serving.client", ran.stderr


@pytest.mark.parametrize("write_process", [False, True], ids=["writes-in-threads", "writer-process"])
def test_writes_count_the_documents_sent_and_the_passages_beside(tmp_path, write_process):
    """Over an index of passages, a write answers the documents (as a client counts what it sent, as Qdrant's do),
    and its passages beside them (``"passages"``): an upsert of 30 documents answered 33, the passages, and a delete
    of one id 2. ``Client.add`` and ``Client.delete`` count documents."""
    texts = {0: 4, 1: 8, 2: 12}  # words: 1, 2 and 3 passages of 4 words
    documents = [Document(f"p{n}", " ".join(f"w{n}x{j}" for j in range(texts[n % 3])),
                          metadata={"kind": "odd" if n % 2 else "even"}) for n in range(30)]
    settings = ServeSettings({}, api_key="key", write_process=write_process, data_dir=str(tmp_path / "data"))
    with LocalClient(create_app(settings)) as http:
        client = in_process(http.app)
        client.create_index("long", "bm25", chunk_words=4)
        assert client.add("long", documents) == 30 and client.count("long") == 60  # (its passages)
        key = {"X-API-Key": "key"}
        put = http.put("/indexes/long/documents", headers=key,
                       json={"documents": [documents[n].to_record() for n in range(3)]})
        assert put.json() == {"status": "acknowledged", "upserted": 3, "passages": 6}, put.text
        deleted = http.post("/indexes/long/documents/delete", headers=key, json={"ids": ["p1", "p1", "nope"]})
        assert deleted.json() == {"status": "acknowledged", "deleted": 1, "passages": 2}, deleted.text
        one = http.delete("/indexes/long/documents/p2", headers=key)
        assert one.json() == {"status": "acknowledged", "deleted": 1, "passages": 3}, one.text
        assert http.delete("/indexes/long/documents/p2", headers=key).status_code == 404
        # by a filter: the documents whose passages it deleted (p0, p4, p6, ...: 13 left of the even ones)
        even = [n for n in range(3, 30) if n % 2 == 0] + [0]
        by_filter = http.post("/indexes/long/documents/delete", headers=key, json={"filter": {"kind": "even"}})
        assert by_filter.json() == {"status": "acknowledged", "deleted": len(even),
                                    "passages": sum(texts[n % 3] // 4 for n in even)}, by_filter.text
        assert client.delete("long", ["p3", "p5"]) == 2
        assert client.delete("long", filter={"kind": "odd"}) == 30 - len(even) - 4  # (p1, p2, p3 and p5 gone)
        assert client.count("long") == 0
        client.create_index("whole", "bm25")
        assert client.add("whole", documents[:5]) == 5
        whole = http.post("/indexes/whole/documents/delete", headers=key, json={"ids": ["p0", "p1", "nope"]})
        assert whole.json() == {"status": "acknowledged", "deleted": 2}, whole.text  # (no passages: no such count)
