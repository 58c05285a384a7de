"""An inverted index whose segments also keep every document's dense score vector over a token vocabulary:
what NAIL re-ranks and searches exhaustively with (``bm25+nail``, ``nail-exh``).

Each segment holds the inverted index's postings (BM25 over words: the first stage) and ``scores.npy``, a
float16 [vocabulary, documents] matrix, term-major and memory-mapped: a query's tokens select contiguous
rows, so scoring every document (exhaustive search) reads ``|q|`` rows, and re-ranking the first stage's
candidates reads ``|q|`` values per candidate, found by segment and local number (no id lookups). Scores
and postings live in the same segments, so adds, deletes and merges keep them together, and a crash leaves
both as they were (:mod:`semiret.indexes.segments`).

A token query is a :class:`~semiret.types.SparseQuery` over the score vocabulary; its score for a document
is ``sum_t w_t * scores[t, d]``. A query with no tokens finds nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from semiret.compiled import kernel
from semiret.errors import IndexFormatError, SemiretError
from semiret.files import link_or_copy
from semiret.indexes.inverted import InvertedIndex, InvertedSegment, SecondStage
from semiret.indexes.kernels import accumulate_query, key_hit, select_best_keys
from semiret.indexes.segments import register_index_format
from semiret.indexes.storage import load_array
from semiret.types import Postings, SearchHits, SparseQuery

SCORES_FILE = "scores.npy"


@dataclass
class ScoredPostings(Postings):
    """Postings plus each document's score vector over the token vocabulary (float16 [n_docs, |V|])."""

    scores: np.ndarray | None = None

    @staticmethod
    def concatenate(batches: Sequence["ScoredPostings"]) -> "ScoredPostings":
        postings = Postings.concatenate(batches)
        scores = batches[0].scores if len(batches) == 1 else np.concatenate([b.scores for b in batches])
        return ScoredPostings(**vars(postings) | {"scores": scores})


class ScoredSegment(InvertedSegment):
    def __init__(self, path: Path, info: dict, binary: bool, vocab_size: int):
        super().__init__(path, info, binary)
        self.scores = load_array(path / SCORES_FILE)  # float16 [|V|, n_docs], memory-mapped
        if self.scores.shape != (vocab_size, info["n_docs"]):  # compiled lookups would read past its end
            raise IndexFormatError(f"{path / SCORES_FILE} holds scores of shape {self.scores.shape}, not the "
                                   f"{vocab_size} x {info['n_docs']} meta.json lists: a damaged index; restore it "
                                   "from a backup, or build it again")
        self._score_array = None

    def score_bits(self) -> np.ndarray:
        """The score matrix's float16 values as uint16 (for compiled code), made once."""
        bits = self._cache.get("score_bits")
        if bits is None:
            bits = self._cache["score_bits"] = self.score_array().view(np.uint16)
        return bits

    def score_array(self) -> np.ndarray:
        """``scores`` as a plain ndarray view of the same mapping (indexing it skips np.memmap's per-call
        overhead), made once."""
        if self._score_array is None:
            self._score_array = np.asarray(self.scores)
        return self._score_array


@register_index_format
class ScoreMatrixIndex(InvertedIndex):
    """Postings for a first stage plus a memory-mapped score matrix for re-ranking and exhaustive scoring."""

    FORMAT = "semiret.score-matrix"
    DESCRIPTION = "score-matrix index"
    batch_type = ScoredPostings
    unrecorded_buffer_mb = 0  # NAIL's matrix is written whole by default: bm25+nail re-ranks one segment in one call

    @classmethod
    def build(cls, path: str | Path, kind: str, batches: Iterable[ScoredPostings], vocab_size: int, analyzer: dict,
              score_vocab_size: int = 0, scorer: dict | None = None, extra_meta: dict | None = None,
              buffer_mb: float | None = None, **options) -> "ScoreMatrixIndex":
        """An inverted index of ``batches`` (``options``: :meth:`InvertedIndex.build`'s) whose documents also
        carry ``score_vocab_size`` scores each; ``scorer`` records what made them."""
        if score_vocab_size < 1:
            raise SemiretError("a score-matrix index needs the size of its score vocabulary")
        meta = {**(extra_meta or {}), "scores": {"vocab_size": score_vocab_size, "scorer": scorer or {}}}
        return super().build(path, kind, batches, vocab_size, analyzer, extra_meta=meta, buffer_mb=buffer_mb,
                             **options)

    @property
    def score_vocab_size(self) -> int:
        return self.meta["scores"]["vocab_size"]

    @property
    def scorer(self) -> dict:
        return self.meta["scores"]["scorer"]

    def _open_segment(self, path: Path, info: dict) -> ScoredSegment:
        return ScoredSegment(path, info, self.kind == "binary", self.score_vocab_size)

    def _validate(self, batch: ScoredPostings) -> None:
        super()._validate(batch)
        expected = (len(batch), self.score_vocab_size)
        if batch.scores is None or batch.scores.shape != expected:
            found = None if batch.scores is None else batch.scores.shape
            raise SemiretError(f"score vectors of shape {found} for {expected[0]} documents over a "
                               f"{expected[1]}-token vocabulary")
        if not np.isfinite(batch.scores).all():
            raise SemiretError("document scores must be finite")

    def _write_segment_files(self, directory: Path, batch: ScoredPostings, info: dict) -> None:
        super()._write_segment_files(directory, batch, info)
        np.save(directory / SCORES_FILE, np.ascontiguousarray(batch.scores.T, dtype=np.float16))

    def _rewrite_segment_files(self, directory: Path, segment: ScoredSegment, info: dict) -> None:
        super()._rewrite_segment_files(directory, segment, info)
        if not (directory / SCORES_FILE).exists():  # the postings' weights recomputed in place: the scores stay
            link_or_copy(segment.path / SCORES_FILE, directory / SCORES_FILE)

    def _live_batch(self, segment: ScoredSegment, live, ids, documents, cursors=None) -> ScoredPostings:
        postings = super()._live_batch(segment, live, ids, documents, cursors)
        return ScoredPostings(**vars(postings) | {"scores": np.asarray(segment.scores[:, live]).T})

    def describe(self) -> dict:
        return {**super().describe(), "score_vocabulary": self.score_vocab_size}

    # ------------------------------------------------------------------ scoring
    def _checked(self, query: SparseQuery) -> tuple[np.ndarray, np.ndarray]:
        terms = np.asarray(query.terms, np.int64)
        if len(terms) and not 0 <= int(terms.min()) <= int(terms.max()) < self.score_vocab_size:
            raise SemiretError(f"token id {int(terms.max())} is outside the score vocabulary ({self.score_vocab_size})")
        return terms, np.asarray(query.weights, np.float32)

    def score_all(self, queries: Sequence[SparseQuery], k: int = 10) -> SearchHits:
        """Exhaustive search: every live document scored by lookup and sum, the best ``k`` of each query."""
        if k < 1:
            raise SemiretError("k must be at least 1")
        checked = [self._checked(q) for q in queries]
        snapshot = self.snapshot  # one commit for the whole search
        seg_scores, seg_locals = [], []
        for segment in snapshot.segments:
            kk = min(k, segment.n_docs) or 1
            best = np.full((len(queries), kk), -np.inf, np.float32)
            locals_ = np.full((len(queries), kk), -1, np.int32)
            for row, (terms, weights) in enumerate(checked):
                if not len(terms) or not segment.n_docs:
                    continue
                totals = weights @ segment.score_array()[terms].astype(np.float32)
                totals[segment.deleted] = -np.inf
                top = _top_k(totals, kk)
                top = top[np.isfinite(totals[top])]
                best[row, : len(top)], locals_[row, : len(top)] = totals[top], top
            seg_scores.append(best)
            seg_locals.append(locals_)
        return self._top_hits(snapshot.segments, seg_scores, seg_locals, k, len(queries))

    def rerank(self, first_stage: Sequence[SparseQuery], queries: Sequence[SparseQuery], depth: int,
               k: int = 10, n_threads: int = 1, first_stage_weight: float = 0.0) -> SearchHits:
        """The best ``depth`` documents of each ``first_stage`` query (the postings' scoring), ordered by their
        score for the matching token query (plus ``first_stage_weight`` times their first-stage score); the best
        ``k`` of them. A token query with no tokens finds nothing.

        One compiled call does both stages of a one-segment index (:func:`rerank_postings`): the first stage's
        best ``depth`` are selected in no particular order (no sort of the 100, no list handed back to Python)
        and addressed by local number; no id is decoded but the ``k`` returned. An index of several segments
        (documents added since its build) takes the best ``depth`` over all of them first, as a fresh build
        would (:meth:`_rerank_across_segments`). Equal scores keep the first stage's order within a segment, the
        earlier segment first across segments."""
        if k < 1 or depth < 1:
            raise SemiretError("k and the re-ranking depth must be at least 1")
        if len(first_stage) != len(queries):
            raise SemiretError(f"{len(first_stage)} first-stage queries for {len(queries)} token queries")
        t_offsets, t_terms, t_weights = self._packed(queries)
        weight = np.float32(first_stage_weight)
        snapshot = self.snapshot  # the first stage and the scores read the same commit
        if len(snapshot.segments) > 1:
            return self._rerank_across_segments(snapshot, first_stage, (t_offsets, t_terms, t_weights), depth, k,
                                                n_threads, weight)
        stage = SecondStage(rerank_postings, depth, k,
                            lambda segment, lo, hi: (t_offsets[lo: hi + 1], t_terms, t_weights, segment.score_bits(),
                                                     FLOAT16_TABLE, weight))
        seg_scores, seg_locals, _ = self.search_segments(snapshot, first_stage, k, n_threads, second_stage=stage)
        return self._top_hits(snapshot.segments, seg_scores, seg_locals, k, len(queries))

    def _rerank_across_segments(self, snapshot, first_stage, packed, depth: int, k: int, n_threads: int,
                                weight: np.float32) -> SearchHits:
        """:meth:`rerank` over several segments: each segment's best ``depth`` by the first stage, the best
        ``depth`` of those over every segment (re-ranking each segment's own ``depth`` re-ranked up to
        segments x depth documents, and results changed with merges), then each segment's share of them scored
        by :func:`rank_candidates`."""
        t_offsets, t_terms, t_weights = packed
        segments = snapshot.segments
        stage_scores, stage_locals, _ = self.search_segments(snapshot, first_stage, depth, n_threads)
        widths = [min(k, segment.n_docs) or 1 for segment in segments]
        out_scores = [np.full((len(first_stage), width), -np.inf, np.float32) for width in widths]
        out_docs = [np.full((len(first_stage), width), -1, np.int32) for width in widths]
        totals = np.empty(depth, np.float32)
        for q in range(len(first_stage)):
            found = [(scores[q][locals_[q] >= 0], locals_[q][locals_[q] >= 0])
                     for scores, locals_ in zip(stage_scores, stage_locals)]
            segment_of = np.concatenate([np.full(len(f[0]), s, np.int64) for s, f in enumerate(found)])
            place = np.concatenate([np.arange(len(f[0])) for f in found])
            score = np.concatenate([f[0] for f in found])
            best = np.lexsort((place, segment_of, -score))[:depth]  # ties: the earlier segment, then its order
            terms, weights = t_terms[t_offsets[q]: t_offsets[q + 1]], t_weights[t_offsets[q]: t_offsets[q + 1]]
            for s, segment in enumerate(segments):
                mine = np.sort(place[best[segment_of[best] == s]])
                if len(mine):
                    rank_candidates(terms, weights, segment.score_bits(), FLOAT16_TABLE,
                                    found[s][1][mine].astype(np.int32), found[s][0][mine].astype(np.float32),
                                    len(mine), weight, totals, out_scores[s][q], out_docs[s][q])
        return self._top_hits(segments, out_scores, out_docs, k, len(first_stage))

    def _packed(self, queries: Sequence[SparseQuery]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Token queries (checked) as CSR offsets, terms and weights."""
        checked = [self._checked(q) for q in queries]
        if len(checked) == 1:  # the single-query path, without concatenation
            terms, weights = checked[0]
            return np.array([0, len(terms)], np.int64), terms, weights
        offsets = np.zeros(len(checked) + 1, np.int64)
        np.cumsum([len(terms) for terms, _ in checked], out=offsets[1:])
        if not checked:
            return offsets, np.empty(0, np.int64), np.empty(0, np.float32)
        return offsets, np.concatenate([t for t, _ in checked]), np.concatenate([w for _, w in checked])


FLOAT16_TABLE = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)
"""Every float16 bit pattern's float32 value: compiled code reads the matrix as uint16 and converts by lookup
(numba has no float16 arithmetic; converting the bits arithmetically measured slower than this table)."""


@kernel
def rank_candidates(t_terms, t_weights, bits, table, cand_docs, cand_stage, size, stage_weight, totals, out_scores,
                    out_docs):
    """``size`` candidates (any order) scored by ``sum_t w_t * matrix[t, d]`` over the token query (``bits``: the
    float16 [|V|, n_docs] matrix as uint16, converted by ``table``), plus ``stage_weight`` x their first-stage
    score ``cand_stage``; the best ``len(out_scores)`` written best first, ``-inf``/``-1`` padded. Ties go to the
    higher first-stage score, then the earlier document: the first stage's order. No terms: nothing found."""
    k = out_scores.shape[0]
    for r in range(k):
        out_scores[r] = -np.inf
        out_docs[r] = -1
    if size == 0 or t_terms.shape[0] == 0:
        return
    for j in range(size):
        totals[j] = stage_weight * cand_stage[j] if stage_weight != 0 else np.float32(0.0)
    for i in range(t_terms.shape[0]):  # term by term: one matrix row at a time
        row = bits[t_terms[i]]
        weight = t_weights[i]
        for j in range(size):
            totals[j] += weight * table[row[cand_docs[j]]]
    kept = 0
    best_stage = np.empty(k, np.float32)
    for j in range(size):  # insertion into the sorted best k
        s, st, d = totals[j], cand_stage[j], cand_docs[j]
        pos = kept
        while pos > 0 and (s > out_scores[pos - 1] or (s == out_scores[pos - 1] and (
                st > best_stage[pos - 1] or (st == best_stage[pos - 1] and d < out_docs[pos - 1])))):
            pos -= 1
        if pos >= k:
            continue
        last = min(kept, k - 1)
        for r in range(last, pos, -1):
            out_scores[r], best_stage[r], out_docs[r] = out_scores[r - 1], best_stage[r - 1], out_docs[r - 1]
        out_scores[pos], best_stage[pos], out_docs[pos] = s, st, d
        kept = min(kept + 1, k)


@kernel
def rerank_postings(q_offsets, q_terms, q_weights, present_terms, indptr, docs, values, maxima, binary, deleted,
                    n_docs, depth, t_offsets, t_terms, t_weights, bits, table, stage_weight, buffer, touched,
                    out_scores, out_docs, visited):
    """Both stages of a re-ranking search over one segment, per query: the postings' best ``depth`` live
    documents (:func:`~semiret.indexes.kernels.accumulate_query`, selected unordered by
    :func:`~semiret.indexes.kernels.select_best_keys`), then :func:`rank_candidates` with the matching token
    query (``t_offsets``/``t_terms``/``t_weights``, CSR). Arguments and outputs as
    :func:`~semiret.indexes.kernels.search_postings`' (``visited``: the first stage's work)."""
    has_deleted = deleted.shape[0] > 0
    heap_scores = np.empty(depth, np.float32)
    heap_docs = np.empty(depth, np.int32)
    keys = np.empty(4 * depth, np.uint64)
    cand_docs = np.empty(depth, np.int32)
    cand_stage = np.empty(depth, np.float32)
    totals = np.empty(depth, np.float32)
    for q in range(q_offsets.shape[0] - 1):
        lo, hi = q_offsets[q], q_offsets[q + 1]
        n, in_order, visited[q] = accumulate_query(q_terms[lo:hi], q_weights[lo:hi], present_terms, indptr, docs,
                                                   values, maxima, binary, deleted, n_docs, buffer, touched,
                                                   heap_scores, heap_docs)
        size = select_best_keys(buffer, touched, n, in_order, deleted, has_deleted, keys, depth)
        for j in range(size):
            cand_stage[j], cand_docs[j] = key_hit(keys[j])
        rank_candidates(t_terms[t_offsets[q]: t_offsets[q + 1]], t_weights[t_offsets[q]: t_offsets[q + 1]], bits,
                        table, cand_docs, cand_stage, size, stage_weight, totals, out_scores[q], out_docs[q])


def _top_k(values: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` largest values, best first (ties: lower position first)."""
    if k < len(values):
        kth = -np.partition(-values, k - 1)[k - 1]
        above = np.flatnonzero(values > kth)  # every value above the k-th, then the first of those equal to it
        part = np.concatenate([above, np.flatnonzero(values == kth)[: k - len(above)]])
        return part[np.lexsort((part, -values[part]))]
    return np.lexsort((np.arange(len(values)), -values))
