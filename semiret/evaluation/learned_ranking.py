"""Learning to rank on judged queries (``semiret ltr``; PyTerrier's ``pt.ltr.apply_learned_model`` with LightGBM's
LambdaMART): a first stage's best candidates of each judged query described by the features of
:class:`~semiret.search.learned_ranking.LearnedRanking` (the first stage's score and rank, each feature index's score
of the candidate), labelled by the qrels, and a LambdaMART ensemble trained on them, early-stopped on a share of the
queries held out (its nDCG@10 there, beside the first stage's on the same queries, is what the report says of it).

A model learned on some queries is scored on others: train on a collection's train split, report on its test split
(``semiret eval --ltr``). Feature indexes whose models were trained on the same judged queries give scores better
than they will be on new queries, which the trees learn to trust too much: prefer models that were not.
"""

from __future__ import annotations

import logging
import re
import time

import numpy as np

from semiret.errors import SemiretError
from semiret.evaluation.metrics import parse_measures, values_per_query
from semiret.evaluation.significance import compare_runs
from semiret.progress import track
from semiret.search.learned_ranking import (LearnedRanking, LearnedRankingConfig, check_feature_index,
                                            index_record, lightgbm, predicted)
from semiret.search.retrievers import check_count

log = logging.getLogger(__name__)

MIN_QUERIES = 10
"""Judged queries with a relevant candidate needed to learn from (fewer: too few rankings to learn any)."""

MIN_DEV_QUERIES = 5
"""Held-out queries needed to stop the training early on (fewer: an estimate too noisy to stop by)."""

MAX_GRADE = 30
"""The highest relevance grade LambdaMART's default gains take (2^30 - 1); higher grades are read as it."""

NDCG_10 = next(iter(parse_measures(["nDCG@10"]).values()))

QUERY_BATCH = 64
"""Queries whose candidates are searched and described at once (a step of the progress bar)."""


def fit_learned_ranking(first_stage, features, queries: dict[str, str], qrels: dict[str, dict[str, int]],
                        config: LearnedRankingConfig | None = None, n_threads: int = 1, folds: int | None = None
                        ) -> tuple[LearnedRanking, dict]:
    """A :class:`LearnedRanking` over ``first_stage`` (a retriever) with ``features`` (retrievers of the same
    corpus), trained on ``queries`` judged by ``qrels``, and the report of its training (queries used, held out,
    the trees kept, nDCG@10 of the first stage and of the learned ranking on the held-out queries, before the
    refit, each feature's share of the trees' gain). ``folds``: also the report's ``cross_validated``, an estimate
    for judged queries too few to spare a test set: each fold's queries ranked by a model learned (as this one is)
    from the other folds', their nDCG@10 against the first stage's, with a paired t-test (PyTerrier's
    ``KFoldGridSearch`` for a learned model)."""
    config = config or LearnedRankingConfig()
    check_count(n_threads, "n_threads (--threads)")
    check_feature_index(first_stage, "first stage")
    ranking = LearnedRanking(None, features, first_stage.name, config.depth,
                             {"first_stage_index": index_record(first_stage)})
    judged = [query_id for query_id in qrels if query_id in queries and any(g > 0 for g in qrels[query_id].values())]
    if len(judged) < MIN_QUERIES:
        raise SemiretError(f"{len(judged)} judged queries with a relevant document and a text: a learned ranking "
                           f"needs at least {MIN_QUERIES} (judge more queries, or fuse the indexes instead: "
                           "semiret search --fuse-with)")
    if folds is not None:
        from semiret.evaluation.tuning import check_folds

        check_folds(folds, len(judged))
        _held_out(config, round(len(judged) * (folds - 1) / folds), "the other folds' ")
    held_out = _held_out(config, len(judged))
    lgb = lightgbm()  # a missing LightGBM said before the searches
    started = time.perf_counter()
    candidates = _Candidates.described(first_stage, ranking, queries, judged, qrels, config.depth, n_threads)
    labelled = candidates.labelled(judged)
    if len(labelled) < MIN_QUERIES:
        raise SemiretError(f"the first stage finds a relevant document in its best {config.depth} for "
                           f"{len(labelled)} of {len(judged)} judged queries: too few to learn from (at least "
                           f"{MIN_QUERIES}; search deeper: --depth)")
    params = {"objective": "lambdarank", "metric": "ndcg", "eval_at": [10], "learning_rate": config.learning_rate,
              "num_leaves": config.leaves, "min_data_in_leaf": config.min_leaf_documents, "seed": config.seed,
              "deterministic": True, "force_row_wise": True, "num_threads": n_threads, "verbosity": -1,
              "feature_pre_filter": False}
    learner = _Learner(lgb, params, config, candidates, _lightgbm_names(ranking.feature_names()))
    booster, trees, dev = learner.learned(judged, held_out, config.seed)
    report = {"queries": len(judged), "training_queries": len(candidates.labelled(judged)) - len(dev),
              "held_out_queries": len(dev), "queries_without_relevant_candidate": len(judged) - len(labelled),
              "trees": trees, "refit": bool(dev) and config.refit, "config": vars(config)}
    if dev:
        report["held_out_ndcg@10"] = {"first_stage": round(float(candidates.ndcg(dev, None).mean()), 4),
                                      "learned": round(float(candidates.ndcg(dev, booster).mean()), 4)}
    if dev and config.refit:  # the trees chosen, learned again from every judged query
        booster = learner.boosted(labelled, trees)
    ranking.booster = booster
    if folds is not None:
        report["cross_validated"] = learner.cross_validated(judged, folds)
    report["seconds"] = round(time.perf_counter() - started, 2)
    gains = booster.feature_importance(importance_type="gain", iteration=booster.best_iteration or None)
    total = float(gains.sum()) or 1.0
    report["gain_shares"] = {name: round(float(gain) / total, 4)
                             for name, gain in zip(ranking.feature_names(), gains)}
    ranking.record["trained"] = {key: value for key, value in report.items() if key != "config"}
    ranking.record["config"] = vars(config)
    return ranking, report


def _held_out(config: LearnedRankingConfig, judged: int, which: str = "") -> int:
    """The queries held out of ``judged`` to stop on, or an error where they are too few to."""
    count = round(config.dev_fraction * judged)
    if config.dev_fraction > 0 and count < MIN_DEV_QUERIES:
        raise SemiretError(f"{config.dev_fraction:g} of {which}{judged} judged queries holds out {count}, fewer "
                           f"than the {MIN_DEV_QUERIES} to stop the training on: hold out more (--dev-fraction) or "
                           "none (--dev-fraction 0, every tree kept)")
    return count


class _Candidates:
    """The judged queries' first-stage candidates, their rows of features, their scores and labels."""

    def __init__(self, qrels: dict[str, dict[str, int]]):
        self.qrels, self.rows, self.ids, self.first_scores = qrels, {}, {}, {}

    @classmethod
    def described(cls, first_stage, ranking: LearnedRanking, queries: dict[str, str], judged: list[str], qrels,
                  depth: int, n_threads: int) -> "_Candidates":
        candidates = cls(qrels)
        view = first_stage.pinned()
        for start in track(range(0, len(judged), QUERY_BATCH), "describing the candidates",
                           total=-(-len(judged) // QUERY_BATCH)):
            batch = judged[start:start + QUERY_BATCH]
            texts = [queries[query_id] for query_id in batch]
            found = view.search(texts, k=depth, n_threads=n_threads)
            for query_id, ids, scores, table in zip(batch, found.ids, found.scores,
                                                     ranking.feature_rows(texts, found, n_threads)):
                candidates.rows[query_id], candidates.ids[query_id] = table, ids
                candidates.first_scores[query_id] = np.asarray(scores, dtype=np.float64)
        return candidates

    def labelled(self, queries: list[str]) -> list[str]:
        """Those of ``queries`` with a relevant candidate (the others teach a ranking nothing)."""
        return [q for q in queries if any(self.qrels[q].get(d, 0) > 0 for d in self.ids[q])]

    def labels(self, query_id: str) -> list[int]:
        return [min(max(int(self.qrels[query_id].get(d, 0)), 0), MAX_GRADE) for d in self.ids[query_id]]

    def run(self, queries: list[str], booster) -> dict[str, dict[str, float]]:
        """The queries' candidates scored by ``booster`` (None: by the first stage)."""
        return {q: dict(zip(self.ids[q], map(float, self.first_scores[q] if booster is None
                                             else predicted(booster, self.rows[q])))) for q in queries}

    def ndcg(self, queries: list[str], booster) -> np.ndarray:
        """Each query's nDCG@10 with its candidates ranked by ``booster`` (None: by the first stage)."""
        values = values_per_query(self.run(queries, booster), {q: self.qrels[q] for q in queries}, NDCG_10)
        return np.array([values[q] for q in queries])


class _Learner:
    """LambdaMART over a :class:`_Candidates`' rows: the trees' number chosen on held-out queries, a refit."""

    def __init__(self, lgb, params: dict, config: LearnedRankingConfig, candidates: _Candidates, names: list[str]):
        self.lgb, self.params, self.config, self.candidates, self.names = lgb, params, config, candidates, names

    def dataset(self, queries: list[str], reference=None):
        chosen = [q for q in queries if self.candidates.ids[q]]
        return self.lgb.Dataset(np.concatenate([self.candidates.rows[q] for q in chosen]),
                                np.concatenate([self.candidates.labels(q) for q in chosen]),
                                group=[len(self.candidates.ids[q]) for q in chosen], reference=reference,
                                feature_name=self.names, free_raw_data=False)

    def boosted(self, queries: list[str], trees: int):
        return self.lgb.train(self.params, self.dataset(queries), num_boost_round=trees)

    def learned(self, queries: list[str], held_out: int, seed: int) -> tuple[object, int, list[str]]:
        """A model of ``queries`` (the number of trees chosen on ``held_out`` of them, drawn by ``seed``, where
        some of those have a relevant candidate), its trees, and the held-out queries it was stopped on."""
        order = np.random.default_rng(seed).permutation(len(queries))
        drawn = {queries[i] for i in order[:held_out]}
        dev = self.candidates.labelled([q for q in queries if q in drawn])
        training = self.candidates.labelled([q for q in queries if q not in drawn])
        if held_out and len(dev) < MIN_DEV_QUERIES:
            raise SemiretError(f"of the {held_out} judged queries held out to stop on, {len(dev)} have a relevant "
                               f"document among the first stage's best {self.config.depth}, fewer than "
                               f"{MIN_DEV_QUERIES}: hold out more (--dev-fraction), none (--dev-fraction 0, every tree "
                               "kept), or search deeper (--depth)")
        if not training:
            raise SemiretError(f"no query left to learn from: none of the judged queries not held out has a relevant "
                               f"document among the first stage's best {self.config.depth} (hold out fewer: "
                               "--dev-fraction)")
        if not dev:  # (none held out)
            return self.boosted(training, self.config.trees), self.config.trees, []
        train_set = self.dataset(training)
        booster = self.lgb.train(self.params, train_set, num_boost_round=self.config.trees,
                                 valid_sets=[self.dataset(dev, reference=train_set)], valid_names=["dev"],
                                 callbacks=[self.lgb.early_stopping(self.config.early_stopping, verbose=False)])
        return booster, booster.best_iteration or booster.current_iteration(), dev

    def cross_validated(self, queries: list[str], folds: int) -> dict:
        """Each fold of ``queries`` ranked by a model learned from the others, as the whole is learned; nDCG@10
        against the first stage's."""
        order = np.random.default_rng(self.config.seed).permutation(len(queries))
        learned, first = {}, {}
        for fold in track(range(folds), "cross-validating"):
            held = sorted(order[fold::folds].tolist())
            fold_queries = [queries[i] for i in held]
            others = [q for q in queries if q not in set(fold_queries)]
            booster, trees, dev = self.learned(others, _held_out(self.config, len(others)), self.config.seed)
            if dev and self.config.refit:
                booster = self.boosted(self.candidates.labelled(others), trees)
            learned.update(self.candidates.run(fold_queries, booster))
            first.update(self.candidates.run(fold_queries, None))
        versus = compare_runs(learned, first, {q: self.candidates.qrels[q] for q in queries}, [NDCG_10])
        versus = next(iter(versus.values()))
        return {"folds": folds, "ndcg@10": {"first_stage": round(versus["baseline"], 4),
                                            "learned": round(versus["baseline"] + versus["delta"], 4)}, **versus}


def _lightgbm_names(names: list[str]) -> list[str]:
    """Feature names as LightGBM takes them (no JSON punctuation: an index's ``retriever:folder`` written with
    ``__``)."""
    return [re.sub(r"[^\w.-]", "__", name) for name in names]
