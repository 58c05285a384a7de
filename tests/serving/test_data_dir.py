"""``semiret serve --data-dir``: indexes created (``PUT /indexes/{name}``) and deleted (``DELETE``) over HTTP, found
again at the next start, seen by every process serving the directory (two applications over one directory stand in
for two ``--workers``), with the writer process too; bad names, retrievers, options and models refused."""

from __future__ import annotations

import json

import pytest

from semiret.errors import SemiretError
from semiret.files import exclusive_lock
from semiret.search import BM25Retriever
from semiret.serving import ServeSettings, create_app
from semiret.serving.data_dir import DataDirectory, IndexGone

from helpers import LocalClient, TINY_DOCS

KEY = {"X-API-Key": "key"}
DOCUMENTS = [{"_id": d.id, "title": d.title, "text": d.text} for d in TINY_DOCS]


def _client(data_dir, write_process: bool = False, **settings) -> LocalClient:
    return LocalClient(create_app(ServeSettings(settings.pop("indexes", {}), data_dir=str(data_dir), api_key="key",
                                               write_process=write_process, **settings)))


def _ids(answer) -> list[list[str]]:
    assert answer.status_code == 200, answer.text
    return [[hit["id"] for hit in hits] for hits in answer.json()["results"]]


@pytest.mark.parametrize("write_process", [False, True], ids=["writes-in-threads", "writer-process"])
def test_create_fill_search_delete(tmp_path, write_process):
    with _client(tmp_path / "data", write_process) as client:
        assert client.get("/indexes").json() == {"indexes": []}
        created = client.put("/indexes/notes", json={"retriever": "bm25", "options": {"k1": 1.2}}, headers=KEY)
        assert created.status_code == 201 and created.json()["documents"] == 0 and created.json()["retriever"] == "bm25"
        assert client.put("/indexes/notes/documents", json={"documents": DOCUMENTS}, headers=KEY).status_code == 200
        direct = BM25Retriever.build(TINY_DOCS, tmp_path / "direct", k1=1.2)
        expected = [[hit.id for hit in direct.search("cats and dogs", k=3)]]
        assert _ids(client.post("/indexes/notes/search", json={"queries": ["cats and dogs"], "k": 3})) == expected
        assert [index["name"] for index in client.get("/indexes").json()["indexes"]] == ["notes"]
        assert client.put("/indexes/notes", json={}, headers=KEY).status_code == 409
        assert client.delete("/indexes/notes", headers=KEY).json() == {"status": "acknowledged"}
        assert client.get("/indexes/notes").status_code == 404
        assert client.post("/indexes/notes/search", json={"queries": ["cats"]}).status_code == 404
        assert client.put("/indexes/notes/documents", json={"documents": DOCUMENTS}, headers=KEY).status_code == 404
        assert [p.name for p in (tmp_path / "data").iterdir()] == [".lock"]
        # the name again, another retriever: the writer must not write into what it had open under that name
        assert client.put("/indexes/notes", json={"retriever": "bot"}, headers=KEY).status_code == 201
        assert client.put("/indexes/notes/documents", json={"documents": DOCUMENTS[:2]}, headers=KEY).status_code == 200
        described = client.get("/indexes/notes").json()
        assert described["retriever"] == "bot" and described["documents"] == 2


def test_a_writer_restarted_after_a_delete_opens_the_indexes_left(tmp_path):
    """An index deleted over HTTP, then the writer process killed (as an out-of-memory kill would): the writer
    started in its place opens what is still served, and writes and readiness go on."""
    import os
    import signal

    with _client(tmp_path / "data") as first:
        for name in ("a", "b"):
            assert first.put(f"/indexes/{name}", json={}, headers=KEY).status_code == 201
    with _client(tmp_path / "data", write_process=True) as client:
        assert client.delete("/indexes/b", headers=KEY).status_code == 200
        os.kill(client.app.state.writer.pid, signal.SIGKILL)
        assert client.get("/readyz").status_code == 200
        assert client.put("/indexes/a/documents", json={"documents": DOCUMENTS}, headers=KEY).status_code == 200
        assert sorted(_ids(client.post("/indexes/a/search", json={"queries": ["statins"], "k": 2}))[0]) == ["d3", "d6"]


def test_indexes_outlive_the_server_and_every_process_sees_the_others(tmp_path):
    first, second = _client(tmp_path / "data"), _client(tmp_path / "data")
    assert first.put("/indexes/a", json={}, headers=KEY).status_code == 201
    assert first.put("/indexes/a/documents", json={"documents": DOCUMENTS}, headers=KEY).status_code == 200
    assert sorted(_ids(second.post("/indexes/a/search", json={"queries": ["statins"], "k": 2}))[0]) == ["d3", "d6"]
    assert [index["name"] for index in second.get("/indexes").json()["indexes"]] == ["a"]
    assert second.delete("/indexes/a", headers=KEY).status_code == 200
    assert first.post("/indexes/a/search", json={"queries": ["statins"]}).status_code == 404
    assert first.get("/readyz").status_code == 200 and first.get("/indexes").json() == {"indexes": []}
    # deleted by one, created again with another retriever by the other: the first serves the new one
    assert second.put("/indexes/a", json={"retriever": "bot"}, headers=KEY).status_code == 201
    assert first.put("/indexes/a", json={}, headers=KEY).status_code == 409
    assert first.get("/indexes/a").json()["retriever"] == "bot"
    assert second.put("/indexes/a/documents", json={"documents": DOCUMENTS[:1]}, headers=KEY).status_code == 200
    assert first.get("/indexes/a").json()["documents"] == 1
    restarted = _client(tmp_path / "data")
    assert restarted.get("/indexes/a").json()["documents"] == 1


def test_passages_and_model_options_at_creation(tmp_path):
    client = _client(tmp_path / "data")
    created = client.put("/indexes/p", json={"chunk_words": 4, "chunk_overlap": 1}, headers=KEY)
    assert created.status_code == 201 and created.json()["chunking"] == {"words": 4, "overlap": 1, "spaceless": True}
    client.put("/indexes/p/documents", json={"documents": DOCUMENTS[2:3]}, headers=KEY)
    assert client.get("/indexes/p").json()["documents"] == 4  # twelve words: four passages of four, overlapping by one
    for body, loc, message in [
        ({"retriever": "nope"}, ["body", "retriever"], "unknown retriever 'nope'"),
        ({"options": {"rm3": True}}, ["body", "options", "rm3"], "does not apply"),
        ({"options": {"k1": "1"}}, ["body", "options", "k1"], "must be a JSON number"),
        ({"retriever": "dense", "options": {"model": "/etc"}}, ["body", "options", "model"], "not a model this server"),
        ({"retriever": "idf", "options": {"tokenizer": "some/hub-id"}}, ["body", "options", "tokenizer"],
         "not a model"),
        ({"chunk_overlap": 2}, ["body", "chunk_words"], "give --chunk-words too"),
    ]:
        refused = client.put("/indexes/q", json=body, headers=KEY)
        assert refused.status_code == 422, (body, refused.text)
        assert refused.json()["detail"][0]["loc"] == loc and message in refused.json()["detail"][0]["msg"], body
        if body.get("retriever") == "dense":  # the models a dense index may be built with, not every one installed
            named = refused.json()["detail"][0]["msg"].split("may name one of: ")[1]
            assert "minilm" in named and "nail-scifact" not in named and "smollm2-135m" not in named
    assert client.put("/indexes/q", json={"options": {"k1": -1}}, headers=KEY).status_code == 422  # the build's check
    analyzer = client.put("/indexes/q", json={"options": {"stopwords": "xx"}}, headers=KEY)
    assert analyzer.status_code == 422 and "stopwords: unknown stopword list 'xx'" in analyzer.json()["detail"]
    spoken = client.put("/indexes/q", json={"options": {"language": "elvish"}}, headers=KEY)
    assert spoken.status_code == 422 and "language: unknown language 'elvish'" in spoken.json()["detail"]
    german = client.put("/indexes/de", json={"options": {"language": "de"}}, headers=KEY)
    assert german.status_code == 201, german.text
    client.put("/indexes/de/documents", json={"documents": [{"_id": "h", "text": "Die Häuser der Stadt"}]}, headers=KEY)
    assert _ids(client.post("/indexes/de/search", json={"queries": ["Haus", "der"]})) == [["h"], []]
    outside = client.put("/indexes/q", json={"retriever": "gdr", "options": {"embedding_cache": str(tmp_path / "c")}},
                         headers=KEY)
    assert outside.status_code == 422 and outside.json()["detail"][0]["loc"] == ["body", "options", "embedding_cache"]
    assert not (tmp_path / "c").exists()
    assert client.put("/indexes/.hidden", json={}, headers=KEY).status_code == 422
    assert client.put("/indexes/" + "x" * 65, json={}, headers=KEY).status_code == 422
    assert not (tmp_path / "data" / "q").exists()
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == [".lock", "de", "p"]


def test_what_the_server_does_not_own_or_allow(tmp_path):
    given = BM25Retriever.build(TINY_DOCS, tmp_path / "given").index.path
    client = _client(tmp_path / "data", indexes={"given": str(given)})
    assert client.put("/indexes/given", json={}, headers=KEY).status_code == 409
    assert client.delete("/indexes/given", headers=KEY).status_code == 403 and given.exists()
    assert client.put("/indexes/new", json={}).status_code == 401
    assert client.delete("/indexes/nope", headers=KEY).status_code == 404
    plain = LocalClient(create_app(ServeSettings({"given": str(given)}, api_key="key", write_process=False)))
    assert plain.put("/indexes/new", json={}, headers=KEY).status_code == 403
    (tmp_path / "data" / "given").mkdir()
    BM25Retriever.build(TINY_DOCS, tmp_path / "data" / "given" / "x")  # not an index itself: not served
    (tmp_path / "data" / "clash").mkdir()
    BM25Retriever.build(TINY_DOCS[:1], tmp_path / "data" / "clash", overwrite=True)
    with pytest.raises(SemiretError, match="--index names clash, which --data-dir"):
        create_app(ServeSettings({"clash": str(given)}, data_dir=str(tmp_path / "data"), write_process=False))
    with pytest.raises(SemiretError, match="does not go with --backend"):
        ServeSettings({}, data_dir=str(tmp_path / "data"), backend="milvus:x.db")
    with pytest.raises(SemiretError, match="nothing to serve"):
        ServeSettings({})


def test_leftovers_of_a_killed_create_or_delete_are_removed(tmp_path):
    data = tmp_path / "data"
    for leftover in (".staging-a-1", ".deleted-b-2"):
        (data / leftover).mkdir(parents=True)
        (data / leftover / "meta.json").write_text("{}")
    (data / ".staging-z-9.lock").write_text("")  # a lock file whose build never made its folder
    (data / "..staging-r-4.tmp-999999999-ab").mkdir()  # what a killed restore staged (its process is gone)
    assert DataDirectory(data).names() == [] and list(data.iterdir()) == []
    # a staging folder a build holds (another worker creating an index) is no leftover
    building = data / ".staging-c-3"
    building.mkdir()
    with exclusive_lock(data / ".staging-c-3.lock"):
        DataDirectory(data)
        assert building.is_dir()
    DataDirectory(data)
    assert not building.exists()
    (tmp_path / "file").write_text("")
    with pytest.raises(SemiretError, match="is not a directory"):
        DataDirectory(tmp_path / "file")


def test_two_workers_share_the_data_directory(tmp_path):
    """Real worker processes (uvicorn's), each with its writer process: what one creates, fills or deletes, the
    other serves at once."""
    import json
    import urllib.error
    import urllib.request

    from semiret.serving.process import ServerProcess

    def call(url, method="GET", body=None):
        request = urllib.request.Request(url, method=method, data=None if body is None else json.dumps(body).encode(),
                                         headers={"content-type": "application/json", **KEY})
        try:
            with urllib.request.urlopen(request) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    with ServerProcess({}, api_key="key", workers=2, extra_args=["--data-dir", str(tmp_path / "data")]) as server:
        assert call(f"{server.url}/indexes/a", "PUT", {})[0] == 201
        assert call(f"{server.url}/indexes/a/documents", "PUT", {"documents": DOCUMENTS})[0] == 200
        searched = [call(f"{server.url}/indexes/a/search", "POST", {"queries": ["statins"]}) for _ in range(12)]
        assert {status for status, _ in searched} == {200} and all(answer["results"][0] for _, answer in searched)
        assert call(f"{server.url}/indexes/a", "DELETE")[0] == 200
        assert {call(f"{server.url}/indexes/a/search", "POST", {"queries": ["cats"]})[0] for _ in range(12)} == {404}
        assert call(f"{server.url}/indexes/a", "PUT", {"retriever": "bot"})[0] == 201
        assert {call(f"{server.url}/indexes/a/documents", "PUT", {"documents": [d]})[0] for d in DOCUMENTS} == {200}
        assert {call(f"{server.url}/indexes/a")[1]["documents"] for _ in range(12)} == {len(DOCUMENTS)}
        # an alias switched by one worker is followed by both at their next request
        assert call(f"{server.url}/indexes/b", "PUT", {})[0] == 201
        assert call(f"{server.url}/aliases/live", "PUT", {"index": "a"})[0] == 200
        assert {call(f"{server.url}/indexes/live")[1]["name"] for _ in range(12)} == {"a"}
        assert call(f"{server.url}/aliases/live", "PUT", {"index": "b"})[1]["previous"] == "a"
        assert {call(f"{server.url}/indexes/live")[1]["name"] for _ in range(12)} == {"b"}
        # whichever worker answers a scrape counts both workers' searches (12 of the first index a, 12 of the second)
        for _ in range(4):
            with urllib.request.urlopen(f"{server.url}/metrics") as answer:
                text = answer.read().decode()
            assert 'semiret_search_queries_total{index="a"} 12.0' in text.splitlines()


def test_a_delete_waits_for_a_write_without_holding_up_the_rest(tmp_path):
    import threading
    import time

    client = _client(tmp_path / "data")
    assert client.put("/indexes/a", json={}, headers=KEY).status_code == 201
    assert client.put("/indexes/b", json={}, headers=KEY).status_code == 201
    writer = BM25Retriever.open(tmp_path / "data" / "a")
    answers = []
    with writer.index.writing():  # a write under way (another process's, say)
        deleting = threading.Thread(target=lambda: answers.append(client.delete("/indexes/a", headers=KEY)))
        deleting.start()
        time.sleep(0.3)
        started = time.perf_counter()
        assert client.get("/readyz").status_code == 200
        assert client.put("/indexes/c", json={}, headers=KEY).status_code == 201
        assert time.perf_counter() - started < 5 and deleting.is_alive() and (tmp_path / "data" / "a").exists()
    deleting.join(30)
    assert answers[0].status_code == 200 and not (tmp_path / "data" / "a").exists()
    data = DataDirectory(tmp_path / "data")
    stale = BM25Retriever.open(tmp_path / "data" / "b").index
    data.delete("b", stale)
    with pytest.raises(IndexGone):  # a second delete of the same index (two requests at once)
        data.delete("b", stale)
    assert client.put("/indexes/b", json={"retriever": "bot"}, headers=KEY).status_code == 201
    with pytest.raises(IndexGone):  # deleted and made again meanwhile: the index asked for is gone
        data.delete("b", stale)
    assert (tmp_path / "data" / "b").is_dir()


def test_a_write_whose_index_is_deleted_under_it_is_a_404(tmp_path, monkeypatch):
    from semiret.serving.served import ServedIndex

    client = _client(tmp_path / "data")
    assert client.put("/indexes/a", json={}, headers=KEY).status_code == 201
    upsert = ServedIndex._upsert

    def deleted_first(index, documents):  # another worker's DELETE, between the lookup and the write
        (tmp_path / "data" / "a").rename(tmp_path / "elsewhere")
        return upsert(index, documents)

    monkeypatch.setattr(ServedIndex, "_upsert", deleted_first)
    answer = client.put("/indexes/a/documents", json={"documents": DOCUMENTS}, headers=KEY)
    assert answer.status_code == 404 and "deleted meanwhile" in answer.json()["detail"]
    monkeypatch.setattr(ServedIndex, "_upsert", upsert)
    assert client.put("/indexes/b", json={}, headers=KEY).status_code == 201

    def made_again_first(index, documents):  # deleted and made again by another worker meanwhile
        (tmp_path / "data" / "b").rename(tmp_path / "elsewhere-b")
        BM25Retriever.build([], tmp_path / "data" / "b")
        return upsert(index, documents)

    monkeypatch.setattr(ServedIndex, "_upsert", made_again_first)
    again = client.put("/indexes/b/documents", json={"documents": DOCUMENTS}, headers=KEY)
    assert again.status_code == 404 and "deleted meanwhile" in again.json()["detail"]


def test_reads_and_lists_of_an_index_deleted_under_them_are_404s_and_leave_it_out(tmp_path, monkeypatch):
    """A read that found its index, then refreshed it after a DELETE renamed its folder away, was a 503 naming
    the server's path (a broken index's answer); a list or a readiness probe meanwhile failed whole."""
    from semiret.serving.served import ServedIndex

    client = _client(tmp_path / "data")
    for name in ("a", "b"):
        assert client.put(f"/indexes/{name}", json={}, headers=KEY).status_code == 201
    count, describe = ServedIndex.count, ServedIndex.describe

    def deleted_first(index, *args):  # a DELETE between the lookup and the read
        (tmp_path / "data" / index.name).rename(tmp_path / f"gone-{index.name}")
        return count(index, *args)

    monkeypatch.setattr(ServedIndex, "count", deleted_first)
    answer = client.post("/indexes/a/documents/count", json={})
    assert answer.status_code == 404 and answer.json()["detail"] == "no index 'a': deleted meanwhile"
    monkeypatch.setattr(ServedIndex, "count", count)

    def listed_as_deleted(index):
        if index.name == "b":
            (tmp_path / "data" / "b").rename(tmp_path / "gone-b")
        return describe(index)

    assert client.put("/indexes/c", json={}, headers=KEY).status_code == 201
    monkeypatch.setattr(ServedIndex, "describe", listed_as_deleted)
    listed = client.get("/indexes")
    assert listed.status_code == 200 and [index["name"] for index in listed.json()["indexes"]] == ["c"]
    assert client.get("/readyz").json() == {"status": "ready", "indexes": ["c"]}


def test_an_index_made_or_deleted_is_on_disk_before_the_answer(tmp_path, monkeypatch):
    """The renames that make and delete an index are synced (their directory's entry) before the 201 and the 200:
    a power cut after the answer cannot undo them."""
    import semiret.serving.data_dir as data_dir

    synced = []
    monkeypatch.setattr(data_dir, "fsync_directory", lambda path: synced.append(("sync", path)))
    rename = type(tmp_path).rename
    monkeypatch.setattr(type(tmp_path), "rename", lambda self, to: synced.append(("rename", to)) or rename(self, to))
    client = _client(tmp_path / "data")
    assert client.put("/indexes/a", json={}, headers=KEY).status_code == 201
    assert synced[-2:] == [("rename", tmp_path / "data" / "a"), ("sync", tmp_path / "data")]
    assert client.delete("/indexes/a", headers=KEY).status_code == 200
    assert synced[-1] == ("sync", tmp_path / "data") and synced[-2][0] == "rename"


def test_the_command_line_sets_lists_and_removes_a_data_directorys_aliases(tmp_path):
    """`semiret alias --data-dir`: the aliases a server on that directory follows at its next request."""
    import json

    from typer.testing import CliRunner

    from semiret.cli import app

    client = _client(tmp_path / "data")
    for name in ("a", "b"):
        assert client.put(f"/indexes/{name}", json={}, headers=KEY).status_code == 201
    client.put("/indexes/b/documents", json={"documents": DOCUMENTS}, headers=KEY)
    runner, data = CliRunner(), str(tmp_path / "data")
    assert runner.invoke(app, ["alias", "--data-dir", data, "live", "a"]).exit_code == 0
    assert client.get("/indexes/live").json()["documents"] == 0  # the server follows it
    switched = runner.invoke(app, ["alias", "--data-dir", data, "live", "b"])
    assert switched.exit_code == 0 and "it stood for 'a'" in switched.output
    assert client.get("/indexes/live").json()["documents"] == len(DOCUMENTS)
    listed = runner.invoke(app, ["alias", "--data-dir", data])
    assert [json.loads(line) for line in listed.stdout.splitlines()] == [{"alias": "live", "index": "b"}]
    for wrong, message in ((["x", "nope"], "no index 'nope'"), (["a", "b"], "is an index"),
                           (["--remove", "nope"], "no alias 'nope'"), (["live"], "give ALIAS INDEX")):
        refused = runner.invoke(app, ["alias", "--data-dir", data, *wrong])
        assert refused.exit_code != 0 and message in refused.output, (wrong, refused.output)
    assert runner.invoke(app, ["alias", "--data-dir", data, "--remove", "live"]).exit_code == 0
    assert client.get("/indexes/live").status_code == 404


def test_an_index_made_over_http_reads_its_documents_fields_as_it_was_told(tmp_path):
    """``PUT /indexes/NAME`` takes ``metadata_fields``, ``id_field`` and ``text_field`` (given as options they were
    refused as options that do not apply, with no way to give them); the documents added then read those fields,
    however they arrive, and the index describes them; an upsert's fields left out are said in its answer."""
    from semiret.data import Document

    from helpers import client_of

    with _client(tmp_path / "data") as client:
        misplaced = client.put("/indexes/tickets", json={"options": {"metadata_fields": ["priority"]}}, headers=KEY)
        assert misplaced.status_code == 422, misplaced.text
        assert misplaced.json()["detail"][0]["loc"] == ["body", "options", "metadata_fields"]
        assert "a field of the request beside options" in misplaced.json()["detail"][0]["msg"]
        for bad, place in (({"id_field": "title"}, "id_field"), ({"metadata_fields": []}, "metadata_fields"),
                           ({"id_field": "key", "text_field": "key"}, "text_field"),
                           ({"id_field": "text"}, "id_field")):  # (the text's usual field, the text's not named)
            refused = client.put("/indexes/tickets", json=bad, headers=KEY)
            assert refused.status_code == 422 and refused.json()["detail"][0]["loc"] == ["body", place], refused.text
        made = client.put("/indexes/tickets", json={"metadata_fields": ["priority"], "id_field": "ticket",
                                                    "text_field": "summary"}, headers=KEY)
        assert made.status_code == 201, made.text
        assert {key: made.json()[key] for key in ("metadata_fields", "id_field", "text_field")} == {
            "metadata_fields": ["priority"], "id_field": "ticket", "text_field": "summary"}
        added = client.put("/indexes/tickets/documents", headers=KEY, json={"documents": [
            {"ticket": "T-1", "summary": "login fails", "priority": "high", "votes": 3}]})
        said = added.json().pop("warnings")  # votes: not kept, as asked, and named (not priority, kept)
        assert added.json() == {"status": "acknowledged", "upserted": 1, "warnings": said}
        assert len(said) == 1 and "the field 'votes' of its documents is left out" in said[0] and "priority" not in said[0]
        assert client.get("/indexes/tickets/documents/T-1").json() == {
            "_id": "T-1", "title": "", "text": "login fails", "metadata": {"priority": "high"}}
        beir = client.put("/indexes/tickets/documents", headers=KEY, json={"documents": [{"_id": "T-2", "text": "x"}]})
        assert beir.json() == {"status": "acknowledged", "upserted": 1}  # BEIR's names, where the named are missing
        other = client.put("/indexes/tickets/documents", headers=KEY, json={"documents": [{"id": "T-2", "body": "x"}]})
        assert other.status_code == 422 and "missing id field 'ticket'" in other.text and "nor '_id'" in other.text
        assert client_of(client, "key").add("tickets", [Document("T-3", "password reset", metadata={"priority": "low"}),
                                                        {"ticket": "T-4", "summary": "sync", "priority": "low"}]) == 2
        assert client.get("/indexes/tickets/documents/T-4").json()["metadata"] == {"priority": "low"}
        assert client.put("/indexes/plain", json={}, headers=KEY).status_code == 201
        dropped = client.put("/indexes/plain/documents", headers=KEY, json={"documents": [
            {"_id": "a", "text": "login fails", "priority": "high"}]}).json()
        assert dropped["upserted"] == 1
        assert "the field 'priority' of its documents is left out" in dropped["warnings"][0]


def test_an_upserted_documents_wrong_value_is_named_by_the_field_it_came_in(tmp_path):
    """A 422's ``loc`` names the field as the document names it (``body``, an index's text_field; Pyserini's
    ``contents``), not ``text`` or ``_id``, the names semiret reads them under: in JSON and in JSONL alike."""
    with _client(tmp_path / "data") as client:
        made = client.put("/indexes/notes", json={"id_field": "doc_id", "text_field": "body"}, headers=KEY)
        assert made.status_code == 201, made.text

        def refused(documents: list, loc: list, jsonl: bool = False):
            if jsonl:
                answer = client.put("/indexes/notes/documents", content="\n".join(map(json.dumps, documents)),
                                    headers={**KEY, "content-type": "application/x-ndjson"})
            else:
                answer = client.put("/indexes/notes/documents", json={"documents": documents}, headers=KEY)
            assert answer.status_code == 422 and answer.json()["detail"][0]["loc"] == loc, answer.text

        refused([{"doc_id": "x1", "body": 12345}], ["body", "documents", 0, "body"])
        refused([{"doc_id": "x0", "body": "fine"}, {"doc_id": "x1", "body": 12345}], ["body", "line", 2, "body"], True)
        refused([{"doc_id": ["x1"], "body": "text"}], ["body", "documents", 0, "doc_id"])
        refused([{"doc_id": "x1", "body": "text", "title": 3}], ["body", "documents", 0, "title"])  # (its own name)
        refused([{"_id": "x1", "text": 12345}], ["body", "documents", 0, "text"])  # BEIR's names, where they came in
        assert client.put("/indexes/plain", json={}, headers=KEY).status_code == 201
        pyserini = client.put("/indexes/plain/documents", json={"documents": [{"id": "p", "contents": 7}]},
                              headers=KEY)
        assert pyserini.status_code == 422 and pyserini.json()["detail"][0]["loc"] == ["body", "documents", 0,
                                                                                       "contents"], pyserini.text
