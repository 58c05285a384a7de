"""New metadata without encoding documents again (``Retriever.set_metadata``, ``semiret set-metadata``, the
service's ``documents/metadata``, the client's): by id or by filter, set or overwritten, visible to the next
filtered search, the scores and stored texts unchanged; passages keep their parent; every index kind, hybrids' parts
too; bad requests change nothing."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from semiret.cli import app
from semiret.data import Document
from semiret.data.chunking import Chunking
from semiret.errors import SemiretError
from semiret.search import BM25Retriever, retriever_class
from semiret.serving import ServeSettings, create_app

from helpers import LocalClient, client_of

DOCS = [Document(f"d{i}", text, metadata={"year": 2000 + i})
        for i, text in enumerate(["statins lower cholesterol", "aspirin and heart attacks", "statins and the heart",
                                  "sleep and memory", "heart failure trials of statins", "diet and blood pressure"])]


def _ranking(retriever, query="statins heart", **options):
    """Every hit with its score, in an order of their own (equal scores may change order with segments)."""
    return sorted((round(h.score, 5), h.id) for h in retriever.search(query, k=10, **options))


@pytest.mark.parametrize("name, options", [("bm25", {}), ("bot", {}), ("dense", {"model": "tiny_bert"}),
                                           ("hybrid", {"neural": "bot"}), ("nail-sparse", {"model": "tiny_nail"})])
def test_metadata_changes_and_nothing_else(name, options, request, tmp_path):
    options = {k: str(request.getfixturevalue(v)) if k == "model" else v for k, v in options.items()}
    retriever = retriever_class(name).build(DOCS, tmp_path / name, **options)
    retriever.add([Document("late", "statins again", metadata={"year": 2020})])
    before = _ranking(retriever)
    assert retriever.set_metadata({"status": "archived"}, ids=["d0", "late"]) == 2
    assert retriever.get_document("d0").metadata == {"year": 2000, "status": "archived"}
    assert retriever.get_document("d0").text == DOCS[0].text
    assert retriever.count({"status": "archived"}) == 2
    archived = {hit for hit in before if hit[1] in ("d0", "late")}
    assert set(_ranking(retriever, filter={"status": "archived"})) <= archived | {  # BM25's statistics count the
        (score, doc_id) for score, doc_id in _ranking(retriever) if doc_id in ("d0", "late")}  # replaced until a merge
    assert retriever.set_metadata({"status": "new"}, filter={"year": {"gte": 2004}}) == 3
    assert retriever.count({"status": "new"}) == 3 and retriever.count({"status": "archived"}) == 1
    assert retriever.set_metadata({"only": True}, ids=["d1"], overwrite=True) == 1
    assert retriever.get_document("d1").metadata == {"only": True}
    retriever.index.merge()  # the replaced copies gone: the statistics, and so every score, as before
    assert _ranking(retriever) == before


def test_passages_keep_their_parent_and_bad_requests_change_nothing(tmp_path):
    long = [Document("long", " ".join(["statins"] * 30 + ["heart"] * 30), metadata={"year": 1999})]
    retriever = BM25Retriever.build(long + DOCS[:2], tmp_path / "passages", chunking=Chunking(20))
    assert retriever.set_metadata({"year": 2024, "parent": "forged"}, ids=["long"], overwrite=True) == 3
    passages = [d for d in retriever.iter_documents() if d.metadata.get("parent") == "long"]
    assert len(passages) == 3 and all(p.metadata["year"] == 2024 and "chunk" in p.metadata for p in passages)
    stamp = (tmp_path / "passages" / "meta.json").read_text()
    for bad in (dict(metadata={"x": 1}, ids=["nope"]), dict(metadata=["x"], ids=["d0"]),
                dict(metadata={"x": 1}), dict(metadata={"x": 1}, ids=["d0"], filter={"year": 1}),
                dict(metadata={"x": {1, 2}}, ids=["d0"])):
        with pytest.raises(SemiretError):
            retriever.set_metadata(**bad)
    assert (tmp_path / "passages" / "meta.json").read_text() == stamp  # no commit
    assert retriever.set_metadata({"x": 1}, ids=["nope", "d0"], missing_ok=True) == 1
    empty = BM25Retriever.build(DOCS, tmp_path / "bare", store_texts=False)
    with pytest.raises(SemiretError, match="keeps no stored documents"):
        empty.set_metadata({"x": 1}, ids=["d0"])


def test_a_filter_or_a_passage_id_updates_its_whole_document_which_reads_back(tmp_path):
    """A filter one passage passed re-added that passage alone, after its siblings: the document no longer read
    back (``get``, ``recommend``, ``export``: "passages not in order"), and its passages disagreed on the field."""
    docs = [Document("A", "alpha beta gamma delta mouse eps zeta eta theta", metadata={"src": "web"}),
            Document("B", "alpha beta gamma", metadata={"src": "pubmed"})]
    retriever = BM25Retriever.build(docs, tmp_path / "passages", chunking=Chunking(3))
    assert retriever.set_metadata({"flag": True}, filter={"$text": "mouse"}) == 3  # A's three passages
    assert retriever.set_metadata({"seen": 1}, ids=["A#2"]) == 3
    assert retriever.get_documents(["A"])["A"] == Document("A", docs[0].text, metadata={
        "src": "web", "flag": True, "seen": 1})
    assert retriever.count({"flag": True}) == 3 and retriever.count({"seen": 1}) == 3
    assert [d.id for d in retriever.recommend(["A"], k=1)] == ["B"]
    retriever.index.merge()
    assert retriever.get_documents(["A"])["A"].text == docs[0].text


def test_fields_named_parent_and_chunk_are_the_users_own_outside_passages(tmp_path):
    retriever = BM25Retriever.build([Document("r", "a reply", metadata={"parent": "thread-1", "chunk": 3})],
                                    tmp_path / "index")
    assert retriever.set_metadata({"parent": "thread-2"}, ids=["r"]) == 1
    assert retriever.get_document("r").metadata == {"parent": "thread-2", "chunk": 3}
    retriever.set_metadata({"status": "x"}, ids=["r"], overwrite=True)
    assert retriever.get_document("r").metadata == {"status": "x"}


def test_the_writer_process_sets_metadata_too(tmp_path):
    """The service's writes run in a process of their own: the update is done there and searched here at once."""
    BM25Retriever.build(DOCS, tmp_path / "index")
    settings = ServeSettings({"docs": str(tmp_path / "index")}, api_key="key", write_process=True)
    with LocalClient(create_app(settings)) as test_client:
        answer = test_client.post("/indexes/docs/documents/metadata", headers={"X-API-Key": "key"},
                                  json={"ids": ["d0", "d1", "nope"], "metadata": {"tag": "writer"}})
        assert answer.status_code == 200 and answer.json()["updated"] == 2
        found = test_client.post("/indexes/docs/search", json={"queries": ["statins heart aspirin"],
                                                               "filter": {"tag": "writer"}}).json()["results"][0]
        assert {hit["id"] for hit in found} == {"d0", "d1"}


def test_the_command_line_the_service_and_the_client(tmp_path):
    retriever = BM25Retriever.build(DOCS, tmp_path / "index")
    result = CliRunner().invoke(app, ["set-metadata", "--index", str(tmp_path / "index"), "--id", "d0", "--id", "d1",
                                      '{"tag": "cli"}'])
    assert result.exit_code == 0, result.output
    retriever.index.refresh()  # another process's commit (the command's)
    assert retriever.count({"tag": "cli"}) == 2
    bad = CliRunner().invoke(app, ["set-metadata", "--index", str(tmp_path / "index"), "--id", "d0", "{tag"])
    assert bad.exit_code == 2 and "is not a JSON object" in bad.output
    settings = ServeSettings({"docs": str(tmp_path / "index")}, api_key="key", write_process=False)
    with LocalClient(create_app(settings)) as test_client:
        answer = test_client.post("/indexes/docs/documents/metadata", headers={"X-API-Key": "key"},
                                  json={"filter": {"tag": "cli"}, "metadata": {"tag": "http"}})
        assert answer.status_code == 200 and answer.json() == {"status": "acknowledged", "updated": 2}
        skipped = test_client.post("/indexes/docs/documents/metadata", headers={"X-API-Key": "key"},
                                   json={"ids": ["d2", "nope"], "metadata": {"tag": "http"}})
        assert skipped.json()["updated"] == 1
        for body in ({"metadata": {"a": 1}}, {"ids": ["d0"], "metadata": {"a": float("nan")}},
                     {"ids": ["d0"], "metadata": {"a": 1}, "filter": {}}):
            refused = test_client.post("/indexes/docs/documents/metadata", content=json.dumps(body),
                                       headers={"X-API-Key": "key", "content-type": "application/json"})
            assert refused.status_code == 422, body
        assert test_client.post("/indexes/docs/documents/metadata", json={"ids": ["d0"], "metadata": {}}
                                ).status_code == 401

        client = client_of(test_client, api_key="key")
        assert client.set_metadata("docs", {"tag": "client"}, ids=["d5"]) == 1
        assert client.count("docs", {"tag": "http"}) == 3 and client.count("docs", {"tag": "client"}) == 1
    reopened = BM25Retriever.open(tmp_path / "index")
    assert reopened.count({"tag": "client"}) == 1 and reopened.get_document("d5").text == DOCS[5].text
