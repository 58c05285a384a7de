"""The Python API as users of bm25s and sentence-transformers expect it: one query or a batch, hits as
``(doc_id, score)`` pairs with the stored text at hand, an index without a directory."""

from __future__ import annotations

import gc
import logging

import numpy as np
import pytest

from semiret.data import Document
from semiret.errors import SemiretError
from semiret.search import BM25Retriever, IDFRetriever, open_retriever
from semiret.types import Hit, SearchHits

from helpers import TINY_DOCS


def test_a_string_is_one_query_and_a_list_is_a_batch(tmp_path):
    bm25 = BM25Retriever.build(TINY_DOCS, tmp_path / "idx")
    one = bm25.search("cats dogs", k=3)
    batch = bm25.search(["cats dogs", "statins"], k=3)
    assert isinstance(batch, SearchHits) and len(batch) == 2
    assert isinstance(one, list) and all(isinstance(h, Hit) for h in one)
    assert [h.id for h in one] == batch.ids[0] and [h.score for h in one] == batch.scores[0]
    assert one[0].id in {"d1", "d2"}  # not nine per-character queries of the string


def test_hits_unpack_as_pairs_and_carry_the_stored_text(tmp_path):
    bm25 = BM25Retriever.build(TINY_DOCS, tmp_path / "idx")
    hits = bm25.search("mailman letters", k=2)
    doc_id, score = hits[0]
    assert doc_id == "d5" and score > 0 and dict(hits)[doc_id] == score
    assert "mailman delivers letters" in hits[0].text and hits[0].document.id == "d5"
    for query_hits in bm25.search(["mailman", "birds"], k=1):  # a batch iterates query by query
        assert len(query_hits) == 1 and query_hits[0].text
    batch = bm25.search(["mailman", "birds"], k=1)
    with pytest.raises(TypeError, match="indexed by query number"):
        batch[0:2]
    with pytest.raises(SemiretError, match="1 query ids for the hits of 2 queries"):
        batch.as_run(["q1"])
    unstored = BM25Retriever.build(TINY_DOCS, tmp_path / "bare", store_texts=False)
    assert unstored.search("mailman", k=1)[0].text is None


def test_hits_pickle_and_copy(tmp_path):
    """Hits go to another process (pickled) with their ids, scores and groups, not the index they were read from;
    copies keep reading it."""
    import copy
    import pickle

    documents = [Document(d.id, d.text, d.title, {"kind": "pets" if d.id in ("d1", "d2") else "other"})
                 for d in TINY_DOCS]
    bm25 = BM25Retriever.build(documents, tmp_path / "idx")
    one, batch = bm25.search("cats", k=3), bm25.search(["cats", "statins"], k=2, group_by="kind")
    assert pickle.loads(pickle.dumps(one)) == one and pickle.loads(pickle.dumps(one))[0].text is None
    sent = pickle.loads(pickle.dumps(batch))
    assert (sent.ids, sent.scores, sent.groups) == (batch.ids, batch.scores, batch.groups) and sent.lookup is None
    for copied in (copy.copy(batch), copy.deepcopy(batch)):
        assert copied.ids == batch.ids and copied[0][0].text == batch[0][0].text
    assert copy.deepcopy(batch).ids is not batch.ids and copy.deepcopy(batch).lookup is batch.lookup
    assert copy.deepcopy(one)[0].text == one[0].text


def test_an_index_without_a_path_lives_in_a_temporary_directory():
    retriever = IDFRetriever.build(TINY_DOCS)
    path = retriever.index.path
    assert path.is_dir() and retriever.search("garden birds", k=1)[0].id == "d4"
    retriever.add([TINY_DOCS[0].__class__("d7", "quokkas in the garden")])
    assert retriever.search("quokkas", k=1)[0].id == "d7"
    variant = retriever.with_options(min_idf=0)
    del retriever
    gc.collect()
    assert path.is_dir() and variant.search("quokkas", k=1)[0].id == "d7"  # kept alive by a variant of it too
    variant.add([TINY_DOCS[0].__class__("d8", "wombats")])
    del variant
    gc.collect()
    assert not path.exists()


def test_queries_must_be_strings(tmp_path):
    bm25 = BM25Retriever.build(TINY_DOCS, tmp_path / "idx")
    with pytest.raises(SemiretError, match="by query texts \\(retriever bm25\\): queries must be strings; query vectors"):
        bm25.search([1, 2])  # (numbers are a query vector, which a dense index takes)
    with pytest.raises(SemiretError, match="k must be at least 1"):
        bm25.search("cats", k=0)
    with pytest.raises(SemiretError, match="queries must be a string or a list of strings, got NoneType"):
        bm25.search(None)
    with pytest.raises(SemiretError, match="queries must be strings, got NoneType"):
        bm25.search(["cats", None])
    with pytest.raises(SemiretError, match="queries must be a string or a list of strings, got bytes"):
        bm25.search(b"cats")
    with pytest.raises(SemiretError, match=r"n_threads \(--threads\) must be at least 1, got 0"):
        bm25.search("cats", n_threads=0)
    for bad in (2.5, 3.0, True, "5", None):  # before any kernel sees them, whatever the index
        with pytest.raises(SemiretError, match=f"k must be a whole number, got {bad!r}"):
            bm25.search("cats", k=bad)
        with pytest.raises(SemiretError, match="k must be a whole number"):
            bm25.recommend(["d1"], k=bad)
    with pytest.raises(SemiretError, match="n_threads .* must be a whole number, got None"):
        bm25.search("cats", n_threads=None)
    assert bm25.search("cats", k=np.int64(2)) == bm25.search("cats", k=2)


def test_beirs_corpus_dict_is_its_documents_and_a_dict_of_texts_says_what_to_pass(tmp_path):
    """BEIR's loader gives ``{id: {"title", "text"}}``: it was "a single dict (one document: [document])", and the
    advice failed next (no id field)."""
    corpus = {document.id: {"title": document.title, "text": document.text} for document in TINY_DOCS}
    from_dict = BM25Retriever.build(corpus, tmp_path / "beir")
    from_list = BM25Retriever.build(TINY_DOCS, tmp_path / "list")
    assert from_dict.search(["cats dogs"]).as_run(["q"]) == from_list.search(["cats dogs"]).as_run(["q"])
    assert from_dict.get_document("d1") == TINY_DOCS[0]
    with pytest.raises(SemiretError, match=r"got a dict of texts: \[Document\(doc_id, text\) for"):
        BM25Retriever.build({"a": "cats", "b": "dogs"}, tmp_path / "texts")
    with pytest.raises(SemiretError, match=r"got a single dict \(one document: \[document\]\)"):
        BM25Retriever.build({"_id": "a", "text": "cats"}, tmp_path / "one")


def test_queries_as_a_dict_a_table_or_a_set_are_refused_saying_what_to_pass(tmp_path):
    """``read_queries`` and ``Collection.queries`` give ``{id: text}``: searched as it was, its ids were the
    queries (a SciFact run scored 0, no error); a DataFrame's column names likewise; a set has no order."""
    bm25 = BM25Retriever.build(TINY_DOCS, tmp_path / "idx")
    queries = {"q1": "cats", "q2": "dogs"}
    with pytest.raises(SemiretError, match=r"queries is a dict .*search\(list\(queries.values\(\)\)\)"):
        bm25.search(queries)

    class Table:  # what a pandas DataFrame has that a list has not (iterating one gives its column names)
        columns = ["qid", "query"]

        def __iter__(self):
            return iter(self.columns)

    with pytest.raises(SemiretError, match="queries is a Table"):
        bm25.search(Table())
    with pytest.raises(SemiretError, match="queries must be a string or a list of strings, got set"):
        bm25.search({"cats", "dogs"})
    assert bm25.search(list(queries.values())).as_run(list(queries)) == bm25.search(("cats", "dogs")).as_run(
        ["q1", "q2"])
    with pytest.raises(SemiretError, match=r"query 1 holds a lone surrogate \('\\ud83d' at character 5\)"):
        bm25.search(["cats", "dogs \ud83d"])  # half an emoji: a tokenizer's TypeError before


def test_a_retriever_made_directly_says_how_it_is_made_and_its_options():
    """A bm25s user's first try, ``BM25(k1=1.2)``: Python's "unexpected keyword argument" before."""
    for made in (lambda: BM25Retriever(k1=1.2), BM25Retriever):
        with pytest.raises(SemiretError, match=r"made by BM25Retriever.build\(documents, path, \*\*options\) or "
                                               r"opened by open_retriever\(path, \*\*options\); its options: b, .*k1"):
            made()


def test_hits_read_their_documents_from_the_commit_searched(tmp_path):
    """A hit's text was looked up in the index as it was when read: deleted meanwhile (another thread), None, and
    ``best.text[:80]`` failed; replaced, the new text beside the old score."""
    retriever = BM25Retriever.build(TINY_DOCS, tmp_path / "idx")
    hits = retriever.search("cats dogs garden", k=3)
    first, second = hits[0], hits[1]
    retriever.delete([first.id])
    retriever.add([Document(second.id, "a text written after the search")], replace=True)
    assert first.document == next(d for d in TINY_DOCS if d.id == first.id)
    assert second.document == next(d for d in TINY_DOCS if d.id == second.id)
    assert retriever.search("written after", k=1)[0].text == "a text written after the search"


def test_an_index_opened_by_a_relative_path_stays_the_folder_it_opened(tmp_path, monkeypatch):
    """A notebook's %cd after opening ``idx``: a refresh, a pickle and a write followed the working directory to
    another index of that name."""
    import pickle

    for name, text in (("a", "apples"), ("b", "bananas")):
        (tmp_path / name).mkdir()
        BM25Retriever.build([Document("d", text)], tmp_path / name / "idx")
    monkeypatch.chdir(tmp_path / "a")
    retriever = open_retriever("idx")
    monkeypatch.chdir(tmp_path / "b")
    retriever.index.refresh()
    assert retriever.search("apples", k=1)[0].text == "apples"
    assert pickle.loads(pickle.dumps(retriever)).search("apples", k=1)[0].text == "apples"
    assert retriever.add([Document("e", "more apples")]) == 1
    assert open_retriever(tmp_path / "a" / "idx").index.n_docs == 2


def test_a_merged_segment_is_freed_without_the_garbage_collector(tmp_path):
    """A segment's ``$text`` index referred back to the segment (a cycle): merged away, its files stayed mapped
    until Python's collector ran (52.9 MiB over a 7.3 MB index in a busy process)."""
    import weakref

    retriever = BM25Retriever.build(TINY_DOCS, tmp_path / "idx")
    retriever.add([Document("n", "cats too")])
    retriever.search("cats", filter={"$text": "cats"})
    merged = [weakref.ref(segment) for segment in retriever.index.segments]
    gc.disable()
    try:
        retriever.index.merge()
        retriever.search("cats", filter={"$text": "cats"})
        assert all(segment() is None for segment in merged)
    finally:
        gc.enable()


def test_a_document_indexed_as_passages_is_named_by_them_where_its_id_is_not_taken(tmp_path):
    """``explain``, ``highlight`` and ``context`` of a document's id over its passages said only "no document"."""
    from semiret.data.chunking import Chunking

    retriever = BM25Retriever.build([Document("d", " ".join(f"word{i}" for i in range(30)))], tmp_path / "idx",
                                    chunking=Chunking(10, 3))
    for call in (lambda: retriever.explain("word1", "d"), lambda: retriever.highlight("word1", "d"),
                 lambda: retriever.context("d", 1)):
        with pytest.raises(SemiretError, match=r"no document 'd' in .*: it is indexed as passages, d#0, d#1, d#2"):
            call()


def test_documents_and_ids_are_checked_where_they_enter(tmp_path):
    bm25 = BM25Retriever.build(TINY_DOCS, tmp_path / "idx")
    with pytest.raises(SemiretError, match=r"delete takes a list of ids, got the string 'd1' \(one id: \['d1'\]\)"):
        bm25.delete("d1")
    with pytest.raises(SemiretError, match="a document's id must be a string, got int"):
        Document(7, "x")
    with pytest.raises(SemiretError, match="a document's text must be a string, got NoneType"):
        Document("z", None)
    with pytest.raises(SemiretError, match="holds the control character"):
        bm25.add([Document("ok", "fine"), Document("x\ty", "tabbed")])
    assert bm25.index.n_docs == len(TINY_DOCS) and bm25.delete(["d1"]) == 1


def test_documents_may_be_dicts_as_corpus_lines_are(tmp_path):
    """Qdrant and Pyserini users hand over dicts: read as a corpus file's lines are (BEIR or Pyserini names, a
    numbered id as its string), and deleted by that number too."""
    bm25 = BM25Retriever.build([{"_id": 17, "title": "Statins", "text": "and cancer"},
                                {"id": "p2", "contents": "vitamin d and bones"}], tmp_path / "idx")
    assert [h.id for h in bm25.search("statins", k=1)] == ["17"]
    assert bm25.add([{"_id": "n3", "text": None, "body": "zebras graze"}]) == 1
    assert bm25.search("zebras", k=1)[0].text == "zebras graze"
    assert bm25.delete([17]) == 1 and bm25.index.n_docs == 2


def test_what_is_not_a_list_of_documents_is_named(tmp_path):
    with pytest.raises(SemiretError, match=r"document 0 is a str, not a Document or a dict \(strings have no id"):
        BM25Retriever.build(["statins and cancer"], tmp_path / "idx")
    assert not (tmp_path / "idx").exists()  # nothing left behind
    bm25 = BM25Retriever.build(TINY_DOCS, tmp_path / "idx")
    with pytest.raises(SemiretError, match=r"add takes a list of documents, got a single Document"):
        bm25.add(Document("n1", "one"))
    for path in ("new.jsonl", tmp_path / "new.tsv.gz"):  # a file's name: how to read it
        with pytest.raises(SemiretError, match=r"add takes documents, not a file's name: read .* semiret.data.iter_corpus"):
            bm25.add(path)
    with pytest.raises(SemiretError, match=r"document 1: missing text field"):
        bm25.add([{"_id": "n1", "text": "fine"}, {"_id": "n2", "name": "misnamed"}])
    with pytest.raises(SemiretError, match=r"document ids are strings, got float 1.5"):
        bm25.delete([1.5])
    assert bm25.index.n_docs == len(TINY_DOCS)  # every refusal changed nothing


def test_an_empty_corpus_builds_an_empty_index_with_a_warning(tmp_path, caplog):
    """A corpus read empty (a file of blank lines) is worth a word; an empty list is an empty index asked for (the
    service's PUT /indexes/NAME warned, naming its staging folder)."""
    with caplog.at_level("WARNING"):
        BM25Retriever.build([], tmp_path / "asked")
    assert "no documents to index" not in caplog.text
    with caplog.at_level("WARNING"):
        bm25 = BM25Retriever.build(iter([]), tmp_path / "idx")
    assert f"no documents to index: {tmp_path / 'idx'} holds an empty index" in caplog.text and bm25.index.n_docs == 0
    bm25.add([Document("a", "statins")])
    assert [h.id for h in bm25.search("statins")] == ["a"]


def test_an_idf_query_whose_every_token_min_idf_drops_says_so_once(tmp_path, caplog):
    """On a small corpus a word in most documents weighs under min_idf: the query finds nothing, with a warning
    naming min_idf=0 (which finds them), said once."""
    import logging

    documents = [Document(f"d{i}", f"statins trial {i}") for i in range(4)]
    idf = IDFRetriever.build(documents, tmp_path / "idf")
    with caplog.at_level(logging.WARNING):
        assert idf.search("statins") == [] and idf.search("statins trial") == []
    assert caplog.text.count("weighs less than min_idf=1") == 1 and "min_idf=0 keeps every token" in caplog.text
    assert "with the corpus's IDF" in caplog.text  # (an IDF table's says it is common there)
    assert len(idf.with_options(min_idf=0).search("statins")) == 4


def test_option_values_of_the_wrong_type_are_named(tmp_path):
    """Options are checked against their fields' types where they enter (numpy's numbers are numbers)."""
    for bad in ("1.2", True):
        with pytest.raises(SemiretError, match=f"option 'k1' for bm25 must be a float, got {bad!r}"):
            BM25Retriever.build(TINY_DOCS, tmp_path / "bad", k1=bad)
    assert not (tmp_path / "bad").exists()
    built = BM25Retriever.build(TINY_DOCS, tmp_path / "idx", k1=np.float32(1.25), b=np.float64(0.5))
    assert built.search("cats") == BM25Retriever.build(TINY_DOCS, tmp_path / "plain", k1=1.25, b=0.5).search("cats")


def test_a_retriever_pickles_as_what_reopens_it(tmp_path):
    """Sent to another process (multiprocessing, joblib) a retriever reopens its index directory with its search
    options there; one over a temporary index cannot be, and says so; a shallow copy shares the open index."""
    import copy
    import pickle

    bm25 = BM25Retriever.build(TINY_DOCS, tmp_path / "idx", k1=1.2)
    expanded = bm25.with_options(rm3=True, fb_docs=2)
    sent = pickle.loads(pickle.dumps(expanded))
    assert type(sent) is BM25Retriever and sent.search(["cats mice"]) == expanded.search(["cats mice"])
    assert sent.with_options().search("cats mice") == bm25.search("cats mice")
    assert sent._search_options == {"rm3": True, "fb_docs": 2} and sent.index.meta["bm25"] == bm25.index.meta["bm25"]
    assert copy.copy(bm25).index is bm25.index
    with pytest.raises(SemiretError, match="cannot be sent to another process"):
        pickle.dumps(BM25Retriever.build(TINY_DOCS))


def test_a_bm25_query_of_stopwords_alone_says_so_once(tmp_path, caplog):
    import logging

    bm25 = BM25Retriever.build(TINY_DOCS, tmp_path / "idx")
    with caplog.at_level(logging.WARNING):
        assert bm25.search("the and of") == [] and bm25.search("of the") == [] and bm25.search("zebra") == []
    assert caplog.text.count("is a stopword") == 1 and "stopwords=none" in caplog.text
    kept = BM25Retriever.build(TINY_DOCS, tmp_path / "all", stopwords="none")
    assert kept.search("the and of")  # kept where the index keeps them


TICKETS = [{"id": "T-1", "body": "login fails on safari", "priority": "high", "product": "web"},
           {"id": "T-2", "body": "password reset email never arrives", "priority": "low", "product": "mail"}]


def test_dicts_are_read_with_the_fields_the_index_keeps_as_the_command_line_reads_a_file(tmp_path, caplog):
    """``build`` and ``add`` of dicts with top-level fields dropped them silently (and ``build(metadata_fields=...)``
    only recorded the names): they are read as ``semiret index`` and ``add`` read a JSONL file, the index's fields
    kept in the metadata, others named in a warning; the fields of the id and text are recorded too."""
    from semiret.data.collection import CorpusFields

    with caplog.at_level("WARNING"):
        plain = BM25Retriever.build(TICKETS, tmp_path / "plain")
    assert "build: the fields 'priority', 'product' of its documents are left out: metadata_fields=[...]" in caplog.text
    assert plain.get_document("T-1").metadata is None
    caplog.clear()
    with caplog.at_level("WARNING"):
        plain.add([{"id": "T-3", "body": "printer jam", "priority": "low"}])
    assert "add: the field 'priority' of its documents is left out" in caplog.text and "\"metadata\"" in caplog.text
    kept = BM25Retriever.build(TICKETS, tmp_path / "kept", metadata_fields=["priority", "product"])
    assert kept.get_document("T-1").metadata == {"priority": "high", "product": "web"}
    assert kept.add([{"id": "T-3", "body": "login page blank", "priority": "low", "votes": 2}]) == 1
    assert kept.get_document("T-3").metadata == {"priority": "low"}
    assert [h.id for h in kept.search("login", filter={"priority": "low"})] == ["T-3"]
    assert kept.sync({"T-1": {"body": "login fails on safari", "priority": "high", "product": "web"}}, force=True
                     ).unchanged == 1  # BEIR's corpus dict, read alike: unchanged
    named = BM25Retriever.build([{"ticket": "T-1", "summary": "login fails", "id": "old-1"}], tmp_path / "named",
                                id_field="ticket", text_field="summary", metadata_fields=["*"])
    assert named.get_document("T-1") == Document("T-1", "login fails") and named.get_document("T-1").metadata == {
        "id": "old-1"}
    reopened = open_retriever(tmp_path / "named")
    assert reopened.corpus_fields() == CorpusFields(("*",), "ticket", "summary")
    reopened.add([{"ticket": "T-2", "summary": "password reset"}])
    assert reopened.get_document("T-2").text == "password reset"
    reopened.add([{"_id": "T-3", "text": "as exported"}])  # (BEIR's names, where the named ones are missing)
    assert reopened.get_document("T-3").text == "as exported"
    with pytest.raises(SemiretError, match=r"document 0: missing text field 'summary' .*, nor 'text'"):
        reopened.add([{"ticket": "T-4", "body": "not the text field"}])
    passages = BM25Retriever.build(TICKETS, tmp_path / "passages", chunking=3, metadata_fields=["product"])
    assert passages.get_document("T-2#0").metadata["product"] == "mail"  # dicts split into passages too
    with pytest.raises(SemiretError, match="id_field .* not one of title"):
        BM25Retriever.build(TICKETS, tmp_path / "bad", id_field="title")


def test_fields_left_out_beside_metadata_fields_kept_are_named_and_absent_kept_ones_are_not(tmp_path, caplog):
    """With ``--metadata-fields`` naming some of a corpus's fields, the others (``heading``) were dropped silently by
    ``semiret index``, ``add``, the service's upserts and ``Retriever.add``; a later ``add`` of documents lacking some
    of the index's fields warned that no document had them, naming a kept field among those of the first document."""
    from typer.testing import CliRunner

    from semiret.cli import app
    from semiret.serving import ServeSettings, create_app

    from helpers import LocalClient, write_jsonl

    record = {"_id": "a", "text": "statins heart", "source": "pubmed", "published": 2020, "tags": ["x"], "views": 3,
              "heading": "Intro"}
    corpus = write_jsonl(tmp_path / "c.jsonl", [record, {**record, "_id": "b", "heading": "Methods"}])
    said = logging.Handler(logging.WARNING)  # where the command line's messages go (pytest's own skip its filters)
    said.messages = []
    said.emit = lambda entry: said.messages.append(entry.getMessage())
    logging.getLogger().addHandler(said)
    try:
        made = CliRunner().invoke(app, ["index", "--data", str(corpus), "--out", str(tmp_path / "i"),
                                        "--metadata-fields", "source,published,tags,views"])
        assert made.exit_code == 0, made.output
        left = [m for m in said.messages if "left out" in m]
        assert len(left) == 1 and "the field 'heading' of its documents is left out" in left[0], said.messages
        assert "--metadata-fields source,published,tags,views,heading" in left[0]
        said.messages.clear()
        later = write_jsonl(tmp_path / "later.jsonl", [{"_id": "c", "text": "cancer", "source": "arxiv",
                                                        "heading": "Results"}])
        added = CliRunner().invoke(app, ["add", "--index", str(tmp_path / "i"), str(later)])
        assert added.exit_code == 0, added.output
    finally:
        logging.getLogger().removeHandler(said)
    assert sum("the field 'heading' of its documents is left out" in m for m in said.messages) == 1, said.messages
    assert not any("no document has the field" in m for m in said.messages), said.messages  # tags, views: optional
    retriever = open_retriever(tmp_path / "i")
    assert retriever.get_document("c").metadata == {"source": "arxiv"}
    with caplog.at_level("WARNING"):
        retriever.add([{"_id": "d", "text": "diet", "source": "x", "heading": "Aside"}])
    assert "add: the field 'heading' of its documents is left out" in caplog.text
    assert "'source'" not in caplog.text and "metadata_fields name" in caplog.text
    settings = ServeSettings({"docs": str(tmp_path / "i")}, api_key="key", write_process=False)
    with LocalClient(create_app(settings)) as client:
        answer = client.put("/indexes/docs/documents", headers={"X-API-Key": "key"},
                            json={"documents": [{"_id": "e", "text": "sleep", "views": 9, "heading": "End"}]})
        assert answer.status_code == 200, answer.text
        warnings = answer.json().get("warnings", [])
        assert any("the field 'heading' of its documents is left out" in w for w in warnings), answer.json()
        assert not any("'views'" in w for w in warnings)
    assert open_retriever(tmp_path / "i").get_document("e").metadata == {"views": 9}


def test_a_passage_id_read_as_the_id_is_not_left_out_and_a_shards_head_is_read_with_the_fields(tmp_path, caplog):
    """``build([{"pid": ..., "text": ...}])`` warned that the field ``pid``, read as the id, was left out; and a
    shard's ``corpus_head`` was read without the fields named (a head of dicts naming their id otherwise: refused)."""
    with caplog.at_level("WARNING"):
        BM25Retriever.build([{"pid": "p1", "text": "cats purr"}], tmp_path / "pids")
    assert "left out" not in caplog.text
    tickets = [{"ticket": f"T-{n}", "summary": text} for n, text in enumerate(["login fails", "password reset"])]
    built = BM25Retriever.build(tickets[1:], tmp_path / "shard", corpus_head=tickets, id_field="ticket",
                                text_field="summary")
    assert built.get_document("T-1") == Document("T-1", "password reset")


def _ids(hits) -> list[str]:
    return [hit.id for hit in hits]


def _other_process_writes(path: str) -> None:
    """Another process's add, delete and merge (as ``semiret add``, ``delete`` and ``merge`` commit them)."""
    writer = open_retriever(path)
    writer.add([Document("far", "narwhals from another process")])
    writer.delete(["d2"])
    writer.index.merge()


def test_a_retriever_sees_what_was_committed_before_each_read_whoever_committed_it(tmp_path):
    """A retriever opened in a Python process never saw another retriever's, or another process's, add, delete
    or merge (only the server refreshed before each request): a new document was never found, a deleted one kept
    being returned, by search and get_documents. Every read now starts from the last commit; a pinned view keeps
    its own."""
    import multiprocessing

    path = tmp_path / "idx"
    BM25Retriever.build(TINY_DOCS, path)
    reader, writer = open_retriever(path), open_retriever(path)
    before = reader.pinned()
    writer.add([Document("new", "walruses on the ice", metadata={"kind": "new"})])
    assert _ids(reader.search("walruses", k=3)) == ["new"] and list(reader.get_documents(["new"])) == ["new"]
    assert reader.get_document("new").text == "walruses on the ice" and reader.count() == 7
    assert reader.count({"kind": "new"}) == 1 and reader.facet("kind") == [("new", 1)]
    assert "new" in {d.id for d in reader.iter_documents()} and "new" in reader.scroll(limit=10).ids
    assert before.search("walruses", k=3) == [] and before.get_documents(["new"]) == {}  # (its own commit)
    writer.delete(["d1"])
    assert "d1" not in _ids(reader.search("cats", k=6)) and reader.get_documents(["d1"]) == {}
    assert reader.get_document("d1") is None and "d1" not in reader.document_ids() and reader.count() == 6
    writer.index.merge()  # the deleted document's segment merged away
    assert len(writer.index.segments) == 1
    assert _ids(reader.search("cats", k=6)) == ["d2"] and reader.get_documents(["d1", "new"]).keys() == {"new"}
    assert len(reader.index.segments) == 1

    process = multiprocessing.get_context("fork").Process(target=_other_process_writes, args=(str(path),))
    process.start()
    process.join(60)
    assert process.exitcode == 0
    assert _ids(reader.search("narwhals", k=3)) == ["far"] and "d2" not in _ids(reader.search("dogs mailman", k=6))
    assert reader.get_documents(["far", "d2"]).keys() == {"far"} and len(reader.index.segments) == 1
    assert reader.explain("narwhals", "far").score > 0 and _ids(reader.recommend(["far"], k=3)) == []


def test_a_hybrid_retriever_sees_both_parts_of_what_another_committed(tmp_path):
    from semiret.search import HybridRetriever

    path = tmp_path / "hybrid"
    HybridRetriever.build(TINY_DOCS, path, neural="idf")
    reader, writer = open_retriever(path), open_retriever(path)
    writer.add([Document("new", "walruses walruses on the ice")])
    found = reader.search("walruses", k=3)
    assert _ids(found) == ["new"] and found[0].text == "walruses walruses on the ice"
    assert reader.get_documents(["new"]).keys() == {"new"}
    assert {term.term for term in reader.document_terms("new")} >= {"lexical:walrus"}
    writer.delete(["new"])
    assert reader.search("walruses", k=3) == [] and reader.get_documents(["new"]) == {}


def test_grouping_whole_documents_by_parent_makes_each_its_own_group(tmp_path, caplog):
    """``group_by="parent"`` ranks documents by their best passage over an index of passages; over one of whole
    documents it found no hits, with two warnings (the first of "a filter"). Each document is its own group there,
    so the same code searches both kinds of index; a field of that name that documents hold still groups."""
    documents = [Document(d.id, d.text, d.title, {"year": 2000 + n}) for n, d in enumerate(TINY_DOCS)]
    whole = BM25Retriever.build(documents, tmp_path / "whole")
    with caplog.at_level("DEBUG", logger="semiret"):
        caplog.clear()
        for query in ("cats dogs", "statins cancer risk"):
            plain = whole.search(query, k=3)
            for size in (1, 3):
                grouped = whole.search(query, k=3, group_by="parent", group_size=size)
                assert [(h.id, h.score, h.group) for h in grouped] == [(h.id, h.score, h.id) for h in plain]
        batch = whole.search(["cats dogs", "mailman"], k=2, group_by="parent", score_threshold=0.01)
        assert batch.groups == batch.ids and batch.as_run(["q1", "q2"], by_group=True) == batch.as_run(["q1", "q2"])
        boost = {"field": "year", "modifier": "log1p"}
        boosted = whole.search("cats dogs", k=2, group_by="parent", boost=boost)
        assert [(h.id, h.group) for h in boosted] == [(h.id, h.id) for h in whole.search("cats dogs", k=2, boost=boost)]
        required = whole.search("+cats dogs", k=3, group_by="parent", operators=True)
        assert [h.group for h in required] == [h.id for h in required] == ["d2", "d1"]
    assert not [r for r in caplog.records if r.levelno > logging.DEBUG]
    with pytest.raises(SemiretError, match="group_size must be a positive integer"):
        whole.search("cats", group_by="parent", group_size=0)
    with pytest.raises(SemiretError, match="grouped .* or diversified"):
        whole.search("cats", group_by="parent", diversity=0.5)

    owned = BM25Retriever.build([Document("a", "cats", metadata={"parent": "p"}),
                                 Document("b", "cats and dogs", metadata={"parent": "p"})], tmp_path / "owned")
    assert [(h.id, h.group) for h in owned.search("cats", k=3, group_by="parent", group_size=2)] == [
        ("a", "p"), ("b", "p")]
