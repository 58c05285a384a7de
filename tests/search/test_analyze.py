"""The terms a text becomes and a stored document's terms (``Retriever.analyze``, ``Retriever.document_terms``,
``semiret analyze``, ``POST .../analyze``, ``Client.analyze``): query weights as a search scores them, a text read
as a document holding the values an add stores, nothing added to an index's vocabulary, RM3's expansion, hybrids
part by part, and what is refused."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from semiret.cli import app
from semiret.data import Document
from semiret.errors import SemiretError, UnknownDocumentError
from semiret.search import BM25Retriever, retriever_class
from semiret.serving import ServeSettings, create_app
from semiret.serving.client import ServerError

from helpers import LocalClient, TINY_DOCS, client_of

NEW_TEXT = "Statins lower cholesterol; cholesterol feeds tumours in mice."


def _by_term(terms) -> dict:
    return {t.term: (t.weight, t.document_frequency) for t in terms}


def test_a_query_reads_as_the_search_scores_it(tmp_path):
    retriever = BM25Retriever.build(TINY_DOCS, tmp_path / "bm25")
    terms = retriever.analyze("do statins reduce the zebrafish cancer risk? Statins!")
    index = retriever.index
    weights = _by_term(terms)
    assert set(weights) == {"do", "statin", "reduc", "cancer", "risk", "zebrafish"}  # stems; stopwords gone
    statin = index.vocab.index("statin")
    assert weights["statin"] == (pytest.approx(2 * float(index.idf()[statin])), 2)  # counted twice; d3 and d6
    assert weights["zebrafish"] == weights["do"] == (0.0, 0)  # words the index has never seen: searched for nothing
    assert [t.weight for t in terms] == sorted((t.weight for t in terms), reverse=True)
    # the weights are the query weights explain multiplies by
    explained = {t.term: t.query_weight for t in retriever.explain("statins cancer", "d3").terms}
    assert explained == {term: pytest.approx(weights[term][0] / (2 if term == "statin" else 1))
                         for term in ("statin", "cancer")}


@pytest.mark.parametrize("name", ["bm25", "bot", "idf"])
def test_a_text_read_as_a_document_holds_what_an_add_stores(tmp_path, name):
    retriever = retriever_class(name).build(TINY_DOCS, tmp_path / name)
    vocabulary = list(retriever.index.vocab) if retriever.index.vocab is not None else None
    analyzed = retriever.analyze(NEW_TEXT, side="document")
    assert analyzed
    if vocabulary is not None:  # analyzing adds no word to the vocabulary, committed or not
        assert list(retriever.index.vocab) == vocabulary
        retriever.add([Document("other", "garden birds")])
        assert "cholesterol" not in retriever.index.vocab
        assert _by_term(analyzed)["cholesterol"][1] == 0
        analyzed = retriever.analyze(NEW_TEXT, side="document")  # the average length moved with that add
    retriever.add([Document("new", NEW_TEXT)])
    stored = retriever.document_terms("new")
    assert [t.term for t in stored] == [t.term for t in analyzed]
    assert [t.weight for t in stored] == pytest.approx([t.weight for t in analyzed], rel=1e-6)
    assert all(t.document_frequency >= 1 for t in stored)


def test_a_learned_sparse_document_is_its_expansion(tmp_path, tiny_docs, tiny_bert):
    for bits in (None, 8):
        retriever = retriever_class("splade").build(tiny_docs, tmp_path / f"splade-{bits}", model=str(tiny_bert),
                                                    quantize_bits=bits)
        analyzed = retriever.analyze(NEW_TEXT, side="document")
        assert len(analyzed) > len(NEW_TEXT.split())  # an expansion over the vocabulary, not the words alone
        retriever.add([Document("new", NEW_TEXT)])
        stored = retriever.document_terms("new")
        assert _by_term(stored).keys() == _by_term(analyzed).keys()
        assert [t.weight for t in stored] == pytest.approx([t.weight for t in analyzed], rel=1e-5, abs=1e-6)
        # a stored document's terms are what explain finds in its postings, and the query's what it weighs them by
        held = _by_term(retriever.document_terms("d1"))
        query = _by_term(retriever.analyze("cats chase mice"))
        explained = retriever.explain("cats chase mice", "d1").terms
        assert explained and {t.term for t in explained} == set(query)
        for term in explained:
            assert term.query_weight == pytest.approx(query[term.term][0])
            assert term.document_weight == pytest.approx(held.get(term.term, (0.0, 0))[0])


def test_an_index_of_passages_reads_one_passage_at_a_time(tmp_path):
    retriever = BM25Retriever.build([Document("long", " ".join(f"word{i} statins" for i in range(30)))],
                                    tmp_path / "passages", chunking=20)
    one = " ".join(f"word{i} statins" for i in range(10))
    assert len(retriever.analyze(one, side="document")) == 11
    with pytest.raises(SemiretError, match="holds passages of 20 words overlapping by 0, each indexed alone, and this text makes 3"):
        retriever.analyze(one + " " + one + " " + one, side="document")
    assert retriever.analyze(one + " " + one + " " + one)  # a query is one, whatever its length
    with pytest.raises(UnknownDocumentError, match="it is indexed as passages, long#0, long#1, long#2"):
        retriever.document_terms("long")
    assert {t.term for t in retriever.document_terms("long#0")} == {f"word{i}" for i in range(10)} | {"statin"}


def test_an_empty_quantized_index_rounds_as_its_first_add_will(tmp_path, tiny_bert):
    retriever = retriever_class("splade").build([], tmp_path / "empty", model=str(tiny_bert), quantize_bits=8)
    analyzed = retriever.analyze(NEW_TEXT, side="document")
    retriever.add([Document("new", NEW_TEXT)])
    assert [t.weight for t in retriever.document_terms("new")] == pytest.approx([t.weight for t in analyzed],
                                                                                rel=1e-6)


def test_a_word_merged_away_weighs_nothing(tmp_path):
    retriever = BM25Retriever.build(TINY_DOCS + [Document("z", "zebrafish")], tmp_path / "bm25")
    retriever.delete(["z"])
    retriever.index.merge()
    assert [(t.term, t.weight, t.document_frequency) for t in retriever.analyze("zebrafish")] == [("zebrafish", 0.0, 0)]


def test_document_terms_follow_deletes_and_segments(tmp_path):
    retriever = BM25Retriever.build(TINY_DOCS, tmp_path / "bm25")
    retriever.add([Document("d1", "Parrots talk.", "Parrots")], replace=True)
    assert {t.term for t in retriever.document_terms("d1")} == {"parrot", "talk"}  # the live copy's
    before = {t.term: t.document_frequency for t in retriever.document_terms("d2")}
    assert before["cat"] == 2  # d1's old copy still counts until a merge, as in BM25's IDF
    retriever.index.merge()
    assert {t.term: t.document_frequency for t in retriever.document_terms("d2")}["cat"] == 1
    retriever.delete(["d2"])
    with pytest.raises(UnknownDocumentError, match="no document 'd2'"):
        retriever.document_terms("d2")


def test_rm3_shows_its_expanded_query_and_explains_by_it(tmp_path):
    filler = [Document(f"f{i}", f"filler{i} word{i} number{i} padding{i}") for i in range(40)]
    retriever = BM25Retriever.build(filler + [Document("car", "car automobile automobile engine"),
                                              Document("auto", "automobile engine repairs")], tmp_path / "bm25")
    plain = {t.term for t in retriever.analyze("car")}
    expanded = retriever.with_options(rm3=True, fb_docs=1)
    assert plain == {"car"} and {"car", "automobil", "engin"} <= {t.term for t in expanded.analyze("car")}
    hit = expanded.search("car", k=2)[1]
    assert hit.id == "auto"  # found by the expansion alone, and explained by it
    assert expanded.explain("car", "auto").score == pytest.approx(hit.score, rel=1e-5)


def test_a_hybrid_reads_part_by_part(tmp_path, tiny_docs, tiny_bert):
    hybrid = retriever_class("hybrid").build(tiny_docs, tmp_path / "hybrid", neural="splade", model=str(tiny_bert))
    terms = hybrid.analyze("cats and dogs")
    parts = [t.term.split(":")[0] for t in terms]
    assert set(parts) == {"lexical", "neural"} and [t.weight for t in terms] == sorted((t.weight for t in terms),
                                                                                      reverse=True)
    lexical = hybrid.query_side.parts["lexical"]
    assert [t for t in terms if t.term.startswith("lexical:")] == [
        type(t)(f"lexical:{t.term}", t.weight, t.document_frequency) for t in lexical.analyze("cats and dogs")]
    assert {t.term.split(":")[0] for t in hybrid.document_terms("d2")} == {"lexical", "neural"}
    with pytest.raises(UnknownDocumentError, match="no document 'nope'"):
        hybrid.document_terms("nope")
    dense = retriever_class("hybrid").build(tiny_docs, tmp_path / "dense", neural="dense", model=str(tiny_bert))
    assert {t.term.split(":")[0] for t in dense.analyze("cats", side="document")} == {"lexical"}


def test_what_cannot_be_analyzed(tmp_path, tiny_docs, tiny_bert):
    dense = retriever_class("dense").build(tiny_docs, tmp_path / "dense", model=str(tiny_bert))
    for call in (lambda: dense.analyze("cats"), lambda: dense.document_terms("d1")):
        with pytest.raises(SemiretError, match="does not score documents by summing term weights"):
            call()
    bm25 = BM25Retriever.build(TINY_DOCS, tmp_path / "bm25")
    with pytest.raises(SemiretError, match="side must be 'query' or 'document'"):
        bm25.analyze("cats", side="passage")
    with pytest.raises(SemiretError, match="one text"):
        bm25.analyze(["cats"])
    with pytest.raises(UnknownDocumentError, match="no document 'nope'"):
        bm25.document_terms("nope")
    assert bm25.analyze("the and of") == [] and bm25.analyze("", side="document") == []


def test_analyze_from_the_command_line_over_http_and_by_the_client(tmp_path):
    path = tmp_path / "bm25"
    retriever = BM25Retriever.build(TINY_DOCS, path)
    runner = CliRunner()

    def printed(*arguments):
        result = runner.invoke(app, ["analyze", "--index", str(path), *arguments])
        assert result.exit_code == 0, result.output
        return result.output

    as_query = [vars(t) for t in retriever.analyze("cats and dogs chase zebras")]
    assert json.loads(printed("--json", "cats and dogs chase zebras")) == {"terms": as_query, "total": 4}
    assert json.loads(printed("--json", "--limit", "1", "cats and dogs chase zebras")) == {"terms": as_query[:1],
                                                                                          "total": 4}
    as_document = [vars(t) for t in retriever.analyze(NEW_TEXT, side="document")]
    assert json.loads(printed("--json", "--document", "--limit", "0", NEW_TEXT))["terms"] == as_document
    stored = [vars(t) for t in retriever.document_terms("d2")]
    assert json.loads(printed("--json", "--id", "d2"))["terms"] == stored
    table = printed("--id", "d2")
    assert "document d2" in table and "mailman" in table
    for wrong in (["cats", "--id", "d2"], [], ["--id", "d2", "--document"]):
        refused = runner.invoke(app, ["analyze", "--index", str(path), *wrong])
        assert refused.exit_code == 2, wrong

    served = LocalClient(create_app(ServeSettings({"tiny": str(path)}, write_process=False)))
    answer = served.post("/indexes/tiny/analyze", json={"text": "cats and dogs chase zebras", "limit": 2})
    assert answer.status_code == 200 and answer.json() == {"terms": as_query[:2], "total": 4}
    answer = served.post("/indexes/tiny/analyze", json={"text": NEW_TEXT, "side": "document"})
    assert answer.json()["terms"] == as_document
    assert served.post("/indexes/tiny/analyze", json={"id": "d2"}).json()["terms"] == stored
    assert served.post("/indexes/tiny/analyze", json={"id": "nope"}).status_code == 404
    everything = served.post("/indexes/tiny/analyze", json={"text": "cats and dogs chase zebras", "limit": 0})
    assert everything.json()["terms"] == as_query  # 0: all, as on the command line
    for wrong, message in (({"text": "cats", "id": "d2"}, "not both"), ({}, "give a text to analyze, or the id"),
                           ({"text": "cats", "side": "passage"}, "pattern"), ({"text": "cats", "limit": -1}, "0"),
                           ({"id": "d2", "side": "document"}, "side reads a text")):
        refused = served.post("/indexes/tiny/analyze", json=wrong)
        assert refused.status_code == 422 and message in refused.text, (wrong, refused.text)

    client = client_of(served)
    assert [vars(t) for t in client.analyze("tiny", "cats and dogs chase zebras")] == as_query
    assert [vars(t) for t in client.analyze("tiny", NEW_TEXT, side="document", limit=3)] == as_document[:3]
    assert [vars(t) for t in client.analyze("tiny", doc_id="d2")] == stored
    assert [vars(t) for t in client.analyze("tiny", NEW_TEXT, side="document", limit=0)] == as_document
    with pytest.raises(ServerError, match="side reads a text"):
        client.analyze("tiny", doc_id="d2", side="document")


def test_numbered_ids_over_http(tmp_path):
    path = tmp_path / "bm25"
    BM25Retriever.build([Document("17", "cats and dogs")], path)
    served = LocalClient(create_app(ServeSettings({"tiny": str(path)}, write_process=False)))
    assert served.post("/indexes/tiny/analyze", json={"id": 17}).json()["total"] == 2
    assert served.post("/indexes/tiny/explain", json={"query": "cats", "id": 17}).json()["id"] == "17"
