"""A folder of documents as a corpus (:mod:`semiret.data.folder`): each file one document, its path the id."""

from __future__ import annotations

import hashlib
import logging
import os
import sys

import pytest
from typer.testing import CliRunner

from semiret.cli import app
from semiret.data import Collection, iter_corpus
from semiret.data import folder as folder_module
from semiret.data.collection import count_documents
from semiret.errors import DataFormatError
from semiret.search.retrievers import open_retriever

from helpers import folder_files_parsed, write_jsonl

runner = CliRunner()


def _pdf(path, text: str, title: str | None = None, password: str | None = None,
         owner_password: str | None = None) -> None:
    """A one-page PDF holding ``text`` (matplotlib writes it; pypdf encrypts it: to open, or, with an
    ``owner_password`` alone, to change)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure = plt.figure()
    figure.text(0.1, 0.5, text)
    with matplotlib.rc_context({"pdf.fonttype": 42}):  # TrueType: text a reader can extract
        figure.savefig(path, format="pdf", metadata={"Title": title} if title else {})
    plt.close(figure)
    if password or owner_password:
        import pypdf

        writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(path))
        writer.encrypt(password or "", owner_password)
        with open(path, "wb") as out:
            writer.write(out)


@pytest.fixture
def docs(tmp_path):
    """A folder of every kind of document, beside files that are none."""
    root = tmp_path / "docs"
    (root / "guides").mkdir(parents=True)
    (root / "guides" / "install.md").write_text(
        "---\ntitle: Installing the tool\ndate: 2026-01-05\ntags: [setup, linux]\nid: 77\n---\n"
        "Run pip install semiret.\n")
    (root / "policy.md").write_text("# Vacation policy\n\nEmployees get 25 days of paid leave.\n")
    (root / "setext.markdown").write_text("Parking rules\n=============\nPark in lot B.\n")
    (root / "cafeteria_notes-2024.txt").write_text("Plain notes about the cafeteria menu.\n")
    (root / "page.html").write_text(
        "<html><head><title>Badges &amp; access</title><style>p {color: red}</style></head><body><h1>Badges</h1>"
        "<p>Wear your badge.<script>var hidden = 1;</script></p><ul><li>Always</li><li>Visible</li></ul>"
        "</body></html>")
    (root / "security.rst").write_text("========\nSecurity\n========\n\nLock the doors.\n")
    (root / "image.png").write_bytes(b"\x89PNG")
    (root / ".git").mkdir()
    (root / ".git" / "notes.txt").write_text("hidden folder")
    (root / ".draft.md").write_text("hidden file")
    return root


def test_every_kind_of_file_reads_as_a_document_with_its_title(docs, caplog):
    with caplog.at_level(logging.WARNING):
        read = {d.id: d for d in iter_corpus(docs)}
    assert list(read) == ["cafeteria_notes-2024.txt", "guides/install.md", "page.html", "policy.md",
                          "security.rst", "setext.markdown"]  # by path, hidden files and other kinds left out
    assert count_documents(docs) == len(read)
    assert (read["guides/install.md"].title, read["guides/install.md"].text) == (
        "Installing the tool", "Run pip install semiret.\n")  # the front matter's title, out of the text
    assert (read["policy.md"].title, read["policy.md"].text) == ("Vacation policy",
                                                                 "Employees get 25 days of paid leave.\n")
    assert (read["setext.markdown"].title, read["setext.markdown"].text) == ("Parking rules", "Park in lot B.\n")
    assert (read["security.rst"].title, read["security.rst"].text) == ("Security", "Lock the doors.\n")
    assert read["cafeteria_notes-2024.txt"].title == "cafeteria notes 2024"  # no title of its own: its name's words
    page = read["page.html"]
    assert page.title == "Badges & access"
    assert page.text == "Badges\nWear your badge.\nAlways\nVisible"  # no style, no script, a line a block
    assert all(set(d.metadata) == {"file_name", "file_type", "file_size", "modified", "file_hash"}
               for d in read.values())
    assert read["policy.md"].metadata["file_hash"] == hashlib.blake2b(
        (docs / "policy.md").read_bytes(), digest_size=16, person=f"semiret{folder_module.READER_VERSION}".encode()
    ).hexdigest()
    assert "1 file of other kinds left out (.png 1)" in caplog.text
    # every file's front matter is read for the fields left out (the first file here has none)
    assert "the fields 'date', 'tags' of its documents are left out" in caplog.text


def test_each_files_fields_are_its_metadata_and_its_front_matter_joins_them_when_asked(docs):
    stamp = 1_767_225_600  # 2026-01-01T00:00:00Z
    os.utime(docs / "policy.md", (stamp, stamp))
    assert "date" not in {d.id: d for d in iter_corpus(docs)}["guides/install.md"].metadata
    read = {d.id: d for d in iter_corpus(docs, ["*"])}
    assert read["policy.md"].metadata == {"file_name": "policy.md", "file_type": "md", "file_size": 56,
                                          "modified": "2026-01-01T00:00:00Z",
                                          "file_hash": "27250f514c8162cefadad56e2fb3366b"}  # READER_VERSION 1
    install = read["guides/install.md"].metadata
    assert install["date"] == "2026-01-05" and install["tags"] == ["setup", "linux"]  # YAML's date as ISO text
    assert "id" not in install and read["guides/install.md"].id == "guides/install.md"  # never the document's id
    assert set({d.id: d.metadata for d in iter_corpus(docs, ["tags"])}["guides/install.md"]) == {
        "tags", "file_name", "file_type", "file_size", "modified", "file_hash"}


def test_a_folder_index_filters_by_kind_and_date(docs, tmp_path):
    old = 1_600_000_000
    os.utime(docs / "policy.md", (old, old))
    built = runner.invoke(app, ["index", "--data", str(docs), "--out", str(tmp_path / "idx")])
    assert built.exit_code == 0, built.output
    searcher = open_retriever(tmp_path / "idx")
    assert [h.id for h in searcher.search("vacation leave", k=3)][:1] == ["policy.md"]
    assert [h.id for h in searcher.search("badge parking lot", k=5, filter={"file_type": "html"})] == ["page.html"]
    recent = searcher.search("vacation leave badge parking", k=10, filter={"modified": {"gte": "2021-01-01"}})
    assert "policy.md" not in {h.id for h in recent} and recent


def test_a_folder_of_passages_and_add_replace(docs, tmp_path):
    (docs / "long.txt").write_text(" ".join(f"word{i}" for i in range(120)))
    built = runner.invoke(app, ["index", "--data", str(docs), "--out", str(tmp_path / "idx"), "--chunk-words", "50"])
    assert built.exit_code == 0, built.output
    assert open_retriever(tmp_path / "idx").get_document("long.txt").text.split()[-1] == "word119"
    (docs / "policy.md").write_text("# Vacation policy\n\nEmployees get 30 days of sabbatical.\n")
    added = runner.invoke(app, ["add", str(docs), "--index", str(tmp_path / "idx"), "--replace"])
    assert added.exit_code == 0, added.output
    assert [h.id for h in open_retriever(tmp_path / "idx").search("sabbatical", k=1)] == ["policy.md"]


def test_pdf_files_read_with_their_title_and_bad_ones_are_skipped_by_name(docs, caplog):
    _pdf(docs / "drills.pdf", "Fire drills happen every March.", title="Fire drills")
    _pdf(docs / "untitled.pdf", "Evacuate by the north stairs.")
    _pdf(docs / "locked.pdf", "Secret plans.", password="pw")
    _pdf(docs / "owner-only.pdf", "Printing is restricted.", owner_password="owner")  # readable all the same
    (docs / "broken.pdf").write_bytes(b"%PDF-1.4\nnot really a PDF")
    (docs / "empty.txt").write_text("  \n")
    with caplog.at_level(logging.WARNING):
        read = {d.id: d for d in iter_corpus(docs)}
    assert (read["drills.pdf"].title, read["drills.pdf"].text.strip()) == ("Fire drills",
                                                                          "Fire drills happen every March.")
    assert read["untitled.pdf"].title == "untitled"
    assert read["owner-only.pdf"].text.strip() == "Printing is restricted."
    assert not {"locked.pdf", "broken.pdf", "empty.txt"} & set(read)
    assert "3 files skipped" in caplog.text
    assert "'broken.pdf' (an unreadable PDF" in caplog.text and "'locked.pdf' (an encrypted PDF)" in caplog.text
    assert "'empty.txt' (a file with no text)" in caplog.text


def test_pdf_files_without_pypdf_are_an_error_saying_how_to_read_them(docs, monkeypatch):
    _pdf(docs / "drills.pdf", "Fire drills happen every March.")
    monkeypatch.setitem(sys.modules, "pypdf", None)  # as if it were not installed: skipped, a sync would delete them
    with pytest.raises(DataFormatError, match="drills.pdf: reading PDF files needs pypdf \\(pip install 'semiret"):
        list(iter_corpus(docs))


def test_a_huge_file_is_read_only_so_far_and_its_cut_text_named(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(folder_module, "MAX_FILE_BYTES", 1000)
    monkeypatch.setattr("semiret.data.collection.MAX_DOC_CHARS", 100)
    (tmp_path / "log.txt").write_text("x" * 5000)
    (tmp_path / "page.html").write_text("<p>" + "<b>y</b>" * 50 + "</p>")  # 400 bytes of markup, 50 characters
    with caplog.at_level(logging.WARNING):
        read = {d.id: d for d in iter_corpus(tmp_path)}
    assert len(read["log.txt"].text) == 100 and read["page.html"].text == "y" * 50  # markup is not text
    assert "1 document longer than 100 characters cut there" in caplog.text and "e.g. 'log.txt'" in caplog.text
    assert "1 file parsed only as far as their first 1,000 bytes: log.txt" in caplog.text


def test_an_index_built_inside_its_folder_is_not_read_as_documents(tmp_path):
    (tmp_path / "a.txt").write_text("walruses sleep")
    index = tmp_path / "index"
    assert runner.invoke(app, ["index", "--data", str(tmp_path), "--out", str(index)]).exit_code == 0
    assert [d.id for d in iter_corpus(tmp_path)] == ["a.txt"]  # not index/vocab.txt
    synced = runner.invoke(app, ["add", str(tmp_path), "--index", str(index), "--sync"])
    assert "0 added, 0 replaced, 1 unchanged, 0 deleted" in synced.output


def test_another_tools_meta_json_leaves_its_folder_in(tmp_path):
    """Only a semiret index's ``meta.json`` (its ``format``) keeps a folder out: a report's left every document
    beside it out, silently, and a sync deleted them."""
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "notes.md").write_text("Important notes.\n")
    (tmp_path / "project" / "meta.json").write_text('{"kind": "report", "version": "1.0"}')
    (tmp_path / "a.txt").write_text("Top.\n")
    assert [d.id for d in iter_corpus(tmp_path)] == ["a.txt", "project/notes.md"]


def test_what_is_not_a_file_and_names_that_are_not_utf8_are_left_out_by_name(tmp_path, caplog):
    """A named pipe was opened and waited on forever (a sync holding the write lock); a file name that is not
    UTF-8 stopped the build when its segment was written."""
    (tmp_path / "a.txt").write_text("Kept.\n")
    os.mkfifo(tmp_path / "pipe.txt")
    (tmp_path / os.fsdecode(b"caf\xe9.txt")).write_text("Latin-1 name.\n")
    with caplog.at_level(logging.WARNING):
        assert [d.id for d in iter_corpus(tmp_path)] == ["a.txt"]
    assert "(not a file) 1" in caplog.text and "lone surrogate" in caplog.text


def test_html_as_browsers_read_it(tmp_path):
    (tmp_path / "no-head-end.html").write_text("<html><head><title>Kept</title><body><p>Seen text.</p></body>")
    (tmp_path / "icons.html").write_text("<body><svg><title>search-icon</title></svg><h1>Real heading</h1>"
                                         "<p>Body.</p></body>")
    (tmp_path / "bare.html").write_text("<title>Only a title tag</title><p>The text.</p>")  # no <head>: HTML5 allows
    read = {d.id: d for d in iter_corpus(tmp_path)}
    assert (read["no-head-end.html"].title, read["no-head-end.html"].text) == ("Kept", "Seen text.")
    assert (read["icons.html"].title, read["icons.html"].text) == ("Real heading", "Real heading\nBody.")
    assert (read["bare.html"].title, read["bare.html"].text) == ("Only a title tag", "The text.")


def test_text_that_is_not_utf8_is_read_as_declared_or_as_windows_1252(tmp_path, caplog):
    (tmp_path / "latin.txt").write_bytes("café crème".encode("cp1252"))
    (tmp_path / "windows.txt").write_bytes("\ufeffwalruses\r\n".encode("utf-16-le"))  # PowerShell's > writes it so
    (tmp_path / "wide.txt").write_bytes("\ufeffpenguins".encode("utf-32-be"))
    (tmp_path / "page.html").write_bytes('<meta charset="iso-8859-7"><p>\u03b1\u03b2</p>'.encode("iso-8859-7"))
    with caplog.at_level(logging.WARNING):
        read = {d.id: d.text for d in iter_corpus(tmp_path)}
    assert read == {"latin.txt": "café crème", "page.html": "\u03b1\u03b2", "wide.txt": "penguins",
                    "windows.txt": "walruses\n"}  # the marks say what they are: no warning
    assert "2 files not UTF-8, read as the encoding named: latin.txt (cp1252); page.html (iso-8859-7)" in caplog.text


def test_markdown_titles_and_front_matters_of_every_kind(tmp_path):
    (tmp_path / "empty-front.md").write_text("---\n---\n# Heading after\n\nText.\n")
    (tmp_path / "toml.md").write_text('+++\ntitle = "From TOML"\nweight = 3\n+++\nText.\n')
    (tmp_path / "short-underline.md").write_text("A long title\n===\nText.\n")
    (tmp_path / "title-only.md").write_text("# Only a heading\n")
    (tmp_path / "labelled.rst").write_text(".. _intro:\n\nIntroduction\n============\n\nText.\n")
    (tmp_path / "odd.md").write_text("---\ntitle: [a, b]\nscore: .nan\n---\nText.\n")
    (tmp_path / "dotted.md").write_text("---\ntitle: Dotted close\nyear: 2020\n...\nText.\n")  # YAML's end mark
    (tmp_path / "toml-dots.md").write_text('+++\ntitle = "Not closed"\n...\nText.\n')  # "..." ends YAML only
    read = {d.id: d for d in iter_corpus(tmp_path, ["*"])}
    assert {i: d.title for i, d in read.items()} == {
        "empty-front.md": "Heading after", "labelled.rst": "Introduction", "odd.md": "a b",
        "short-underline.md": "A long title", "title-only.md": "Only a heading", "toml.md": "From TOML",
        "dotted.md": "Dotted close", "toml-dots.md": "toml dots"}
    assert read["dotted.md"].text == "Text.\n" and read["dotted.md"].metadata["year"] == 2020
    assert read["toml-dots.md"].text.startswith("+++\ntitle")
    assert read["toml.md"].metadata["weight"] == 3 and read["toml.md"].text == "Text.\n"
    assert read["odd.md"].metadata["score"] == "nan"  # stored as JSON, which has no NaN
    assert read["title-only.md"].text == ""  # a title alone is a document, as a JSONL record of one is


def test_links_are_followed_once_and_a_file_that_cannot_be_read_is_skipped(tmp_path, caplog):
    docs, elsewhere = tmp_path / "docs", tmp_path / "elsewhere"
    docs.mkdir()
    elsewhere.mkdir()
    (elsewhere / "linked.md").write_text("Reached through a link.\n")
    (docs / "shared").symlink_to(elsewhere, target_is_directory=True)
    (elsewhere / "loop").symlink_to(docs, target_is_directory=True)  # back up the tree: no endless walk
    (docs / "gone.md").symlink_to(tmp_path / "nowhere.md")  # dangling: it cannot be opened
    (docs / "kept.txt").write_text("Kept.\n")
    with caplog.at_level(logging.WARNING):
        assert [d.id for d in iter_corpus(docs)] == ["kept.txt", "shared/linked.md"]
    assert "'gone.md' (cannot be read: No such file or directory)" in caplog.text


def test_a_folder_that_cannot_be_listed_is_an_error_not_documents_missed(tmp_path, monkeypatch):
    (tmp_path / "a.txt").write_text("one")
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked" / "b.txt").write_text("two")
    scandir = os.scandir

    def refusing(path="."):
        if str(path).endswith("locked"):
            raise PermissionError(13, "Permission denied", str(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", refusing)
    with pytest.raises(DataFormatError, match="locked: cannot list this folder \\(Permission denied\\)"):
        list(iter_corpus(tmp_path))


def test_a_single_document_file_given_as_a_corpus_says_to_give_its_folder(tmp_path):
    (tmp_path / "notes.md").write_text("# Notes\n")
    with pytest.raises(DataFormatError, match="a .md file is a document of a folder of documents: give the folder"):
        list(iter_corpus(tmp_path / "notes.md"))
    (tmp_path / "notes.txt").write_text("Plain notes, one document.\n")  # .txt reads as TSV: id<TAB>text
    with pytest.raises(DataFormatError, match="got 1 column \\(plain text, one document\\? Give the folder holding"):
        list(iter_corpus(tmp_path / "notes.txt"))


def test_file_names_with_spaces_are_no_news_in_a_folder(tmp_path, caplog):
    (tmp_path / "My Notes.txt").write_text("Spaces in a file's name are common.\n")
    with caplog.at_level(logging.WARNING):
        assert [d.id for d in iter_corpus(tmp_path)] == ["My Notes.txt"]
    assert "hold a space" not in caplog.text


def test_a_beir_folder_reads_its_corpus_file_not_its_other_files(tmp_path):
    write_jsonl(tmp_path / "corpus.jsonl", [{"_id": "d1", "text": "from the corpus"}])
    (tmp_path / "README.md").write_text("# About this collection\n")
    assert [d.id for d in iter_corpus(tmp_path)] == ["d1"]


def test_a_folder_named_like_a_file_is_still_a_folder(tmp_path):
    (tmp_path / "notes.txt").mkdir()
    (tmp_path / "notes.txt" / "a.txt").write_text("one note")
    assert [d.id for d in iter_corpus(tmp_path / "notes.txt")] == ["a.txt"]


def test_a_folder_with_no_documents_is_a_clear_error(tmp_path):
    (tmp_path / "image.png").write_bytes(b"\x89PNG")
    with pytest.raises(DataFormatError, match="no corpus file .* and no documents .*\\.md.* files"):
        list(iter_corpus(tmp_path))
    built = runner.invoke(app, ["index", "--data", str(tmp_path), "--out", str(tmp_path / "idx")])
    assert built.exit_code != 0 and not (tmp_path / "idx").exists()


def test_a_front_matter_that_is_not_yaml_stays_text(tmp_path, caplog):
    (tmp_path / "a.md").write_text("---\ntitle: [unclosed\n---\nBody.\n")
    with caplog.at_level(logging.WARNING):
        [document] = iter_corpus(tmp_path)
    assert document.text.startswith("---\ntitle: [unclosed")
    assert "1 file with a front matter that does not parse, read as text: a.md (while parsing" in caplog.text
    (tmp_path / "a.md").write_text("---\n- a list\n- of items\n---\nBody.\n")  # parses, but names no fields
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        [document] = iter_corpus(tmp_path)
    assert document.text.startswith("---\n- a list") and "a.md (not a mapping of fields)" in caplog.text
    (tmp_path / "a.md").write_text("---\na: &x [*x]\n---\nBody.\n")  # an anchor inside itself: no end to it
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        [document] = iter_corpus(tmp_path, ["*"])
    assert document.text.startswith("---\na: &x") and "a.md (a value that holds itself" in caplog.text


def test_a_file_whose_front_matter_no_index_stores_is_skipped_by_name_and_the_others_read(tmp_path, caplog):
    """Half a character in a title, nesting past what metadata holds: that file skipped, as one that cannot be
    read (it stopped the whole folder, named as its position in it)."""
    (tmp_path / "good.md").write_text("# Good\nText.\n")
    (tmp_path / "surrogate.md").write_text('---\ntitle: "\\ud800x"\n---\nBody.\n')
    (tmp_path / "deep.md").write_text("---\na: " + "[" * 40 + "]" * 40 + "\n---\nBody.\n")
    with caplog.at_level(logging.WARNING):
        assert [d.id for d in iter_corpus(tmp_path, ["*"])] == ["good.md"]
    assert "'surrogate.md' skipped (its front matter: field 'title' holds a lone surrogate" in caplog.text
    assert "'deep.md' skipped (its front matter: field 'a' of the metadata holds objects or lists nested" in caplog.text


def test_a_folder_evaluates_with_queries_and_judgements_of_its_own(docs, tmp_path):
    write_jsonl(tmp_path / "queries.jsonl", [{"_id": "q1", "text": "vacation leave"}])
    (tmp_path / "qrels.tsv").write_text("q1\tpolicy.md\t1\n")
    with pytest.raises(DataFormatError, match="a folder of documents, not a BEIR folder: give its queries"):
        Collection(docs)
    collection = Collection(docs, queries_file=tmp_path / "queries.jsonl", qrels_file=tmp_path / "qrels.tsv")
    assert collection.corpus_path == docs and "policy.md" in {d.id for d in collection.corpus()}
    result = runner.invoke(app, ["eval", "--data", str(docs), "--queries", str(tmp_path / "queries.jsonl"),
                                 "--qrels", str(tmp_path / "qrels.tsv"), "--index", str(tmp_path / "idx"), "--json"])
    assert result.exit_code == 0, result.output
    assert '"ndcg@10": 1.0' in result.output.replace("\n", " ") or '"nDCG@10": 1.0' in result.output


def test_a_shard_of_a_folder_reads_its_own_files_and_the_shards_merge_into_the_whole(docs, tmp_path, monkeypatch):
    from semiret.data.collection import read_shard

    parsed = folder_files_parsed(monkeypatch)
    everything = [d.id for d in iter_corpus(docs)]
    parsed.clear()
    first, size, record = read_shard(docs, "0/2")
    assert [d.id for d in first] == everything[:3] and size == 3 and sorted(parsed) == sorted(everything[:3])
    assert record == {"number": 0, "count": 2, "corpus_documents": len(everything)}
    for number in (0, 1):
        built = runner.invoke(app, ["index", "--data", str(docs), "--out", str(tmp_path / f"s{number}"), "--shard",
                                    f"{number}/2"])
        assert built.exit_code == 0, built.output
    merged = runner.invoke(app, ["merge-shards", str(tmp_path / "all"), str(tmp_path / "s0"), str(tmp_path / "s1")])
    assert merged.exit_code == 0, merged.output
    assert sorted(open_retriever(tmp_path / "all").index.live_ids()) == sorted(everything)
