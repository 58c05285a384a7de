"""Evaluation: ir_measures-based scoring, paired comparison of runs, and the end-to-end evaluation runner."""

from semiret.evaluation.evaluate import evaluate
from semiret.evaluation.metrics import DEFAULT_MEASURES, parse_measures, score_run
from semiret.evaluation.significance import compare_runs

__all__ = ["DEFAULT_MEASURES", "compare_runs", "evaluate", "parse_measures", "score_run"]
