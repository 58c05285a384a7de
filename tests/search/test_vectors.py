"""Vectors brought by the user: the ``vectors`` retriever, and searches by query vectors over any dense index."""

import json

import numpy as np
import pytest

from semiret.data.collection import Document, iter_corpus, query_vectors
from semiret.errors import DataFormatError, SemiretError
from semiret.search import BM25Retriever, DenseRetriever, VectorsRetriever, open_retriever


def _documents(n=40, dim=8, seed=0):
    rng = np.random.default_rng(seed)
    return [Document(f"d{i}", f"text number {i}", metadata={"even": i % 2 == 0}, vector=rng.normal(size=dim))
            for i in range(n)]


def _exact(documents, query, k, cosine=True):
    matrix = np.stack([d.vector for d in documents]).astype(np.float64)
    if cosine:
        matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
        query = query / np.linalg.norm(query)
    scores = matrix @ query
    order = np.argsort(-scores, kind="stable")[:k]
    return [documents[i].id for i in order], scores[order]


@pytest.mark.parametrize("similarity", ["cosine", "dot"])
def test_search_finds_the_exact_neighbours_with_their_scores(tmp_path, similarity):
    documents = _documents()
    retriever = VectorsRetriever.build(documents, tmp_path / "v", similarity=similarity)
    query = np.random.default_rng(1).normal(size=8)
    ids, scores = _exact(documents, query, 5, cosine=similarity == "cosine")
    hits = retriever.search(query, k=5)
    assert [h.id for h in hits] == ids
    np.testing.assert_allclose([h.score for h in hits], scores, rtol=1e-5)
    assert retriever.index.meta["dim"] == 8 and retriever.index.meta["analyzer"]["similarity"] == similarity


def test_queries_as_arrays_lists_and_batches(tmp_path):
    documents = _documents()
    retriever = VectorsRetriever.build(documents, tmp_path / "v")
    one = documents[3].vector
    assert retriever.search(one, k=1)[0].id == "d3"
    assert retriever.search([float(x) for x in one], k=1)[0].id == "d3"  # a list of numbers: one query
    batch = retriever.search(np.stack([documents[3].vector, documents[7].vector]), k=1)
    assert batch.ids == [["d3"], ["d7"]]
    assert retriever.search([list(documents[7].vector), documents[3].vector], k=1).ids == [["d7"], ["d3"]]


def test_filters_groups_diversity_and_recommend(tmp_path):
    documents = _documents()
    retriever = VectorsRetriever.build(documents, tmp_path / "v")
    query = documents[3].vector  # an odd document
    assert all(h.id in {d.id for d in documents[::2]} for h in retriever.search(query, k=5, filter={"even": True}))
    grouped = retriever.search(query, k=2, group_by="even")
    assert sorted(h.group for h in grouped) == [False, True]
    assert len(retriever.search(query, k=4, diversity=0.5)) == 4
    recommended = retriever.recommend(["d3"], k=3)
    assert "d3" not in [h.id for h in recommended]
    assert [h.id for h in recommended] == [h.id for h in retriever.search(query, k=4)][1:]


def test_added_documents_are_found_and_deleted_ones_are_not(tmp_path):
    retriever = VectorsRetriever.build(_documents(), tmp_path / "v", ann="hnsw")
    fresh = np.ones(8)
    retriever.add([Document("fresh", "new", vector=fresh)])
    reopened = open_retriever(tmp_path / "v")
    assert reopened.name == "vectors" and reopened.search(fresh, k=1)[0].id == "fresh"
    reopened.delete(["fresh"])
    assert "fresh" not in [h.id for h in reopened.search(fresh, k=5)]


def test_an_empty_index_takes_its_dimension_from_dim(tmp_path):
    with pytest.raises(SemiretError, match="dimension"):
        VectorsRetriever.build([], tmp_path / "none")
    assert not (tmp_path / "none").exists()
    retriever = VectorsRetriever.build([], tmp_path / "v", dim=3)
    retriever.add([Document("a", "", vector=[0, 0, 1]), Document("b", "", vector=[0, 1, 0])])
    assert retriever.search([0, 0.1, 1], k=1)[0].id == "a"


def test_bad_vectors_are_refused_naming_the_document_and_the_index_is_untouched(tmp_path):
    retriever = VectorsRetriever.build(_documents(5), tmp_path / "v")
    for bad, message in (([Document("x", "no vector")], "'x' has no vector"),
                         ([Document("x", "", vector=[1.0, 2.0])], "'x' has a 2-dimensional vector"),
                         ([Document("x", "", vector=[0.0] * 8)], "'x' has a zero vector")):
        with pytest.raises(SemiretError, match=message):
            retriever.add(bad)
    assert retriever.index.n_docs == 5
    for bad, message in (([1.0, float("nan")], "NaN"), (np.zeros((2, 2, 2, 2)), "shape"),
                         (np.zeros((2, 2, 2)), "these are token vectors .* multivectors retriever"),
                         ([[1.0, "a"]], "query vector 0 must hold numbers only")):
        with pytest.raises(SemiretError, match=message):
            retriever.search(bad)
    with pytest.raises(SemiretError, match="holds 8-dimensional vectors; query vector 0 has 3"):
        retriever.search([1.0, 2.0, 3.0])
    with pytest.raises(SemiretError, match="no model to embed query texts"):
        retriever.search("a text")
    with pytest.raises(SemiretError, match="share that one vector"):
        VectorsRetriever.build(_documents(5), tmp_path / "passages", chunking=2)
    with pytest.raises(SemiretError, match="similarity"):
        VectorsRetriever.build(_documents(5), tmp_path / "l2", similarity="l2")


def test_a_document_vector_is_checked_where_it_is_made():
    assert Document("a", "t", vector=[1, 2]).vector.dtype == np.float32
    for bad in ([], [[[1.0]]], [[1.0], [1.0, 2.0]], [[1.0], ["x"]], ["1"], [True, False], [float("inf")], "1,2"):
        with pytest.raises(SemiretError, match="document 'a'"):
            Document("a", "t", vector=bad)


def test_a_corpus_line_brings_its_vector_never_kept_as_metadata(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"_id": "a", "text": "x", "source": "s", "vector": [1, 0]}) + "\n"
                      + json.dumps({"_id": "b", "vector": [0, 1]}) + "\n")  # a vector alone is a document
    documents = list(iter_corpus(corpus, metadata_fields=["*"]))
    assert [list(d.vector) for d in documents] == [[1, 0], [0, 1]]
    assert documents[0].metadata == {"source": "s"}
    corpus.write_text(json.dumps({"_id": "a", "text": "x", "vector": [1, "x"]}) + "\n")
    with pytest.raises(DataFormatError, match=r"corpus.jsonl:1: field 'vector' must hold numbers only, got str at "
                                              "position 1"):
        list(iter_corpus(corpus))


def test_query_vectors_reads_only_vectors():
    assert query_vectors("text") is None and query_vectors(["a", "b"]) is None and query_vectors([]) is None
    vectors, single = query_vectors(np.ones(3))
    assert single and len(vectors) == 1
    vectors, single = query_vectors([[1, 2], [3, 4]])
    assert not single and [list(v) for v in vectors] == [[1, 2], [3, 4]]


def test_a_dense_index_is_searched_by_vectors_as_by_its_queries(tmp_path, tiny_docs, tiny_bert):
    retriever = DenseRetriever.build(tiny_docs, tmp_path / "dense", model=str(tiny_bert))
    texts = [tiny_docs[0].text, tiny_docs[2].text]
    by_text = retriever.search(texts, k=3)
    by_vector = retriever.search(retriever.encode_queries(texts) * 3.0, k=3)  # scaled: normalised as the encoder's
    assert by_vector.ids == by_text.ids
    if retriever.document_side.config.get("normalize"):
        np.testing.assert_allclose(by_vector.scores, by_text.scores, rtol=1e-4)
    with pytest.raises(SemiretError, match="operators"):
        retriever.search(np.ones(retriever.index.meta["dim"]), operators=True)


def test_a_vector_is_refused_by_an_index_searched_by_texts(tmp_path, tiny_docs):
    retriever = BM25Retriever.build(tiny_docs, tmp_path / "bm25")
    with pytest.raises(SemiretError, match="searched by query texts"):
        retriever.search([0.1, 0.2])


def test_a_sync_replaces_the_documents_whose_vectors_alone_changed(tmp_path):
    documents = _documents(6)
    retriever = VectorsRetriever.build(documents, tmp_path / "v")
    moved = Document("d2", documents[2].text, metadata=documents[2].metadata, vector=np.ones(8))
    counts = retriever.sync([*documents[:2], moved, *documents[3:]])
    assert (counts.unchanged, counts.replaced, counts.added, counts.deleted) == (5, 1, 0, 0)
    assert retriever.search(np.ones(8), k=1)[0].id == "d2"
    assert retriever.sync([*documents[:2], moved, *documents[3:]]).unchanged == 6


def test_an_array_of_strings_is_queries_not_a_vector(tmp_path, tiny_docs):
    retriever = BM25Retriever.build(tiny_docs, tmp_path / "bm25")
    texts = ["cats and dogs", "statins"]
    for given in (np.array(texts), np.array(texts, dtype=object)):  # a table's column (df["query"].values)
        assert retriever.search(given, k=2).ids == retriever.search(texts, k=2).ids
