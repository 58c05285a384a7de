"""RM3 pseudo-relevance feedback over BM25 (``rm3=True``, ``--rm3``): the relevance model by hand, the expansion
finding a document the query's own words miss, filters, stored texts, options and the command line."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from semiret.cli import app
from semiret.data import Document
from semiret.errors import SemiretError
from semiret.search import BM25Retriever, open_retriever
from semiret.search.feedback import FeedbackTerms, RM3Options, interpolate, relevance_model
from semiret.text.analyzer import TermDictionary
from semiret.types import SparseQuery

from helpers import write_jsonl

FILLER = [Document(f"f{i}", f"filler{i} word{i} number{i} padding{i}") for i in range(40)]
"""Documents that share nothing, so that the relevance model's rule against terms in over a tenth of the corpus
leaves the few words under test in."""
CORPUS = FILLER + [
    Document("car", "car automobile automobile automobile engine", metadata={"kind": "review", "vehicle": True}),
    Document("auto", "automobile engine repairs", metadata={"kind": "manual", "vehicle": True}),
    Document("garden", "garden roses and tulips"),
]


@pytest.fixture
def bm25(tmp_path):
    return BM25Retriever.build(CORPUS, tmp_path / "bm25")


def test_the_relevance_model_by_hand():
    dictionary = TermDictionary(["a", "bb", "cc", "dd", "ee", "x" * 21])
    df = np.array([1, 1, 1, 1, 50, 1])  # "ee" is in half the corpus, "a" too short, the last too long
    allowed = FeedbackTerms().allowed(dictionary, df, n_docs=100)
    assert allowed.tolist() == [False, True, True, True, False, False]
    documents = [np.array([1, 1, 1, 2, 0, 4, 5]), np.array([2, 3, 3])]
    model = relevance_model(documents, [2.0, 1.0], allowed, fb_terms=10)
    # document 1: bb 3/4, cc 1/4 (x2.0); document 2: cc 1/3, dd 2/3 (x1.0)
    raw = {1: 1.5, 2: 0.5 + 1 / 3, 3: 2 / 3}
    total = sum(raw.values())
    assert model.terms.tolist() == [1, 2, 3]
    np.testing.assert_allclose(model.weights, [raw[t] / total for t in (1, 2, 3)], rtol=1e-6)
    top = relevance_model(documents, [2.0, 1.0], allowed, fb_terms=1)
    # each document cut to its most frequent term first: bb from the first, dd from the second
    assert top.terms.tolist() == [1] and top.weights.tolist() == [1.0]
    assert len(relevance_model(documents, [2.0, 1.0], allowed[:1], 10).terms) == 0  # words not yet committed


def test_the_term_rule_follows_a_growing_and_a_truncated_vocabulary():
    dictionary, terms = TermDictionary(["bb"]), FeedbackTerms()
    assert terms.allowed(dictionary, np.array([1]), 100).tolist() == [True]
    dictionary.lookup(["x", "cc"], add=True)
    assert terms.allowed(dictionary, np.array([1, 1, 1]), 100).tolist() == [True, False, True]
    dictionary.truncate(1)
    dictionary.lookup(["dd", "y" * 30], add=True)  # the same count of terms as before, others
    assert terms.allowed(dictionary, np.array([1, 1, 1]), 100).tolist() == [True, True, False]
    assert terms.allowed(dictionary, np.array([1, 1]), 100).tolist() == [True, True]  # uncommitted: not taken


def test_interpolation_normalises_the_query_and_keeps_its_share():
    query = SparseQuery(np.array([3, 7], np.int32), np.array([2.0, 2.0], np.float32))
    model = SparseQuery(np.array([7, 9], np.int32), np.array([0.75, 0.25], np.float32))
    mixed = interpolate(query, model, 0.6)
    assert mixed.terms.tolist() == [3, 7, 9]
    np.testing.assert_allclose(mixed.weights, [0.3, 0.3 + 0.4 * 0.75, 0.4 * 0.25], rtol=1e-6)
    assert interpolate(query, SparseQuery(np.empty(0, np.int32), np.empty(0, np.float32)), 0.6) is query
    # a query of 8 terms, 4 of them unknown to the index: its known terms keep their share of 8, as Anserini's
    np.testing.assert_allclose(interpolate(query, model, 0.6, query_terms=8).weights,
                               [0.15, 0.15 + 0.4 * 0.75, 0.4 * 0.25], rtol=1e-6)


def test_unknown_query_words_count_in_the_original_query(bm25):
    expanded = bm25.with_options(rm3=True, fb_docs=1)
    alone, diluted = expanded.search("car", k=2), expanded.search("car zzzunknown", k=2)
    assert [h.id for h in alone] == [h.id for h in diluted] == ["car", "auto"]
    assert diluted[0].score < alone[0].score and diluted[1].score == pytest.approx(alone[1].score)


def test_rm3_finds_a_document_the_query_words_miss(bm25):
    assert [h.id for h in bm25.search("car", k=5)] == ["car"]
    expanded = bm25.with_options(rm3=True, fb_docs=1)
    assert not expanded.query_side.searches_postings and bm25.query_side.searches_postings  # hybrid: no one pass
    hits = expanded.search("car", k=5)
    assert [h.id for h in hits][:2] == ["car", "auto"]
    assert expanded.with_options(rm3=True, fb_docs=1, original_query_weight=1.0).search("car", k=5)[0].id == "car"
    assert [h.id for h in expanded.with_options(rm3=True, original_query_weight=1.0).search("car", k=5)] == ["car"]


def test_rm3_takes_its_feedback_from_documents_that_pass_the_filter(bm25):
    expanded = bm25.with_options(rm3=True, fb_docs=1)
    assert [h.id for h in expanded.search("car automobile", k=5, filter={"kind": "review"})] == ["car"]
    assert [h.id for h in expanded.search("car automobile", k=5, filter={"kind": "manual"})] == ["auto"]
    # "car" alone finds no manual, so there is no feedback to expand it by (not the review's "automobile")
    assert expanded.search("car", k=5, filter={"kind": "manual"}) == []
    assert [h.id for h in expanded.search("car", k=5)][:2] == ["car", "auto"]
    # a filter passing 2 of 43 documents: a term's share is still of the whole corpus, as its frequency is
    assert [h.id for h in expanded.search("car", k=5, filter={"vehicle": True})] == ["car", "auto"]


def test_rm3_sees_documents_added_and_deleted(bm25):
    expanded = bm25.with_options(rm3=True, fb_docs=1)
    expanded.add([Document("sedan", "sedan automobile")])
    assert "sedan" in [h.id for h in expanded.search("car", k=5)]
    expanded.delete(["car"])
    assert expanded.search("car", k=5) == []


def test_rm3_needs_stored_texts_and_sound_options(tmp_path, bm25):
    bare = BM25Retriever.build(CORPUS, tmp_path / "bare", store_texts=False)
    with pytest.raises(SemiretError, match="no stored documents.*RM3"):
        bare.with_options(rm3=True)
    for options, message in [({"fb_docs": 0}, "fb_docs"), ({"fb_docs": 1001}, "fb_docs"), ({"fb_terms": 0}, "fb_terms"),
                             ({"fb_terms": 10**12}, "fb_terms .*between 1 and 1000"),
                             ({"original_query_weight": 1.5}, "original_query_weight")]:
        with pytest.raises(SemiretError, match=message):
            open_retriever(bm25.index.path, rm3=True, **options)
    assert RM3Options().fb_docs == 10 and RM3Options().fb_terms == 10 and RM3Options().original_query_weight == 0.5


def test_rm3_from_the_command_line(tmp_path):
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [d.to_record() for d in CORPUS])
    runner = CliRunner()
    built = runner.invoke(app, ["index", "--data", str(corpus), "--out", str(tmp_path / "idx")])
    assert built.exit_code == 0, built.output
    found = runner.invoke(app, ["search", "--index", str(tmp_path / "idx"), "--rm3", "--fb-docs", "1", "--json",
                                "car"])
    assert found.exit_code == 0, found.output
    assert [hit["id"] for hit in json.loads(found.output.splitlines()[0])["hits"]][:2] == ["car", "auto"]


def _vector_documents(n=40, dim=8, seed=0) -> list[Document]:
    rng = np.random.default_rng(seed)
    return [Document(f"d{i}", f"text {i}", metadata={"even": i % 2 == 0}, vector=rng.normal(size=dim))
            for i in range(n)]


def _moved_by_hand(query, documents, method, alpha=0.9, beta=0.1):
    """The query vector moved towards ``documents``' (unit) vectors as vector PRF moves it, its length kept."""
    feedback = np.stack([d.vector / np.linalg.norm(d.vector) for d in documents])
    new = (query + feedback.sum(axis=0)) / (len(feedback) + 1) if method == "avg" else \
        alpha * query + beta * feedback.mean(axis=0)
    return new * np.linalg.norm(query) / np.linalg.norm(new)


@pytest.mark.parametrize("method, options", [("avg", {}), ("rocchio", {"rocchio_alpha": 0.4, "rocchio_beta": 0.6})])
def test_vector_prf_searches_the_query_moved_towards_its_best_documents(tmp_path, method, options):
    from semiret.search import VectorsRetriever

    documents = _vector_documents()
    VectorsRetriever.build(documents, tmp_path / "v")
    plain = open_retriever(tmp_path / "v")
    prf = open_retriever(tmp_path / "v", prf_depth=3, prf_method=method, **options)
    query = np.random.default_rng(5).normal(size=8)
    query /= np.linalg.norm(query)
    first = [documents[int(h.id[1:])] for h in plain.search(query, k=3)]
    moved = _moved_by_hand(query, first, method, *(options.values()))
    expected = plain.search(moved, k=5)
    found = prf.search(query, k=5)
    assert [h.id for h in found] == [h.id for h in expected]
    np.testing.assert_allclose([h.score for h in found], [h.score for h in expected], rtol=1e-5)
    assert [h.id for h in found] != [h.id for h in plain.search(query, k=5)]  # (it moved the ranking)
    odd = [documents[int(h.id[1:])] for h in plain.search(query, k=3, filter={"even": False})]
    filtered = prf.search(query, k=5, filter={"even": False})  # feedback from the documents that pass
    assert [h.id for h in filtered] == [h.id for h in plain.search(_moved_by_hand(query, odd, method,
                                                                                 *(options.values())),
                                                                   k=5, filter={"even": False})]


def test_vector_prf_over_a_dense_encoder_and_its_options(tmp_path, tiny_docs, tiny_bert):
    from semiret.search import DenseRetriever

    DenseRetriever.build(tiny_docs, tmp_path / "dense", model=str(tiny_bert))
    plain, prf = open_retriever(tmp_path / "dense"), open_retriever(tmp_path / "dense", prf_depth=2)
    queries = ["cats and dogs", "statins"]
    moved = prf.query_side.options.moved(plain.encode_queries(queries), [
        np.stack([plain.index.get_vector(h.id) for h in hits]) for hits in plain.search(queries, k=2)])
    assert prf.search(queries, k=3).ids == plain.search(moved, k=3).ids
    for bad, message in (({"prf_depth": -1}, "prf_depth"), ({"prf_method": "mean"}, "avg, rocchio"),
                         ({"prf_depth": 2, "rocchio_beta": float("nan")}, "rocchio_beta")):
        with pytest.raises(SemiretError, match=message):
            open_retriever(tmp_path / "dense", **bad)
    lines = CliRunner().invoke(app, ["search", "--index", str(tmp_path / "dense"), "--prf-depth", "2", "--json",
                                     "-k", "3", *queries])
    assert lines.exit_code == 0, lines.output
    assert [[hit["id"] for hit in json.loads(line)["hits"]] for line in lines.stdout.splitlines()] == \
        prf.search(queries, k=3).ids


def test_vector_prf_leaves_out_a_feedback_document_deleted_between_the_two_searches():
    """An index that pins no commit (Milvus): a first search's hit deleted before its vector is read is left out of
    the feedback, not a crash."""
    from semiret.search.neural import AnnSearchOptions
    from semiret.types import SearchHits

    class Deleting:
        searched = []

        def search(self, vectors, k, **options):
            self.searched.append(np.array(vectors))
            return SearchHits([["kept", "gone"][:k]], [[1.0, 0.5][:k]])

        def get_vectors(self, doc_ids):
            return {doc_id: np.array([0.0, 1.0], np.float32) for doc_id in doc_ids if doc_id == "kept"}

    index = Deleting()
    AnnSearchOptions(prf_depth=2).search(index, np.array([[1.0, 0.0]], np.float32), 1, 1)
    np.testing.assert_allclose(index.searched[1], [[np.sqrt(0.5), np.sqrt(0.5)]], atol=1e-6)  # (query + kept) / 2
