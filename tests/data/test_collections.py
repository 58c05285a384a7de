"""Data formats: BEIR collections, plain JSONL/TSV/CSV corpora, qrels, TREC runs, and bad input."""

from __future__ import annotations

import gzip
import json
import logging
import re

import numpy as np
import pytest

from semiret.data import Collection, Document, iter_corpus, read_qrels, read_queries, read_trec_run, write_trec_run
from semiret.data import collection as collection_module
from semiret.data.collection import batched, count_documents
from semiret.errors import DataFormatError, SemiretError

from helpers import TINY_DOCS, TINY_QRELS, TINY_QUERIES, write_jsonl


# ---------------------------------------------------------------------------- well-formed input
def test_beir_collection_reads_corpus_queries_and_qrels(beir_dir):
    collection = Collection(beir_dir)
    assert collection.name == "tiny"
    assert list(collection.corpus()) == TINY_DOCS
    assert collection.splits() == ["test"]
    assert collection.qrels("test") == TINY_QRELS
    assert collection.queries() == TINY_QUERIES
    assert collection.queries("test") == TINY_QUERIES


def test_collection_queries_restricted_to_split_and_missing_texts_warn(beir_dir, caplog):
    (beir_dir / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\nq2\td3\t1\nq9\td1\t1\n")
    collection = Collection(beir_dir)
    assert collection.splits() == ["dev", "test"]
    with caplog.at_level(logging.WARNING):
        assert collection.queries("dev") == {"q2": TINY_QUERIES["q2"]}
    assert "q9" in caplog.text


@pytest.mark.parametrize("content", [
    "",  # an empty file
    "query-id\tcorpus-id\tscore\n",  # the header alone
    "query-id\tcorpus-id\tscore\nq9\td1\t1\nq8\td2\t1\n",  # judged queries, none with a text
])
def test_a_split_judging_no_query_with_a_text_names_its_qrels_file(beir_dir, content):
    qrels = beir_dir / "qrels" / "dev.tsv"
    qrels.write_text(content)
    with pytest.raises(SemiretError) as info:
        Collection(beir_dir).queries("dev")
    message = str(info.value)
    assert message.startswith(f"{qrels}: judges no query that {beir_dir / 'queries.jsonl'} has a text for")
    assert ("'q9'" in message) == bool(content.count("\n") > 1)  # an example of a query id without a text


def test_collection_unknown_split_and_missing_corpus(beir_dir, tmp_path):
    with pytest.raises(DataFormatError, match="no qrels for split 'train'.*have: test"):
        Collection(beir_dir).qrels("train")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataFormatError, match="not a BEIR collection"):
        Collection(tmp_path / "empty")


def test_a_beir_folder_of_gzipped_or_tsv_files_is_read(beir_dir, tmp_path):
    """``corpus`` and ``queries`` of a BEIR folder may be gzipped or TSV, as files given alone may be."""
    import shutil

    plain = Collection(beir_dir)
    packed = tmp_path / "packed"
    shutil.copytree(beir_dir, packed)
    for stem in ("corpus", "queries"):
        with open(packed / f"{stem}.jsonl", "rb") as source, gzip.open(packed / f"{stem}.jsonl.gz", "wb") as target:
            shutil.copyfileobj(source, target)
        (packed / f"{stem}.jsonl").unlink()
    tabbed = tmp_path / "tabbed"
    shutil.copytree(beir_dir, tabbed)
    (tabbed / "corpus.tsv").write_text("".join(f"{d.id}\t{d.text}\t{d.title}\n" for d in plain.corpus()))
    (tabbed / "corpus.jsonl").unlink()
    for folder in (packed, tabbed):
        collection = Collection(folder)
        assert list(collection.corpus()) == list(plain.corpus()) and list(iter_corpus(folder)) == list(plain.corpus())
        assert collection.queries("test") == plain.queries("test")
    assert Collection(packed).corpus_path.name == "corpus.jsonl.gz"


def test_document_full_text_and_record():
    assert Document("x", "body", "Title").full_text == "Title body"
    assert Document("x", "body").full_text == "body"
    assert Document("x", "body", "T").to_record() == {"_id": "x", "title": "T", "text": "body"}


def test_iter_corpus_accepts_a_directory_and_a_file(beir_dir):
    assert list(iter_corpus(beir_dir)) == list(iter_corpus(beir_dir / "corpus.jsonl"))


def test_pyserini_jsonl_field_names(tmp_path):
    path = write_jsonl(tmp_path / "docs.jsonl", [{"id": "p1", "contents": "first passage"},
                                                  {"id": 7, "contents": "numeric id"}])
    assert list(iter_corpus(path)) == [Document("p1", "first passage"), Document("7", "numeric id")]


def test_null_text_is_an_empty_document(tmp_path):
    path = write_jsonl(tmp_path / "docs.jsonl", [{"_id": "a", "text": None, "title": None}])
    assert list(iter_corpus(path)) == [Document("a", "", "")]


def test_a_passage_s_own_id_is_read_before_its_document_s(tmp_path):
    """MS MARCO v2 passages carry ``pid`` and their document's ``docid``: the passage is the document here (the
    docid was read, and a document's second passage was a repeated id)."""
    records = [{"pid": f"p_{i}", "passage": f"passage {i}", "docid": f"D{i // 2}"} for i in range(4)]
    corpus = write_jsonl(tmp_path / "v2.jsonl", records)
    assert [d.id for d in iter_corpus(corpus)] == ["p_0", "p_1", "p_2", "p_3"]
    tsv = tmp_path / "v2.tsv"
    tsv.write_text("docid\tpid\tpassage\nD0\tp_0\tfirst\nD0\tp_1\tsecond\n")
    assert [(d.id, d.text) for d in iter_corpus(tsv)] == [("p_0", "first"), ("p_1", "second")]
    kept = write_jsonl(tmp_path / "kept.jsonl", [{"_id": "d1", "pid": "x9", "text": "one"}])
    assert [d.metadata for d in iter_corpus(kept, ["pid"])] == [{"pid": "x9"}]  # not the id: a field to keep
    queries = write_jsonl(tmp_path / "queries.jsonl", [{"qid": "q1", "pid": "p7", "query": "statins"}])
    assert read_queries(queries) == {"q1": "statins"}  # a query's judged passage is not its id
    (tmp_path / "queries.tsv").write_text("qid\tpid\tquery\nq1\tp7\tstatins\n")
    assert read_queries(tmp_path / "queries.tsv") == {"q1": "statins"}


def test_a_line_of_unicode_spaces_is_blank_to_the_count_as_to_the_reader(tmp_path):
    """A no-break space alone on a line: no document to the reader, none to the count (the progress total, a
    shard's share and the corpus size an index records)."""
    corpus = tmp_path / "spaces.tsv"
    corpus.write_bytes("a\thello\n\u00a0\n\u3000 \nb\tworld\n".encode())
    assert len(list(iter_corpus(corpus))) == count_documents(corpus) == 2


def test_tsv_corpus_with_optional_title(tmp_path):
    path = tmp_path / "docs.tsv"
    path.write_text('a\tfirst text\n\nb\tsecond "quoted" text\tA title\n', encoding="utf-8")
    assert list(iter_corpus(path)) == [Document("a", "first text"), Document("b", 'second "quoted" text', "A title")]


def test_a_tsv_corpus_header_is_not_a_document(tmp_path):

    path = tmp_path / "docs.tsv"
    path.write_text("id\ttext\ttitle\n1\thello world\tgreeting\n2\tfoo bar\t\n")
    assert [(d.id, d.text, d.title) for d in iter_corpus(path)] == [("1", "hello world", "greeting"), ("2", "foo bar", "")]
    assert count_documents(path) == 2
    for header in ("docno\ttext", "pid\tpassage", "corpus-id\ttext"):  # TREC's, MS MARCO's, BEIR's qrels' names
        path.write_text(f"{header}\n1\thello world\n2\tbye\n")  # (the header was indexed as a document)
        assert [(d.id, d.text) for d in iter_corpus(path)] == [("1", "hello world"), ("2", "bye")], header
    path.write_text("id\tbody_text\tyear\n1\thello\t2020\n")  # names an id column, but no text: not taken for a document
    with pytest.raises(DataFormatError, match=r"docs.tsv:1: the first row names an id column but no text column "
                                              r"\(text, contents, .*\) nor a title"):
        list(iter_corpus(path))


def test_a_tsv_header_names_the_columns_in_any_order(tmp_path):
    """Columns are read by the names a header gives them: a title before the text is not swapped with it, and a
    column semiret does not read (a url, a year) is left out rather than taken for the title."""

    path = tmp_path / "docs.tsv"
    path.write_text("id\ttitle\ttext\na\tStatins Title\tthe body\n", encoding="utf-8")
    assert list(iter_corpus(path)) == [Document("a", "the body", "Statins Title")]
    path.write_text("\ndocid\tcontents\turl\tyear\nb\tgiraffe body\thttp://x\t2001\nc\tshort\n", encoding="utf-8")
    assert list(iter_corpus(path)) == [Document("b", "giraffe body"), Document("c", "short")]  # blank first line too
    assert count_documents(path) == 2
    path.write_text("id\ttext\na\tone\ttwo\tthree\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r":2: 4 columns, but the header on line 1 names 2"):
        list(iter_corpus(path))


def test_a_tsv_row_with_more_or_fewer_columns_than_its_layout_is_refused(tmp_path):
    path = tmp_path / "docs.tsv"
    path.write_text("a\tstatins reduce\tcancer risk title\tEXTRA\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r":1: expected 'id<TAB>text\[<TAB>title\]', got 4 columns"):
        list(iter_corpus(path))
    path.write_text("a\ttext\nlonely-id\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r":2: expected 'id<TAB>text\[<TAB>title\]', got 1 column$"):
        list(iter_corpus(path))
    queries = tmp_path / "queries.tsv"
    queries.write_text("1\tfirst query\ta narrative\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r":1: expected 'id<TAB>text', got 3 columns"):
        read_queries(queries)
    queries.write_text("qid\tquery\tnarrative\n1\tfirst query\ta narrative\n", encoding="utf-8")
    assert read_queries(queries) == {"1": "first query"}  # named: the narrative is a column left unread


def test_gzipped_files_read_as_their_contents(tmp_path):


    corpus = tmp_path / "corpus.jsonl.gz"
    corpus.write_bytes(gzip.compress(b'{"_id": "a", "text": "one"}\n{"_id": "b", "text": "two"}\n'))
    assert [d.id for d in iter_corpus(corpus)] == ["a", "b"] and count_documents(corpus) == 2
    tsv = tmp_path / "docs.tsv.gz"
    tsv.write_bytes(gzip.compress(b"id\ttext\na\tone\n"))
    assert list(iter_corpus(tsv)) == [Document("a", "one")] and count_documents(tsv) == 1
    queries = tmp_path / "queries.tsv.gz"
    queries.write_bytes(gzip.compress(b"1\tfirst query\n"))
    assert read_queries(queries) == {"1": "first query"}
    qrels = tmp_path / "qrels.txt.gz"
    qrels.write_bytes(gzip.compress(b"q1 0 d1 1\n"))
    assert read_qrels(qrels) == {"q1": {"d1": 1}}


def test_a_truncated_or_damaged_gzip_file_is_an_error_naming_it(tmp_path):
    """gzip's own errors named no file, and a truncated file's EOFError read as Ctrl-C at the command line (it
    printed "Aborted." alone)."""
    from typer.testing import CliRunner

    from semiret.cli import app

    rows = "".join(json.dumps({"_id": str(i), "text": f"document {i} " * 20}) + "\n" for i in range(3000))
    packed = gzip.compress(rows.encode())
    damaged = bytearray(packed)
    damaged[-8] ^= 0xFF  # its checksum
    for name, content in (("cut.jsonl.gz", packed[: len(packed) // 2]), ("damaged.jsonl.gz", bytes(damaged)),
                          ("cut.tsv.gz", gzip.compress("".join(f"q{i}\tquery {i}\n"
                                                           for i in range(3000)).encode())[:200])):
        path = tmp_path / name
        path.write_bytes(content)
        for read in (lambda: list(iter_corpus(path)), lambda: count_documents(path)):
            with pytest.raises(DataFormatError, match=f"{re.escape(str(path))}: truncated or damaged gzip data"):
                read()
    with pytest.raises(DataFormatError, match="cut.tsv.gz: truncated or damaged"):
        read_queries(tmp_path / "cut.tsv.gz")
    result = CliRunner().invoke(app, ["index", "--data", str(tmp_path / "cut.jsonl.gz"), "--out", str(tmp_path / "ix")])
    assert result.exit_code == 2 and "cut.jsonl.gz: truncated or damaged gzip data" in result.output
    assert not (tmp_path / "ix").exists()


def test_csv_corpora_and_queries_read_as_spreadsheets_write_them(tmp_path):
    corpus = tmp_path / "docs.csv"
    corpus.write_text('\ufeffurl,title,Text,id\r\n'
                      'http://a,"Statins, and the heart","He said ""yes"",\r\nthen left",a\r\n'
                      '\r\n'
                      'http://b,,plain text,b\r\n', encoding="utf-8")
    assert list(iter_corpus(corpus)) == [Document("a", 'He said "yes",\r\nthen left', "Statins, and the heart"),
                                         Document("b", "plain text")]
    assert count_documents(corpus) == 2  # rows, not lines: a quoted field spans two
    positional = tmp_path / "plain.csv.gz"
    positional.write_bytes(gzip.compress(b'1,"one, two"\n2,three,The title\n'))
    assert list(iter_corpus(positional)) == [Document("1", "one, two"), Document("2", "three", "The title")]
    assert count_documents(positional) == 2
    queries = tmp_path / "queries.csv"
    queries.write_text('query_id,question\nq1,"what, exactly?"\n', encoding="utf-8")
    assert read_queries(queries) == {"q1": "what, exactly?"}
    repeated = tmp_path / "repeated.csv"
    repeated.write_text('id,text\na,"one\nspanning"\nb,two\na,three\n', encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"repeated.csv:5: duplicate document id 'a' \(first seen on line 2\)"):
        list(iter_corpus(repeated))
    wide = tmp_path / "wide.csv"
    wide.write_text("a,one,title,extra\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"wide.csv:1: expected 'id,text\[,title\]', got 4 columns "
                                              r"\(a text holding a comma\? Quote it"):
        list(iter_corpus(wide))
    unclosed = tmp_path / "unclosed.csv"
    unclosed.write_text('id,text\na,"never closed\n', encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"unclosed.csv:2: not CSV as spreadsheets write it"):
        list(iter_corpus(unclosed))


def test_other_formats_are_named(tmp_path):
    text = tmp_path / "docs.txt"  # .txt is TSV, as for queries
    text.write_text("a\tone\n", encoding="utf-8")
    assert list(iter_corpus(text)) == [Document("a", "one")]
    unnamed = tmp_path / "docs"
    unnamed.write_text("a one\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"docs:1: invalid JSON: .* \(is this JSONL\? semiret reads"):
        list(iter_corpus(unnamed))
    named = tmp_path / "docs.jsonl"
    named.write_text("a one\n", encoding="utf-8")
    with pytest.raises(DataFormatError) as error:
        list(iter_corpus(named))
    assert "is this JSONL" not in str(error.value)  # its name says JSONL already


def test_tsv_queries(tmp_path):
    path = tmp_path / "queries.tsv"
    path.write_text("1\tfirst query\n2\tsecond query\n", encoding="utf-8")
    assert read_queries(path) == {"1": "first query", "2": "second query"}
    for header in ("qid\tquery", "query-id\ttext", "id\tquestion"):  # a first row naming the columns is no query
        path.write_text(f"{header}\n1\tfirst query\n", encoding="utf-8")
        assert read_queries(path) == {"1": "first query"}
    path.write_text("1\tquery\n", encoding="utf-8")  # a query that is one word long is still a query
    assert read_queries(path) == {"1": "query"}


def test_jsonl_queries_with_pyserini_names(tmp_path):
    path = write_jsonl(tmp_path / "topics.jsonl", [{"qid": "q1", "query": "what is bm25"}])
    assert read_queries(path) == {"q1": "what is bm25"}


def test_trec_qrels_four_columns(tmp_path):
    path = tmp_path / "qrels.txt"
    path.write_text("301 0 FBIS3-10082 1\n301 0 FBIS3-10169 0\n302 Q0 LA-1 2\n", encoding="utf-8")
    assert read_qrels(path) == {"301": {"FBIS3-10082": 1, "FBIS3-10169": 0}, "302": {"LA-1": 2}}


def test_beir_qrels_with_header_and_float_grades(tmp_path):
    path = tmp_path / "test.tsv"
    path.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1.0\nq1\td2\t2\n", encoding="utf-8")
    assert read_qrels(path) == {"q1": {"d1": 1, "d2": 2}}


def test_a_qrels_header_says_which_column_is_which(tmp_path):
    """Extra columns are left unread and the order follows the names (a 4-column BEIR file is no TREC file); a
    header naming no document column, or a row of another width, is an error."""
    path = tmp_path / "test.tsv"
    path.write_text("query-id\tcorpus-id\tscore\tannotator\nq1\td1\t1\t7\nq2\td2\t2\t3\n", encoding="utf-8")
    assert read_qrels(path) == {"q1": {"d1": 1}, "q2": {"d2": 2}}
    path.write_text("corpus-id\tquery-id\tscore\nd1\tq1\t1\n", encoding="utf-8")
    assert read_qrels(path) == {"q1": {"d1": 1}}
    path.write_text("qid iter docno rel\nq1 0 d1 1\nq1 0 d2 0\n", encoding="utf-8")  # TREC's own names
    assert read_qrels(path) == {"q1": {"d1": 1, "d2": 0}}
    path.write_text("query-id\tdoc\tscore\nq1\td1\t1\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=":1: the header 'query-id doc score' does not name one corpus-id"):
        read_qrels(path)
    path.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\t5\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=":2: 4 columns, but the header names 3"):
        read_qrels(path)


def test_trec_run_round_trip(tmp_path):
    run = {"q1": {"d1": 3.5, "d2": 7.25, "d3": -1.0}, "q2": {"d9": 0.125}}
    path = tmp_path / "sub" / "run.trec"
    write_trec_run(run, path, tag="mine")
    lines = path.read_text().splitlines()
    assert lines[0] == "q1 Q0 d2 1 7.25 mine"
    assert [line.split()[3] for line in lines] == ["1", "2", "3", "1"]
    assert read_trec_run(path) == run
    with pytest.raises(DataFormatError, match="sub: is a folder, not a run file"):
        read_trec_run(path.parent)


def test_byte_order_mark_is_tolerated(tmp_path):
    bom = "\ufeff".encode("utf-8")
    (tmp_path / "corpus.jsonl").write_bytes(bom + b'{"_id": "a", "text": "x"}\n')
    assert list(iter_corpus(tmp_path / "corpus.jsonl")) == [Document("a", "x")]
    (tmp_path / "corpus.tsv").write_bytes(bom + b"a\tx\n")
    assert list(iter_corpus(tmp_path / "corpus.tsv")) == [Document("a", "x")]
    (tmp_path / "test.tsv").write_bytes(bom + b"query-id\tcorpus-id\tscore\nq\ta\t1\n")
    assert read_qrels(tmp_path / "test.tsv") == {"q": {"a": 1}}
    (tmp_path / "run.trec").write_bytes(bom + b"q Q0 a 1 2.5 t\n")
    assert read_trec_run(tmp_path / "run.trec") == {"q": {"a": 2.5}}


def test_batched():
    assert list(batched(range(5), 2)) == [[0, 1], [2, 3], [4]]
    assert list(batched([], 3)) == []


# ---------------------------------------------------------------------------- bad input
def test_malformed_json_names_file_and_line(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"_id": "a", "text": "ok"}\n\n{"_id": "b", "text": "broken"\n', encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"corpus\.jsonl:3: invalid JSON") as info:
        list(iter_corpus(path))
    assert info.value.line == 3 and info.value.path == path


@pytest.mark.parametrize("line,message", [
    ('{"_id": "b", "text": \n', "invalid JSON: Expecting value at column 22"),  # truncated: where the line ends
    ('{"_id": "b", "text": "unterminated\n', "invalid JSON: Unterminated string starting at column 22"),
    ('{"_id": "b" "text": "x"}\n', "invalid JSON: Expecting ',' delimiter at column 13"),
])
def test_invalid_json_reads_naturally(tmp_path, line, message):
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"_id": "a", "text": "ok"}\n' + line, encoding="utf-8")
    with pytest.raises(DataFormatError) as info:
        list(iter_corpus(path))
    assert str(info.value) == f"{path}:2: {message}"


def test_json_line_that_is_not_an_object(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text('["a", "b"]\n', encoding="utf-8")
    with pytest.raises(DataFormatError, match=":1: expected a JSON object, got list"):
        list(iter_corpus(path))
    array = tmp_path / "corpus.json"  # a list written by json.dump, over several lines
    array.write_text('[{"_id": "a", "text": "x"},\n {"_id": "b", "text": "y"}]\n', encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"a JSON array: semiret reads JSON Lines.*jq -c '\.\[\]' corpus.json > corpus.jsonl"):
        list(iter_corpus(array))
    named_lines = tmp_path / "arr.jsonl"  # never a command that writes over the file it reads
    named_lines.write_text('\ufeff[\n{"_id": "a", "text": "x"}\n]\n', encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"jq -c '\.\[\]' arr.jsonl > arr-lines.jsonl"):
        list(iter_corpus(named_lines))


def test_missing_id_field(tmp_path):
    path = write_jsonl(tmp_path / "corpus.jsonl", [{"_id": "a", "text": "x"}, {"title": "t", "text": "no id"}])
    with pytest.raises(DataFormatError, match=r":2: missing id field"):
        list(iter_corpus(path))


def test_missing_text_field(tmp_path):
    path = write_jsonl(tmp_path / "corpus.jsonl", [{"_id": "a", "title": "only a title"}, {"_id": "b", "name": "x"}])
    with pytest.raises(DataFormatError, match=r":2: missing text field"):
        list(iter_corpus(path))
    path = write_jsonl(tmp_path / "titles.jsonl", [{"_id": "a", "title": "only a title"}])
    assert list(iter_corpus(path)) == [Document("a", "", "only a title")]  # as the HTTP API reads it


def test_a_null_or_empty_text_field_gives_way_to_the_next_name(tmp_path):
    path = write_jsonl(tmp_path / "docs.jsonl", [{"_id": "a", "text": None, "contents": "statins and cancer"},
                                                  {"_id": "b", "text": "", "body": "vitamin d"}])
    assert [(d.id, d.text) for d in iter_corpus(path)] == [("a", "statins and cancer"), ("b", "vitamin d")]


def test_non_string_fields(tmp_path):
    path = write_jsonl(tmp_path / "corpus.jsonl", [{"_id": "a", "text": ["list"]}])
    with pytest.raises(DataFormatError, match="field 'text' must be a string"):
        list(iter_corpus(path))
    path = write_jsonl(tmp_path / "corpus2.jsonl", [{"_id": "a", "text": "x", "title": 5}])
    with pytest.raises(DataFormatError, match="field 'title' must be a string, got int"):
        list(iter_corpus(path))
    path = write_jsonl(tmp_path / "corpus3.jsonl", [{"_id": "a", "text": "x"}, {"_id": "b", "text": 12345}])
    with pytest.raises(DataFormatError, match=":2: field 'text' must be a string, got int"):
        list(iter_corpus(path))
    path = write_jsonl(tmp_path / "corpus4.jsonl", [{"_id": None, "text": "x"}])
    with pytest.raises(DataFormatError, match="field '_id' must be a string or an integer, got NoneType"):
        list(iter_corpus(path))
    numbered = write_jsonl(tmp_path / "corpus5.jsonl", [{"_id": 7, "text": "x", "title": None}, {"_id": "b", "text": None}])
    assert [(d.id, d.text, d.title) for d in iter_corpus(numbered)] == [("7", "x", ""), ("b", "", "")]


def test_ids_with_spaces_are_read_with_one_warning(tmp_path, caplog):
    """They search and serve like any id; only TREC runs and qrels, split at whitespace, cannot name them."""
    path = write_jsonl(tmp_path / "corpus.jsonl", [{"_id": "doc one", "text": "x"}, {"_id": "doc two", "text": "y"},
                                                   {"_id": "three", "text": "z"}])
    with caplog.at_level(logging.WARNING):
        assert [d.id for d in iter_corpus(path)] == ["doc one", "doc two", "three"]
    assert caplog.text.count("document ids hold a space") == 1 and "2 document ids" in caplog.text


def test_empty_document_id(tmp_path):
    path = write_jsonl(tmp_path / "corpus.jsonl", [{"_id": "  ", "text": "x"}])
    with pytest.raises(DataFormatError, match=":1: empty document id"):
        list(iter_corpus(path))


def test_document_ids_with_control_characters(tmp_path):
    """A newline or a tab in an id would break TREC runs, TSV files and the URL that names the document."""
    path = write_jsonl(tmp_path / "corpus.jsonl", [{"_id": "a", "text": "x"}, {"_id": "b\tc", "text": "y"}])
    with pytest.raises(DataFormatError, match=r":2: document id 'b\\tc' holds the control character '\\t'"):
        list(iter_corpus(path))


@pytest.mark.parametrize("line, message", [
    ('{"_id": "b", "text": "half \\udce9 cut"}', r"field 'text' holds a lone surrogate \('\\udce9' at character 5\)"),
    ('{"_id": "b\\ud800", "text": "x"}', "field '_id' holds a lone surrogate"),
    ('{"_id": "b", "title": "\\udfff", "text": "x"}', "field 'title' holds a lone surrogate"),
    ('{"_id": "b", "text": "x", "metadata": {"k": ["\\ud83d"]}}', "field 'k' of the metadata holds a lone surrogate"),
])
def test_a_lone_surrogate_is_an_error_naming_the_line_before_anything_is_encoded(tmp_path, line, message):
    """JSON may escape half a character (an emoji cut in two); no file holds it as UTF-8: the build failed
    when writing its segment, after encoding, naming no file."""
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"_id": "a", "text": "fine \\ud83d\\ude00 emoji"}\n' + line + "\n")
    with pytest.raises(DataFormatError, match=":2: " + message):
        list(iter_corpus(path))


def test_duplicate_document_ids(tmp_path):
    path = write_jsonl(tmp_path / "corpus.jsonl", [{"_id": "a", "text": "x"}, {"_id": "b", "text": "y"},
                                                   {"_id": "a", "text": "z"}])
    with pytest.raises(DataFormatError, match=r":3: duplicate document id 'a' \(first seen on line 1\)"):
        list(iter_corpus(path))


@pytest.mark.parametrize("suffix", [".jsonl", ".tsv.gz"])
def test_repeats_are_found_across_and_within_the_reader_s_chunks(tmp_path, monkeypatch, suffix):

    monkeypatch.setattr(collection_module, "READ_CHUNK", 4)
    ids = [f"doc-{i}" for i in range(30)]
    path = tmp_path / f"corpus{suffix}"
    for repeated, at, first_line in (("doc-2", 25, 3), ("doc-21", 22, 22)):  # an earlier chunk; the same chunk
        rows = ids[:at] + [repeated] + ids[at:]
        if suffix == ".jsonl":
            write_jsonl(path, [{"_id": i, "text": f"text {i}"} for i in rows])
        else:  # a header row first: the lines counted as in the file
            path.write_bytes(gzip.compress(("id\ttext\n" + "".join(f"{i}\ttext {i}\n" for i in rows)).encode()))
        line = at + 1 + (suffix != ".jsonl")
        read = []
        with pytest.raises(DataFormatError, match=rf":{line}: duplicate document id '{repeated}' \(first seen on "
                                                  rf"line {first_line + (suffix != '.jsonl')}\)"):
            read.extend(d.id for d in iter_corpus(path))
        assert read == ids[:at]  # every document before the repeat was given, as a reader of one at a time would


def test_a_hash_shared_by_two_ids_is_no_repeat(tmp_path, monkeypatch):
    """Two ids may share a 64-bit hash: the reader reads the file again before it calls one a repeat."""
    from semiret.data.ids import IdHashSet

    add_many = IdHashSet.add_many
    monkeypatch.setattr(IdHashSet, "add_many", lambda self, ids: np.union1d(add_many(self, ids), [len(ids) - 1]))
    path = write_jsonl(tmp_path / "corpus.jsonl", [{"_id": f"d{i}", "text": "x"} for i in range(10)])
    assert [d.id for d in iter_corpus(path)] == [f"d{i}" for i in range(10)]


def test_documents_before_a_malformed_line_are_read_first(tmp_path, monkeypatch):
    monkeypatch.setattr(collection_module, "READ_CHUNK", 4)
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({"_id": f"d{i}", "text": "x"}) + "\n" for i in range(6)) + "{not json\n")
    read = []
    with pytest.raises(DataFormatError, match=":7:"):
        read.extend(d.id for d in iter_corpus(path))
    assert read == [f"d{i}" for i in range(6)]


def test_the_id_set_holds_hashes_not_strings():
    from semiret.data.ids import IdHashSet

    seen = IdHashSet()
    ids = [f"a-rather-long-document-identifier-{i}" for i in range(100_000)]
    for start in range(0, len(ids), 7_000):  # grown several times on the way
        assert len(seen.add_many(ids[start: start + 7_000])) == 0
    assert len(seen) == len(ids) and seen.nbytes <= 32 * len(ids)  # a set of the strings: ~100 bytes an id
    assert seen.add_many(["new", ids[5], "new", ids[99_999]]).tolist() == [1, 2, 3]


def test_duplicate_query_ids(tmp_path):
    path = write_jsonl(tmp_path / "queries.jsonl", [{"_id": "1", "text": "x"}, {"_id": "1", "text": "y"}])
    with pytest.raises(DataFormatError, match=":2: duplicate query id '1'"):
        read_queries(path)


def test_huge_document_truncated_with_one_warning(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(collection_module, "MAX_DOC_CHARS", 1000)
    path = write_jsonl(tmp_path / "corpus.jsonl", [{"_id": "big", "text": "word " * 1000},
                                                   {"_id": "big2", "text": "x" * 5000},
                                                   {"_id": "small", "text": "tiny"}])
    with caplog.at_level(logging.WARNING, logger="semiret.data.collection"):
        docs = list(iter_corpus(path))
    assert [len(d.text) for d in docs] == [1000, 1000, 4]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "2 documents longer than 1000 characters cut there" in warnings[0].message


def test_default_truncation_limit_applies(tmp_path):
    limit = collection_module.MAX_DOC_CHARS
    path = write_jsonl(tmp_path / "corpus.jsonl", [{"_id": "big", "text": "a" * (limit + 10)}])
    assert len(next(iter_corpus(path)).text) == limit


def test_invalid_utf8_in_jsonl_names_the_line(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(b'{"_id": "a", "text": "fine"}\n{"_id": "b", "text": "caf\xe9"}\n')
    with pytest.raises(DataFormatError, match=r"corpus\.jsonl:2: invalid UTF-8"):
        list(iter_corpus(path))


def test_invalid_utf8_in_tsv_names_the_line(tmp_path):
    path = tmp_path / "corpus.tsv"
    path.write_bytes(b"a\tfine\nb\tstill fine\nc\tcaf\xe9\n")
    with pytest.raises(DataFormatError, match=r"corpus\.tsv:3: invalid UTF-8") as info:
        list(iter_corpus(path))
    assert info.value.line == 3


def test_invalid_utf8_in_qrels_and_runs_names_the_line(tmp_path):
    qrels = tmp_path / "qrels.txt"
    qrels.write_bytes(b"q1 0 d1 1\nq1 0 d\xff 1\n")
    with pytest.raises(DataFormatError, match=r"qrels\.txt:2: invalid UTF-8"):
        read_qrels(qrels)
    run = tmp_path / "run.trec"
    run.write_bytes(b"q1 Q0 d1 1 1.0 t\nq1 Q0 d\xff 2 0.5 t\n")
    with pytest.raises(DataFormatError, match=r"run\.trec:2: invalid UTF-8"):
        read_trec_run(run)


def test_bad_qrels_lines(tmp_path):
    path = tmp_path / "qrels.txt"
    path.write_text("q1 0 d1 1\nq1 d2\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r":2: expected 3 \(BEIR\) or 4 \(TREC\) columns, got 2 \(columns are "
                                              r"separated by tabs or spaces\)"):
        read_qrels(path)
    path.write_text("query-id,corpus-id,score\nq1,d1,1\n", encoding="utf-8")  # a CSV file: told what separates
    with pytest.raises(DataFormatError, match=r"qrels\.txt:1: expected 3 \(BEIR\) or 4 \(TREC\) columns, got 1 "
                                              r"\(columns are separated by tabs or spaces; commas separate none: "
                                              r"convert a CSV file to tab-separated columns\)"):
        read_qrels(path)
    path.write_text("q1 0 d1 high\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r":1: relevance grade 'high' is not a number"):
        read_qrels(path)
    path.write_text("q1 0 d1 0.7\n", encoding="utf-8")  # not read as 0 (not relevant) without a word
    with pytest.raises(DataFormatError, match=r":1: relevance grade '0.7' is not a whole number"):
        read_qrels(path)
    path.write_text("q1 0 d1 1\nq1 0 d2 0\nq1 0 d1 1\nq1 0 d1 2\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r":4: query 'q1' and document 'd1' were judged 1 on line 3 and 2 here"):
        read_qrels(path)


@pytest.mark.parametrize("content, message", [
    ("q1 Q0 d1 1 1.0\n", ":1: expected 6 columns"),
    ("q1 Q0 d1 1 high tag\n", ":1: score 'high' is not a number"),
    ("q1 Q0 d1 1 2.0 x\nq1 Q0 d2 2 nan x\n", ":2: score 'nan' is not a number"),  # NaN has no order
    ("q1 Q0 d1 1 inf x\n", ":1: score 'inf' is not a finite number"),
    ("q1 Q0 d1 1 2.0 x\nq2 Q0 d1 1 2.0 x\nq1 Q0 d1 2 1.0 x\n", ":3: document 'd1' is ranked twice for query 'q1'"),
])
def test_bad_run_lines(tmp_path, content, message):
    path = tmp_path / "run.trec"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataFormatError, match=message):
        read_trec_run(path)


def test_a_run_interrupted_while_written_leaves_the_old_file(tmp_path, monkeypatch):
    import os

    from semiret.data import write_trec_run

    path = tmp_path / "run.trec"
    write_trec_run({"q1": {"d1": 1.0, "d2": 2.0}}, path)
    assert read_trec_run(path) == {"q1": {"d1": 1.0, "d2": 2.0}}

    def crash(fd):
        raise OSError("disk gone")

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(OSError, match="disk gone"):
        write_trec_run({"q1": {"d3": 1.0}}, path)
    assert read_trec_run(path) == {"q1": {"d1": 1.0, "d2": 2.0}}
    assert [p.name for p in tmp_path.iterdir()] == ["run.trec"]


def test_missing_files_are_data_errors(tmp_path):
    for reader in (iter_corpus, read_queries, read_qrels, read_trec_run):
        with pytest.raises(DataFormatError, match="file not found"):
            result = reader(tmp_path / "nope.jsonl")
            list(result) if not isinstance(result, dict) else None


def test_data_errors_are_semiret_errors_and_value_errors():
    error = DataFormatError("boom", "f.jsonl", 4)
    assert isinstance(error, SemiretError) and isinstance(error, ValueError)
    assert str(error) == "f.jsonl:4: boom"


def test_corpus_is_streamed(tmp_path):
    """A bad line late in the file only fails when reached: earlier documents are yielded first."""
    path = tmp_path / "corpus.jsonl"
    path.write_text(json.dumps({"_id": "a", "text": "x"}) + "\n{oops\n", encoding="utf-8")
    stream = iter_corpus(path)
    assert next(stream) == Document("a", "x")
    with pytest.raises(DataFormatError):
        next(stream)


def test_count_documents_counts_what_iter_corpus_reads(tmp_path):

    path = write_jsonl(tmp_path / "corpus.jsonl", [{"_id": str(i), "text": "x"} for i in range(5)])
    path.write_text(path.read_text() + "\n  \n")  # blank lines are not documents
    assert count_documents(path) == len(list(iter_corpus(path))) == 5
    assert count_documents(tmp_path) == 5  # a BEIR folder: its corpus.jsonl
    with pytest.raises(DataFormatError, match="file not found"):
        count_documents(tmp_path / "missing.jsonl")


def test_an_infinite_relevance_grade_names_its_line(tmp_path):
    path = tmp_path / "qrels.tsv"
    path.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\tinf\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"qrels.tsv:3: relevance grade 'inf' is not a number"):
        read_qrels(path)


def test_a_missing_file_argument_is_not_looked_up_as_a_dataset(tmp_path, monkeypatch):
    from semiret.data.paths import dataset

    shared = tmp_path / "shared"
    (shared / "beir" / "nested").mkdir(parents=True)
    monkeypatch.setenv("SEMIRET_DATA", str(shared))
    monkeypatch.chdir(tmp_path)
    for name in ("nothere.jsonl", "nothere.json", "nothere.jsonl.gz", "sub/nothere", str(tmp_path / "gone")):
        with pytest.raises(SemiretError, match=rf"^{re.escape(name)}: no such file$"):
            dataset(name)
    with pytest.raises(SemiretError, match=rf"^no file or folder 'nothere' here, and no dataset of that name under {re.escape(str(shared))}$"):  # a bare name: the hint
        dataset("nothere")
    assert dataset("beir/nested") == shared / "beir" / "nested"  # a nested dataset name still resolves
    (tmp_path / "here.jsonl").write_text("")
    assert dataset("here.jsonl").name == "here.jsonl"


def test_a_collection_opens_by_its_name_under_the_shared_data_as_the_cli_does(tmp_path, monkeypatch, beir_dir):
    import shutil

    shared = tmp_path / "shared"
    shutil.copytree(beir_dir, shared / "mine")
    monkeypatch.setenv("SEMIRET_DATA", str(shared))
    monkeypatch.chdir(tmp_path)
    assert Collection("mine").root == shared / "mine"
    assert Collection(beir_dir).root == beir_dir  # a path is a path
    with pytest.raises(SemiretError, match="^no file or folder 'yours' here, and no dataset of that name under"):
        Collection("yours")


def test_metadata_fields_keep_a_corpus_s_other_fields_as_metadata(tmp_path, caplog):
    from semiret.errors import SemiretError

    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text(json.dumps({"id": "a", "contents": "one", "url": "http://a", "year": 2001,
                                 "metadata": {"year": 1999, "lang": "en"}}) + "\n"
                     + json.dumps({"id": "b", "contents": "two", "tags": ["x", "y"]}) + "\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        assert list(iter_corpus(jsonl)) == [Document("a", "one", metadata={"year": 1999, "lang": "en"}),
                                            Document("b", "two")]
    assert "the fields 'url', 'year' of its documents are left out: metadata_fields (semiret index and add: " \
           "--metadata-fields url,year, or * for all)" in caplog.text
    caplog.clear()
    named = list(iter_corpus(jsonl, ["url", "year", "absent"]))
    assert [d.metadata for d in named] == [{"url": "http://a", "year": 1999, "lang": "en"}, None]  # its object wins
    assert [d.metadata for d in iter_corpus(jsonl, ["*"])] == [{"url": "http://a", "year": 1999, "lang": "en"},
                                                               {"tags": ["x", "y"]}]
    assert "left out" not in caplog.text
    for bad in ("url", [], ["url", ""], [3]):
        with pytest.raises(SemiretError, match="metadata fields"):
            list(iter_corpus(jsonl, bad))

    table = tmp_path / "docs.csv"
    table.write_text("ID,Year,title,Text,Zip,Note\n1,2020,T1,first,00123,\n2,x,T2,second,4,\"a, b\"\n",
                     encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        assert [d.metadata for d in iter_corpus(table)] == [None, None]
    assert "the fields 'Year', 'Zip', 'Note' of its documents are left out" in caplog.text
    assert [d.metadata for d in iter_corpus(table, ["year", "NOTE"])] == [{"Year": 2020}, {"Year": "x", "Note": "a, b"}]
    assert [(d.title, d.metadata) for d in iter_corpus(table, ["*"])] == [
        ("T1", {"Year": 2020, "Zip": "00123"}), ("T2", {"Year": "x", "Zip": 4, "Note": "a, b"})]
    headless = tmp_path / "plain.tsv"
    headless.write_text("1\tfirst\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"plain.tsv:1: metadata fields are columns a first row names"):
        list(iter_corpus(headless, ["*"]))


def test_spreadsheet_files_as_exported_by_their_tools(tmp_path, caplog):
    long_text = "word " * 40_000  # 200,000 characters: past the csv module's default field limit
    big = tmp_path / "big.csv"
    big.write_text(f'id,text\nd1,"{long_text}"\n', encoding="utf-8")
    assert [len(d.text) for d in iter_corpus(big)] == [len(long_text)] and count_documents(big) == 1
    pandas = tmp_path / "pandas.csv"  # to_csv() writes its index as a first, unnamed column
    pandas.write_text(",id,text,publication year,Year,year\n0,a,one,2001,1,2\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        assert [(d.id, d.text, d.metadata) for d in iter_corpus(pandas, ["publication year", "YEAR", "yeer"])] == [
            ("a", "one", {"publication year": 2001, "Year": 1})]  # a repeated name: its first column
    assert "no document has the field 'yeer' kept as metadata" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        list(iter_corpus(pandas))
    assert "the fields '', 'publication year', 'Year' of its documents are left out" in caplog.text
    semicolons = tmp_path / "european.csv"
    semicolons.write_text("id;text\na;one\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"got 1 column \(columns separated by semicolons\? Save the file"):
        list(iter_corpus(semicolons))
    folder = tmp_path / "beir"
    folder.mkdir()
    (folder / "corpus.csv").write_text("id,title,text\nd1,T,statins\n", encoding="utf-8")
    (folder / "queries.csv").write_text("id,text\nq1,statins?\n", encoding="utf-8")
    collection = Collection(folder)
    assert list(collection.corpus()) == [Document("d1", "statins", "T")] and collection.queries() == {"q1": "statins?"}


def test_metadata_fields_of_json_records_are_their_exact_names(tmp_path, caplog):
    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text(json.dumps({"_id": "a", "text": "one", "Title": "Kept apart", "docid": "x-1"}) + "\n",
                     encoding="utf-8")
    assert iter_corpus(jsonl, ["*"]).__next__().metadata == {"Title": "Kept apart"}  # docid: an id field's name
    with caplog.at_level(logging.WARNING):
        assert iter_corpus(jsonl, ["title", "text", "Title"]).__next__().metadata == {"Title": "Kept apart"}
        list(iter_corpus(jsonl, ["title", "text", "Title"]))
    assert "no document has the fields 'title', 'text' kept as metadata" in caplog.text


def test_the_id_and_text_fields_are_named_as_the_corpus_names_them(tmp_path):
    """A corpus whose text is under another key (``summary``) was refused with no way to name it: ``id_field`` and
    ``text_field`` (--id-field, --text-field) name the fields of JSONL records and the columns of a header; the names
    read by default are then other fields; each error names the field."""
    from semiret.data.collection import CorpusFields

    jsonl = write_jsonl(tmp_path / "tickets.jsonl", [
        {"ticket": "T-1", "summary": "login fails", "text": "a note", "priority": "high"},
        {"ticket": "T-2", "summary": "password reset"}])
    with pytest.raises(DataFormatError, match=r"tickets.jsonl:1: missing id field \(one of '_id', .*; id_field, "
                                              r"--id-field, names another\)"):
        list(iter_corpus(jsonl))
    assert list(iter_corpus(jsonl, ["*"], id_field="ticket", text_field="summary")) == [
        Document("T-1", "login fails", metadata={"text": "a note", "priority": "high"}),
        Document("T-2", "password reset")]
    missing = write_jsonl(tmp_path / "missing.jsonl", [{"ticket": "T-1", "summary": "x"},
                                                       {"ticket": "T-2", "body": "y"}])
    with pytest.raises(DataFormatError, match=r"missing.jsonl:2: missing text field 'summary' \(the text_field"):
        list(iter_corpus(missing, id_field="ticket", text_field="summary"))
    repeated = write_jsonl(tmp_path / "repeated.jsonl", [{"ticket": "a", "summary": "x"},
                                                         {"ticket": "a", "summary": "y"}])
    with pytest.raises(DataFormatError, match=r"repeated.jsonl:2: duplicate document id 'a' \(first seen on line 1\)"):
        list(iter_corpus(repeated, id_field="ticket", text_field="summary"))
    table = tmp_path / "tickets.csv"
    table.write_text("Ticket,Summary,Priority\nT-1,login fails,high\nT-2,password reset,low\n", encoding="utf-8")
    assert list(iter_corpus(table, ["priority"], id_field="ticket", text_field="summary")) == [
        Document("T-1", "login fails", metadata={"Priority": "high"}), Document("T-2", "password reset",
                                                                                  metadata={"Priority": "low"})]
    assert count_documents(table, id_field="ticket") == 2
    headless = tmp_path / "plain.tsv"
    headless.write_text("1\tfirst\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"plain.tsv:1: the id and text fields \(--id-field, --text-field\) are "
                                              r"columns a first row names"):
        list(iter_corpus(headless, text_field="summary"))
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("Alpha.\n")
    with pytest.raises(SemiretError, match="folder of documents, each file one"):
        list(iter_corpus(tmp_path / "docs", text_field="summary"))
    for bad in ({"id_field": "title"}, {"text_field": ""}, {"id_field": "key", "text_field": "key"}):
        with pytest.raises(SemiretError, match="id_field|text_field"):
            list(iter_corpus(jsonl, **bad))
    assert CorpusFields.of({"metadata_fields": ["priority"], "text_field": "summary"}).record() == {
        "metadata_fields": ["priority"], "text_field": "summary"}


def test_a_first_row_reading_as_column_names_is_indexed_and_warned_of_once_not_refused(tmp_path, caplog):
    """``doc,content`` above numbered tickets had its header indexed as a document ``{"_id": "doc", "text":
    "content"}``, unsaid; refusing it refused headerless corpora of word ids that indexed before (``intro<TAB>Welcome
    to our site`` above ``page2<TAB>...``), even added to an index built from them. A warning, once per file however
    often it is read, names the file and line, the id the row was indexed under and how to name the columns; none
    where the fields are an index's record (``semiret add``); a file of documents alone is read as before."""
    table = tmp_path / "tickets.csv"
    table.write_text("doc,content\nT-5,\"Login fails on Safari, again\"\nT-6,Password reset\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        assert [d.id for d in iter_corpus(table)] == ["doc", "T-5", "T-6"]
        assert [d.id for d in iter_corpus(table)] == ["doc", "T-5", "T-6"]  # read again: not said again
    said = [record.getMessage() for record in caplog.records if "reads as column names" in record.getMessage()]
    assert len(said) == 1, said
    assert said[0].startswith(f"{table}:1: the first row reads as column names (doc, content), but none is an id "
                              "column (one of _id, id, ")
    assert "the text's: one of text, contents, content" in said[0] and "indexed as a document of id 'doc'" in said[0]
    assert "name them so in a header row (id,text), or give --id-field and --text-field" in said[0]
    assert [d.id for d in iter_corpus(table, id_field="doc", text_field="content")] == ["T-5", "T-6"]
    slugs = tmp_path / "slug.tsv"
    slugs.write_text("intro\tWelcome to our site\npage2\tAbout the team and more words here\n", encoding="utf-8")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert [d.id for d in iter_corpus(slugs, ["year"], recorded_fields=True)] == ["intro", "page2"]
    assert "column names" not in caplog.text  # (an index's record: a corpus indexed before, added again)
    with caplog.at_level(logging.WARNING):
        assert [d.id for d in iter_corpus(slugs)] == ["intro", "page2"]
    assert "slug.tsv:1: the first row reads as column names (intro, Welcome to our site)" in caplog.text
    assert "a header row (id<TAB>text)" in caplog.text
    for rows in ("a,hello\nb,world\n", "d1,statins\nd2,heart\n", "alpha,first text\nbeta,second text\n"):
        table.write_text(rows, encoding="utf-8")  # no header: documents by position, as before
        assert len(list(iter_corpus(table))) == 2, rows


def test_a_first_row_naming_the_usual_columns_is_a_header_beside_the_named_ones(tmp_path):
    """With the id and text columns named (``--id-field DocNo --text-field Body``), only those made a first row a
    header: ``id<TAB>text`` above documents added later was stored as a document ``{"_id": "id", "text": "text"}``.
    The usual names count too, after the named ones, for the reader and the count alike; a name the other side
    takes is not read for both."""
    added = tmp_path / "b.tsv"
    added.write_text("id\ttext\nbeta\tsecond doc here\n", encoding="utf-8")
    assert list(iter_corpus(added, id_field="DocNo", text_field="Body")) == [Document("beta", "second doc here")]
    assert count_documents(added, "DocNo", "Body") == 1
    both = tmp_path / "both.tsv"
    both.write_text("id\tDocNo\ttext\tBody\nx\td1\tnot it\tthe body\n", encoding="utf-8")
    assert list(iter_corpus(both, ["*"], id_field="DocNo", text_field="Body")) == [Document("d1", "the body")]
    assert next(iter_corpus(both, ["*"], id_field="DocNo", text_field="Body")).metadata == {"id": "x", "text": "not it"}
    swapped = tmp_path / "swapped.csv"
    swapped.write_text("text,body\nT-1,login fails\n", encoding="utf-8")
    assert list(iter_corpus(swapped, id_field="text", text_field="body")) == [Document("T-1", "login fails")]


def test_a_record_lacking_the_named_field_is_read_from_beirs_name_and_only_that(tmp_path, caplog):
    """An index read with ``--id-field doc_no --text-field body`` refused what ``semiret export`` wrote of it and what
    the service's documents hold (``_id``, ``text``): a record lacking the named field is read from BEIR's name, which
    is then no field left out; another usual name is not read (a misspelt field is still an error), and the error
    names both."""
    exported = write_jsonl(tmp_path / "exported.jsonl", [
        {"_id": "d1", "title": "", "text": "cats purr", "metadata": {"year": 2020}},
        {"doc_no": "d2", "body": "dogs bark", "text": "a note"}])
    with caplog.at_level(logging.WARNING):
        assert list(iter_corpus(exported, id_field="doc_no", text_field="body")) == [
            Document("d1", "cats purr"), Document("d2", "dogs bark")]
    assert "left out" not in caplog.text
    kept = list(iter_corpus(exported, ["*"], id_field="doc_no", text_field="body"))
    assert [d.metadata for d in kept] == [{"year": 2020}, {"text": "a note"}]  # (d2's text field: not its text)
    for record, missing in (({"id": "d3", "body": "x"}, r"missing id field 'doc_no' \(the id_field the documents are "
                                                        r"read with\), nor '_id' \(BEIR's"),
                            ({"doc_no": "d3", "content": "x"}, r"missing text field 'body' .*, nor 'text'")):
        with pytest.raises(DataFormatError, match=r"bad.jsonl:1: " + missing):
            list(iter_corpus(write_jsonl(tmp_path / "bad.jsonl", [record]), id_field="doc_no", text_field="body"))


def test_an_id_or_text_field_the_other_side_reads_by_default_is_refused_and_names_are_stripped(tmp_path):
    """``id_field="text"`` alone read the id and the text from one field, ``text_field="_id"`` the id as the text:
    refused, saying to name the other side's field too; named both ways they read apart. Names are stripped, as
    metadata fields are."""
    from semiret.data.collection import CorpusFields, record_document

    for bad, said in (({"id_field": "text"}, r"id_field \(--id-field\) 'text' is one of the fields a document's text "
                                             r"is read from \(text, contents, .*\): name the text's field too"),
                      ({"text_field": "_id"}, r"text_field \(--text-field\) '_id' is one of the fields a document's "
                                              r"id is read from .*: name the id's field too \(id_field, --id-field\)"),
                      ({"text_field": " pid "}, "'pid' is one of the fields a document's id is read from"),
                      ({"id_field": " title "}, "not one of title")):
        with pytest.raises(SemiretError, match=said):
            CorpusFields(**bad)
    fields = CorpusFields(id_field=" text ", text_field="body ")
    assert (fields.id_field, fields.text_field) == ("text", "body")
    assert record_document({"text": "T-1", "body": "login fails"}, fields) == Document("T-1", "login fails")
    assert fields.record() == {"id_field": "text", "text_field": "body"}


def test_the_field_read_as_the_id_is_not_left_out(tmp_path):
    """``pid`` (or ``passage_id``) read as a record's id was named among the fields left out: only where another
    field is the id is it one."""
    from semiret.data.collection import CorpusFields

    assert CorpusFields().others({"pid": "p1", "text": "cats"}) == []
    assert CorpusFields().others({"_id": "d1", "pid": "p1", "text": "cats"}) == ["pid"]
    assert next(iter_corpus(write_jsonl(tmp_path / "p.jsonl", [{"pid": "p1", "text": "cats"}]), ["*"])).metadata is None


def test_a_repeated_id_is_said_so_in_a_file_read_with_an_indexs_recorded_fields(tmp_path):
    """``semiret add`` of a headerless file to an index built with metadata fields: a repeated id was reported as
    those fields refused in a file naming no columns (its first line looked up by reading the file again without
    the record)."""
    repeated = tmp_path / "dup.tsv"
    repeated.write_text("7\tdogs bark\n8\tbirds\n7\tdogs again\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"dup.tsv:3: duplicate document id '7' \(first seen on line 1\)"):
        list(iter_corpus(repeated, ["year"], recorded_fields=True))


def test_the_recorded_id_and_text_fields_do_not_apply_to_a_folder_of_files_given_ones_are_refused(tmp_path):
    """``recorded_fields`` names which of the fields are an index's record: a recorded id field is not read of a
    folder of files (each its own document), a given one is refused naming it alone."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("Alpha.\n")
    read = list(iter_corpus(tmp_path / "docs", ["x"], id_field="doc_no", text_field="body",
                            recorded_fields=["id_field", "text_field"]))
    assert [d.id for d in read] == ["a.md"]
    with pytest.raises(SemiretError, match=r"its path the id: id_field \(--id-field\) names a field of a JSONL"):
        list(iter_corpus(tmp_path / "docs", id_field="doc_no", text_field="body", recorded_fields=["text_field"]))
