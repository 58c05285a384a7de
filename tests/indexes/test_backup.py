"""Backups (`semiret backup`, ``Retriever.backup``): a copy of an index's last commit that opens on its own, hard-linked
where it can be, and independent of the index afterwards in both directions."""

from __future__ import annotations

import json
import shutil
import time

import errno
import os

import pytest
from typer.testing import CliRunner

from semiret.cli import app
from semiret.data import Document
from semiret.errors import IndexFormatError, SemiretError
from semiret.indexes.storage import DELETED_FILE
from semiret.search import BM25Retriever, HybridRetriever, open_retriever

WORDS = "statins heart cancer risk trial dose cohort blood pressure diet sleep".split()


def _corpus(start: int, n: int) -> list[Document]:
    return [Document(f"d{i}", " ".join(WORDS[(i + j) % len(WORDS)] for j in range(i % 5 + 2)),
                     metadata={"n": i}) for i in range(start, start + n)]


def _state(retriever) -> tuple:
    hits = retriever.search(["statins heart", "sleep diet risk"], k=20)
    return sorted(retriever.index.live_ids()), hits.ids, hits.scores


@pytest.fixture
def indexed(tmp_path):
    retriever = BM25Retriever.build(_corpus(0, 30), tmp_path / "index")
    retriever.add(_corpus(30, 10))  # a second segment
    retriever.delete(["d3", "d31"])
    return retriever


def test_a_backup_is_the_index_as_committed_and_shares_its_unchanging_files(indexed, tmp_path):
    backup = open_retriever(indexed.backup(tmp_path / "backup"))
    assert _state(backup) == _state(indexed) and backup.count({"n": {"lt": 10}}) == 9
    segment = indexed.index.segments[0].path.name
    original, copied = indexed.index.path / segment, tmp_path / "backup" / segment
    assert os.stat(original / "postings.docs.npy").st_ino == os.stat(copied / "postings.docs.npy").st_ino
    assert os.stat(original / DELETED_FILE).st_ino != os.stat(copied / DELETED_FILE).st_ino


def test_changes_to_either_never_reach_the_other(indexed, tmp_path):
    before = _state(indexed)
    backup = open_retriever(indexed.backup(tmp_path / "backup"))
    indexed.delete(["d0", "d32"])  # marks appended to the deletion files the index keeps
    indexed.add([Document("new", "zebra statins")])  # a word the vocabulary gains
    assert _state(open_retriever(tmp_path / "backup")) == before
    backup.delete(["d1"])
    backup.add([Document("other", "walrus heart")])
    reopened = open_retriever(indexed.index.path)
    assert "d1" in reopened.index and "other" not in reopened.index and "new" in reopened.index
    assert "walrus" not in (indexed.index.path / "vocab.txt").read_text().split()
    assert "walrus" in (tmp_path / "backup" / "vocab.txt").read_text().split()
    assert sorted(open_retriever(indexed.index.path).index.live_ids()) == sorted(indexed.index.live_ids())
    indexed.index.merge()  # folders the backup links to go from the index; the backup still opens
    assert _state(open_retriever(tmp_path / "backup")) == _state(backup)


def test_only_the_commit_is_copied(indexed, tmp_path):
    segment = indexed.index.segments[0].path
    with open(segment / DELETED_FILE, "ab") as marks:  # a delete that crashed before its commit
        marks.write((7).to_bytes(4, "little"))
    (indexed.index.path / "seg-999999").mkdir()  # a segment of no commit
    backup = open_retriever(indexed.backup(tmp_path / "backup"))
    assert "d7" in backup.index and not (tmp_path / "backup" / "seg-999999").exists()
    assert not (tmp_path / "backup" / "write.lock").exists()


def test_file_systems_without_shared_links_get_copies(indexed, tmp_path, monkeypatch):
    def no_links(source, target):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", no_links)
    backup = open_retriever(indexed.backup(tmp_path / "backup"))
    assert _state(backup) == _state(indexed)
    segment = indexed.index.segments[0].path.name
    assert (os.stat(indexed.index.path / segment / "postings.docs.npy").st_ino
            != os.stat(tmp_path / "backup" / segment / "postings.docs.npy").st_ino)


def test_a_hybrid_index_is_backed_up_whole(tmp_path):
    hybrid = HybridRetriever.build(_corpus(0, 30), tmp_path / "hybrid", neural="bot")
    hybrid.delete(["d2"])
    backup = open_retriever(hybrid.backup(tmp_path / "backup"))
    assert backup.name == "hybrid" and _state(backup) == _state(hybrid)


def test_bad_targets_are_refused_and_an_old_backup_replaced_only_when_asked(indexed, tmp_path):
    with pytest.raises(SemiretError, match="cannot replace it or lie inside it"):
        indexed.backup(indexed.index.path / "inside")
    with pytest.raises(SemiretError, match="cannot replace it or lie inside it"):
        indexed.backup(indexed.index.path)
    (tmp_path / "papers").mkdir()
    (tmp_path / "papers" / "notes.txt").write_text("mine")
    with pytest.raises(IndexFormatError, match="not a semiret index"):
        indexed.backup(tmp_path / "papers", overwrite=True)
    indexed.backup(tmp_path / "backup")
    indexed.delete(["d4"])
    with pytest.raises(IndexFormatError, match="already exists"):
        indexed.backup(tmp_path / "backup")
    assert "d4" in open_retriever(tmp_path / "backup").index
    indexed.backup(tmp_path / "backup", overwrite=True)
    assert "d4" not in open_retriever(tmp_path / "backup").index


def test_backup_command(indexed, tmp_path):
    done = CliRunner().invoke(app, ["backup", str(indexed.index.path), str(tmp_path / "copy")])
    assert done.exit_code == 0, done.output
    assert '"documents": 38' in done.stdout and _state(open_retriever(tmp_path / "copy")) == _state(indexed)


def test_a_backup_restored_over_its_index_is_read_anew_by_those_who_have_it_open(indexed, tmp_path):
    backup = open_retriever(indexed.backup(tmp_path / "backup"))
    assert backup.index.meta["build"] != indexed.index.meta["build"]  # another index, from its first commit
    indexed.add([Document("x1", "statins primary")])  # both go on: each gets a segment of the same name
    backup.add([Document("y1", "statins replica"), Document("y2", "heart replica")])
    served = open_retriever(indexed.index.path)
    backup.backup(indexed.index.path, overwrite=True)  # the backup restored
    served.index.refresh()
    assert "x1" not in served.index and "y1" in served.index and served.index.n_docs == backup.index.n_docs
    assert [h.id for h in served.search("replica", k=2)] == [h.id for h in backup.search("replica", k=2)]


def test_a_part_of_a_hybrid_index_and_an_index_being_written_are_backed_up(tmp_path):
    hybrid = HybridRetriever.build(_corpus(0, 30), tmp_path / "hybrid", neural="bot")
    from semiret.indexes import open_index

    part = open_index(tmp_path / "hybrid" / "lexical")
    assert open_retriever(part.backup(tmp_path / "bm25-copy")).index.n_docs == 30
    with hybrid.index.writing():  # a backup taken by the thread that writes: its lock is already held
        first = hybrid.index.first
        first.backup(tmp_path / "first-copy")
    assert open_retriever(tmp_path / "first-copy").index.n_docs == 30


def test_the_service_takes_and_lists_backups(tmp_path):
    from helpers import LocalClient

    from semiret.serving import ServeSettings, create_app

    BM25Retriever.build(_corpus(0, 12), tmp_path / "docs")
    settings = ServeSettings({"docs": str(tmp_path / "docs")}, api_key="key", write_process=False,
                             backup_dir=str(tmp_path / "backups"))
    with LocalClient(create_app(settings)) as client:
        assert client.get("/indexes/docs/backups").json() == {"backups": []}
        assert client.post("/indexes/docs/backups").status_code == 401  # a write: the key
        first = client.post("/indexes/docs/backups", headers={"X-API-Key": "key"})
        assert first.status_code == 200, first.text
        client.post("/indexes/docs/documents/delete", headers={"X-API-Key": "key"}, json={"ids": ["d0"]})
        second = client.post("/indexes/docs/backups", headers={"X-API-Key": "key"}).json()
        assert first.json()["documents"] == 12 and second["documents"] == 11
        assert second["name"].startswith("docs-") and second["created"].endswith("Z")
        listed = client.get("/indexes/docs/backups").json()["backups"]
        assert [b["name"] for b in listed] == [first.json()["name"], second["name"]]
        assert "d0" in open_retriever(tmp_path / "backups" / first.json()["name"]).index
    off = ServeSettings({"docs": str(tmp_path / "docs")}, api_key="key", write_process=False)
    with LocalClient(create_app(off)) as client:
        refused = client.post("/indexes/docs/backups", headers={"X-API-Key": "key"})
        assert refused.status_code == 403 and "--backup-dir" in refused.json()["detail"]


def test_backups_taken_at_once_get_names_of_their_own_and_foreign_folders_are_not_listed(tmp_path):
    import threading

    from helpers import LocalClient

    from semiret.serving import ServeSettings, create_app

    BM25Retriever.build(_corpus(0, 12), tmp_path / "docs")
    settings = ServeSettings({"docs": str(tmp_path / "docs")}, api_key="key", write_process=False,
                             backup_dir=str(tmp_path / "backups"))
    with LocalClient(create_app(settings)) as client:
        answers = []

        def take() -> None:
            answers.append(client.post("/indexes/docs/backups", headers={"X-API-Key": "key"}))

        threads = [threading.Thread(target=take) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert [a.status_code for a in answers] == [200] * 4 and len({a.json()["name"] for a in answers}) == 4
        foreign = tmp_path / "backups" / "docs-20200101T000001Z"
        foreign.mkdir()
        (foreign / "meta.json").write_text("{}")
        listed = client.get("/indexes/docs/backups")
        assert listed.status_code == 200 and len(listed.json()["backups"]) == 4


def test_the_service_restores_a_backup_as_a_new_index_and_an_alias_rolls_back_to_it(tmp_path):
    """Backups taken over HTTP restored with ``PUT /indexes/{name}`` ``{"from_backup": ...}``: the index as it was
    backed up, writable on its own (the backup unchanged by its writes), then served through an alias."""
    from helpers import LocalClient

    from semiret.serving import ServeSettings, create_app

    key = {"X-API-Key": "key"}
    settings = ServeSettings({}, api_key="key", write_process=False, data_dir=str(tmp_path / "data"),
                             backup_dir=str(tmp_path / "backups"))
    with LocalClient(create_app(settings)) as client:
        assert client.put("/indexes/docs", json={"retriever": "bot"}, headers=key).status_code == 201
        documents = [{"_id": d.id, "text": d.text} for d in _corpus(0, 12)]
        assert client.put("/indexes/docs/documents", json={"documents": documents}, headers=key).status_code == 200
        backup = client.post("/indexes/docs/backups", headers=key).json()["name"]
        client.post("/indexes/docs/documents/delete", headers=key, json={"ids": ["d0", "d1"]})  # a mistake
        restored = client.put("/indexes/docs-restored", json={"from_backup": backup}, headers=key)
        assert restored.status_code == 201, restored.text
        assert restored.json()["documents"] == 12 and restored.json()["retriever"] == "bot"
        assert client.get("/indexes/docs-restored/documents/d0").status_code == 200
        assert client.put("/aliases/live", json={"index": "docs-restored"}, headers=key).status_code == 200
        assert client.post("/indexes/live/documents/delete", headers=key, json={"ids": ["d5"]}).status_code == 200
        assert client.get("/indexes/docs-restored").json()["documents"] == 11
        assert open_retriever(tmp_path / "backups" / backup).count() == 12  # the backup as it was taken
        assert client.put("/indexes/again", json={"from_backup": backup}, headers=key).json()["documents"] == 12
        for body, status in (({"from_backup": "nope"}, 404), ({"from_backup": "../data/docs"}, 404),
                             ({"from_backup": backup, "retriever": "bm25"}, 422),
                             ({"from_backup": backup, "options": {}}, 422)):
            answer = client.put("/indexes/other", json=body, headers=key)
            assert answer.status_code == status, (body, answer.text)
        assert client.put("/indexes/docs", json={"from_backup": backup}, headers=key).status_code == 409
        # a folder that is no index, and a backup of a retriever this server has not: refused, nothing put in place
        (tmp_path / "backups" / "foreign").mkdir()
        (tmp_path / "backups" / "foreign" / "meta.json").write_text("{}")
        odd = tmp_path / "backups" / "odd"
        shutil.copytree(tmp_path / "backups" / backup, odd)
        meta = json.loads((odd / "meta.json").read_text())
        (odd / "meta.json").write_text(json.dumps({**meta, "retriever": "no-such-retriever"}))
        for folder in ("foreign", "odd"):  # the message names no folder of the server's (it named the backup's)
            answer = client.put("/indexes/other", json={"from_backup": folder}, headers=key)
            assert answer.status_code == 422 and answer.json()["detail"][0]["loc"] == ["body", "from_backup"]
            assert str(tmp_path) not in answer.text, answer.text
        assert not (tmp_path / "data" / "other").exists()
        assert client.get("/indexes").status_code == client.get("/readyz").status_code == 200
    no_backups = ServeSettings({}, api_key="key", write_process=False, data_dir=str(tmp_path / "data"))
    with LocalClient(create_app(no_backups)) as client:
        assert client.put("/indexes/x", json={"from_backup": backup}, headers=key).status_code == 403
    for inside in ("data", "data/backups"):  # each backup would be served: written and deleted over HTTP
        with pytest.raises(SemiretError, match="is --data-dir .* or lies in it"):
            ServeSettings({}, api_key="key", data_dir=str(tmp_path / "data"), backup_dir=str(tmp_path / inside))


@pytest.mark.parametrize("write_process", [False, True], ids=["writes-in-threads", "writer-process"])
def test_a_server_given_an_index_serves_the_backup_restored_over_it(tmp_path, write_process):
    """A backup of another index (other BM25 options, other documents) restored over an index a server was given
    with --index: the server searches and writes the restored index from the next request on (not 503s until a
    restart, nor a 404 for a write that landed)."""
    from helpers import LocalClient

    from semiret.serving import ServeSettings, create_app

    served = BM25Retriever.build(_corpus(0, 20), tmp_path / "served")
    other = BM25Retriever.build([Document("r1", "walrus colony"), Document("r2", "walrus tusks")],
                                tmp_path / "other", stemmer="none", stopwords="none")
    settings = ServeSettings({"x": str(served.index.path)}, api_key="k", write_process=write_process)
    key = {"X-API-Key": "k"}
    with LocalClient(create_app(settings)) as client:
        assert client.post("/indexes/x/search", json={"queries": ["statins"]}).status_code == 200
        other.backup(served.index.path, overwrite=True)  # the restore, by another process
        found = client.post("/indexes/x/search", json={"queries": ["walrus"], "k": 5})
        assert found.status_code == 200, found.text
        assert {h["id"] for h in found.json()["results"][0]} == {"r1", "r2"}
        written = client.put("/indexes/x/documents", headers=key, json={"documents": [{"_id": "w", "text": "walrus"}]})
        assert written.status_code == 200, written.text
        assert client.get("/indexes/x/documents/w").status_code == 200
        assert client.get("/indexes/x").json()["documents"] == 3
    assert open_retriever(served.index.path).index.n_docs == 3 and "w" in open_retriever(served.index.path).index


def test_a_write_the_restore_overtakes_is_refused_to_send_again(tmp_path, monkeypatch):
    """A restore between a write's lookup and its commit: the write reached neither index; the answer says so
    and to send it again (a 503), not that the index is gone."""
    from helpers import LocalClient

    from semiret.serving import ServeSettings, create_app
    from semiret.serving.served import ServedIndex

    served = BM25Retriever.build(_corpus(0, 20), tmp_path / "served")
    other = BM25Retriever.build([Document("r1", "walrus colony")], tmp_path / "other", stemmer="none", stopwords="none")
    upsert = ServedIndex._upsert

    def restored_first(index, documents):
        other.backup(served.index.path, overwrite=True)
        return upsert(index, documents)

    monkeypatch.setattr(ServedIndex, "_upsert", restored_first)
    settings = ServeSettings({"x": str(served.index.path)}, api_key="k", write_process=False)
    with LocalClient(create_app(settings)) as client:
        answer = client.put("/indexes/x/documents", headers={"X-API-Key": "k"},
                            json={"documents": [{"_id": "w", "text": "walrus"}]})
        assert answer.status_code == 503 and "send it again" in answer.json()["detail"], answer.text
        monkeypatch.setattr(ServedIndex, "_upsert", upsert)
        again = client.put("/indexes/x/documents", headers={"X-API-Key": "k"},
                           json={"documents": [{"_id": "w", "text": "walrus"}]})
        assert again.status_code == 200, again.text
    assert set(open_retriever(served.index.path).index.live_ids()) == {"r1", "w"}


@pytest.mark.parametrize("hybrid", [False, True], ids=["index", "hybrid"])
def test_a_backup_publishes_its_copy_with_the_source_let_go(tmp_path, monkeypatch, hybrid):
    """The source's write lock is let go before the target's are taken: a backup from A to B and a restore from B
    to A at once would each hold its source while waiting for its target, and wait on each other for ever."""
    import fcntl

    import semiret.files as files
    from semiret.indexes.segments import LOCK_FILE

    built = (HybridRetriever.build(_corpus(0, 10), tmp_path / "a", neural="bot") if hybrid
             else BM25Retriever.build(_corpus(0, 10), tmp_path / "a"))
    BM25Retriever.build(_corpus(10, 5), tmp_path / "b")
    source_locks = sorted((tmp_path / "a").rglob(LOCK_FILE))
    assert source_locks
    free_when_published = []
    replace = files.replace_directory

    def publish(staged, target, overwrite):
        for lock in source_locks:  # another process's writer (or restore) could take it now
            fd = os.open(lock, os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                free_when_published.append(True)
            except BlockingIOError:
                free_when_published.append(False)
            finally:
                os.close(fd)
        return replace(staged, target, overwrite)

    monkeypatch.setattr(files, "replace_directory", publish)
    built.backup(tmp_path / "b", overwrite=True)
    assert free_when_published and all(free_when_published)
    assert open_retriever(tmp_path / "b").index.n_docs == 10


def test_a_backup_removes_what_killed_backups_staged_beside_it_under_any_name(tmp_path):
    """A backup killed while copying leaves its staging folder (``.NAME.tmp-PID-RANDOM``); the next backup into the
    same folder removes those of dead processes whatever their names (a server names backups by the time) once left
    alone for a day (another machine sharing the folder may be writing one), its own name's at once, and keeps those
    of live processes and folders of other names."""
    built = BM25Retriever.build(_corpus(0, 5), tmp_path / "docs")
    backups = tmp_path / "backups"
    backups.mkdir()
    old = time.time() - 2 * 24 * 3600
    dead = [backups / ".docs-20260101T000000Z.tmp-999999999-0a1b2c3d", backups / ".other.tmp-999999998-ffffffff",
            backups / ".docs-20260102T000000Z.tmp-999999997-00000000"]  # the last: the new backup's own name
    recent = backups / ".docs-20260101T000002Z.tmp-999999996-0a1b2c3d"  # (maybe another machine's, at work)
    live = backups / f".docs-20260101T000001Z.tmp-{os.getpid()}-0a1b2c3d"
    kept = [backups / ".notes.tmp-old", backups / ".cache"]
    for folder in dead + [recent, live] + kept:
        folder.mkdir()
    for folder in dead[:2] + [live] + kept:
        os.utime(folder, (old, old))
    built.backup(backups / "docs-20260102T000000Z")
    assert not any(folder.exists() for folder in dead)
    assert recent.is_dir() and live.is_dir() and all(f.is_dir() for f in kept)
