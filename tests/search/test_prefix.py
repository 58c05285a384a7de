"""Search as you type (``bm25 --prefix``, ``with_options(prefix=True)``): the query's last word, while the query ends
inside it, also matches the index's words it begins, the commonest ``max_expansions``, weighted with one blended IDF;
every other word is searched as ever."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from semiret.cli import app
from semiret.data import Document
from semiret.search import BM25Retriever

DOCS = [
    Document("therapy", "Statin therapy lowers cholesterol."),
    Document("therapeutic", "Therapeutic effects of statins in adults."),
    Document("theory", "A theory of everything, and of adults."),
    Document("studies", "Studies of the evening sky."),
    Document("garden", "Gardens and birds."),
]


@pytest.fixture
def bm25(tmp_path):
    return BM25Retriever.build(DOCS, tmp_path / "bm25")


def ids(hits) -> set[str]:
    return {hit.id for hit in hits}


def test_the_last_word_typed_matches_the_words_it_begins(bm25):
    typing = bm25.with_options(prefix=True)
    assert ids(bm25.search("gard", k=5)) == set()
    assert ids(typing.search("gard", k=5)) == {"garden"}
    assert ids(typing.search("statin thera", k=5)) == {"therapy", "therapeutic"}
    assert ids(typing.search("thera adults", k=5)) == {"therapeutic", "theory"}  # only the last word is a prefix
    assert ids(typing.search("gard ", k=5)) == set() and ids(typing.search("gard.", k=5)) == set()  # a word ended
    assert typing.highlight("statin thera", "therapeutic") == ["<em>Therapeutic</em> effects of <em>statins</em> in adults."]


def test_the_words_begun_weigh_the_commonest_ones_idf(bm25):
    typing = bm25.with_options(prefix=True)
    index = bm25.index
    idf = {term: float(index.idf()[index.vocab.index(term)]) for term in ("therapi", "therapeut", "theori")}
    weights = {t.term: t.weight for t in typing.analyze("the")}  # a stopword typed whole is a prefix too
    assert set(weights) == {"therapi", "therapeut", "theori"}
    assert weights == pytest.approx({term: min(idf.values()) for term in weights})  # one document each: all alike
    assert len(typing.with_options(prefix=True, max_expansions=2).analyze("the")) == 2
    found = typing.search("statin thera", k=1)[0]
    assert typing.explain("statin thera", found.id).score == pytest.approx(found.score, rel=1e-5)


def test_a_whole_word_typed_is_searched_as_ever(bm25):
    typing = bm25.with_options(prefix=True)
    for query in ("statin therapy", "garden birds", "evening sky"):
        assert [(h.id, h.score) for h in bm25.search(query + " ", k=5)] == [
            (h.id, h.score) for h in typing.search(query + " ", k=5)]
    plain = {hit.id: hit.score for hit in bm25.search("statin therapy", k=5)}
    typed = {hit.id: hit.score for hit in typing.search("statin therapy", k=5)}
    assert typed["therapy"] >= plain["therapy"]  # the word whole, and what else "therapy" begins


def test_words_added_later_are_begun_too(bm25):
    typing = bm25.with_options(prefix=True)
    assert ids(typing.search("zebr", k=5)) == set()
    bm25.add([Document("zebra", "Zebras graze.")])
    assert ids(typing.search("zebr", k=5)) == {"zebra"}


def test_the_cli_and_a_hybrid_take_prefix(bm25, tmp_path, tiny_bert):
    from semiret.search import HybridRetriever

    runner = CliRunner()
    found = runner.invoke(app, ["search", "--index", str(tmp_path / "bm25"), "gard", "--prefix", "--json"])
    assert found.exit_code == 0, found.output
    assert [hit["id"] for hit in json.loads(found.stdout)["hits"]] == ["garden"]
    hybrid = HybridRetriever.build(DOCS, tmp_path / "hybrid", model=str(tiny_bert))
    assert "garden" in ids(hybrid.with_options(prefix=True).search("gard", k=2))
