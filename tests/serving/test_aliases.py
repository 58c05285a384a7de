"""Aliases of ``semiret serve --data-dir`` (``PUT``/``DELETE /aliases/{alias}``, ``GET /aliases``): searches and
writes through an alias reach the index it stands for; a switch is seen at once, by every process serving the
directory, and after a restart; names are never shared between aliases and indexes; deleting an index removes its
aliases; bad requests refused with the right status."""

from __future__ import annotations

import pytest

from semiret.search import BM25Retriever
from semiret.serving import ServeSettings, create_app

from helpers import LocalClient, TINY_DOCS

KEY = {"X-API-Key": "key"}
OLD = [{"_id": "old", "text": "statins in an old index"}]
NEW = [{"_id": "new", "text": "statins in a new index"}]


def _client(data_dir, write_process: bool = False, **settings) -> LocalClient:
    return LocalClient(create_app(ServeSettings(settings.pop("indexes", {}), data_dir=str(data_dir), api_key="key",
                                               write_process=write_process, **settings)))


def _top(client, name: str):
    answer = client.post(f"/indexes/{name}/search", json={"queries": ["statins"], "k": 5})
    return [hit["id"] for hit in answer.json()["results"][0]] if answer.status_code == 200 else answer.status_code


def _two_indexes(client) -> None:
    for name, documents in (("docs-v1", OLD), ("docs-v2", NEW)):
        assert client.put(f"/indexes/{name}", json={}, headers=KEY).status_code == 201
        assert client.put(f"/indexes/{name}/documents", json={"documents": documents}, headers=KEY).status_code == 200


@pytest.mark.parametrize("write_process", [False, True], ids=["writes-in-threads", "writer-process"])
def test_an_alias_switches_at_once_for_every_process(tmp_path, write_process):
    with _client(tmp_path / "data", write_process) as first, _client(tmp_path / "data") as second:
        _two_indexes(first)
        made = first.put("/aliases/docs", json={"index": "docs-v1"}, headers=KEY)
        assert made.status_code == 200 and made.json() == {"alias": "docs", "index": "docs-v1"}
        assert _top(first, "docs") == _top(second, "docs") == ["old"]
        assert first.get("/indexes/docs").json()["name"] == "docs-v1"  # which index answered
        switched = second.put("/aliases/docs", json={"index": "docs-v2"}, headers=KEY)
        assert switched.json() == {"alias": "docs", "index": "docs-v2", "previous": "docs-v1"}
        assert _top(first, "docs") == _top(second, "docs") == ["new"]
        # writes through the alias land in the index it stands for
        added = first.put("/indexes/docs/documents", json={"documents": [{"_id": "x", "text": "statins"}]},
                          headers=KEY)
        assert added.status_code == 200
        assert sorted(_top(second, "docs-v2")) == ["new", "x"] and _top(second, "docs-v1") == ["old"]
        assert first.get("/aliases").json() == {"aliases": [{"alias": "docs", "index": "docs-v2"}]}
        assert first.get("/indexes/docs-v2").json()["aliases"] == ["docs"]  # an index names its aliases
        assert first.get("/indexes/docs-v1").json()["aliases"] is None
    with _client(tmp_path / "data") as restarted:  # kept in the data directory
        assert sorted(_top(restarted, "docs")) == ["new", "x"]
        assert restarted.delete("/aliases/docs", headers=KEY).json() == {"status": "acknowledged"}
        assert _top(restarted, "docs") == 404 and restarted.get("/aliases").json() == {"aliases": []}
        assert restarted.delete("/aliases/docs", headers=KEY).status_code == 404
        assert _top(restarted, "docs-v2")  # the index stays


def test_names_are_never_shared_and_deleting_an_index_removes_its_aliases(tmp_path):
    with _client(tmp_path / "data") as client:
        _two_indexes(client)
        assert client.put("/aliases/docs", json={"index": "docs-v1"}, headers=KEY).status_code == 200
        assert client.put("/aliases/other", json={"index": "docs-v2"}, headers=KEY).status_code == 200
        taken = client.put("/aliases/docs-v2", json={"index": "docs-v1"}, headers=KEY)
        assert taken.status_code == 409 and "is an index" in taken.text
        assert client.put("/indexes/docs", json={}, headers=KEY).status_code == 409  # an alias's name
        missing = client.put("/aliases/x", json={"index": "nowhere"}, headers=KEY)
        assert missing.status_code == 404 and "no index 'nowhere'" in missing.text
        assert client.put("/aliases/x", json={"index": "docs"}, headers=KEY).status_code == 404  # not of an alias
        assert client.put("/aliases/x", json={"index": "x"}, headers=KEY).status_code == 422
        assert client.put("/aliases/.hidden", json={"index": "docs-v1"}, headers=KEY).status_code == 422
        assert client.put("/aliases/x", json={"index": "docs-v1", "extra": 1}, headers=KEY).status_code == 422
        refused = client.delete("/indexes/docs", headers=KEY)
        assert refused.status_code == 409 and "DELETE /aliases/docs" in refused.text
        assert _top(client, "docs-v1") == ["old"]  # not deleted through its alias
        assert client.delete("/indexes/docs-v1", headers=KEY).status_code == 200
        assert client.get("/aliases").json() == {"aliases": [{"alias": "other", "index": "docs-v2"}]}
        assert _top(client, "docs") == 404
        # the name of a removed alias is free for an index again
        assert client.put("/indexes/docs", json={}, headers=KEY).status_code == 201


def test_an_alias_may_stand_for_an_index_given_with_index(tmp_path):
    BM25Retriever.build(TINY_DOCS, tmp_path / "given")
    with _client(tmp_path / "data", indexes={"given": str(tmp_path / "given")}) as client:
        assert client.put("/aliases/current", json={"index": "given"}, headers=KEY).status_code == 200
        assert _top(client, "current") == _top(client, "given") != 404


def test_an_index_given_with_index_never_takes_an_alias_name(tmp_path):
    from semiret.errors import SemiretError

    BM25Retriever.build(TINY_DOCS, tmp_path / "given")
    with _client(tmp_path / "data") as client:
        _two_indexes(client)
        assert client.put("/aliases/live", json={"index": "docs-v1"}, headers=KEY).status_code == 200
    with pytest.raises(SemiretError, match="--index names live, an alias in --data-dir"):
        _client(tmp_path / "data", indexes={"live": str(tmp_path / "given")})


def test_aliases_need_a_data_directory_and_a_key(tmp_path):
    BM25Retriever.build(TINY_DOCS, tmp_path / "given")
    with LocalClient(create_app(ServeSettings({"given": str(tmp_path / "given")}, api_key="key",
                                             write_process=False))) as client:
        assert client.get("/aliases").json() == {"aliases": []}
        assert client.put("/aliases/x", json={"index": "given"}, headers=KEY).status_code == 403
    with LocalClient(create_app(ServeSettings({}, data_dir=str(tmp_path / "data"), write_process=False))) as client:
        assert client.put("/aliases/x", json={"index": "given"}).status_code == 403  # read-only: no --api-key
    with _client(tmp_path / "data") as client:
        assert client.put("/aliases/x", json={"index": "given"}).status_code == 401


def test_a_damaged_alias_file_is_a_clear_error(tmp_path):
    with _client(tmp_path / "data") as client:
        _two_indexes(client)
        (tmp_path / "data" / ".aliases.json").write_text("[1, 2]")
        answer = client.post("/indexes/docs/search", json={"queries": ["statins"]})
        assert answer.status_code == 503 and ".aliases.json is not the JSON object of aliases" in answer.text
        assert _top(client, "docs-v1") == ["old"]  # indexes are still served by their names
