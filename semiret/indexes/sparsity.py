"""Sparsity and FLOPS of any sparse (inverted) index, as the inference-free paper reports them.

- ``avg_nnz_per_doc``: the expansion rate, non-zero terms per (stored) document;
- ``flops``: SPLADE's FLOPS, ``sum_j p_q(j) p_d(j)``, the expected number of posting multiply-adds per
  (query, document) pair, where ``p_q(j)`` is the fraction of queries with term ``j`` and ``p_d(j)`` the
  fraction of documents with a non-zero weight for it (Formal et al.; the paper's Fig. 3-4);
- ``avg_query_terms``: distinct non-zero terms per query;
- ``postings_per_query``: posting entries an exhaustive search of one query scans (mean).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from semiret.indexes.inverted import InvertedIndex
from semiret.types import SparseQuery


def query_term_counts(queries: Sequence[SparseQuery], vocab_size: int) -> tuple[np.ndarray, float]:
    """(queries containing each term [V], mean distinct terms per query)."""
    counts = np.zeros(vocab_size, np.float64)
    lengths = []
    for query in queries:
        terms = np.asarray(query.terms)[np.asarray(query.weights) > 0]
        terms = np.unique(terms[(terms >= 0) & (terms < vocab_size)])
        counts[terms] += 1
        lengths.append(len(terms))
    return counts, float(np.mean(lengths)) if lengths else 0.0


def sparsity_report(index: InvertedIndex, queries: Sequence[SparseQuery] | None = None) -> dict:
    """Figures for ``index`` (and, with ``queries``, FLOPS and query lengths)."""
    df = index.document_frequencies().astype(np.float64)
    n_docs = max(index.n_stored, 1)
    report = {"documents": index.n_stored, "avg_nnz_per_doc": round(float(df.sum() / n_docs), 2),
              "active_terms": int((df > 0).sum())}
    if queries:
        counts, avg_terms = query_term_counts(queries, len(df))
        report["flops"] = round(float(counts @ (df / n_docs) / len(queries)), 4)
        report["avg_query_terms"] = round(avg_terms, 2)
        report["postings_per_query"] = round(float(counts @ df / len(queries)), 1)
    return report
