"""Sparse vectors as sparse encoders return them, and their way into the inverted index.

:class:`SparseVectors` holds a batch in CSR form (per-row token ids, ascending, and weights).
Pruning keeps each row's ``top_k`` heaviest entries and/or those at or above ``threshold``;
:meth:`SparseVectors.to_postings` and :meth:`SparseVectors.to_queries` hand rows to an ``impact``
index (which can quantize weights to 8 bits) and to its search.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from semiret.errors import SemiretError


@dataclass
class SparseVectors:
    """Rows ``terms[offsets[i]:offsets[i+1]]`` with their ``weights``, over a vocabulary of ``dim`` ids."""

    offsets: np.ndarray  # int64 [n + 1]
    terms: np.ndarray  # int32 [nnz]
    weights: np.ndarray  # float32 [nnz]
    dim: int

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def row(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = self.offsets[i], self.offsets[i + 1]
        return self.terms[lo:hi], self.weights[lo:hi]

    def nnz(self) -> np.ndarray:
        """Non-zero entries per row."""
        return np.diff(self.offsets)

    @classmethod
    def from_rows(cls, rows: Sequence[tuple[np.ndarray, np.ndarray]], dim: int) -> "SparseVectors":
        """Rows of (term ids, weights); terms are sorted within each row."""
        offsets = np.zeros(len(rows) + 1, np.int64)
        np.cumsum([len(t) for t, _ in rows], out=offsets[1:])
        if not rows or offsets[-1] == 0:
            return cls(offsets, np.empty(0, np.int32), np.empty(0, np.float32), dim)
        terms = np.concatenate([np.asarray(t, np.int32) for t, _ in rows])
        weights = np.concatenate([np.asarray(w, np.float32) for _, w in rows])
        row_of = np.repeat(np.arange(len(rows)), np.diff(offsets))
        order = np.lexsort((terms, row_of))
        return cls(offsets, terms[order], weights[order], dim)

    @classmethod
    def from_dense(cls, matrix: np.ndarray) -> "SparseVectors":
        """The non-zero entries of a [n, dim] matrix."""
        matrix = np.asarray(matrix, np.float32)
        rows, terms = np.nonzero(matrix)
        offsets = np.zeros(len(matrix) + 1, np.int64)
        np.cumsum(np.bincount(rows, minlength=len(matrix)), out=offsets[1:])
        return cls(offsets, terms.astype(np.int32), matrix[rows, terms], matrix.shape[1])

    @classmethod
    def from_csr(cls, matrix) -> "SparseVectors":
        """The rows of a scipy sparse matrix (for arithmetic on whole batches, e.g. adding two weightings)."""
        matrix = matrix.tocsr()
        matrix.sort_indices()
        return cls(matrix.indptr.astype(np.int64), matrix.indices.astype(np.int32), matrix.data.astype(np.float32),
                   matrix.shape[1])

    def to_csr(self):
        """A scipy CSR matrix [n, dim] sharing nothing with the vectors."""
        import scipy.sparse as sp

        return sp.csr_matrix((self.weights.copy(), self.terms.copy(), self.offsets.copy()), shape=(len(self), self.dim))

    def to_dense(self) -> np.ndarray:
        out = np.zeros((len(self), self.dim), np.float32)
        out[np.repeat(np.arange(len(self)), self.nnz()), self.terms] = self.weights
        return out

    def prune(self, top_k: int | None = None, threshold: float | None = None) -> "SparseVectors":
        """Keep entries with ``weight >= threshold`` and, of those, each row's ``top_k`` heaviest."""
        if top_k is not None and top_k < 1:
            raise SemiretError(f"top_k must be at least 1, got {top_k}")
        if threshold is not None and threshold < 0:
            raise SemiretError(f"threshold must be non-negative, got {threshold}")
        row_of = np.repeat(np.arange(len(self)), self.nnz())
        keep = self.weights > 0
        if threshold is not None:
            keep &= self.weights >= threshold
        if top_k is not None:
            by_weight = np.lexsort((-self.weights, row_of))  # rows in order, heaviest first
            rank = np.empty(len(by_weight), np.int64)
            rank[by_weight] = np.arange(len(by_weight)) - self.offsets[row_of[by_weight]]
            keep &= rank < top_k
        offsets = np.zeros_like(self.offsets)
        np.cumsum(np.bincount(row_of[keep], minlength=len(self)), out=offsets[1:])
        return SparseVectors(offsets, self.terms[keep], self.weights[keep], self.dim)

    def to_queries(self) -> list:
        from semiret.types import SparseQuery

        return [SparseQuery(*self.row(i)) for i in range(len(self))]

    def to_postings(self, ids: list[str], documents=None):
        """Rows as documents for an ``impact`` index; a document's length is its number of entries."""
        from semiret.types import Postings

        if len(ids) != len(self):
            raise SemiretError(f"{len(ids)} ids for {len(self)} vectors")
        return Postings(ids=list(ids), offsets=self.offsets, terms=self.terms, values=self.weights,
                        lengths=self.nnz().astype(np.int32), documents=documents)
