"""A build written in parts (``buffer_mb``): several segments whose searches equal a build held whole, a clean
failure when a later part is refused, and the buffer's checks."""

from __future__ import annotations

import json

import numpy as np
import pytest

from semiret.data import Document
from semiret.errors import SemiretError
from semiret.indexes import DenseIndex, InvertedIndex
from semiret.search import BM25Retriever, HybridRetriever, IDFRetriever, open_retriever
from semiret.types import Embeddings, Postings, SparseQuery

from helpers import leftovers, write_jsonl

WORDS = ("heart disease statin trial cancer risk garden birds morning dogs cats protein cell gene virus "
         "vaccine dose patients mortality sleep memory brain").split()
QUERIES = ["statin heart trial", "garden birds in the morning", "gene protein cell", "virus vaccine dose",
           "sleep and memory", "dogs cats"]
TINY_BUFFER = 0.01  # MB: a part each batch or two of 20 documents


def corpus(n: int = 240, prefix: str = "d") -> list[Document]:
    """Documents of very different lengths, so that BM25's average length moves from part to part."""
    rng = np.random.default_rng(7)
    return [Document(f"{prefix}{i}", " ".join(rng.choice(WORDS, size=3 + (i % 7) * 9 + (i // 60) % 4 * 20)),
                     metadata={"n": i}) for i in range(n)]


def same_results(one, parts) -> None:
    """The same hits, the scores equal but for float32 rounding (a query's terms add up in each segment's order)."""
    a, b = one.search(QUERIES, k=50), parts.search(QUERIES, k=50)
    assert a.ids == b.ids
    np.testing.assert_allclose(np.array(a.scores), np.array(b.scores), rtol=1e-6)


@pytest.mark.parametrize("retriever", [BM25Retriever, IDFRetriever])
def test_a_build_in_parts_searches_as_the_build_held_whole(tmp_path, retriever):
    docs = corpus()
    whole = retriever.build(docs, tmp_path / "whole", buffer_mb=0, batch_size=20)
    parts = retriever.build(docs, tmp_path / "parts", buffer_mb=TINY_BUFFER, batch_size=20)
    assert len(whole.index.segments) == 1
    assert len(parts.index.segments) > 3
    same_results(whole, parts)
    if retriever is BM25Retriever:  # every part normalised by the whole corpus's average length
        assert {s.avgdl for s in parts.index.segments} == {whole.index.segments[0].avgdl}
    assert parts.index.n_docs == len(docs)
    assert parts.get_document("d123") == docs[123]
    assert parts.get_document("d123").metadata == {"n": 123}  # a rewritten part keeps its stored documents
    if retriever is BM25Retriever:  # (the idf retriever drops these words: each is in most documents)
        assert [hit.id for hit in parts.search(docs[7].text, k=5, filter={"n": 7})] == ["d7"]
    listed = {info["name"] for info in json.loads((tmp_path / "parts" / "meta.json").read_text())["segments"]}
    on_disk = {p.name for p in (tmp_path / "parts").iterdir() if p.name.startswith("seg-")}
    assert on_disk == listed  # the parts rewritten by the average are gone
    assert leftovers(tmp_path) == []
    # reopened, and after an add and a merge, still the same as the whole build given the same documents
    reopened = open_retriever(tmp_path / "parts")
    same_results(whole, reopened)
    extra = corpus(30, "e")
    whole.add(extra)
    reopened.add(extra)
    whole.index.merge()
    reopened.index.merge()  # by default in parts of the buffer it was built with, read a part at a time
    assert len(reopened.index.segments) > 3
    same_results(whole, reopened)
    if retriever is BM25Retriever:
        assert {s.avgdl for s in reopened.index.segments} == {whole.index.segments[0].avgdl}
    reopened.index.merge(buffer_mb=0)
    assert len(reopened.index.segments) == 1
    same_results(whole, reopened)


def test_the_default_buffer_writes_a_small_corpus_as_one_segment(tmp_path):
    assert len(BM25Retriever.build(corpus(), tmp_path / "idx", batch_size=20).index.segments) == 1


def test_a_dense_build_in_parts(tmp_path):
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((300, 16)).astype(np.float32)
    batches = [Embeddings([f"d{i}" for i in range(lo, lo + 30)], vectors[lo: lo + 30],
                          [Document(f"d{i}", f"text {i}") for i in range(lo, lo + 30)]) for lo in range(0, 300, 30)]
    whole = DenseIndex.build(tmp_path / "whole", "dense", batches, dim=16, analyzer={}, buffer_mb=0)
    parts = DenseIndex.build(tmp_path / "parts", "dense", iter(batches), dim=16, analyzer={}, buffer_mb=TINY_BUFFER)
    assert len(parts.segments) > 3
    queries = rng.standard_normal((5, 16)).astype(np.float32)
    a, b = whole.search(queries, k=20), parts.search(queries, k=20)
    assert a.ids == b.ids
    np.testing.assert_allclose(np.array(a.scores), np.array(b.scores), rtol=1e-6)


def test_a_quantized_index_is_written_whole(tmp_path):
    batches = [Postings([f"d{i}"], np.array([0, 2]), np.array([1, 2], np.int32), np.array([0.5 * (i + 1), 1.0],
                        np.float32), np.array([2], np.int32), [Document(f"d{i}", "x")]) for i in range(40)]
    with pytest.raises(SemiretError, match="a quantized index .* is written and merged whole: a buffer"):
        InvertedIndex.build(tmp_path / "q", "impact", batches, vocab_size=4, analyzer={}, quantize_bits=8,
                            buffer_mb=TINY_BUFFER)
    index = InvertedIndex.build(tmp_path / "q", "impact", iter(batches), vocab_size=4, analyzer={}, quantize_bits=8)
    assert len(index.segments) == 1  # one scale, set by all the weights (the largest not clipped)
    assert index.meta["quantization"]["scale"] == pytest.approx(20.0 / 255)


def test_a_dense_tree_is_written_whole(tmp_path):
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((200, 8)).astype(np.float32)
    batches = [Embeddings([f"d{i}" for i in range(lo, lo + 20)], vectors[lo: lo + 20]) for lo in range(0, 200, 20)]
    with pytest.raises(SemiretError, match="a dense index with a tree .* is written and merged whole"):
        DenseIndex.build(tmp_path / "t", "dense", batches, dim=8, analyzer={}, ann="tree", buffer_mb=TINY_BUFFER)
    assert len(DenseIndex.build(tmp_path / "t", "dense", batches, dim=8, analyzer={}, ann="tree").segments) == 1


def test_the_retrievers_default_buffer_leaves_whole_what_must_be(tmp_path, monkeypatch):
    """A small default buffer (standing in for a corpus above 256 MB) splits a BM25 build, but not the BM25 part
    of a hybrid made around a neural index: its parts must hold the same documents segment by segment."""
    from semiret.search.lexical import WordCounts

    monkeypatch.setattr(WordCounts, "buffer_mb", TINY_BUFFER)
    monkeypatch.setattr(WordCounts, "batch_size", 20)
    assert len(BM25Retriever.build(corpus(), tmp_path / "bm25").index.segments) > 3
    IDFRetriever.build(corpus(), tmp_path / "neural")
    hybrid = HybridRetriever.around(tmp_path / "neural", tmp_path / "hybrid")
    assert [len(part.segments) for part in hybrid.index.parts.values()] == [1, 1]


@pytest.mark.parametrize("given,taken", [(np.int32(4096), 4096.0), (np.float16(64), 64.0), (np.int8(1), 1.0), (0, 0.0)])
def test_numpy_buffers_are_read_as_numbers(given, taken):
    from semiret.indexes.segments import check_buffer

    assert check_buffer(given) == taken and type(check_buffer(given)) is float


def test_a_numpy_buffer_splits_as_the_same_python_number(tmp_path):
    docs = corpus()
    sizes = [len(BM25Retriever.build(docs, tmp_path / f"i{n}", buffer_mb=value, batch_size=20).index.segments)
             for n, value in enumerate([np.float16(0.01), 0.01, np.int32(4096)])]
    assert sizes[0] == sizes[1] > 3 and sizes[2] == 1


def test_a_failed_build_takes_back_its_words_from_the_document_side(tmp_path):
    """The vocabulary a BM25 document side fills is the index's own: a failure takes the words back from both."""
    from semiret.search.lexical import BM25Options, WordCounts

    side = WordCounts.create(BM25Options())

    def failing():
        yield side.encode(corpus(20))
        raise OSError("the disk went away")

    with pytest.raises(OSError):
        InvertedIndex.build(tmp_path / "idx", "bm25", failing(), **side.index_config())
    assert len(side.terms) == len(side.terms.ids) == 0
    again = side.encode([Document("z", "zebra heart")])
    assert sorted(again.terms.tolist()) == [0, 1] and side.terms.terms == ["zebra", "heart"]


def test_an_index_kind_without_a_buffer_still_builds(tmp_path):
    """A kind of another package, written to the contract before buffers (its own ``build`` without ``buffer_mb``),
    is built whole; a buffer asked for is refused."""
    from semiret.search.lexical import IDFQueries, TokenSets
    from semiret.search.retrievers import Retriever

    class OwnIndex(InvertedIndex):
        FORMAT = "example.own-index"

        @classmethod
        def build(cls, path, kind, batches, vocab_size, analyzer, store_texts=True, overwrite=False, extra_meta=None):
            fields = {"kind": kind, "analyzer": analyzer, "vocab_size": vocab_size, "growable_vocab": False,
                      "n_terms": 0, "bm25": None, "quantization": None}
            return cls._build(path, fields, batches, store_texts, overwrite, extra_meta)

    class OwnSets(TokenSets):
        index_class = OwnIndex

    class OwnRetriever(Retriever):
        name, documents, queries, index_kinds = "own-bot", OwnSets, IDFQueries, ("binary",)

    assert OwnRetriever.build(corpus(30), tmp_path / "own").index.n_docs == 30
    with pytest.raises(SemiretError, match="does not apply to a own-bot index"):
        OwnRetriever.build(corpus(30), tmp_path / "own2", buffer_mb=64)


def test_a_build_in_parts_needs_the_disk_of_the_index_and_one_part(tmp_path, monkeypatch):
    from semiret.indexes.segments import SegmentedIndex

    folders = []
    append = SegmentedIndex._append_segment

    def counted(self, *args, **kwargs):
        folders.append(sum(1 for p in self.path.iterdir() if p.name.startswith("seg-")))
        return append(self, *args, **kwargs)

    monkeypatch.setattr(SegmentedIndex, "_append_segment", counted)
    index = BM25Retriever.build(corpus(), tmp_path / "idx", buffer_mb=TINY_BUFFER, batch_size=20).index
    parts = len(index.segments)
    assert parts > 3 and max(folders) <= parts  # each rewritten part's old folder went before the next rewrite


def test_a_later_part_refused_leaves_the_old_index_and_no_files(tmp_path):
    target = tmp_path / "idx"
    old = BM25Retriever.build(corpus(30, "old"), target)
    before = old.search(QUERIES, k=5)
    docs = corpus()
    docs[200] = Document("d3", "an id a part written before holds")
    with pytest.raises(SemiretError, match="duplicate document id 'd3'"):
        BM25Retriever.build(docs, target, overwrite=True, buffer_mb=TINY_BUFFER, batch_size=20)

    def failing():
        yield from corpus()[:150]
        raise OSError("the disk went away")

    with pytest.raises(OSError, match="went away"):
        BM25Retriever.build(failing(), target, overwrite=True, buffer_mb=TINY_BUFFER, batch_size=20)
    again = open_retriever(target)
    assert again.search(QUERIES, k=5).ids == before.ids
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("bad", [-1, float("nan"), "big", True])
def test_a_bad_buffer_is_refused_before_a_document_is_read(tmp_path, bad):
    def unread():
        raise AssertionError("a document was read")
        yield

    with pytest.raises(SemiretError, match="buffer .* must be a non-negative number of MB"):
        BM25Retriever.build(unread(), tmp_path / "idx", buffer_mb=bad)
    assert not (tmp_path / "idx").exists()


def test_a_hybrid_index_takes_no_buffer(tmp_path):
    with pytest.raises(SemiretError, match="does not apply to a hybrid index"):
        HybridRetriever.build(corpus(10), tmp_path / "h", neural="idf", buffer_mb=64)
    assert HybridRetriever.build(corpus(10), tmp_path / "h", neural="idf").index.n_docs == 10


def test_the_command_line_builds_in_parts(tmp_path):
    from typer.testing import CliRunner

    from semiret.cli import app

    docs = corpus(9000)  # three batches of the command's 4,096 documents
    path = write_jsonl(tmp_path / "corpus.jsonl", [{"_id": d.id, "text": d.text} for d in docs])
    runner = CliRunner()
    result = runner.invoke(app, ["index", "--data", str(path), "--out", str(tmp_path / "idx"),
                                 "--buffer-mb", str(TINY_BUFFER)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout[result.stdout.index("{"):])["segments"] == 3
    whole = BM25Retriever.build([Document(d.id, d.text) for d in docs], tmp_path / "whole")
    same_results(whole, open_retriever(tmp_path / "idx"))
    bad = runner.invoke(app, ["index", "--data", str(path), "--out", str(tmp_path / "bad"), "--buffer-mb", "-5"])
    assert bad.exit_code != 0 and "must be a non-negative number of MB" in bad.output


# ---------------------------------------------------------------------------- adds in parts
def parts_retriever(tmp_path, name: str = "idx", **options):
    """A BM25 index of 120 documents whose adds are read 20 documents at a time."""
    retriever = BM25Retriever.build(corpus(120), tmp_path / name, **options)
    retriever.document_side.batch_size = 20
    return retriever


def test_an_add_in_parts_is_one_commit_that_searches_as_an_add_held_whole(tmp_path):
    whole, parts = parts_retriever(tmp_path, "whole"), parts_retriever(tmp_path, "parts")
    extra = corpus(200, "e")
    assert whole.add(extra, buffer_mb=0) == 200
    before = json.loads((tmp_path / "parts" / "meta.json").read_text())["next_segment"]
    assert parts.add(iter(extra), buffer_mb=TINY_BUFFER) == 200  # a generator: read as it is written
    assert len(parts.index.segments) > 3 and len(whole.index.segments) == 2
    same_results(whole, parts)
    same_results(whole, open_retriever(tmp_path / "parts"))
    assert parts.get_document("e150") == extra[150]
    assert json.loads((tmp_path / "parts" / "meta.json").read_text())["next_segment"] > before + 3
    # replacing across parts: the old versions go in the same commit
    changed = [Document(d.id, d.text + " mortality", metadata={"v": 2}) for d in extra[::5]]
    assert parts.add(changed, replace=True, buffer_mb=TINY_BUFFER) == 40
    assert parts.index.n_docs == 320 and parts.get_document("e5").metadata == {"v": 2}


def test_an_add_refused_in_a_later_part_leaves_the_index_as_it_was(tmp_path):
    retriever = parts_retriever(tmp_path)
    before = retriever.search(QUERIES, k=20)
    folders = sorted(p.name for p in (tmp_path / "idx").iterdir())
    extra = corpus(200, "e")
    repeated = extra + [Document("e3", "again")]
    with pytest.raises(SemiretError, match="duplicate document id 'e3' in the documents to add"):
        retriever.add(repeated, buffer_mb=TINY_BUFFER)
    with pytest.raises(SemiretError, match="'d7' is already in"):
        retriever.add(extra[:150] + [Document("d7", "an id the index holds")], buffer_mb=TINY_BUFFER)

    def failing():
        yield from extra[:150]
        raise OSError("the corpus file went away")

    with pytest.raises(OSError, match="went away"):
        retriever.add(failing(), buffer_mb=TINY_BUFFER)
    for searcher in (retriever, open_retriever(tmp_path / "idx")):
        assert searcher.index.n_docs == 120 and "e1" not in searcher.index
        assert searcher.search(QUERIES, k=20).ids == before.ids
    assert sorted(p.name for p in (tmp_path / "idx").iterdir()) == folders  # no part left behind
    assert retriever.add(extra, buffer_mb=TINY_BUFFER) == 200  # and the next add goes through


def test_passages_added_in_parts(tmp_path):
    from semiret.data.chunking import Chunking

    long_docs = [Document(f"p{i}", " ".join([d.text for d in corpus(8, f"x{i}-")]), metadata={"i": i})
                 for i in range(30)]
    retriever = BM25Retriever.build(long_docs[:5], tmp_path / "idx", chunking=Chunking(words=20, overlap=0))
    retriever.document_side.batch_size = 4
    added = retriever.add(long_docs[5:], buffer_mb=TINY_BUFFER)
    assert added > 25 and len(retriever.index.segments) > 3
    assert retriever.get_document("p17").text == long_docs[17].text  # joined from its passages
    again = retriever.add([Document("p17", "statin heart trial", metadata={"i": 99})] + long_docs[20:24], replace=True,
                          buffer_mb=TINY_BUFFER)
    assert again >= 5 and retriever.get_document("p17").text == "statin heart trial"
    assert retriever.search("statin heart trial", k=1, group_by="parent")[0].id.startswith("p17")


def test_the_command_line_adds_in_parts(tmp_path):
    from typer.testing import CliRunner

    from semiret.cli import app

    BM25Retriever.build(corpus(50), tmp_path / "idx")
    extra = corpus(9000, "e")
    path = write_jsonl(tmp_path / "more.jsonl", [{"_id": d.id, "text": d.text} for d in extra])
    result = CliRunner().invoke(app, ["add", str(path), "--index", str(tmp_path / "idx"), "--buffer-mb",
                                      str(TINY_BUFFER)])
    assert result.exit_code == 0, result.output
    assert "9050 live in 4 segments" in result.output  # three parts of the command's 4,096 documents


def test_replacing_in_parts_keeps_every_deletion_mark(tmp_path):
    """An add with replace in several parts marks old versions in one segment part after part: each part's marks
    go after the earlier parts', so a reopened index (another worker, a merge) sees them all. (Documents of one
    length: an average that moved would have the segment rewritten with its flags, hiding lost marks.)"""
    docs = [Document(f"d{i}", f"word{i} common text number {i}") for i in range(100)]
    retriever = BM25Retriever.build(docs, tmp_path / "idx", buffer_mb=0)
    retriever.document_side.batch_size = 20
    assert retriever.add(docs[:40], replace=True) == 40
    for searcher in (retriever, open_retriever(tmp_path / "idx")):
        assert searcher.index.n_docs == 100
        assert [(s.n_docs, s.n_deleted) for s in searcher.index.segments] == [(100, 40), (40, 0)]
        ids = searcher.search(["common text"], k=200).ids[0]
        assert len(ids) == len(set(ids))
    reopened = open_retriever(tmp_path / "idx")
    reopened.index.merge()
    assert reopened.index.n_docs == 100 and len(reopened.index.segments) == 1


def test_an_add_of_nothing_makes_no_commit(tmp_path):
    from semiret.indexes.storage import commit_stamp

    index = BM25Retriever.build(corpus(20), tmp_path / "idx").index
    stamp = commit_stamp(tmp_path / "idx")
    assert index.add_parts([]) == 0 and commit_stamp(tmp_path / "idx") == stamp


def test_an_add_failing_at_its_last_step_leaves_no_folder(tmp_path, monkeypatch):
    from semiret.indexes.segments import SegmentedIndex

    retriever = parts_retriever(tmp_path)
    folders = sorted(p.name for p in (tmp_path / "idx").iterdir())
    renormalise = SegmentedIndex._renormalise

    def interrupted(self, *args, **kwargs):
        renormalise(self, *args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(SegmentedIndex, "_renormalise", interrupted)
    with pytest.raises(KeyboardInterrupt):
        retriever.add(corpus(200, "e"), buffer_mb=TINY_BUFFER)
    assert sorted(p.name for p in (tmp_path / "idx").iterdir()) == folders
    assert open_retriever(tmp_path / "idx").index.n_docs == 120


def test_a_score_matrix_takes_a_buffer_asked_for(tmp_path):
    from semiret.indexes.score_matrix import ScoreMatrixIndex, ScoredPostings

    rng = np.random.default_rng(2)
    batches = [ScoredPostings([f"d{i}" for i in range(lo, lo + 10)], np.arange(11, dtype=np.int64),
                              np.full(10, 1, np.int32), np.ones(10, np.float32), np.ones(10, np.int32),
                              [Document(f"d{i}", "x") for i in range(lo, lo + 10)],
                              rng.standard_normal((10, 50)).astype(np.float16)) for lo in range(0, 100, 10)]
    whole = ScoreMatrixIndex.build(tmp_path / "whole", "bm25", batches, vocab_size=3, analyzer={}, score_vocab_size=50)
    parts = ScoreMatrixIndex.build(tmp_path / "parts", "bm25", batches, vocab_size=3, analyzer={}, score_vocab_size=50,
                                   buffer_mb=TINY_BUFFER)
    assert len(whole.segments) == 1 and len(parts.segments) > 3
    query = [SparseQuery(np.array([1, 7, 30]), np.ones(3, np.float32))]
    a, b = whole.score_all(query, k=20), parts.score_all(query, k=20)
    assert a.ids == b.ids
    np.testing.assert_allclose(np.array(a.scores), np.array(b.scores), rtol=1e-6)
