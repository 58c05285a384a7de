"""Search options chosen on judged queries: every setting of a grid of a retriever's search options scored on them
(PyTerrier's ``GridSearch``, Anserini's parameter sweeps), and, with folds, an estimate of how the chosen setting does
on queries it was not chosen on (PyTerrier's ``KFoldGridSearch``).

A setting chosen and scored on the same few dozen queries looks better than it will be: with ``folds``, the queries
are split into that many folds, the setting best on the other folds is scored on each fold, and the tuned system's
per-query values (each query scored by a setting chosen without it) are compared with the retriever as opened, by
a paired test. Only search options are tuned (no index is built again); a retriever's search options are listed by
``GET /indexes/{name}``'s ``search_options`` and ``semiret search --help``.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field

import numpy as np

from semiret.data.chunking import PARENT_FIELD
from semiret.errors import SemiretError
from semiret.evaluation.evaluate import warn_deeper_measures, warn_unknown_documents
from semiret.evaluation.metrics import parse_measures
from semiret.evaluation.significance import mean_per_query, paired_p_value
from semiret.options import option_names
from semiret.progress import track

log = logging.getLogger(__name__)

MAX_SETTINGS = 1000
"""Grids larger than this are refused: each setting searches every query."""


@dataclass
class Setting:
    """One setting of the grid (``options``: the search options it changes; empty: the retriever as opened), its
    mean ``score``, each judged query's value, and its place in the grid (``position``: 0 the retriever as opened,
    then the grid's order), which breaks ties."""

    options: dict
    score: float
    per_query: np.ndarray = field(repr=False)
    position: int = 0


def settings_of(grid: dict[str, list]) -> list[dict]:
    """Every combination of the grid's values, in the grid's order (the last option varying fastest)."""
    if not grid:
        raise SemiretError("give the search options to tune, each with its values to try (--grid NAME=V1,V2)")
    for name, values in grid.items():
        if not isinstance(values, (list, tuple)) or not values:
            raise SemiretError(f"option {name!r}: give a non-empty list of values to try, got {values!r}")
    combinations = 1
    for values in grid.values():
        combinations *= len(values)
    if combinations > MAX_SETTINGS:
        raise SemiretError(f"the grid holds {combinations:,} settings, more than {MAX_SETTINGS:,}: try fewer values")
    names = list(grid)
    return [dict(zip(names, values)) for values in itertools.product(*grid.values())]


def grid_search(retriever, queries: dict[str, str], qrels: dict[str, dict[str, int]], grid: dict[str, list],
                measure="nDCG@10", depth: int = 100, n_threads: int = 1) -> list[Setting]:
    """Each setting of ``grid`` (``{option: [values]}``) applied to ``retriever`` (over the options it was opened
    with; one variant made at a time) and its
    ranking of ``queries`` (each query's best ``depth``; an index of passages: documents by their best passage, as
    ``eval`` ranks them) scored by ``measure`` on ``qrels``; best first (ties: the grid's order), the retriever as
    opened first among them (``options`` empty)."""
    measures = parse_measures([measure])
    if len(measures) != 1:
        raise SemiretError(f"tune by one measure, got {len(measures)}")
    measure_object = next(iter(measures.values()))
    judged = [query_id for query_id in qrels if query_id in queries]
    if not judged:
        raise SemiretError("none of the judged queries has a text to search")
    cls = type(retriever)
    known = option_names([cls.queries.Options])
    unknown = [name for name in grid if name not in known]
    if unknown:
        raise SemiretError(f"{', '.join(unknown)}: not a search option of retriever {cls.name!r} (its search options: "
                           f"{', '.join(known) or 'none'}; options that shape the index are chosen by building it "
                           "again)")
    settings = settings_of(grid)
    for options in settings:
        cls.search_options({**retriever.given_options, **options})  # bad values fail before any search
    warn_deeper_measures(measures, depth)
    warn_unknown_documents(qrels, retriever)
    grouped = {"group_by": PARENT_FIELD} if retriever.chunking is not None else {}  # documents by best passage
    texts = [queries[query_id] for query_id in judged]
    results = []
    for position, options in enumerate(track([{}] + settings, "tuning", total=len(settings) + 1)):
        variant = retriever.with_options(**{**retriever.given_options, **options}) if options else retriever
        hits = variant.search(texts, k=depth, n_threads=n_threads, **grouped)
        values = mean_per_query([hits.as_run(judged, by_group=bool(grouped))], qrels, measure_object, judged)
        results.append(Setting(options, float(values.mean()), values, position))
    if len(results) > 1 and all(np.array_equal(s.per_query, results[0].per_query) for s in results[1:]):
        log.warning("no setting changed any query's %s from the retriever as opened (an option that takes effect "
                    "only with another, as RM3's fb_docs with rm3=true?)", measure)
    return sorted(results, key=lambda setting: (-setting.score, setting.position))


def check_folds(folds, n_queries: int) -> None:
    if isinstance(folds, bool) or not isinstance(folds, int) or not 2 <= folds <= n_queries:
        raise SemiretError(f"folds (--folds) must be a whole number from 2 to the {n_queries} judged queries, "
                           f"got {folds!r}")


def cross_validated(settings: list[Setting], folds: int, seed: int = 0) -> dict:
    """The tuned system's figures by ``folds``-fold cross-validation over the queries ``settings`` were scored on:
    for each fold the setting best on the other folds, scored on it; the mean of those per-query values, each
    fold's choice, and the difference from the retriever as opened with a paired t-test."""
    n = len(settings[0].per_query)
    check_folds(folds, n)
    order = np.random.default_rng(seed).permutation(n)
    fold_of = np.empty(n, np.int64)
    fold_of[order] = np.arange(n) % folds
    settings = sorted(settings, key=lambda setting: setting.position)  # ties go by the grid, never the held-out fold
    values = np.stack([setting.per_query for setting in settings])  # [settings, queries]
    tuned = np.empty(n)
    chosen = []
    for fold in range(folds):
        held = fold_of == fold
        best = int(np.argmax(values[:, ~held].mean(axis=1)))  # the first of equals in the grid's order
        tuned[held] = values[best, held]
        chosen.append(settings[best].options)
    as_opened = next(s for s in settings if not s.options).per_query
    difference = np.round(tuned - as_opened, 10)
    p_value = paired_p_value(difference)
    return {"folds": folds, "score": round(float(tuned.mean()), 6), "chosen": chosen,
            "vs_as_opened": {"delta": round(float(difference.mean()), 6),
                             "p_value": None if p_value is None else float(f"{p_value:.6g}"),
                             "better": int((difference > 0).sum()), "worse": int((difference < 0).sum())}}
