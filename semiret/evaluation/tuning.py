"""Search options chosen on judged queries: every setting of a grid of a retriever's search options scored on them
(PyTerrier's ``GridSearch``, Anserini's parameter sweeps), and, with folds, an estimate of how the chosen setting does
on queries it was not chosen on (PyTerrier's ``KFoldGridSearch``).

A setting chosen and scored on the same few dozen queries looks better than it will be: with ``folds``, the queries
are split into that many folds, the setting best on the other folds is scored on each fold, and the tuned system's
per-query values (each query scored by a setting chosen without it) are compared with the retriever as opened, by
a paired test. Search options are tuned (listed by ``GET /indexes/{name}``'s ``search_options`` and ``semiret search
--help``), and BM25's parameters (``k1``, ``b``, ``variant``, ``delta``: Anserini's sweeps) over a BM25 index or a
hybrid's BM25 part, each setting of them searched on a copy of the index weighed again from its term counts
(:meth:`~semiret.indexes.inverted.InvertedIndex.set_bm25`, no document read again; the index itself unchanged).
BM25F's field weights (``text_fields``: ``"title^3,text"``) are tuned over such an index too, each setting on a copy
encoded again from the documents the index stores, read as the index reads them (its analyzer and BM25 parameters)
but for those fields: a hybrid's BM25 part encoded again, its neural part copied (no model runs). Other options that
shape an index are chosen by building it again.
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from semiret.data.chunking import PARENT_FIELD
from semiret.data.collection import batched
from semiret.errors import SemiretError
from semiret.evaluation.evaluate import warn_deeper_measures, warn_unknown_documents
from semiret.evaluation.metrics import parse_measures
from semiret.indexes import open_index
from semiret.indexes.composite import CompositeIndex
from semiret.indexes.embedding_cache import CACHE_FOLDER
from semiret.indexes.inverted import InvertedIndex
from semiret.evaluation.significance import mean_per_query, paired_p_value
from semiret.options import option_names
from semiret.progress import track
from semiret.text.analyzer import TermDictionary
from semiret.text.bm25 import BM25_PARAMETER_NAMES
from semiret.text.fields import TEXT_FIELDS_KEY, TextFields

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
    """Each setting of ``grid`` (``{option: [values]}``: search options, and BM25's parameters and ``text_fields``
    where the retriever's index is a BM25 index or a hybrid holding one) applied to ``retriever`` (over the options
    it was opened with; one variant made at a time; each setting of BM25's parameters on a copy of the index weighed
    again, each of ``text_fields`` (a string, as ``text_fields`` takes it: ``"title^3,text"``) on a copy
    encoded again from its stored documents, one copy at a time in a temporary directory) and its ranking of
    ``queries`` (each query's best ``depth``; an index of passages: documents by their best passage, as ``eval``
    ranks them) scored by ``measure`` on ``qrels``; best first (ties: the grid's order), the retriever as opened
    first among them (``options`` empty)."""
    measures = parse_measures([measure])
    if len(measures) != 1:
        raise SemiretError(f"tune by one measure, got {len(measures)}")
    measure_object = next(iter(measures.values()))
    judged = [query_id for query_id in qrels if query_id in queries]
    if not judged:
        raise SemiretError("none of the judged queries has a text to search")
    cls = type(retriever)
    searched = option_names([cls.queries.Options])
    weighed = BM25_PARAMETER_NAMES if hasattr(retriever.index, "bm25_with") and (
        retriever.index.kind == "bm25" or getattr(retriever.index, "bm25_part", None) is not None) else ()
    unknown = [name for name in grid if name not in searched and name not in weighed
               and not (weighed and name == TEXT_FIELDS_KEY)]
    if unknown:
        raise SemiretError(f"{', '.join(unknown)}: not a search option of retriever {cls.name!r} (its search options: "
                           f"{', '.join(searched) or 'none'}"
                           + (f"; and BM25's parameters {', '.join(weighed)} and its {TEXT_FIELDS_KEY}" if weighed
                              else "")
                           + "; options that shape the index are chosen by building it again)")
    settings = settings_of(grid)
    fields = _checked_fields(retriever.index, grid[TEXT_FIELDS_KEY]) if TEXT_FIELDS_KEY in grid else {}
    for options in settings:
        search_options, bm25, _ = _split(options, weighed)
        cls.search_options({**retriever.given_options, **search_options})  # bad values fail before any search
        if bm25:
            retriever.index.bm25_with(**bm25)
    warn_deeper_measures(measures, depth)
    warn_unknown_documents(qrels, retriever)
    grouped = {"group_by": PARENT_FIELD} if retriever.chunking is not None else {}  # documents by best passage
    texts = [queries[query_id] for query_id in judged]
    # settings of the same fields, and of the same BM25 parameters, one after the other: each copy made once
    order = sorted(range(len(settings)), key=lambda i: _copy_key(_split(settings[i], weighed), fields))
    results = [Setting({}, *_scored(retriever, texts, judged, qrels, measure_object, depth, n_threads, grouped))]
    with tempfile.TemporaryDirectory(prefix=".semiret-tune-", dir=_scratch_beside(retriever.index)) as scratch, \
            _Reweighed(retriever, Path(scratch)) as reweighed:
        for i in track(order, "tuning", total=len(settings)):
            search_options, bm25, read = _split(settings[i], weighed)
            base = reweighed.retriever(bm25, fields[read] if read is not None else None)
            variant = base.with_options(**{**retriever.given_options, **search_options}) if search_options else base
            results.append(Setting(settings[i], *_scored(variant, texts, judged, qrels, measure_object, depth,
                                                         n_threads, grouped), position=i + 1))
    if len(results) > 1 and all(np.array_equal(s.per_query, results[0].per_query) for s in results[1:]):
        log.warning("no setting changed any query's %s from the retriever as opened (an option that takes effect "
                    "only with another, as RM3's fb_docs with rm3=true?)", measure)
    return sorted(results, key=lambda setting: (-setting.score, setting.position))


def _split(options: dict, weighed) -> tuple[dict, dict, object]:
    """A setting's search options, its BM25 parameters (names in ``weighed``) and its ``text_fields`` (None: the
    index's own)."""
    return ({name: value for name, value in options.items() if name not in weighed and name != TEXT_FIELDS_KEY},
            {name: value for name, value in options.items() if name in weighed}, options.get(TEXT_FIELDS_KEY))


def _copy_key(split: tuple, fields: dict) -> tuple:
    """What the copy a setting is searched on is made of: its fields, then its BM25 parameters (sorted by this, each
    copy is made once)."""
    _, bm25, read = split
    return ("" if read is None else str(fields[read]), sorted(bm25.items(), key=str))


def _checked_fields(index, values: list) -> dict:
    """The ``text_fields`` values of a grid (strings, as ``--text-fields`` takes them), each read
    (:meth:`TextFields.parse`); refused before anything is built: the same fields twice (in any order), an index that
    keeps no stored documents to encode again, or a field that none of its documents holds (a misspelt name, a corpus
    field it did not keep)."""
    option = f"{TEXT_FIELDS_KEY} (--grid)"
    read: dict[str, TextFields] = {}
    for value in values:
        if not isinstance(value, str):
            raise SemiretError(f"{option}: each setting is written as --text-fields takes it, a string like "
                               f"'title^2,text', got {value!r} (the index as it reads is tried anyway, as opened)")
        fields = TextFields.parse(value, option)
        if any(dict(fields.weights) == dict(other.weights) for other in read.values()):
            raise SemiretError(f"{option} lists the fields {fields} twice: each setting is tried once")
        read[value] = fields
    if not index.stores_texts:
        raise SemiretError(f"{index.path} keeps no stored documents (built with --no-store-texts): "
                           f"{TEXT_FIELDS_KEY} are tuned on copies encoded again from them; build an index with each "
                           "setting instead (semiret index --text-fields ...)")
    wanted = list(dict.fromkeys(name for fields in read.values() for name, _ in fields.weights))
    missing = set(wanted)
    for document in index.iter_documents():
        missing = {name for name in missing if not TextFields.value(document, name)}
        if not missing:
            break
    if missing:
        names = ", ".join(repr(name) for name in wanted if name in missing)
        raise SemiretError(f"{option}: no document stored in {index.path} holds {names} (a name misspelt, or a corpus "
                           "field the index did not keep: build it with --metadata-fields NAME)")
    return read


def _scored(retriever, texts, judged, qrels, measure_object, depth, n_threads, grouped) -> tuple[float, np.ndarray]:
    """The mean and per-query values of ``retriever``'s ranking of the judged queries."""
    hits = retriever.search(texts, k=depth, n_threads=n_threads, **grouped)
    values = mean_per_query([hits.as_run(judged, by_group=bool(grouped))], qrels, measure_object, judged)
    return float(values.mean()), values


def _scratch_beside(index) -> str | None:
    """Where copies of ``index`` are made: beside it, so that they link its files rather than copy them (the same
    file system), else the system's temporary folder."""
    parent = Path(index.path).parent if hasattr(index, "path") else None
    return str(parent) if parent is not None and os.access(parent, os.W_OK) else None


class _Reweighed:
    """The retriever over a copy of its index read with other fields (``text_fields``: encoded again from its stored
    documents, :func:`with_text_fields`) and with other BM25 parameters (a backup of the index, or of that copy, its
    unchanged files linked, then :meth:`~semiret.indexes.inverted.InvertedIndex.set_bm25`), one copy of each at a
    time under ``scratch``; neither: the retriever itself."""

    def __init__(self, retriever, scratch: Path):
        self.original, self.scratch = retriever, scratch
        self.current, self.copy, self.made = None, None, 0
        self.fields, self.fielded = None, None

    def retriever(self, bm25: dict, fields: TextFields | None = None):
        base = self._fielded(fields)
        if not bm25:
            return base
        key = (str(fields), sorted(bm25.items(), key=str))
        if key != self.current:
            self._drop()
            path = self._next_path()
            base.index.backup(path)
            _link_caches(Path(self.original.index.path), path)
            copy = type(self.original).open(path, **self.original.given_options)
            copy.index.set_bm25(**bm25)
            self.current, self.copy = key, copy
        return self.copy

    def _fielded(self, fields: TextFields | None):
        """The retriever over a copy of the index encoded again reading ``fields`` (None: the retriever itself)."""
        if fields is None:
            return self.original
        if fields != self.fields:
            self._drop()
            self._drop_fielded()
            path = self._next_path()
            with_text_fields(self.original.index, fields, path)
            _link_caches(Path(self.original.index.path), path)
            self.fields, self.fielded = fields, type(self.original).open(path, **self.original.given_options)
        return self.fielded

    def _next_path(self) -> Path:
        self.made += 1
        return self.scratch / f"index-{self.made - 1}"

    def _drop(self) -> None:
        if self.copy is not None:
            path = self.copy.index.path
            self.current = self.copy = None
            shutil.rmtree(path, ignore_errors=True)

    def _drop_fielded(self) -> None:
        if self.fielded is not None:
            path = self.fielded.index.path
            self.fields = self.fielded = None
            shutil.rmtree(path, ignore_errors=True)

    def __enter__(self) -> "_Reweighed":
        return self

    def __exit__(self, *_) -> None:
        self._drop()
        self._drop_fielded()


def _link_caches(original: Path, path: Path) -> None:
    """The embeddings a re-ranking part keeps (a copy leaves them out), linked into the copy at ``path``: by content,
    the copy's alike."""
    for cache in [*original.glob(CACHE_FOLDER), *original.glob(f"*/{CACHE_FOLDER}")]:
        linked = path / cache.relative_to(original)
        if not linked.exists():
            linked.symlink_to(cache.resolve(), target_is_directory=True)


COPIED_META = ("retriever", "chunking", "metadata_fields", "id_field", "text_field")
"""``meta.json`` entries an index encoded again with other fields keeps: its retriever, and how it reads documents
added to it (``DOCUMENT_READING``: passages, metadata fields, the fields of the id and text)."""


def with_text_fields(index, fields: TextFields, path: Path) -> None:
    """A new index at ``path``: the BM25 ``index`` (or a hybrid's, a :class:`CompositeIndex` holding a BM25 part)
    encoded again from its stored documents reading ``fields`` (BM25F), its analyzer, BM25 parameters and the rest
    as they are; a hybrid's other parts copied from a backup of it, merged into one segment each as the BM25 part is
    written (the documents aligned, as a hybrid built whole). ``index`` is left unchanged; its synonyms are set in the
    copy."""
    path = Path(path)
    if isinstance(index, CompositeIndex):
        lexical = next(name for name, part in index.parts.items() if part is index.bm25_part)
        held = path.parent / f"{path.name}-backup"
        index.backup(held)  # one commit of every part, however the index changes meanwhile
        try:
            snapshot = open_index(held)
            writers = {name: (lambda target, part=part: _bm25_encoded_again(part, fields, target, 0,
                                                                               snapshot.iter_documents()))
                       if name == lexical else (lambda target, part=part: _merged_backup(part, target))
                       for name, part in snapshot.parts.items()}
            CompositeIndex.assemble(path, index.kind, writers, extra_meta={
                key: index.meta[key] for key in COPIED_META if index.meta.get(key)})
        finally:
            shutil.rmtree(held, ignore_errors=True)
    else:
        _bm25_encoded_again(index, fields, path, index.meta.get("buffer_mb"), index.iter_documents())
    lines = index.synonym_lines()
    if lines:
        open_index(path).set_synonyms(lines)


def _bm25_encoded_again(index, fields: TextFields, path: Path, buffer_mb, documents) -> None:
    """``documents`` (those the BM25 ``index`` stores, in its order) encoded again into a new BM25 index at ``path``,
    read by ``index``'s analyzer and BM25 parameters but for ``fields``."""
    from semiret.search.lexical import WordCounts

    read_as = WordCounts.from_index(index)
    side = WordCounts(read_as.analyzer, TermDictionary(), index.bm25, fields)  # a vocabulary of its own
    batches = (side.encode(batch) for batch in batched(documents, WordCounts.batch_size))
    InvertedIndex.build(path, "bm25", track(batches, f"encoding again ({TEXT_FIELDS_KEY} {fields})",
                                            total=index.n_docs, advance=len),
                        **side.index_config(), store_texts=True, buffer_mb=buffer_mb or None,
                        extra_meta={key: index.meta[key] for key in COPIED_META if index.meta.get(key)})


def _merged_backup(part, target: Path) -> None:
    """A backup of a hybrid's part at ``target``, its segments merged into one (as :func:`_bm25_encoded_again`
    writes the BM25 part: the documents in the same order)."""
    part.backup(target)
    open_index(target).merge(buffer_mb=0)


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
