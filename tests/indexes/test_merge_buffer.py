"""A merge written in parts (``buffer_mb``, by default the buffer the index was built with): the folded segments
read back a part at a time and written as segments of the buffer, searching as a fresh build of the live
documents; kinds written whole merge whole; shards join in parts."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from semiret.cli import app
from semiret.data import Document
from semiret.errors import SemiretError
from semiret.indexes import DenseIndex, InvertedIndex
from semiret.indexes import segments as segments_module
from semiret.indexes.segments import DEFAULT_BUFFER_MB, SegmentedIndex, batch_bytes, merge_shards
from semiret.search import BM25Retriever, HybridRetriever, open_retriever
from semiret.types import Embeddings, PackedStrings, Postings, StoredDocuments

from helpers import leftovers

WORDS = "heart disease statin trial cancer risk garden birds morning dogs cats protein cell gene virus".split()
QUERIES = ["statin heart trial", "garden birds in the morning", "gene protein cell", "virus cancer risk", "dogs"]
TINY_BUFFER = 0.01  # MB: a part each batch or two of 20 short documents


def corpus(n: int = 240, prefix: str = "d") -> list[Document]:
    """Documents of very different lengths, so that BM25's average length moves from part to part."""
    rng = np.random.default_rng(ord(prefix[0]))  # other prefixes, other texts (no ties between copies)
    return [Document(f"{prefix}{i}", " ".join(rng.choice(WORDS, size=3 + (i % 7) * 9 + (i // 60) % 4 * 20)),
                     metadata={"n": i}) for i in range(n)]


def same_results(one, other) -> None:
    a, b = one.search(QUERIES, k=50), other.search(QUERIES, k=50)
    assert any(a.ids) and a.ids == b.ids
    for x, y in zip(a.scores, b.scores):
        np.testing.assert_allclose(x, y, rtol=1e-6)


def close_results(one, other) -> None:
    """The same documents found, each scored within BM25's average-length tolerance (segments kept through a merge
    keep the average they were normalised by while it stays within 1% of the index's: near-ties may swap, also
    across the end of a list)."""
    for a, b in zip(one.search(QUERIES, k=200), other.search(QUERIES, k=200)):
        scores = {hit.id: hit.score for hit in b}
        assert len(a) > 50 and {hit.id for hit in a[:150]} <= scores.keys()
        for hit in a:
            assert scores.get(hit.id, hit.score) == pytest.approx(hit.score, rel=0.01)


def recorded_parts(monkeypatch) -> tuple[list[int], list[int]]:
    """(documents of each batch a merge or a shard's add reads back from a segment, bytes of each part written),
    recorded."""
    read, written = [], []
    live_parts, append_part = SegmentedIndex._live_parts, SegmentedIndex._append_part

    def reading(self, segment, limit):
        for batch in live_parts(self, segment, limit):
            read.append(len(batch))
            yield batch

    def writing(self, batches):
        written.append(sum(map(batch_bytes, batches)))
        return append_part(self, batches)

    monkeypatch.setattr(SegmentedIndex, "_live_parts", reading)
    monkeypatch.setattr(SegmentedIndex, "_append_part", writing)
    return read, written


def test_a_merge_in_parts_reads_and_writes_a_part_at_a_time(tmp_path, monkeypatch):
    docs = corpus()
    index = BM25Retriever.build(docs, tmp_path / "idx", buffer_mb=0)  # one large segment
    index.add(corpus(60, "e"))
    doomed = [f"d{i}" for i in range(0, 240, 3)] + ["e5"]
    index.delete(doomed)
    live = [d for d in docs + corpus(60, "e") if d.id not in doomed]
    fresh = BM25Retriever.build(live, tmp_path / "fresh", buffer_mb=0)
    read, written = recorded_parts(monkeypatch)
    index.index.merge(buffer_mb=TINY_BUFFER)
    assert len(read) > 4 and max(read) < 160  # the 160 live documents of the large segment came in pieces
    assert len(index.index.segments) == len(written) > 3
    assert max(written) < 4 * TINY_BUFFER * 2**20  # no part held more than a few buffers
    monkeypatch.undo()
    assert index.index.n_docs == len(live) and index.index.n_stored == len(live)  # the deleted ones dropped
    assert {s.avgdl for s in index.index.segments} == {fresh.index.segments[0].avgdl}  # normalised as the whole
    same_results(fresh, index)
    same_results(fresh, open_retriever(tmp_path / "idx"))
    assert index.get_document("d7") == docs[7] and index.get_document("d6") is None
    assert index.search(docs[8].text, k=3, filter={"n": 8})[0].id == "d8"  # metadata kept
    listed = {info["name"] for info in index.index.meta["segments"]}
    assert {p.name for p in (tmp_path / "idx").iterdir() if p.name.startswith("seg-")} == listed
    assert leftovers(tmp_path) == []


def test_a_merge_follows_the_buffer_the_index_was_built_with(tmp_path):
    parts = BM25Retriever.build(corpus(), tmp_path / "parts", buffer_mb=TINY_BUFFER, batch_size=20)
    whole = BM25Retriever.build(corpus(), tmp_path / "whole", buffer_mb=0)
    assert parts.index.meta["buffer_mb"] == TINY_BUFFER and whole.index.meta["buffer_mb"] == 0
    assert (parts.index.describe()["buffer_mb"], whole.index.describe()["buffer_mb"]) == (TINY_BUFFER, 0)
    for retriever in (parts, whole):
        retriever.add(corpus(40, "e"), buffer_mb=0)
        retriever.delete(["d3", "e1"])
    parts.index.merge()
    whole.index.merge()
    assert len(parts.index.segments) > 3 and len(whole.index.segments) == 1
    close_results(whole, parts)  # the segments that filled the buffer kept, with the average they had
    parts.index.merge(buffer_mb=0)  # asked for: one segment
    assert len(parts.index.segments) == 1
    same_results(whole, parts)


def test_a_merge_leaves_the_leading_segments_that_filled_its_buffer(tmp_path):
    retriever = BM25Retriever.build(corpus(), tmp_path / "idx", buffer_mb=TINY_BUFFER, batch_size=20)
    whole = BM25Retriever.build(corpus(), tmp_path / "whole", buffer_mb=0)
    names = [s.name for s in retriever.index.segments]
    assert len(names) > 3 and all(segments_module.FILLED in info for info in retriever.index.meta["segments"][:-1])
    retriever.index.merge()  # every segment but the last filled the buffer: nothing to gain
    assert [s.name for s in retriever.index.segments] == names
    retriever.delete(["d100"])
    whole.delete(["d100"])
    holding = next(i for i, s in enumerate(retriever.index.segments) if s.deleted.any())
    retriever.index.merge()
    assert [s.name for s in retriever.index.segments][:holding] == names[:holding]  # those before it kept
    assert retriever.index.segments[holding].name not in names and retriever.index.n_stored == 239
    whole.index.merge()
    close_results(whole, retriever)
    retriever.index.merge(buffer_mb=4 * TINY_BUFFER)  # a larger buffer than they filled: all folded
    assert not set(s.name for s in retriever.index.segments) & set(names)
    assert len(retriever.index.segments) < len(names)
    same_results(whole, retriever)


def test_an_index_that_recorded_no_buffer_merges_with_the_default(tmp_path):
    index = BM25Retriever.build(corpus(40), tmp_path / "idx").index
    del index.meta["buffer_mb"]  # written before builds recorded it
    assert index._buffer_bytes(None) == DEFAULT_BUFFER_MB * 2**20
    assert index._buffer_bytes(2) == 2 * 2**20


def test_a_tail_merge_in_parts_leaves_the_segments_before_it(tmp_path):
    retriever = BM25Retriever.build(corpus(120), tmp_path / "idx", buffer_mb=0)
    for start in range(0, 60, 20):
        retriever.add(corpus(60, "e")[start: start + 20], buffer_mb=0)
    first = retriever.index.segments[0].name
    retriever.delete(["e4", "e25"])
    retriever.index.merge(tail=3, buffer_mb=TINY_BUFFER / 4)
    assert retriever.index.segments[0].name == first and len(retriever.index.segments) > 2
    fresh = BM25Retriever.build([d for d in corpus(120) + corpus(60, "e") if d.id not in ("e4", "e25")],
                                tmp_path / "fresh", buffer_mb=0)
    close_results(fresh, retriever)


@pytest.mark.parametrize("kind", ["binary", "impact"])
def test_postings_read_back_in_parts_are_the_postings_written(tmp_path, kind):
    rng = np.random.default_rng(5)
    offsets, terms, values = [0], [], []
    for _ in range(50):
        row = np.sort(rng.choice(30, size=int(rng.integers(0, 8)), replace=False))
        terms.extend(row.tolist())
        values.extend(rng.uniform(0.1, 3, len(row)).tolist())
        offsets.append(len(terms))
    ids = [f"d{i}" for i in range(50)]
    postings = Postings(ids, np.array(offsets), np.array(terms, np.int32), np.array(values, np.float32),
                        np.diff(offsets).astype(np.int32), [Document(i, "x") for i in ids])
    index = InvertedIndex.build(tmp_path / "idx", kind, [postings], vocab_size=30, analyzer={})
    segment = index.segments[0]
    chosen = np.array([0, 3, 4, 17, 31, 49])
    back = index._live_batch(segment, chosen, [ids[i] for i in chosen], None)
    for row, doc in enumerate(chosen):
        lo, hi = offsets[doc], offsets[doc + 1]
        got = slice(back.offsets[row], back.offsets[row + 1])
        assert back.terms[got].tolist() == terms[lo:hi]
        expected = values[lo:hi] if kind == "impact" else [1.0] * (hi - lo)
        np.testing.assert_allclose(back.values[got], expected, rtol=1e-6)
    assert back.lengths.tolist() == np.diff(offsets)[chosen].tolist()


def test_kinds_written_whole_merge_whole_and_refuse_a_buffer(tmp_path):
    batch = Postings(["a", "b"], np.array([0, 1, 2]), np.array([1, 2], np.int32), np.array([0.5, 2.0], np.float32),
                     np.array([1, 1], np.int32), [Document("a", "x"), Document("b", "y")])
    quantized = InvertedIndex.build(tmp_path / "q", "impact", [batch], vocab_size=4, analyzer={}, quantize_bits=8)
    quantized.add(Postings(["c"], np.array([0, 1]), np.array([3], np.int32), np.array([1.0], np.float32),
                           np.array([1], np.int32), [Document("c", "z")]))
    rng = np.random.default_rng(2)
    tree = DenseIndex.build(tmp_path / "t", "dense", [Embeddings([f"d{i}" for i in range(60)],
                            rng.standard_normal((60, 8)).astype(np.float32))], dim=8, analyzer={}, ann="tree")
    tree.add(Embeddings(["x", "y"], rng.standard_normal((2, 8)).astype(np.float32)))
    for index, what in ((quantized, "a quantized index"), (tree, "a dense index with a tree")):
        with pytest.raises(SemiretError, match=f"{what} .* is written and merged whole: a buffer"):
            index.merge(buffer_mb=TINY_BUFFER)
        assert len(index.segments) == 2  # refused before anything was written
        index.merge()
        assert len(index.segments) == 1


def test_a_hybrid_index_merges_each_part_whole(tmp_path):
    hybrid = HybridRetriever.build(corpus(60), tmp_path / "h", neural="idf")
    hybrid.add(corpus(20, "e"))
    with pytest.raises(SemiretError, match="merged whole: a buffer"):
        hybrid.index.merge(buffer_mb=TINY_BUFFER)
    for part in hybrid.index.parts.values():  # a part built with a small buffer still merges whole with the others
        part.meta["buffer_mb"] = TINY_BUFFER
    hybrid.index.merge()
    assert [len(part.segments) for part in hybrid.index.parts.values()] == [1, 1]


def test_shards_join_in_parts(tmp_path, monkeypatch):
    docs = corpus()
    whole = BM25Retriever.build(docs, tmp_path / "whole", buffer_mb=0)
    for i, lo in enumerate(range(0, 240, 80)):  # shards built with different buffers still join
        BM25Retriever.build(docs[lo: lo + 80], tmp_path / f"shard-{i}", buffer_mb=[TINY_BUFFER, 0, 1][i],
                            batch_size=10)
    shards = [tmp_path / f"shard-{i}" for i in range(3)]
    read, _ = recorded_parts(monkeypatch)
    merged = merge_shards(tmp_path / "merged", shards, buffer_mb=TINY_BUFFER)
    assert max(read) < 80  # each shard's segment read a part at a time
    monkeypatch.undo()
    assert len(merged.segments) > 3 and merged.n_docs == 240
    assert {s.avgdl for s in merged.segments} == {whole.index.segments[0].avgdl}  # also the first shard's, kept
    same_results(whole, open_retriever(tmp_path / "merged"))
    one = merge_shards(tmp_path / "one", shards, buffer_mb=0)
    assert len(one.segments) == 1
    same_results(whole, open_retriever(tmp_path / "one"))
    assert leftovers(tmp_path) == []


def test_a_shard_added_in_parts_is_one_commit(tmp_path, monkeypatch):
    first = BM25Retriever.build(corpus(80), tmp_path / "a", buffer_mb=0)
    BM25Retriever.build(corpus(80, "e"), tmp_path / "b", buffer_mb=0)
    other = open_retriever(tmp_path / "b").index
    commits = []
    commit = SegmentedIndex._commit
    monkeypatch.setattr(SegmentedIndex, "_commit", lambda self: (commits.append(1), commit(self))[1])
    assert first.index.add_index(other, buffer_mb=TINY_BUFFER) == 80
    assert len(commits) == 1 and len(first.index.segments) > 2


def test_the_command_line_merges_in_parts(tmp_path):
    BM25Retriever.build(corpus(), tmp_path / "idx", buffer_mb=TINY_BUFFER, batch_size=20)
    runner = CliRunner()
    kept = runner.invoke(app, ["merge", "--index", str(tmp_path / "idx")])
    assert kept.exit_code == 0, kept.output
    assert json.loads(kept.stdout[kept.stdout.index("{"):])["segments"] > 3
    one = runner.invoke(app, ["merge", "--index", str(tmp_path / "idx"), "--buffer-mb", "0"])
    assert one.exit_code == 0, one.output
    assert json.loads(one.stdout[one.stdout.index("{"):])["segments"] == 1
    bad = runner.invoke(app, ["merge", "--index", str(tmp_path / "idx"), "--buffer-mb", "-1"])
    assert bad.exit_code != 0 and "must be a non-negative number of MB" in bad.output
    BM25Retriever.build(corpus(40, "e"), tmp_path / "shard", buffer_mb=0)
    shards = runner.invoke(app, ["merge-shards", str(tmp_path / "m"), str(tmp_path / "idx"), str(tmp_path / "shard"),
                                 "--buffer-mb", str(TINY_BUFFER)])
    assert shards.exit_code == 0, shards.output
    # the first shard's one segment (nothing deleted: kept) and the second's documents in parts
    assert json.loads(shards.stdout[shards.stdout.index("{"):])["segments"] > 2


def test_a_merge_failing_in_a_later_part_leaves_the_index_as_it_was(tmp_path, monkeypatch):
    retriever = BM25Retriever.build(corpus(), tmp_path / "idx", buffer_mb=TINY_BUFFER, batch_size=20)
    retriever.delete(["d1"])
    before = (json.loads((tmp_path / "idx" / "meta.json").read_text()),
              sorted(p.name for p in (tmp_path / "idx").iterdir()))
    calls = []
    append_part = SegmentedIndex._append_part

    def failing(self, batches):
        calls.append(1)
        if len(calls) == 3:
            raise OSError("disk full")
        return append_part(self, batches)

    monkeypatch.setattr(SegmentedIndex, "_append_part", failing)
    with pytest.raises(OSError, match="disk full"):
        retriever.index.merge(buffer_mb=TINY_BUFFER * 2)
    monkeypatch.undo()
    assert (json.loads((tmp_path / "idx" / "meta.json").read_text()),
            sorted(p.name for p in (tmp_path / "idx").iterdir())) == before  # the parts it wrote removed
    reopened = open_retriever(tmp_path / "idx")
    assert reopened.index.n_docs == 239 and reopened.get_document("d1") is None
    same_results(reopened, retriever)


# ---------------------------------------------------------------------------- what a review found
def test_parts_read_in_order_read_each_posting_once(tmp_path):
    index = BM25Retriever.build(corpus(), tmp_path / "idx", buffer_mb=0).index
    index.delete(["d0", "d77", "d238"])  # the last document live: every list is read to its end
    segment = index.segments[0]
    read = index._segment_reader(segment)
    live = np.flatnonzero(~segment.deleted)
    parts = [read(chunk, segment.document_ids(chunk), None) for chunk in np.array_split(live, 9)]
    whole = index._live_batch(segment, live, segment.document_ids(live), None)
    joined = Postings.concatenate(parts)
    assert joined.ids == whole.ids
    for field in ("offsets", "terms", "values", "lengths"):
        np.testing.assert_array_equal(getattr(joined, field), getattr(whole, field))
    cursors = read.keywords["cursors"]  # every term's list read to its end, once
    np.testing.assert_array_equal(cursors, np.asarray(segment.indptr)[1:])


def test_a_tiny_buffer_reads_at_most_a_part_a_document(tmp_path):
    index = BM25Retriever.build(corpus(50), tmp_path / "idx", buffer_mb=0).index
    for limit in (1e-300, 1e-9):
        assert [len(batch) for batch in index._live_parts(index.segments[0], limit)] == [1] * 50


def test_a_rewrite_for_the_average_length_links_the_postings_and_writes_new_weights(tmp_path):
    import os

    retriever = BM25Retriever.build(corpus(60), tmp_path / "idx", buffer_mb=0)
    old = retriever.index.segments[0]
    linked = ("postings.docs.npy", "postings.terms.npy", "doclens.npy", "texts.blob.npy")
    inodes = [os.stat(old.path / name).st_ino for name in linked]
    retriever.add([Document("long", " ".join(["heart"] * 400))])  # moves the average length by far more than 1%
    new = retriever.index.segments[0]
    assert new.name != old.name and new.avgdl != old.avgdl
    assert [os.stat(new.path / name).st_ino for name in linked] == inodes  # linked, not written again
    fresh = BM25Retriever.build(corpus(60) + [Document("long", " ".join(["heart"] * 400))], tmp_path / "fresh",
                                buffer_mb=0)
    same_results(fresh, retriever)  # the new weights are those a build of the documents computes


def test_nail_indexes_that_recorded_no_buffer_merge_whole(tmp_path):
    from semiret.indexes.score_matrix import ScoreMatrixIndex, ScoredPostings

    rng = np.random.default_rng(0)
    ids = [f"d{i}" for i in range(30)]
    batch = ScoredPostings(ids=ids, offsets=np.arange(31) * 2, terms=np.tile(np.array([1, 3], np.int32), 30),
                           values=np.ones(60, np.float32), lengths=np.full(30, 2, np.int32),
                           documents=[Document(i, "x") for i in ids],
                           scores=rng.standard_normal((30, 8)).astype(np.float32))
    index = ScoreMatrixIndex.build(tmp_path / "idx", "binary", [batch], vocab_size=8, analyzer={}, score_vocab_size=8)
    del index.meta["buffer_mb"]  # written before builds recorded it
    assert index._buffer_bytes(None) == 0
    index.delete(["d3"])
    index.merge(buffer_mb=TINY_BUFFER / 10)  # asked for: in parts, the scores kept
    assert len(index.segments) > 1
    scores = np.concatenate([np.asarray(s.scores).T for s in index.segments])
    np.testing.assert_array_equal(scores, np.delete(batch.scores, 3, axis=0).astype(np.float16))


def test_a_tree_index_emptied_and_merged_takes_documents_again(tmp_path):
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((300, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index = DenseIndex.build(tmp_path / "t", "dense", [Embeddings([f"x{i}" for i in range(300)], vectors)], dim=8,
                             analyzer={}, ann="tree")
    index.delete([f"x{i}" for i in range(300)])
    index.merge()
    assert index.segments == [] and index.n_docs == 0
    index.add(Embeddings(["y"], vectors[:1]))  # too few to cluster: searched exactly
    index.add(Embeddings([f"z{i}" for i in range(200)], vectors[100:]))  # the first with a tree
    assert [s.tree is None for s in DenseIndex.open(tmp_path / "t").segments] == [True, False]
    assert index.search(vectors[:1], k=1).ids == [["y"]] and index.search(vectors[150:151], k=1).ids == [["z50"]]
    small = DenseIndex.build(tmp_path / "small", "dense", [Embeddings(["a", "b", "c"], vectors[:3])], dim=8,
                             analyzer={}, ann="tree")
    assert small.search(vectors[2:3], k=1).ids == [["c"]]


def test_a_shard_s_first_part_is_made_under_the_write_lock(tmp_path, monkeypatch):
    """Making a part adds the shard's words to the vocabulary: another writer committing words first must not
    give them other ids (the first part was once made before the lock was taken)."""
    BM25Retriever.build([Document("a1", "apple banana")], tmp_path / "idx", buffer_mb=0)
    BM25Retriever.build([Document("s1", "zebra yak"), Document("s2", "zebra")], tmp_path / "shard", buffer_mb=0)
    adding = open_retriever(tmp_path / "idx").index
    other = open_retriever(tmp_path / "idx")
    writing = type(adding).writing
    calls = []

    def meanwhile(self):
        if self is adding and not calls:  # the other writer commits just before the lock is taken
            calls.append(1)
            other.add([Document("b1", "kiwi mango")])
        return writing(self)

    monkeypatch.setattr(type(adding), "writing", meanwhile)
    adding.add_index(open_retriever(tmp_path / "shard").index)
    monkeypatch.undo()
    found = open_retriever(tmp_path / "idx")
    assert [[hit.id for hit in found.search(q, k=5)] for q in ("zebra", "yak", "kiwi", "mango")] == \
        [["s2", "s1"], ["s1"], ["b1"], ["b1"]]


def test_a_shard_merged_meanwhile_is_still_added(tmp_path):
    """The parts are sized from the segment's mapped files, which a merge elsewhere may have removed from disk."""
    BM25Retriever.build([Document("a1", "apple banana")], tmp_path / "idx", buffer_mb=0)
    BM25Retriever.build(corpus(40, "s"), tmp_path / "shard", buffer_mb=TINY_BUFFER / 5, batch_size=5)
    reading = open_retriever(tmp_path / "shard").index
    elsewhere = open_retriever(tmp_path / "shard").index
    elsewhere.delete(["s0"])
    elsewhere.merge(buffer_mb=0)
    assert open_retriever(tmp_path / "idx").index.add_index(reading) == 40


def test_a_buffer_refused_by_the_shards_kind_is_said_of_the_option(tmp_path):
    batch = Postings(["a"], np.array([0, 1]), np.array([1], np.int32), np.array([0.5], np.float32),
                     np.array([1], np.int32), [Document("a", "x")])
    InvertedIndex.build(tmp_path / "s0", "impact", [batch], vocab_size=4, analyzer={}, quantize_bits=8)
    InvertedIndex.build(tmp_path / "s1", "impact", [Postings(["b"], batch.offsets, batch.terms, batch.values,
                                                             batch.lengths, [Document("b", "y")])],
                        vocab_size=4, analyzer={}, quantize_bits=8)
    with pytest.raises(SemiretError) as refused:
        merge_shards(tmp_path / "m", [tmp_path / "s0", tmp_path / "s1"], buffer_mb=1)
    assert "merged whole: a buffer" in str(refused.value) and "does not join" not in str(refused.value)
    assert not (tmp_path / "m").exists()


def small_segments(index) -> int:
    """Segments that did not fill the index's buffer: what the merge policy counts."""
    return sum(segments_module.FILLED not in info for info in index.meta["segments"])


def test_the_server_leaves_filled_segments_out_of_its_merges(tmp_path):
    from semiret.serving.served import ServedIndex

    docs = [Document(f"d{i}", " ".join(["word"] * 6 + [f"w{i % 50}"])) for i in range(200)]
    BM25Retriever.build(docs, tmp_path / "idx", buffer_mb=TINY_BUFFER / 2, batch_size=10)
    served = ServedIndex("x", tmp_path / "idx", max_segments=3)
    filled = [s.name for s in served.index.segments[:-1]]
    assert len(filled) > 5
    for u in range(30):  # documents of the same length: the average length stays
        served.upsert([Document(f"u{u}", " ".join(["word"] * 6 + [f"w{u}"]))])
        assert small_segments(served.index) <= 3
        assert [s.name for s in served.index.segments[: len(filled)]] == filled  # never rewritten
    assert served.index.n_docs == 230


def test_updates_to_filled_segments_do_not_make_every_write_merge(tmp_path, monkeypatch):
    """Each filled segment given one update (a deletion in it) once counted as small: the count stayed above the
    limit, every later write merged a growing run, and one rewrote the whole index."""
    docs = corpus(600)
    retriever = BM25Retriever.build(docs, tmp_path / "idx", buffer_mb=2 * TINY_BUFFER, batch_size=20)
    index = retriever.index
    assert len(index.segments) > 10
    for segment in list(index.segments[:9]):
        doc_id = segment.document_ids(np.array([0]))[0]
        retriever.add([docs[int(doc_id[1:])]], replace=True)
        index.merge_small_segments(8)
    written = []
    append_part = SegmentedIndex._append_part
    monkeypatch.setattr(SegmentedIndex, "_append_part",
                        lambda self, batches: (written.append(sum(map(len, batches))), append_part(self, batches))[1])
    for i in range(60):
        retriever.add([Document(f"new{i}", "statin heart trial garden")])
        index.merge_small_segments(8)
    assert sum(written) < 300 and max(written) < 100  # small segments merged with small ones (each add: 1)
    assert small_segments(index) <= 8 and index.n_docs == 660


def test_a_filled_segment_mostly_deleted_is_folded(tmp_path):
    retriever = BM25Retriever.build(corpus(), tmp_path / "idx", buffer_mb=TINY_BUFFER, batch_size=20)
    index = retriever.index
    target = index.segments[1]
    retriever.delete(target.document_ids(np.arange(target.n_docs))[: int(target.n_docs * 0.4)])
    index.merge_small_segments(100)  # few small segments, but one filled segment 40% deleted
    assert target.name not in [s.name for s in index.segments] and index.n_stored == index.n_docs


def test_shards_built_in_parts_merge_into_one_build_s_weights(tmp_path):
    """Shards of like documents (average lengths within BM25's 1% tolerance of each other) built in parts: the
    segments the merge leaves as they are still take the whole corpus's average length, as one build's do."""
    rng = np.random.default_rng(1)
    docs = [Document(f"d{i}", " ".join(rng.choice(WORDS, size=int(rng.integers(20, 60))))) for i in range(600)]
    for name, part in (("s0", docs[:300]), ("s1", docs[300:]), ("one", docs)):
        BM25Retriever.build(part, tmp_path / name, buffer_mb=TINY_BUFFER, batch_size=20)
    one = open_retriever(tmp_path / "one")
    merged = merge_shards(tmp_path / "merged", [tmp_path / "s0", tmp_path / "s1"])
    assert {s.avgdl for s in merged.segments} == {s.avgdl for s in one.index.segments}
    same_results(one, open_retriever(tmp_path / "merged"))


def test_the_merge_policy_keeps_the_documents_in_their_order(tmp_path):
    """Segments folded where they were: ties rank as before, and a document's passages, which a build may split
    across two segments, stay together (folded after the others, they were not: export of passages failed)."""
    from semiret.data.chunking import Chunking

    docs = [Document(f"p{i}", " ".join(["statin heart trial garden"] * (3 + i % 5))) for i in range(120)]
    retriever = BM25Retriever.build(docs, tmp_path / "idx", buffer_mb=TINY_BUFFER, batch_size=10,
                                    chunking=Chunking(words=6, overlap=0))
    index = retriever.index
    order = index.live_ids()
    target = index.segments[2]
    doomed = set(target.document_ids(np.arange(target.n_docs))[: target.n_docs // 2]) | {order[-1]}
    index.delete(doomed)
    retriever.add([Document("new", "a garden")])
    index.merge_small_segments(1)
    assert target.name not in [s.name for s in index.segments]
    assert index.live_ids() == [i for i in order if i not in doomed] + [i for i in index.live_ids() if i.startswith("new")]
    parents = [index.get_document(i).metadata["parent"] for i in index.live_ids()]
    assert all(a == b or b not in parents[:n] for n, (a, b) in enumerate(zip(parents, parents[1:]), 1))


def test_a_merge_with_nothing_to_fold_still_removes_what_crashes_left(tmp_path):
    retriever = BM25Retriever.build(corpus(), tmp_path / "idx", buffer_mb=TINY_BUFFER, batch_size=20)
    stray, staged = tmp_path / "idx" / "seg-999999", tmp_path / "idx" / ".seg-000999.tmp-1-abcd"
    for folder in (stray, staged):
        folder.mkdir()
        (folder / "postings.values.npy").write_bytes(b"x" * 100)
    names = [s.name for s in retriever.index.segments]
    retriever.index.merge()  # every segment but the last filled the buffer: nothing folded
    assert [s.name for s in retriever.index.segments] == names
    assert not stray.exists() and not staged.exists()


def test_packed_strings_and_stored_documents_read_as_written():
    values = ["", "héllo", "日本語 text", "x" * 300]
    packed = PackedStrings.of(values)
    assert len(packed) == 4 and [packed[i] for i in range(4)] == values and list(packed) == values
    assert packed[-1] == values[-1] and packed[-4] == ""
    for outside in (4, -5):
        with pytest.raises(IndexError):
            packed[outside]
    joined = PackedStrings.concatenate([packed, PackedStrings.empty(2), PackedStrings.of(["z"])])
    assert [joined[i] for i in range(len(joined))] == values + ["", "", "z"]
    documents = [Document("a", "one", "T", {"k": [1, "ü"]}), Document("b", "two"), Document("c", "three")]
    stored = StoredDocuments.of(documents)
    assert StoredDocuments.of(stored) is stored and stored.has_metadata
    assert list(stored) == documents and stored[-1] == documents[2] and stored[1:] == documents[1:]
    with pytest.raises(IndexError):
        stored[3]
    plain = StoredDocuments.of(documents[1:])
    assert not plain.has_metadata and json.loads(plain.records[0])["_id"] == "b"
    both = Postings.concatenate([Postings(["a"], np.array([0, 0]), np.zeros(0, np.int32), np.zeros(0, np.float32),
                                          np.zeros(1, np.int32), StoredDocuments.of(documents[:1])),
                                 Postings(["b", "c"], np.array([0, 0, 0]), np.zeros(0, np.int32),
                                          np.zeros(0, np.float32), np.zeros(2, np.int32), plain)])
    assert isinstance(both.documents, StoredDocuments) and list(both.documents) == documents
    assert [both.documents.metadata[i] for i in range(3)] == ['{"k": [1, "ü"]}', "", ""]
    mixed = Embeddings.concatenate([Embeddings(["a"], np.zeros((1, 2), np.float32), documents[:1]),
                                    Embeddings(["b", "c"], np.zeros((2, 2), np.float32), plain)])
    assert mixed.documents == documents  # a plain list with packed ones: a list


def test_a_merge_copies_stored_texts_without_parsing_them(tmp_path, monkeypatch):
    with_metadata = corpus(60)
    without = [Document(f"p{i}", f"plain {WORDS[i % len(WORDS)]} text ✓", title="Ünïcode") for i in range(40)]
    retriever = BM25Retriever.build(with_metadata, tmp_path / "idx", buffer_mb=0)
    retriever.add(without, buffer_mb=0)  # a segment with no metadata table
    retriever.add(corpus(30, "e"), buffer_mb=0)
    retriever.delete(["d3", "p7", "e0"])
    before = {doc_id: retriever.index.locate(doc_id) for doc_id in ("d4", "p8", "e1")}
    raw = {doc_id: segment.texts[local] for doc_id, (segment, local) in before.items()}

    def parsed(*args, **kwargs):
        raise AssertionError("a merge parsed a stored document")

    monkeypatch.setattr(Document, "from_record", parsed)
    retriever.index.merge(buffer_mb=0)
    monkeypatch.undo()
    (segment,) = retriever.index.segments
    assert segment.metadata is not None and segment.n_docs == 127
    for doc_id, text in raw.items():
        assert segment.texts[retriever.index.locate(doc_id)[1]] == text  # the same bytes
    live = [d for d in with_metadata + without + corpus(30, "e") if d.id not in ("d3", "p7", "e0")]
    assert list(retriever.index.iter_documents()) == live
    assert retriever.search(with_metadata[8].text, k=3, filter={"n": 8})[0].id == "d8"
    assert retriever.count({"n": {"gte": 20}}) == 40 + 10  # d20..d59 and e20..e29; no p has metadata
    fresh = BM25Retriever.build(live, tmp_path / "fresh", buffer_mb=0)
    same_results(fresh, retriever)
    assert retriever.index.segments[0].texts.blob.tobytes() == fresh.index.segments[0].texts.blob.tobytes()
    assert retriever.index.segments[0].metadata.blob.tobytes() == fresh.index.segments[0].metadata.blob.tobytes()


def test_a_merge_of_segments_without_metadata_writes_no_metadata_table(tmp_path):
    retriever = BM25Retriever.build([Document(f"a{i}", f"text {i} heart") for i in range(20)], tmp_path / "idx")
    retriever.add([Document(f"b{i}", f"text {i} trial") for i in range(20)])
    retriever.delete(["a1"])
    retriever.index.merge(buffer_mb=0)
    (segment,) = retriever.index.segments
    assert segment.metadata is None and not (segment.path / "metadata.offsets.npy").exists()
    assert retriever.get_document("b3") == Document("b3", "text 3 trial")


def test_a_merge_rewrites_only_the_runs_between_segments_that_filled_its_buffer(tmp_path, monkeypatch):
    retriever = BM25Retriever.build(corpus(), tmp_path / "idx", buffer_mb=TINY_BUFFER, batch_size=20)
    names = [s.name for s in retriever.index.segments]
    assert len(names) > 5 and all(segments_module.FILLED in info for info in retriever.index.meta["segments"])
    read = []
    live_parts = SegmentedIndex._live_parts
    monkeypatch.setattr(SegmentedIndex, "_live_parts",
                        lambda self, segment, limit: (read.append(segment.name), live_parts(self, segment, limit))[1])
    retriever.delete(["d0"])  # in the first segment
    retriever.index.merge()
    after = [s.name for s in retriever.index.segments]
    assert read == names[:1] and after[0] not in names and after[1:] == names[1:]
    retriever.index.merge()  # nothing deleted, no two small segments side by side: nothing to do
    assert read == names[:1] and [s.name for s in retriever.index.segments] == after
    retriever.add(corpus(10, "e"), buffer_mb=0)
    retriever.add(corpus(10, "f"), buffer_mb=0)
    added = [s.name for s in retriever.index.segments[-2:]]
    retriever.delete(["d100"])
    holding = next(s.name for s in retriever.index.segments if s.deleted.any())
    read.clear()
    retriever.index.merge()
    assert read == [*added, holding]  # the two small ones together, the segment holding d100 alone (the last first)
    assert len(retriever.index.segments) == len(after) + 1
    fresh = BM25Retriever.build([d for d in corpus() + corpus(10, "e") + corpus(10, "f")
                                 if d.id not in ("d0", "d100")], tmp_path / "fresh", buffer_mb=0)
    close_results(fresh, retriever)


def test_merges_and_shard_adds_show_the_documents_they_fold(tmp_path, monkeypatch):
    from semiret import progress

    shown = []
    monkeypatch.setattr(progress.StepBar, "advance",
                        lambda self, figures="", amount=1: shown.append((self.description, self.total, amount)))
    retriever = BM25Retriever.build(corpus(), tmp_path / "idx", buffer_mb=TINY_BUFFER, batch_size=20)
    retriever.delete(["d0", "d1", "d239"])  # in the first and the last segments
    retriever.index.merge()
    folded = 20 + 20 - 3  # two runs: the first segment and the last
    assert {(d, t) for d, t, _ in shown} == {("merging", folded)} and sum(a for *_, a in shown) == folded
    shown.clear()
    shard = BM25Retriever.build(corpus(30, "e"), tmp_path / "shard", buffer_mb=0).index
    retriever.index.add_index(shard)
    assert {(d, t) for d, t, _ in shown} == {("adding shard", 30)} and sum(a for *_, a in shown) == 30


def test_filled_segments_merged_for_their_deletions_stay_filled_for_the_merge_policy(tmp_path):
    rng = np.random.default_rng(0)
    docs = [Document(f"d{i}", " ".join(rng.choice(WORDS, 20))) for i in range(400)]
    retriever = BM25Retriever.build(docs, tmp_path / "idx", buffer_mb=TINY_BUFFER, batch_size=10)
    index = retriever.index
    filled = [segments_module.FILLED in info for info in index.meta["segments"]]
    assert len(filled) > 10 and sum(filled) >= len(filled) - 1
    retriever.delete([s.document_ids(np.array([0]))[0] for s in index.segments[::2]])  # one in every other segment
    index.merge()  # each of those rewritten alone, less its deletion
    assert sum(segments_module.FILLED not in info for info in index.meta["segments"]) <= 1
    assert len(index.segments) >= len(filled) - 1 and index.n_docs == 400 - len(filled[::2])
    for round_ in range(4):
        retriever.add([Document(f"n{round_}-{j}", "heart trial") for j in range(3)])
        index.merge_small_segments(3)  # what the server runs after each write (--max-segments 3)
        assert sum(segments_module.FILLED not in info for info in index.meta["segments"]) <= 3
