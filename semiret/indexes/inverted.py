"""The inverted index: term-major postings in segments, memory-mapped, with add, delete and merge.

One format serves three kinds of postings:

- ``binary``: bag-of-tokens sets (SiDR's non-parametric index); no values are stored;
- ``impact``: float32 or 8-bit quantized term weights (learned sparse document vectors);
- ``bm25``: BM25 term-frequency saturation values; IDF is applied per query term at search time,
  from document frequencies summed over segments, so new segments force no rewrite (but for BM25 segments whose
  average document length drifted past ``AVGDL_TOLERANCE``: re-weighted in the same commit, postings hard-linked).

A directory holds ``meta.json`` (what it is, its segments, the commit point of every change), an
optional append-only ``vocab.txt`` (growable word vocabularies) and one folder per segment::

    seg-000000/postings.terms.npy   term ids that occur, ascending          (int32)
               postings.indptr.npy  start of each term's list                (int64)
               postings.docs.npy    segment-local document numbers            (int32)
               postings.values.npy  weights (absent for binary)               (float32 | uint8)
               postings.maxima.npy  largest weight of each term's list, the
                                    score bound of dynamic pruning (absent for binary)  (float32)
               doclens.npy          tokens per document                       (int32)
               docids.*.npy         document ids, with a hash table for lookups
               texts.*.npy          stored document JSON (optional)
               deleted.bin          append-only local numbers of deleted documents

Segments, deletion marks, commits, locking and snapshots are the segmented store's
(:mod:`semiret.indexes.segments`); every commit also appends the words the vocabulary gained to
``vocab.txt`` (fsynced before ``meta.json`` counts them). Old segments are not read or rewritten (but for the BM25
re-weighting above), so adds and deletes cost time proportional to the change. Words an add is still encoding are
not searchable: a search knows the vocabulary of its snapshot's commit.
"""

from __future__ import annotations

import functools
import logging
import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable, Container, Iterable, Sequence

import numpy as np

from semiret.data.collection import Document
from semiret.errors import SemiretError
from semiret.files import link_or_copy
from semiret.indexes import kernels
from semiret.indexes.segments import (Segment, SegmentedIndex, Snapshot, build_of, check_buffer, register_index_format,
                                      remove_folders, whole_buffer)
from semiret.indexes.storage import load_array
from semiret.indexes.two_phase import two_phase_search
from semiret.text.analyzer import TermDictionary
from semiret.text.bm25 import BM25_PARAMETER_NAMES, DEFAULT_DELTA, DELTA_VARIANTS, BM25Parameters
from semiret.text.token_weights import lucene_idf
from semiret.types import Postings, SearchHits, SparseQuery

log = logging.getLogger(__name__)

KINDS = ("binary", "impact", "bm25")
_NO_DELETIONS = np.empty(0, dtype=bool)
_NO_DF = np.empty(0, dtype=np.int64)
_NO_MAXIMA = np.empty(0, dtype=np.float32)


def _no_chunk_arguments(lo: int, hi: int) -> tuple:
    """A search without a second stage passes its kernel nothing per chunk of queries."""
    return ()


PRUNE_MIN_DOCS = 50_000
"""Below this, a segment is scanned in tens of microseconds and pruning's bookkeeping costs more than it
saves (``bench/pruning.py``, docs/results.md: 1.2-1.35x slower on SciFact's 5,183 documents, 1.07-1.22x
faster by the median on 1M)."""
VOCAB_FILE = "vocab.txt"
RENORMALISED_BLOCK = 1 << 20
"""Postings a BM25 segment's rewrite recomputes at a time (:meth:`InvertedIndex._rewrite_segment_files`)."""
AVGDL_TOLERANCE = 0.01
"""How far (relatively) the average document length a BM25 segment was normalised by may drift from the index's
before the segment is rewritten. Lucene reads the current average at search time; semiret stores saturated
weights (no per-posting work when searching) and rewrites a segment once adds have moved the average 1%: BM25's
length norm moves by less than that, and a corpus growing in like documents rarely moves it so far."""


class InvertedSegment(Segment):
    """A segment's term-major postings and document lengths (plus the store's ids, texts and marks)."""

    def __init__(self, path: Path, info: dict, binary: bool):
        self.terms = load_array(path / "postings.terms.npy")
        self.indptr = load_array(path / "postings.indptr.npy")
        self.docs = load_array(path / "postings.docs.npy")
        self.values = None if binary else load_array(path / "postings.values.npy")
        self.doclens = load_array(path / "doclens.npy")
        self.avgdl: float = info.get("avgdl", 0.0)
        self._cache: dict = {}
        super().__init__(path, info)

    def search_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Postings as plain arrays for the search kernel (memory-mapped views, made once)."""
        arrays = self._cache.get("search")
        if arrays is None:
            values = np.asarray(self.values) if self.values is not None else np.empty(0, np.float32)
            docs = np.asarray(self.docs).view(np.uint32)  # unsigned indexes compile to faster loops
            arrays = (np.asarray(self.terms), np.asarray(self.indptr), docs, values)
            self._cache["search"] = arrays
        return arrays

    def term_maxima(self) -> np.ndarray:
        """Each present term's largest value (1 for binary segments): the bounds that let search skip postings.

        Segments written before this file existed get them computed once, on first use.
        """
        maxima = self._cache.get("maxima")
        if maxima is None:
            path = self.path / "postings.maxima.npy"
            if self.values is None:
                maxima = np.ones(len(self.terms), np.float32)
            elif path.is_file():
                maxima = np.asarray(load_array(path))
            else:
                maxima = kernels.term_maxima(np.asarray(self.indptr), np.asarray(self.values))
            self._cache["maxima"] = maxima
        return maxima

    def scratch(self) -> tuple[np.ndarray, np.ndarray]:
        """Search scratch: a zeroed float32 score buffer of ``n_docs`` and a uint32 list of ``n_docs + 1``.

        Reused (the kernel hands the buffer back zeroed): allocating them per search would page-fault
        megabytes on a large segment. One pair per concurrent search.
        """
        free = self._cache.setdefault("scratch", [])
        try:
            return free.pop()
        except IndexError:
            return np.zeros(self.n_docs, np.float32), np.empty(self.n_docs + 1, np.uint32)

    def release_scratch(self, scratch: tuple[np.ndarray, np.ndarray]) -> None:
        self._cache["scratch"].append(scratch)

    def document_rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every document's postings, document-major (CSR ``offsets, terms, values``; values 1 in a binary segment):
        the term vectors a diversified search compares. Built in memory on first use (one pass over the postings,
        as much memory as they take) and kept: segments never change their postings."""
        rows = self._cache.get("rows")
        if rows is None:
            present, indptr, docs, values = self.search_arrays()
            rows = self._cache["rows"] = kernels.rows_of_term_major(
                present, indptr, docs, values, np.array(indptr[:-1]), np.arange(self.n_docs, dtype=np.int64))
        return rows

    def term_document_counts(self) -> tuple[np.ndarray, np.ndarray]:
        """(term ids, documents holding each): this segment's share of the document frequencies (deleted
        documents count until a merge drops them, as in Lucene)."""
        return np.asarray(self.terms), np.diff(np.asarray(self.indptr))


@dataclass(frozen=True)
class TwoPhase:
    """Two-phase search (:mod:`semiret.indexes.two_phase`): phase one searches with the query terms whose weight
    is at least ``prune_ratio`` x the query's largest, keeping ``expansion`` x k candidates (at most
    ``max_window``); phase two adds the other terms' contributions to those candidates only.
    ``prune_ratio=0`` keeps every term in phase one: the result equals the exhaustive search. ``adaptive``
    searches a query exactly where deferring its light terms would spare fewer postings than the window costs
    (on a small index, nearly always: exact search is cheaper there). A query whose heavy terms leave fewer than
    k live candidates is searched exactly whatever ``adaptive`` says: it finds as many hits as exact search."""

    prune_ratio: float = 0.4
    expansion: float = 5.0
    max_window: int = 10000
    adaptive: bool = True

    def __post_init__(self):
        if not (0.0 <= self.prune_ratio <= 1.0) or not math.isfinite(self.prune_ratio):
            raise SemiretError(f"two-phase prune_ratio must be in [0, 1], got {self.prune_ratio}")
        if not self.expansion >= 1.0:
            raise SemiretError(f"two-phase expansion must be at least 1, got {self.expansion}")
        if self.max_window < 1:
            raise SemiretError(f"two-phase max_window must be at least 1, got {self.max_window}")

    def window(self, k: int) -> int:
        return max(k, min(int(math.ceil(self.expansion * k)), self.max_window))

    @classmethod
    def parse(cls, spec: "str | TwoPhase | None") -> "TwoPhase | None":
        """``None``/``"off"`` -> None; ``"on"`` -> defaults; ``"0.4"`` or ``"0.4,5"`` -> (prune_ratio[, expansion]);
        a trailing ``",always"`` (or ``"always"`` alone) turns ``adaptive`` off."""
        if spec is None or isinstance(spec, cls):
            return spec
        text = str(spec).strip().lower()
        if text in ("", "off", "false", "no", "none"):
            return None
        parts = [x.strip() for x in text.split(",")]
        adaptive = parts[-1] != "always"
        if not adaptive:
            parts = parts[:-1] or ["on"]
        if parts == ["on"] or parts[0] in ("true", "yes", "default"):
            return cls(adaptive=adaptive)
        try:
            numbers = [float(x) for x in parts]
        except ValueError:
            raise SemiretError(f"two-phase: expected 'on', 'off', 'RATIO' or 'RATIO,EXPANSION' (',always' to "
                               f"never fall back to exact search), got {spec!r}") from None
        if len(numbers) > 2:
            raise SemiretError(f"two-phase: expected at most RATIO,EXPANSION[,always], got {spec!r}")
        return cls(*numbers, adaptive=adaptive)


@dataclass(frozen=True)
class SecondStage:
    """A re-ranking stage compiled into the postings search (:meth:`InvertedIndex.search_segments`): ``kernel``
    takes :func:`~semiret.indexes.kernels.search_postings`' arguments with ``depth`` in place of k, then
    ``arguments(segment, lo, hi)`` (for the queries ``lo`` to ``hi - 1``, those of one thread's call: per-query
    arrays sliced as the postings' query offsets are), then the scratch and outputs, and writes each query's best
    ``k`` of the postings' best ``depth`` (first-stage scores are the postings' raw sums: a quantized index's scale
    is not applied)."""

    kernel: Callable
    depth: int
    k: int
    arguments: Callable[["InvertedSegment", int, int], tuple]


class FrequencyBasis:
    """The document frequencies of the last snapshot computed, with each segment's share, so that the next
    snapshot's are those plus the segments its commit added, minus those it dropped: a commit adds or merges a
    few small segments, and summing every segment again made the first search after each commit cost about 4
    times a later one (bench/commit_refresh.py). Shared by an index's pinned views (a search's) and drafts, and
    thread-safe: the state is replaced in one assignment, never changed."""

    def __init__(self):
        self._state: tuple[str | None, dict[str, tuple[np.ndarray, np.ndarray]], np.ndarray] | None = None

    def frequencies(self, snapshot: Snapshot) -> np.ndarray:
        build, vocab_size = build_of(snapshot.meta), _vocab_size(snapshot.meta)
        state = self._state
        if state is None or state[0] != build:  # none yet, or another index in this directory now
            shares, df = {}, np.zeros(vocab_size, np.int64)
        else:
            shares, df = dict(state[1]), np.zeros(vocab_size, np.int64)
            kept = min(vocab_size, len(state[2]))
            df[:kept] = state[2][:kept]  # terms past ``kept`` come only from segments dropped below
        names = {segment.name for segment in snapshot.segments}
        for name in [name for name in shares if name not in names]:
            terms, counts = shares.pop(name)
            inside = terms < vocab_size
            df[terms[inside]] -= counts[inside]
        for segment in snapshot.segments:
            if segment.name not in shares:
                terms, counts = shares[segment.name] = segment.term_document_counts()
                df[terms] += counts  # a segment's term ids are distinct
        self._state = (build, shares, df)
        return df


@register_index_format
class InvertedIndex(SegmentedIndex):
    """An open inverted index directory: postings segments, BM25 statistics, a growable word vocabulary."""

    FORMAT = "semiret.inverted"
    batch_type = Postings

    def __init__(self, path: Path, meta: dict, vocab: TermDictionary | list[str] | None = None):
        if vocab is None and meta["growable_vocab"]:
            vocab = _read_vocabulary(path, meta, 0, 0)
        self.terms = vocab if isinstance(vocab, TermDictionary) or vocab is None else TermDictionary(vocab)
        """The growable word vocabulary (committed words, then those an add in progress is encoding), shared
        with the document side that encodes into it; None for a fixed tokenizer vocabulary."""
        self._frequency_basis = FrequencyBasis()  # shared with pinned views and drafts, as the segments are
        super().__init__(path, meta)

    # ------------------------------------------------------------------ creation
    @classmethod
    def build(cls, path: str | Path, kind: str, batches: Iterable[Postings], vocab_size: int,
              analyzer: dict, vocab: TermDictionary | list[str] | None = None, bm25: BM25Parameters | None = None,
              quantize_bits: int | None = None, store_texts: bool = True, overwrite: bool = False,
              extra_meta: dict | None = None, buffer_mb: float | None = None) -> "InvertedIndex":
        """Write a new index from postings batches (staged in a temporary directory, then renamed), a segment
        each ``buffer_mb`` MB of documents (None or 0: one segment; a quantized index is written as one, its scale
        set by all its weights, and refuses a buffer).

        ``vocab`` is given for growable word vocabularies: the :class:`~semiret.text.analyzer.TermDictionary` (or its
        list of terms) that the analyzer fills while ``batches`` is consumed; the index reads its final state, and a
        failed build takes back the words it added.
        """
        if kind not in KINDS:
            raise SemiretError(f"unknown index kind {kind!r} (known: {', '.join(KINDS)})")
        if quantize_bits not in (None, 8):
            raise SemiretError("only 8-bit quantization is supported")
        fields = {
            "kind": kind, "analyzer": analyzer, "vocab_size": vocab_size, "growable_vocab": vocab is not None,
            "n_terms": 0, "bm25": (bm25 or BM25Parameters()).config() if kind == "bm25" else None,
            "quantization": {"bits": quantize_bits, "scale": None} if quantize_bits else None,
        }
        buffer_mb = whole_buffer(cls, {"quantize_bits": quantize_bits}, check_buffer(buffer_mb))
        return cls._build(path, fields, batches, store_texts, overwrite, extra_meta, buffer_mb=buffer_mb, vocab=vocab)

    @classmethod
    def written_whole(cls, options: dict) -> str | None:
        quantized = options.get("quantize_bits") or options.get("quantization")  # build's keyword, or meta.json's
        return "a quantized index (one scale for all its weights)" if quantized else None

    def _open_segment(self, path: Path, info: dict) -> InvertedSegment:
        return InvertedSegment(path, info, binary=self.kind == "binary")

    # ------------------------------------------------------------------ properties
    @property
    def vocab(self) -> list[str] | None:
        """The growable word vocabulary's terms (None for a fixed tokenizer vocabulary)."""
        return self.terms.terms if self.terms is not None else None

    @property
    def vocab_size(self) -> int:
        """Terms a search knows: those of the current commit."""
        return _vocab_size(self.meta)

    @property
    def bm25(self) -> BM25Parameters:
        return _bm25_of(self.snapshot)

    _weighted_with: BM25Parameters | None = None
    """On a draft of :meth:`set_bm25`: the BM25 parameters the segments' weights were computed with, which the
    rewrite reads them back into term counts by (None: the index's own)."""

    def bm25_with(self, **parameters) -> BM25Parameters:
        """The index's BM25 parameters with ``parameters`` (``k1``, ``b``, ``variant``, ``delta``) in place of theirs
        (a variant without a delta keeps none), checked as :meth:`set_bm25` would set them."""
        if self.kind != "bm25":
            raise SemiretError(f"{self.path} is a {self.kind!r} index: only a BM25 index has BM25's parameters")
        unknown = sorted(set(parameters) - set(BM25_PARAMETER_NAMES))
        if unknown:
            raise SemiretError(f"BM25's parameters are {', '.join(BM25_PARAMETER_NAMES)}, not {', '.join(unknown)}")
        current = self.bm25
        if current.k1 == 0 and parameters.get("k1", 0) != 0:
            raise SemiretError(f"{self.path} was built with k1 = 0, so its weights hold no term counts to weigh again: "
                               "build it again with the parameters wanted")
        wanted = {**asdict(current), **parameters}
        if "delta" not in parameters and wanted["variant"] not in DELTA_VARIANTS:
            wanted["delta"] = DEFAULT_DELTA
        return BM25Parameters(**wanted)

    def set_bm25(self, **parameters) -> bool:
        """BM25's parameters (``k1``, ``b``, ``variant``, ``delta``; those not given as they are) changed in place,
        in one commit: every segment's weights computed again from the term counts they encode (what a merge reads
        back), no document analysed again, so an index without stored texts changes too; searches read the new
        weights from that commit on (a server's too). What tuning k1 and b (``semiret tune``) or applying what a
        tuning chose (``semiret set-bm25``) needs in place of a build. Returns whether anything changed."""
        with self.writing():
            new = self.bm25_with(**parameters)  # bad values fail before anything is written
            current = self.bm25
            if new == current:
                return False
            with self._change() as draft:
                draft.meta["bm25"] = new.config()
                draft._weighted_with = current
                replaced = draft._renormalise()
            remove_folders(replaced)
        return True

    def document_frequencies(self, snapshot: Snapshot | None = None) -> np.ndarray:
        """Documents containing each term, summed over segments (computed once per snapshot, by default the
        current one, from the last snapshot's: see :class:`FrequencyBasis`)."""
        snapshot = snapshot or self.snapshot
        df = snapshot.derived.get("df")
        if df is None:
            df = snapshot.derived["df"] = self._frequency_basis.frequencies(snapshot)
        return df

    def held_terms(self, term_ids) -> np.ndarray:
        """bool per term id: whether a live document of the current snapshot holds it (one a view hides does not).
        Document frequencies count deleted documents until a merge, as scores should; whether a query word is
        in the documents at all (to correct or complete it) must not."""
        terms = np.asarray(term_ids, np.int64).reshape(-1)
        held = np.zeros(len(terms), bool)
        for segment in self.segments:
            present, indptr, docs, _ = segment.search_arrays()
            kernels.mark_held(terms, present, indptr, docs, segment.deleted, held)
        return held

    def idf(self, snapshot: Snapshot | None = None) -> np.ndarray:
        """The IDF of every term over the index (computed once per snapshot, by default the current one): its BM25
        variant's for a BM25 index, else Lucene's."""
        snapshot = snapshot or self.snapshot
        idf = snapshot.derived.get("idf")
        if idf is None:
            df, n = self.document_frequencies(snapshot), _n_stored(snapshot)
            idf = snapshot.derived["idf"] = _bm25_of(snapshot).idf(df, n) if self.kind == "bm25" else lucene_idf(df, n)
        return idf

    def average_postings_per_document(self) -> float:
        total = sum(int(s.indptr[-1]) for s in self.segments)
        return total / max(self.n_stored, 1)

    def describe(self) -> dict:
        """Facts about the index for reports: sizes, counts, sparsity."""
        return {**super().describe(), "terms": self.vocab_size,
                "postings_per_document": round(self.average_postings_per_document(), 2),
                **({"bm25": {"variant": self.bm25.variant, **self.bm25.config()}} if self.kind == "bm25" else {})}

    # ------------------------------------------------------------------ search
    def search(self, queries: Sequence[SparseQuery], k: int = 10, n_threads: int = 1,
               two_phase: TwoPhase | None = None, prune: bool | None = None) -> SearchHits:
        """Exact top-k by ``sum_t w_t * value(t, d)`` (with IDF for BM25 indexes) over live documents.

        Ties rank the document added first higher. ``prune`` skips postings that cannot change the
        top k (dynamic pruning, :func:`~semiret.indexes.kernels.search_postings`; the result is the
        same): ``None`` prunes segments of at least ``PRUNE_MIN_DOCS`` documents, True/False all or
        none. With ``two_phase`` the search is approximate (:class:`TwoPhase`): candidates come from
        the heavy query terms only, then are rescored with all.
        """
        if k < 1:
            raise SemiretError("k must be at least 1")
        snapshot = self.snapshot  # one commit for the whole search, whatever a writer publishes meanwhile
        seg_scores, seg_docs, visited = self.search_segments(snapshot, queries, k, n_threads, two_phase, prune)
        hits = self._top_hits(snapshot.segments, seg_scores, seg_docs, k, len(queries))
        hits.postings_visited = visited.tolist()
        return hits

    def search_segments(self, snapshot: Snapshot, queries: Sequence[SparseQuery], k: int, n_threads: int = 1,
                        two_phase: TwoPhase | None = None, prune: bool | None = None,
                        second_stage: "SecondStage | None" = None):
        """:meth:`search` before the segments' results are merged and ids decoded: per segment of ``snapshot``,
        [queries, <= k] scores (best first) and local document numbers (-1 where fewer), and the postings each
        query visited. With ``second_stage`` the postings find each segment's best ``second_stage.depth`` and
        the stage's kernel, in the same compiled call, orders those (its scores are what is returned)."""
        q_offsets, q_terms, q_weights = self._pack_queries(queries, snapshot)
        n_queries = len(queries)
        seg_scores, seg_docs = [], []
        visited = None  # the first segment's counts, then the sum
        for segment in snapshot.segments:
            deleted = segment.deleted if segment.any_deleted() else _NO_DELETIONS
            pruned = prune if prune is not None else segment.n_docs >= PRUNE_MIN_DOCS
            maxima = segment.term_maxima() if pruned else _NO_MAXIMA
            arrays = (*segment.search_arrays(), maxima, segment.values is None, deleted, segment.n_docs)
            per_chunk = _no_chunk_arguments  # arguments of one thread's queries lo..hi - 1 (a second stage's)
            if second_stage is not None:
                kk = min(second_stage.k, segment.n_docs) or 1
                kernel, args = second_stage.kernel, (*arrays, min(second_stage.depth, segment.n_docs) or 1)
                per_chunk = functools.partial(second_stage.arguments, segment)
            elif two_phase is None:
                kk = min(k, segment.n_docs) or 1
                kernel, args = kernels.search_postings, (*arrays, kk)
            else:
                window = min(two_phase.window(k), segment.n_docs) or 1
                kk = min(k, window)
                kernel, args = two_phase_search, (*arrays, window, np.float32(two_phase.prune_ratio),
                                                  two_phase.adaptive)
            scores, docs, seg_visited = _search_in_chunks(
                segment, n_queries, kk, n_threads,
                lambda lo, hi, *scratch_and_out: kernel(q_offsets[lo: hi + 1], q_terms, q_weights, *args,
                                                        *per_chunk(lo, hi), *scratch_and_out))
            if snapshot.meta.get("quantization") and second_stage is None:
                scores *= value_scale(snapshot.meta)
            seg_scores.append(scores)
            seg_docs.append(docs)
            visited = seg_visited if visited is None else visited + seg_visited
        return seg_scores, seg_docs, np.zeros(n_queries, np.int64) if visited is None else visited

    def matching_count(self, query: SparseQuery) -> int:
        """How many live documents hold at least one of ``query``'s terms: those its search scores (OpenSearch's
        total hits), counted from the postings of those terms alone (a view :meth:`restricted` by a filter counts
        the documents that pass it)."""
        terms = np.unique(np.asarray(query.terms)[np.asarray(query.weights) != 0])
        total = 0
        for segment in self.snapshot.segments:
            present = np.asarray(segment.terms)
            at = np.searchsorted(present, terms)
            found = at[(at < len(present)) & (present[np.minimum(at, len(present) - 1)] == terms)] if len(present) \
                else at[:0]
            if not len(found):
                continue
            indptr, docs = np.asarray(segment.indptr), np.asarray(segment.docs)
            held = np.zeros(segment.n_docs, bool)
            for position in found.tolist():
                held[docs[indptr[position]:indptr[position + 1]]] = True
            if segment.any_deleted():
                held &= ~segment.deleted
            total += int(held.sum())
        return total

    def explain(self, query: SparseQuery, doc_id: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """How the live document ``doc_id``'s score for ``query`` adds up, from one commit: the query's term ids and
        weights as a search scores them (IDF applied for BM25; unknown and zero-weight terms left out) and each term's
        value in the document's postings (0 where it lacks the term, 1 for a binary index); the products sum to the
        score an exact search gives it. None when there is no such live document."""
        view = self.pinned()
        found = view.locate(doc_id)
        if found is None:
            return None
        segment, local = found
        _, terms, weights = view._pack_queries([query], view.snapshot)
        present, indptr, docs, values = segment.search_arrays()
        scale = value_scale(view.snapshot.meta)
        found_values = np.zeros(len(terms), np.float32)
        for n, term in enumerate(terms.tolist()):
            at = int(np.searchsorted(present, term))
            if at == len(present) or present[at] != term:
                continue
            start, end = int(indptr[at]), int(indptr[at + 1])
            position = start + int(np.searchsorted(docs[start:end], local))  # each list in document order
            if position < end and docs[position] == local:
                found_values[n] = 1.0 if segment.values is None else float(values[position]) * scale
        return terms, weights, found_values

    def scored_query(self, query: SparseQuery) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A query's term ids and weights as a search scores them (IDF applied for BM25; unknown and zero-weight
        terms left out), and each term's document frequency, from one commit."""
        snapshot = self.snapshot
        _, terms, weights = self._pack_queries([query], snapshot)
        return terms, weights, self.frequencies_of(terms, snapshot)

    def document_terms(self, doc_id: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The live document ``doc_id``'s terms as its postings hold them (ascending ids; values with the
        quantization scale applied, 1 for a binary index, BM25's saturated term frequencies) and each term's
        document frequency, from one commit; None when there is no such live document (Lucene's term vectors)."""
        stored = self._stored_row(doc_id)
        if stored is None:
            return None
        view, terms, found_values = stored
        return terms, found_values, view.frequencies_of(terms, view.snapshot)

    def _stored_row(self, doc_id: str) -> "tuple[InvertedIndex, np.ndarray, np.ndarray] | None":
        """(the commit read, the live document ``doc_id``'s term ids ascending, their values with the quantization
        scale applied); None when there is no such live document."""
        view = self.pinned()
        found = view.locate(doc_id)
        if found is None:
            return None
        segment, local = found
        present, indptr, docs, values = segment.search_arrays()
        _, terms, found_values = kernels.rows_of_term_major(present, indptr, docs, values, np.array(indptr[:-1]),
                                                            np.array([local], np.int64))
        found_values *= np.float32(value_scale(view.snapshot.meta))
        return view, terms, found_values

    def get_vector(self, doc_id: str) -> dict[str, float] | None:
        """The live document ``doc_id``'s postings as ``{term: value}``, named by the index's growable vocabulary
        (an index of sparse vectors brought by the user: the vector as stored, in term order, each value the
        shortest decimal that reads back as the stored float32), from one commit; None when there is no such live
        document."""
        if self.terms is None:
            raise SemiretError(f"{self.path} names its terms by a tokenizer's vocabulary, not its own: read a "
                               "document's terms with document_terms")
        stored = self._stored_row(doc_id)
        if stored is None:
            return None
        view, terms, found_values = stored
        vocab = view.vocab
        return {vocab[term]: float(str(value)) for term, value in zip(terms.tolist(), found_values)}

    def _document_vectors(self, located: list[tuple[InvertedSegment, int]]):
        """Documents' postings as sparse rows over the vocabulary, weighted by IDF where the postings alone do not
        weigh terms (BM25's term frequencies, a binary index's ones), as the index's searches weigh them."""
        import scipy.sparse as sp

        terms, values, lengths = [], [], []
        for segment, local in located:
            offsets, row_terms, row_values = segment.document_rows()
            start, end = int(offsets[local]), int(offsets[local + 1])
            terms.append(row_terms[start:end])
            values.append(row_values[start:end])
            lengths.append(end - start)
        terms_all = np.concatenate(terms) if terms else np.empty(0, np.int32)
        values_all = np.concatenate(values) if values else np.empty(0, np.float32)
        if self.kind in ("bm25", "binary"):
            idf = self.idf()
            values_all = values_all * idf[terms_all]
        indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        return sp.csr_matrix((values_all, terms_all, indptr), shape=(len(located), self.vocab_size))

    def stored_weights(self, values: np.ndarray, length: int) -> np.ndarray:
        """The values a document of ``length`` words with these postings' ``values`` (what a document side encodes:
        BM25's counts, a model's weights) would be stored with now: BM25 saturated at the index's current average
        length, 8-bit quantization's rounding, 1 in a binary index; what :meth:`document_terms` reads back after
        adding it (up to a later add that moves BM25's average length)."""
        values = np.asarray(values, np.float32)
        if self.kind == "binary":
            return np.ones_like(values)
        if self.kind == "bm25":
            return self.bm25.saturation(values, np.full(len(values), length, np.float32),
                                        self._average_length(np.array([length])))
        if not self.meta.get("quantization"):
            return values
        scale = self._quantization_scale(values)  # an empty index: as the first add would fix it, by this document
        return (np.clip(np.rint(values / scale), 1, 255) * scale).astype(np.float32)

    def frequencies_of(self, terms: np.ndarray, snapshot: Snapshot | None = None) -> np.ndarray:
        """The document frequencies of term ids (0 for ids the snapshot does not know, -1 among them)."""
        df = self.document_frequencies(snapshot)
        terms = np.asarray(terms, np.int64)
        known = (terms >= 0) & (terms < len(df))
        out = np.zeros(len(terms), np.int64)
        out[known] = df[terms[known]]
        return out

    def term_bounds(self, snapshot: Snapshot | None = None) -> np.ndarray:
        """Each term's largest value over the snapshot's segments (float32 [vocab], 0 for absent terms; the
        quantization scale applied): with the query weights, the largest score a document can get. Deleted
        documents count until a merge drops them, as in document frequencies: still a bound, never recomputed
        for a delete."""
        snapshot = snapshot or self.snapshot
        bounds = snapshot.derived.get("term_bounds")
        if bounds is None:
            bounds = np.zeros(_vocab_size(snapshot.meta), np.float32)
            for segment in snapshot.segments:
                terms = np.asarray(segment.terms)
                inside = terms < len(bounds)  # words an add was still encoding are not searched either
                bounds[terms[inside]] = np.maximum(bounds[terms[inside]], segment.term_maxima()[inside])
            if snapshot.meta.get("quantization"):
                bounds *= value_scale(snapshot.meta)
            snapshot.derived["term_bounds"] = bounds
        return bounds

    def score_bounds(self, queries: Sequence[SparseQuery], snapshot: Snapshot | None = None) -> np.ndarray:
        """Each query's score bound: the largest score any document of the snapshot can get (``sum_t w_t x``
        the term's largest value, with IDF for BM25), so that scores divided by it lie in [0, 1] whatever the
        query, the model or the collection (what a fusion of two indexes' scores normalises by)."""
        return self._pack_with_bounds(queries, snapshot or self.snapshot)[3]

    def _pack_with_bounds(self, queries: Sequence[SparseQuery], snapshot: Snapshot):
        """:meth:`_pack_queries` and each query's score bound: (offsets, terms, weights, bounds), in one kernel call."""
        return self._pack_queries(queries, snapshot, self.term_bounds(snapshot))

    def _pack_queries(self, queries: Sequence[SparseQuery], snapshot: Snapshot, term_bounds: np.ndarray | None = None):
        """:func:`pack_queries` over the terms the snapshot's commit knows (with IDF for BM25)."""
        if self.kind != "bm25":
            return pack_queries(queries, _vocab_size(snapshot.meta), term_bounds=term_bounds)
        return pack_queries(queries, _vocab_size(snapshot.meta), self.document_frequencies(snapshot),
                            _n_stored(snapshot), _bm25_of(snapshot).variant_code, term_bounds)

    # ------------------------------------------------------------------ segments
    def _live_batch(self, segment: InvertedSegment, live: np.ndarray, ids: list[str],
                    documents: Sequence[Document] | None, cursors: np.ndarray | None = None) -> Postings:
        """The segment's documents ``live`` (ascending local numbers) back in doc-major form (raw counts for
        BM25), holding only theirs (:func:`~semiret.indexes.kernels.rows_of_term_major`; ``cursors``: where each
        term's list was left by the parts read before, which precede these)."""
        terms, indptr, docs, values = segment.search_arrays()
        if cursors is None:
            cursors = np.array(indptr[:-1])
        offsets, terms, values = kernels.rows_of_term_major(terms, indptr, docs, values, cursors, live)
        lengths = np.asarray(segment.doclens)[live]
        if self.meta.get("quantization"):
            values *= np.float32(value_scale(self.meta))
        if self.kind == "bm25":
            values = self.bm25.term_frequency(values, np.repeat(lengths, np.diff(offsets)), segment.avgdl)
        return Postings(ids=ids, offsets=offsets, terms=terms, values=values.astype(np.float32, copy=False),
                        lengths=lengths, documents=documents)

    def _segment_reader(self, segment: InvertedSegment) -> Callable:
        """:meth:`_live_batch` of parts in order, each term's list read on from where the part before left it."""
        return functools.partial(self._live_batch, segment, cursors=np.array(segment.search_arrays()[1][:-1]))

    def _translated(self, other: InvertedIndex, postings: Postings) -> Postings:
        """``other``'s word ids mapped to this index's by the words (new words join the vocabulary); the batch keeps
        its kind and what else it carries (a NAIL batch's score rows)."""
        if self.terms is None:
            return postings
        ids = np.asarray(self.terms.lookup(other.vocab, add=True), np.int32)
        return replace(postings, terms=ids[postings.terms])

    def _batch_vocab_size(self) -> int:
        """Term ids a batch being written may use: the committed ones and those its encoding added."""
        return len(self.terms.terms) if self.terms is not None else self.meta["vocab_size"]

    def _validate(self, postings: Postings) -> None:
        check_postings(postings, self._batch_vocab_size(), self.kind)

    def _average_length(self, lengths: np.ndarray | None = None) -> float:
        """BM25's average document length over every stored document (deleted ones too, until a merge), with
        documents of these ``lengths``."""
        total = sum(float(np.sum(s.doclens)) for s in self.segments)
        if lengths is None:
            return total / max(self.n_stored, 1)
        return (total + float(np.sum(lengths))) / max(self.n_stored + len(lengths), 1)

    def _stale_segments(self, exact: Container[int] = ()) -> list[int]:
        """BM25 segments whose lengths were normalised by an average more than :data:`AVGDL_TOLERANCE` away from
        the index's current one (adds of longer or shorter documents moved it), or by another one at all at the
        positions ``exact`` (the parts of a build or merge, written as they came): rewritten in the same commit, so
        that scores stay within that tolerance of a fresh build's without search-time work. Every segment on a
        draft of :meth:`set_bm25`."""
        if self.kind != "bm25" or not self.segments:
            return []
        if self._weighted_with is not None:  # weights of other parameters (set_bm25): every segment
            return list(range(len(self.segments)))
        current = self._average_length()
        return [position for position, segment in enumerate(self.segments)
                if abs(segment.avgdl - current) > (0.0 if position in exact else AVGDL_TOLERANCE * current)]

    def _write_segment_files(self, directory: Path, postings: Postings, info: dict) -> None:
        """Postings transposed to term-major (BM25 saturation or quantized weights) and document lengths."""
        values = np.asarray(postings.values, np.float32)
        if self.kind == "bm25":
            info["avgdl"] = self._average_length(postings.lengths)
            doc_of_posting = np.repeat(np.arange(len(postings)), np.diff(postings.offsets))
            values = self.bm25.saturation(values, postings.lengths[doc_of_posting].astype(np.float32), info["avgdl"])
        elif self.kind == "impact":
            if not values.all():
                postings, values = _drop_zero_weights(postings, values)
            if self.meta.get("quantization"):
                values = self._quantize(values)
        present, indptr, docs, term_values = kernels.transpose_to_term_major(
            postings.offsets, postings.terms.astype(np.int32), values, self._batch_vocab_size())
        np.save(directory / "postings.terms.npy", present)
        np.save(directory / "postings.indptr.npy", indptr)
        np.save(directory / "postings.docs.npy", docs)
        if self.kind != "binary":
            np.save(directory / "postings.values.npy", term_values)
            np.save(directory / "postings.maxima.npy", kernels.term_maxima(indptr, term_values))
        np.save(directory / "doclens.npy", np.asarray(postings.lengths, np.int32))

    def _rewrite_segment_files(self, directory: Path, segment: InvertedSegment, info: dict) -> None:
        """BM25: the weights recomputed with the average length now, a block of postings at a time, read
        memory-mapped and written out (a segment of any size, in bounded memory); the postings' layout and lengths,
        which do not change, linked. Values equal those of a segment written from the documents."""
        if self.kind != "bm25":
            return super()._rewrite_segment_files(directory, segment, info)
        doclens = np.asarray(segment.doclens)
        info["avgdl"] = self._average_length(doclens)
        for name in ("postings.terms.npy", "postings.indptr.npy", "postings.docs.npy", "doclens.npy"):
            link_or_copy(segment.path / name, directory / name)
        old, docs = np.asarray(segment.values), np.asarray(segment.docs)
        with open(directory / "postings.values.npy", "wb") as out:  # written, not mapped: a full disk is an OSError
            np.lib.format.write_array_header_1_0(out, {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)),
                                                       "fortran_order": False, "shape": old.shape})
            for start in range(0, len(old), RENORMALISED_BLOCK):
                block = slice(start, start + RENORMALISED_BLOCK)
                lengths = doclens[docs[block]]
                counts = (self._weighted_with or self.bm25).term_frequency(old[block], lengths,
                                                                         segment.avgdl).astype(np.float32)
                out.write(self.bm25.saturation(counts, lengths.astype(np.float32), info["avgdl"]).tobytes())
        new = load_array(directory / "postings.values.npy")
        np.save(directory / "postings.maxima.npy", kernels.term_maxima(np.asarray(segment.indptr), np.asarray(new)))

    def _quantize(self, values: np.ndarray) -> np.ndarray:
        """8-bit weights on a scale fixed by the first segment; later larger weights are clipped."""
        quant = self.meta["quantization"]
        quant["scale"] = self._quantization_scale(values)
        q = np.rint(values / quant["scale"])
        if q.max(initial=0) > 255:
            log.warning("%d weights exceed the quantization range of %s and were clipped", int((q > 255).sum()), self.path)
        return np.clip(q, 1, 255).astype(np.uint8)

    def _quantization_scale(self, values: np.ndarray) -> float:
        """The 8-bit scale: the index's, or for its first weights one that maps their largest to 255."""
        scale = self.meta["quantization"]["scale"]
        if scale is not None:
            return scale
        return float(values.max() / 255.0) if len(values) and values.max() > 0 else 1.0

    def _committed_meta(self) -> dict:
        """Append the words the vocabulary gained to ``vocab.txt`` (what the commit names, written before it: also
        before a hybrid records its parts' commits), then the ``meta.json`` that commits them."""
        if self.terms is not None:
            self._append_vocabulary()
        return super()._committed_meta()

    def _append_vocabulary(self) -> None:
        """Write the words added since the last commit after the committed lines of ``vocab.txt``
        (dropping lines of a change that crashed before its commit), fsynced, and record them in ``meta``."""
        committed = self._committed_vocab_bytes()
        with open(self.path / VOCAB_FILE, "ab") as handle:
            handle.truncate(committed)
            added = "".join(t + "\n" for t in self.vocab[self.meta["n_terms"]:]).encode("utf-8")
            handle.write(added)
            handle.flush()
            os.fsync(handle.fileno())
        self.meta["vocab_bytes"] = committed + len(added)
        self.meta["n_terms"] = len(self.vocab)

    def _load_commit(self, meta: dict) -> None:
        """Read the words a newer commit added to ``vocab.txt`` into the vocabulary (first dropping any that no
        commit holds: they would take the ids of the new ones)."""
        if self.terms is None:
            return
        if build_of(meta) != build_of(self.meta):  # another index in this directory now
            self.terms.truncate(0)
            self.terms.lookup(_read_vocabulary(self.path, meta, 0, 0), add=True)
            return
        known = self.meta["n_terms"]
        self.terms.truncate(known)
        if meta["n_terms"] > known:
            self.terms.lookup(_read_vocabulary(self.path, meta, known, self._committed_vocab_bytes()), add=True)

    def _discard_uncommitted(self) -> None:
        """Take back the words of documents encoded for a change that failed."""
        if self.terms is not None:
            self.terms.truncate(self.meta["n_terms"])

    def _committed_vocab_bytes(self) -> int:
        """Bytes of ``vocab.txt`` the current commit holds."""
        committed = self.meta.get("vocab_bytes")
        if committed is None:  # indexes written before vocab_bytes was recorded
            committed = sum(len(t.encode("utf-8")) + 1 for t in self.vocab[: self.meta["n_terms"]])
        return committed


def search_normalised_sum(parts: Sequence[tuple[InvertedIndex, Sequence[SparseQuery], float]], k: int,
                          n_threads: int = 1) -> SearchHits | None:
    """The top ``k`` of ``sum_p share_p x score_p(q, d) / bound_p(q)`` over two inverted indexes of the same
    documents, ``parts`` being ``(index, queries, share)``: each index's score divided by the query's score
    bound there (:meth:`InvertedIndex.score_bounds`), so both lie in [0, 1], then weighted and summed, exactly,
    over every document. Both indexes' postings are added into one score buffer per segment and selected
    once: what a hybrid of two sparse retrievers costs about as much as one. Needs segments that hold the
    same documents in the same order (indexes written together, as a hybrid's parts are); None when the
    current ones do not (a crash between the parts' commits, or a part copied from elsewhere), for the caller
    to search each index alone. Hits' ids are the first index's."""
    (index_a, queries_a, share_a), (index_b, queries_b, share_b) = parts
    snapshot_a, snapshot_b = index_a.snapshot, index_b.snapshot
    if k < 1:
        raise SemiretError("k must be at least 1")
    if not _aligned(snapshot_a, snapshot_b):
        return None
    packed = []
    for index, queries, share, snapshot in ((index_a, queries_a, share_a, snapshot_a),
                                            (index_b, queries_b, share_b, snapshot_b)):
        share *= value_scale(snapshot.meta)  # the postings hold quantized units, the bounds real ones
        packed.append((*index._pack_with_bounds(queries, snapshot), float(share)))
    n_queries = len(queries_a)
    seg_scores, seg_docs = [], []
    for segment_a, segment_b in zip(snapshot_a.segments, snapshot_b.segments):
        deleted = _NO_DELETIONS  # a delete that reached one part only (a crash between commits) still counts
        if segment_a.any_deleted() or segment_b.any_deleted():
            deleted = segment_a.deleted | segment_b.deleted
        arguments = [(*query, *segment.search_arrays(), segment.values is None)
                     for query, segment in zip(packed, (segment_a, segment_b))]
        kk = min(k, segment_a.n_docs) or 1
        scores, docs, _ = _search_in_chunks(
            segment_a, n_queries, kk, n_threads,
            lambda lo, hi, *scratch_and_out: kernels.search_two_postings(
                *_query_slice(arguments[0], lo, hi), *_query_slice(arguments[1], lo, hi), deleted, segment_a.n_docs,
                kk, *scratch_and_out))
        seg_scores.append(scores)
        seg_docs.append(docs)
    return index_a._top_hits(snapshot_a.segments, seg_scores, seg_docs, k, n_queries)


def _query_slice(part: tuple, lo: int, hi: int) -> tuple:
    """One part's kernel arguments (offsets, terms, weights, bounds, share, then its segment's arrays) for the
    queries ``lo:hi``."""
    offsets, terms, weights, bounds, *rest = part
    return (offsets[lo: hi + 1], terms, weights, bounds[lo:hi], *rest)


def _bm25_of(snapshot: Snapshot) -> BM25Parameters:
    """The BM25 parameters of one commit (a search's: ``set_bm25`` may publish others meanwhile), made and checked
    once per snapshot (again if its ``meta`` is changed, as a draft's is)."""
    config = snapshot.meta["bm25"]
    known = snapshot.derived.get("bm25")
    if known is None or known[0] != config:
        known = snapshot.derived["bm25"] = (dict(config), BM25Parameters(**config))
    return known[1]


def _aligned(snapshot_a: Snapshot, snapshot_b: Snapshot) -> bool:
    """Whether two snapshots' segments hold the same documents in the same order (their id hashes compared once
    per pair of segments: segments never change but for their deletion marks)."""
    if len(snapshot_a.segments) != len(snapshot_b.segments):
        return False
    for segment_a, segment_b in zip(snapshot_a.segments, snapshot_b.segments):
        if segment_a.n_docs != segment_b.n_docs:
            return False
        key = ("aligned", str(segment_b.path), build_of(snapshot_b.meta))  # another index there: compared anew
        same = segment_a._cache.get(key)
        if same is None:
            same = segment_a._cache[key] = bool(np.array_equal(segment_a.id_keys(), segment_b.id_keys()))
        if not same:
            return False
    return True


def value_scale(meta: dict) -> float:
    """What an index's stored postings values are multiplied by to be weights: its 8-bit quantization's scale, else 1
    (also before the first add has fixed the scale)."""
    return ((meta.get("quantization") or {}).get("scale")) or 1.0


def _search_in_chunks(segment: InvertedSegment, n_queries: int, k: int, n_threads: int,
                      call: Callable) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``call(lo, hi, buffer, touched, scores, docs, visited)`` (a search kernel over the queries ``lo:hi``, with
    the segment's scratch and those queries' output rows) over all queries, in ``n_threads`` chunks run at once;
    returns the outputs: [queries, k] scores and local numbers, and the postings each query visited."""
    scores = np.empty((n_queries, k), np.float32)
    docs = np.empty((n_queries, k), np.int32)
    visited = np.empty(n_queries, np.int64)
    if n_threads <= 1 or n_queries <= 1:  # one call over all the queries, straight into the outputs
        scratch = segment.scratch()
        try:
            call(0, n_queries, *scratch, scores, docs, visited)
        finally:
            segment.release_scratch(scratch)
        return scores, docs, visited

    def run(lo: int, hi: int) -> None:
        scratch = segment.scratch()
        try:
            call(lo, hi, *scratch, scores[lo:hi], docs[lo:hi], visited[lo:hi])
        finally:
            segment.release_scratch(scratch)

    chunks = np.linspace(0, n_queries, min(n_threads, n_queries) + 1).astype(int)
    with ThreadPoolExecutor(n_threads) as pool:
        list(pool.map(run, chunks[:-1], chunks[1:]))
    return scores, docs, visited


def check_postings(postings: Postings, vocab_size: int, kind: str) -> None:
    """Refuse documents to write with term ids outside the vocabulary, or (impact) weights that are negative or
    not finite."""
    if len(postings.terms) and (int(postings.terms.max()) >= vocab_size or int(postings.terms.min()) < 0):
        bad = int(postings.terms.max()) if int(postings.terms.max()) >= vocab_size else int(postings.terms.min())
        raise SemiretError(f"term id {bad} is outside the vocabulary ({vocab_size})")
    if kind == "impact":
        values = np.asarray(postings.values, np.float32)
        if np.any(~np.isfinite(values)) or np.any(values < 0):
            raise SemiretError("impact weights must be finite and non-negative")


def _n_stored(snapshot: Snapshot) -> int:
    """Documents a snapshot's segments store, deleted included (BM25's N, as Lucene counts it)."""
    return sum(s.n_docs for s in snapshot.segments)


def pack_queries(queries: Sequence[SparseQuery], vocab_size: int, document_frequencies: np.ndarray = _NO_DF,
                 n_docs: int = 0, variant: int = 0, term_bounds: np.ndarray | None = None):
    """Queries as CSR arrays (offsets, term ids, weights) without zero-weight terms or terms outside the first
    ``vocab_size``; with ``document_frequencies`` (BM25) the weights are multiplied by the IDF over ``n_docs``
    documents of the BM25 ``variant`` (its :attr:`~semiret.text.bm25.BM25Parameters.variant_code`; 0: Lucene's).
    Negative or non-finite weights are an error. With ``term_bounds``, each query's score bound too
    (:func:`~semiret.indexes.kernels.query_score_bounds`, in the same kernel call): (offsets, terms, weights, bounds).

    Checked and filtered for the whole batch at once: per-query numpy calls would cost more than searching a
    small index.
    """
    n = len(queries)
    if n == 1:
        terms, weights = [np.asarray(queries[0].terms, np.int32)], [np.asarray(queries[0].weights, np.float32)]
        bad_shape = 0 if terms[0].shape != weights[0].shape else 1
        offsets, flat_t, flat_w = np.array([0, len(weights[0])], np.int64), terms[0], weights[0]
    else:
        terms = [np.asarray(q.terms, np.int32) for q in queries]
        weights = [np.asarray(q.weights, np.float32) for q in queries]
        bad_shape = next((i for i, (t, w) in enumerate(zip(terms, weights)) if t.shape != w.shape), n)
        offsets = np.zeros(n + 1, np.int64)
        if n:
            np.cumsum(np.fromiter(map(len, weights), np.int64, n), out=offsets[1:])
        flat_w = np.concatenate(weights) if n else np.empty(0, np.float32)
        flat_t = np.concatenate(terms) if n and bad_shape == n else flat_w.astype(np.int32)
    if term_bounds is None:
        bad, offsets, flat_t, flat_w = kernels.filter_queries(offsets, flat_t, flat_w, vocab_size,
                                                              document_frequencies, n_docs, variant)
    else:
        bad, offsets, flat_t, flat_w, bounds = kernels.filter_queries_with_bounds(
            offsets, flat_t, flat_w, vocab_size, document_frequencies, n_docs, variant, term_bounds)
    if bad_shape < n or bad >= 0:  # the first offending query, as a query-by-query check finds it
        bad = n if bad < 0 else bad
        if bad_shape <= bad:
            raise SemiretError(f"query {bad_shape}: {len(terms[bad_shape])} terms but {len(weights[bad_shape])} weights")
        raise SemiretError(f"query {bad}: term weights must be finite and non-negative")
    return (offsets, flat_t, flat_w) if term_bounds is None else (offsets, flat_t, flat_w, bounds)


def _vocab_size(meta: dict) -> int:
    """Terms of a commit: its words (growable vocabularies) or its tokenizer's vocabulary."""
    return meta["n_terms"] if meta["growable_vocab"] else meta["vocab_size"]


def _read_vocabulary(path: Path, meta: dict, start: int, start_byte: int) -> list[str]:
    """The words ``start`` to ``meta['n_terms']`` of ``vocab.txt`` (the first at byte ``start_byte``)."""
    with open(path / VOCAB_FILE, "rb") as handle:
        handle.seek(start_byte)
        return [line.decode("utf-8").rstrip("\n") for _, line in zip(range(meta["n_terms"] - start), handle)]


def _drop_zero_weights(postings: Postings, values: np.ndarray) -> tuple[Postings, np.ndarray]:
    keep = values != 0
    doc_of_posting = np.repeat(np.arange(len(postings)), np.diff(postings.offsets))
    kept_per_doc = np.bincount(doc_of_posting[keep], minlength=len(postings))
    offsets = np.zeros(len(postings.offsets), np.int64)
    np.cumsum(kept_per_doc, out=offsets[1:])
    trimmed = Postings(ids=postings.ids, offsets=offsets, terms=postings.terms[keep], values=postings.values[keep],
                       lengths=postings.lengths, documents=postings.documents)
    return trimmed, values[keep]
