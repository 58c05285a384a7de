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
from semiret.evaluation.metrics import parse_measures, score_run
from semiret.progress import track
from semiret.search.learned_ranking import LearnedRanking, LearnedRankingConfig, check_feature_index, lightgbm
from semiret.search.retrievers import check_count

log = logging.getLogger(__name__)

MIN_QUERIES = 10
"""Judged queries with a relevant candidate needed to learn from (fewer: too few rankings to learn any)."""

MIN_DEV_QUERIES = 5
"""Held-out queries needed to stop the training early on (fewer: an estimate too noisy to stop by)."""

MAX_GRADE = 30
"""The highest relevance grade LambdaMART's default gains take (2^30 - 1); higher grades are read as it."""

QUERY_BATCH = 64
"""Queries whose candidates are searched and described at once (a step of the progress bar)."""


def fit_learned_ranking(first_stage, features, queries: dict[str, str], qrels: dict[str, dict[str, int]],
                        config: LearnedRankingConfig | None = None, n_threads: int = 1
                        ) -> tuple[LearnedRanking, dict]:
    """A :class:`LearnedRanking` over ``first_stage`` (a retriever) with ``features`` (retrievers of the same
    corpus), trained on ``queries`` judged by ``qrels``, and the report of its training (queries used, held out,
    the trees kept, nDCG@10 of the first stage and of the learned ranking on the held-out queries, before the
    refit, each feature's share of the trees' gain)."""
    config = config or LearnedRankingConfig()
    check_count(n_threads, "n_threads (--threads)")
    check_feature_index(first_stage, "first stage")
    ranking = LearnedRanking(None, features, first_stage.name, config.depth)
    judged = [query_id for query_id in qrels if query_id in queries and any(g > 0 for g in qrels[query_id].values())]
    if len(judged) < MIN_QUERIES:
        raise SemiretError(f"{len(judged)} judged queries with a relevant document and a text: a learned ranking "
                           f"needs at least {MIN_QUERIES} (judge more queries, or fuse the indexes instead: "
                           "semiret search --fuse-with)")
    dev_count = round(config.dev_fraction * len(judged))
    if config.dev_fraction > 0 and dev_count < MIN_DEV_QUERIES:
        raise SemiretError(f"{config.dev_fraction:g} of {len(judged)} judged queries holds out {dev_count}, fewer "
                           f"than the {MIN_DEV_QUERIES} to stop the training on: hold out more (--dev-fraction) or "
                           "none (--dev-fraction 0, every tree kept)")
    lgb = lightgbm()  # a missing LightGBM said before the searches
    started = time.perf_counter()
    order = np.random.default_rng(config.seed).permutation(len(judged))
    dev = {judged[i] for i in order[:dev_count]}
    rows, found_ids, first_scores = {}, {}, {}
    view = first_stage.pinned()
    for start in track(range(0, len(judged), QUERY_BATCH), "describing the candidates",
                       total=-(-len(judged) // QUERY_BATCH)):
        batch = judged[start:start + QUERY_BATCH]
        texts = [queries[query_id] for query_id in batch]
        found = view.search(texts, k=config.depth, n_threads=n_threads)
        for query_id, ids, scores, table in zip(batch, found.ids, found.scores,
                                                 ranking.feature_rows(texts, found, n_threads)):
            rows[query_id], found_ids[query_id], first_scores[query_id] = table, ids, scores
    labelled = [q for q in judged if any(qrels[q].get(d, 0) > 0 for d in found_ids[q])]
    if len(labelled) < MIN_QUERIES:
        raise SemiretError(f"the first stage finds a relevant document in its best {config.depth} for "
                           f"{len(labelled)} of {len(judged)} judged queries: too few to learn from (at least "
                           f"{MIN_QUERIES}; search deeper: --depth)")

    def dataset(chosen: list[str], reference=None):
        chosen = [q for q in chosen if found_ids[q]]
        table = np.concatenate([rows[q] for q in chosen])
        labels = np.concatenate([[min(max(int(qrels[q].get(d, 0)), 0), MAX_GRADE) for d in found_ids[q]]
                                 for q in chosen])
        return lgb.Dataset(table, labels, group=[len(found_ids[q]) for q in chosen], reference=reference,
                           feature_name=_lightgbm_names(ranking.feature_names()), free_raw_data=False)

    training = [q for q in labelled if q not in dev]
    params = {"objective": "lambdarank", "metric": "ndcg", "eval_at": [10], "learning_rate": config.learning_rate,
              "num_leaves": config.leaves, "min_data_in_leaf": config.min_leaf_documents, "seed": config.seed,
              "deterministic": True, "force_row_wise": True, "num_threads": n_threads, "verbosity": -1,
              "feature_pre_filter": False}
    train_set = dataset(training)
    held_out = [q for q in judged if q in dev]
    if held_out:
        dev_set = dataset([q for q in held_out if q in labelled], reference=train_set)
        booster = lgb.train(params, train_set, num_boost_round=config.trees, valid_sets=[dev_set],
                            valid_names=["dev"], callbacks=[lgb.early_stopping(config.early_stopping, verbose=False)])
    else:
        booster = lgb.train(params, train_set, num_boost_round=config.trees)
    ranking.booster = booster
    trees = booster.best_iteration or booster.current_iteration()
    report = {"queries": len(judged), "training_queries": len(training), "held_out_queries": len(held_out),
              "queries_without_relevant_candidate": len(judged) - len(labelled), "trees": trees,
              "refit": bool(held_out) and config.refit, "config": vars(config)}
    if held_out:
        measure = parse_measures(["nDCG@10"])
        first_run = {q: dict(zip(found_ids[q], map(float, first_scores[q]))) for q in held_out}
        learned_run = {q: dict(zip(found_ids[q], map(float, ranking.predict(rows[q])))) for q in held_out}
        held_qrels = {q: qrels[q] for q in held_out}
        report["held_out_ndcg@10"] = {"first_stage": round(score_run(first_run, held_qrels, measure)["nDCG@10"], 4),
                                      "learned": round(score_run(learned_run, held_qrels, measure)["nDCG@10"], 4)}
    if held_out and config.refit:  # the trees chosen, learned again from every judged query
        booster = lgb.train(params, dataset(labelled), num_boost_round=trees)
        ranking.booster = booster
    report["seconds"] = round(time.perf_counter() - started, 2)
    gains = booster.feature_importance(importance_type="gain", iteration=booster.best_iteration or None)
    total = float(gains.sum()) or 1.0
    report["gain_shares"] = {name: round(float(gain) / total, 4)
                             for name, gain in zip(ranking.feature_names(), gains)}
    ranking.record["trained"] = {key: value for key, value in report.items() if key != "config"}
    ranking.record["config"] = vars(config)
    return ranking, report


def _lightgbm_names(names: list[str]) -> list[str]:
    """Feature names as LightGBM takes them (no JSON punctuation: an index's ``retriever:folder`` written with
    ``__``)."""
    return [re.sub(r"[^\w.-]", "__", name) for name in names]
