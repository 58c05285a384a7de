"""The clustered dense index (kind ``gdr``): a dense index whose documents also carry the leaf cluster they belong
to, searched inside given clusters only (GDR's intra-cluster matching).

Each segment adds ``leaves.npy`` (int32, a leaf number per document) to the dense segment's files. ``meta.json``
records how many leaves there are and a fingerprint of their cluster ids (the prefix tree a model decodes), so a
model trained on other clusters is refused. A search takes, per query, the decoded leaves and their ``S_inter``
and scores every live document of those leaves by ``S_inter + beta * sigmoid(<r_q, r_d>)``: added documents
are in their leaf from their commit on, deleted ones leave it at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

from semiret.clustering.equal_depth import members_of
from semiret.errors import IndexFormatError, SemiretError
from semiret.indexes.dense import DenseIndex, DenseSegment
from semiret.indexes.segments import register_index_format
from semiret.indexes.storage import load_array
from semiret.types import Embeddings, SearchHits

LEAVES_FILE = "leaves.npy"


@dataclass
class ClusteredEmbeddings(Embeddings):
    """Embeddings with each document's leaf number."""

    leaves: np.ndarray | None = None

    @staticmethod
    def concatenate(batches: Sequence["ClusteredEmbeddings"]) -> "ClusteredEmbeddings":
        joined = Embeddings.concatenate(batches)
        return ClusteredEmbeddings(joined.ids, joined.vectors, joined.documents,
                                   np.concatenate([b.leaves for b in batches]))


class ClusteredSegment(DenseSegment):
    """A dense segment and its documents grouped by leaf (``offsets``/``members``, as a tree's groups)."""

    def __init__(self, path: Path, info: dict, leaf_count: int, dim: int):
        super().__init__(path, info, "exact", dim)
        self.leaves = load_array(path / LEAVES_FILE)
        if self.leaves.shape != (info["n_docs"],) or (len(self.leaves) and not 0 <= self.leaves.min() <= self.leaves.max() < leaf_count):
            raise IndexFormatError(f"{path / LEAVES_FILE} does not give each of the {info['n_docs']} documents one of "
                                   f"the {leaf_count} leaves: a damaged index; restore it from a backup, or build it "
                                   "again")
        self.members = np.argsort(self.leaves, kind="stable")
        self.offsets = np.searchsorted(self.leaves[self.members], np.arange(leaf_count + 1))
        self._held: tuple[np.ndarray, np.ndarray] | None = None  # (the deletion array, held_leaves of it)

    def held_leaves(self) -> np.ndarray:
        """A flag per leaf: whether one of its documents here is live (worked out once per deletion array, as
        :meth:`any_deleted`; a filtered search's array is its own)."""
        known, deleted = self._held, self.deleted
        if known is None or known[0] is not deleted:
            held = np.bincount(self.leaves[~deleted], minlength=len(self.offsets) - 1) > 0
            known = self._held = (deleted, held)
        return known[1]

    def score_clusters(self, query: np.ndarray, leaves: np.ndarray, inter: np.ndarray, k: int,
                       beta: float) -> tuple[np.ndarray, np.ndarray, int]:
        """(top-``k`` scores, local numbers, documents scored) among the live members of ``leaves``."""
        candidates = members_of(self.offsets, self.members, leaves)
        candidates = candidates[~self.deleted[candidates]]
        s_inter = np.zeros(len(self.offsets) - 1, np.float32)
        s_inter[leaves] = inter
        scores = s_inter[self.leaves[candidates]] + beta / (1 + np.exp(-(np.asarray(self.vectors[candidates]) @ query)))
        top = np.argsort(-scores, kind="stable")[:k]
        return scores[top].astype(np.float32), candidates[top], len(candidates)


@register_index_format
class ClusteredDenseIndex(DenseIndex):
    """An open clustered dense index directory."""

    FORMAT = "semiret.clustered-dense"
    DESCRIPTION = "clustered dense index"
    batch_type = ClusteredEmbeddings

    @classmethod
    def build(cls, path: str | Path, kind: str, batches: Iterable[ClusteredEmbeddings], dim: int, analyzer: dict,
              leaf_count: int, fingerprint: str, store_texts: bool = True, overwrite: bool = False,
              extra_meta: dict | None = None, buffer_mb: float | None = None) -> "ClusteredDenseIndex":
        """Write a new index of ``batches`` whose leaf numbers are below ``leaf_count``; ``fingerprint`` names
        the cluster ids they number."""
        if kind != "gdr":
            raise SemiretError(f"a clustered dense index has kind 'gdr', not {kind!r}")
        if leaf_count < 1:
            raise SemiretError("a clustered dense index needs at least one leaf cluster")
        fields = {"kind": "gdr", "ann": "exact", "dim": dim, "metric": "ip", "parameters": {}, "analyzer": analyzer,
                  "clusters": {"leaves": leaf_count, "fingerprint": fingerprint}}
        return cls._build(path, fields, batches, store_texts, overwrite, extra_meta, buffer_mb)

    @property
    def leaf_count(self) -> int:
        return self.meta["clusters"]["leaves"]

    @property
    def fingerprint(self) -> str:
        return self.meta["clusters"]["fingerprint"]

    def held_leaves(self) -> np.ndarray:
        """A flag per leaf: whether it holds a live document (of those a filtered view lets through)."""
        held = np.zeros(self.leaf_count, bool)
        for segment in self.segments:
            held |= segment.held_leaves()
        return held

    def _open_segment(self, path: Path, info: dict) -> ClusteredSegment:
        return ClusteredSegment(path, info, self.leaf_count, self.meta["dim"])

    def _validate(self, embeddings: ClusteredEmbeddings) -> None:
        super()._validate(embeddings)
        leaves = getattr(embeddings, "leaves", None)
        if leaves is None or len(leaves) != len(embeddings):
            raise SemiretError(f"{self.path} holds clustered documents: each document needs its leaf cluster")
        if len(leaves) and not (0 <= leaves.min() and leaves.max() < self.leaf_count):
            raise SemiretError(f"leaf numbers must be in 0..{self.leaf_count - 1}")

    def _write_segment_files(self, directory: Path, embeddings: ClusteredEmbeddings, info: dict) -> None:
        super()._write_segment_files(directory, embeddings, info)
        np.save(directory / LEAVES_FILE, np.asarray(embeddings.leaves, np.int32))

    def _live_batch(self, segment: ClusteredSegment, live: np.ndarray, ids: list[str], documents) -> ClusteredEmbeddings:
        return ClusteredEmbeddings(ids, np.asarray(segment.vectors)[live], documents, np.asarray(segment.leaves)[live])

    def _check_leaves(self, row: int, leaves, inter) -> None:
        """A query's leaves are distinct leaves of the index, each with its ``S_inter`` (a leaf twice scored its
        documents twice, a shorter ``inter`` was spread over them)."""
        leaves = np.asarray(leaves)
        if (leaves.ndim != 1 or np.shape(inter) != leaves.shape or len(np.unique(leaves)) != len(leaves)
                or (len(leaves) and not 0 <= leaves.min() <= leaves.max() < self.leaf_count)):
            raise SemiretError(f"query {row}: its leaves must be distinct numbers below {self.leaf_count}, each with "
                               f"one S_inter score (got leaves {leaves.tolist()} and {np.size(inter)} scores)")

    def search_clusters(self, queries: np.ndarray, leaves: Sequence[np.ndarray], inter: Sequence[np.ndarray],
                        k: int = 10, beta: float = 1.0, wider: Callable | None = None) -> tuple[SearchHits, list[int]]:
        """Per query, the top ``k`` live documents of its ``leaves`` by ``inter + beta * sigmoid(<q, d>)`` (its
        leaves' ``S_inter``), and how many documents each query scored.

        ``wider(rows)``: for the queries (row numbers) left with fewer than ``k`` live hits while the index holds
        more live documents (few or small leaves decoded, documents deleted or hidden by a filter), their leaves
        and ``S_inter`` decoded wider (GDR: 4x the beams), or None where no wider decoding is left. The leaves not
        scored yet are scored (an ``S_inter`` is its path's probability, whatever the beams: the scores already
        found stand), each such query keeps the best ``k`` of all it scored, and the count of documents scored
        grows by theirs; repeated until every query has ``k`` live hits (or all there are) or ``wider`` gives None.
        """
        if k < 1:
            raise SemiretError("k must be at least 1")
        queries = np.ascontiguousarray(queries, np.float32)
        if queries.ndim != 2 or queries.shape[1] != self.dim or not len(leaves) == len(inter) == len(queries):
            raise SemiretError(f"expected [n, {self.dim}] queries with their leaves and scores, got {queries.shape}")
        for row, (row_leaves, row_inter) in enumerate(zip(leaves, inter)):
            self._check_leaves(row, row_leaves, row_inter)
        segments = self.segments  # one snapshot for the whole search, the wider rounds included
        seg_scores, seg_locals, scored = _score_clusters(segments, queries, leaves, inter, k, beta)
        if wider is not None:
            wanted = min(k, sum(s.n_docs - s.n_deleted for s in segments))
            searched = [np.asarray(row_leaves, np.int64) for row_leaves in leaves]
            short = _short(seg_locals, np.arange(len(queries)), wanted)
            while len(short):
                widened = wider(short)
                if widened is None:
                    break
                fresh_leaves, fresh_inter = [], []
                for row, row_leaves, row_inter in zip(short, *widened):
                    self._check_leaves(row, row_leaves, row_inter)
                    row_leaves = np.asarray(row_leaves, np.int64)
                    fresh = ~np.isin(row_leaves, searched[row])
                    fresh_leaves.append(row_leaves[fresh])
                    fresh_inter.append(np.asarray(row_inter, np.float32)[fresh])
                    searched[row] = np.concatenate([searched[row], row_leaves[fresh]])
                more_scores, more_locals, more_scored = _score_clusters(segments, queries[short], fresh_leaves,
                                                                        fresh_inter, k, beta)
                for scores, local, extra_scores, extra_local in zip(seg_scores, seg_locals, more_scores, more_locals):
                    # the fresh leaves' documents are new to each query (a document is in one leaf): best k of both
                    both_scores = np.concatenate([scores[short], extra_scores], axis=1)
                    both_local = np.concatenate([local[short], extra_local], axis=1)
                    order = np.argsort(-both_scores, axis=1, kind="stable")[:, :k]
                    scores[short] = np.take_along_axis(both_scores, order, 1)
                    local[short] = np.take_along_axis(both_local, order, 1)
                for row, count in zip(short, more_scored):
                    scored[row] += count
                short = _short(seg_locals, short, wanted)
        return self._top_hits(segments, seg_scores, seg_locals, k, len(queries)), scored


def _score_clusters(segments: list[ClusteredSegment], queries: np.ndarray, leaves: Sequence[np.ndarray],
                    inter: Sequence[np.ndarray], k: int, beta: float
                    ) -> tuple[list[np.ndarray], list[np.ndarray], list[int]]:
    """Per segment, [queries, k] scores (best first, -inf past the last) and local numbers (-1 there) of each
    query's live documents in its ``leaves``; and how many documents each query scored."""
    scored = [0] * len(queries)
    seg_scores, seg_locals = [], []
    for segment in segments:
        scores = np.full((len(queries), k), -np.inf, np.float32)
        local = np.full((len(queries), k), -1, np.int64)
        for row, query in enumerate(queries):
            found, numbers, count = segment.score_clusters(query, np.asarray(leaves[row], np.int64),
                                                           np.asarray(inter[row], np.float32), k, beta)
            scores[row, : len(found)], local[row, : len(found)] = found, numbers
            scored[row] += count
        seg_scores.append(scores)
        seg_locals.append(local)
    return seg_scores, seg_locals, scored


def _short(seg_locals: list[np.ndarray], rows: np.ndarray, wanted: int) -> np.ndarray:
    """The ``rows`` whose hits over all segments number fewer than ``wanted``."""
    found = sum(((local[rows] >= 0).sum(axis=1) for local in seg_locals), np.zeros(len(rows), np.int64))
    return rows[found < wanted]
