"""The segmented store through a toy index kind written against it, and the registry of index formats."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import numpy as np
import pytest

from semiret.data import Document
from semiret.errors import IndexFormatError, SemiretError
from semiret.indexes import DenseIndex, InvertedIndex, open_index, segments
from semiret.indexes.segments import Segment, SegmentedIndex, register_index_format
from semiret.indexes.storage import commit_stamp, load_array

from helpers import leftovers


@dataclass
class Priorities:
    """The toy kind's batch: one number per document."""

    ids: list[str]
    values: np.ndarray
    documents: list[Document] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    @staticmethod
    def concatenate(batches):
        keep_docs = all(b.documents is not None for b in batches)
        return Priorities([i for b in batches for i in b.ids], np.concatenate([b.values for b in batches]),
                          [d for b in batches for d in b.documents] if keep_docs else None)


class PrioritySegment(Segment):
    def __init__(self, path, info):
        super().__init__(path, info)
        self.values = load_array(path / "values.npy")


class PriorityIndex(SegmentedIndex):
    """A toy kind: documents ranked by a stored number, no other search structure."""

    FORMAT = "test.priority"
    VERSION = 3
    DESCRIPTION = "priority index"
    batch_type = Priorities

    @classmethod
    def build(cls, path, batches, overwrite=False):
        return cls._build(path, {"kind": "priority"}, batches, store_texts=True, overwrite=overwrite, extra_meta=None)

    def _open_segment(self, path, info):
        return PrioritySegment(path, info)

    def _validate(self, batch):
        if not np.all(np.isfinite(batch.values)):
            raise SemiretError("priorities must be finite")

    def _write_segment_files(self, directory, batch, info):
        np.save(directory / "values.npy", np.asarray(batch.values, np.float32))
        info["largest"] = float(np.max(batch.values, initial=0))

    def _live_batch(self, segment, live, ids, documents):
        return Priorities(ids, np.asarray(segment.values)[live], documents)

    def search(self, k):
        """The k live documents of largest priority."""
        segments = self.segments
        seg_scores, seg_locals = [], []
        for segment in segments:
            values = np.where(segment.deleted, -np.inf, np.asarray(segment.values))
            top = np.argsort(-values, kind="stable")[:k]
            seg_scores.append(values[top][None])
            seg_locals.append(np.where(np.isfinite(values[top]), top, -1)[None])
        return self._top_hits(segments, seg_scores, seg_locals, k, 1)


def priorities(values: dict[str, float]) -> Priorities:
    return Priorities(list(values), np.asarray(list(values.values()), np.float32),
                      [Document(i, f"text of {i}") for i in values])


@pytest.fixture
def registry(monkeypatch):
    """The toy kind registered in a copy of the registry, so other tests never see it."""
    monkeypatch.setattr(segments, "INDEX_FORMATS", dict(segments.INDEX_FORMATS))
    register_index_format(PriorityIndex)
    return segments.INDEX_FORMATS


def test_a_registered_kind_builds_changes_and_opens_through_open_index(tmp_path, registry):
    PriorityIndex.build(tmp_path / "idx", [priorities({"a": 1, "b": 5}), priorities({"c": 3})])
    index = open_index(tmp_path / "idx")
    assert isinstance(index, PriorityIndex) and index.kind == "priority"
    assert index.meta["segments"][0]["largest"] == 5.0  # the kind's own segment facts are committed
    assert index.search(k=2).ids == [["b", "c"]]
    index.add(priorities({"d": 4}))
    assert index.search(k=2).ids == [["b", "d"]] and len(index.segments) == 2
    assert index.delete(["b", "zz"], missing_ok=True) == 1
    stamp = commit_stamp(index.path)
    assert index.delete(["b", "zz"], missing_ok=True) == 0 and commit_stamp(index.path) == stamp  # nothing: no commit
    index.add(priorities({"a": 9}), replace=True)
    reopened = open_index(tmp_path / "idx")
    assert reopened.search(k=3).ids == [["a", "d", "c"]] and reopened.search(k=3).scores == [[9.0, 4.0, 3.0]]
    assert reopened.get_document("a").text == "text of a" and reopened.get_document("b") is None
    assert reopened.live_ids() == ["c", "d", "a"]  # live documents in the order they were added
    assert reopened.describe() | {"size_bytes": 0} == {"kind": "priority", "documents": 3, "deleted": 2,
                                                       "segments": 3, "size_bytes": 0, "buffer_mb": 0.0,
                                                       "format_version": 3}
    reopened.merge()
    merged = open_index(tmp_path / "idx")
    assert len(merged.segments) == 1 and merged.n_docs == merged.n_stored == 3
    assert merged.search(k=5).ids == [["a", "d", "c"]] and merged.get_document("c").text == "text of c"
    assert sorted(p.name for p in (tmp_path / "idx").iterdir()) == ["meta.json", "seg-000003", "write.lock"]


def test_the_store_refuses_bad_batches_before_writing(tmp_path, registry):
    index = PriorityIndex.build(tmp_path / "idx", [priorities({"a": 1})])
    with pytest.raises(SemiretError, match="duplicate document id 'x' in the documents to add"):
        index.add(Priorities(["x", "x"], np.ones(2, np.float32)))
    with pytest.raises(SemiretError, match=r"document id 'x\\ny' holds the control character '\\n'"):
        index.add(Priorities(["w", "x\ny"], np.ones(2, np.float32)))
    with pytest.raises(SemiretError, match="empty document id"):
        index.add(Priorities([""], np.ones(1, np.float32)))
    with pytest.raises(SemiretError, match="priorities must be finite"):
        index.add(priorities({"a": float("nan")}), replace=True)
    with pytest.raises(SemiretError, match=r"document 'a' is already in .* \(use replace / --replace\)"):
        index.add(priorities({"a": 2}))
    reopened = PriorityIndex.open(tmp_path / "idx")
    assert reopened.n_docs == 1 and "a" in reopened and len(reopened.segments) == 1


def test_the_size_leaves_out_staging_folders_and_files_removed_meanwhile(tmp_path, registry, monkeypatch):
    """What an index's size counts while a writer works beside it (a server describing the index during a merge):
    a staging folder is not part of the index yet, and a file a merge removes between listing and ``stat``
    counts nothing rather than failing the description."""
    import semiret.files

    index = PriorityIndex.build(tmp_path / "idx", [priorities({"a": 1, "b": 2})])
    size = index.describe()["size_bytes"]
    staging = tmp_path / "idx" / ".seg-000009.tmp-1-abcd"
    staging.mkdir()
    (staging / "big.npy").write_bytes(b"x" * 100_000)
    assert index.describe()["size_bytes"] == size
    real_stat = semiret.files.os.stat

    def stat_losing_a_file(path, *args, **kwargs):
        if str(path).endswith("meta.json"):
            raise FileNotFoundError(path)
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(semiret.files.os, "stat", stat_losing_a_file)
    assert 0 < index.describe()["size_bytes"] < size


def test_a_directory_is_replaced_in_one_step(tmp_path, monkeypatch):
    """Checkpoints and models are replaced by swapping the two directories at once (renameat2): no moment where
    neither exists for an interrupt to land in (two renames, old away then new in, had one)."""
    import semiret.files

    old, new = tmp_path / "checkpoint", tmp_path / ".checkpoint.tmp"
    old.mkdir()
    (old / "state").write_text("epoch 1")
    new.mkdir()
    (new / "state").write_text("epoch 2")

    def interrupted(*args):
        raise KeyboardInterrupt  # what a rename between the two would have met

    monkeypatch.setattr(semiret.files.os, "replace", interrupted)
    semiret.files.replace_directory(new, old, overwrite=True)
    assert (old / "state").read_text() == "epoch 2" and sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]


def test_a_crash_between_segment_write_and_commit_leaves_the_old_index(tmp_path, registry, monkeypatch):
    PriorityIndex.build(tmp_path / "idx", [priorities({"a": 1})])
    index = PriorityIndex.open(tmp_path / "idx")

    def crash(path, data):
        raise OSError("simulated crash before the commit")

    with monkeypatch.context() as patch:
        patch.setattr(segments, "atomic_write_json", crash)
        patch.setattr(segments.SegmentedIndex, "_remove_unlisted", lambda self, before: None)  # killed: no clean-up
        with pytest.raises(OSError):
            index.add(priorities({"b": 2}))
    assert (tmp_path / "idx" / "seg-000001" / "values.npy").is_file()  # written, never committed
    reopened = PriorityIndex.open(tmp_path / "idx")
    assert reopened.n_docs == 1 and "b" not in reopened and reopened.search(k=5).ids == [["a"]]
    reopened.add(priorities({"c": 3}))  # takes the uncommitted segment's name
    again = PriorityIndex.open(tmp_path / "idx")
    assert again.search(k=5).ids == [["c", "a"]] and "b" not in again
    assert leftovers(tmp_path) == []


def test_opening_checks_format_and_version(tmp_path, registry):
    PriorityIndex.build(tmp_path / "idx", [])
    meta_path = tmp_path / "idx" / "meta.json"
    meta = json.loads(meta_path.read_text())
    with pytest.raises(IndexFormatError, match="holds a 'test.priority' index, not 'semiret.inverted'"):
        InvertedIndex.open(tmp_path / "idx")
    meta_path.write_text(json.dumps({**meta, "version": 99}))
    with pytest.raises(IndexFormatError, match=r"priority index format version 99, written by a newer semiret \(this "
                                               r"one reads versions 1 to 3\): upgrade semiret"):
        open_index(tmp_path / "idx")
    for unknown in (0, "2"):
        meta_path.write_text(json.dumps({**meta, "version": unknown}))
        with pytest.raises(IndexFormatError, match=f"priority index format version {unknown!r} is not supported"):
            open_index(tmp_path / "idx")
    meta_path.write_text(json.dumps({**meta, "format": "nobody.knows"}))
    with pytest.raises(IndexFormatError) as error:
        open_index(tmp_path / "idx")
    assert str(error.value) == (f"{tmp_path / 'idx'} holds a 'nobody.knows' index, not one semiret searches "
                                f"({', '.join(sorted(segments.INDEX_FORMATS))})")  # every registered format, named


def test_a_format_name_belongs_to_one_class(registry):
    assert registry["semiret.inverted"] is InvertedIndex and registry["semiret.dense"] is DenseIndex
    assert register_index_format(PriorityIndex) is PriorityIndex  # registering again is harmless

    class Impostor(PriorityIndex):
        FORMAT = "semiret.inverted"

    with pytest.raises(SemiretError, match="'semiret.inverted' is already registered by .*InvertedIndex"):
        register_index_format(Impostor)
    assert registry["semiret.inverted"] is InvertedIndex


def test_id_lookups_where_two_ids_share_a_hash(tmp_path, monkeypatch):
    from semiret.indexes import storage

    ids = ["a", "b", "c", "d"]
    real = storage.id_hash
    shared = lambda values: np.array([7 if v in ("b", "c") else h for v, h in zip(values, real(values))], np.uint64)
    monkeypatch.setattr(storage, "id_hash", shared)  # "b" and "c" collide, in the table and in lookups
    storage.StringTable.write(tmp_path, "ids", ids, with_lookup=True)
    table = storage.StringTable(tmp_path, "ids", with_lookup=True)
    assert table.find_many(["c", "b", "x", "a", "d"]).tolist() == [2, 1, -1, 0, 3]
    digest = hashlib.blake2b(b"b", digest_size=8).digest()
    assert real(["b"]).tolist() == [int.from_bytes(digest, "little")]  # the stored hashes' definition, unchanged


def test_a_filter_s_kept_view_lets_merged_segments_go(tmp_path):
    import gc
    import weakref

    from semiret.indexes.filters import MetadataFilter
    from semiret.search import retriever_class

    docs = [Document(f"d{i}", f"word{i % 7} text", metadata={"n": i % 3}) for i in range(40)]
    bm25 = retriever_class("bm25").build(docs[:20], tmp_path / "i", buffer_mb=0)
    bm25.add(docs[20:])
    assert len(bm25.index.snapshot.segments) == 2
    gc.collect()
    gc.disable()  # freed by reference counting, as a server's long-lived objects are, not by a collection
    try:
        view = bm25.index.restricted(MetadataFilter({"n": 1}))
        assert bm25.index.restricted(MetadataFilter({"n": 1})).snapshot.segments is view.snapshot.segments  # kept
        kept = [weakref.ref(segment) for segment in view.snapshot.segments]
        del view
        bm25.index.merge()
        assert len(bm25.index.snapshot.segments) == 1 and all(ref() is None for ref in kept)
    finally:
        gc.enable()


def test_a_write_removes_what_a_writer_killed_mid_commit_left(tmp_path):
    """A commit killed between writing its staged meta.json (or a synonyms file) and renaming it leaves them; the
    next write of any kind removes them, not only a merge."""
    from semiret.search import BM25Retriever

    retriever = BM25Retriever.build([Document("a", "statins"), Document("b", "heart")], tmp_path / "idx")
    left = [tmp_path / "idx" / ".meta.json.tmp-999999", tmp_path / "idx" / "synonyms-0123456789abcdef.txt",
            tmp_path / "idx" / "seg-999999"]
    left[0].write_text("{}")
    left[1].write_text("a, b\n")
    left[2].mkdir()
    retriever.delete(["a"])
    assert not any(path.exists() for path in left)
    assert open_index(tmp_path / "idx").n_docs == 1
