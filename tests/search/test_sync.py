"""``Retriever.sync`` and ``semiret add --sync``: an index kept in step with its corpus, unchanged documents not
encoded again."""

from __future__ import annotations

import logging

import pytest
from typer.testing import CliRunner

from semiret.cli import app
from semiret.data import Document, iter_corpus
from semiret.data.chunking import Chunking
from semiret.errors import SemiretError
from semiret.search import BM25Retriever, HybridRetriever, open_retriever
from semiret.types import SyncCounts

from helpers import TINY_DOCS, folder_files_parsed

runner = CliRunner()


def _encoded(searcher, monkeypatch) -> list[str]:
    """The ids of the documents ``searcher`` encodes from now on."""
    seen: list[str] = []
    encode = searcher.document_side.encode

    def counting(documents):
        seen.extend(d.id for d in documents)
        return encode(documents)

    monkeypatch.setattr(searcher.document_side, "encode", counting)
    return seen


def _changed(documents: list[Document]) -> list[Document]:
    """TINY_DOCS with d1's text, d2's title and d3's metadata changed, d4 gone and a d9 new."""
    changed = {d.id: d for d in documents if d.id != "d4"}
    changed["d1"] = Document("d1", "an entirely new text about walruses", changed["d1"].title)
    changed["d2"] = Document("d2", changed["d2"].text, "a new title")
    changed["d3"] = Document("d3", changed["d3"].text, changed["d3"].title, {"year": 2030})
    return [*changed.values(), Document("d9", "walruses sleep on the ice")]


@pytest.mark.parametrize("kind", ["bm25", "hybrid"])
def test_sync_encodes_only_what_changed_and_deletes_what_is_gone(tmp_path, monkeypatch, kind):
    if kind == "bm25":
        searcher = BM25Retriever.build(TINY_DOCS, tmp_path / "idx")
    else:  # an index of two parts, written whole rather than by segments
        searcher = HybridRetriever.build(TINY_DOCS, tmp_path / "idx", neural="idf")
    encoded = _encoded(searcher, monkeypatch)
    assert searcher.sync(list(TINY_DOCS)) == SyncCounts(added=0, replaced=0, unchanged=len(TINY_DOCS), deleted=0)
    assert encoded == []
    counts = searcher.sync(_changed(TINY_DOCS))
    assert counts == SyncCounts(added=1, replaced=3, unchanged=len(TINY_DOCS) - 4, deleted=1)
    assert sorted(encoded) == ["d1", "d2", "d3", "d9"]
    reopened = open_retriever(tmp_path / "idx")
    assert reopened.get_document("d4") is None and reopened.get_document("d2").title == "a new title"
    assert reopened.get_document("d3").metadata == {"year": 2030}
    assert reopened.search("walruses", k=2)[0].id in {"d1", "d9"} and reopened.index.n_docs == len(TINY_DOCS)
    assert reopened.sync(_changed(TINY_DOCS)).unchanged == len(TINY_DOCS)  # in step: nothing to do


def test_sync_of_an_index_of_passages_compares_the_passages(tmp_path, monkeypatch):
    long = Document("long", " ".join(f"w{i}" for i in range(10)), "L")
    short = Document("short", "one window only", "S")
    searcher = BM25Retriever.build([long, short, Document("gone", "soon deleted")], tmp_path / "idx",
                                   chunking=Chunking(words=4, overlap=1))
    encoded = _encoded(searcher, monkeypatch)
    grown = Document("long", long.text + " w10 w11 w12", "L")
    assert searcher.sync([grown, short]) == SyncCounts(added=0, replaced=1, unchanged=1, deleted=1)
    assert encoded == ["long#0", "long#1", "long#2", "long#3"]  # the changed document's passages, all of them
    assert searcher.get_document("long").text.split()[-1] == "w12"
    assert searcher.get_document("gone") is None and searcher.index.n_docs == 5  # 4 passages + short
    assert searcher.sync([grown, short]).unchanged == 2


def test_sync_refuses_a_repeated_id_even_when_one_copy_is_unchanged(tmp_path):
    searcher = BM25Retriever.build(TINY_DOCS, tmp_path / "idx")
    with pytest.raises(SemiretError, match="duplicate document id 'd1' in the documents to sync"):
        searcher.sync([*TINY_DOCS, Document("d1", "another text")])
    assert searcher.get_document("d1").text == TINY_DOCS[0].text and searcher.index.n_docs == len(TINY_DOCS)


def test_sync_refuses_what_it_cannot_compare_or_would_empty_the_index(tmp_path):
    bare = BM25Retriever.build(TINY_DOCS, tmp_path / "bare", store_texts=False)
    with pytest.raises(SemiretError, match="keeps no stored documents .* sync compares"):
        bare.sync(TINY_DOCS)
    searcher = BM25Retriever.build(TINY_DOCS, tmp_path / "idx")
    with pytest.raises(SemiretError, match=f"sync would delete {len(TINY_DOCS)} documents .* and keep 0: is this"):
        searcher.sync([])
    assert open_retriever(tmp_path / "idx").index.n_docs == len(TINY_DOCS)
    part = [TINY_DOCS[0], Document("new", "a new one")]  # a part of the corpus given for all of it
    with pytest.raises(SemiretError, match=f"would delete {len(TINY_DOCS) - 1} documents .* and keep 2: .* "
                                           "Nothing was written; force=True \\(--force\\)"):
        searcher.sync(part)  # a list: its ids known before any is read
    assert searcher.index.n_docs == len(TINY_DOCS) and "new" not in searcher.index
    with pytest.raises(SemiretError, match="Nothing was written"):
        searcher.sync(iter(part), ids=["d1", "new"])  # a stream whose ids were read first (a file read twice)
    assert "new" not in searcher.index
    with pytest.raises(SemiretError, match="Nothing was written"):
        searcher.sync(iter(part))  # a stream alone: found out once it is read, before the additions' commit
    assert searcher.index.n_docs == len(TINY_DOCS) and "new" not in searcher.index
    assert searcher.sync(part, force=True).deleted == len(TINY_DOCS) - 1
    records = [document.to_record() for document in part]  # dicts, as add and build take them
    assert searcher.sync(records) == SyncCounts(added=0, replaced=0, unchanged=2, deleted=0)


def test_a_folder_sync_refused_writes_nothing_and_an_emptied_folder_syncs_with_force(tmp_path):
    """Files emptied count as deleted only once read: the refusal came after the new file's commit. A folder whose
    files were all removed could not be synced at all, its documents left searchable."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in "abcd":
        (docs / f"{name}.txt").write_text(f"note {name}\n")
    index = str(tmp_path / "idx")
    assert runner.invoke(app, ["index", "--data", str(docs), "--out", index]).exit_code == 0
    for name in "abc":
        (docs / f"{name}.txt").write_text("")
    (docs / "e.txt").write_text("a new note\n")
    refused = runner.invoke(app, ["add", str(docs), "--index", index, "--sync"])
    assert refused.exit_code != 0 and "would delete 3 documents" in refused.output
    assert "Nothing was written" in refused.output
    searcher = open_retriever(index)
    assert sorted(searcher.index.live_ids()) == ["a.txt", "b.txt", "c.txt", "d.txt"]
    for path in docs.iterdir():
        path.unlink()
    (docs / "readme").write_text("not a document kind\n")
    assert searcher.sync_folder(docs, force=True).deleted == 4
    assert open_retriever(index).index.n_docs == 0
    (docs / "f.txt").write_text("back again\n")
    synced = runner.invoke(app, ["add", str(docs), "--index", index, "--sync"])
    assert synced.exit_code == 0 and "1 added" in synced.output, synced.output


def test_add_sync_keeps_a_folder_and_its_index_in_step(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Alpha\n\nThe first note.\n")
    (docs / "b.txt").write_text("The second note.\n")
    index = str(tmp_path / "idx")
    assert runner.invoke(app, ["index", "--data", str(docs), "--out", index]).exit_code == 0
    (docs / "b.txt").unlink()
    (docs / "a.md").write_text("# Alpha\n\nThe first note, edited.\n")
    (docs / "c.txt").write_text("A third note.\n")
    result = runner.invoke(app, ["add", str(docs), "--index", index, "--sync"])
    assert result.exit_code == 0, result.output
    assert "1 added, 1 replaced, 0 unchanged, 1 deleted; 2 live" in result.output
    assert sorted(open_retriever(index).index.live_ids()) == ["a.md", "c.txt"]
    (docs / "sub").mkdir()
    (docs / "sub" / "d.txt").write_text("A note in a subfolder.\n")
    (docs / "e.txt").write_text("Another note.\n")
    wrong = runner.invoke(app, ["add", str(docs / "sub"), "--index", index, "--sync"])  # the subfolder for its folder
    assert wrong.exit_code != 0 and "Nothing was written" in wrong.output
    assert sorted(open_retriever(index).index.live_ids()) == ["a.md", "c.txt"]  # d.txt not added beside them
    corpus = tmp_path / "part.jsonl"
    corpus.write_text('{"_id": "a.md", "text": "The first note, edited."}\n{"_id": "z", "text": "new"}\n'
                      '{"_id": "y", "text": "newer"}\n')
    assert runner.invoke(app, ["add", str(corpus), "--index", index, "--sync"]).exit_code == 0  # keeps 3, deletes 1
    corpus.write_text('{"_id": "q", "text": "only this"}\n')
    wrong = runner.invoke(app, ["add", str(corpus), "--index", index, "--sync"])  # a file's ids read first
    assert wrong.exit_code != 0 and "Nothing was written" in wrong.output
    assert sorted(open_retriever(index).index.live_ids()) == ["a.md", "y", "z"]


def test_add_sync_watch_keeps_syncing_until_interrupted(tmp_path, monkeypatch):
    """``--watch``: each pass after a change says what it did; one over a corpus file half written fails, says so once
    and changes nothing; the next pass syncs; Ctrl-C stops it."""
    import semiret.cli

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "a", "text": "first"}\n')
    index = str(tmp_path / "idx")
    assert runner.invoke(app, ["index", "--data", str(corpus), "--out", index]).exit_code == 0
    for refused in (["--watch", "1"], ["--sync", "--watch", "0"]):
        answer = runner.invoke(app, ["add", str(corpus), "--index", index, *refused])
        assert answer.exit_code != 0 and "--watch SECONDS (more than 0)" in answer.output
    edits = [lambda: None,  # nothing changed: no line
             lambda: corpus.write_text('{"_id": "a", "text": "first"}\n{"_id": "b", "text": "second"}\n'),
             lambda: corpus.write_text('{"_id": "a", "text": "first"}\n{"_id": "c", "te'),  # half written
             lambda: None,  # still half written: not said again
             lambda: corpus.write_text('{"_id": "a", "text": "first"}\n{"_id": "c", "text": "third"}\n')]
    live = []  # before each edit: what the passes so far left

    def sleep(seconds):
        assert seconds == 0.5
        live.append(sorted(open_retriever(index).index.live_ids()))
        if len(live) > len(edits):
            raise KeyboardInterrupt
        edits[len(live) - 1]()

    printed = []
    monkeypatch.setattr(semiret.cli.console, "print", lambda text, *args, **kwargs: printed.append(str(text)))
    monkeypatch.setattr("time.sleep", sleep)
    result = runner.invoke(app, ["add", str(corpus), "--index", index, "--sync", "--watch", "0.5"])
    assert result.exit_code == 0, result.output
    assert printed[0] == "0 added, 0 replaced, 1 unchanged, 0 deleted; 1 live in 1 segment"
    assert printed[1] == f"watching {corpus} every 0.5 s (Ctrl-C stops)"
    assert printed[2].endswith(" 1 added, 0 replaced, 1 unchanged, 0 deleted; 2 live in 2 segments")
    assert " not synced: " in printed[3] and "corpus.jsonl" in printed[3]
    assert printed[4].endswith(" 1 added, 0 replaced, 1 unchanged, 1 deleted; 2 live in 3 segments")
    assert printed[5:] == ["stopped watching"]
    assert live == [["a"], ["a"], ["a", "b"], ["a", "b"], ["a", "b"], ["a", "c"]]  # the failed passes changed nothing


def test_a_watch_says_each_warning_once(tmp_path, monkeypatch, caplog):
    """A file every pass leaves out (of another kind) is said once, not at every pass; after the watch, warnings
    are shown again."""
    import semiret.cli

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("A note.\n")
    (docs / "blob.bin").write_bytes(b"\x00\x01")
    index = str(tmp_path / "idx")
    assert runner.invoke(app, ["index", "--data", str(docs), "--out", index]).exit_code == 0
    passes = []

    def sleep(seconds):
        passes.append(seconds)
        if len(passes) > 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(semiret.cli.console, "print", lambda *args, **kwargs: None)
    monkeypatch.setattr("time.sleep", sleep)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert runner.invoke(app, ["add", str(docs), "--index", index, "--sync", "--watch", "1"]).exit_code == 0
    left_out = [r for r in caplog.records if "blob.bin" in r.getMessage() or ".bin" in r.getMessage()]
    assert len(passes) == 4 and len(left_out) == 1  # four reads of the folder, one warning
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert runner.invoke(app, ["add", str(docs), "--index", index, "--sync"]).exit_code == 0
    assert any(".bin" in r.getMessage() for r in caplog.records)  # the filter went with the watch


def test_add_reads_a_corpus_with_the_metadata_fields_of_the_build(tmp_path):
    corpus = tmp_path / "corpus.csv"
    corpus.write_text("id,text,year,source\nd1,cats and dogs,2020,web\nd2,statins and cancer,2021,pubmed\n")
    index = str(tmp_path / "idx")
    assert runner.invoke(app, ["index", "--data", str(corpus), "--out", index, "--metadata-fields", "year"]).exit_code == 0
    assert open_retriever(index).metadata_fields == ["year"]
    neural, hybrid = str(tmp_path / "idf"), str(tmp_path / "hybrid")
    assert runner.invoke(app, ["index", "--data", str(corpus), "--out", neural, "-r", "idf", "--metadata-fields",
                               "year"]).exit_code == 0
    assert runner.invoke(app, ["hybrid-index", neural, hybrid]).exit_code == 0
    assert open_retriever(hybrid).metadata_fields == ["year"]  # copied with the documents
    assert '"metadata_fields": [\n    "year"' in runner.invoke(app, ["info", index]).output
    synced = runner.invoke(app, ["add", str(corpus), "--index", index, "--sync"])
    assert "0 added, 0 replaced, 2 unchanged" in synced.output  # read as at the build: no metadata lost
    corpus.write_text("id,text,year,source\nd3,walruses,2022,web\n")
    assert runner.invoke(app, ["add", str(corpus), "--index", index]).exit_code == 0
    assert open_retriever(index).get_document("d3").metadata == {"year": 2022}
    (tmp_path / "more.csv").write_text("id,text,year,source\nd4,penguins,2023,web\n")
    assert runner.invoke(app, ["add", str(tmp_path / "more.csv"), "--index", index, "--metadata-fields",
                               "source"]).exit_code == 0  # told otherwise
    assert open_retriever(index).get_document("d4").metadata == {"source": "web"}


def test_sync_tells_values_of_other_types_apart_as_filters_do(tmp_path):
    searcher = BM25Retriever.build([Document("d1", "cats", metadata={"flag": True, "n": 1})], tmp_path / "idx")
    counts = searcher.sync([Document("d1", "cats", metadata={"n": 1, "flag": True})])  # keys in another order
    assert counts.unchanged == 1
    assert searcher.sync([Document("d1", "cats", metadata={"flag": 1, "n": 1.0})]).replaced == 1
    assert searcher.count({"flag": 1}) == 1 and searcher.count({"flag": True}) == 0


@pytest.mark.parametrize("chunk_words", [None, 3])
def test_sync_of_a_folder_parses_only_the_files_whose_bytes_changed(tmp_path, monkeypatch, chunk_words):
    import os
    import shutil

    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in (("a.md", "# Alpha\n\nThe first note about walruses.\n"), ("b.txt", "The second note.\n"),
                       ("c.txt", "The third note.\n"), ("d.txt", "The fourth note.\n")):
        (docs / name).write_text(text)
    searcher = BM25Retriever.build(iter_corpus(docs), tmp_path / "idx",
                                   chunking=Chunking(chunk_words, 1) if chunk_words else None)
    parsed = folder_files_parsed(monkeypatch)
    assert searcher.sync_folder(docs) == SyncCounts(added=0, replaced=0, unchanged=4, deleted=0)
    assert parsed == []  # not one file parsed
    (docs / "b.txt").write_text("The second note, rewritten.\n")
    (tmp_path / "c-new.txt").write_text("The THIRD note.\n")  # same size: moved over c.txt, its time kept
    shutil.copystat(docs / "c.txt", tmp_path / "c-new.txt")
    os.replace(tmp_path / "c-new.txt", docs / "c.txt")
    os.utime(docs / "d.txt", (1_700_000_000, 1_700_000_000))  # touched: the same bytes
    (docs / "e.txt").write_text("A fifth note.\n")
    (docs / "a.md").unlink()
    assert searcher.sync_folder(docs) == SyncCounts(added=1, replaced=2, unchanged=1, deleted=1)
    assert sorted(parsed) == ["b.txt", "c.txt", "e.txt"]
    assert searcher.get_document("c.txt").text.split()[1] == "THIRD"
    assert searcher.get_document("d.txt").metadata["modified"] != "2023-11-14T22:13:20Z"  # kept as stored: unread
    parsed.clear()
    # other fields: every file parsed, and the touched file's new time then read
    assert searcher.sync_folder(docs, ["title"]) == SyncCounts(added=0, replaced=1, unchanged=3, deleted=0)
    assert len(parsed) == 4 and searcher.get_document("d.txt").metadata["modified"] == "2023-11-14T22:13:20Z"


def test_a_folder_is_parsed_again_after_its_readers_change_and_its_fields_are_not_reported_missing(
        tmp_path, monkeypatch, caplog):
    from semiret.data import folder as folder_module

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("---\ntags: [x]\n---\nAlpha.\n")
    (tmp_path / "docs" / "b.txt").write_text("Beta.\n")
    searcher = BM25Retriever.build(iter_corpus(tmp_path / "docs", ["tags"]), tmp_path / "idx",
                                   metadata_fields=["tags"])
    parsed = folder_files_parsed(monkeypatch)
    with caplog.at_level("WARNING"):
        assert searcher.sync_folder(tmp_path / "docs").unchanged == 2 and parsed == []
    assert "no document has the field" not in caplog.text  # the files not read may hold it (a.md does)
    monkeypatch.setattr(folder_module, "READER_VERSION", folder_module.READER_VERSION + 1)
    assert searcher.sync_folder(tmp_path / "docs").replaced == 2 and sorted(parsed) == ["a.md", "b.txt"]


def test_a_folder_synced_keeps_the_front_matter_fields_bm25f_reads(tmp_path):
    """``sync_folder`` read a folder with the recorded metadata fields alone: a front matter's field BM25F reads as
    text (``text_fields``, an index built in Python) was dropped from every file changed since, which no search of
    it then found. It reads them as the index's other adds do (:meth:`Retriever.corpus_fields`)."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("---\nkeywords: walrus\n---\nAlpha.\n")
    (docs / "b.txt").write_text("Beta.\n")
    searcher = BM25Retriever.build(iter_corpus(docs, ["keywords"]), tmp_path / "idx", text_fields="text,keywords")
    (docs / "a.md").write_text("---\nkeywords: walrus\n---\nAlpha, rewritten.\n")
    assert searcher.sync_folder(docs) == SyncCounts(added=0, replaced=1, unchanged=1, deleted=0)
    assert searcher.get_document("a.md").metadata["keywords"] == "walrus"
    assert [hit.id for hit in searcher.search("walrus")] == ["a.md"]
