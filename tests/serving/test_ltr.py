"""A learned ranking in the service (``semiret serve --ltr DIR``): a search's ``"rerank"`` ranks its best hits by
the server's learned ranking, as ``Retriever.search(rerank=LearnedRanking.load(DIR))`` does in Python, its feature
indexes read as they stand at each search; what it refuses at start and per search."""

from __future__ import annotations

import json
import shutil
import sys

import numpy as np
import pytest

from semiret.errors import SemiretError
from semiret.evaluation.learned_ranking import fit_learned_ranking
from semiret.search import open_retriever, retriever_class
from semiret.search.learned_ranking import LearnedRanking, LearnedRankingConfig
from semiret.serving import ServeSettings, create_app

from helpers import LocalClient, client_of, invoke_cli, ltr_corpus

DEPTH = 10
QUERIES = ["topic3", "topic7 filler2", "topic12"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A first stage (BM25 over the texts), a feature index (BM25 over the titles), a learned ranking of the first
    stage's best 10 hits saved in ``ltr``, and an index of another retriever (idf) in a data directory."""
    root = tmp_path_factory.mktemp("served-ltr")
    docs, queries, qrels = ltr_corpus()
    texts = retriever_class("bm25").build(docs, root / "texts", text_fields="text")
    titles = retriever_class("bm25").build(docs, root / "titles", text_fields="title")
    config = LearnedRankingConfig(depth=DEPTH, trees=30, min_leaf_documents=5, dev_fraction=0)
    ranking, _ = fit_learned_ranking(texts, [titles], queries, qrels, config)
    ranking.save(root / "ltr")
    retriever_class("idf").build(docs[:20], root / "data" / "other")
    return root, texts


def _served(root, **settings) -> LocalClient:
    return LocalClient(create_app(ServeSettings({"texts": str(root / "texts")}, write_process=False,
                                                ltr=str(root / "ltr"), **settings)))


def _search(http, index: str = "texts", **body):
    return http.post(f"/indexes/{index}/search", json={"queries": QUERIES, "k": 5, **body})


def test_a_search_asks_for_the_server_s_learned_ranking(trained):
    root, texts = trained
    expected = texts.search(QUERIES, k=5, rerank=LearnedRanking.load(root / "ltr"))
    plain = texts.search(QUERIES, k=5)
    assert expected.ids != plain.ids  # (the titles reorder the first stage's hits)
    with _served(root) as http:
        for rerank in (True, {}, {"depth": DEPTH}):  # a depth, where given, is the one it was trained with
            answer = _search(http, rerank=rerank)
            assert answer.status_code == 200, answer.text
            results = answer.json()["results"]
            assert [[hit["id"] for hit in hits] for hits in results] == expected.ids
            assert np.allclose([[hit["score"] for hit in hits] for hits in results], expected.scores, rtol=1e-6)
        unranked = _search(http).json()["results"]  # "rerank": false, the default: the first stage's own ranking
        assert [[hit["id"] for hit in hits] for hits in unranked] == plain.ids
        assert np.allclose([[hit["score"] for hit in hits] for hits in unranked], plain.scores, rtol=1e-6)
        found = client_of(http).search("texts", QUERIES[0], k=5, rerank=True, with_text=True)
        assert [hit.id for hit in found] == expected.ids[0] and found[0].text
        page = http.post("/indexes/texts/search", json={"queries": [QUERIES[0]], "k": 2, "offset": 1,
                                                        "rerank": True}).json()["results"][0]
        assert [hit["id"] for hit in page] == expected.ids[0][1:3]  # pages of one ranking
        assert http.get("/indexes/texts").json()["rerank"] == {
            "kind": "learned-ranking", "depth": DEPTH, "features": ["bm25:titles"], "first_stage": "bm25"}
        for body, problem in (({"rerank": {"depth": 20}}, f"ranks the best {DEPTH} hits, as deep as it was trained"),
                              ({"k": 8, "offset": 3, "rerank": True}, "k + offset (11) is more than the 10 hits"),
                              ({"rerank": True, "group_by": "kind"}, "not also grouped, diversified or boosted"),
                              ({"rerank": True, "explain": True}, "leave out explain")):
            refused = _search(http, **body)
            assert refused.status_code == 422 and problem in refused.json()["detail"][0]["msg"], body
            assert refused.json()["detail"][0]["loc"] == ["body", "rerank"]
        # the feature index as it stands at each search: the title that ranked t3-0 first, deleted meanwhile
        open_retriever(root / "titles").delete(["t3-0"])
        now = texts.search(QUERIES[:1], k=5, rerank=LearnedRanking.load(root / "ltr"))
        assert now.ids[0] != expected.ids[0]
        answer = http.post("/indexes/texts/search", json={"queries": QUERIES[:1], "k": 5, "rerank": True})
        assert [hit["id"] for hit in answer.json()["results"][0]] == now.ids[0]


def test_another_first_stage_is_refused_at_start_or_per_index(trained, caplog):
    root, _ = trained
    with pytest.raises(SemiretError, match="can rank no served index's hits: .* trained on the scores of a bm25 "
                                           "first stage; .* is searched by idf"):
        create_app(ServeSettings({"other": str(root / "data" / "other")}, write_process=False, ltr=str(root / "ltr")))
    with caplog.at_level("WARNING"), _served(root, data_dir=str(root / "data")) as http:
        assert "index 'other': its searches' \"rerank\" is refused" in caplog.text
        refused = _search(http, "other", rerank=True)
        assert refused.status_code == 422
        message = refused.json()["detail"][0]["msg"]
        assert "a bm25 first stage; index 'other' is searched by idf" in message and str(root) not in message
        assert http.get("/indexes/other").json()["rerank"] is None
        assert _search(http, "other").status_code == 200 and _search(http, rerank=True).status_code == 200


def test_what_the_server_refuses_to_start_with(trained, tmp_path, monkeypatch):
    root, _ = trained
    index = {"texts": str(root / "texts")}
    with pytest.raises(SemiretError, match="--cross-encoder and --ltr each rank searches' hits again: give one"):
        ServeSettings(index, cross_encoder="some-model", ltr=str(root / "ltr"))
    refused = invoke_cli("serve", "--index", root / "texts", "--colbert", "minilm", "--ltr", root / "ltr", ok=False)
    assert "--colbert and --ltr each rank" in refused.output
    with pytest.raises(SemiretError, match="is not a learned ranking"):
        create_app(ServeSettings(index, write_process=False, ltr=str(root / "titles")))
    moved = tmp_path / "moved"
    shutil.copytree(root / "ltr", moved)
    record = json.loads((moved / "learned-ranking.json").read_text())
    record["feature_indexes"][0]["path"] = str(tmp_path / "gone")
    (moved / "learned-ranking.json").write_text(json.dumps(record))
    with pytest.raises(SemiretError, match="its feature index .*gone is not there"):
        create_app(ServeSettings(index, write_process=False, ltr=str(moved)))
    with pytest.raises(SemiretError, match=f"ranks the best {DEPTH} hits .* more than --max-k 5"):
        create_app(ServeSettings(index, write_process=False, ltr=str(root / "ltr"), max_k=5))
    monkeypatch.setitem(sys.modules, "lightgbm", None)  # (importing it then fails, as where it is not installed)
    with pytest.raises(SemiretError, match="needs LightGBM"):
        create_app(ServeSettings(index, write_process=False, ltr=str(root / "ltr")))


def test_the_server_reads_the_feature_indexes_given_in_place_of_those_recorded(trained, tmp_path):
    """``serve --ltr-feature-index``, as ``search`` and ``eval`` take it: the feature indexes' folders, in the
    model's order, read in place of those it records (moved away here), with the same checks and messages."""
    root, texts = trained
    expected = texts.search(QUERIES, k=5, rerank=LearnedRanking.load(root / "ltr"))
    model, titles = tmp_path / "ltr", tmp_path / "titles"
    shutil.copytree(root / "ltr", model)
    shutil.copytree(root / "titles", titles)
    record = json.loads((model / "learned-ranking.json").read_text())
    record["feature_indexes"][0]["path"] = str(tmp_path / "gone")
    (model / "learned-ranking.json").write_text(json.dumps(record))
    index = {"texts": str(root / "texts")}
    settings = ServeSettings(index, write_process=False, ltr=str(model), ltr_feature_index=[str(titles)])
    with LocalClient(create_app(settings)) as http:
        results = _search(http, rerank=True).json()["results"]
        assert [[hit["id"] for hit in hits] for hits in results] == expected.ids
        assert np.allclose([[hit["score"] for hit in hits] for hits in results], expected.scores, rtol=1e-6)
    with pytest.raises(SemiretError, match="--ltr-feature-index gives a learned ranking's feature indexes: give "
                                           "--ltr too"):
        ServeSettings(index, ltr_feature_index=[str(titles)])
    with pytest.raises(SemiretError, match="trained with feature indexes of bm25; given idf"):
        create_app(ServeSettings(index, write_process=False, ltr=str(model),
                                 ltr_feature_index=[str(root / "data" / "other")]))
    for command in (["serve"], ["search", "topic1"]):  # (one check, one message)
        refused = invoke_cli(*command, "--index", root / "texts", "--ltr-feature-index", titles, ok=False)
        assert "--ltr-feature-index gives a learned ranking's feature indexes: give --ltr too" in refused.output


def test_what_an_index_says_of_the_server_s_re_ranking():
    """``GET /indexes/{name}``'s ``rerank``: a cross-encoder's kind and default depth where the index keeps texts to
    read; nothing without a model (the learned ranking's: above)."""
    from types import SimpleNamespace

    from semiret.serving.app import _rerank_described

    def index(stores_texts: bool):
        return SimpleNamespace(index=SimpleNamespace(stores_texts=stores_texts))

    model = object()  # (a cross-encoder: any model but a late-interaction one)
    assert _rerank_described(index(True), model, 50) == {"kind": "cross-encoder", "depth": 50}
    assert _rerank_described(index(True), model, 1000) == {"kind": "cross-encoder", "depth": 100}
    assert _rerank_described(index(False), model, 1000) is None and _rerank_described(index(True), None, 1000) is None
