"""Writers in several processes and threads, readers that never wait, and what survives ``kill -9``: the
segmented store's write lock, refresh and snapshots (:mod:`semiret.indexes.segments`)."""

from __future__ import annotations

import fcntl
import itertools
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

import semiret.files
from semiret.data import Document, iter_corpus
from semiret.errors import SemiretError
from semiret.indexes import composite, open_index, segments
from semiret.indexes.storage import commit_stamp
from semiret.search import BM25Retriever, open_retriever

from helpers import SCIFACT, TINY_DOCS, require_shared_data, write_jsonl

ROUNDS = 12


class LockWatch:
    """Watches the write lock: ``fcntl.flock`` as :func:`semiret.files.exclusive_lock` calls it, on ``lock_files``.
    Each exclusive acquisition first tries without blocking; when the lock was held then, ``when_held`` runs
    before the acquisition blocks. ``records`` gets (thread name, whether the lock was free when asked, what
    ``after`` returned once the lock was had): ordering evidence, no clock."""

    def __init__(self, monkeypatch, lock_files, when_held=lambda: None, after=lambda: None):
        self.files = {(os.stat(f).st_dev, os.stat(f).st_ino) for f in lock_files}
        self.records: list[tuple[str, bool, object]] = []
        self.when_held, self.after = when_held, after
        names = {name: getattr(fcntl, name) for name in dir(fcntl) if name.isupper()}
        monkeypatch.setattr(semiret.files, "fcntl", SimpleNamespace(**names, flock=self._flock))

    def _flock(self, fd: int, operation: int) -> None:
        status = os.fstat(fd)
        if operation != fcntl.LOCK_EX or (status.st_dev, status.st_ino) not in self.files:
            return fcntl.flock(fd, operation)
        try:
            fcntl.flock(fd, operation | fcntl.LOCK_NB)
            free = True
        except BlockingIOError:
            free = False
            self.when_held()
            fcntl.flock(fd, operation)
        self.records.append((threading.current_thread().name, free, self.after()))

    def of(self, thread: threading.Thread | None = None) -> list[tuple[bool, object]]:
        name = (thread or threading.current_thread()).name
        return [(free, after) for who, free, after in self.records if who == name]


def _add_batches(path: str, tag: str) -> None:
    """One writer process: ROUNDS adds of 3 documents, each bringing words no other document has."""
    retriever = open_retriever(path)
    for round_ in range(ROUNDS):
        retriever.add([Document(f"{tag}-{round_}-{i}", f"shared words {tag}only{round_}x{i}") for i in range(3)])


def test_two_processes_adding_at_once_keep_every_batch_and_word(tmp_path):
    path = str(tmp_path / "idx")
    BM25Retriever.build([Document("seed", "shared words")], path)
    context = multiprocessing.get_context("fork")
    writers = [context.Process(target=_add_batches, args=(path, tag)) for tag in ("a", "b")]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(60)
        assert writer.exitcode == 0
    retriever = open_retriever(path)
    expected = {"seed"} | {f"{tag}-{r}-{i}" for tag in "ab" for r in range(ROUNDS) for i in range(3)}
    assert set(retriever.index.live_ids()) == expected
    vocab = retriever.index.vocab
    assert len(vocab) == len(set(vocab)) == retriever.index.meta["n_terms"]  # no word given two ids
    for tag, round_, i in itertools.product("ab", range(ROUNDS), range(3)):
        assert retriever.search(f"{tag}only{round_}x{i}", k=2)[0].id == f"{tag}-{round_}-{i}"


@pytest.mark.integration  # reads 5,000 documents of the real SciFact
def test_semiret_add_twice_in_parallel_keeps_both_batches(tmp_path):
    """The lost write of issue 19: two ``semiret add`` of 1,000 documents on a 3,000-document BM25 index."""
    require_shared_data()
    corpus = list(itertools.islice(iter_corpus(SCIFACT), 5000))
    BM25Retriever.build(corpus[:3000], tmp_path / "idx")
    files = [write_jsonl(tmp_path / f"batch{n}.jsonl", [d.to_record() for d in corpus[lo:lo + 1000]])
             for n, lo in enumerate((3000, 4000))]
    runs = [subprocess.Popen([sys.executable, "-m", "semiret.cli", "add", str(f), "--index", str(tmp_path / "idx")],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for f in files]
    for run in runs:
        _, err = run.communicate(timeout=120)
        assert run.returncode == 0, err
    index = open_index(tmp_path / "idx")
    assert index.n_docs == 5000 and set(index.live_ids()) == {d.id for d in corpus}
    retriever = open_retriever(tmp_path / "idx")
    for document in corpus[3000::97]:  # every document's words got ids the other batch did not reuse
        assert document.id in [hit.id for hit in retriever.search(document.full_text[:300], k=5)]


def test_a_reader_sees_other_writers_commits_at_its_next_search(tmp_path):
    """An index refreshes onto another writer's commit (a retriever's reads refresh it first); a pinned view keeps
    the commit it pinned."""
    BM25Retriever.build([Document("a", "apple pie"), Document("b", "banana split")], tmp_path / "idx")
    reader = open_retriever(tmp_path / "idx")
    writer = open_retriever(tmp_path / "idx")
    base = reader.index.segments[0]
    pinned = reader.pinned()
    writer.add([Document("c", "cherry tart")])
    writer.delete(["a"])
    assert [h.id for h in pinned.search("cherry apple", k=5)] == ["a"]  # the commit it pinned
    assert reader.index.refresh() is True
    assert [h.id for h in reader.search("cherry apple", k=5)] == ["c"]  # new words are searchable too
    assert reader.index.refresh() is False  # nothing new: one stat
    writer.delete(["c"])
    assert reader.search("cherry apple", k=5) == [] and reader.index.refresh() is False  # (the search refreshed)
    assert [h.id for h in pinned.search("cherry apple", k=5)] == ["a"]
    assert reader.index.segments[0].docids is base.docids  # unchanged segments stay open
    reader.add([Document("d", "date cake")])  # a writer refreshes first: nothing of the other writer's is lost
    final = open_index(tmp_path / "idx")
    assert set(final.live_ids()) == {"b", "d"} and final.vocab[-2:] == ["date", "cake"]


def test_a_refresh_while_another_thread_publishes_still_sees_an_earlier_commit(tmp_path):
    """Another process committed; a thread of this reader is busy publishing (held here): a refresh from a second
    thread waits for it instead of answering from the old snapshot (a server's second worker must show a write
    the first acknowledged, whatever its other threads do)."""
    BM25Retriever.build([Document("a", "apple pie")], tmp_path / "idx")
    reader = open_retriever(tmp_path / "idx")
    open_retriever(tmp_path / "idx").add([Document("c", "cherry tart")])
    reader.index._publishing.acquire()  # another thread's publishing, as far as the refresh can tell
    refreshing = threading.Thread(target=reader.index.refresh)
    refreshing.start()
    refreshing.join(0.2)
    assert refreshing.is_alive()  # waiting, not answering from the old snapshot
    reader.index._publishing.release()
    refreshing.join(10)
    assert [h.id for h in reader.search("cherry", k=5)] == ["c"]
    reader.index._publishing.acquire()  # nothing newer on disk: a refresh answers at once
    try:
        assert reader.index.refresh() is False
    finally:
        reader.index._publishing.release()


def test_searches_never_see_half_a_replace(tmp_path):
    """A replace deletes the old versions and adds the new in one commit: a search sees all ten or the ten new,
    never none and never twenty."""
    ids = [f"doc{i}" for i in range(10)]
    retriever = BM25Retriever.build([Document(i, "alpha version0") for i in ids], tmp_path / "idx")
    stop, searching = threading.Event(), threading.Barrier(4)
    seen: list[list[str]] = []
    wrong: list[list[str]] = []  # an assert in a thread would only warn: the main thread asserts

    def search_loop():
        searching.wait(30)  # the three search while the replaces run
        try:
            while not stop.is_set():
                found = sorted(h.id for h in retriever.search("alpha", k=50))
                seen.append(found)
                if found != ids:
                    wrong.append(found)
        except Exception as exc:  # noqa: BLE001 (a failed search is a wrong answer too)
            wrong.append([repr(exc)])

    readers = [threading.Thread(target=search_loop) for _ in range(3)]
    for thread in readers:
        thread.start()
    searching.wait(30)
    for version in range(1, 25):
        retriever.add([Document(i, f"alpha version{version}") for i in ids], replace=True)
    stop.set()
    for thread in readers:
        thread.join()
    assert seen and not wrong, wrong[:3]
    assert sorted(h.id for h in retriever.search("version24", k=20)) == ids


def test_a_failed_add_takes_back_the_words_it_encoded(tmp_path):
    BM25Retriever.build([Document("a", "apple")], tmp_path / "idx")
    first = open_retriever(tmp_path / "idx")
    with pytest.raises(SemiretError, match="already in"):
        first.add([Document("a", "aardvark")])  # 'aardvark' was encoded, then the add refused
    assert first.index.vocab == ["appl"]
    other = open_retriever(tmp_path / "idx")
    other.add([Document("b", "blueberry")])  # takes the id 'aardvark' had for a moment
    first.index.refresh()
    assert [h.id for h in first.search("blueberry", k=3)] == ["b"] and first.search("aardvark", k=3) == []
    first.add([Document("c", "aardvark")])
    assert open_index(tmp_path / "idx").vocab == ["appl", "blueberri", "aardvark"]


def test_a_merge_in_another_process_does_not_break_opening(tmp_path, monkeypatch):
    """A reader that read ``meta.json`` just before another process merged (and removed the old segments)
    reads the new commit instead of failing."""
    retriever = BM25Retriever.build([Document("a", "apple")], tmp_path / "idx")
    retriever.add([Document("b", "banana")])
    stale = segments.read_commit(tmp_path / "idx", None)
    open_index(tmp_path / "idx").merge()
    reads = iter([stale])
    real = segments.read_commit
    monkeypatch.setattr(segments, "read_commit", lambda path, fmt: next(reads, None) or real(path, fmt))
    reopened = open_index(tmp_path / "idx")
    assert len(reopened.segments) == 1 and set(reopened.live_ids()) == {"a", "b"}
    assert retriever.index.refresh() and set(retriever.index.live_ids()) == {"a", "b"}


def test_the_write_lock_holds_across_processes(tmp_path, monkeypatch):
    """Another process holds the lock until this one's add finds it held; the add commits only after the holder
    marked that it is releasing (an order, not a duration)."""
    BM25Retriever.build([Document("a", "apple")], tmp_path / "idx")
    releasing = tmp_path / "holder-releasing"
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import pathlib, sys
        from semiret.indexes import open_index
        with open_index({str(tmp_path / 'idx')!r}).writing():
            print("locked", flush=True)
            sys.stdin.readline()  # until the other process asks for the lock (or ends)
            pathlib.Path({str(releasing)!r}).touch()
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"

        def let_go():
            holder.stdin.write("go\n")
            holder.stdin.flush()

        watch = LockWatch(monkeypatch, [tmp_path / "idx" / segments.LOCK_FILE], when_held=let_go,
                          after=releasing.exists)
        open_retriever(tmp_path / "idx").add([Document("b", "banana")])
    finally:
        holder.stdin.close()
        assert holder.wait(30) == 0
    assert watch.of() == [(False, True)]  # found held; had only once the holder was releasing it
    assert set(open_index(tmp_path / "idx").live_ids()) == {"a", "b"}


KILL_WRITER = textwrap.dedent("""
    import sys
    from semiret.data import Document
    from semiret.search import open_retriever
    retriever = open_retriever(sys.argv[1])
    for n in range(int(sys.argv[2]), 10**6):
        retriever.add([Document(f"doc{n}", f"word{n} common")])
        print(f"added doc{n}", flush=True)
        if n % 3 == 0:
            retriever.index.delete([f"doc{n - 1}"], missing_ok=True)
            print(f"deleted doc{n - 1}", flush=True)
""")


def test_every_acknowledged_change_survives_kill_9(tmp_path):
    """A writer process is killed (SIGKILL) at random moments; each time the index opens and holds every add
    and delete the writer had reported done. The delete it may have been doing is looked up and tracked after
    that (each run adds ids of its own)."""
    path = tmp_path / "idx"
    BM25Retriever.build([Document("seed", "common")], path)
    rng = np.random.default_rng(19)
    present, deleted = {"seed"}, set()
    for run in range(5):
        writer = subprocess.Popen([sys.executable, "-c", KILL_WRITER, str(path), str(run * 10_000)],
                                  stdout=subprocess.PIPE, text=True)
        lines = [writer.stdout.readline()]  # it writes
        time.sleep(rng.uniform(0.05, 0.4))
        os.kill(writer.pid, signal.SIGKILL)
        lines += writer.stdout.read().splitlines()
        assert writer.wait() == -signal.SIGKILL  # it died of the kill, not on its own
        assert any(line.startswith("added ") for line in lines), lines  # and had acknowledged adds
        in_flight = set()
        for line in filter(None, map(str.strip, lines)):
            done, doc_id = line.split()
            (present if done == "added" else deleted).add(doc_id)
            (deleted if done == "added" else present).discard(doc_id)
            number = int(doc_id[3:])
            in_flight = {f"doc{number - 1}"} if done == "added" and number % 3 == 0 else set()  # its delete
        live = set(open_index(path).live_ids())  # it opens, whatever the moment of the kill
        assert present - in_flight <= live and not (deleted & live)
        present -= in_flight - live  # the delete in flight happened
        deleted |= in_flight - live


KILL_HYBRID_WRITER = textwrap.dedent("""
    import os, signal, sys
    import semiret.files, semiret.indexes.composite as composite, semiret.indexes.segments as segments
    from semiret.data import Document
    from semiret.search import open_retriever
    writes, original = [], semiret.files.atomic_write_json

    def killed_at_the_nth(path, *args, **kwargs):  # dies before its n-th meta.json write, as kill -9 would
        writes.append(path)
        if len(writes) == int(sys.argv[3]):
            os.kill(os.getpid(), signal.SIGKILL)
        return original(path, *args, **kwargs)

    segments.atomic_write_json = composite.atomic_write_json = killed_at_the_nth
    hybrid = open_retriever(sys.argv[1])
    {"add": lambda: hybrid.add([Document("new", "quokka cats")]), "delete": lambda: hybrid.delete(["d1"]),
     "merge": hybrid.index.merge}[sys.argv[2]]()
""")


@pytest.mark.parametrize("change", ["add", "delete", "merge"])
def test_a_hybrid_change_killed_at_any_write_leaves_its_parts_alike(tmp_path, change):
    """A hybrid's parts committed one after the other: killed between them, a document was in one part only, its
    delete refused by the other and its add again written to one part before the other refused it. Killed before
    each of its four writes (the composite's record, each part's commit, the record's removal; a delete and a merge
    between the parts' commits only, where they differ from an add), the change is now in every part or in none,
    and the next change succeeds."""
    from semiret.search import HybridRetriever

    documents = [Document(f"d{i}", f"cats and dogs {i}") for i in range(6)]
    for write in (1, 2, 3, 4) if change == "add" else (2, 3):
        path = tmp_path / f"{change}-{write}"
        HybridRetriever.build(documents, path, neural="idf").delete(["d5"])  # a deletion for the merge to drop
        killed = subprocess.run([sys.executable, "-c", KILL_HYBRID_WRITER, str(path), change, str(write)])
        assert killed.returncode == -signal.SIGKILL
        hybrid = open_retriever(path)
        lexical, neural = (sorted(part.live_ids()) for part in hybrid.index.parts.values())
        assert lexical == neural and all(part.n_stored == hybrid.index.n_stored for part in hybrid.index.parts.values())
        done = {"add": "new" in lexical, "delete": "d1" not in lexical,
                "merge": hybrid.index.n_stored == hybrid.index.n_docs}[change]
        assert done == (write > 1), (change, write)  # from the composite's record on, it is done
        # what the record names is all written: the BM25 part's new words too (searched, not an IndexError)
        assert [hit.id for hit in hybrid.search("quokka", k=2)] == (["new"] if change == "add" and done else [])
        assert hybrid.delete(["d2"]) == 1 and hybrid.add([Document("d2", "cats again")]) == 1
        assert {part.n_docs for part in open_retriever(path).index.parts.values()} == {len(lexical)}


def test_a_hybrid_reader_refreshes_its_parts_onto_one_change(tmp_path, monkeypatch):
    """A reader in another process refreshed a hybrid's parts one by one: a change published between its reads of
    the two parts, or half published by a writer that died, left it searching one part's new commit beside the
    other's old one. It reads its parts again until they are of one change, and completes a dead writer's."""
    from semiret.search import HybridRetriever

    path = tmp_path / "hybrid"
    HybridRetriever.build([Document(f"d{i}", f"cats and dogs {i}") for i in range(4)], path, neural="idf")
    reader, writer = open_retriever(path), open_retriever(path)  # two processes' handles: locks of their own
    lexical = reader.index.parts["lexical"]
    refresh = type(lexical).refresh

    def published_meanwhile(self, wait=False):  # the writer's change lands once the first part is read
        refreshed = refresh(self, wait)
        if self is lexical and not writer.index.refresh() and "new" not in writer.index:
            writer.add([Document("new", "quokka cats")])
        return refreshed

    monkeypatch.setattr(type(lexical), "refresh", published_meanwhile)
    reader.index.refresh()
    monkeypatch.undo()

    def parts(retriever):
        return {name: sorted(part.pinned().live_ids()) for name, part in retriever.index.parts.items()}

    assert list(parts(reader).values()) == [sorted([f"d{i}" for i in range(4)] + ["new"])] * 2
    killed = subprocess.run([sys.executable, "-c", KILL_HYBRID_WRITER, str(path), "delete", "3"])
    assert killed.returncode == -signal.SIGKILL  # the record and the first part written, the second not
    assert reader.index.refresh() and parts(reader)["lexical"] == parts(reader)["neural"]
    assert "d1" not in reader.index and [hit.id for hit in reader.search("dogs 1", k=5) if hit.id == "d1"] == []
    stamp = commit_stamp(path)
    assert writer.delete(["d1", "gone"], missing_ok=True) == 0 and commit_stamp(path) == stamp  # nothing: no commit
    # a change recorded, then its writer died, in a copy that cannot be written (read-only, a full disk): the
    # refresh waited for it forever; it reads the parts as they are, as opening it does
    killed = subprocess.run([sys.executable, "-c", KILL_HYBRID_WRITER, str(path), "merge", "2"])
    assert killed.returncode == -signal.SIGKILL
    monkeypatch.setattr(composite, "PUBLICATION_PATIENCE", 0.05)

    def read_only(*_):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(composite, "atomic_write_json", read_only)
    done = threading.Thread(target=reader.index.refresh, daemon=True)
    done.start()
    done.join(30)
    assert not done.is_alive() and parts(reader)["lexical"] == parts(reader)["neural"]


def test_a_hybrid_writer_that_opened_it_before_a_rebuild_keeps_the_rebuilds_record(tmp_path):
    """A process holding a hybrid open wrote its own old ``meta.json`` over a rebuild's (its passages' record
    gone), and a backup taken inside a write waited forever on the composite's lock."""
    from semiret.search import HybridRetriever

    path = tmp_path / "hybrid"
    HybridRetriever.build(TINY_DOCS, path, neural="idf")
    held = open_retriever(path)
    HybridRetriever.build(TINY_DOCS, path, neural="idf", overwrite=True, chunking=3)
    held.index.refresh()
    held.add([Document("x", "cats again")])
    assert open_retriever(path).chunking is not None and open_retriever(path).chunking.words == 3
    with held.index.writing():
        backed_up = threading.Thread(target=held.index.backup, args=(tmp_path / "copy",))
        backed_up.start()
        backed_up.join(0.5)
        assert backed_up.is_alive()  # another thread waits for the write...
    backed_up.join(20)
    assert not backed_up.is_alive()  # ...and takes its copy after it
    with held.index.writing():
        held.index.backup(tmp_path / "inside")  # this thread, inside its own write: at once
    assert open_retriever(tmp_path / "inside").index.n_docs == open_retriever(path).index.n_docs


def test_a_reader_that_cannot_make_a_lock_file_takes_none_where_none_exists(tmp_path, monkeypatch):
    """A backup of a hybrid owned by another user (a restore from a backup folder) failed: its composite's lock
    file, made by the first write, did not exist, and could not be made."""
    real_open = os.open

    def refused(path, flags, *args):
        if flags & os.O_CREAT:
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", refused)
    with semiret.files.exclusive_lock(tmp_path / "write.lock", reading=True):
        pass
    with pytest.raises(PermissionError):
        with semiret.files.exclusive_lock(tmp_path / "write.lock"):
            pass


def test_a_process_forked_while_a_thread_writes_blocks_no_later_write(tmp_path):
    """A pool forked while a thread held the write lock kept the lock's descriptor: every later write of the parent
    waited until the pool ended, and the child's own writes waited forever on a lock copied held."""
    retriever = BM25Retriever.build([Document("a", "apple")], tmp_path / "idx")
    started, release = threading.Event(), threading.Event()

    def writer():
        with retriever.index.writing():
            started.set()
            release.wait(10)

    thread = threading.Thread(target=writer)
    thread.start()
    started.wait(10)
    with multiprocessing.get_context("fork").Pool(1) as pool:
        release.set()
        thread.join()
        done = threading.Thread(target=retriever.add, args=([Document("b", "banana")],))
        done.start()
        done.join(20)
        assert not done.is_alive()  # the parent's write, while the forked child lives
        assert pool.apply_async(retriever.add, ([Document("c", "cherry")],)).get(20) == 1  # and the child's
    assert set(open_index(tmp_path / "idx").live_ids()) == {"a", "b", "c"}


def test_a_segment_merged_away_while_it_is_opened_is_no_segment_without_texts(tmp_path, monkeypatch):
    """A reader opening a commit while another process's merge removed one of its segments mapped the ids, then
    found no texts and metadata: a segment storing none, its hits textless and filtered out, kept until the next
    refresh. It is an error now, which opening retries on the newer commit."""
    BM25Retriever.build([Document("a", "apple", metadata={"y": 1})], tmp_path / "idx")
    mapped = segments.StringTable.__init__

    def merged_meanwhile(table, path, name, *args, **kwargs):
        mapped(table, path, name, *args, **kwargs)
        if name == "docids":
            path.rename(path.with_name("gone"))

    monkeypatch.setattr(segments.StringTable, "__init__", merged_meanwhile)
    with pytest.raises(SemiretError, match="the segment folder went while it was opened"):
        open_index(tmp_path / "idx")


# ------------------------------------------------------------------ an index rebuilt (--overwrite) under open ones
WORDS = ("alpha", "beta", "gamma", "delta", "epsilon")

def test_a_rebuild_waits_for_a_writer_and_open_writers_never_write_into_it(tmp_path, monkeypatch):
    """The rebuild swapped the directory without the write lock: an add encoding meanwhile then committed the
    old index's meta.json into the new directory (the rebuild lost, searches failing). It now waits for the
    writer, and a writer that opened the old build refuses to write into the new one."""
    path = tmp_path / "idx"
    BM25Retriever.build([Document("a", "apple pie"), Document("b", "banana split")], path)
    writer, stale = open_retriever(path), open_retriever(path)
    holding, rebuilt, blocked, releasing = threading.Event(), threading.Event(), threading.Event(), threading.Event()
    watch = LockWatch(monkeypatch, segments.writer_locks(path), when_held=blocked.set, after=releasing.is_set)

    def rebuild():
        holding.wait(10)
        BM25Retriever.build([Document(f"n{i}", f"new text {word}") for i, word in enumerate(WORDS)], path,
                            overwrite=True)
        rebuilt.set()

    builder = threading.Thread(target=rebuild)
    builder.start()
    with writer.index.writing():  # as an add holds it while encoding words
        holding.set()
        assert blocked.wait(30)  # the swap asked for the writer's lock, found it held, and waits
        assert not rebuilt.is_set()
        writer.add([Document("c", "cherry tart")])
        releasing.set()
    builder.join(30)
    assert rebuilt.is_set()
    assert watch.of(builder) == [(False, True)]  # swapped only once the writer was releasing the lock
    fresh = open_retriever(path)
    assert sorted(fresh.index.live_ids()) == [f"n{i}" for i in range(5)]
    with pytest.raises(SemiretError, match="was rebuilt .* nothing was written; open it again"):
        stale.add([Document("d", "date cake")])
    assert sorted(open_retriever(path).index.live_ids()) == [f"n{i}" for i in range(5)]
    assert [h.id for h in fresh.search("text delta", k=1)] == ["n3"]


def test_commits_within_one_tick_of_a_coarse_clock_are_each_seen(tmp_path, monkeypatch):
    """Where file times tick coarsely (milliseconds on many kernels; here 10 s, set as each file is written), two
    deletes of one ``meta.json`` size, the second on the inode the first freed, gave back the stamp the reader held:
    it refreshed onto neither. Each commit is modified later than the one it replaces."""
    sync = os.fsync

    def coarse_clock(fd):  # the file system's time of the write, to the tick
        sync(fd)
        tick = os.stat(fd).st_mtime_ns // 10**10 * 10**10
        os.utime(fd, ns=(tick, tick))

    monkeypatch.setattr(semiret.files.os, "fsync", coarse_clock)
    path = tmp_path / "idx"
    BM25Retriever.build([Document(f"d{i}", f"cats {i}") for i in range(5)], path)
    reader, writer = open_retriever(path), open_retriever(path)
    stamps = [commit_stamp(path)]
    for doc_id in ("d1", "d2", "d3"):
        writer.delete([doc_id])
        stamps.append(commit_stamp(path))
    assert len(set(stamps)) == len(stamps)
    assert reader.index.refresh() and reader.index.n_docs == 2 and "d1" not in reader.index


def test_a_reader_refreshes_onto_a_rebuild_made_within_the_same_second(tmp_path):
    """Builds were told apart by their creation time, to the second: a reader kept the old segments under the
    new commit (wrong results; its next write corrupted the index). Each build now has its own token."""
    path = tmp_path / "idx"
    BM25Retriever.build([Document(f"o{i}", f"old words {i}") for i in range(3)], path)
    held = open_retriever(path)
    BM25Retriever.build([Document(f"n{i}", f"new words {word}") for i, word in enumerate(WORDS[:4])], path,
                        overwrite=True)
    assert held.index.refresh() is True
    assert held.index.n_docs == 4 and [h.id for h in held.search("words gamma", k=1)] == ["n2"]
    held.add([Document("x", "extra words")])  # a writer that refreshed onto the new build writes into it
    assert sorted(open_retriever(path).index.live_ids()) == ["n0", "n1", "n2", "n3", "x"]


def test_staging_folders_of_dead_processes_are_removed_by_the_next_build(tmp_path):
    """A build killed with SIGKILL leaves its staging folder beside the index; they piled up with every kill."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead, alive = tmp_path / f".idx.tmp-{done.stdout.strip()}-0badc0de", tmp_path / f".idx.tmp-{os.getpid()}-00000000"
    dead.mkdir()
    alive.mkdir()  # this very process: a build in progress in another thread
    BM25Retriever.build([Document("a", "apple")], tmp_path / "idx")
    assert not dead.exists() and alive.exists()


def test_a_tail_merge_removes_what_crashed_changes_left(tmp_path):
    """Only a merge of every segment removed staging folders and orphan segments, and the service merges tails."""
    retriever = BM25Retriever.build([Document("a", "apple")], tmp_path / "idx")
    for i in range(3):
        retriever.add([Document(f"d{i}", f"date {i}")])
    leftovers = [tmp_path / "idx" / ".seg-000009.tmp-1-deadbeef", tmp_path / "idx" / "seg-000042"]
    for leftover in leftovers:
        leftover.mkdir()
    retriever.index.merge(tail=2)
    assert not any(leftover.exists() for leftover in leftovers)
    assert len(retriever.index.segments) == 3 and retriever.index.n_docs == 4


def test_a_reader_is_told_when_its_index_was_rebuilt_as_another(tmp_path):
    """A BM25 reader refreshed onto a bag-of-tokens index rebuilt at its path and searched it with BM25's queries."""
    from semiret.search import retriever_class

    path = tmp_path / "idx"
    BM25Retriever.build([Document("a", "apple pie")], path)
    held = open_retriever(path)
    retriever_class("bot").build([Document("b", "banana split")], path, overwrite=True)
    with pytest.raises(SemiretError, match=r"was rebuilt as another index \(bot, .*open it again"):
        held.index.refresh()
    assert [h.id for h in open_retriever(path).search("banana", k=1)] == ["b"]


def test_a_hybrid_rebuild_waits_for_the_writer_of_its_parts(tmp_path, monkeypatch):
    from semiret.search import retriever_class

    hybrid = retriever_class("hybrid")
    path = tmp_path / "h"
    open_hybrid = hybrid.build([Document("a", "apple pie"), Document("b", "banana split")], path, neural="idf")
    rebuilt, blocked, releasing = threading.Event(), threading.Event(), threading.Event()
    locks = segments.writer_locks(path)
    assert len(locks) == 2  # one per part
    watch = LockWatch(monkeypatch, locks, when_held=blocked.set, after=releasing.is_set)

    def rebuild():
        hybrid.build([Document("c", "cherry tart")], path, neural="idf", overwrite=True)
        rebuilt.set()

    with open_hybrid.index.writing():
        builder = threading.Thread(target=rebuild)
        builder.start()
        assert blocked.wait(30)  # the swap asked for a part's lock, found it held, and waits
        assert not rebuilt.is_set()
        releasing.set()
    builder.join(30)
    assert rebuilt.is_set() and open_retriever(path).index.live_ids() == ["c"]
    first, *rest = had = watch.of(builder)  # each part's lock, the first found held: all had once it was releasing
    assert len(had) == 2 and first == (False, True) and all(after for _, after in rest), had


@pytest.mark.parametrize("name, build, options", [("bm25", {}, {"rm3": True}),
                                                 ("hybrid", {"neural": "idf"}, {"fusion": "score"})],
                         ids=["bm25-rm3", "hybrid-score"])
def test_searches_during_writes_each_read_one_commit(tmp_path, name, build, options):
    """A search without a filter read the live index at each step: RM3's two searches, or a hybrid's two parts, could
    read two commits while documents were added and deleted (19 of 704, 127 of 4,854 answers were no state's). Every
    answer given while writes land is one the index gave before or after one of them."""
    import random
    import shutil

    from semiret.search.retrievers import RETRIEVERS

    rng = random.Random(5)
    words = [f"w{n}" for n in range(150)]
    documents = [Document(f"d{n}", " ".join(rng.choices(words, k=rng.randint(5, 30)))) for n in range(420)]
    queries = [" ".join(rng.choices(words, k=3)) for _ in range(20)]
    RETRIEVERS[name].build(documents[:300], tmp_path / "a", **build)
    shutil.copytree(tmp_path / "a", tmp_path / "b")

    def writes(retriever) -> list:
        return [change for n in range(6) for change in (
            lambda n=n: retriever.add(documents[300 + 20 * n: 320 + 20 * n]),
            lambda n=n: retriever.delete([f"d{10 * n}", f"d{10 * n + 3}"]))]

    def answer(retriever, query: str) -> tuple:
        found = retriever.search([query], k=10)
        return tuple(found.ids[0]), tuple(float(s) for s in found.scores[0])

    sequential = open_retriever(tmp_path / "a", **options)
    states = [[answer(sequential, q) for q in queries]]
    for change in writes(sequential):
        change()
        states.append([answer(sequential, q) for q in queries])
    allowed = [{state[q] for state in states} for q in range(len(queries))]
    concurrent = open_retriever(tmp_path / "b", **options)
    done, wrong, answered = threading.Event(), [], []

    def read(seed: int) -> None:
        order = random.Random(seed)
        while not done.is_set():
            q = order.randrange(len(queries))
            got = answer(concurrent, queries[q])
            answered.append(q)
            if got not in allowed[q]:
                wrong.append(q)

    readers = [threading.Thread(target=read, args=(seed,)) for seed in range(3)]
    for thread in readers:
        thread.start()
    try:
        for change in writes(concurrent):
            time.sleep(0.05)
            change()
        time.sleep(0.05)
    finally:
        done.set()
        for thread in readers:
            thread.join()
    assert len(answered) > 100 and not wrong, f"{len(wrong)} of {len(answered)} answers were no state's"
