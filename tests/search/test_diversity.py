"""Diversified search (maximal marginal relevance: ``search(..., diversity=, candidates=)``, ``search
--diversity``, the service's ``"diversity"``): near-copies of a hit give way to other documents, 0 is the plain
ranking, each hit keeps its own score, the similarities are those of the vectors each index kind stores (IDF-weighted
term vectors, dense vectors, a hybrid's parts averaged), and what is refused."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from semiret.cli import app
from semiret.data import Document
from semiret.data.trec import read_trec_run
from semiret.errors import SemiretError, UnknownDocumentError
from semiret.indexes.dense import DenseIndex
from semiret.search import BM25Retriever, retriever_class
from semiret.search.diversity import maximal_marginal_relevance
from semiret.serving import ServeSettings, create_app
from semiret.types import Embeddings

from helpers import LocalClient, client_of

# three near-copies about statins, and three other documents that also match the query less well
DOCS = [
    Document("copy-1", "Statins lower the risk of colorectal cancer in a large cohort of adults.",
             metadata={"source": "a"}),
    Document("copy-2", "Statins lower the risk of colorectal cancer in a large cohort of older adults.",
             metadata={"source": "a"}),
    Document("copy-3", "Statins lower the risk of colorectal cancer in a large cohort of adults, again.",
             metadata={"source": "b"}),
    Document("other-1", "Statin users and the risk of liver disease: a registry study.", metadata={"source": "b"}),
    Document("other-2", "Cancer screening uptake in rural clinics.", metadata={"source": "b"}),
    Document("other-3", "Colorectal surgery outcomes after statin withdrawal.", metadata={"source": "a"}),
    Document("garden", "Morning birds sing in the garden.", metadata={"source": "a"}),
]
QUERY = "statins colorectal cancer risk"
COPIES = {"copy-1", "copy-2", "copy-3"}


@pytest.fixture
def bm25(tmp_path):
    return BM25Retriever.build(DOCS, tmp_path / "bm25")


def test_the_greedy_choice():
    scores = np.array([3.0, 2.9, 2.0, 1.0])
    alike = np.eye(4, dtype=np.float32)
    alike[0, 1] = alike[1, 0] = 0.99  # the second is a near-copy of the first
    assert maximal_marginal_relevance(scores, alike, 4, 0.0) == [0, 1, 2, 3]  # 0: the ranking
    assert maximal_marginal_relevance(scores, alike, 4, 0.5) == [0, 2, 3, 1]  # the copy last
    assert maximal_marginal_relevance(scores, alike, 2, 1.0) == [0, 2]  # 1: the best, then the least alike
    assert maximal_marginal_relevance(np.array([1.0, 1.0]), np.eye(2), 2, 0.3) == [0, 1]  # equal scores: rank order
    assert maximal_marginal_relevance(np.array([]), np.zeros((0, 0)), 3, 0.5) == []
    # relevance is a score over the best one, not rescaled over the candidates: the weakest candidate is not 0
    alike = np.eye(3, dtype=np.float32)
    alike[0, 1] = alike[1, 0] = 0.2
    assert maximal_marginal_relevance(np.array([10.0, 9.0, 8.0]), alike, 3, 0.5) == [0, 2, 1]
    assert maximal_marginal_relevance(np.array([-1.0, -2.0, -3.0]), alike, 3, 0.0) == [0, 1, 2]  # none positive


def test_near_copies_give_way(bm25):
    plain = bm25.search(QUERY, k=3)
    assert {hit.id for hit in plain} == COPIES  # what diversity is for: three copies of one finding
    diverse = bm25.search(QUERY, k=3, diversity=0.5)
    assert diverse[0].id == plain[0].id  # the best hit first, as ever
    assert len(COPIES & {hit.id for hit in diverse}) == 1
    own = {hit.id: hit.score for hit in bm25.search(QUERY, k=len(DOCS))}
    assert all(hit.score == pytest.approx(own[hit.id]) for hit in diverse)  # each hit keeps its own score
    assert [h.id for h in bm25.search(QUERY, k=3, diversity=0.0)] == [h.id for h in plain]
    batch = bm25.search([QUERY, "garden birds"], k=3, diversity=0.5)  # a batch, query by query
    assert batch.ids[0] == [h.id for h in diverse] and batch.ids[1][0] == "garden"
    assert diverse[0].text == DOCS[[d.id for d in DOCS].index(diverse[0].id)].text  # stored texts at hand


def test_candidates_bound_the_choice(bm25):
    # among the best 3 only (all copies) there is nothing else to pick
    assert {h.id for h in bm25.search(QUERY, k=3, diversity=0.9, candidates=3)} == COPIES
    assert len(bm25.search(QUERY, k=3, diversity=0.9, candidates=6)) == 3


def test_filters_and_thresholds_apply_first(bm25):
    hits = bm25.search(QUERY, k=3, diversity=0.5, filter={"source": "a"})
    assert hits and all(DOCS[[d.id for d in DOCS].index(h.id)].metadata["source"] == "a" for h in hits)
    floor = bm25.search(QUERY, k=4)[3].score
    assert all(h.score >= floor for h in bm25.search(QUERY, k=6, diversity=0.5, score_threshold=floor))


def test_term_vectors_weigh_terms_by_idf(bm25):
    index = bm25.index
    similar = index.similarities(["copy-1", "copy-2", "garden", "copy-1", "other-1"])
    assert similar.shape == (5, 5) and np.allclose(np.diag(similar), 1.0, atol=1e-5)
    assert similar[0, 1] > 0.7 and similar[0, 2] == pytest.approx(0.0)  # nothing in common
    assert similar[0, 3] == pytest.approx(1.0) and 0 < similar[0, 4] < 0.3
    # by hand: cosine of saturated term frequencies times IDF
    vectors = []
    for doc_id in ("copy-1", "other-1"):
        terms, values, _ = index.document_terms(doc_id)
        vector = np.zeros(index.vocab_size)
        vector[terms] = values * index.idf()[terms]
        vectors.append(vector / np.linalg.norm(vector))
    assert similar[0, 4] == pytest.approx(float(vectors[0] @ vectors[1]), abs=1e-6)
    # the rows a segment keeps document-major are the postings document_terms reads, one document at a time
    segment = index.segments[0]
    offsets, terms, values = segment.document_rows()
    for local, doc_id in enumerate(segment.document_ids(np.arange(segment.n_docs))):
        found_terms, found_values, _ = index.document_terms(doc_id)
        assert terms[offsets[local]:offsets[local + 1]].tolist() == found_terms.tolist()
        assert np.allclose(values[offsets[local]:offsets[local + 1]], found_values)
    with pytest.raises(UnknownDocumentError, match="nope"):
        index.similarities(["copy-1", "nope"])


def test_documents_added_and_deleted_later(bm25):
    bm25.add([Document("copy-4", "Statins lower the risk of colorectal cancer in a large cohort of adults!")])
    bm25.delete(["copy-2"])
    hits = bm25.search(QUERY, k=3, diversity=0.7)
    assert "copy-2" not in {h.id for h in hits}
    assert len((COPIES | {"copy-4"}) & {h.id for h in hits}) == 1


@pytest.mark.parametrize("name, options", [("bot", {}), ("idf", {"min_idf": 0})])
def test_token_indexes(tmp_path, name, options):
    retriever = retriever_class(name).build(DOCS, tmp_path / name).with_options(**options)
    assert len(COPIES & {h.id for h in retriever.search(QUERY, k=3, diversity=0.6)}) == 1


def test_dense_vectors(tmp_path):
    vectors = np.array([[1, 0, 0], [1, 0.05, 0], [0, 1, 0], [-1, 0, 0]], np.float32)
    index = DenseIndex.build(tmp_path / "dense", "dense", [Embeddings(["a", "b", "c", "d"], vectors)], dim=3,
                             analyzer={"type": "test"})
    similar = index.similarities(["a", "b", "c", "d"])
    assert similar[0, 1] == pytest.approx(float(vectors[1] @ vectors[0] / np.linalg.norm(vectors[1])))
    assert similar[0, 2] == pytest.approx(0.0) and similar[0, 3] == pytest.approx(-1.0)


def test_a_dense_retriever_and_a_hybrid(tmp_path, tiny_docs, tiny_bert):
    dense = retriever_class("dense").build(tiny_docs, tmp_path / "dense", model=str(tiny_bert))
    plain = dense.search("cats and dogs", k=len(tiny_docs))
    assert [h.id for h in dense.search("cats and dogs", k=len(tiny_docs), diversity=0.0)] == [h.id for h in plain]
    assert sorted(h.id for h in dense.search("cats and dogs", k=len(tiny_docs), diversity=0.7)) == sorted(
        h.id for h in plain)  # every candidate picked once
    hybrid = retriever_class("hybrid").build(tiny_docs, tmp_path / "hybrid", neural="dense", model=str(tiny_bert))
    ids = [d.id for d in tiny_docs[:3]]
    parts = [part.similarities(ids) for part in hybrid.index.parts.values()]
    assert np.allclose(hybrid.index.similarities(ids), (parts[0] + parts[1]) / 2, atol=1e-6)
    assert len(hybrid.search("cats and dogs", k=2, diversity=0.5)) == 2


def test_what_is_refused(bm25, tmp_path):
    for wrong in (-0.1, 1.5, float("nan"), True, "0.5"):
        with pytest.raises(SemiretError, match="diversity"):
            bm25.search(QUERY, diversity=wrong)
    for wrong in (0, -3, 2.5, True):
        with pytest.raises(SemiretError, match="candidates"):
            bm25.search(QUERY, diversity=0.5, candidates=wrong)
    with pytest.raises(SemiretError, match="at least k"):
        bm25.search(QUERY, k=5, diversity=0.5, candidates=3)
    with pytest.raises(SemiretError, match="give diversity"):
        bm25.search(QUERY, candidates=10)
    assert len(bm25.search(QUERY, k=np.int64(3), diversity=np.float32(0.5), candidates=np.int64(5))) == 3
    with pytest.raises(SemiretError, match="not both"):
        bm25.search(QUERY, diversity=0.5, group_by="source")


def test_the_command_line(bm25, tmp_path):
    runner = CliRunner()
    index = str(bm25.index.path)
    result = runner.invoke(app, ["search", "--index", index, QUERY, "-k", "3", "--diversity", "0.5", "--json"])
    assert result.exit_code == 0, result.output
    hits = json.loads(result.stdout)["hits"]
    assert [h["id"] for h in hits] == [h.id for h in bm25.search(QUERY, k=3, diversity=0.5)]
    result = runner.invoke(app, ["search", "--index", index, QUERY, "-k", "3", "--diversity", "0.5", "--run",
                                 str(tmp_path / "run.trec")])
    assert result.exit_code == 0, result.output
    run = read_trec_run(tmp_path / "run.trec")["1"]  # runs are read by score: they score by the order picked
    assert sorted(run, key=run.get, reverse=True) == [h["id"] for h in hits] and sorted(run.values()) == [1, 2, 3]
    result = runner.invoke(app, ["search", "--index", index, QUERY, "--diversity", "2"])
    assert result.exit_code != 0 and "from 0 to 1" in result.output
    result = runner.invoke(app, ["search", "--index", index, "--like", "copy-1", "--diversity", "0.5"])
    assert result.exit_code != 0 and "--diversity" in result.output


def test_eval_measures_what_variety_costs(bm25, tmp_path):
    from semiret.evaluation.evaluate import evaluate
    from helpers import write_beir

    queries = {"q1": QUERY, "q2": "statin liver disease"}
    qrels = {"q1": {"copy-1": 1, "other-3": 1, "other-1": 1}, "q2": {"other-1": 1}}
    data = write_beir(tmp_path / "data", docs=DOCS, queries=queries, qrels=qrels)
    index = tmp_path / "index"
    plain = evaluate(data, "bm25", index=index, depth=3, measures=["R@3"])
    diverse = evaluate(data, "bm25", index=index, depth=3, measures=["R@3"], diversity=0.5, run_path=tmp_path / "r")
    assert plain["R@3"] < diverse["R@3"]  # the copies made way for other relevant documents
    assert diverse["options"] == {"diversity": 0.5} and set(diverse) == set(plain)  # one key set
    run = read_trec_run(tmp_path / "r")["q1"]
    assert sorted(run, key=run.get, reverse=True) == [h.id for h in bm25.search(QUERY, k=3, diversity=0.5)]
    for wrong, message in (({"diversity": 3}, "from 0 to 1"), ({"candidates": 5}, "give --diversity"),
                           ({"diversity": 0.5, "chunk_words": 50}, "chunk-words")):
        with pytest.raises(SemiretError, match=message):
            evaluate(data, "bm25", index=tmp_path / "other", **wrong)
    assert not (tmp_path / "other").exists()


def test_the_service_and_its_client(bm25):
    settings = ServeSettings({"docs": str(bm25.index.path)}, write_process=False, max_k=50)
    with LocalClient(create_app(settings)) as http:
        expected = [h.id for h in bm25.search(QUERY, k=3, diversity=0.5)]
        answer = http.post("/indexes/docs/search", json={"queries": [QUERY], "k": 3, "diversity": 0.5})
        assert answer.status_code == 200, answer.text
        assert [h["id"] for h in answer.json()["results"][0]] == expected
        paged = http.post("/indexes/docs/search", json={"queries": [QUERY], "k": 2, "offset": 1, "diversity": 0.5})
        assert [h["id"] for h in paged.json()["results"][0]] == expected[1:]  # pages of one diversified ranking
        client = client_of(http)
        assert [h.id for h in client.search("docs", QUERY, k=3, diversity=0.5, candidates=20)] == expected
        served = client.search("docs", [QUERY], k=3, diversity=0.5)  # a run from it ranks as picked, as in Python
        run = served.as_run(["q"])["q"]
        assert sorted(run, key=run.get, reverse=True) == expected
        assert bm25.search([QUERY], k=3, diversity=0.5).at_least(0.0).diversified
        pages = [http.post("/indexes/docs/search", json={"queries": [QUERY], "k": 2, "offset": offset,
                                                         "diversity": 0.5, "candidates": 6}).json()["results"][0]
                 for offset in (0, 2, 4)]
        whole = bm25.search(QUERY, k=6, diversity=0.5, candidates=6)
        assert [h["id"] for page in pages for h in page] == [h.id for h in whole]
        for body, field in (({"diversity": 0.5, "group_by": "source"}, "diversity"),
                            ({"candidates": 10}, "candidates"),
                            ({"diversity": 0.5, "candidates": 51}, "candidates"),
                            ({"diversity": 0.5, "k": 3, "offset": 2, "candidates": 4}, "candidates"),
                            ({"diversity": 1.5}, "diversity"),
                            ({"diversity": "0.5"}, "diversity")):
            answer = http.post("/indexes/docs/search", json={"queries": [QUERY], **body})
            assert answer.status_code == 422, body
            assert field in json.dumps(answer.json()["detail"])
