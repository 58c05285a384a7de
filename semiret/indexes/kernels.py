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


DENSE_FRACTION = 0.25
"""A query whose postings add up to this fraction of a segment's documents is scored densely:
scanning the whole score buffer then costs less than tracking which documents were touched."""


@numba.njit(**NUMBA_OPTIONS)
def _ranks_below(score_a, doc_a, score_b, doc_b):
    """Hit a ranks below hit b: a lower score, or the same score and a later document.

    Breaking ties by document number makes the top-k independent of the order hits are offered in.
    """
    return score_a < score_b or (score_a == score_b and doc_a > doc_b)


@numba.njit(**NUMBA_OPTIONS)
def _sift_down(scores, docs, pos, size):
    """Restore the heap property below ``pos`` (the root holds the lowest-ranked hit)."""
    score, doc = scores[pos], docs[pos]
    while True:
        child = 2 * pos + 1
        if child >= size:
            break
        right = child + 1
        if right < size and _ranks_below(scores[right], docs[right], scores[child], docs[child]):
            child = right
        if not _ranks_below(scores[child], docs[child], score, doc):
            break
        scores[pos], docs[pos] = scores[child], docs[child]
        pos = child
    scores[pos], docs[pos] = score, doc


@numba.njit(**NUMBA_OPTIONS)
def _sort_best_first(scores, docs, size):
    """Order the first ``size`` hits best first, in place (insertion sort: there are at most k or a window)."""
    for i in range(1, size):
        s, d = scores[i], docs[i]
        j = i - 1
        while j >= 0 and _ranks_below(scores[j], docs[j], s, d):
            scores[j + 1], docs[j + 1] = scores[j], docs[j]
            j -= 1
        scores[j + 1], docs[j + 1] = s, d


@numba.njit(**NUMBA_OPTIONS)
def search_postings(q_offsets, q_terms, q_weights, present_terms, indptr, docs, values, binary,
                    deleted, n_docs, k, buffer, out_scores, out_docs):
    """Exact top-k of ``sum_t w_t * value(t, d)`` for each query over one segment.

    ``binary`` segments have implicit values of 1. ``deleted`` marks dead documents (may be empty).
    ``docs`` may be viewed as uint32, which spares numba a negative-index check per posting.
    Only documents with a positive score are hits; ties rank the earlier document first.
    ``buffer`` is float32 scratch of ``n_docs`` zeros, handed back all zeros (callers reuse it, so
    a search does not pay for clearing a buffer the size of the segment).
    Results are written, best first, into ``out_scores``/``out_docs`` (``-1`` pads missing hits).
    """
    n_present = present_terms.shape[0]
    n_queries = q_offsets.shape[0] - 1
    rows = np.empty(q_terms.shape[0], np.int64)  # postings row of each query term, -1 when absent
    dense = np.zeros(n_queries, np.bool_)
    most = 0
    for q in range(n_queries):
        total = 0
        for j in range(q_offsets[q], q_offsets[q + 1]):
            term = q_terms[j]
            row = np.searchsorted(present_terms, term)
            if row < n_present and present_terms[row] == term:
                rows[j] = row
                total += indptr[row + 1] - indptr[row]
            else:
                rows[j] = -1
        if total >= n_docs * DENSE_FRACTION:
            dense[q] = True
        else:
            most = max(most, total)
    # each posting adds at most one entry, so this never overflows (the slot after the last
    # entry is written, not counted, by the branch-free loops below)
    touched = np.empty(most + 1, np.uint32)  # unsigned: no negative-index wraparound checks
    has_deleted = deleted.shape[0] > 0
    heap_scores = np.empty(k, np.float32)
    heap_docs = np.empty(k, np.int32)
    for q in range(n_queries):
        size = 0
        if dense[q]:
            for j in range(q_offsets[q], q_offsets[q + 1]):
                row = rows[j]
                if row < 0:
                    continue
                weight = q_weights[j]
                if binary:
                    for p in range(indptr[row], indptr[row + 1]):
                        buffer[docs[p]] += weight
                else:
                    for p in range(indptr[row], indptr[row + 1]):
                        buffer[docs[p]] += weight * values[p]
            # documents come in order, so a tie never displaces a kept hit: compare scores only
            threshold = np.float32(0.0)
            for d in range(n_docs):
                s = buffer[d]
                buffer[d] = 0.0
                if s > threshold:
                    if has_deleted and deleted[d]:
                        continue
                    if size < k:
                        heap_scores[size] = s
                        heap_docs[size] = d
                        size += 1
                        if size == k:
                            for pos in range(k // 2 - 1, -1, -1):
                                _sift_down(heap_scores, heap_docs, pos, k)
                            threshold = heap_scores[0]
                    else:
                        heap_scores[0] = s
                        heap_docs[0] = d
                        _sift_down(heap_scores, heap_docs, 0, k)
                        threshold = heap_scores[0]
        else:
            n_touched = 0
            for j in range(q_offsets[q], q_offsets[q + 1]):
                row = rows[j]
                if row < 0:
                    continue
                weight = q_weights[j]
                # branch-free: a document enters ``touched`` when its score was still zero
                if binary:
                    for p in range(indptr[row], indptr[row + 1]):
                        d = docs[p]
                        old = buffer[d]
                        touched[n_touched] = d
                        n_touched += old == 0.0
                        buffer[d] = old + weight
                else:
                    for p in range(indptr[row], indptr[row + 1]):
                        d = docs[p]
                        old = buffer[d]
                        touched[n_touched] = d
                        n_touched += old == 0.0
                        buffer[d] = old + weight * values[p]
            for i in range(n_touched):
                d = touched[i]
                s = buffer[d]
                buffer[d] = 0.0
                if s <= 0.0 or (has_deleted and deleted[d]):
                    continue
                if size < k:
                    heap_scores[size] = s
                    heap_docs[size] = d
                    size += 1
                    if size == k:
                        for pos in range(k // 2 - 1, -1, -1):
                            _sift_down(heap_scores, heap_docs, pos, k)
                elif _ranks_below(heap_scores[0], heap_docs[0], s, d):
                    heap_scores[0] = s
                    heap_docs[0] = d
                    _sift_down(heap_scores, heap_docs, 0, k)
        _sort_best_first(heap_scores, heap_docs, size)
        for r in range(k):
            if r < size:
                out_scores[q, r] = heap_scores[r]
                out_docs[q, r] = heap_docs[r]
            else:
                out_scores[q, r] = -np.inf
                out_docs[q, r] = -1


@numba.njit(**NUMBA_OPTIONS)
def filter_queries(offsets, terms, weights, vocab_size, idf):
    """Drop query terms with zero weight or outside the vocabulary; multiply by ``idf`` when given.

    Returns ``(bad, offsets, terms, weights)``: ``bad`` is the first query holding a negative or
    non-finite weight (nothing else is then computed), or -1.
    """
    n_queries = offsets.shape[0] - 1
    for q in range(n_queries):
        for j in range(offsets[q], offsets[q + 1]):
            w = weights[j]
            if not np.isfinite(w) or w < 0:
                return q, offsets, terms[:0], weights[:0]
    has_idf = idf.shape[0] > 0
    out_offsets = np.zeros(n_queries + 1, np.int64)
    out_terms = np.empty(terms.shape[0], np.int32)
    out_weights = np.empty(terms.shape[0], np.float32)
    m = 0
    for q in range(n_queries):
        for j in range(offsets[q], offsets[q + 1]):
            t = terms[j]
            w = weights[j]
            if w > 0 and t >= 0 and t < vocab_size:
                out_terms[m] = t
                out_weights[m] = w * idf[t] if has_idf else w
                m += 1
        out_offsets[q + 1] = m
    return -1, out_offsets, out_terms[:m], out_weights[:m]
