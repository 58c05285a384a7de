"""Two-phase search for weighted token queries: retrieve with the heaviest query tokens, then rescore.

Phase one runs the ordinary exact search with only the tokens whose weight is at least
``prune_ratio`` x the query's largest weight (the high-IDF tokens, whose posting lists are short);
it keeps a window of ``expansion`` x k candidates. Phase two adds the remaining tokens' contributions
to those candidates only, by binary search in the (document-sorted) posting lists, so the long lists
of common tokens are never scanned. This is the heuristic the inference-free paper runs in OpenSearch.
"""

from __future__ import annotations

import numba
import numpy as np

from semiret.indexes.kernels import NUMBA_OPTIONS


def split_by_weight(offsets: np.ndarray, terms: np.ndarray, weights: np.ndarray, prune_ratio: float):
    """Split packed queries into (high, low) packed queries by ``weight >= prune_ratio * max weight``."""
    n = len(offsets) - 1
    query_of = np.repeat(np.arange(n), np.diff(offsets))
    max_weight = np.zeros(n, np.float32)
    np.maximum.at(max_weight, query_of, weights)
    high = weights >= prune_ratio * max_weight[query_of]
    return _subset(offsets, terms, weights, query_of, high), _subset(offsets, terms, weights, query_of, ~high)


def _subset(offsets, terms, weights, query_of, keep):
    counts = np.bincount(query_of[keep], minlength=len(offsets) - 1)
    new_offsets = np.zeros(len(offsets), np.int64)
    np.cumsum(counts, out=new_offsets[1:])
    return new_offsets, terms[keep], weights[keep]


@numba.njit(**NUMBA_OPTIONS)
def rescore_candidates(q_offsets, q_terms, q_weights, present_terms, indptr, docs, values, binary,
                       candidates, scores):
    """Add ``sum_t w_t * value(t, d)`` of each query's extra tokens to its candidates' scores.

    ``candidates[q, j]`` are segment-local document numbers (``-1`` = none); ``scores`` is updated in place.
    """
    for q in range(q_offsets.shape[0] - 1):
        for j in range(q_offsets[q], q_offsets[q + 1]):
            term = q_terms[j]
            row = np.searchsorted(present_terms, term)
            if row >= present_terms.shape[0] or present_terms[row] != term:
                continue
            start, end = indptr[row], indptr[row + 1]
            postings = docs[start:end]
            for c in range(candidates.shape[1]):
                d = candidates[q, c]
                if d < 0:
                    continue
                pos = np.searchsorted(postings, d)
                if pos < postings.shape[0] and postings[pos] == d:
                    scores[q, c] += q_weights[j] if binary else q_weights[j] * values[start + pos]
