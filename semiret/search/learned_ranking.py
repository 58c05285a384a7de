"""A second stage learned from judged queries: learning to rank (PyTerrier's ``pt.ltr`` over LightGBM's LambdaMART,
Anserini's and OpenSearch's LTR plugins). Each of a first stage's best ``depth`` hits is described by features, its
first-stage score and rank and each feature index's score of it, and ranked by a gradient-boosted tree ensemble trained
on judged queries (:func:`semiret.evaluation.learned_ranking.fit_learned_ranking`, ``semiret ltr``).

A feature index scores exactly the candidates: its search is restricted to their ids (``{"$id": [...]}``), so every
kind of index (BM25, dense, learned sparse, late interaction, another hybrid) gives its own score of each, as
``semiret rerank`` reads a run. A candidate a feature index does not score (BM25: no word of the query; an index that
lacks the document) has that feature missing, which the trees learn to read as such. Scores are also given as their
distance to the query's best candidate's, so that trees trained on some queries read others' score scales alike.

Saved as a folder: ``model.txt`` (LightGBM's text format) and ``learned-ranking.json`` (what it is, its features in
order, the first stage and feature indexes it was trained with, and how it was trained), as PyTerrier's artifacts
say what they are. ``Retriever.search(rerank=LearnedRanking.load(path))``; ``--ltr PATH`` on the command line.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

from semiret.errors import SemiretError
from semiret.files import atomic_write_json, staged_directory
from semiret.search.candidates import CANDIDATES
from semiret.types import SearchHits

if TYPE_CHECKING:
    from semiret.search.retrievers import Retriever

RECORD_FILE = "learned-ranking.json"
MODEL_FILE = "model.txt"
KIND = "learned-ranking"
FORMAT_VERSION = 1

FIRST_STAGE_FEATURES = ("first_stage_score", "first_stage_gap", "first_stage_reciprocal_rank", "query_words")
"""Features of every candidate: its first-stage score, that score less the query's best, 1 / its rank, and the
query's number of words (which lets trees weigh the features differently for short and long queries)."""


def lightgbm():
    """LightGBM, imported where a learned ranking is trained or loaded (an extra: ``pip install semiret[ltr]``)."""
    try:
        import lightgbm
    except ImportError as error:
        raise SemiretError("learning to rank needs LightGBM: pip install 'semiret[ltr]' (or lightgbm)") from error
    return lightgbm


def feature_name(retriever: "Retriever") -> str:
    """A feature index's name among the features: its retriever and its folder's name (``dense:scifact-minilm``)."""
    return f"{retriever.name}:{Path(str(retriever.index.path)).name}"


def check_feature_index(retriever: "Retriever", role: str) -> None:
    """A retriever that can take part in a learned ranking (as its first stage, or as a feature index): one that
    searches texts and ranks whole documents, as the candidates are."""
    from semiret.search.retrievers import Retriever

    if not isinstance(retriever, Retriever):
        raise SemiretError(f"a learned ranking's {role} is a semiret retriever (open_retriever(path)), got "
                           f"{type(retriever).__name__}")
    if retriever.chunking is not None:
        raise SemiretError(f"{retriever.index.path} holds passages (built with chunking): a learned ranking ranks "
                           f"documents, so its {role} must hold whole documents")
    if not retriever.query_side.reads_texts:
        raise SemiretError(f"{retriever.index.path} is searched by query vectors: a learned ranking's {role} reads "
                           "query texts")


@dataclass
class LearnedRankingConfig:
    """How a learned ranking is trained: the first stage's ``depth`` candidates of each query; at most ``trees``
    trees of ``leaves`` leaves, each leaf holding at least ``min_leaf_documents`` candidates, added at
    ``learning_rate``; stopped when ``early_stopping`` trees have not raised nDCG@10 on the ``dev_fraction`` of the
    judged queries held out (0: no queries held out, every tree kept), then trained again on every judged query
    with the trees chosen (``refit``); ``seed`` draws the held-out queries and seeds LightGBM (the same data and seed
    give the same model). The defaults were chosen by cross-validation on SciFact's training queries."""

    depth: int = CANDIDATES
    """The first stage's best hits of each query that the model learns to rank (and ranks when searching)."""
    trees: int = 1000
    """At most this many trees (LightGBM's boosting rounds)."""
    learning_rate: float = 0.05
    """Shrinkage of each tree's contribution."""
    leaves: int = 15
    """Leaves of each tree."""
    min_leaf_documents: int = 20
    """Candidates each leaf holds at least (larger: smoother models for few queries)."""
    early_stopping: int = 100
    """Stop when this many trees have not raised nDCG@10 on the held-out queries."""
    dev_fraction: float = 0.2
    """The share of the judged queries held out to stop on (0: none held out, every tree kept)."""
    refit: bool = True
    """Once the held-out queries chose the number of trees, train again on every judged query with that many (the
    report's held-out figure is the first model's)."""
    seed: int = 0
    """Draws the held-out queries and seeds LightGBM."""

    def __post_init__(self) -> None:
        from semiret.search.retrievers import check_count

        for name in ("depth", "trees", "leaves", "min_leaf_documents", "early_stopping"):
            check_count(getattr(self, name), f"the learned ranking's {name.replace('_', ' ')}")
        if self.leaves < 2:
            raise SemiretError(f"a tree needs at least 2 leaves, got {self.leaves}")
        if not 0 < self.learning_rate <= 1:
            raise SemiretError(f"the learning rate is above 0 and at most 1, got {self.learning_rate}")
        if not 0 <= self.dev_fraction <= 0.5:
            raise SemiretError(f"the share of queries held out (dev_fraction) is from 0 to 0.5, got "
                               f"{self.dev_fraction}")


class LearnedRanking:
    """The best ``depth`` hits of a first stage (or ``k``, when more) ranked by ``booster``'s prediction from their
    features: :data:`FIRST_STAGE_FEATURES`, then each of ``features`` (retrievers over the same corpus, a document
    having one id in all) giving its score and that score less the query's best. ``first_stage``: the name of the
    retriever whose scores it was trained on (a search by another is refused: its scores mean something else).
    ``record``: how it was trained (saved with it)."""

    reads_texts = False
    """Whether it reads the candidates' stored texts (a cross-encoder does; features are searches of indexes)."""

    def __init__(self, booster, features: Sequence["Retriever"], first_stage: str, depth: int = CANDIDATES,
                 record: dict | None = None):
        from semiret.search.retrievers import check_count

        check_count(depth, "the learned ranking's depth")
        for retriever in features:
            check_feature_index(retriever, "feature index")
        self.booster, self.features, self.first_stage, self.depth = booster, list(features), first_stage, depth
        self.record = dict(record or {})
        expected = len(self.feature_names())
        if booster is not None and booster.num_feature() != expected:
            raise SemiretError(f"the learned ranking's model reads {booster.num_feature()} features, but its first "
                               f"stage and {len(self.features)} feature indexes give {expected}")

    def feature_names(self) -> list[str]:
        """The features in the order the model reads them."""
        names = list(FIRST_STAGE_FEATURES)
        for retriever in self.features:
            names += [f"{feature_name(retriever)}_score", f"{feature_name(retriever)}_gap"]
        return names

    def check_first_stage(self, retriever: "Retriever") -> None:
        """Refuse a first stage whose scores are not those the model was trained on."""
        check_feature_index(retriever, "first stage")
        if retriever.name != self.first_stage:
            raise SemiretError(f"this learned ranking was trained on the scores of a {self.first_stage} first stage; "
                               f"{retriever.index.path} is searched by {retriever.name}, whose scores mean something "
                               "else: train one over this index (semiret ltr --index ...)")

    def describe(self) -> dict:
        """What an evaluation records of it."""
        return {"kind": KIND, "depth": self.depth, "features": [feature_name(r) for r in self.features],
                **({"path": self.record["path"]} if "path" in self.record else {})}

    def feature_rows(self, texts: Sequence[str], found: SearchHits, n_threads: int = 1) -> list[np.ndarray]:
        """Each query's candidates (``found``, the first stage's hits, best first) as rows of features (float32,
        NaN where a feature index does not score the candidate)."""
        views = [retriever.pinned() for retriever in self.features]  # one commit each for the whole batch
        rows = []
        for text, ids, scores in zip(texts, found.ids, found.scores):
            table = np.full((len(ids), len(self.feature_names())), np.nan, dtype=np.float32)
            if ids:
                first = np.asarray(scores, dtype=np.float32)
                table[:, 0] = first
                table[:, 1] = first - first.max()
                table[:, 2] = 1.0 / np.arange(1, len(ids) + 1)
                table[:, 3] = len(text.split())
                for number, view in enumerate(views):
                    table[:, 4 + 2 * number:6 + 2 * number] = _scored_by(view, text, ids, n_threads)
            rows.append(table)
        return rows

    def predict(self, rows: np.ndarray) -> np.ndarray:
        """The model's score of each row of features."""
        return predicted(self.booster, rows)

    def reranked(self, queries: Sequence[str], found: SearchHits, documents, k: int) -> SearchHits:
        """Each query's hits in ``found`` ranked by the model's score of their features, the best ``k``, each with
        that score (the first stage's order breaking ties). ``documents`` is not read: the features are searches."""
        ids, scores = [], []
        for hit_ids, table in zip(found.ids, self.feature_rows(queries, found)):
            given = self.predict(table)
            order = sorted(range(len(hit_ids)), key=lambda j: (-given[j], j))[:k]
            ids.append([hit_ids[j] for j in order])
            scores.append([float(given[j]) for j in order])
        return SearchHits(ids, scores)

    def save(self, path: str | Path, overwrite: bool = False) -> Path:
        """Write the model and its record to the folder ``path`` (published whole, or not at all)."""
        path = Path(path)
        check_output_folder(path, overwrite)
        record = {"kind": KIND, "version": FORMAT_VERSION, "first_stage": self.first_stage, "depth": self.depth,
                  "feature_names": self.feature_names(),
                  "feature_indexes": [{"path": str(Path(str(r.index.path)).resolve()), "retriever": r.name}
                                      for r in self.features],
                  **{key: value for key, value in self.record.items() if key not in ("path",)}}
        with staged_directory(path, overwrite=True) as staged:
            self.booster.save_model(str(staged / MODEL_FILE))
            atomic_write_json(staged / RECORD_FILE, record)
        self.record["path"] = str(path)
        return path

    @classmethod
    def load(cls, path: str | Path, features: Sequence["Retriever"] | None = None,
             depth: int | None = None) -> "LearnedRanking":
        """The learned ranking saved in ``path``, its feature indexes opened from the paths it records, or
        ``features`` given instead (the same retrievers, in the same order: indexes moved elsewhere). ``depth``: the
        candidates it ranks (default: as trained)."""
        from semiret.search.retrievers import open_retriever

        path = Path(path)
        record = read_record(path)
        recorded = record["feature_indexes"]
        if features is None:
            missing = [entry["path"] for entry in recorded if not Path(entry["path"]).is_dir()]
            if missing:
                raise SemiretError(f"{path}: its feature index {missing[0]} is not there; give the feature indexes "
                                   "(LearnedRanking.load(path, features=[...]); --ltr-feature-index) in its order: "
                                   + ", ".join(entry["retriever"] for entry in recorded))
            features = [open_retriever(entry["path"], entry["retriever"]) for entry in recorded]
        features = list(features)
        given = [getattr(r, "name", type(r).__name__) for r in features]
        if given != [entry["retriever"] for entry in recorded]:
            raise SemiretError(f"{path} was trained with feature indexes of "
                               f"{', '.join(e['retriever'] for e in recorded) or 'none'}; given "
                               f"{', '.join(given) or 'none'}: give the same kinds, in that order")
        booster = lightgbm().Booster(model_file=str(path / MODEL_FILE))
        ranking = cls(booster, features, record["first_stage"], record["depth"] if depth is None else depth,
                      {key: value for key, value in record.items()
                       if key not in ("kind", "version", "first_stage", "depth", "feature_names",
                                      "feature_indexes")})
        ranking.record["path"] = str(path)
        return ranking


def predicted(booster, rows: np.ndarray) -> np.ndarray:
    """``booster``'s score of each row of features (none for none; one thread: a query's 100 rows are too few to
    share)."""
    return booster.predict(rows, num_threads=1) if len(rows) else np.zeros(0)


def check_output_folder(path: str | Path, overwrite: bool) -> None:
    """Refuse, before any search, to write a learned ranking over a file, over a folder holding anything but a
    learned ranking (an index, say), or over a learned ranking unless ``overwrite``."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise SemiretError(f"{path} is a file: give a folder to write the learned ranking to")
    if path.is_dir() and any(path.iterdir()):
        if not (path / RECORD_FILE).is_file():
            raise SemiretError(f"{path} holds other files than a learned ranking: give another folder (a learned "
                               "ranking never replaces them)")
        if not overwrite:
            raise SemiretError(f"{path} holds a learned ranking already: give another folder, or overwrite "
                               "(--overwrite)")


def read_record(path: Path) -> dict:
    """A saved learned ranking's record, checked (a clear error for a folder that is not one)."""
    file = path / RECORD_FILE
    if not file.is_file() or not (path / MODEL_FILE).is_file():
        raise SemiretError(f"{path} is not a learned ranking (no {RECORD_FILE} and {MODEL_FILE}): make one with "
                           "semiret ltr")
    try:
        record = json.loads(file.read_text())
    except (OSError, ValueError) as error:
        raise SemiretError(f"{file}: not readable as JSON ({error})") from error
    if not isinstance(record, dict) or record.get("kind") != KIND:
        raise SemiretError(f"{file}: not a learned ranking's record (kind {record.get('kind') if isinstance(record, dict) else None!r})")
    if record.get("version", 0) > FORMAT_VERSION:
        raise SemiretError(f"{file}: written by a newer semiret (version {record['version']}); upgrade semiret")
    for key, kind in (("first_stage", str), ("depth", int), ("feature_indexes", list)):
        if not isinstance(record.get(key), kind):
            raise SemiretError(f"{file}: field {key!r} missing or not a {kind.__name__}")
    return record


def _scored_by(view: "Retriever", text: str, ids: list[str], n_threads: int) -> np.ndarray:
    """``view``'s score of each candidate (a search restricted to their ids) and that score less the best of them:
    two columns, NaN where it scores none."""
    hits = view.search(text, k=len(ids), filter={"$id": list(ids)}, n_threads=n_threads)
    given = {hit.id: hit.score for hit in hits}
    columns = np.full((len(ids), 2), np.nan, dtype=np.float32)
    if given:
        best = max(given.values())
        for row, doc_id in enumerate(ids):
            score = given.get(doc_id)
            if score is not None and math.isfinite(score):
                columns[row] = (score, score - best)
    return columns
