"""Paired comparison of two runs on the same queries: is a difference in a measure more than query noise?

The two-sided paired t-test over per-query values is what TREC practice and PyTerrier's ``Experiment(baseline=...)``
report; on a few hundred queries (or Vaswani's 93) differences of 0.01-0.02 nDCG@10 are often within it. A side may
be several runs of one system (trained with several seeds): their per-query values are averaged before the test, so
the comparison is between the systems rather than between two draws of their training noise.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import numpy as np
from scipy import stats

from semiret.data.trec import Run
from semiret.errors import SemiretError
from semiret.evaluation.metrics import as_qrels, as_run, parse_measures, values_per_query

log = logging.getLogger(__name__)

SIGNIFICANCE_LEVEL = 0.05
TESTS = ("t", "randomization", "wilcoxon")
"""Paired tests a comparison may use: Student's t (the default, TREC's and PyTerrier's), Fisher's randomization
test (each query's difference's sign flipped at random, 10,000 times, seeded: what Smucker et al. 2007 recommend
for IR), and Wilcoxon's signed-rank test (ranks, not sizes, of the differences)."""
RANDOMIZATIONS = 10_000


def check_baseline(baseline: Run, qrels: dict[str, dict[str, int]], what: str = "the baseline run") -> None:
    """A baseline (or compared run) that retrieved nothing for any judged query is a run of another collection or
    split; one that misses some is compared as it is (those queries count as 0, as ``trec_eval -c`` counts them),
    with a warning saying how many: a run of a subset of the queries would otherwise read as a much worse system."""
    covered = _judged_queries_ranked(baseline, qrels, what)
    if covered < len(qrels):
        log.warning("%s ranks documents for %d of the %d judged queries: the other %d count as 0 (a run of some of "
                    "the queries, or queries it found nothing for)", what, covered, len(qrels), len(qrels) - covered)


def _judged_queries_ranked(run: Run, qrels, what: str) -> int:
    """How many judged queries ``run`` ranks documents for; none is an error, and none of their judged documents
    ranked is worth a warning (numeric query ids of another collection overlap: its run scores 0 everywhere)."""
    if not run:
        raise SemiretError(f"{what} is empty: it ranks no document for any query")
    covered = sum(q in run for q in qrels)
    if not covered:
        raise SemiretError(f"{what} has none of the judged queries (a run of another collection or split?)")
    if not any(doc_id in qrels[q] for q in run if q in qrels for doc_id in run[q]):
        log.warning("%s ranks none of the judged documents of the %d judged queries it ranks: a run (or judgements) "
                    "of another collection?", what, covered)
    return covered


def compare_runs(run: Run | Sequence[Run], baseline: Run | Sequence[Run], qrels: dict[str, dict[str, int]],
                 measures=None, test: str = "t") -> dict[str, dict]:
    """For each measure: the baseline's mean, the mean difference (run - baseline) with its 95% confidence
    interval (Student's t over the queries), the paired ``test``'s p-value (:data:`TESTS`), and how many judged
    queries the run does better, worse or the same on. Queries missing from a run count as 0, as in
    :func:`~semiret.evaluation.metrics.score_run`. Either side may be a list of runs (one system's seeds), averaged
    query by query. With one judged query there is no test (``p_value`` None, not significant); where every
    query differs by the same non-zero amount the t-test is undefined too, and the exact two-sided sign test
    stands in (two queries both better: p = 0.5)."""
    if test not in TESTS:
        raise SemiretError(f"unknown significance test {test!r} (have: {', '.join(TESTS)})")
    runs, baselines, qrels = _as_runs(run), _as_runs(baseline), as_qrels(qrels)
    for each in baselines:
        _judged_queries_ranked(each, qrels, "the baseline run")  # callers warn of partial runs (check_baseline)
    judged = list(qrels)
    measures = parse_measures(measures)
    comparison = {}
    for name, measure in measures.items():
        a = mean_per_query(runs, qrels, measure, judged)
        b = mean_per_query(baselines, qrels, measure, judged)
        diff = np.round(a - b, 10)  # 0.1 and 0.09999999999999998 are one difference, not query noise
        p = paired_p_value(diff, test)
        comparison[name] = {"baseline": round(float(b.mean()), 6), "delta": round(float(diff.mean()), 6),
                            "delta_ci95": _confidence_interval(diff),
                            "p_value": None if p is None else float(f"{p:.6g}"),  # 7.19e-14 is not 0
                            "test": test, "significant": p is not None and p < SIGNIFICANCE_LEVEL,
                            "better": int((diff > 0).sum()), "worse": int((diff < 0).sum()),
                            "same": int((diff == 0).sum())}
    return comparison


CORRECTIONS = ("holm", "bonferroni", "none")
"""How the p-values of several systems' comparisons with one baseline are corrected for testing several at once
(PyTerrier's ``Experiment(correction=...)``, statsmodels' ``multipletests``): Holm's step-down method (the
default: never less powerful than Bonferroni's, and as strict on the family-wise error), Bonferroni's, or none."""


def corrected_p_values(p_values: Sequence[float | None], correction: str = "holm") -> list[float | None]:
    """``p_values`` of tests made together, corrected (None: a test not made, left out of the count). Written here
    as statsmodels (not a dependency) would: ``min(1, m p)`` for Bonferroni; for Holm the i-th smallest of the m
    times ``m - i + 1``, each at least the one before (step-down)."""
    if correction not in CORRECTIONS:
        raise SemiretError(f"unknown correction {correction!r} (have: {', '.join(CORRECTIONS)})")
    made = [i for i, p in enumerate(p_values) if p is not None]
    corrected: list[float | None] = list(p_values)
    if correction == "none" or not made:
        return corrected
    m = len(made)
    if correction == "bonferroni":
        for i in made:
            corrected[i] = min(1.0, m * p_values[i])
        return corrected
    running = 0.0
    for rank, i in enumerate(sorted(made, key=lambda i: p_values[i])):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        corrected[i] = running
    return corrected


def compare_systems(systems: Mapping[str, Run | Sequence[Run]], baseline: Run | Sequence[Run],
                    qrels: dict[str, dict[str, int]], measures=None, test: str = "t",
                    correction: str = "holm") -> dict[str, dict[str, dict]]:
    """:func:`compare_runs` of each system (a run, or its seeds' runs) with one baseline, then, measure by measure,
    the systems' p-values corrected for being tested together (:data:`CORRECTIONS`): each comparison also gives
    ``p_value_corrected`` and ``correction``, and ``significant`` reads the corrected p-value (PyTerrier's
    ``Experiment`` with a baseline and a correction). ``{system: {measure: comparison}}``."""
    if correction not in CORRECTIONS:
        raise SemiretError(f"unknown correction {correction!r} (have: {', '.join(CORRECTIONS)})")
    compared = {name: compare_runs(runs, baseline, qrels, measures, test) for name, runs in systems.items()}
    for measure in parse_measures(measures):
        comparisons = [by_measure[measure] for by_measure in compared.values()]
        for comparison, p in zip(comparisons, corrected_p_values([c["p_value"] for c in comparisons], correction)):
            comparison.update(p_value_corrected=None if p is None else float(f"{p:.6g}"), correction=correction,
                              significant=p is not None and p < SIGNIFICANCE_LEVEL)
    return compared


def _confidence_interval(diff: np.ndarray) -> list[float] | None:
    """The mean difference's 95% interval by Student's t over the queries (None for fewer than two)."""
    if len(diff) < 2:
        return None
    half = float(stats.t.ppf(0.975, len(diff) - 1) * diff.std(ddof=1) / np.sqrt(len(diff)))
    return [round(float(diff.mean()) - half, 6), round(float(diff.mean()) + half, 6)]


def paired_p_value(diff: np.ndarray, test: str = "t") -> float | None:
    """The paired ``test``'s two-sided p-value over the queries' differences; None for fewer than two queries.
    Where every difference is equal the tests are undefined or degenerate: identical runs are simply not different
    (1.0), and equal non-zero differences take the exact sign test, 2 x 0.5^n."""
    if len(diff) < 2:
        return None
    if np.ptp(diff) == 0:
        return 1.0 if not diff.any() else min(1.0, 2.0 * 0.5 ** len(diff))
    if test == "randomization":
        return _sign_flip_p_value(diff)
    if test == "wilcoxon":
        return float(stats.wilcoxon(diff).pvalue)
    return float(stats.ttest_1samp(diff, 0.0).pvalue)


def _sign_flip_p_value(diff: np.ndarray, rounds: int = RANDOMIZATIONS, seed: int = 0) -> float:
    """Fisher's randomization test: how often a mean difference as large flips up when each query's sign is flipped at
    random (``rounds`` times, seeded; ``(hits + 1) / (rounds + 1)``), the flips drawn a block at a time so memory stays
    a few tens of MB however many queries. Written here: scipy's ``permutation_test`` holds every flip at once."""
    rng = np.random.default_rng(seed)
    observed = abs(diff.mean()) - 1e-12
    hits, done, block = 0, 0, max(1, 2**22 // len(diff))
    while done < rounds:
        size = min(block, rounds - done)
        signs = rng.integers(0, 2, size=(size, len(diff)), dtype=np.int8) * 2 - 1
        hits += int((np.abs(signs @ diff) / len(diff) >= observed).sum())
        done += size
    return (hits + 1) / (rounds + 1)



def _as_runs(side: Run | Sequence[Run]) -> list[Run]:
    """One run (any form :func:`~semiret.evaluation.metrics.as_run` takes) or a list of runs (one system's seeds)."""
    if isinstance(side, Mapping) or hasattr(side, "itertuples"):
        return [as_run(side)]
    items = list(side)
    if not items:
        raise SemiretError("a side of the comparison has no runs")
    if all(isinstance(item, Mapping) or hasattr(item, "itertuples") for item in items):
        return [as_run(item) for item in items]
    return [as_run(items)]  # the records of one run


def mean_per_query(runs: list[Run], qrels, measure, judged: list[str]) -> np.ndarray:
    """One measure of each judged query (in ``judged``'s order), averaged over ``runs`` (one system's seeds); runs and
    qrels as read (:func:`~semiret.evaluation.metrics.as_run`, ``as_qrels``, a TREC file)."""
    values = [values_per_query(run, qrels, measure) for run in runs]
    return np.array([[v[q] for q in judged] for v in values]).mean(axis=0)
