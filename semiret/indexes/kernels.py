"""Numba kernels for building and searching term-major postings.

These loops (per-document term counting, CSR transposition, score accumulation with top-k) are
hand-written because numpy/scipy would need a sort or a dense [queries x documents] matrix for
each of them; compiled loops are linear and keep one reusable score buffer.
"""

from __future__ import annotations

import numba
import numpy as np

NUMBA_OPTIONS = {"nogil": True, "cache": True}


@numba.njit(**NUMBA_OPTIONS)
def count_terms(flat_ids, offsets, excluded, vocab_size):
    """Per-document unique term ids and their counts, as doc-major CSR (first-occurrence order).

    ``excluded`` is a boolean mask over ids to drop (may be empty: nothing excluded).
    """
    n_docs = offsets.shape[0] - 1
    has_excluded = excluded.shape[0] > 0
    last_doc = np.full(vocab_size, -1, np.int64)
    slot = np.zeros(vocab_size, np.int64)
    out_terms = np.empty(flat_ids.shape[0], np.int32)
    out_counts = np.zeros(flat_ids.shape[0], np.int32)
    out_offsets = np.zeros(n_docs + 1, np.int64)
    lengths = np.zeros(n_docs, np.int32)
    n = 0
    for doc in range(n_docs):
        for j in range(offsets[doc], offsets[doc + 1]):
            term = flat_ids[j]
            if has_excluded and excluded[term]:
                continue
            lengths[doc] += 1
            if last_doc[term] != doc:
                last_doc[term] = doc
                slot[term] = n
                out_terms[n] = term
                out_counts[n] = 1
                n += 1
            else:
                out_counts[slot[term]] += 1
        out_offsets[doc + 1] = n
    return out_terms[:n].copy(), out_counts[:n].copy(), out_offsets, lengths


@numba.njit(**NUMBA_OPTIONS)
def transpose_to_term_major(doc_offsets, terms, values, vocab_size):
    """Counting-sort doc-major CSR into term-major postings; documents stay ascending in each list.

    Returns ``(present_terms, indptr, docs, values)`` holding only the terms that occur.
    """
    counts = np.zeros(vocab_size + 1, np.int64)
    for t in terms:
        counts[t + 1] += 1
    starts = np.cumsum(counts)
    fill = starts[:-1].copy()
    n_docs = doc_offsets.shape[0] - 1
    docs_out = np.empty(terms.shape[0], np.int32)
    values_out = np.empty(terms.shape[0], values.dtype)
    for doc in range(n_docs):
        for j in range(doc_offsets[doc], doc_offsets[doc + 1]):
            t = terms[j]
            docs_out[fill[t]] = doc
            values_out[fill[t]] = values[j]
            fill[t] += 1
    n_present = 0
    for t in range(vocab_size):
        if counts[t + 1] > 0:
            n_present += 1
    present = np.empty(n_present, np.int32)
    indptr = np.zeros(n_present + 1, np.int64)
    i = 0
    for t in range(vocab_size):
        if counts[t + 1] > 0:
            present[i] = t
            indptr[i + 1] = starts[t + 1]
            i += 1
    return present, indptr, docs_out, values_out


@numba.njit(**NUMBA_OPTIONS)
def _sift_down(scores, docs, pos, size):
    """Restore the min-heap property below ``pos``."""
    while True:
        left = 2 * pos + 1
        if left >= size:
            return
        smallest = left
        right = left + 1
        if right < size and scores[right] < scores[left]:
            smallest = right
        if scores[smallest] >= scores[pos]:
            return
        scores[pos], scores[smallest] = scores[smallest], scores[pos]
        docs[pos], docs[smallest] = docs[smallest], docs[pos]
        pos = smallest


@numba.njit(**NUMBA_OPTIONS)
def search_postings(q_offsets, q_terms, q_weights, present_terms, indptr, docs, values, binary,
                    deleted, n_docs, k, out_scores, out_docs):
    """Exact top-k of ``sum_t w_t * value(t, d)`` for each query over one segment.

    ``binary`` segments have implicit values of 1. ``deleted`` marks dead documents (may be empty).
    Results are written, best first, into ``out_scores``/``out_docs`` (``-1`` pads missing hits).
    """
    buffer = np.zeros(n_docs, np.float32)
    touched = np.empty(n_docs, np.int32)
    has_deleted = deleted.shape[0] > 0
    heap_scores = np.empty(k, np.float32)
    heap_docs = np.empty(k, np.int32)
    for q in range(q_offsets.shape[0] - 1):
        n_touched = 0
        for j in range(q_offsets[q], q_offsets[q + 1]):
            term = q_terms[j]
            weight = q_weights[j]
            row = np.searchsorted(present_terms, term)
            if row >= present_terms.shape[0] or present_terms[row] != term:
                continue
            for p in range(indptr[row], indptr[row + 1]):
                d = docs[p]
                if buffer[d] == 0.0:
                    touched[n_touched] = d
                    n_touched += 1
                if binary:
                    buffer[d] += weight
                else:
                    buffer[d] += weight * values[p]
        size = 0
        for i in range(n_touched):
            d = touched[i]
            s = buffer[d]
            buffer[d] = 0.0
            if has_deleted and deleted[d]:
                continue
            if size < k:
                heap_scores[size] = s
                heap_docs[size] = d
                size += 1
                if size == k:
                    for pos in range(k // 2 - 1, -1, -1):
                        _sift_down(heap_scores, heap_docs, pos, k)
            elif s > heap_scores[0]:
                heap_scores[0] = s
                heap_docs[0] = d
                _sift_down(heap_scores, heap_docs, 0, k)
        order = np.argsort(-heap_scores[:size], kind="mergesort")
        for r in range(k):
            if r < size:
                out_scores[q, r] = heap_scores[order[r]]
                out_docs[q, r] = heap_docs[order[r]]
            else:
                out_scores[q, r] = -np.inf
                out_docs[q, r] = -1
