"""How a document's score adds up (``Retriever.explain``, ``semiret explain``, ``POST .../explain``): the terms'
contributions sum to the score a search gives, over word, token, learned and 8-bit indexes, across segments and
after deletes; retrievers that do not sum term weights and unknown documents are refused."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from semiret.cli import app
from semiret.data import Document
from semiret.errors import SemiretError, UnknownDocumentError
from semiret.search import BM25Retriever, retriever_class
from semiret.serving import ServeSettings, create_app

from helpers import LocalClient, TINY_DOCS, client_of

QUERIES = ["cats and dogs chase", "statins cancer risk", "morning garden birds sing", "mailman letters"]


def _agrees_with_search(retriever, queries=QUERIES) -> int:
    """Explains every hit of ``queries``; returns how many, after checking each against its search score."""
    checked = 0
    for query in queries:
        for hit in retriever.search(query, k=10):
            explained = retriever.explain(query, hit.id)
            assert explained.matched and explained.score == pytest.approx(hit.score, rel=1e-5), (query, hit.id)
            assert sum(t.contribution for t in explained.terms) == pytest.approx(hit.score, rel=1e-5)
            contributions = [t.contribution for t in explained.terms]
            assert contributions == sorted(contributions, reverse=True)
            assert all(t.contribution == pytest.approx(t.query_weight * t.document_weight) for t in explained.terms)
            checked += 1
    return checked


@pytest.mark.parametrize("name", ["bm25", "bot", "idf"])
def test_contributions_sum_to_the_search_score(tmp_path, name):
    retriever = retriever_class(name).build(TINY_DOCS, tmp_path / name)
    retriever.add([Document("d7", "Dogs and cats again, in a second segment.")])
    retriever.delete(["d2"])
    assert _agrees_with_search(retriever) >= 5


def test_bm25_terms_are_words_with_their_idf_and_saturation(tmp_path):
    retriever = BM25Retriever.build(TINY_DOCS, tmp_path / "bm25")
    explained = retriever.explain("statins and unknownword cancer", "d3")
    assert sorted(t.term for t in explained.terms) == ["cancer", "statin"]  # stems; stopwords, unknown words gone
    lacking = retriever.explain("statins birds", "d3")
    assert [(t.term, t.document_weight) for t in lacking.terms][-1] == ("bird", 0.0)
    index = retriever.index
    statin = next(t for t in explained.terms if t.term == "statin")
    assert statin.query_weight == pytest.approx(float(index.idf()[index.vocab.index("statin")]))


def test_learned_and_quantized_impacts(tmp_path, tiny_docs, tiny_bert):
    for bits in (None, 8):
        retriever = retriever_class("splade").build(tiny_docs, tmp_path / f"splade-{bits}", model=str(tiny_bert),
                                                    quantize_bits=bits)
        assert _agrees_with_search(retriever, QUERIES[:2]) > 0


def test_what_cannot_be_explained(tmp_path):
    retriever = BM25Retriever.build(TINY_DOCS, tmp_path / "bm25")
    with pytest.raises(UnknownDocumentError, match="no document 'nope'"):
        retriever.explain("cats", "nope")
    retriever.delete(["d1"])
    with pytest.raises(UnknownDocumentError, match="no document 'd1'"):
        retriever.explain("cats", "d1")
    # RM3's expanded query is explained (a corpus of under ten documents is never expanded: the query's own terms)
    assert retriever.with_options(rm3=True).explain("cats", "d2") == retriever.explain("cats", "d2")
    with pytest.raises(SemiretError, match="one query"):
        retriever.explain(["cats"], "d2")
    assert retriever.explain("zebra", "d2").terms == [] and retriever.explain("zebra", "d2").score == 0.0


def test_explain_from_the_command_line_and_over_http(tmp_path):
    retriever = BM25Retriever.build(TINY_DOCS, tmp_path / "bm25")
    expected = retriever.explain("cats and dogs", "d2").to_json()
    runner = CliRunner()
    printed = runner.invoke(app, ["explain", "--index", str(tmp_path / "bm25"), "--id", "d2", "--json",
                                  "cats and dogs"])
    assert printed.exit_code == 0, printed.output
    assert json.loads(printed.output) == expected
    table = runner.invoke(app, ["explain", "--index", str(tmp_path / "bm25"), "--id", "d2", "cats and dogs"])
    assert table.exit_code == 0 and "contribution" in table.output and "dog" in table.output
    client = LocalClient(create_app(ServeSettings({"tiny": str(tmp_path / "bm25")}, write_process=False)))
    answer = client.post("/indexes/tiny/explain", json={"query": "cats and dogs", "id": "d2"})
    assert answer.status_code == 200 and answer.json() == expected
    assert client.post("/indexes/tiny/explain", json={"query": "cats", "id": "nope"}).status_code == 404
    rm3 = client.post("/indexes/tiny/explain", json={"query": "cats", "id": "d2", "options": {"rm3": True}})
    assert rm3.status_code == 200 and rm3.json() == retriever.explain("cats", "d2").to_json()


def test_a_retriever_that_sums_no_term_weights_is_refused(tmp_path, tiny_docs, tiny_bert):
    dense = retriever_class("dense").build(tiny_docs, tmp_path / "dense", model=str(tiny_bert))
    with pytest.raises(SemiretError, match="does not score documents by summing term weights"):
        dense.explain("cats", "d2")
    client = LocalClient(create_app(ServeSettings({"tiny": str(tmp_path / "dense")}, write_process=False)))
    for route, body in (("explain", {"query": "cats", "id": "d2"}), ("analyze", {"text": "cats"})):
        refused = client.post(f"/indexes/tiny/{route}", json=body)
        assert refused.status_code == 422 and "summing term weights" in refused.json()["detail"], route


def test_a_hybrid_fused_by_bounds_is_explained_part_by_part(tmp_path, tiny_docs, tiny_bert):
    hybrid = retriever_class("hybrid").build(tiny_docs, tmp_path / "hybrid", neural="splade", model=str(tiny_bert))
    assert hybrid.query_side.fusion == "bound"
    assert _agrees_with_search(hybrid, QUERIES[:2]) > 0
    explained = hybrid.explain("cats and dogs", "d2")
    assert {t.term.split(":")[0] for t in explained.terms} == {"lexical", "neural"}
    lexical_only = hybrid.with_options(weight=1.0).explain("cats and dogs", "d2")
    assert {t.term.split(":")[0] for t in lexical_only.terms} == {"lexical"}
    with pytest.raises(SemiretError, match="fuses rankings.*--fusion bound"):
        hybrid.with_options(fusion="rrf").explain("cats", "d2")
    # a document one part lacks (a crash between the parts' commits): the other part's terms alone
    neural = hybrid.query_side.parts["neural"]
    neural._explained = lambda query, doc_id, reading: (_ for _ in ()).throw(UnknownDocumentError(doc_id))
    alone = hybrid.explain("cats and dogs", "d2")
    assert alone.terms and {t.term.split(":")[0] for t in alone.terms} == {"lexical"}
    with pytest.raises(UnknownDocumentError, match=f"no document 'nope' in {hybrid.index.path}$"):
        hybrid.explain("cats", "nope")


def test_a_hybrid_fusing_rankings_says_what_can_be_explained(tmp_path, tiny_docs, tiny_bert):
    dense = retriever_class("hybrid").build(tiny_docs, tmp_path / "hybrid", neural="dense", model=str(tiny_bert))
    with pytest.raises(SemiretError, match="fuses rankings") as refused:
        dense.explain("cats", "d2")
    assert "--fusion bound" not in str(refused.value)  # a dense part cannot be fused by bounds



def test_a_search_explains_each_hit_over_http(tmp_path):
    retriever = BM25Retriever.build(TINY_DOCS, tmp_path / "bm25")
    with LocalClient(create_app(ServeSettings({"tiny": str(tmp_path / "bm25")}, write_process=False))) as http:
        answer = http.post("/indexes/tiny/search", json={"queries": ["statins cancer"], "k": 2, "explain": True})
        assert answer.status_code == 200, answer.text
        rows = answer.json()["results"][0]
        for row in rows:
            assert row["explanation"] == retriever.explain("statins cancer", row["id"]).to_json()
            assert row["explanation"]["score"] == pytest.approx(row["score"], rel=1e-5)
        plain = http.post("/indexes/tiny/search", json={"queries": ["statins cancer"]}).json()["results"][0]
        assert all("explanation" not in row for row in plain)
        assert http.post("/indexes/tiny/search", json={"queries": ["x"], "explain": "yes"}).status_code == 422
        served = client_of(http).search("tiny", "statins cancer", k=1, explain=True)
        assert served[0].explanation == retriever.explain("statins cancer", served[0].id)


def test_a_search_of_a_retriever_without_terms_refuses_to_explain(tmp_path, tiny_docs, tiny_bert):

    retriever_class("dense").build(tiny_docs, tmp_path / "dense", model=str(tiny_bert))
    with LocalClient(create_app(ServeSettings({"d": str(tmp_path / "dense")}, write_process=False))) as http:
        answer = http.post("/indexes/d/search", json={"queries": ["cats"], "explain": True})
        assert answer.status_code == 422 and "summing term weights" in answer.text
        assert answer.json()["detail"][0]["loc"] == ["body", "explain"]  # shaped as the other refusals


def test_a_write_published_while_a_hybrid_is_explained_is_not_half_read(tmp_path, tiny_docs, tiny_bert):
    """A hybrid's explanation read each part against the live index: a write published after its BM25 part was
    explained and before its neural part was (documents holding the query's words added) gave the old commit's
    BM25 terms beside the new one's neural terms, a fused score neither commit gives. Every part is explained at
    the commit the explanation started on."""
    retriever = retriever_class("hybrid").build(tiny_docs, tmp_path / "hybrid", neural="splade", model=str(tiny_bert))
    query, doc_id = "statins cancer risk", "d3"
    before = next(hit.score for hit in retriever.search(query, k=10) if hit.id == doc_id)
    neural = retriever.query_side.parts["neural"].query_side
    read = neural.scored_queries

    def published_meanwhile(index, texts):
        if retriever.index.n_docs == len(tiny_docs):  # once, as the neural part is read
            retriever.add([Document(f"new{n}", "statins cancer risk " * (n + 1)) for n in range(4)])
        return read(index, texts)

    neural.scored_queries = published_meanwhile
    explained = retriever.explain(query, doc_id)
    neural.scored_queries = read
    assert retriever.index.n_docs == len(tiny_docs) + 4  # the write landed during the explanation
    after = next(hit.score for hit in retriever.search(query, k=10) if hit.id == doc_id)
    assert after != pytest.approx(before, rel=1e-4)  # the write changed the document's fused score
    assert explained.score == pytest.approx(before, rel=1e-5)


def test_explain_reads_the_query_as_a_search_with_its_filter_and_operators_does(tmp_path):
    """A search with operators, or a filter, reads a misspelled word against the documents it shows; `semiret
    explain` and the service's explain had neither, so they gave another score than the search (1.79 for 3.02 on
    SciFact). A passage index's 404 now names the passages, as the command line does."""
    from semiret.data.chunking import Chunking

    docs = [Document("a", "cancer risk in mice"), Document("b", "a canser typo in the lung"),
            Document("c", "lung cancer screening"), Document("d", "garden birds")]
    retriever = BM25Retriever.build(docs, tmp_path / "bm25")
    fuzzy = retriever.with_options(fuzzy=True)
    hit = fuzzy.search("canser +mice", k=1, operators=True)[0]
    explained = fuzzy.explain("canser +mice", hit.id, operators=True)
    assert hit.id == "a" and explained.score == pytest.approx(hit.score)
    assert {t.term for t in explained.terms} >= {"cancer"}  # corrected among the documents holding "mice"
    assert fuzzy.explain("canser +mice", "a").score != pytest.approx(hit.score)  # read as written: another score
    filtered = fuzzy.search("canser", k=1, filter={"$text": "mice"})[0]
    runner = CliRunner()
    for flags, query, score in ((["--operators"], "canser +mice", hit.score),
                                (["--filter", "$text=mice"], "canser", filtered.score)):
        printed = runner.invoke(app, ["explain", "--index", str(tmp_path / "bm25"), "--fuzzy", "--id", "a", "--json",
                                      *flags, "--", query])
        assert printed.exit_code == 0, printed.output
        assert json.loads(printed.output)["score"] == pytest.approx(score), flags
    client = LocalClient(create_app(ServeSettings({"tiny": str(tmp_path / "bm25")}, write_process=False)))
    for body, score in (({"query": "canser +mice", "operators": True}, hit.score),
                        ({"query": "canser", "filter": {"$text": "mice"}}, filtered.score)):
        answer = client.post("/indexes/tiny/explain", json={**body, "id": "a", "options": {"fuzzy": True}})
        assert answer.status_code == 200 and answer.json()["score"] == pytest.approx(score), body
    refused = client.post("/indexes/tiny/explain", json={"query": "x", "id": "a", "filter": {"$or": 3}})
    assert refused.status_code == 422

    BM25Retriever.build([Document("long", " ".join(["word"] * 30))], tmp_path / "passages", chunking=Chunking(10, 0))
    served = LocalClient(create_app(ServeSettings({"p": str(tmp_path / "passages")}, write_process=False)))
    missing = served.post("/indexes/p/explain", json={"query": "word", "id": "long"})
    assert missing.status_code == 404 and "indexed as passages, long#0" in missing.json()["detail"]
    assert str(tmp_path) not in missing.json()["detail"]  # the server's paths are not said


MATCH_CASES = [("cats chase", None, False), ("cats chase", {"kind": "pet"}, False), ("cats -dogs", None, True),
               ("mice +garden", {"kind": "pet"}, True), ("+5", None, True), ("zebra", None, False), ("-dogs", None, True),
               ("+mailman letters", None, True)]


@pytest.mark.parametrize("name", ["bm25", "hybrid"])
def test_explain_says_whether_the_search_finds_the_document_and_why_not(tmp_path, tiny_bert, name):
    """An explanation said a document's score without saying whether the search explained finds it at all (one the
    filter or the operators leave out had its terms' score, as a hit has); it now says so, as OpenSearch's explain
    says ``matched``, and why not: for every document and search here, ``matched`` is whether a search as deep as
    the index finds it. `semiret explain` on a hybrid index failed (its explain took no operators)."""
    docs = [Document(d.id, d.text + (" 5 doses" if d.id == "d4" else ""), d.title,
                     {"kind": "pet" if d.id in ("d1", "d2") else "other"}) for d in TINY_DOCS]
    extra = {"neural": "splade", "model": str(tiny_bert)} if name == "hybrid" else {}
    retriever = retriever_class(name).build(docs, tmp_path / name, **extra)
    reasons = set()
    for query, filter, operators in MATCH_CASES:
        found = {hit.id for hit in retriever.search(query, k=len(docs), filter=filter, operators=operators)}
        for doc in docs:
            explained = retriever.explain(query, doc.id, filter=filter, operators=operators)
            assert explained.matched == (doc.id in found), (query, filter, operators, doc.id, explained.unmatched)
            assert explained.matched == (explained.unmatched is None)
            reasons.add(explained.unmatched)
    assert reasons == {None, "filter", "operators", "no_matching_term"}
    if name == "bm25":  # "+5": a word BM25 drops, required: its holder follows the scored hits at 0, and matches
        assert retriever.explain("+5", "d4", operators=True).to_json()["matched"]
    runner = CliRunner()
    flags = ["explain", "--index", str(tmp_path / name), "--id", "d2", "--filter", "kind=other"]
    printed = runner.invoke(app, [*flags, "--json", "cats chase"])
    assert printed.exit_code == 0, printed.output
    assert json.loads(printed.output) == retriever.explain("cats chase", "d2", filter={"kind": "other"}).to_json()
    assert json.loads(printed.output)["matched"] is False and json.loads(printed.output)["unmatched"] == "filter"
    table = runner.invoke(app, [*flags, "--operators", "cats -dogs"])
    assert table.exit_code == 0, table.output
    assert "This search does not find d2: it fails the search's filter." in " ".join(table.output.split())
    with LocalClient(create_app(ServeSettings({"tiny": str(tmp_path / name)}, write_process=False))) as http:
        answer = http.post("/indexes/tiny/explain", json={"query": "cats -dogs", "id": "d2", "operators": True})
        assert answer.status_code == 200 and answer.json()["matched"] is False
        assert answer.json()["unmatched"] == "operators"
        explained = client_of(http).explain("tiny", "cats -dogs", "d2", operators=True)
        assert explained == retriever.explain("cats -dogs", "d2", operators=True) and not explained.matched
        hits = http.post("/indexes/tiny/search", json={"queries": ["cats +chase"], "k": 3, "explain": True,
                                                      "operators": True}).json()["results"][0]
        assert hits and all(hit["explanation"]["matched"] for hit in hits)
