"""Evaluation: ir_measures figures against pytrec_eval computed directly, and the evaluation runner."""

from __future__ import annotations

import logging
import re

import numpy as np
import pytest
import pytrec_eval

from semiret.data import read_trec_run
from semiret.evaluation import DEFAULT_MEASURES, evaluate, parse_measures, score_run
from semiret.evaluation.metrics import per_query
from semiret.evaluation.significance import compare_runs, compare_systems, corrected_p_values
from semiret.errors import DataFormatError, SemiretError

from helpers import TINY_QRELS, tiny_tokenizer, write_beir

FIGURE_KEYS = {"nDCG@10", "R@100", "MRR@10", "index_build_s", "index_size_mb", "latency_ms_median"}


def random_run_and_qrels(seed: int, n_queries=30, n_docs=400):
    """Graded qrels (with explicit zeros) and a tie-free run of 150 documents per query."""
    rng = np.random.default_rng(seed)
    docs = [f"D{i}" for i in range(n_docs)]
    qrels, run = {}, {}
    for q in range(n_queries):
        judged = rng.choice(n_docs, size=int(rng.integers(1, 25)), replace=False)
        qrels[f"q{q}"] = {docs[d]: int(rng.integers(0, 4)) for d in judged}
        retrieved = rng.choice(n_docs, size=150, replace=False)
        scores = rng.permutation(150).astype(float) + rng.uniform(0, 0.5)
        run[f"q{q}"] = {docs[d]: float(s) for d, s in zip(retrieved, scores)}
    return run, qrels


def top(run: dict, k: int) -> dict:
    return {q: dict(sorted(docs.items(), key=lambda x: -x[1])[:k]) for q, docs in run.items()}


def pytrec_means(run, qrels) -> dict[str, float]:
    """nDCG@10, R@100 and RR@10 straight from pytrec_eval, averaged over all judged queries."""
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10", "recall_100"})
    full = evaluator.evaluate(run)
    rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(top(run, 10))
    n = len(qrels)
    return {
        "nDCG@10": sum(v["ndcg_cut_10"] for v in full.values()) / n,
        "R@100": sum(v["recall_100"] for v in full.values()) / n,
        "MRR@10": sum(v["recip_rank"] for v in rr.values()) / n,
    }


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_measures_equal_pytrec_eval(seed):
    run, qrels = random_run_and_qrels(seed)
    ours = score_run(run, qrels)
    assert set(ours) == {"nDCG@10", "R@100", "MRR@10"}
    reference = pytrec_means(run, qrels)
    for name, value in reference.items():
        assert ours[name] == pytest.approx(value, abs=1e-9), name
    assert 0 < ours["nDCG@10"] < 1


def test_queries_missing_from_the_run_count_as_zero():
    run, qrels = random_run_and_qrels(3)
    partial = {q: docs for i, (q, docs) in enumerate(run.items()) if i % 2 == 0}
    ours = score_run(partial, qrels)
    reference = pytrec_means(partial, qrels)  # divides by all judged queries
    for name, value in reference.items():
        assert ours[name] == pytest.approx(value, abs=1e-9)
    assert ours["nDCG@10"] < score_run(run, qrels)["nDCG@10"]
    assert score_run({}, qrels) == {"nDCG@10": 0.0, "R@100": 0.0, "MRR@10": 0.0}


def test_unjudged_queries_in_the_run_are_ignored():
    run, qrels = random_run_and_qrels(4)
    extra = dict(run, unjudged={"D1": 1.0})
    assert score_run(extra, qrels) == score_run(run, qrels)


def test_perfect_and_hand_computed_runs():
    qrels = {"q": {"a": 1, "b": 1}}
    assert score_run({"q": {"a": 2.0, "b": 1.0, "c": 0.5}}, qrels) == pytest.approx(
        {"nDCG@10": 1.0, "R@100": 1.0, "MRR@10": 1.0})
    figures = score_run({"q": {"c": 3.0, "a": 2.0}}, qrels)
    assert figures["MRR@10"] == pytest.approx(0.5)
    assert figures["R@100"] == pytest.approx(0.5)
    assert figures["nDCG@10"] == pytest.approx((1 / np.log2(3)) / (1 + 1 / np.log2(3)))


def test_runs_and_qrels_are_taken_in_every_form_ir_measures_takes(caplog):
    """A DataFrame, ir_measures' records, tuples or integer ids give the figures of the plain dicts; a form that is
    none of these is named; a run of none of the judged queries warns (every measure 0)."""
    import ir_measures
    import pandas as pd

    run = {"q1": {"a": 2.0, "b": 1.0}, "q2": {"c": 1.0}}
    qrels = {"q1": {"b": 1}, "q2": {"c": 2}}
    expected = score_run(run, qrels)
    assert 0 < expected["nDCG@10"] < 1
    run_frame = pd.DataFrame([{"query_id": q, "doc_id": d, "score": s} for q, docs in run.items() for d, s in docs.items()])
    qrels_frame = pd.DataFrame([{"query_id": q, "doc_id": d, "relevance": r} for q, docs in qrels.items()
                                for d, r in docs.items()])
    records = [ir_measures.ScoredDoc(q, d, s) for q, docs in run.items() for d, s in docs.items()]
    judgements = [ir_measures.Qrel(q, d, r) for q, docs in qrels.items() for d, r in docs.items()]
    as_ints = {1: {"a": 2.0, "b": 1.0}, 2: {"c": 1.0}}
    for each_run, each_qrels in [(run_frame, qrels), (run, qrels_frame), (records, judgements),
                                 ([tuple(r) for r in records], qrels), (as_ints, {1: {"b": 1}, 2: {"c": 2}})]:
        assert score_run(each_run, each_qrels) == expected
    assert compare_runs(run_frame, records, qrels_frame)["nDCG@10"]["delta"] == 0
    assert per_query(records, judgements, "nDCG@10") == per_query(run, qrels, "nDCG@10")
    with pytest.raises(SemiretError, match="a DataFrame without the column.*score"):
        score_run(run_frame.rename(columns={"score": "value"}), qrels)
    with pytest.raises(SemiretError, match="query 'q1' maps to a list"):
        score_run({"q1": ["a", "b"]}, qrels)
    with pytest.raises(SemiretError, match="not .*query_id"):
        score_run(42, qrels)
    with caplog.at_level(logging.WARNING):
        assert score_run({"other": {"a": 1.0}}, qrels)["nDCG@10"] == 0
    assert "ranks none of the 2 judged queries" in caplog.text


def test_parse_measures():
    assert parse_measures(None) == DEFAULT_MEASURES
    parsed = parse_measures(["MRR@10", "P@5", "nDCG@20"])
    assert list(parsed) == ["MRR@10", "P@5", "nDCG@20"]
    assert str(parsed["MRR@10"]) == "RR@10"
    run, qrels = random_run_and_qrels(5)
    figures = score_run(run, qrels, parsed)
    assert figures["MRR@10"] == pytest.approx(pytrec_means(run, qrels)["MRR@10"], abs=1e-9)


def test_per_query_values():
    run, qrels = random_run_and_qrels(6)
    values = per_query({q: d for q, d in run.items() if q != "q0"}, qrels, DEFAULT_MEASURES["nDCG@10"])
    assert set(values) == set(qrels) and values["q0"] == 0.0
    reference = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10"}).evaluate(run)
    assert values["q1"] == pytest.approx(reference["q1"]["ndcg_cut_10"])
    assert per_query(run, qrels, "nDCG@10") == per_query(run, qrels, DEFAULT_MEASURES["nDCG@10"])  # a name too


def test_compare_runs_against_scipy_and_counts():
    from scipy import stats

    run, qrels = random_run_and_qrels(7)
    baseline, _ = random_run_and_qrels(8)  # same queries, other rankings
    result = compare_runs(run, baseline, qrels)
    assert set(result) == {"nDCG@10", "R@100", "MRR@10"}
    ours = per_query(run, qrels, DEFAULT_MEASURES["nDCG@10"])
    theirs = per_query(baseline, qrels, DEFAULT_MEASURES["nDCG@10"])
    figures = result["nDCG@10"]
    assert figures["baseline"] == pytest.approx(score_run(baseline, qrels)["nDCG@10"], abs=1e-6)
    assert figures["delta"] == pytest.approx(score_run(run, qrels)["nDCG@10"] - figures["baseline"], abs=1e-6)
    expected = stats.ttest_rel([ours[q] for q in qrels], [theirs[q] for q in qrels]).pvalue
    assert figures["p_value"] == pytest.approx(expected, abs=1e-6)
    assert figures["better"] == sum(ours[q] > theirs[q] for q in qrels)
    assert figures["better"] + figures["worse"] + figures["same"] == len(qrels)


def test_the_other_tests_and_the_confidence_interval():
    """Fisher's randomization test agrees with an exact enumeration of every sign flip (a few queries), Wilcoxon's
    with scipy's, and the interval is Student's around the mean difference; an unknown test is refused first."""
    import itertools

    from scipy import stats

    run, qrels = random_run_and_qrels(7)
    baseline, _ = random_run_and_qrels(8)
    qrels = dict(list(qrels.items())[:12])  # 4,096 sign flips to enumerate
    a = np.array([per_query(run, qrels, DEFAULT_MEASURES["nDCG@10"])[q] for q in qrels])
    b = np.array([per_query(baseline, qrels, DEFAULT_MEASURES["nDCG@10"])[q] for q in qrels])
    diff = a - b
    flips = np.array(list(itertools.product([1, -1], repeat=len(diff))))  # every sign flip: the exact test
    exact = np.mean(np.abs((flips * diff).mean(axis=1)) >= abs(diff.mean()) - 1e-12)
    randomized = compare_runs(run, baseline, qrels, ["nDCG@10"], test="randomization")["nDCG@10"]
    assert randomized["test"] == "randomization" and randomized["p_value"] == pytest.approx(exact, abs=0.02)
    signed = compare_runs(run, baseline, qrels, ["nDCG@10"], test="wilcoxon")["nDCG@10"]
    assert signed["p_value"] == pytest.approx(stats.wilcoxon(a, b).pvalue, abs=1e-6)
    low, high = compare_runs(run, baseline, qrels, ["nDCG@10"])["nDCG@10"]["delta_ci95"]
    half = stats.t.ppf(0.975, len(diff) - 1) * diff.std(ddof=1) / np.sqrt(len(diff))
    assert low == pytest.approx(diff.mean() - half, abs=1e-5) and high == pytest.approx(diff.mean() + half, abs=1e-5)
    with pytest.raises(SemiretError, match="unknown significance test 'z'"):
        compare_runs(run, baseline, qrels, test="z")


def test_compare_runs_identical_and_clearly_better():
    run, qrels = random_run_and_qrels(9)
    same = compare_runs(run, run, qrels)["nDCG@10"]
    assert same["delta"] == 0 and same["p_value"] == 1.0 and not same["significant"] and same["same"] == len(qrels)
    perfect = {q: {d: float(g) for d, g in judged.items()} for q, judged in qrels.items()}  # ideal ranking
    better = compare_runs(perfect, run, qrels)["nDCG@10"]
    assert better["delta"] > 0 and better["significant"] and better["worse"] == 0
    with pytest.raises(SemiretError, match="none of the judged queries"):
        compare_runs(run, {"other": {"D1": 1.0}}, qrels)


def _two_queries_better_by(step: float):
    """Two queries whose P@10 rises by one relevant document each, from 2 to 3 and from 1 to 2 (differences that
    floating point writes 0.1 and 0.09999999999999998)."""
    qrels = {q: {f"r{i}": 1 for i in range(5)} for q in ("q1", "q2")}

    def ranking(relevant: int) -> dict:
        return {**{f"r{i}": 10.0 - i for i in range(relevant)}, **{f"x{i}": 1.0 - i / 100 for i in range(10)}}

    return {"q1": ranking(3), "q2": ranking(2)}, {"q1": ranking(2), "q2": ranking(1)}, qrels


def test_compare_runs_where_the_t_test_is_undefined():
    """One query: no test at all; every query better by the same amount: the exact sign test, not p = 0."""
    one = compare_runs({"q1": {"d1": 1.0}}, {"q1": {"d2": 1.0, "d1": 0.5}}, {"q1": {"d1": 1}}, ["RR@10"])["RR@10"]
    assert one["delta"] == 0.5 and one["p_value"] is None and not one["significant"]
    qrels = {f"q{i}": {"d1": 1} for i in range(2)}
    two = compare_runs({q: {"d1": 1.0} for q in qrels}, {q: {"d2": 1.0, "d1": 0.5} for q in qrels}, qrels, ["RR@10"])
    assert two["RR@10"]["p_value"] == 0.5 and not two["RR@10"]["significant"]
    rounding = compare_runs(*_two_queries_better_by(0.1), ["P@10"])["P@10"]  # 0.1 and 0.09999999999999998
    assert rounding["p_value"] == 0.5 and rounding["better"] == 2 and rounding["delta_ci95"] == [0.1, 0.1]
    qrels = {f"q{i}": {"d1": 1} for i in range(8)}
    eight = compare_runs({q: {"d1": 1.0} for q in qrels}, {q: {"d2": 1.0, "d1": 0.5} for q in qrels}, qrels, ["RR@10"])
    assert eight["RR@10"]["p_value"] == 2 * 0.5 ** 8 and eight["RR@10"]["significant"]


def test_compare_runs_averages_each_sides_seeds_query_by_query():
    from scipy import stats

    run, qrels = random_run_and_qrels(7)
    other_seed, _ = random_run_and_qrels(10)
    baseline, _ = random_run_and_qrels(8)
    measure = DEFAULT_MEASURES["nDCG@10"]
    seeds = [per_query(r, qrels, measure) for r in (run, other_seed)]
    mean = {q: (seeds[0][q] + seeds[1][q]) / 2 for q in qrels}
    theirs = per_query(baseline, qrels, measure)
    figures = compare_runs([run, other_seed], [baseline], qrels)["nDCG@10"]
    expected = stats.ttest_rel([mean[q] for q in qrels], [theirs[q] for q in qrels]).pvalue
    assert figures["p_value"] == pytest.approx(expected, abs=1e-6)
    assert figures["delta"] == pytest.approx(sum(mean[q] - theirs[q] for q in qrels) / len(qrels), abs=1e-6)
    assert figures["better"] == sum(mean[q] > theirs[q] for q in qrels)
    assert compare_runs([run], baseline, qrels) == compare_runs(run, baseline, qrels)  # one seed is one run
    assert compare_runs([run, run], [baseline, baseline], qrels) == compare_runs(run, baseline, qrels)
    with pytest.raises(SemiretError, match="none of the judged queries"):  # every baseline seed is checked
        compare_runs(run, [baseline, {"other": {"D1": 1.0}}], qrels)
    with pytest.raises(SemiretError, match="no runs"):
        compare_runs([], baseline, qrels)


# ---------------------------------------------------------------------------- the evaluation runner
def test_corrected_p_values_are_statsmodels():
    # statsmodels' multipletests([0.01, 0.04, 0.03, 0.005], method="holm"/"bonferroni"), worked by hand
    p = [0.01, 0.04, 0.03, 0.005]
    assert corrected_p_values(p, "holm") == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert corrected_p_values(p, "bonferroni") == pytest.approx([0.04, 0.16, 0.12, 0.02])
    assert corrected_p_values(p, "none") == p
    assert corrected_p_values([0.5, None, 0.4], "holm") == pytest.approx([0.8, None, 0.8])  # None: not tested
    assert corrected_p_values([0.6, 0.7], "bonferroni") == [1.0, 1.0]
    assert corrected_p_values([], "holm") == []
    with pytest.raises(SemiretError, match="unknown correction"):
        corrected_p_values(p, "fdr")


def test_compare_systems_corrects_each_measure_over_the_systems():
    run, qrels = random_run_and_qrels(7)
    baseline, _ = random_run_and_qrels(8)
    compared = compare_systems({"a": run, "b": [run, run], "c": baseline}, baseline, qrels, ["nDCG@10", "P@1"])
    assert list(compared) == ["a", "b", "c"] and set(compared["a"]) == {"nDCG@10", "P@1"}
    for measure in ("nDCG@10", "P@1"):
        raw = [compared[s][measure]["p_value"] for s in "abc"]
        assert raw[:2] == [compare_runs(run, baseline, qrels, [measure])[measure]["p_value"]] * 2
        expected = corrected_p_values(raw, "holm")
        for system, p in zip("abc", expected):
            figure = compared[system][measure]
            assert figure["p_value_corrected"] == pytest.approx(p, rel=1e-5) and figure["correction"] == "holm"
            assert figure["significant"] == (p < 0.05)
    assert compared["a"]["nDCG@10"]["p_value_corrected"] >= compared["a"]["nDCG@10"]["p_value"]
    alone = compare_systems({"a": run}, baseline, qrels, ["nDCG@10"], correction="bonferroni")["a"]["nDCG@10"]
    assert alone["p_value_corrected"] == alone["p_value"]  # one system: nothing to correct
    with pytest.raises(SemiretError, match="unknown correction"):
        compare_systems({"a": run}, baseline, qrels, correction="BH")


def test_the_95th_percentile_latency_is_never_below_the_median(tmp_path):
    """Two queries: the 95th percentile lies between them, near the slower (a rank rounded down took the faster)."""
    from helpers import TINY_QRELS, TINY_QUERIES, write_beir

    root = write_beir(tmp_path / "two", queries={q: TINY_QUERIES[q] for q in ("q1", "q2")},
                      qrels={q: TINY_QRELS[q] for q in ("q1", "q2")})
    for _ in range(3):
        figures = evaluate(root, "bm25", index=tmp_path / "idx", run_path=None)
        assert figures["queries"] == 2 and figures["latency_ms_p95"] >= figures["latency_ms_median"]


def test_evaluate_on_a_tiny_collection(beir_dir, tmp_path):
    run_path = tmp_path / "runs" / "bm25.trec"
    figures = evaluate(beir_dir, "bm25", index=tmp_path / "idx", run_path=run_path)
    assert FIGURE_KEYS <= set(figures)
    assert figures["queries"] == 3 and figures["documents"] == 6 and figures["dataset"] == "tiny"
    assert figures["index_build_s"] > 0 and figures["index_size_mb"] > 0 and figures["latency_ms_median"] > 0
    assert figures["nDCG@10"] > 0.5
    run = read_trec_run(run_path)
    assert set(run) == set(TINY_QRELS)
    assert score_run(run, TINY_QRELS) == pytest.approx({k: figures[k] for k in ("nDCG@10", "R@100", "MRR@10")},
                                                       abs=1e-6)
    again = evaluate(beir_dir, "bm25", index=tmp_path / "idx")  # reuses the index
    assert again["index_build_s"] is None and again["nDCG@10"] == figures["nDCG@10"]
    rebuilt = evaluate(beir_dir, "bm25", index=tmp_path / "idx", rebuild=True, k1=0.9)
    assert rebuilt["index_build_s"] > 0


@pytest.mark.parametrize("retriever", ["bm25", "bot"])
def test_evaluate_reports_sparsity_of_every_inverted_index(beir_dir, tmp_path, retriever):
    from semiret.search.retrievers import open_retriever

    figures = evaluate(beir_dir, retriever, index=tmp_path / "idx")
    index = open_retriever(tmp_path / "idx", retriever).index
    assert figures["avg_nnz_per_doc"] == pytest.approx(index.average_postings_per_document(), abs=0.01)
    assert 0 < figures["flops"] <= figures["avg_query_terms"]  # each query term matches at most every document


def test_an_existing_index_is_evaluated_with_the_retriever_it_was_built_for(beir_dir, tmp_path):
    """No retriever named: the index's own (as ``semiret search`` does), so an index ``semiret adapt`` wrote is
    evaluated the way it chose; without an index, BM25."""
    built = evaluate(beir_dir, "bot", index=tmp_path / "bot", run_path=tmp_path / "bot.trec")
    reused = evaluate(beir_dir, index=tmp_path / "bot", run_path=tmp_path / "again.trec")
    assert reused["retriever"] == "bot" and reused["index_build_s"] is None
    assert (tmp_path / "again.trec").read_text() == (tmp_path / "bot.trec").read_text()
    assert evaluate(beir_dir, index=tmp_path / "new")["retriever"] == "bm25"
    with pytest.raises(SemiretError, match="bm25 needs"):  # a retriever named still wins, and is checked
        evaluate(beir_dir, "bm25", index=tmp_path / "bot")
    assert built["nDCG@10"] == reused["nDCG@10"]


def test_evaluate_against_a_baseline_run(beir_dir, tmp_path):
    bm25 = evaluate(beir_dir, "bm25", run_path=tmp_path / "bm25.trec")
    assert bm25["baseline_run"] is None and bm25["vs_baseline"] is None
    bot = evaluate(beir_dir, "bot", baseline=tmp_path / "bm25.trec")
    versus = bot["vs_baseline"]["nDCG@10"]
    assert versus["baseline"] == pytest.approx(bm25["nDCG@10"], abs=1e-6)
    assert versus["delta"] == pytest.approx(bot["nDCG@10"] - bm25["nDCG@10"], abs=1e-6)
    assert versus["better"] + versus["worse"] + versus["same"] == 3
    (tmp_path / "other.trec").write_text("elsewhere Q0 d1 1 1.0 x\n")
    with pytest.raises(SemiretError, match="none of the judged queries"):
        evaluate(beir_dir, "bm25", baseline=tmp_path / "other.trec", index=tmp_path / "never")
    assert not (tmp_path / "never").exists()  # checked before any index is built


def test_bad_search_options_fail_before_an_index_is_built_or_rebuilt(beir_dir, tmp_path, monkeypatch):
    from semiret.search.retrievers import Retriever

    monkeypatch.setattr(Retriever, "build", classmethod(lambda *args, **kwargs: pytest.fail("built")))
    for bad in ({"weight": 1.5}, {"fusion": "max"}, {"fusion_depth": 0}):
        with pytest.raises(SemiretError, match=r"weight must be between 0 and 1|fusion \(--fusion\) must be one of|fusion_depth \(--fusion-depth\)"):
            evaluate(beir_dir, "hybrid", index=tmp_path / "idx", rebuild=True, **bad)


def test_build_options_unlike_a_reused_index_are_reported_as_ignored(beir_dir, tiny_bert, tmp_path, caplog):
    evaluate(beir_dir, "bm25", index=tmp_path / "idx")
    with caplog.at_level("WARNING"):
        reused = evaluate(beir_dir, "bm25", index=tmp_path / "idx", k1=0.9)
    assert reused["index_build_s"] is None
    assert "k1=0.9 only apply when an index is built" in caplog.text
    evaluate(beir_dir, "dense", index=tmp_path / "dense", model=str(tiny_bert))
    caplog.clear()
    with caplog.at_level("WARNING"):
        evaluate(beir_dir, "dense", index=tmp_path / "dense", model=str(tiny_bert))  # as built: nothing to say
        assert "only apply" not in caplog.text
        evaluate(beir_dir, "dense", index=tmp_path / "dense", model="minilm")
    assert "model='minilm' only apply when an index is built" in caplog.text


def test_evaluate_without_an_index_leaves_nothing(beir_dir, tmp_path, monkeypatch):
    import tempfile

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    figures = evaluate(beir_dir, "bot")
    assert figures["retriever"] == "bot" and figures["nDCG@10"] > 0
    assert list(scratch.iterdir()) == []


def test_unknown_documents_in_qrels_warn_but_do_not_crash(tmp_path, caplog):
    qrels = {"q1": {"d1": 1, "ghost-doc": 1}, "q2": {"d3": 1}, "q3": {"d4": 1}}
    root = write_beir(tmp_path / "ghostly", qrels=qrels)
    with caplog.at_level(logging.WARNING, logger="semiret.evaluation.evaluate"):
        figures = evaluate(root, "bm25")
    assert "1 judged documents are not in the index" in caplog.text and "ghost-doc" in caplog.text
    assert 0 < figures["R@100"] < 1  # the unknown document counts as never retrieved
    for options in ({"chunk_words": 5, "chunk_overlap": 2}, {"diversity": 0.5}):  # (they said nothing of it)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="semiret.evaluation.evaluate"):
            evaluate(root, "bm25", **options)
        assert "1 judged documents are not in the index (e.g. 'ghost-doc')" in caplog.text, options


def test_evaluate_indexes_passages_of_sentences_or_tokens_and_refuses_an_index_of_others(beir_dir, tmp_path):
    tokenizer = tiny_tokenizer(tmp_path / "tok")
    figures = evaluate(beir_dir, "bm25", index=tmp_path / "idx", chunk_tokens=5, chunk_overlap=1,
                       chunk_tokenizer=tokenizer)
    assert figures["chunking"]["tokens"] == 5 and figures["chunking"]["tokenizer"] == tokenizer
    assert "sentences" not in figures["chunking"] and figures["documents"] > 6 and figures["nDCG@10"] > 0
    assert evaluate(beir_dir, index=tmp_path / "idx", chunk_tokens=5, chunk_overlap=1)["index_build_s"] is None
    with pytest.raises(SemiretError, match=re.escape(
            f"holds passages of 5 tokens (by {tokenizer}) overlapping by 1, not passages of whole sentences up to 5 "
            "tokens overlapping by 1: --rebuild it, or leave out --chunk-tokens")):
        evaluate(beir_dir, index=tmp_path / "idx", chunk_tokens=5, chunk_overlap=1, chunk_sentences=True)
    rebuilt = evaluate(beir_dir, index=tmp_path / "idx", chunk_words=4, chunk_sentences=True, rebuild=True)
    assert rebuilt["chunking"] == {"words": 4, "overlap": 0, "spaceless": True, "sentences": True}
    with pytest.raises(SemiretError, match="passages of whole sentences up to 4 words overlapping by 0, not passages "
                                           "of 4 words"):
        evaluate(beir_dir, index=tmp_path / "idx", chunk_words=4)
    with pytest.raises(SemiretError, match="--diversity with --chunk-tokens"):
        evaluate(beir_dir, chunk_tokens=5, chunk_tokenizer=tokenizer, diversity=0.5)

def test_evaluate_errors(beir_dir):
    with pytest.raises(SemiretError, match="unknown retriever"):
        evaluate(beir_dir, "nope")
    with pytest.raises(DataFormatError, match="no qrels for split 'dev'"):
        evaluate(beir_dir, "bm25", split="dev")
    with pytest.raises(SemiretError, match="do not apply to retriever 'bm25'"):
        evaluate(beir_dir, "bm25", idf="corpus")


@pytest.mark.parametrize("content", ["", "query-id\tcorpus-id\tscore\n", "query-id\tcorpus-id\tscore\nq9\td1\t1\n"])
def test_a_split_with_no_usable_query_fails_before_any_index(beir_dir, tmp_path, monkeypatch, content):
    from semiret.search.retrievers import Retriever

    qrels = beir_dir / "qrels" / "dev.tsv"
    qrels.write_text(content)  # empty, the header alone, or only a query queries.jsonl has no text for
    monkeypatch.setattr(Retriever, "build", classmethod(lambda *args, **kwargs: pytest.fail("built")))
    with pytest.raises(SemiretError, match=rf"^{re.escape(str(qrels))}: judges no query that .*queries\.jsonl has"):
        evaluate(beir_dir, "bm25", split="dev", index=tmp_path / "idx")
    assert not (tmp_path / "idx").exists()


def test_an_unknown_or_malformed_measure_is_named():
    for name in ("bogus", "P@-1"):
        with pytest.raises(SemiretError, match=rf"measure '{name}'.*--measure takes ir_measures names"):
            parse_measures(["nDCG@10", name])
    with pytest.raises(SemiretError, match=r"one measure a --measure \(repeat it: --measure nDCG@10 --measure R@100\)"):
        parse_measures(["nDCG@10,R@100"])


def test_trec_evals_names_are_read_too():
    from ir_measures import AP, nDCG

    assert parse_measures(["ndcg_cut_10", "map"]) == {"ndcg_cut_10": nDCG @ 10, "map": AP}


def test_measures_are_taken_as_names_objects_or_a_mapping_everywhere():
    from ir_measures import AP, nDCG

    run, qrels = random_run_and_qrels(3)
    by_name = score_run(run, qrels, parse_measures(["nDCG@10", "AP"]))
    assert score_run(run, qrels, [nDCG @ 10, AP]) == by_name
    assert score_run(run, qrels, ["nDCG@10", AP]) == by_name
    assert score_run(run, qrels, nDCG @ 10) == {"nDCG@10": by_name["nDCG@10"]}
    other, _ = random_run_and_qrels(4)
    assert compare_runs(other, run, qrels, [nDCG @ 10]) == compare_runs(other, run, qrels, ["nDCG@10"])
    with pytest.raises(SemiretError, match="neither a name nor an ir_measures measure"):
        score_run(run, qrels, [10])


def test_an_open_retriever_object_is_evaluated_as_it_is(beir_dir, tmp_path):
    from semiret.data import Collection
    from semiret.search import BM25Retriever

    by_name = evaluate(beir_dir, "bm25", index=tmp_path / "idx")
    retriever = BM25Retriever.open(tmp_path / "idx")
    figures = evaluate(beir_dir, retriever)
    assert figures["retriever"] == "bm25" and figures["index_build_s"] is None
    assert {k: figures[k] for k in ("documents", "nDCG@10", "R@100")} == {
        k: by_name[k] for k in ("documents", "nDCG@10", "R@100")}
    scratch = BM25Retriever.build(Collection(beir_dir).corpus())  # a temporary index, as it is
    assert evaluate(beir_dir, scratch)["nDCG@10"] == by_name["nDCG@10"]
    with pytest.raises(SemiretError, match="a retriever object is evaluated as it is"):
        evaluate(beir_dir, retriever, index=tmp_path / "idx")


def test_judged_queries_without_a_text_are_left_out_of_the_means(tmp_path, caplog):
    """A judged query with no text is skipped (warned about): not searched, so not averaged in as zeros; and a
    measure reading deeper than the ranking searched is warned about."""
    from helpers import TINY_QRELS, TINY_QUERIES, write_beir

    complete = write_beir(tmp_path / "complete")
    partial = write_beir(tmp_path / "partial", queries=dict(list(TINY_QUERIES.items())[1:]))
    with_all = evaluate(complete, "bm25", split="test")
    without_first = evaluate(partial, "bm25", split="test")
    assert without_first["queries"] == len(TINY_QRELS) - 1
    others = evaluate(write_beir(tmp_path / "others", queries=dict(list(TINY_QUERIES.items())[1:]),
                                 qrels={q: j for q, j in TINY_QRELS.items() if q != next(iter(TINY_QUERIES))}),
                      "bm25", split="test")
    assert without_first["nDCG@10"] == others["nDCG@10"] and with_all["queries"] == len(TINY_QRELS)
    caplog.clear()
    evaluate(complete, "bm25", split="test", depth=5)
    assert "nDCG@10, R@100, MRR@10 read(s) deeper than the 5 documents searched" in caplog.text


def test_every_measure_reads_ties_in_trec_eval_order():
    """ir_measures scores RR@10 with a backend that breaks score ties by document id ascending, nDCG@10 and R@100
    with trec_eval's order (descending): MRR@10 read another ranking than nDCG@10 (Vaswani, `idf`: 0.579 where
    trec_eval's order gives 0.561)."""
    run = {"q1": {"a": 1.0, "b": 1.0, "c": 1.0, "d": 0.5}, "q2": {"x": 2.0, "y": 2.0}}
    qrels = {"q1": {"a": 1}, "q2": {"y": 1}}
    reference = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank", "ndcg_cut_10"}).evaluate(run)
    ours = score_run(run, qrels)
    assert ours["MRR@10"] == pytest.approx((1 / 3 + 1) / 2)  # c, b, a: the relevant one third
    assert ours["MRR@10"] == pytest.approx(np.mean([v["recip_rank"] for v in reference.values()]))
    assert ours["nDCG@10"] == pytest.approx(np.mean([v["ndcg_cut_10"] for v in reference.values()]))
    assert per_query(run, qrels, "MRR@10") == pytest.approx({"q1": 1 / 3, "q2": 1.0})


def test_tiny_p_values_are_not_rounded_to_zero():
    qrels = {f"q{i}": {f"d{i}": 1} for i in range(60)}
    first = {q: {f"d{i}": 1.0, "x": 0.5} for i, q in enumerate(qrels)}
    later = {q: {"x": 1.0, **{f"y{j}": 0.9 - j / 100 for j in range(2 + i % 3)}, f"d{i}": 0.1}
             for i, q in enumerate(qrels)}
    p = compare_runs(first, later, qrels, ["nDCG@10"])["nDCG@10"]["p_value"]
    assert 0 < p < 1e-10  # it was rounded to 6 decimals: 0.0


def test_compare_scores_every_judged_query_eval_those_it_can_search(tmp_path, caplog):
    """`eval` leaves out a judged query without a text (it cannot be searched); `compare` scores a saved run on every
    judged query, as trec_eval -c, ir_measures and ranx do: the query the run lacks as 0, with a warning saying so."""
    import json

    from typer.testing import CliRunner

    from helpers import TINY_QRELS, TINY_QUERIES, write_beir
    from semiret.cli import app

    partial = write_beir(tmp_path / "partial", queries=dict(list(TINY_QUERIES.items())[1:]))
    evaluated = evaluate(partial, "bm25", split="test", run_path=tmp_path / "bm25.trec")
    result = CliRunner().invoke(app, ["compare", str(tmp_path / "bm25.trec"), "--baseline", str(tmp_path / "bm25.trec"),
                                      "--data", str(partial), "--json"])
    assert result.exit_code == 0, result.output
    compared = json.loads(result.stdout)
    assert compared["queries"] == len(TINY_QRELS) and evaluated["queries"] == len(TINY_QRELS) - 1
    assert compared["vs_baseline"]["nDCG@10"]["baseline"] == pytest.approx(evaluated["nDCG@10"] * 2 / 3, abs=1e-6)
    assert "ranks documents for 2 of the 3 judged queries: the other 1 count as 0" in caplog.text


def test_eval_and_compare_give_one_value_per_measure_for_unranked_judged_queries():
    """A judged query the run ranks nothing for is scored as trec_eval -c scores it (an empty ranking: its NumRel its
    own), or 0 where a measure has none (Judged@k divides by nothing; IPrec gives NaN): the mean of ``per_query``'s
    values, never NaN, for every measure, what ``compare`` compares."""
    qrels = {"q1": {"a": 1, "b": 1, "c": 0}, "q2": {"d": 1}}
    run = {"q1": {"a": 3.0, "x": 2.0, "c": 1.0}, "q2": {}}
    measures = ["NumRel", "NumRet", "NumRelRet", "Judged@10", "IPrec@0.0", "nDCG@10", "AP"]
    scored = score_run(run, qrels, measures)
    for name in measures:
        values = per_query(run, qrels, name)
        assert scored[name] == pytest.approx(sum(values.values()) / 2) and np.isfinite(scored[name]), name
    assert per_query(run, qrels, "NumRel") == {"q1": 2.0, "q2": 1.0}  # the unranked query keeps its own
    assert per_query(run, qrels, "Judged@10") == {"q1": pytest.approx(2 / 3), "q2": 0.0}


def test_runs_given_in_python_are_read_as_their_files_are():
    """Scores given as strings are numbers, not text compared as text; a record ranking a document twice, or judging
    it twice with two grades, is refused as the files' readers refuse it."""
    qrels = {"q": {"a": 1}}
    as_text = score_run({"q": {"a": "10", "b": "9"}}, qrels)
    assert as_text == score_run({"q": {"a": 10.0, "b": 9.0}}, qrels) and as_text["MRR@10"] == 1.0
    with pytest.raises(SemiretError, match="document 'a' ranked twice for query 'q'"):
        score_run([("q", "a", 1.0), ("q", "a", 2.0)], qrels)
    with pytest.raises(SemiretError, match="document 'a' judged twice for query 'q'"):
        score_run({"q": {"a": 1.0}}, [("q", "a", 1), ("q", "a", 0)])
    assert score_run({"q": {"a": 1.0}}, [("q", "a", 1), ("q", "a", 1)])["MRR@10"] == 1.0  # the same grade twice



def test_scores_that_rank_anywhere_and_fractional_grades_are_refused_in_python_too():
    """A NaN or infinite score (it ranked where dict order put it: MRR 1, 0.5 or 0.33 for one run) and a fractional
    grade (0.5 judged the document 0) are refused, naming query and document, as the files' readers refuse them;
    numpy numbers are numbers."""
    qrels = {"q": {"a": 1}}
    for bad in ({"q": {"a": float("nan"), "b": 2.0}}, {"q": {"b": 2.0, "a": float("-inf")}}, [("q", "a", np.nan)]):
        with pytest.raises(SemiretError, match="query 'q', document 'a': score .* is not a finite number"):
            score_run(bad, qrels)
    for bad in ({"q": {"a": 0.5}}, [("q", "a", 1.7)]):
        with pytest.raises(SemiretError, match="query 'q', document 'a': relevance grade .* not a whole number"):
            score_run({"q": {"a": 1.0}}, bad)
    with pytest.raises(SemiretError, match="document 'a': 'x' is not a number"):
        score_run({"q": {"a": "x"}}, qrels)
    assert score_run({"q": {"a": np.float32(2.0), "b": np.float32(1.0)}}, {"q": {"a": np.int64(1)}})["MRR@10"] == 1.0


def test_a_written_run_reads_back_as_it_was_scored(tmp_path):
    """Scores closer than 1e-6 stay apart in the file (rounded to 6 decimals they tied, and the file's trec_eval
    order put the other document first: P@1 1 in memory, 0 from the file); ranks follow trec_eval's order."""
    from semiret.data import write_trec_run

    run = {"q": {"b": 1.0000001, "a": 1.0000004, "c": 0.5, "e": 0.25, "d": 0.25}}
    write_trec_run(run, tmp_path / "run.trec")
    assert read_trec_run(tmp_path / "run.trec") == run
    assert score_run(read_trec_run(tmp_path / "run.trec"), {"q": {"a": 1}}, ["P@1"])["P@1"] == 1.0
    lines = (tmp_path / "run.trec").read_text().split("\n")
    assert [line.split()[2:4] for line in lines if line] == [["a", "1"], ["b", "2"], ["c", "3"], ["e", "4"], ["d", "5"]]

def test_measures_are_refused_before_any_search_when_they_cannot_be_computed(tmp_path, monkeypatch):
    """A measure ir_measures parses but none of its installed providers computes (RBP, SDCG) is an error naming it
    before any index is built; a measure's own parameters may hold commas."""
    import sys

    evaluation = sys.modules["semiret.evaluation.evaluate"]  # (the package's evaluate is the function)
    data = write_beir(tmp_path / "data")
    built = []
    monkeypatch.setattr(evaluation, "open_retriever", lambda *a, **k: built.append(1))
    for name in ("RBP", "SDCG@10"):
        with pytest.raises(SemiretError, match=f"measure '{re.escape(name)}': ir_measures cannot compute it"):
            evaluate(str(data), "bm25", measures=[name])
    assert not built
    assert list(parse_measures(["P(rel=2,judged_only=True)@5"])) == ["P(rel=2,judged_only=True)@5"]
    with pytest.raises(SemiretError, match="one measure a --measure"):
        parse_measures(["nDCG@10,R@100"])


def test_a_run_of_another_collection_or_an_empty_one_is_said_to_be(caplog):
    from semiret.evaluation.significance import check_baseline

    qrels = {"1": {"a": 1}, "2": {"b": 1}}
    with caplog.at_level(logging.WARNING):
        check_baseline({"1": {"x": 2.0, "y": 1.0}, "2": {"z": 1.0}}, qrels, "run other.trec")
    assert "ranks none of the judged documents" in caplog.text  # numeric query ids shared, documents not
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        check_baseline({"1": {"a": 2.0}, "2": {"z": 1.0}}, qrels, "run ours.trec")
    assert "judged documents" not in caplog.text
    with pytest.raises(SemiretError, match="run empty.trec is empty"):
        check_baseline({}, qrels, "run empty.trec")
