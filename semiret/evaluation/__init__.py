"""Evaluation: ir_measures-based scoring and the end-to-end evaluation runner."""

from semiret.evaluation.evaluate import evaluate
from semiret.evaluation.metrics import DEFAULT_MEASURES, parse_measures, score_run

__all__ = ["DEFAULT_MEASURES", "evaluate", "parse_measures", "score_run"]
