"""Statistics of learned sparse indexes."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from semiret.indexes.inverted import InvertedIndex
from semiret.types import SparseQuery


def flops(index: InvertedIndex, queries: Sequence[SparseQuery]) -> float:
    """SPLADE's FLOPS: ``sum_j p_q(j) p_d(j)``, the expected number of posting multiply-adds per
    (query, document) pair, where ``p_q(j)`` is the fraction of queries with term ``j`` and ``p_d(j)``
    the fraction of documents with a non-zero weight for it (Formal et al.; the inference-free paper)."""
    if not queries:
        return 0.0
    query_counts = np.zeros(index.vocab_size, np.float64)
    for query in queries:
        terms = np.asarray(query.terms)[np.asarray(query.weights) > 0]
        query_counts[np.unique(terms[(terms >= 0) & (terms < index.vocab_size)])] += 1
    document_share = index.document_frequencies() / max(index.n_stored, 1)
    return float(query_counts @ document_share / len(queries))
