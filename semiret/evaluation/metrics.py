"""Retrieval measures through ir_measures (measures as objects, e.g. ``nDCG@10``)."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping

import ir_measures
import regex
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
        if "," in regex.sub(r"\([^()]*\)", "", name):  # (commas inside a measure's parameters are its own)
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
    return _nested(run, "score", _score, what)


def as_qrels(qrels, what: str = "the qrels") -> dict[str, dict[str, int]]:
    """Judgements as ``{query_id: {doc_id: relevance}}`` from any form ir_measures takes (as :func:`as_run`, with a
    ``relevance`` column or field: ``ir_measures.Qrel``)."""
    return _nested(qrels, "relevance", _grade, what)


def _score(value) -> float:
    """A run's score as a float; NaN and infinities refused (NaN would rank anywhere: where dict order put it)."""
    number = _number(value)
    if not math.isfinite(number):
        raise ValueError(f"score {value!r} is not a finite number")
    return number


def _grade(value) -> int:
    """A judgement's grade as an int; fractions refused (0.5 would judge a relevant document 0), as the qrels
    files' reader refuses them."""
    number = _number(value)
    if not math.isfinite(number) or number != int(number):
        raise ValueError(f"relevance grade {value!r} is not a whole number (grades are 0, 1, 2, ...)")
    return int(number)


def _number(value) -> float:
    """``value`` as a float (numpy's numbers and numeric text too; a bool is no number)."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a number")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{value!r} is not a number") from None


def _nested(value, field: str, cast, what: str) -> dict[str, dict]:
    """:func:`as_run` and :func:`as_qrels`: a mapping of string ids is returned as it is (no copy)."""
    if isinstance(value, Mapping):
        ready = True  # string ids and numbers already: returned as it is
        for query_id, docs in value.items():
            if not isinstance(docs, Mapping):
                raise SemiretError(f"{what}: query {query_id!r} maps to a {type(docs).__name__}, not to "
                                   f"{{doc_id: {field}}}")
            ready = ready and isinstance(query_id, str) and all(
                isinstance(d, str) and isinstance(v, NUMBERS[field]) and not isinstance(v, bool)
                and (field != "score" or math.isfinite(v)) for d, v in docs.items())
        if ready:
            return value
        records = ((q, d, v) for q, docs in value.items() for d, v in docs.items())
    elif hasattr(value, "itertuples") and hasattr(value, "columns"):  # a pandas DataFrame, as ir_measures takes
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
        try:
            docs, doc_id, number = nested.setdefault(str(query_id), {}), str(doc_id), cast(number)
        except ValueError as error:
            raise SemiretError(f"{what}: query {str(query_id)!r}, document {str(doc_id)!r}: {error}") from None
        if doc_id in docs and (field == "score" or docs[doc_id] != number):  # as the files' readers refuse them
            raise SemiretError(f"{what}: document {doc_id!r} {'ranked' if field == 'score' else 'judged'} twice for "
                               f"query {str(query_id)!r}" + (f" ({docs[doc_id]} and {number})" if field != "score"
                                                              else ""))
        docs[doc_id] = number
    return nested


NUMBERS = {"score": (int, float), "relevance": int}
"""The values a mapping already read may hold (a string score would compare as text)."""


def _record(item, field: str, what: str) -> tuple:
    if hasattr(item, "query_id") and hasattr(item, "doc_id") and hasattr(item, field):
        return item.query_id, item.doc_id, getattr(item, field)
    if isinstance(item, (tuple, list)) and len(item) == 3:
        return tuple(item)
    raise SemiretError(f"{what}: a record {item!r} is not (query_id, doc_id, {field})")


def score_run(run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]], measures=None) -> dict[str, float]:
    """Mean of each measure over the judged queries, each query's value as :func:`per_query` gives it (so that
    ``eval`` and ``compare`` report the same; trec_eval sums its count measures, num_rel and the like, where this
    averages them); ``measures``: any form :func:`parse_measures` takes; ``run`` and ``qrels``: any form
    ir_measures takes (:func:`as_run`)."""
    measures = parse_measures(measures)
    run, qrels = as_run(run), as_qrels(qrels)
    if qrels and not any(q in run for q in qrels):
        log.warning("the run ranks none of the %d judged queries: every measure is 0 (a run of another collection "
                    "or split?)", len(qrels))
    values = _values(run, qrels, measures)
    return {name: sum(each.values()) / len(each) if each else 0.0 for name, each in values.items()}


def _values(run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]],
            measures: dict[str, object]) -> dict[str, dict[str, float]]:
    """Each measure's value for each judged query: from the query's ranking (trec_eval's order); a judged query
    the run leaves unranked (or ranks nothing for) as trec_eval -c scores it, with an empty ranking (its num_rel
    stays its own), or 0 where a measure has no value for one (ir_measures' providers raise or give NaN there);
    a value that is no number (NaN) counts as 0."""
    out = {name: dict.fromkeys(qrels, 0.0) for name, _ in measures.items()}
    names = {}
    for name, measure in measures.items():
        names.setdefault(str(measure), []).append(name)
    ranked = {q: scores for q, scores in run.items() if q in qrels and scores}
    unranked = {q: {} for q in qrels if q not in ranked}
    passes = [(ranked, list(measures.values()))] if ranked else []
    if unranked:  # each measure alone: one with no value for an empty ranking (Judged@k) leaves the others theirs
        passes += [(unranked, [measure]) for measure in measures.values()]
    for scored, asked in passes:
        judged = {q: qrels[q] for q in scored}  # (a provider may give values for every judged query)
        try:
            found = list(ir_measures.iter_calc(asked, judged, trec_ordered(scored)))
        except Exception as exc:  # ir_measures' providers raise what they raise (AssertionError, ValueError, ...)
            if scored is unranked:
                continue  # 0 for these queries
            raise SemiretError(f"measures {', '.join(measures)}: ir_measures cannot compute them here ({exc}; "
                               "its providers' support varies: pytrec_eval for trec_eval's measures, others "
                               "need packages of their own, or numeric query ids)") from None
        for value in found:
            number = float(value.value)
            for name in names[str(value.measure)]:
                out[name][value.query_id] = number if math.isfinite(number) else 0.0
    return out


def check_measures(measures: dict[str, object], qrels: dict[str, dict[str, int]]) -> None:
    """Refuse measures ir_measures cannot compute on these judgements, each alone (an error naming it), before any
    search: a few judged queries ranked by their own judgements are scored."""
    probe = {q: {d: float(grade) for d, grade in docs.items()} for q, docs in list(qrels.items())[:3]}
    for name, measure in measures.items():
        try:
            _values(probe, {q: qrels[q] for q in probe}, {name: measure})
        except SemiretError:
            raise SemiretError(f"measure {name!r}: ir_measures cannot compute it on these judgements (its providers'"
                               " support varies: trec_eval's measures and the defaults always work; others need "
                               "packages of their own, or numeric query ids)") from None


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
    return _values(run, qrels, {str(measure): measure})[str(measure)]
