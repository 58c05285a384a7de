"""Sharded indexing: ``semiret index --shard i/n`` on each machine, ``semiret merge-shards`` after; the merged
index answers as one machine's build of the whole corpus (the same ids, scores and order), for a word
vocabulary of its own (BM25: ids mapped by the words), a tokenizer vocabulary (SPLADE) and vectors (dense)."""

from __future__ import annotations

import json

import pytest
from helpers import TINY_DOCS
from typer.testing import CliRunner

from semiret.cli import app
from semiret.data.collection import corpus_shard
from semiret.errors import SemiretError
from semiret.indexes.segments import merge_shards
from semiret.search import open_retriever

QUERIES = ["cats and dogs", "statins cancer risk", "morning garden birds", "mailman letters", "mice"]


def test_shards_are_contiguous_slices_that_cover_the_corpus():
    for total in (None, len(TINY_DOCS)):  # held to be counted, or read as it goes (iter: a file's reader)
        shards = [corpus_shard(iter(TINY_DOCS), f"{i}/4", total) for i in range(4)]
        assert [size for _, size in shards] == [1, 2, 1, 2]
        assert [d for s, _ in shards for d in s] == TINY_DOCS
    for bad in ("4/4", "-1/2", "1", "a/b", "0/0"):
        with pytest.raises(SemiretError, match="i/n"):
            corpus_shard(TINY_DOCS, bad)


@pytest.mark.parametrize("retriever", ["bm25", "splade", "dense", "inference-free", "nail-exh"])
def test_merged_shards_search_as_one_build(retriever, tmp_path, corpus_jsonl, tiny_bert, request):
    # inference-free with a lexical prior: its mean length taken from the corpus's first batch by every shard;
    # NAIL's batches carry score rows beside their postings (they were lost in the merge: a traceback)
    model = request.getfixturevalue("tiny_nail") if retriever == "nail-exh" else tiny_bert
    options = [] if retriever == "bm25" else ["--model", str(model)] + (
        ["--lexical-prior", "0.5"] if retriever == "inference-free" else [])
    runner = CliRunner()

    def invoke(*arguments):
        result = runner.invoke(app, list(arguments))
        assert result.exit_code == 0, result.output
        return result

    invoke("index", "--data", str(corpus_jsonl), "--out", str(tmp_path / "whole"), "-r", retriever, *options)
    for i in range(3):
        invoke("index", "--data", str(corpus_jsonl), "--out", str(tmp_path / f"shard-{i}"), "-r", retriever,
               "--shard", f"{i}/3", *options)
    merged = json.loads(invoke("merge-shards", str(tmp_path / "merged"),
                               *[str(tmp_path / f"shard-{i}") for i in range(3)]).output)
    assert (merged["documents"], merged["deleted"], merged["segments"]) == (len(TINY_DOCS), 0, 1)
    whole = open_retriever(tmp_path / "whole").search(QUERIES, k=len(TINY_DOCS))
    joined = open_retriever(tmp_path / "merged").search(QUERIES, k=len(TINY_DOCS))
    assert any(whole.ids)
    assert joined.ids == whole.ids
    for got, expected in zip(joined.scores, whole.scores):  # dense: a shard's encoder batches pad otherwise
        assert got == pytest.approx(expected, rel=1e-6 if retriever != "dense" else 1e-5)
    assert open_retriever(tmp_path / "merged").index.get_document("d5") == TINY_DOCS[4]


def test_shards_of_other_builds_or_repeated_documents_do_not_merge(tmp_path, corpus_jsonl):
    from semiret.search import BM25Retriever

    BM25Retriever.build(TINY_DOCS[:3], tmp_path / "a")
    BM25Retriever.build(TINY_DOCS[3:], tmp_path / "b", k1=0.5)
    BM25Retriever.build(TINY_DOCS[2:], tmp_path / "c")
    with pytest.raises(SemiretError, match="not built like") as refused:
        merge_shards(tmp_path / "ab", [tmp_path / "a", tmp_path / "b"])
    assert f"{tmp_path / 'b'} does not join {tmp_path / 'a'}" in str(refused.value) and ".tmp-" not in str(refused.value)
    assert "bm25.k1: 1.5 != 0.5" in str(refused.value)  # the setting that differs is named
    with pytest.raises(SemiretError, match="already in") as repeated:
        merge_shards(tmp_path / "ac", [tmp_path / "a", tmp_path / "c"])
    assert "replace" not in str(repeated.value) and "hold different documents" in str(repeated.value)
    assert not (tmp_path / "ab").exists() and not (tmp_path / "ac").exists()
    BM25Retriever.build(TINY_DOCS[3:], tmp_path / "d", metadata_fields=["year"])  # its corpus read otherwise
    with pytest.raises(SemiretError, match="not built like") as fields:
        merge_shards(tmp_path / "ad", [tmp_path / "a", tmp_path / "d"])
    assert "metadata_fields" in str(fields.value)


def test_shards_missing_out_of_order_or_of_other_slicings_are_refused(tmp_path, corpus_jsonl):
    """Each shard records its slice: two of three shards merged into an index short of a third, silently, and
    shards in another order gave another order (ties)."""
    runner = CliRunner()
    for name, shard in (("s0", "0/3"), ("s1", "1/3"), ("s2", "2/3"), ("h0", "0/2")):
        result = runner.invoke(app, ["index", "--data", str(corpus_jsonl), "--out", str(tmp_path / name),
                                     "--shard", shard])
        assert result.exit_code == 0, result.output
    assert open_retriever(tmp_path / "s1").index.meta["shard"] == {"number": 1, "count": 3,
                                                                  "corpus_documents": len(TINY_DOCS)}
    for names, message in ((["s0", "s2"], r"the shards given are 0/3, 2/3: merge every shard 0/3 to 2/3 once, in "
                                          r"order \(1/3 missing\)"),
                           (["s2", "s0", "s1"], "the shards given are 2/3, 0/3, 1/3"),
                           (["s0", "s1", "s1", "s2"], "the shards given are 0/3, 1/3, 1/3, 2/3"),
                           (["h0", "s2"], "is shard 2/3 of a corpus of 6 documents; .* is 0/2 of one of 6")):
        with pytest.raises(SemiretError, match=message):
            merge_shards(tmp_path / "m", [tmp_path / name for name in names])
        assert not (tmp_path / "m").exists()
    from semiret.search import BM25Retriever

    BM25Retriever.build(TINY_DOCS[:2], tmp_path / "plain")
    with pytest.raises(SemiretError, match="plain is no shard"):
        merge_shards(tmp_path / "m", [tmp_path / "s0", tmp_path / "plain"])
    merged = merge_shards(tmp_path / "m", [tmp_path / f"s{i}" for i in range(3)])
    assert merged.n_docs == len(TINY_DOCS) and "shard" not in merged.meta


def test_an_index_made_whole_is_refused_in_shards_and_an_empty_shard_merges(tmp_path, corpus_jsonl, tiny_bert):
    """A quantized index's scale is of all its weights: its shards never merged (their scales differ), after every
    shard was encoded. A shard of no document took no corpus statistics, and blocked the merge."""
    runner = CliRunner()
    refused = runner.invoke(app, ["index", "--data", str(corpus_jsonl), "--out", str(tmp_path / "q0"),
                                  "-r", "inference-free", "--model", str(tiny_bert), "--quantize-bits", "8",
                                  "--shard", "0/2"])
    assert refused.exit_code != 0 and "a quantized index (one scale for all its weights) is made from every " \
                                      "document at once" in refused.output
    two = tmp_path / "two.jsonl"
    two.write_text("".join(json.dumps(d.to_record()) + "\n" for d in TINY_DOCS[:2]))
    options = ["-r", "inference-free", "--model", str(tiny_bert), "--lexical-prior", "0.5"]
    for i in range(3):  # shard 0/3 of two documents holds none
        result = runner.invoke(app, ["index", "--data", str(two), "--out", str(tmp_path / f"e{i}"), "--shard",
                                     f"{i}/3", *options])
        assert result.exit_code == 0, result.output
    assert open_retriever(tmp_path / "e0").index.n_docs == 0
    merged = merge_shards(tmp_path / "e", [tmp_path / f"e{i}" for i in range(3)])
    assert runner.invoke(app, ["index", "--data", str(two), "--out", str(tmp_path / "whole"), *options]).exit_code == 0
    assert merged.n_docs == 2 and open_retriever(tmp_path / "e").search(QUERIES).ids == \
        open_retriever(tmp_path / "whole").search(QUERIES).ids


def test_a_reader_of_an_index_replaced_by_merged_shards_opens_the_new_one(tmp_path):
    from semiret.data import Document
    from semiret.search import BM25Retriever

    first = [Document(f"a{i}", f"quokka {i} garden") for i in range(30)]
    second = [Document(f"b{i}", f"wombat {i} burrow") for i in range(20)]
    BM25Retriever.build(first, tmp_path / "s0")
    BM25Retriever.build(second, tmp_path / "s1")
    merge_shards(tmp_path / "merged", [tmp_path / "s0", tmp_path / "s1"])
    reader = open_retriever(tmp_path / "merged")  # a server's long-lived handle
    assert reader.index.n_docs == 50
    BM25Retriever.build(first[:10], tmp_path / "t0")
    BM25Retriever.build([Document("c0", "platypus river")], tmp_path / "t1")
    merge_shards(tmp_path / "merged", [tmp_path / "t0", tmp_path / "t1"], overwrite=True)  # same segment names
    assert reader.index.refresh()
    assert reader.index.n_docs == 11 and reader.search("wombat", k=5) == [] \
        and reader.search("platypus", k=1)[0].id == "c0"


def test_shards_of_the_first_format_version_merge(tmp_path):
    from semiret.data import Document
    from semiret.search import BM25Retriever

    shards = []
    for number in range(3):
        BM25Retriever.build([Document(f"s{number}-{i}", f"quokka {number} {i}") for i in range(5)],
                            tmp_path / f"s{number}")
        meta_path = tmp_path / f"s{number}" / "meta.json"
        meta_path.write_text(json.dumps({**json.loads(meta_path.read_text()), "version": 1}))
        shards.append(tmp_path / f"s{number}")
    merged = merge_shards(tmp_path / "merged", shards)  # the first add marks the copy with this version
    assert merged.n_docs == 15 and merged.meta["version"] == merged.VERSION


def test_a_hybrid_is_refused_as_a_shard_before_anything_is_encoded(tmp_path, corpus_jsonl):
    """A hybrid's shards were built, encoding everything, and then no merge-shards merged them (several indexes in
    one); it is now refused up front, naming the way that works."""
    runner = CliRunner()
    result = runner.invoke(app, ["index", "--data", str(corpus_jsonl), "-r", "hybrid", "--neural", "idf", "--out",
                                 str(tmp_path / "h0"), "--shard", "0/2"])
    assert result.exit_code == 2 and "hybrid-index" in result.output and "merge-shards does not merge" in result.output
    assert not (tmp_path / "h0").exists()
