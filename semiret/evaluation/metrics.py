"""Retrieval measures through ir_measures (measures as objects, e.g. ``nDCG@10``)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

import ir_measures
from ir_measures import R, RR, nDCG

from semiret.errors import SemiretError

log = logging.getLogger(__name__)

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


def as_run(run, what: str = "the run") -> dict[str, dict[str, float]]:
    """A run as ``{query_id: {doc_id: score}}`` from any form ir_measures takes: that mapping (ids made strings), a
    pandas DataFrame with ``query_id``, ``doc_id`` and ``score`` columns, or an iterable of such records
    (``ir_measures.ScoredDoc``, or ``(query_id, doc_id, score)`` tuples)."""
    return _nested(run, "score", float, what)


def as_qrels(qrels, what: str = "the qrels") -> dict[str, dict[str, int]]:
    """Judgements as ``{query_id: {doc_id: relevance}}`` from any form ir_measures takes (as :func:`as_run`, with a
    ``relevance`` column or field: ``ir_measures.Qrel``)."""
    return _nested(qrels, "relevance", int, what)


def _nested(value, field: str, cast, what: str) -> dict[str, dict]:
    """:func:`as_run` and :func:`as_qrels`: a mapping of string ids is returned as it is (no copy)."""
    if isinstance(value, Mapping):
        strings = True
        for query_id, docs in value.items():
            if not isinstance(docs, Mapping):
                raise SemiretError(f"{what}: query {query_id!r} maps to a {type(docs).__name__}, not to "
                                   f"{{doc_id: {field}}}")
            strings = strings and isinstance(query_id, str) and all(isinstance(d, str) for d in docs)
        if strings:
            return value
        return {str(q): {str(d): cast(v) for d, v in docs.items()} for q, docs in value.items()}
    if hasattr(value, "itertuples") and hasattr(value, "columns"):  # a pandas DataFrame, as ir_measures takes
        missing = [c for c in ("query_id", "doc_id", field) if c not in value.columns]
        if missing:
            raise SemiretError(f"{what}: a DataFrame without the column(s) {', '.join(missing)} (ir_measures' names: "
                               f"query_id, doc_id, {field})")
        records = zip(value["query_id"], value["doc_id"], value[field])
    elif isinstance(value, Iterable) and not isinstance(value, (str, bytes)):
        records = (_record(item, field, what) for item in value)
    else:
        raise SemiretError(f"{what}: a {type(value).__name__}, not {{query_id: {{doc_id: {field}}}}}, a DataFrame "
                           f"or records")
    nested: dict[str, dict] = {}
    for query_id, doc_id, number in records:
        nested.setdefault(str(query_id), {})[str(doc_id)] = cast(number)
    return nested


def _record(item, field: str, what: str) -> tuple:
    if hasattr(item, "query_id") and hasattr(item, "doc_id") and hasattr(item, field):
        return item.query_id, item.doc_id, getattr(item, field)
    if isinstance(item, (tuple, list)) and len(item) == 3:
        return tuple(item)
    raise SemiretError(f"{what}: a record {item!r} is not (query_id, doc_id, {field})")


def score_run(run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]], measures=None) -> dict[str, float]:
    """Mean of each measure over the judged queries (queries missing from the run count as 0); ``measures``: any
    form :func:`parse_measures` takes; ``run`` and ``qrels``: any form ir_measures takes (:func:`as_run`)."""
    measures = parse_measures(measures)
    run, qrels = as_run(run), as_qrels(qrels)
    if qrels and not any(q in run for q in qrels):
        log.warning("the run ranks none of the %d judged queries: every measure is 0 (a run of another collection "
                    "or split?)", len(qrels))
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
    return values_per_query(as_run(run), as_qrels(qrels), measure)


def values_per_query(run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]], measure) -> dict[str, float]:
    """:func:`per_query` of a run and qrels already read (as :func:`as_run` and :func:`as_qrels` give them): what
    a comparison calls for each run and measure, without reading them again each time."""
    if isinstance(measure, str):
        [measure] = parse_measures([measure]).values()
    out = {q: 0.0 for q in qrels}
    for m in ir_measures.iter_calc([measure], qrels, trec_ordered(run)):
        out[m.query_id] = float(m.value)
    return out
