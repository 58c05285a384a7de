"""Retrieval measures through ir_measures (measures as objects, e.g. ``nDCG@10``)."""

from __future__ import annotations

import ir_measures
from ir_measures import R, RR, nDCG

from semiret.errors import SemiretError

DEFAULT_MEASURES = {"nDCG@10": nDCG @ 10, "R@100": R @ 100, "MRR@10": RR @ 10}


def parse_measures(names: list[str] | None) -> dict[str, object]:
    """Report names to ir_measures objects; ``MRR@k`` is accepted as the usual name of ``RR@k``."""
    if not names:
        return dict(DEFAULT_MEASURES)
    parsed = {}
    for name in names:
        try:
            parsed[name] = ir_measures.parse_measure(name.replace("MRR@", "RR@"))
        except (NameError, ValueError) as exc:  # ir_measures' own errors for unknown names and bad syntax
            raise SemiretError(f"measure {name!r}: {exc} (--measure takes ir_measures names, e.g. "
                               f"{', '.join(DEFAULT_MEASURES)}, P@5, AP)") from None
    return parsed


def score_run(run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]],
              measures: dict[str, object] | None = None) -> dict[str, float]:
    """Mean of each measure over the judged queries (queries missing from the run count as 0)."""
    measures = measures or DEFAULT_MEASURES
    full_run = {q: run.get(q, {}) for q in qrels}
    aggregate = ir_measures.calc_aggregate(list(measures.values()), qrels, full_run)
    return {name: float(aggregate.get(measure, 0.0)) for name, measure in measures.items()}


def per_query(run, qrels, measure) -> dict[str, float]:
    """One measure for each judged query (for significance tests and error analysis)."""
    out = {q: 0.0 for q in qrels}
    for m in ir_measures.iter_calc([measure], qrels, run):
        out[m.query_id] = float(m.value)
    return out
