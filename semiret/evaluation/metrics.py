"""Retrieval measures through ir_measures (measures as objects, e.g. ``nDCG@10``)."""

from __future__ import annotations

import ir_measures
from ir_measures import R, RR, nDCG

from semiret.errors import SemiretError

DEFAULT_MEASURES = {"nDCG@10": nDCG @ 10, "R@100": R @ 100, "MRR@10": RR @ 10}


def parse_measures(names) -> dict[str, object]:
    """Measures as ``{report name: ir_measures object}``, from names (``MRR@k`` is accepted as the usual name of
    ``RR@k``), ir_measures objects (``nDCG@10`` from ``ir_measures``), a mix of the two, or such a mapping already;
    None or empty: the defaults. Every function here that takes measures takes any of these."""
    if not names:
        return dict(DEFAULT_MEASURES)
    if isinstance(names, dict):
        return dict(names)
    if isinstance(names, str) or not isinstance(names, (list, tuple, set, frozenset)):
        names = [names]
    parsed = {}
    for name in names:
        if not isinstance(name, str):
            if not hasattr(name, "NAME"):  # what every ir_measures measure has
                raise SemiretError(f"measure {name!r} is neither a name nor an ir_measures measure")
            parsed[str(name)] = name
            continue
        if "," in name:
            raise SemiretError(f"measure {name!r}: one measure a --measure (repeat it: --measure "
                               f"{' --measure '.join(n.strip() for n in name.split(','))})")
        try:
            parsed[name] = ir_measures.parse_measure(name.replace("MRR@", "RR@"))
        except (NameError, ValueError) as exc:  # ir_measures' own errors for unknown names and bad syntax
            trec_eval = _trec_eval_measure(name)
            if trec_eval is None:
                raise SemiretError(f"measure {name!r}: {exc} (--measure takes ir_measures names, e.g. "
                                   f"{', '.join(DEFAULT_MEASURES)}, P@5, AP, or trec_eval's: ndcg_cut_10)") from None
            parsed[name] = trec_eval
    return parsed


def _trec_eval_measure(name: str):
    """trec_eval's name of one measure (``ndcg_cut_10``, ``map``, ``recall_100``) as ir_measures reads it, or None."""
    try:
        found = ir_measures.parse_trec_measure(name)
    except (NameError, ValueError):
        return None
    return found[0] if len(found) == 1 else None


def score_run(run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]], measures=None) -> dict[str, float]:
    """Mean of each measure over the judged queries (queries missing from the run count as 0); ``measures``: any
    form :func:`parse_measures` takes."""
    measures = parse_measures(measures)
    full_run = trec_ordered({q: run.get(q, {}) for q in qrels})
    aggregate = ir_measures.calc_aggregate(list(measures.values()), qrels, full_run)
    return {name: float(aggregate.get(measure, 0.0)) for name, measure in measures.items()}


def trec_ordered(run: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """``run`` with each query's scores replaced by their places in trec_eval's order (score descending, ties by
    document id descending), so that every measure reads the same ranking: ir_measures hands measures to
    backends that break ties differently (pytrec_eval for nDCG@10 and R@100 as trec_eval does, its msmarco code
    for RR@10 by document id ascending), and runs of overlap scores (bag-of-tokens) tie in most queries."""
    ordered = {}
    for query_id, scores in run.items():
        ranking = sorted(scores.items(), key=lambda item: (item[1], item[0]), reverse=True)
        ordered[query_id] = {doc_id: float(len(ranking) - place) for place, (doc_id, _) in enumerate(ranking)}
    return ordered


def per_query(run, qrels, measure) -> dict[str, float]:
    """One measure (a name or an ir_measures object) for each judged query (for significance tests and error
    analysis)."""
    if isinstance(measure, str):
        [measure] = parse_measures([measure]).values()
    out = {q: 0.0 for q in qrels}
    for m in ir_measures.iter_calc([measure], qrels, trec_ordered(run)):
        out[m.query_id] = float(m.value)
    return out
