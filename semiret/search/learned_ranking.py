"""A second stage learned from judged queries: learning to rank (PyTerrier's ``pt.ltr`` over LightGBM's LambdaMART,
Anserini's and OpenSearch's LTR plugins). Each of a first stage's best ``depth`` hits is described by features, its
first-stage score and rank and each feature index's score of it, and ranked by a gradient-boosted tree ensemble trained
on judged queries (:func:`semiret.evaluation.learned_ranking.fit_learned_ranking`, ``semiret ltr``).

A feature index scores exactly the candidates: its search is restricted to their ids (``{"$id": [...]}``), so every
kind of index (BM25, dense, learned sparse, late interaction, another hybrid) gives its own score of each, as
``semiret rerank`` reads a run. Scores are also given as their distance to the query's best candidate's, so that
trees trained on some queries read others' score scales alike. A candidate a feature index does not score (BM25: no
word of the query; an index that lacks the document) is given a score below every scored candidate's (the lowest
less the scores' spread; 0, a distance of -1, where it scores none) and a third feature saying it was not scored:
never a missing value, which trees that never saw one for a feature (a dense index scores every document) would read
as 0, the best candidate's distance.

Saved as a folder: ``model.txt`` (LightGBM's text format) and ``learned-ranking.json`` (what it is, its features in
order, the first stage and feature indexes it was trained with, and how it was trained), as PyTerrier's artifacts
say what they are. ``Retriever.search(rerank=LearnedRanking.load(path))``; ``--ltr PATH`` on the command line.
"""

from __future__ import annotations

import contextvars
import json
import math
from concurrent.futures import ThreadPoolExecutor
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

INDEX_FEATURES = ("score", "gap", "scored")
"""Features of every candidate from each feature index: its score there, that score less the best candidate's, and
1 where the index scores it (0: the score and distance stand in, below every scored candidate's)."""


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


def index_record(retriever: "Retriever") -> dict:
    """What a learned ranking records of an index it read: its folder, its retriever and its model (scores of
    another model mean something else)."""
    return {"path": str(Path(str(retriever.index.path)).resolve()), "retriever": retriever.name,
            "model": retriever.index.meta.get("model")}


def check_same_index_kind(recorded: dict, retriever: "Retriever", role: str, where: Path | None) -> None:
    """Refuse an index of another retriever or model than the one a learned ranking recorded for ``role``."""
    for key, given in (("retriever", retriever.name), ("model", retriever.index.meta.get("model"))):
        if key in recorded and recorded[key] != given:
            raise SemiretError(f"{where or 'this learned ranking'} was trained with a {role} of {key} "
                               f"{recorded[key]!r}; {retriever.index.path} has {given!r}, whose scores mean "
                               "something else: give one like it, or train one over this index (semiret ltr)")


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
    if role != "first stage" and not Path(str(retriever.index.path)).is_dir():
        raise SemiretError(f"{retriever.index.path}: a learned ranking's feature indexes are folders it records "
                           "and opens again (a Milvus collection can be its first stage, not a feature index)")


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

    def index_names(self) -> list[str]:
        """Each feature index's name (:func:`feature_name`; the second of one name numbered ``#2``, and so on)."""
        names, seen = [], {}
        for retriever in self.features:
            name = feature_name(retriever)
            seen[name] = seen.get(name, 0) + 1
            names.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
        return names

    def feature_names(self) -> list[str]:
        """The features in the order the model reads them."""
        return list(FIRST_STAGE_FEATURES) + [f"{name}_{feature}" for name in self.index_names()
                                             for feature in INDEX_FEATURES]

    def check_first_stage(self, retriever: "Retriever") -> None:
        """Refuse a first stage whose scores are not those the model was trained on."""
        check_feature_index(retriever, "first stage")
        if retriever.name != self.first_stage:
            raise SemiretError(f"this learned ranking was trained on the scores of a {self.first_stage} first stage; "
                               f"{retriever.index.path} is searched by {retriever.name}, whose scores mean something "
                               "else: train one over this index (semiret ltr --index ...)")
        recorded = self.record.get("first_stage_index")
        if isinstance(recorded, dict):
            check_same_index_kind({"model": recorded.get("model")}, retriever, "first stage",
                                  self.record.get("path"))

    def describe(self) -> dict:
        """What an evaluation records of it."""
        return {"kind": KIND, "depth": self.depth, "features": self.index_names(),
                **({"path": self.record["path"]} if "path" in self.record else {})}

    def feature_rows(self, texts: Sequence[str], found: SearchHits, n_threads: int = 1) -> list[np.ndarray]:
        """Each query's candidates (``found``, the first stage's hits, best first) as rows of features (float32).
        The feature indexes' searches, one per query and feature index, run ``n_threads`` at a time (the encoders
        release the GIL in torch), each the search its query makes alone: a batch's rows are, to the bit, those of
        its queries described one at a time. The first query's run in turn, before the others: each feature index
        loads its model on first use, and the sides that load theirs without a lock (SiDR's, GDR's) would load it
        once per thread."""
        views = [retriever.pinned() for retriever in self.features]  # one commit each for the whole batch
        searches = [(view, text, ids) for text, ids in zip(texts, found.ids) if ids for view in views]
        warm_up = [_scored_by(*search) for search in searches[:len(views)]]
        scored = iter(warm_up + _in_threads(_scored_by, searches[len(views):], n_threads))
        rows = []
        for text, ids, scores in zip(texts, found.ids, found.scores):
            table = np.full((len(ids), len(self.feature_names())), np.nan, dtype=np.float32)
            if ids:
                first = np.asarray(scores, dtype=np.float32)
                table[:, 0] = first
                table[:, 1] = first - first.max()
                table[:, 2] = 1.0 / np.arange(1, len(ids) + 1)
                table[:, 3] = len(text.split())
                width = len(INDEX_FEATURES)
                for number in range(len(views)):
                    start = len(FIRST_STAGE_FEATURES) + width * number
                    table[:, start:start + width] = next(scored)
            rows.append(table)
        return rows

    def predict(self, rows: np.ndarray) -> np.ndarray:
        """The model's score of each row of features."""
        return predicted(self.booster, rows)

    def reranked(self, queries: Sequence[str], found: SearchHits, documents, k: int, n_threads: int = 1
                 ) -> SearchHits:
        """Each query's hits in ``found`` ranked by the model's score of their features, the best ``k``, each with
        that score (the first stage's order breaking ties), the features' searches ``n_threads`` at a time.
        ``documents`` is not read: the features are searches."""
        ids, scores = [], []
        for hit_ids, table in zip(found.ids, self.feature_rows(queries, found, n_threads)):
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
                  "feature_indexes": [index_record(r) for r in self.features],
                  **{key: value for key, value in self.record.items() if key not in ("path",)}}
        with staged_directory(path, overwrite=True) as staged:
            self.booster.save_model(str(staged / MODEL_FILE))
            atomic_write_json(staged / RECORD_FILE, record)
        self.record["path"] = str(path.resolve())
        return path

    @classmethod
    def load(cls, path: str | Path, features: Sequence["Retriever | str | Path"] | None = None,
             depth: int | None = None) -> "LearnedRanking":
        """The learned ranking saved in ``path``, its feature indexes opened from the paths it records, or
        ``features`` given instead (the same kinds of retrievers, or their index folders, in the same order: indexes
        moved elsewhere, or another collection's; ``--ltr-feature-index``). ``depth``: the candidates it ranks
        (default: as trained)."""
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
        features = [open_retriever(given) if isinstance(given, (str, Path)) else given for given in features]
        given = [getattr(r, "name", type(r).__name__) for r in features]
        if given != [entry["retriever"] for entry in recorded]:
            raise SemiretError(f"{path} was trained with feature indexes of "
                               f"{', '.join(e['retriever'] for e in recorded) or 'none'}; given "
                               f"{', '.join(given) or 'none'}: give the same kinds, in that order")
        for entry, retriever in zip(recorded, features):
            check_same_index_kind(entry, retriever, "feature index", path)
        lgb = lightgbm()
        try:
            booster = lgb.Booster(model_file=str(path / MODEL_FILE))
        except lgb.basic.LightGBMError as error:
            raise SemiretError(f"{path / MODEL_FILE}: not a LightGBM model LightGBM reads ({error})") from error
        ranking = cls(booster, features, record["first_stage"], record["depth"] if depth is None else depth,
                      {key: value for key, value in record.items()
                       if key not in ("kind", "version", "first_stage", "depth", "feature_names",
                                      "feature_indexes")})
        ranking.record["path"] = str(path.resolve())
        return ranking


def check_ltr_options(ltr: str | Path | None, feature_indexes: Sequence[str | Path] | None) -> None:
    """Refuse feature indexes given (``--ltr-feature-index``) without the learned ranking that reads them
    (``--ltr``): searches, evaluations and the server alike."""
    if feature_indexes and ltr is None:
        raise SemiretError("--ltr-feature-index gives a learned ranking's feature indexes: give --ltr too")


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
        others = sorted(entry.name for entry in path.iterdir() if entry.name not in (RECORD_FILE, MODEL_FILE))
        if others or not (path / RECORD_FILE).is_file():
            held = ", ".join(others[:3]) or f"no {RECORD_FILE}"
            raise SemiretError(f"{path} holds other files than a learned ranking ({held}): give another folder (a "
                               "learned ranking never replaces them)")
        if not overwrite:
            raise SemiretError(f"{path} holds a learned ranking already: give another folder, or overwrite "
                               "(--overwrite)")


def read_record(path: Path) -> dict:
    """A saved learned ranking's record, checked (a clear error for a folder that is not one)."""
    file = path / RECORD_FILE
    if not path.is_dir():
        raise SemiretError(f"{path}: no such folder (a learned ranking is a folder semiret ltr wrote)")
    if not file.is_file() or not (path / MODEL_FILE).is_file():
        raise SemiretError(f"{path} is not a learned ranking (no {RECORD_FILE} and {MODEL_FILE}): make one with "
                           "semiret ltr")
    try:
        record = json.loads(file.read_text())
    except (OSError, ValueError) as error:
        raise SemiretError(f"{file}: not readable as JSON ({error})") from error
    if not isinstance(record, dict) or record.get("kind") != KIND:
        raise SemiretError(f"{file}: not a learned ranking's record (kind {record.get('kind') if isinstance(record, dict) else None!r})")
    version = record.get("version")
    if isinstance(version, bool) or not isinstance(version, int):
        raise SemiretError(f"{file}: field 'version' missing or not a whole number")
    if version > FORMAT_VERSION:
        raise SemiretError(f"{file}: written by a newer semiret (version {version}); upgrade semiret")
    for key, kind in (("first_stage", str), ("depth", int), ("feature_indexes", list)):
        if not isinstance(record.get(key), kind):
            raise SemiretError(f"{file}: field {key!r} missing or not a {kind.__name__}")
    for number, entry in enumerate(record["feature_indexes"]):
        if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) for k in ("path", "retriever")):
            raise SemiretError(f"{file}: feature_indexes[{number}] is not an object with a path and a retriever")
    return record


def _in_threads(function, calls: list[tuple], n_threads: int) -> list:
    """``function(*arguments)`` for each of ``calls``, in their order, ``n_threads`` at a time (one: here, in turn),
    each in a copy of the caller's context, so that the warnings a feature search gives reach the caller
    (:func:`~semiret.errors.told_warnings`)."""
    if n_threads <= 1 or len(calls) <= 1:
        return [function(*arguments) for arguments in calls]
    with ThreadPoolExecutor(min(n_threads, len(calls)), thread_name_prefix="semiret-ltr") as pool:
        contexts = [contextvars.copy_context() for _ in calls]  # (taken here: a worker's own context is empty)
        return list(pool.map(lambda context, arguments: context.run(function, *arguments), contexts, calls))


def _scored_by(view: "Retriever", text: str, ids: list[str]) -> np.ndarray:
    """:data:`INDEX_FEATURES` of each candidate by ``view`` (a search restricted to their ids): its score, that
    score less the best of them, and whether it was scored; a candidate not scored stands below every scored one."""
    hits = view.search(text, k=len(ids), filter={"$id": list(ids)})
    given = {hit.id: hit.score for hit in hits if math.isfinite(hit.score)}
    columns = np.zeros((len(ids), len(INDEX_FEATURES)), dtype=np.float32)
    columns[:, 1] = -1.0  # (none scored: a score of 0, a distance of -1 from a best there is not)
    if given:
        best, worst = max(given.values()), min(given.values())
        floor = worst - ((best - worst) or 1.0)
        scores = np.array([given.get(doc_id, floor) for doc_id in ids], dtype=np.float64)
        columns[:, 0], columns[:, 1] = scores, scores - best
        columns[:, 2] = [doc_id in given for doc_id in ids]
    return columns
