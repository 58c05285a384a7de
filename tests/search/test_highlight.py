"""Highlighted fragments of hits (``Retriever.highlight``, ``search --highlight``, the service's ``highlight``):
windows where the matches cluster, in document order; words matched as each retriever matches them."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from semiret.cli import app
from semiret.data import Document
from semiret.errors import SemiretError, UnknownDocumentError
from semiret.search import BM25Retriever, DenseRetriever, retriever_class
from semiret.search.highlight import fragments
from semiret.serving import ServeSettings, create_app

from helpers import LocalClient

LONG = Document("long", "Dogs bark at night. " + "Filler words about nothing in particular here. " * 8
                + "The dog and the cat sleep. " + "More filler text without any match at all. " * 8
                + "A barking dog wakes the town.", "Dogs")
CORPUS = [LONG, Document("cats", "Cats chase mice in the garden."), Document("none", "Birds sing in the morning.")]


def _by_word(*wanted: str):
    def matches(words):
        return [frozenset({w.lower()}) if w.lower() in wanted else frozenset() for w in words]

    return matches


def test_fragments_pick_the_windows_where_matches_cluster():
    text = "a b dog c d e f g dog cat h i j k l m dog"
    found = fragments(text, _by_word("dog", "cat"), fragment_words=4, count=2)
    # the window of two distinct terms, its matches in the middle, then the best with one that does not overlap it
    assert found == ["a b <em>dog</em> c…", "…g <em>dog</em> <em>cat</em> h…"]
    lone = fragments("x " * 30 + "zed " + "y " * 30, _by_word("zed"), fragment_words=5, count=1)
    assert lone == ["…x x <em>zed</em> y y…"]  # a lone match in the middle of its window, not at its edge
    assert fragments(text, _by_word("dog"), fragment_words=50, count=3) == [
        text.replace("dog", "<em>dog</em>")]  # the whole text, once
    assert fragments(text, _by_word("zebra")) == [] and fragments("", _by_word("dog")) == []
    assert fragments("dog,cat!", _by_word("dog"), tags=("[", "]")) == ["[dog],cat!"]


def test_bm25_highlights_the_stems_it_matched(tmp_path):
    bm25 = BM25Retriever.build(CORPUS, tmp_path / "bm25")
    found = bm25.highlight("the barking dogs", "long", fragment_words=8, fragments=3)
    assert len(found) == 3 and all("<em>" in f for f in found)
    assert "<em>Dogs</em> <em>bark</em>" in found[0] and "<em>dog</em>" in found[1] and "<em>barking</em>" in found[2]
    assert "<em>the</em>" not in " ".join(found).lower()  # a stopword is no match
    assert bm25.highlight("zebra", "long") == [] and bm25.highlight("dogs", "cats") == []


def test_words_keep_their_combining_marks(tmp_path):
    decomposed = Document("nfd", "le cafe\u0301 cre\u0300me brule\u0301e")  # accents written apart (NFD)
    bm25 = BM25Retriever.build([decomposed] + CORPUS, tmp_path / "bm25")
    assert bm25.highlight("café crème", "nfd") == ["le <em>cafe\u0301</em> <em>cre\u0300me</em> brule\u0301e"]
    hindi = Document("hi", "यह नमस्ते दुनिया है")
    idf = retriever_class("idf").build([hindi] + CORPUS, tmp_path / "idf", min_idf=0)
    assert idf.highlight("नमस्ते", "hi") == ["यह <em>नमस्ते</em> दुनिया है"]  # the whole word, vowel signs too


def test_pieces_for_a_display_of_ones_own(tmp_path):
    bm25 = BM25Retriever.build(CORPUS, tmp_path / "bm25")
    [pieces] = bm25.highlight("cats", "cats", tags=None)
    assert pieces[0] == ("Cats", True) and "".join(piece for piece, _ in pieces) == "Cats chase mice in the garden."


def test_a_model_query_side_matches_words_by_its_tokenizer_alone(tmp_path, tiny_docs, tiny_bert, monkeypatch):
    splade = retriever_class("splade").build(tiny_docs + [LONG], tmp_path / "splade", model=str(tiny_bert))
    encoded = []
    original = type(splade.query_side).encode_queries
    monkeypatch.setattr(type(splade.query_side), "encode_queries",
                        lambda side, texts: encoded.append(len(texts)) or original(side, texts))
    splade.highlight("dogs bark", "long")
    assert encoded == [1]  # the query alone: the document's words are not run through the model


def test_a_token_retriever_and_a_dense_one(tmp_path, tiny_bert):
    idf = retriever_class("idf").build(CORPUS, tmp_path / "idf", min_idf=0)  # three documents: every IDF is low
    assert "<em>Cats</em>" in idf.highlight("cats", "cats")[0]
    dense = DenseRetriever.build(CORPUS, tmp_path / "dense", model=str(tiny_bert))
    assert "<em>chase</em>" in dense.highlight("chasing", "cats")[0]  # no terms of its own: English stems


def test_what_cannot_be_highlighted(tmp_path):
    bm25 = BM25Retriever.build(CORPUS, tmp_path / "bm25")
    with pytest.raises(UnknownDocumentError, match="no document 'nope'"):
        bm25.highlight("dogs", "nope")
    with pytest.raises(SemiretError, match="at least 1"):
        bm25.highlight("dogs", "long", fragment_words=0)
    with pytest.raises(SemiretError, match="two strings"):
        bm25.highlight("dogs", "long", tags=("<b>",))
    # each a TypeError, or (tags "ab") read as the tags "a" and "b"
    for wrong, message in (({"fragment_words": "3"}, "fragment_words must be a whole number"),
                           ({"fragments": None}, "fragments must be a whole number"),
                           ({"fragment_words": 2.5}, "fragment_words must be a whole number"),
                           ({"tags": 5}, "two strings"), ({"tags": "ab"}, "two strings")):
        with pytest.raises(SemiretError, match=message):
            bm25.highlight("dogs", "long", **wrong)
    bare = BM25Retriever.build(CORPUS, tmp_path / "bare", store_texts=False)
    with pytest.raises(SemiretError, match="no text to highlight"):
        bare.highlight("dogs", "long")


def test_the_html_encoder_escapes_the_text_and_not_the_tags(tmp_path):
    markup = Document("page", 'Cats <script>alert("x")</script> & <b>dogs</b> chase cats; O\'Brien\'s cat.')
    bm25 = BM25Retriever.build([markup], tmp_path / "bm25")
    raw = bm25.highlight("cats", "page")[0]
    assert "<script>" in raw and "<em>Cats</em>" in raw  # the default, as OpenSearch's: the text as stored
    escaped = bm25.highlight("cats", "page", encoder="html")[0]
    assert "<script>" not in escaped and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in escaped
    assert "&amp;" in escaped and "O&#x27;Brien" in escaped and escaped.count("<em>") == raw.count("<em>") == 3
    assert bm25.highlight("cats", "page", tags=("[", "]"), encoder="html")[0].startswith("[Cats] &lt;script&gt;")
    with pytest.raises(SemiretError, match="encoder must be one of default, html"):
        bm25.highlight("cats", "page", encoder="xml")
    with pytest.raises(SemiretError, match="with tags=None the pieces are the text as stored"):
        bm25.highlight("cats", "page", tags=None, encoder="html")
    printed = CliRunner().invoke(app, ["search", "--index", str(tmp_path / "bm25"), "--highlight", "--json",
                                       "--highlight-encoder", "html", "cats"])
    assert printed.exit_code == 0, printed.output
    assert json.loads(printed.output)["hits"][0]["highlights"] == bm25.highlight("cats", "page", encoder="html")
    client = LocalClient(create_app(ServeSettings({"tiny": str(tmp_path / "bm25")}, write_process=False)))
    asked = {"queries": ["cats"], "highlight": {"encoder": "html", "fragment_words": 4, "fragments": 1,
                                                "tags": ["<mark>", "</mark>"]}}
    answer = client.post("/indexes/tiny/search", json=asked)
    assert answer.status_code == 200, answer.text
    assert answer.json()["results"][0][0]["highlights"] == bm25.highlight(
        "cats", "page", fragment_words=4, fragments=1, tags=("<mark>", "</mark>"), encoder="html")
    for wrong in ({"encoder": "xml"}, {"fragments": 0}, {"tags": ["<b>"]}, {"colour": "red"}, "true", 1):
        refused = client.post("/indexes/tiny/search", json={"queries": ["cats"], "highlight": wrong})
        assert refused.status_code == 422 and refused.json()["detail"][0]["loc"][:2] == ["body", "highlight"], wrong
        assert len(refused.json()["detail"]) == 1, refused.json()  # the object's fault alone, not also "a boolean"


def test_highlights_from_the_command_line_and_over_http(tmp_path):
    bm25 = BM25Retriever.build(CORPUS, tmp_path / "bm25")
    expected = bm25.highlight("cats in gardens", "cats")
    printed = CliRunner().invoke(app, ["search", "--index", str(tmp_path / "bm25"), "--highlight", "--json",
                                       "cats in gardens"])
    assert printed.exit_code == 0, printed.output
    assert json.loads(printed.output)["hits"][0]["highlights"] == expected
    table = CliRunner().invoke(app, ["search", "--index", str(tmp_path / "bm25"), "--highlight", "cats in gardens"])
    assert table.exit_code == 0 and "highlights" in table.output and "<em>" not in table.output
    assert "Cats chase mice in the garden." in table.output
    refused = CliRunner().invoke(app, ["search", "--index", str(tmp_path / "bm25"), "--like", "cats", "--highlight"])
    assert refused.exit_code != 0 and "--highlight" in refused.output
    client = LocalClient(create_app(ServeSettings({"tiny": str(tmp_path / "bm25")}, write_process=False)))
    answer = client.post("/indexes/tiny/search", json={"queries": ["cats in gardens"], "k": 1, "highlight": True})
    assert answer.json()["results"][0][0]["highlights"] == expected
    plain = client.post("/indexes/tiny/search", json={"queries": ["cats in gardens"], "k": 1})
    assert "highlights" not in plain.json()["results"][0][0]
    BM25Retriever.build(CORPUS, tmp_path / "bare", store_texts=False)
    bare = LocalClient(create_app(ServeSettings({"bare": str(tmp_path / "bare")}, write_process=False)))
    refused = bare.post("/indexes/bare/search", json={"queries": ["cats"], "highlight": True})
    assert refused.status_code == 422 and refused.json()["detail"][0]["loc"] == ["body", "highlight"]


def test_a_hybrid_highlights_what_either_part_matched(tmp_path, tiny_bert):
    hybrid = retriever_class("hybrid").build(CORPUS, tmp_path / "hybrid", model=str(tiny_bert))
    words = ["Dogs", "bark", "night", "zebra"]
    held = hybrid._word_matches("dogs barking", "long")(words)
    assert {part for terms in held for part, _ in terms} >= {"lexical"} and held[3] == frozenset()
    assert held[0] and held[1] and not held[2]  # BM25's stems, each named with its part
    assert "<em>Dogs</em> <em>bark</em>" in hybrid.highlight("dogs barking", "long")[0]



def test_a_highlight_reads_the_document_s_words_without_a_query_s_warnings(tmp_path, caplog):
    import logging

    docs = [Document("d1", "The trial of statins and the risk of cancer in the elderly"),
            Document("d2", "Statins lower cholesterol")]
    for options in ({}, {"rm3": True, "fb_docs": 1}):
        retriever = BM25Retriever.build(docs, tmp_path / f"idx{len(options)}", **options)
        with caplog.at_level(logging.WARNING):
            assert "<em>statins</em>" in retriever.highlight("statins cancer", "d1")[0]
        assert "stopword" not in caplog.text
