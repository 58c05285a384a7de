"""Every endpoint of ``semiret serve`` and every error it answers, through ``fastapi.testclient``; bad input
never changes an index."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal

import numpy as np
import pytest

from semiret.data import Document
from semiret.errors import SemiretError
from semiret.indexes import open_index
from semiret.search import BM25Retriever, InferenceFreeRetriever, open_retriever
from semiret.serving import ServeSettings, create_app, parse_index_specs

from helpers import LocalClient, TINY_DOCS

KEY = "s3cret"
WRITE = {"X-API-Key": KEY}


@pytest.fixture
def indexes(tmp_path):
    BM25Retriever.build(TINY_DOCS, tmp_path / "tiny")
    return {"tiny": str(tmp_path / "tiny")}


@pytest.fixture
def with_neural(indexes, tmp_path, tiny_bert):
    """The BM25 index and an inference-free one (a tiny random model)."""
    InferenceFreeRetriever.build(TINY_DOCS, tmp_path / "neural", model=str(tiny_bert))
    return {**indexes, "neural": str(tmp_path / "neural")}


def client_of(indexes, write_process: bool = False, **settings) -> LocalClient:
    """A client of the application; writes in its threads unless ``write_process`` (the server's default,
    tested by the tests using ``writing_client``, and by the fault and load tests on real servers)."""
    return LocalClient(create_app(ServeSettings(indexes, write_process=write_process, **settings)))


LIMITS = {"api_key": KEY, "max_batch": 5, "max_request_bytes": 4096, "max_k": 50}


@pytest.fixture
def client(indexes):
    return client_of(indexes, **LIMITS)


@pytest.fixture(params=[False, True], ids=["writes-in-threads", "writer-process"])
def writing_client(indexes, request):
    """Both ways of writing; the writer process ends with the client (its lifespan)."""
    with client_of(indexes, write_process=request.param, **LIMITS) as client:
        yield client


@pytest.fixture
def client_with_neural(with_neural):
    return client_of(with_neural, **LIMITS)


def state(indexes, name="tiny") -> tuple:
    """What a bad request must leave as it was: the commit and the live documents."""
    index = open_index(indexes[name])
    return index.snapshot.stamp, sorted(index.live_ids())


def ids(response) -> list[list[str]]:
    assert response.status_code == 200, response.text
    return [[hit["id"] for hit in hits] for hits in response.json()["results"]]


# ---------------------------------------------------------------------------------------------- reads
def test_health_readiness_and_openapi(client_with_neural, tmp_path):
    client = client_with_neural
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ready", "indexes": ["tiny", "neural"]}
    schema = client.get("/openapi.json").json()
    assert {"/indexes", "/indexes/{name}/search", "/indexes/{name}/documents", "/indexes/{name}/documents/delete",
            "/indexes/{name}/documents/{doc_id}", "/indexes/{name}/merge"} <= set(schema["paths"])
    assert "application/x-ndjson" in schema["paths"]["/indexes/{name}/documents"]["put"]["requestBody"]["content"]
    references = re.findall(r'"\$ref": "([^"]+)"', json.dumps(schema))
    assert references and all(r.removeprefix("#/components/schemas/") in schema["components"]["schemas"]
                              for r in references)  # every reference resolves (the upsert body's too)
    assert {"401", "404", "413", "415", "422", "503"} <= set(schema["paths"]["/indexes/{name}/search"]["post"]["responses"])
    assert schema["components"]["securitySchemes"]["ApiKey"] == {"type": "apiKey", "in": "header", "name": "X-API-Key"}
    assert {"Bearer": []} in schema["security"]  # the page's Authorize button sends the key
    assert client.get("/docs").status_code == 200
    (tmp_path / "tiny" / "meta.json").rename(tmp_path / "tiny" / "meta.json.away")
    answer = client.get("/readyz")
    assert answer.status_code == 503 and "tiny" in answer.json()["indexes"] and "neural" not in answer.json()["indexes"]
    assert str(tmp_path) not in answer.text and "index 'tiny'" in answer.text  # the server's folders unnamed
    search = client.post("/indexes/tiny/search", json={"queries": ["cats"]})
    assert search.status_code == 503 and str(tmp_path) not in search.text


def test_explanations_and_highlights_read_the_query_as_the_search_did(tmp_path):
    """A fuzzy correction is made among the documents a search shows: with operators (their $text conditions) or a
    filter, explanations read the query against every document (a score of 0.463 for a hit of 0.793, the wrong
    correction named) and highlights marked none of the corrected word."""
    docs = [Document("A", "zebrafish abcdexy study", metadata={"g": "x"}), Document("B", "abcdefh trial",
                                                                                  metadata={"g": "y"}),
            Document("C", "unrelated words here", metadata={"g": "x"}), Document("D", "more filler text",
                                                                                metadata={"g": "y"})]
    BM25Retriever.build(docs, tmp_path / "docs")
    client = client_of({"docs": str(tmp_path / "docs")})
    for body in ({"queries": ["+zebrafish abcdefg"], "operators": True},
                 {"queries": ["abcdefg"], "filter": {"g": "x"}}):
        answer = client.post("/indexes/docs/search", json={**body, "k": 3, "explain": True, "highlight": True,
                                                           "options": {"fuzzy": True}})
        hit = answer.json()["results"][0][0]
        assert hit["id"] == "A" and hit["explanation"]["score"] == pytest.approx(hit["score"], rel=1e-6)
        assert any("<em>abcdexy</em>" in fragment for fragment in hit["highlights"]), hit["highlights"]


def test_messages_name_indexes_given_by_relative_paths_and_leave_words_whole(tmp_path, monkeypatch):
    """The service replaced "data" (a relative --data-dir) inside "metadata", and missed the index's path now
    written absolute."""
    monkeypatch.chdir(tmp_path)
    BM25Retriever.build(TINY_DOCS, "idx", store_texts=False)
    client = LocalClient(create_app(ServeSettings({"tiny": "idx"}, data_dir="data", write_process=False)))
    answer = client.post("/indexes/tiny/search", json={"queries": ["cats"], "group_by": "year"})
    assert answer.status_code == 422 and answer.json()["detail"].startswith(
        "index 'tiny' keeps no stored documents (built with --no-store-texts), so it has no metadata to group by")


def test_off_loopback_a_readiness_probe_without_the_key_says_its_status_alone(indexes, tmp_path):
    """A probe takes no key, and tells one without the key nothing of the indexes (their names, why one fails)."""
    client = client_of(indexes, api_key=KEY, host="0.0.0.0")
    assert client.get("/indexes").status_code == 401
    assert client.get("/readyz").json() == {"status": "ready"}
    assert client.get("/readyz", headers=WRITE).json() == {"status": "ready", "indexes": ["tiny"]}
    (tmp_path / "tiny" / "meta.json").rename(tmp_path / "tiny" / "meta.json.away")
    down = client.get("/readyz")
    assert down.status_code == 503 and down.json() == {"status": "unavailable"}
    assert "tiny" in client.get("/readyz", headers=WRITE).json()["indexes"]


def test_indexes_are_listed_and_described(client_with_neural):
    client = client_with_neural
    listed = client.get("/indexes").json()["indexes"]
    assert [(i["name"], i["retriever"], i["documents"]) for i in listed] == [("tiny", "bm25", 6), ("neural", "inference-free", 6)]
    neural = client.get("/indexes/neural").json()
    assert neural["kind"] == "impact" and {"two_phase", "min_idf", "idf"} <= set(neural["search_options"])
    missing = client.get("/indexes/nope")
    assert missing.status_code == 404 and missing.json()["detail"] == "no index 'nope' (served: tiny, neural)"


def test_search_answers_one_list_of_hits_per_query(client):
    answer = client.post("/indexes/tiny/search", json={"queries": ["cats and dogs", "statins cancer risk"], "k": 2})
    assert ids(answer) == [["d2", "d1"], ["d3", "d6"]]
    assert answer.json()["took_ms"] >= 0
    first = answer.json()["results"][0][0]
    assert set(first) == {"id", "score"} and first["score"] > 0
    with_text = client.post("/indexes/tiny/search", json={"queries": ["garden birds"], "k": 1, "with_text": True})
    assert with_text.json()["results"][0][0] | {"score": 0} == {"id": "d4", "score": 0, "title": "",
                                                                "text": "Birds sing in the morning garden."}
    assert ids(client.get("/indexes/tiny/search", params={"q": ["cats and dogs", "letters"], "k": 1})) == [["d2"], ["d5"]]
    assert ids(client.post("/indexes/tiny/search", json={"queries": ["zzz"]})) == [[]]


@pytest.fixture
def pooled(monkeypatch) -> list:
    """The queries of each search the application hands to its thread pool (the rest run on the event loop)."""
    import semiret.serving.app as app_module

    handed = []

    async def counting_pool(function, *args):
        handed.append(args[0])
        return function(*args)

    monkeypatch.setattr(app_module, "run_in_threadpool", counting_pool)
    # the routing, not this machine's speed, is under test: a loaded machine may take 2 ms for a tiny index
    monkeypatch.setattr(app_module, "INLINE_SEARCH_MS", 1000.0)
    return handed


def test_quick_searches_run_on_the_event_loop_and_the_rest_in_the_pool(with_neural, pooled, monkeypatch):
    """The first search of an index (its time not known yet) and one whose options need a retriever variant go
    to the thread pool; then a quick search runs on the event loop, unless over the INLINE_SEARCH_MS bound."""
    import semiret.serving.app as app_module

    client = client_of(with_neural)

    def search(query: str, **extra) -> list[list[str]]:
        return ids(client.post("/indexes/neural/search", json={"queries": [query], "k": 1, **extra}))

    first = search("cats and dogs")
    assert pooled == [["cats and dogs"]]
    assert search("cats and dogs") == first and len(pooled) == 1  # its time known and under the bound: inline
    search("cats and dogs", options={"min_idf": 0})
    assert pooled[-1] == ["cats and dogs"] and len(pooled) == 2  # a new variant is made in the pool
    search("cats and dogs", options={"min_idf": 0})
    assert len(pooled) == 2  # made now: inline
    long_query = "cats " * (app_module.INLINE_QUERY_CHARS // 5 + 1)
    search(long_query)
    assert pooled[-1] == [long_query] and len(pooled) == 3  # a long query, whatever the average: the pool
    monkeypatch.setattr(app_module, "INLINE_SEARCH_MS", 0.0)
    search("garden birds")
    assert pooled[-1] == ["garden birds"] and len(pooled) == 4


def test_synonym_rules_another_process_set_are_compiled_in_the_pool(indexes, pooled):
    """The first search after rules changed on disk compiles them off the event loop; the next runs inline."""
    client = client_of(indexes)
    client.get("/indexes/tiny/search", params={"q": "postman"})
    assert len(pooled) == 1  # the first search: its time not known
    open_retriever(indexes["tiny"]).set_synonyms(["postman, mailman"])  # another process's write
    assert ids(client.get("/indexes/tiny/search", params={"q": "postman"})) == [["d2", "d5"]]
    assert len(pooled) == 2  # the rules compiled in the pool
    client.get("/indexes/tiny/search", params={"q": "postman"})
    assert len(pooled) == 2  # compiled: inline again


def test_search_takes_the_retrievers_options(client_with_neural, with_neural, monkeypatch):
    """Each search answers what the retriever opened with its options answers; the options change the hits, or
    (two-phase search, exact on six documents) reach the index."""
    from semiret.indexes.inverted import InvertedIndex

    client = client_with_neural
    opened = open_retriever(with_neural["neural"])
    idf = opened.index.idf()  # three words the documents expand to that the default min_idf (1.0) leaves out:
    low = _whole_words(opened.query_side.vocabulary, np.flatnonzero((idf > 0) & (idf < 1.0)).tolist())[:3]
    queries = [" ".join(low), "statins cancer risk"]
    searched_with = []
    index_search = InvertedIndex.search

    def recording(index, queries, k=10, n_threads=1, two_phase=None, prune=None):
        searched_with.append(two_phase)
        return index_search(index, queries, k, n_threads, two_phase, prune)

    monkeypatch.setattr(InvertedIndex, "search", recording)
    answers = {}
    for options in ({}, {"min_idf": 0}, {"min_idf": 0, "two_phase": "on"}):
        searched_with.clear()
        served = ids(client.post("/indexes/neural/search", json={"queries": queries, "k": 6, "options": options}))
        assert searched_with and all((two_phase is not None) == ("two_phase" in options) for two_phase in searched_with)
        direct = [[hit.id for hit in hits] for hits in open_retriever(with_neural["neural"], **options).search(queries, k=6)]
        assert served == direct, options
        answers[repr(options)] = served
    assert answers["{}"] != answers["{'min_idf': 0}"] and answers["{'min_idf': 0}"][0], answers
    unknown = client.post("/indexes/tiny/search", json={"queries": ["cats"], "options": {"two_phase": "on"}})
    assert unknown.status_code == 422 and unknown.json()["detail"][0]["loc"] == ["body", "options", "two_phase"]
    assert "bm25" in unknown.json()["detail"][0]["msg"]
    bad_value = client.post("/indexes/neural/search", json={"queries": ["cats"], "options": {"min_idf": -1}})
    assert bad_value.status_code == 422 and "min_idf" in bad_value.json()["detail"]


@pytest.mark.parametrize("options, message", [
    ({"idf": "/etc/passwd"}, "names a file or model of the server, which a request may not choose: give 'corpus' or "
                             "'msmarco', or leave it out"),
    ({"idf": "corpus", "min_idf": "abc"}, "option 'min_idf' must be a JSON number, got \"abc\""),
    ({"min_idf": True}, "option 'min_idf' must be a JSON number, got true"),
    ({"min_idf": [1]}, "option 'min_idf' must be a JSON number, got [1]"),
    ({"bogus": None}, "option 'bogus' does not apply to searches with retriever 'inference-free'"),
])
def test_search_options_from_a_client_are_typed_and_name_no_server_file(client_with_neural, options, message):
    """A client's options are checked as JSON before any retriever is made: an IDF table (or a model, a cache
    directory) on the server's disk is the operator's choice, never a request's (its contents would leak in the
    error of a table that does not parse)."""
    answer = client_with_neural.post("/indexes/neural/search", json={"queries": ["cats"], "options": options})
    assert answer.status_code == 422, answer.text
    error = answer.json()["detail"][0]
    assert error["loc"] == ["body", "options", list(options)[-1]] and message in error["msg"]
    assert client_with_neural.post("/indexes/neural/search", json={
        "queries": ["cats"], "options": {"idf": "corpus", "min_idf": 0}}).status_code == 200


def test_get_search_takes_only_its_parameters_and_k_defaults_within_the_limit(indexes):
    client = client_of(indexes, max_k=2)
    assert [len(hits) for hits in ids(client.get("/indexes/tiny/search", params={"q": "cats dogs garden"}))] == [2]
    assert [len(hits) for hits in ids(client.post("/indexes/tiny/search", json={"queries": ["cats dogs garden"]}))] == [2]
    assert client.post("/indexes/tiny/search", json={"queries": ["cats"], "k": 3}).status_code == 422
    unknown = client.get("/indexes/tiny/search", params={"q": "cats", "size": 2})
    assert unknown.status_code == 422 and unknown.json()["detail"][0]["loc"] == ["query", "size"]


def test_a_search_asking_for_more_hits_than_the_limit_in_all_is_413(indexes):
    """Each query's k within --max-k, but queries x (k + offset) x group_size over --max-hits: refused, naming the
    limit (1,000 queries of k = 1,000 with their texts made a 1 GB answer); a highlight tag is at most 100
    characters (repeated around every word shown: 50,000 made a 97 KB request's answer 477 MB)."""
    client = client_of(indexes, max_k=50, max_hits=100)
    assert client.post("/indexes/tiny/search", json={"queries": ["cats"] * 2, "k": 50}).status_code == 200
    for body in ({"queries": ["cats"] * 3, "k": 34}, {"queries": ["cats"] * 3, "k": 30, "offset": 5},
                 {"queries": ["cats"] * 3, "k": 8, "group_by": "source", "group_size": 6}):
        refused = client.post("/indexes/tiny/search", json=body)
        assert refused.status_code == 413 and "the limit is 100 (--max-hits)" in refused.text, body
    refused = client.get("/indexes/tiny/search", params={"q": ["cats"] * 11})
    assert refused.status_code == 413 and "110 hits" in refused.text
    assert client.get("/").json()["limits"]["max_hits"] == 100
    tags = {"queries": ["cats"], "with_text": True, "highlight": {"tags": ["<" + "x" * 99 + ">", "</x>"]}}
    assert client.post("/indexes/tiny/search", json=tags).status_code == 422
    tags["highlight"]["tags"][0] = "<" + "x" * 98 + ">"
    assert client.post("/indexes/tiny/search", json=tags).status_code == 200
    with pytest.raises(SemiretError, match="max_hits must be at least 1"):
        ServeSettings(indexes, max_hits=0)
    with pytest.raises(SemiretError, match=r"max_hits \(40\) must be at least max_k \(50\)"):
        ServeSettings(indexes, max_k=50, max_hits=40)  # a search giving no k (10) was refused at max_hits 5
    # filters and boosts larger than a server takes: 422 before they are parsed (the Python API takes any)
    for body, where in (({"queries": ["cats"], "filter": {"$or": [{"a": i} for i in range(1025)]}}, "filter"),
                        ({"queries": ["cats"], "filter": {"x" * 4097: 1}}, "filter"),
                        ({"queries": ["cats"], "with_text": True, "boost": [
                            {"filter": {"$or": [{"a": i} for i in range(300)]}, "weight": 2}] * 4}, "boost")):
        refused = client.post("/indexes/tiny/search", json=body)
        assert refused.status_code == 422 and refused.json()["detail"][0]["loc"] == ["body", where], refused.text


def test_bodies_of_another_type_than_json_are_415(client, indexes):
    before = state(indexes)
    assert client.post("/indexes/tiny/search", content=b"queries=cats",
                       headers={"content-type": "application/x-www-form-urlencoded"}).status_code == 415
    assert client.post("/indexes/tiny/documents/delete", content=b"d1", headers={**WRITE, "content-type": "text/plain"}
                       ).status_code == 415
    assert state(indexes) == before


@pytest.mark.parametrize("method, path, body", [
    ("put", "/indexes/tiny/documents", b'{"documents": [{"_id": "n1", "text": "x", "metadata": {"x": NaN}}]}'),
    ("put", "/indexes/tiny/documents", b'{"documents": [{"_id": "n1", "text": "caf\xe9"}]}'),
    ("post", "/indexes/tiny/documents/metadata", b'{"ids": ["d1"], "metadata": {"x": Infinity}}'),
    ("post", "/indexes/tiny/search", b'{"queries": ["cats"]}'),
    ("post", "/indexes/tiny/documents/count", b'{"filter": {"x": 1}}'),
])
def test_a_body_without_a_content_type_is_415_and_changes_nothing(client, indexes, method, path, body):
    """``requests.put(url, data=...)`` sends no type: such a body was stored unchecked (``NaN`` acknowledged,
    invalid UTF-8 a 500); now it is refused whole, naming the header to send."""
    before = state(indexes)
    answer = getattr(client, method)(path, content=body, headers=WRITE)
    assert answer.status_code == 415 and "application/json" in answer.json()["detail"]
    assert state(indexes) == before and client.get("/indexes/tiny/documents/n1").status_code == 404


@pytest.mark.parametrize("body, loc", [
    ({"queries": "cats"}, ["body", "queries"]),
    ({"queries": ["cats"], "k": "ten"}, ["body", "k"]),
    ({"queries": ["cats"], "k": 0}, ["body", "k"]),
    ({"queries": ["cats"], "k": True}, ["body", "k"]),  # not read as 1
    ({"queries": ["cats"], "k": "3"}, ["body", "k"]),
    ({"queries": ["cats"], "k": 51}, ["body", "k"]),
    ({"queries": [1]}, ["body", "queries", 0]),
    ({"k": 3}, ["body", "queries"]),
    ({"queries": ["cats"], "top": 3}, ["body", "top"]),
])
def test_bad_search_requests_name_the_field(client, body, loc):
    answer = client.post("/indexes/tiny/search", json=body)
    assert answer.status_code == 422 and answer.json()["detail"][0]["loc"] == loc


def test_malformed_json_invalid_utf8_and_oversized_batches(client):
    malformed = client.post("/indexes/tiny/search", content=b'{"queries": ["cats"', headers={"content-type": "application/json"})
    assert malformed.status_code == 422 and malformed.json()["detail"][0]["type"] == "json_invalid"
    not_utf8 = client.post("/indexes/tiny/search", content=b'{"queries": ["caf\xe9"]}', headers={"content-type": "application/json"})
    assert not_utf8.status_code == 422 and not_utf8.json()["detail"][0]["msg"] == "invalid UTF-8 at byte 17"
    too_many = client.post("/indexes/tiny/search", json={"queries": ["cats"] * 6})
    assert too_many.status_code == 413 and "6 queries" in too_many.json()["detail"]
    too_big = client.post("/indexes/tiny/search", json={"queries": ["x" * 5000]})
    assert too_big.status_code == 413 and "4096 bytes" in too_big.json()["detail"]
    missing_q = client.get("/indexes/tiny/search")
    assert missing_q.status_code == 422 and missing_q.json()["detail"][0]["loc"] == ["query", "q"]


def test_lone_surrogates_and_nan_are_refused_where_they_stand_and_change_nothing(client, indexes):
    """A lone UTF-16 surrogate (``"\\ud800"``: valid JSON, no character, unwritable as UTF-8) is a 422 naming
    its field, in a JSON body as in an NDJSON line; a paired one (an emoji) is a character like any other."""
    before = state(indexes)
    json_body = {"headers": {**WRITE, "content-type": "application/json"}}
    ndjson = {"headers": {**WRITE, "content-type": "application/x-ndjson"}}
    refused = [
        (client.put("/indexes/tiny/documents", content=b'{"documents": [{"_id": "s1", "text": "ok \\ud800"}]}',
                    **json_body), ["body", "documents", 0, "text"]),
        (client.put("/indexes/tiny/documents", content=b'{"_id": "s2", "text": "ok"}\n{"_id": "s3\\udfff"}',
                    **ndjson), ["body", "line", 2, "_id"]),
        (client.post("/indexes/tiny/documents/metadata", content=b'{"ids": ["d1"], "metadata": {"k": "\\ud800"}}',
                     **json_body), ["body", "metadata", "k"]),
    ]
    for answer, loc in refused:
        assert answer.status_code == 422, answer.text
        assert answer.json()["detail"][0]["loc"] == loc and "surrogate" in answer.json()["detail"][0]["msg"]
    assert state(indexes) == before
    for body, field in ((b'{"ids": ["d1"], "metadata": {"score": NaN}}', "score"),
                        (b'{"ids": ["d1"], "metadata": {"x": [1, -Infinity]}}', "x"),
                        (b'{"ids": ["d1"], "metadata": {"big": 1e400}}', "big")):  # a float's overflow: infinity
        answer = client.post("/indexes/tiny/documents/metadata", content=body, **json_body)
        assert answer.status_code == 422 and "is not a finite number" in answer.json()["detail"][0]["msg"], answer.text
        assert answer.json()["detail"][0]["loc"][:3] == ["body", "metadata", field]
    nan_line = client.put("/indexes/tiny/documents", content=b'{"_id": "n", "text": "NaN", "metadata": {"x": NaN}}',
                          **ndjson)
    assert nan_line.status_code == 422 and nan_line.json()["detail"][0]["loc"] == ["body", "line", 1, "metadata", "x"]
    key = client.post("/indexes/tiny/search", content=b'{"queries": ["cats"], "filter": {"\\ud800": "x"}}',
                      headers={"content-type": "application/json"})
    assert key.status_code == 422 and key.json()["detail"][0]["loc"] == ["body", "filter", "\\ud800"]
    assert state(indexes) == before
    paired = client.put("/indexes/tiny/documents", content=b'{"_id": "e1", "text": "walrus \\ud83d\\ude00"}', **ndjson)
    assert paired.status_code == 200, paired.text
    assert client.get("/indexes/tiny/documents/e1").json()["text"] == "walrus \U0001F600"



def test_metadata_nested_too_deeply_is_refused_and_changes_nothing(client, indexes):
    """Metadata nested past 32 levels is a 422 naming its field, in an NDJSON line and a metadata update as in a
    JSON body (stored 300 deep, every later read of the document was a 500: the answer's serializer gives up);
    JSON nested deeper than Python's parser goes is a 422 too (it was a plain-text 500)."""
    before = state(indexes)
    ndjson = {"headers": {**WRITE, "content-type": "application/x-ndjson"}}
    deep = "[" * 40 + "]" * 40
    line = client.put("/indexes/tiny/documents", content=f'{{"_id": "deep", "text": "x", "metadata": {{"a": {deep}}}}}',
                      **ndjson)
    assert line.status_code == 422 and "field 'a' of the metadata holds objects or lists nested more than 32" in line.text
    update = client.post("/indexes/tiny/documents/metadata", json={"filter": {}, "metadata": {"a": json.loads(deep)}},
                         headers=WRITE)
    assert update.status_code == 422 and "nested more than 32" in update.text, update.text
    deeper = "[" * 1500 + "]" * 1500  # past Python's recursion limit, under the fixture's 4 KiB a body
    for answer in (client.put("/indexes/tiny/documents", content=f'{{"_id": "d", "metadata": {{"a": {deeper}}}}}',
                              **ndjson),
                   client.post("/indexes/tiny/search", content=f'{{"queries": ["x"], "filter": {{"a": {deeper}}}, '
                               '"score_threshold": NaN}', headers={"content-type": "application/json"})):
        assert answer.status_code == 422 and "nested too deeply" in answer.text, answer.text
    assert state(indexes) == before
    fine = client.put("/indexes/tiny/documents", content='{"_id": "ok", "text": "x", "metadata": {"a": [[1, 2]]}}',
                      **ndjson)
    assert fine.status_code == 200 and client.get("/indexes/tiny/documents/ok").status_code == 200

def test_a_full_disk_is_a_json_507_and_the_index_is_unchanged(client, indexes, monkeypatch):
    import errno

    from semiret.indexes.segments import SegmentedIndex

    before = state(indexes)

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(self.path))

    monkeypatch.setattr(SegmentedIndex, "_append_segment", full)
    answer = client.put("/indexes/tiny/documents", headers=WRITE, json={"documents": [{"_id": "x", "text": "walrus"}]})
    assert answer.status_code == 507 and "no space left" in answer.json()["detail"]
    assert str(indexes["tiny"]) not in answer.text  # no server path
    assert state(indexes) == before


def test_numpys_short_write_is_a_full_disk(client, indexes, monkeypatch):
    """``np.save`` cut short by a full disk raises an OSError without errno: a 507 too."""
    from semiret.indexes.segments import SegmentedIndex

    before = state(indexes)

    def cut_short(self, *args, **kwargs):
        raise OSError("380022 requested and 32640 written")

    monkeypatch.setattr(SegmentedIndex, "_append_segment", cut_short)
    answer = client.put("/indexes/tiny/documents", headers=WRITE, json={"documents": [{"_id": "x", "text": "walrus"}]})
    assert answer.status_code == 507 and "no space left" in answer.json()["detail"]
    assert state(indexes) == before


def test_a_write_committed_is_answered_done_when_the_merge_after_it_fails(indexes, monkeypatch, caplog):
    """Folding small segments after a write is housekeeping: its failure (a full disk) is logged, and the write,
    committed, is answered as done (not as failed: a client would send it again, or think it lost)."""
    import errno

    from semiret.indexes.segments import SegmentedIndex

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(SegmentedIndex, "merge_small_segments", full)
    with client_of(indexes, max_segments=1, **LIMITS) as client:
        added = client.put("/indexes/tiny/documents", headers=WRITE,
                           json={"documents": [{"_id": "x", "text": "walrus"}]})
        assert added.status_code == 200 and added.json()["upserted"] == 1
        assert client.get("/indexes/tiny/documents/x").status_code == 200
        deleted = client.post("/indexes/tiny/documents/delete", headers=WRITE, json={"ids": ["x"]})
        assert deleted.status_code == 200 and deleted.json()["deleted"] == 1
    assert "a write committed, then folding small segments failed" in caplog.text


# ---------------------------------------------------------------------------------------------- writes
def test_upsert_adds_and_replaces_and_is_searchable_at_once(writing_client, indexes):
    client = writing_client
    answer = client.put("/indexes/tiny/documents", headers=WRITE, json={"documents": [
        {"_id": "d7", "title": "Zebras", "text": "Zebras graze on the savanna."},
        {"_id": "d1", "text": "Cats nap on the windowsill.", "extra": "ignored"}]})
    said = answer.json().pop("warnings")  # a field the index keeps none of: left out, and said
    assert answer.json() == {"status": "acknowledged", "upserted": 2, "warnings": said}
    assert len(said) == 1 and "the field 'extra' of its documents is left out" in said[0]
    assert ids(client.get("/indexes/tiny/search", params={"q": "zebras savanna"})) == [["d7"]]
    assert client.get("/indexes/tiny/documents/d1").json() == {"_id": "d1", "title": "", "text": "Cats nap on the windowsill."}
    assert open_index(indexes["tiny"]).n_docs == 7  # durable: another process sees it


def test_synonym_rules_are_set_read_and_removed_over_http(writing_client, indexes):
    client = writing_client
    assert ids(client.get("/indexes/tiny/search", params={"q": "postman"})) == [[]]
    rules = ["# mail", "postman, mailman", "kitty => cats"]
    assert client.put("/indexes/tiny/synonyms", json={"rules": rules}).status_code == 401  # a write: the key
    answer = client.put("/indexes/tiny/synonyms", headers=WRITE, json={"rules": rules})
    assert answer.json() == {"status": "acknowledged", "synonym_rules": 2}
    assert client.get("/indexes/tiny/synonyms").json() == {"rules": rules}
    assert ids(client.get("/indexes/tiny/search", params={"q": "postman"})) == [["d2", "d5"]]  # the next search
    assert set(ids(client.get("/indexes/tiny/search", params={"q": "kitty"}))[0]) == {"d1", "d2"}
    assert open_retriever(indexes["tiny"]).synonyms() == rules  # durable: another process reads them
    before = state(indexes)
    refused = client.put("/indexes/tiny/synonyms", headers=WRITE, json={"rules": ["postman, mailman", "the, a"]})
    assert refused.status_code == 422 and "rules, line 2: 'the' leaves no word" in refused.json()["detail"]
    assert str(indexes["tiny"]) not in refused.text and state(indexes) == before
    assert client.get("/indexes/tiny/synonyms").json() == {"rules": rules}
    assert client.put("/indexes/tiny/synonyms", headers=WRITE, json={"rules": "postman, mailman"}).status_code == 422
    assert client.delete("/indexes/tiny/synonyms", headers=WRITE).json() == {"status": "acknowledged",
                                                                              "synonym_rules": 0}
    assert ids(client.get("/indexes/tiny/search", params={"q": "postman"})) == [[]]


def test_a_search_as_you_type_runs_in_the_pool(indexes, pooled):
    client = client_of(indexes)
    client.get("/indexes/tiny/search", params={"q": "gard"})
    answer = client.post("/indexes/tiny/search", json={"queries": ["gard"], "options": {"prefix": True}})
    assert sorted(ids(answer)[0]) == ["d1", "d4"] and pooled[-1] == ["gard"]  # "garden", begun
    client.post("/indexes/tiny/search", json={"queries": ["gard"], "options": {"prefix": True}})
    assert len(pooled) == 3  # the vocabulary sorted at first: never on the event loop


def test_the_client_sets_and_reads_synonym_rules(indexes):
    from helpers import client_of as python_client

    with client_of(indexes, api_key=KEY) as http:
        client = python_client(http, api_key=KEY)
        assert client.set_synonyms("tiny", ["postman, mailman"]) == 1
        assert client.synonyms("tiny") == ["postman, mailman"]
        assert [hit.id for hit in client.search("tiny", "postman")] == ["d2", "d5"]
        assert [hit.id for hit in client.search("tiny", "postman", synonyms="none")] == []
        assert client.set_synonyms("tiny", None) == 0 and client.synonyms("tiny") == []


def test_upsert_reads_the_field_names_the_cli_reads(client, indexes):
    """A document ``semiret index`` reads from a file is one the API takes, under the same names: Pyserini's
    ``contents`` (it was stored empty while the request was acknowledged), a numbered id, a null text beside a
    contents field, a title alone; and a streamed body may start with a byte-order mark, as files may."""
    answer = client.put("/indexes/tiny/documents", headers=WRITE, json={"documents": [
        {"_id": "s3", "title": "Title here", "contents": "giraffe body text"}, {"id": 17, "contents": "okapi"},
        {"_id": "s5", "text": None, "body": "narwhal tusks"}, {"_id": "s6", "title": "Pangolin scales"}]})
    assert answer.json() == {"status": "acknowledged", "upserted": 4}, answer.text
    assert client.get("/indexes/tiny/documents/s3").json() == {"_id": "s3", "title": "Title here",
                                                               "text": "giraffe body text"}
    assert ids(client.get("/indexes/tiny/search", params={"q": ["giraffe", "okapi", "narwhal", "pangolin"]})) == [
        ["s3"], ["17"], ["s5"], ["s6"]]
    answer = client.put("/indexes/tiny/documents", headers={**WRITE, "content-type": "application/x-ndjson"},
                        content='\ufeff{"_id": "b1", "text": "axolotl"}\n'.encode())
    assert answer.json() == {"status": "acknowledged", "upserted": 1}, answer.text
    deleted = client.post("/indexes/tiny/documents/delete", headers=WRITE, json={"ids": [17]})
    assert deleted.json() == {"status": "acknowledged", "deleted": 1}, deleted.text  # the document upserted as 17
    assert client.post("/indexes/tiny/documents/delete", headers=WRITE, json={"ids": [True]}).status_code == 422


def test_upsert_streams_jsonl(client, indexes):
    def body():
        yield b'{"_id": "j1", "text": "quokkas smile"}\n\n{"_id": "j2",'
        yield b' "title": "Wombats", "text": "wombats dig"}\n'

    answer = client.put("/indexes/tiny/documents", headers={**WRITE, "content-type": "application/x-ndjson"}, content=body())
    assert answer.json() == {"status": "acknowledged", "upserted": 2}
    assert ids(client.get("/indexes/tiny/search", params={"q": ["quokkas", "wombats"]})) == [["j1"], ["j2"]]


@pytest.mark.parametrize("content_type, body, status, detail", [
    ("application/json", {"documents": [{"_id": "n1", "text": "new"}, {"_id": "n1", "text": "again"}]}, 422,
     {"loc": ["body", "documents", 1, "_id"], "msg": "duplicate id 'n1' (also at documents/0): ids must be unique "
                                                      "within one request"}),
    ("application/json", {"documents": [{"_id": "n1", "text": "new"}, {"_id": "n2", "body_text": "misnamed"}]}, 422,
     {"loc": ["body", "documents", 1], "msg": "Value error, missing text field (one of 'text', 'contents', 'content', "
                                              "'body', 'abstract', 'passage', 'query'; text_field, --text-field, "
                                              "names another)"}),
    ("application/json", {"documents": [{"text": "no id at all"}]}, 422, {"loc": ["body", "documents", 0]}),
    ("application/json", {"documents": [{"_id": "n1", "title": 5, "text": "x"}]}, 422,
     {"loc": ["body", "documents", 0, "title"]}),
    ("application/json", {"documents": [{"_id": "", "text": "no id"}]}, 422, {"loc": ["body", "documents", 0, "_id"]}),
    ("application/json", {"documents": [{"_id": "line1\nline2", "text": "x"}]}, 422,
     {"loc": ["body", "documents", 0, "_id"], "msg": "Value error, document id 'line1\\nline2' holds the control "
                                                     "character '\\n': ids may not hold newlines, tabs or other "
                                                     "control characters"}),
    ("application/x-ndjson", b'{"_id": "n1", "text": "a"}\n{"_id": "tab\\there", "text": "b"}\n', 422,
     {"loc": ["body", "line", 2, "_id"]}),
    ("application/json", {"documents": [{"_id": "n1", "text": 7}]}, 422, {"loc": ["body", "documents", 0, "text"]}),
    ("application/json", {"docs": []}, 422, {"loc": ["body", "docs"], "type": "extra_forbidden"}),
    ("application/json", b'{"documents": [{"_id": "n1", "text": "caf\xe9"}]}', 422,
     {"msg": "invalid UTF-8 at byte 41", "loc": ["body"]}),
    ("application/x-ndjson", b'{"_id": "n1", "text": "fine"}\n{"_id": "n2", "text": "caf\xe9"}\n', 422,
     {"msg": "invalid UTF-8 at byte 26 of the line", "loc": ["body", "line", 2]}),
    ("application/x-ndjson", b'{"_id": "n1", "text": "fine"}\n{"_id": "n2", "text": \n', 422,
     {"loc": ["body", "line", 2], "type": "json_invalid"}),
    ("application/x-ndjson", b'{"_id": "n1", "text": "a"}\n{"_id": "n1", "text": "b"}\n', 422,
     {"loc": ["body", "line", 2, "_id"]}),
    ("text/plain", b"n1\tsome text", 415, None),
    ("application/json", {"documents": [{"_id": f"n{i}", "text": "x"} for i in range(6)]}, 413,
     "6 documents in one request; the limit is 5 (--max-batch)"),
    ("application/x-ndjson", b"".join(b'{"_id": "n%d", "text": "x"}\n' % i for i in range(6)), 413,
     "more than 5 documents in one request (--max-batch)"),
    ("application/json", {"documents": [{"_id": "n1", "text": "x" * 5000}]}, 413,
     "request body over the limit of 4096 bytes (--max-request-bytes)"),
])
def test_bad_documents_are_refused_and_change_nothing(client, indexes, content_type, body, status, detail):
    before = state(indexes)
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    answer = client.put("/indexes/tiny/documents", headers={**WRITE, "content-type": content_type}, content=content)
    assert answer.status_code == status, answer.text
    if isinstance(detail, dict):
        assert detail.items() <= answer.json()["detail"][0].items()
    elif detail is not None:
        assert answer.json()["detail"] == detail
    assert state(indexes) == before


def test_a_streamed_body_growing_past_the_limit_is_refused(client, indexes):
    before = state(indexes)

    def body():  # chunked: no Content-Length to refuse it up front
        for i in range(100):
            yield b'{"_id": "s%d", "text": "%s"}\n' % (i, b"y" * 100)

    answer = client.put("/indexes/tiny/documents", headers={**WRITE, "content-type": "application/x-ndjson"}, content=body())
    assert answer.status_code == 413 and state(indexes) == before


def test_delete_and_fetch_documents(writing_client):
    client = writing_client
    answer = client.post("/indexes/tiny/documents/delete", headers=WRITE, json={"ids": ["d1", "d1", "unknown"]})
    assert answer.json() == {"status": "acknowledged", "deleted": 1}
    assert client.get("/indexes/tiny/documents/d1").status_code == 404
    assert "d1" not in ids(client.post("/indexes/tiny/search", json={"queries": ["cats"], "k": 6}))[0]
    assert client.get("/indexes/tiny/documents/d2").json() == {"_id": "d2", "title": "Dogs",
                                                               "text": "Dogs chase cats; dogs bark at the mailman."}
    client.put("/indexes/tiny/documents", headers=WRITE, json={"documents": [{"_id": "a/b c", "text": "slashes"}]})
    assert client.get("/indexes/tiny/documents/a/b c").json()["text"] == "slashes"
    assert client.delete("/indexes/tiny/documents/a/b c").status_code == 401  # a write: the key
    gone = client.delete("/indexes/tiny/documents/a/b c", headers=WRITE)
    assert gone.json() == {"status": "acknowledged", "deleted": 1}
    assert client.get("/indexes/tiny/documents/a/b c").status_code == 404
    again = client.delete("/indexes/tiny/documents/a/b c", headers=WRITE)
    assert again.status_code == 404 and again.json()["detail"] == "no document 'a/b c' in index 'tiny'"
    wrong = client.post("/indexes/tiny/documents/delete", headers=WRITE, json={"ids": "d2"})
    assert wrong.status_code == 422 and wrong.json()["detail"][0]["loc"] == ["body", "ids"]
    assert client.post("/indexes/tiny/documents/delete", headers=WRITE, json={"ids": [str(i) for i in range(6)]}).status_code == 413


@pytest.mark.parametrize("write_process", [False, True], ids=["writes-in-threads", "writer-process"])
def test_every_answer_taking_a_filter_says_its_field_no_document_holds(tmp_path, write_process):
    """A delete or a metadata update by filter, a suggestion and an explanation answered a filter's misspelt field as
    one that matches nothing (``{"deleted": 0}``), the warning only in a log (a write's, the writer process's): their
    answers carry it, as searches and counts do."""
    documents = [Document(f"d{n}", text, metadata={"year": 2020 + n}) for n, text in enumerate(["cats", "dogs"])]
    BM25Retriever.build(documents, tmp_path / "years")
    with client_of({"years": str(tmp_path / "years")}, write_process=write_process, **LIMITS) as client:
        for path, body, headers in (("explain", {"query": "cats", "id": "d0"}, {}), ("suggest", {"text": "ca"}, {}),
                                    ("documents/metadata", {"metadata": {"seen": True}}, WRITE),
                                    ("documents/delete", {}, WRITE)):
            answer = client.post(f"/indexes/years/{path}", json={**body, "filter": {"yaer": 2020}}, headers=headers)
            assert answer.status_code == 200, answer.text
            assert "no document holds the field 'yaer'" in answer.json()["warnings"][0], path
            held = client.post(f"/indexes/years/{path}", json={**body, "filter": {"year": 1999}}, headers=headers)
            assert "warnings" not in held.json(), path


def test_merge_folds_segments(writing_client):
    client = writing_client
    for n in range(3):
        client.put("/indexes/tiny/documents", headers=WRITE, json={"documents": [{"_id": f"m{n}", "text": "merge me"}]})
    client.post("/indexes/tiny/documents/delete", headers=WRITE, json={"ids": ["m0"]})
    assert client.get("/indexes/tiny").json()["segments"] == 4
    merged = client.post("/indexes/tiny/merge", headers=WRITE).json()
    assert (merged["segments"], merged["documents"], merged["deleted"]) == (1, 8, 0)
    assert ids(client.get("/indexes/tiny/search", params={"q": "merge"})) == [["m1", "m2"]]


def test_the_writer_process_encodes_commits_and_reports_errors(with_neural, tmp_path):
    """Writes done in the writer process: the neural index's document encoder runs there, each write is
    searchable as soon as it is acknowledged, and an error there comes back as one with the index unchanged."""
    with client_of(with_neural, write_process=True, api_key=KEY) as client:
        writer_pid = client.app.state.writer.pid
        assert writer_pid not in (None, __import__("os").getpid())
        added = client.put("/indexes/neural/documents", headers=WRITE,
                           json={"documents": [{"_id": "n1", "text": "Penguins huddle through the polar winter."}]})
        assert added.json() == {"status": "acknowledged", "upserted": 1}
        assert "n1" in ids(client.get("/indexes/neural/search", params={"q": "penguins polar winter", "k": 3}))[0]
        assert client.post("/indexes/neural/documents/delete", headers=WRITE, json={"ids": ["n1"]}).json()["deleted"] == 1
        assert "n1" not in ids(client.get("/indexes/neural/search", params={"q": "penguins polar winter", "k": 6}))[0]
        before = state(with_neural, "tiny")
        (tmp_path / "tiny" / "meta.json").rename(tmp_path / "meta.json.away")  # the index is gone under the writer
        failed = client.put("/indexes/tiny/documents", headers=WRITE, json={"documents": [{"_id": "x", "text": "x"}]})
        assert failed.status_code in (422, 503) and "meta.json" in failed.json()["detail"]
        (tmp_path / "meta.json.away").rename(tmp_path / "tiny" / "meta.json")
        assert state(with_neural, "tiny") == before
        assert client.put("/indexes/tiny/documents", headers=WRITE,
                          json={"documents": [{"_id": "x", "text": "walrus"}]}).status_code == 200
        assert ids(client.get("/indexes/tiny/search", params={"q": "walrus"})) == [["x"]]


def test_a_writer_process_that_dies_is_started_again(indexes):
    """The writer killed (SIGKILL, as the kernel's out-of-memory killer does): readiness starts another, and a
    write sent while none runs is done by a new one, acknowledged and searchable."""
    with client_of(indexes, write_process=True, api_key=KEY) as client:
        writer = client.app.state.writer
        os.kill(writer.pid, signal.SIGKILL)
        ready = client.get("/readyz")
        assert ready.status_code == 200, ready.text
        first_new = writer.pid
        os.kill(first_new, signal.SIGKILL)
        added = client.put("/indexes/tiny/documents", headers=WRITE, json={"documents": [{"_id": "w1", "text": "walrus"}]})
        assert added.json() == {"status": "acknowledged", "upserted": 1}
        assert writer.pid != first_new and ids(client.get("/indexes/tiny/search", params={"q": "walrus"})) == [["w1"]]


def test_a_delete_done_again_by_a_new_writer_answers_what_the_first_deleted(indexes):
    """A writer may die after committing a delete and before answering; the new writer's redo finds the documents
    gone: the answer counts those held before the first attempt and gone after (not 0, nor a 404 for DELETE)."""
    from concurrent.futures import Future
    from concurrent.futures.process import BrokenProcessPool

    from semiret.serving.served import ServedIndex
    from semiret.serving.writer import WriterProcess

    from semiret.serving.served import Written

    served = ServedIndex("tiny", indexes["tiny"], 8)
    answer = served._redo_answer("_delete", ["d1", "d2", "nope"])
    served.retriever.delete(["d1", "d2"])  # the first attempt: committed, then its process died
    assert answer(Written(0)) == Written(2)
    # by a filter: a redo found nothing left to delete, or to update where the update made its own filter fail
    served.retriever.set_metadata({"reviewed": False}, ["d3", "d4"])
    answer = served._redo_answer("_set_metadata", {"reviewed": True}, None, {"reviewed": False}, False)
    assert served.retriever.set_metadata({"reviewed": True}, filter={"reviewed": False}) == 2
    assert answer(0) == 2
    answer = served._redo_answer("_delete_where", {"reviewed": True})
    assert served.retriever.delete_where({"reviewed": True}) == 2 and answer(Written(0)) == Written(2)
    assert served._redo_answer("_upsert", []) is None  # an add answers alike twice
    from semiret.data import Document
    from semiret.data.chunking import Chunking
    from semiret.search import BM25Retriever

    BM25Retriever.build([Document("a", "one two three four five six seven"), Document("b", "eight nine")],
                        indexes["tiny"] + "-passages", chunking=Chunking(2))
    passages = ServedIndex("p", indexes["tiny"] + "-passages", 8)
    answer = passages._redo_answer("_delete", ["a"])
    deleted = passages.retriever.delete(["a"])  # one document: its passages, counted beside it
    assert deleted == 4 and answer(Written(0, 0)) == Written(1, deleted)
    answer = passages._redo_answer("_delete_where", {"parent": "b"})
    assert passages.retriever.delete_where({"parent": "b"}) == 1 and answer(Written(0, 0)) == Written(1, 1)

    class Pool:
        def __init__(self, result):
            self.result = result

        def submit(self, *args):
            if isinstance(self.result, Exception):
                raise self.result
            done = Future()
            done.set_result(self.result)
            return done

    writer = object.__new__(WriterProcess)
    first, second = Pool(BrokenProcessPool()), Pool(0)
    writer._ready_pool = lambda: first
    writer._restart = lambda dead: setattr(writer, "_pool", second)
    assert writer.write("tiny", ("x", None), "_delete", ["d3"], on_redo=lambda redone: redone + 5) == 5
    assert writer.write("tiny", ("x", None), "_delete", ["d3"]) == 0  # no on_redo: the redo's own answer


def test_many_small_adds_keep_few_segments(indexes):
    client = client_of(indexes, api_key=KEY, max_segments=3)
    for n in range(12):
        client.put("/indexes/tiny/documents", headers=WRITE, json={"documents": [{"_id": f"a{n}", "text": f"word{n}"}]})
        assert client.get("/indexes/tiny").json()["segments"] <= 3
    assert client.get("/indexes/tiny").json()["documents"] == 18
    assert ids(client.get("/indexes/tiny/search", params={"q": [f"word{n}" for n in range(12)], "k": 1})) == \
        [[f"a{n}"] for n in range(12)]


# ---------------------------------------------------------------------------------------------- keys
def test_writes_need_the_key(client, indexes):
    before = state(indexes)
    document = {"documents": [{"_id": "k1", "text": "keyed"}]}
    missing = client.put("/indexes/tiny/documents", json=document)
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
    assert client.put("/indexes/tiny/documents", json=document, headers={"X-API-Key": "guess"}).json() == {"detail": "wrong API key"}
    assert client.post("/indexes/tiny/documents/delete", json={"ids": ["d1"]}).status_code == 401
    assert client.post("/indexes/tiny/merge").status_code == 401
    assert state(indexes) == before
    bearer = client.put("/indexes/tiny/documents", json=document, headers={"Authorization": f"Bearer {KEY}"})
    assert bearer.status_code == 200
    assert client.get("/indexes/tiny/documents/k1").status_code == 200  # reads on loopback need no key


def test_without_a_key_the_server_is_read_only(indexes):
    client = client_of(indexes)
    refused = client.put("/indexes/tiny/documents", json={"documents": [{"_id": "x", "text": "y"}]})
    assert refused.status_code == 403 and "--api-key" in refused.json()["detail"]
    assert ids(client.get("/indexes/tiny/search", params={"q": "mailman"})) == [["d2", "d5"]]


def test_off_loopback_everything_needs_the_key(indexes):
    with pytest.raises(SemiretError, match="serving on 0.0.0.0 .* needs an API key"):
        ServeSettings(indexes, host="0.0.0.0")
    client = client_of(indexes, host="0.0.0.0", api_key=KEY)
    assert client.get("/indexes").status_code == 401
    assert client.get("/indexes/tiny/search", params={"q": "cats"}).status_code == 401
    assert client.get("/indexes", headers=WRITE).status_code == 200
    assert client.get("/healthz").status_code == 200  # probes stay open


def test_index_names_and_settings():
    assert parse_index_specs(["/data/idx/scifact-bm25", "if=/data/idx/scifact-if"]) == {
        "scifact-bm25": "/data/idx/scifact-bm25", "if": "/data/idx/scifact-if"}
    with pytest.raises(SemiretError, match="two indexes are named 'a'"):
        parse_index_specs(["a=/x", "a=/y"])
    with pytest.raises(SemiretError, match="nothing to serve"):
        ServeSettings({})
    with pytest.raises(SemiretError, match="max_batch must be at least 1"):
        ServeSettings({"a": "/x"}, max_batch=0)


def test_workers_sharing_an_index_see_each_others_writes(indexes):
    """Two applications on one directory, as ``--workers 2`` runs them: a write through one is searched
    through the other."""
    first, second = client_of(indexes, api_key=KEY), client_of(indexes, api_key=KEY)
    assert first.put("/indexes/tiny/documents", headers=WRITE, json={"documents": [{"_id": "w1", "text": "walrus"}]}).status_code == 200
    assert ids(second.get("/indexes/tiny/search", params={"q": "walrus"})) == [["w1"]]
    assert second.post("/indexes/tiny/documents/delete", headers=WRITE, json={"ids": ["w1"]}).json()["deleted"] == 1
    assert ids(first.get("/indexes/tiny/search", params={"q": "walrus"})) == [[]]
    assert first.put("/indexes/tiny/documents", headers=WRITE, json={"documents": [{"_id": "w2", "text": "narwhal"}]}).status_code == 200
    assert ids(second.get("/indexes/tiny/search", params={"q": "narwhal walrus"})) == [["w2"]]


def test_documents_of_an_index_without_texts(tmp_path):
    BM25Retriever.build([Document("t1", "text kept nowhere")], tmp_path / "bare", store_texts=False)
    client = client_of({"bare": str(tmp_path / "bare")})
    assert client.get("/indexes/bare/documents/t1").json() == {"_id": "t1"}
    hit = client.post("/indexes/bare/search", json={"queries": ["kept"], "with_text": True}).json()["results"][0][0]
    assert hit["title"] is None and hit["text"] is None


TINY_MODEL, TINY_NAIL, TINY_GDR = object(), object(), object()  # conftest's tiny random models, put in by the test


SERVED = [  # (retriever that builds, its options, retriever that serves where another)
    ("bm25", {}, None), ("bot", {}, None), ("idf", {}, None),
    ("splade", {"model": TINY_MODEL}, None), ("inference-free", {"model": TINY_MODEL}, None),
    ("dense", {"model": TINY_MODEL}, None), ("hybrid", {"neural": "idf"}, None),
    ("sidr-beta", {}, None), ("sidr-beta", {}, "sidr-beta-rerank"), ("sidr-full", {}, None),
    ("nail-sparse", {"model": TINY_NAIL}, None), ("nail-exh", {"model": TINY_NAIL}, None),
    ("bm25+nail", {"model": TINY_NAIL}, None), ("gdr", {"model": TINY_GDR}, None), ("vectors", {}, None),
    ("sparse-vectors", {}, None), ("colbert", {"model": TINY_MODEL}, None), ("multivectors", {}, None),
]


def _bag_of_words(text: str) -> list[float]:
    """A vector made outside semiret for the vectors retriever: the text's words counted into 16 hashed buckets."""
    import zlib

    counts = [0.0] * 16
    for word in text.lower().split():
        counts[zlib.crc32(word.strip(".,").encode()) % 16] += 1.0
    return counts


def _word_vectors(text: str) -> list[list[float]]:
    """Token vectors made outside semiret for the multivectors retriever: each word one-hot in 16 hashed buckets."""
    return [_bag_of_words(word) for word in text.split() if word.strip(".,")]


def _bag_of_terms(text: str) -> dict[str, float]:
    """A sparse vector made outside semiret for the sparse-vectors retriever: the text's words and their counts."""
    words = [word.strip(".,;:").lower() for word in text.split()]
    return {word: float(words.count(word)) for word in words if word}


def test_the_served_list_holds_every_registered_retriever():
    from semiret.search import RETRIEVERS

    assert {served_as or name for name, _, served_as in SERVED} == set(RETRIEVERS)


@pytest.mark.parametrize("name, options, served_as", [  # SiDR's encode with the packaged sidr-scifact
    pytest.param(*case, marks=pytest.mark.integration) if case[0].startswith("sidr") else case for case in SERVED])
def test_every_retriever_is_served(tmp_path, tiny_bert, tiny_nail, tiny_gdr, name, options, served_as):
    """Search, upsert, fetch, delete and merge through every kind of retriever (SiDR's with the packaged model):
    each search answers what the retriever opened on the directory answers, and finds what was just written."""
    from semiret.search import open_retriever, retriever_class

    models = {TINY_MODEL: str(tiny_bert), TINY_NAIL: str(tiny_nail), TINY_GDR: str(tiny_gdr)}
    options = {key: models.get(value, value) for key, value in options.items()}
    brought = {"vectors": _bag_of_words, "sparse-vectors": _bag_of_terms,  # vectors made elsewhere
               "multivectors": _word_vectors}.get(name)
    documents = [dataclasses.replace(d, vector=brought(d.full_text)) for d in TINY_DOCS] if brought else TINY_DOCS
    retriever_class(name).build(documents, tmp_path / "idx", **options)
    client = client_of({"idx": str(tmp_path / "idx")}, api_key=KEY, retrievers={"idx": served_as} if served_as else {})
    assert client.get("/indexes/idx").json()["retriever"] == (served_as or name)

    opened = open_retriever(tmp_path / "idx", served_as)  # beside the server's, as another process would

    def served_and_direct(queries: list[str], k: int) -> tuple[list, list]:
        """The served hits and those of the retriever opened on the directory (refreshed), as (id, score) pairs."""
        asked = {"vectors": [brought(q) for q in queries]} if brought else {"queries": queries}
        answer = client.post("/indexes/idx/search", json={**asked, "k": k})
        assert answer.status_code == 200, answer.text
        served = [[(hit["id"], pytest.approx(hit["score"], rel=1e-5, abs=1e-6)) for hit in hits]
                  for hits in answer.json()["results"]]
        opened.index.refresh()
        direct = [[(hit.id, hit.score) for hit in hits] for hits in opened.search(asked.get("vectors", queries), k=k)]
        return served, direct

    served, direct = served_and_direct(["cats and dogs", "statins"], 3)
    assert served == direct and any(direct), direct  # the served search finds what the retriever finds
    added = client.put("/indexes/idx/documents", headers=WRITE,
                       json={"documents": [{"_id": "new", "text": "Cats and dogs share the garden.",
                                            **({"vector": brought("Cats and dogs share the garden.")}
                                               if brought else {})}]})
    assert added.json()["upserted"] == 1
    assert client.get("/indexes/idx/documents/new").json()["text"] == "Cats and dogs share the garden."
    finds_new = "Cats and dogs share the garden."
    if name == "inference-free":  # the random model expands documents to random tokens; queries are their own
        finds_new = _words_only_this_document_expands_to(tmp_path / "idx", Document("new", finds_new))
    served, direct = served_and_direct([finds_new], 10)
    assert served == direct and "new" in [doc_id for doc_id, _ in direct[0]], direct  # the upsert is searched
    assert client.post("/indexes/idx/documents/delete", headers=WRITE, json={"ids": ["new", "d1"]}).json()["deleted"] == 2
    after_delete = [finds_new, "cats and dogs", "statins"]
    served, direct = served_and_direct(after_delete, 10)
    assert served == direct and direct[2], direct  # (the idf retriever's min_idf drops 'cats' and 'dogs' by now)
    assert not {"new", "d1"} & {doc_id for hits in direct for doc_id, _ in hits}  # the deleted are gone
    assert client.post("/indexes/idx/merge", headers=WRITE).json()["documents"] == 5
    served, direct = served_and_direct(after_delete, 10)  # (BM25's statistics leave the deleted now)
    assert served == direct and direct[2] and not {"new", "d1"} & {doc_id for hits in direct for doc_id, _ in hits}


def _words_only_this_document_expands_to(path, document: Document) -> str:
    """Five words of ``document``'s expansion by the index's document encoder that no document of ``TINY_DOCS``
    expands to, heaviest first: a query of them finds it (each has a high IDF)."""
    from semiret.search import open_retriever

    retriever = open_retriever(path)
    mine, others = retriever.document_side.encode([document]), retriever.document_side.encode(TINY_DOCS)
    weights = dict(zip(mine.terms.tolist(), mine.values.tolist()))
    own = sorted(set(weights) - set(others.terms.tolist()), key=lambda term: -weights[term])
    words = _whole_words(retriever.query_side.vocabulary, own)
    assert len(words) >= 5, words
    return " ".join(words[:5])


def _whole_words(vocabulary, token_ids) -> list[str]:
    """The tokens of ``token_ids`` that a query of the token alone encodes to (whole words), in that order."""
    return [word for word, token_id in zip(map(vocabulary.token, token_ids), token_ids)
            if word.isascii() and word.isalpha() and vocabulary.encode(word) == [token_id]]


def test_rm3_over_http_searches_as_the_python_api(tmp_path):
    corpus = [Document(f"f{i}", f"filler{i} padding{i}") for i in range(40)] + [
        Document("car", "car automobile automobile engine"), Document("auto", "automobile repairs")]
    client = client_of({"cars": BM25Retriever.build(corpus, tmp_path / "cars").index.path}, **LIMITS)
    options = {"rm3": True, "fb_docs": 1, "original_query_weight": 0.3}
    served = ids(client.post("/indexes/cars/search", json={"queries": ["car"], "k": 5, "options": options}))
    direct = [[hit.id for hit in hits] for hits in open_retriever(tmp_path / "cars", **options).search(["car"], k=5)]
    assert served == direct == [["car", "auto"]]
    assert ids(client.post("/indexes/cars/search", json={"queries": ["car"], "k": 5})) == [["car"]]
    wrong = client.post("/indexes/cars/search", json={"queries": ["car"], "options": {"rm3": "yes"}})
    assert wrong.status_code == 422 and "option 'rm3' must be a JSON boolean" in wrong.json()["detail"][0]["msg"]
