"""Paired comparison of two runs on the same queries: is a difference in a measure more than query noise?

The two-sided paired t-test over per-query values is what TREC practice and PyTerrier's ``Experiment(baseline=...)``
report; on a few hundred queries (or Vaswani's 93) differences of 0.01-0.02 nDCG@10 are often within it.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from semiret.data.trec import Run
from semiret.errors import SemiretError
from semiret.evaluation.metrics import parse_measures, per_query

SIGNIFICANCE_LEVEL = 0.05


def check_baseline(baseline: Run, qrels: dict[str, dict[str, int]]) -> None:
    """A baseline that retrieved nothing for any judged query is a run of another collection or split."""
    if not any(q in baseline for q in qrels):
        raise SemiretError("the baseline run has none of the judged queries (a run of another collection or split?)")


def compare_runs(run: Run, baseline: Run, qrels: dict[str, dict[str, int]],
                 measures: dict[str, object] | None = None) -> dict[str, dict]:
    """For each measure: the baseline's mean, the mean difference (run - baseline), the paired t-test p-value,
    and how many judged queries the run does better, worse or the same on. Queries missing from a run count
    as 0, as in :func:`~semiret.evaluation.metrics.score_run`."""
    check_baseline(baseline, qrels)
    judged = list(qrels)
    measures = measures or parse_measures(None)
    comparison = {}
    for name, measure in measures.items():
        ours, theirs = per_query(run, qrels, measure), per_query(baseline, qrels, measure)
        a = np.array([ours[q] for q in judged])
        b = np.array([theirs[q] for q in judged])
        diff = a - b
        # ttest_rel is undefined (nan) when every difference is equal; identical runs are simply not different
        p = float(stats.ttest_rel(a, b).pvalue) if np.ptp(diff) > 0 else (1.0 if not diff.any() else 0.0)
        comparison[name] = {"baseline": round(float(b.mean()), 6), "delta": round(float(diff.mean()), 6),
                            "p_value": round(p, 6), "significant": p < SIGNIFICANCE_LEVEL,
                            "better": int((diff > 0).sum()), "worse": int((diff < 0).sum()),
                            "same": int((diff == 0).sum())}
    return comparison
