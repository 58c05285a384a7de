"""Learning to rank (``semiret ltr``, ``--ltr``; :mod:`semiret.search.learned_ranking` and
:mod:`semiret.evaluation.learned_ranking`): a LambdaMART model over a first stage's candidates and other indexes'
scores of them learns what the first stage misses, ranks unseen queries by it, survives saving, and refuses what it
cannot read."""

from __future__ import annotations

import json

import numpy as np
import pytest

from semiret.data import Document
from semiret.data.chunking import Chunking
from semiret.errors import SemiretError
from semiret.evaluation.learned_ranking import fit_learned_ranking
from semiret.evaluation.metrics import score_run
from semiret.search import retriever_class
from semiret.search.learned_ranking import LearnedRanking, LearnedRankingConfig

from helpers import invoke_cli, ltr_corpus, write_beir

SMALL = LearnedRankingConfig(min_leaf_documents=5, dev_fraction=0.25, trees=200, early_stopping=30)


@pytest.fixture(scope="module")
def indexes(tmp_path_factory):
    root = tmp_path_factory.mktemp("ltr")
    docs, queries, qrels = ltr_corpus()
    texts = retriever_class("bm25").build(docs, root / "texts", text_fields="text")
    titles = retriever_class("bm25").build(docs, root / "titles", text_fields="title")
    return root, texts, titles, docs, queries, qrels


def test_a_learned_ranking_learns_what_its_first_stage_misses(indexes, tmp_path):
    _, texts, titles, _, queries, qrels = indexes
    ranking, report = fit_learned_ranking(texts, [titles], queries, qrels, SMALL)
    assert report["held_out_queries"] == 10 and report["training_queries"] == 30
    held = report["held_out_ndcg@10"]
    assert held["first_stage"] < 0.8 and held["learned"] > 0.95
    assert max(report["gain_shares"], key=report["gain_shares"].get).startswith("bm25:titles")
    # every query, searched with the learned ranking: its relevant document first
    ids = list(queries)
    found = texts.search([queries[q] for q in ids], k=5, rerank=ranking)
    assert [hits[0] for hits in found.ids] == [f"t{q[1:]}-0" for q in ids]
    plain = texts.search([queries[q] for q in ids], k=5)
    assert score_run(found.as_run(ids), qrels)["nDCG@10"] > score_run(plain.as_run(ids), qrels)["nDCG@10"] + 0.2
    # saved and loaded again: the same scores, the feature index opened from where it was trained
    ranking.save(tmp_path / "model")
    record = json.loads((tmp_path / "model" / "learned-ranking.json").read_text())
    assert record["first_stage"] == "bm25" and record["feature_indexes"][0]["retriever"] == "bm25"
    assert record["trained"]["trees"] == report["trees"]
    loaded = LearnedRanking.load(tmp_path / "model")
    again = texts.search([queries[q] for q in ids], k=5, rerank=loaded)
    assert again.ids == found.ids and np.allclose(again.scores, found.scores)
    # the same data and seed: the same model
    twin, _ = fit_learned_ranking(texts, [titles], queries, qrels, SMALL)
    rows = ranking.feature_rows([queries["q3"]], texts.search([queries["q3"]], k=5))[0]
    assert np.array_equal(twin.predict(rows), ranking.predict(rows))


def test_a_batch_is_ranked_as_its_queries_are_one_at_a_time_on_any_number_of_threads(indexes, tiny_bert, tmp_path,
                                                                                      monkeypatch):
    """The feature indexes' searches of a batch's candidates run ``n_threads`` at a time, each the search its query
    makes alone: the batch's features, scores and rankings are, to the bit, those of its queries searched one at a
    time (a dense feature index's queries encoded in threads too), and a feature index's model loads once."""
    from semiret.models import encoders
    from semiret.search.retrievers import open_retriever

    _, texts, titles, docs, queries, qrels = indexes
    retriever_class("dense").build(docs, tmp_path / "dense", model=str(tiny_bert))
    ranking, _ = fit_learned_ranking(texts, [titles, open_retriever(tmp_path / "dense")], queries, qrels, SMALL,
                                     n_threads=2)
    asked = [queries[q] for q in queries] + ["nothing matches"]  # (the last: no candidates, no feature searches)
    found = texts.search(asked, k=5)
    alone_rows = [ranking.feature_rows([text], texts.search([text], k=5))[0] for text in asked]
    alone = [texts.search([text], k=5, rerank=ranking) for text in asked]
    loads, load = [], encoders.load_encoder
    monkeypatch.setattr(encoders, "load_encoder", lambda *given, **options: loads.append(given) or load(*given,
                                                                                                       **options))
    ranking.features = [titles, open_retriever(tmp_path / "dense")]  # (its model not loaded yet)
    for n_threads in (3, 1):
        rows = ranking.feature_rows(asked, found, n_threads)
        assert len(rows) == len(asked) and all(np.array_equal(a, b) for a, b in zip(rows, alone_rows))
        batch = texts.search(asked, k=5, rerank=ranking, n_threads=n_threads)
        assert batch.ids == [hits.ids[0] for hits in alone] and batch.ids[-1] == []
        assert batch.scores == [hits.scores[0] for hits in alone]
    assert len(loads) == 1


def test_the_warnings_of_feature_searches_run_on_threads_reach_the_caller(indexes):
    """A batch's feature searches ran in threads that did not copy the caller's context: what they warned of (a
    filter's field no document holds) reached neither ``told_warnings`` nor the service's answer. Each runs in a
    copy of it."""
    from semiret.errors import tell_caller, told_warnings

    _, texts, titles, _, queries, qrels = indexes
    ranking, _ = fit_learned_ranking(texts, [titles], queries, qrels, SMALL)

    class Warning:  # the titles' index, whose every search warns, naming its query
        def __getattr__(self, name):
            return getattr(titles, name)

        def pinned(self):
            return self

        def search(self, text, **options):
            tell_caller(f"searched {text!r}")
            return titles.search(text, **options)

    ranking.features = [Warning()]
    asked = [queries[q] for q in list(queries)[:4]]
    with told_warnings() as told:
        ranking.feature_rows(asked, texts.search(asked, k=5), n_threads=3)
    assert sorted(told) == sorted(f"searched {text!r}" for text in asked)


def test_cross_validation_scores_each_fold_by_a_model_learned_without_it(indexes):
    _, texts, titles, _, queries, qrels = indexes
    unfound = {**queries, "qx": "nothing matches"}  # judged, without a candidate: 0 for both, in every fold
    ranking, report = fit_learned_ranking(texts, [titles], unfound, {**qrels, "qx": {"t1-1": 1}}, SMALL, folds=4)
    tuned = report["cross_validated"]
    assert tuned["folds"] == 4 and tuned["ndcg@10"]["learned"] > 0.95 > 0.8 > tuned["ndcg@10"]["first_stage"]
    assert tuned["p_value"] < 1e-3 and tuned["worse"] == 0 and tuned["better"] + tuned["worse"] <= 41
    assert tuned["delta"] == pytest.approx(tuned["ndcg@10"]["learned"] - tuned["ndcg@10"]["first_stage"], abs=2e-4)
    plain, _ = fit_learned_ranking(texts, [titles], unfound, {**qrels, "qx": {"t1-1": 1}}, SMALL)
    rows = ranking.feature_rows(["topic5"], texts.search(["topic5"], k=5))[0]
    assert np.array_equal(plain.predict(rows), ranking.predict(rows))  # the model itself learned as without folds
    for folds in (1, 42):
        with pytest.raises(SemiretError, match="folds"):
            fit_learned_ranking(texts, [titles], queries, qrels, SMALL, folds=folds)
    with pytest.raises(SemiretError, match="the other folds' 15 judged queries holds out 3"):  # (enough of all 30)
        fit_learned_ranking(texts, [titles], dict(list(queries.items())[:30]), qrels,
                            LearnedRankingConfig(min_leaf_documents=5, dev_fraction=0.2), folds=2)


def test_a_candidate_a_feature_index_does_not_score_stands_below_those_it_scores(indexes, tmp_path):
    root, texts, titles, docs, queries, qrels = indexes
    ranking = LearnedRanking(None, [titles], "bm25", depth=5)
    found = texts.search([queries["q0"]], k=5)
    rows = ranking.feature_rows([queries["q0"]], found)[0]
    assert ranking.feature_names()[4:] == ["bm25:titles_score", "bm25:titles_gap", "bm25:titles_scored"]
    assert not np.isnan(rows).any()
    scored = rows[:, 6] == 1
    assert [doc for doc, yes in zip(found.ids[0], scored) if yes] == ["t0-0"]  # only its title holds the word
    assert rows[scored, 5] == [0.0] and (rows[~scored, 4] < rows[scored, 4].min()).all()  # below, never "best"
    assert (rows[~scored, 5] < 0).all()
    assert np.allclose(rows[:, 1], np.asarray(found.scores[0]) - found.scores[0][0])
    assert np.allclose(rows[:, 2], 1 / np.arange(1, 6)) and (rows[:, 3] == 1).all()
    none = ranking.feature_rows(["filler1"], texts.search(["filler1"], k=5))[0]  # no title holds it
    assert (none[:, 4:] == [0.0, -1.0, 0.0]).all()
    # a model whose feature index scored every candidate in training: one lacking a document ranks it last
    every = retriever_class("bm25").build(docs, tmp_path / "every")  # (titles and texts: every candidate scored)
    model, _ = fit_learned_ranking(texts, [every], queries, qrels, SMALL)
    lacking = retriever_class("bm25").build([d for d in docs if d.id != "t3-4"], tmp_path / "lacking")
    model.features = [lacking]
    ranked = texts.search(queries["q3"], k=5, rerank=model)
    assert ranked[-1].id == "t3-4"


def test_what_a_learned_ranking_refuses(indexes, tmp_path):
    root, texts, titles, docs, queries, qrels = indexes
    few = dict(list(queries.items())[:8])
    with pytest.raises(SemiretError, match="at least 10"):
        fit_learned_ranking(texts, [titles], few, qrels, SMALL)
    with pytest.raises(SemiretError, match="holds out 3"):
        fit_learned_ranking(texts, [titles], dict(list(queries.items())[:12]), qrels, SMALL)
    for wrong, message in (({"leaves": 1}, "2 leaves"), ({"learning_rate": 0.0}, "learning rate"),
                           ({"dev_fraction": 0.6}, "dev_fraction"), ({"depth": 0}, "depth")):
        with pytest.raises(SemiretError, match=message):
            LearnedRankingConfig(**wrong)
    ranking, _ = fit_learned_ranking(texts, [titles], queries, qrels, SMALL)
    ranking.save(tmp_path / "model")
    idf = retriever_class("idf").build(docs[:20], root / "idf")
    with pytest.raises(SemiretError, match="bm25 first stage"):
        idf.search("topic1", rerank=LearnedRanking.load(tmp_path / "model"))
    with pytest.raises(SemiretError, match="trained with feature indexes of bm25; given idf"):
        LearnedRanking.load(tmp_path / "model", features=[idf])
    passages = retriever_class("bm25").build(docs[:20], root / "passages", chunking=Chunking(3, 0))
    with pytest.raises(SemiretError, match="passages"):
        fit_learned_ranking(texts, [passages], queries, qrels, SMALL)
    vectors = retriever_class("vectors").build([Document("a", "x", vector=[1.0, 0.0])], root / "vectors")
    with pytest.raises(SemiretError, match="query vectors"):
        fit_learned_ranking(texts, [vectors], queries, qrels, SMALL)
    # where it is saved: never over an index or other files, over a learned ranking only when asked
    with pytest.raises(SemiretError, match="other files"):
        ranking.save(root / "titles", overwrite=True)
    assert (root / "titles" / "meta.json").is_file()
    with pytest.raises(SemiretError, match="already"):
        ranking.save(tmp_path / "model")
    ranking.save(tmp_path / "model", overwrite=True)
    with pytest.raises(SemiretError, match="not a learned ranking"):
        LearnedRanking.load(root / "titles")


def test_a_feature_index_moved_away_is_named(indexes, tmp_path):
    root, texts, _, docs, queries, qrels = indexes
    moved = retriever_class("bm25").build(docs, tmp_path / "moving", text_fields="title")
    ranking, _ = fit_learned_ranking(texts, [moved], queries, qrels, SMALL)
    ranking.save(tmp_path / "model")
    (tmp_path / "moving").rename(tmp_path / "moved")
    with pytest.raises(SemiretError, match="moving is not there"):
        LearnedRanking.load(tmp_path / "model")
    from semiret.search.retrievers import open_retriever

    loaded = LearnedRanking.load(tmp_path / "model", features=[open_retriever(tmp_path / "moved")])
    assert texts.search("topic7", k=1, rerank=loaded)[0].id == "t7-0"


def test_the_command_line_learns_searches_and_evaluates_with_it(indexes, tmp_path):
    root, texts, titles, docs, queries, qrels = indexes
    data = write_beir(tmp_path / "data", docs, queries, qrels, split="train")
    (data / "qrels" / "test.tsv").write_text((data / "qrels" / "train.tsv").read_text())
    out = tmp_path / "model"
    report = json.loads(invoke_cli("ltr", "--index", str(root / "texts"), "--feature-index", str(root / "titles"),
                                   "--data", str(data), "--out", str(out), "--min-leaf-documents", "5",
                                   "--dev-fraction", "0.25", "--folds", "2", "--json").stdout)
    assert report["held_out_ndcg@10"]["learned"] > 0.95 and report["features"][4] == "bm25:titles_score"
    assert report["cross_validated"]["folds"] == 2 and report["cross_validated"]["ndcg@10"]["learned"] > 0.95
    found = invoke_cli("search", "--index", str(root / "texts"), "--ltr", str(out), "--json", "topic12").stdout
    assert json.loads(found.splitlines()[0])["hits"][0]["id"] == "t12-0"
    figures = json.loads(invoke_cli("eval", "--data", str(data), "--split", "test", "--index", str(root / "texts"),
                                    "--ltr", str(out), "--json").stdout)
    assert figures["options"]["rerank"]["kind"] == "learned-ranking" and figures["nDCG@10"] > 0.95
    refused = invoke_cli("search", "--index", str(root / "texts"), "--ltr", str(out), "--cross-encoder", "x",
                         "topic1", ok=False)
    assert "give one" in refused.output
    again = invoke_cli("ltr", "--index", str(root / "texts"), "--data", str(data), "--out", str(out), ok=False)
    assert "already" in again.output


def test_the_demo_ranks_by_a_learned_ranking_where_the_collection_has_train_queries(tmp_path, monkeypatch):
    from semiret import demo

    docs, queries, qrels = ltr_corpus()
    data = write_beir(tmp_path / "data", docs, queries, qrels, split="train")
    (data / "qrels" / "test.tsv").write_text((data / "qrels" / "train.tsv").read_text())
    monkeypatch.setattr(demo, "demo_systems", lambda *flags: [
        ("BM25", "bm25", {}), ("BOT", "bot", {}),
        ("learned", "bm25", {demo.LEARNED_FROM: [("bot", {})]})])
    rows = demo.run_demo(str(data), tmp_path / "out")
    assert rows[2]["options"]["rerank"]["kind"] == "learned-ranking"
    assert rows[2]["options"]["rerank"]["features"] == [f"bot:{data.name}-binary"]
    assert (tmp_path / "out" / "learned-ranking" / "model.txt").is_file()
    assert rows[2]["nDCG@10"] != rows[0]["nDCG@10"]  # the same first stage, ranked again
    (data / "qrels" / "train.tsv").unlink()
    assert [row["system"] for row in demo.run_demo(str(data), tmp_path / "again")] == ["BM25", "BOT"]


def test_without_lightgbm_the_message_says_how_to_install_it(indexes, monkeypatch):
    import sys

    _, texts, titles, _, queries, qrels = indexes
    monkeypatch.setitem(sys.modules, "lightgbm", None)  # an import of it fails, as where it is not installed
    with pytest.raises(SemiretError, match=r"semiret\[ltr\]"):
        fit_learned_ranking(texts, [titles], queries, qrels, SMALL)


def test_feature_indexes_of_one_name_held_out_queries_without_relevant_candidates_and_bad_records(indexes, tmp_path):
    root, texts, titles, docs, queries, qrels = indexes
    twin = retriever_class("bm25").build(docs, tmp_path / "other" / "titles", text_fields="title")
    ranking, report = fit_learned_ranking(texts, [titles, twin], queries, qrels, SMALL)
    assert ranking.index_names() == ["bm25:titles", "bm25:titles#2"]
    assert report["held_out_ndcg@10"]["learned"] > 0.95
    # judged queries whose relevant document the first stage never finds: too few left to stop on, or to learn from
    unfound = {q: {"nowhere": 1} if i >= 11 else r for i, (q, r) in enumerate(qrels.items())}
    with pytest.raises(SemiretError, match="held out to stop on, [0-4] have a relevant document"):
        fit_learned_ranking(texts, [titles], queries, unfound, LearnedRankingConfig(dev_fraction=0.2))
    # a model of another first-stage model, or feature index's, is refused
    ranking.save(tmp_path / "model")
    record = json.loads((tmp_path / "model" / "learned-ranking.json").read_text())
    assert record["first_stage_index"]["retriever"] == "bm25" and record["feature_indexes"][1]["model"] is None
    record["first_stage_index"]["model"] = "minilm"
    record["feature_indexes"][0]["model"] = "minilm"
    (tmp_path / "model" / "learned-ranking.json").write_text(json.dumps(record))
    with pytest.raises(SemiretError, match="feature index of model 'minilm'"):
        LearnedRanking.load(tmp_path / "model")
    record["feature_indexes"][0]["model"] = None
    (tmp_path / "model" / "learned-ranking.json").write_text(json.dumps(record))
    with pytest.raises(SemiretError, match="first stage of model 'minilm'"):
        texts.search("topic1", rerank=LearnedRanking.load(tmp_path / "model"))
    # bad records and folders: errors naming what is wrong
    for change, message in (({"version": "1"}, "version"), ({"feature_indexes": ["x"]}, r"feature_indexes\[0\]")):
        (tmp_path / "model" / "learned-ranking.json").write_text(json.dumps({**record, **change}))
        with pytest.raises(SemiretError, match=message):
            LearnedRanking.load(tmp_path / "model")
    (tmp_path / "model" / "learned-ranking.json").write_text(json.dumps(record))
    (tmp_path / "model" / "model.txt").write_text("not a model")
    with pytest.raises(SemiretError, match="not a LightGBM model"):
        LearnedRanking.load(tmp_path / "model")
    with pytest.raises(SemiretError, match="no such folder"):
        LearnedRanking.load(tmp_path / "nowhere")
    # --overwrite replaces a learned ranking, never a folder holding anything else beside it
    (tmp_path / "model" / "notes.txt").write_text("mine")
    with pytest.raises(SemiretError, match="notes.txt"):
        ranking.save(tmp_path / "model", overwrite=True)
    assert (tmp_path / "model" / "notes.txt").read_text() == "mine"
