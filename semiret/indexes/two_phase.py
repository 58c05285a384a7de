"""Two-phase search for weighted token queries: retrieve with the heaviest query tokens, then rescore.

Phase one runs the ordinary exact search with only the tokens whose weight is at least
``prune_ratio`` x the query's largest weight (the high-IDF tokens, whose posting lists are short);
it keeps a window of ``expansion`` x k candidates. Phase two adds the remaining tokens' contributions
to those candidates only, by binary search in the (document-sorted) posting lists, so the long lists
of common tokens are never scanned (lists short enough to read faster than to search are read whole,
``SCAN_FACTOR``). This is the heuristic the inference-free paper runs in OpenSearch.

Both phases and the final ordering run in one compiled call per segment: on a small index the numpy
glue between phases (splitting queries, sorting windows) cost more than the pruned postings saved.
A query whose light tokens would spare fewer postings than its window of candidates costs
(``WINDOW_COST``) is searched exactly instead (``adaptive``): on SciFact, where the query-side stopwords
are already gone, the deferred tokens held 8% of a query's postings and two-phase search was slower than
exhaustive search; on a large index the same rule keeps two-phase search for nearly every query.
A query whose heavy tokens leave fewer than k live candidates (rare words, deletions, the documents a filter hides)
is searched exactly as well: the documents holding only its light tokens are never candidates, and k hits are
expected wherever k documents match.
"""

from __future__ import annotations

import numpy as np

from semiret.compiled import kernel
from semiret.indexes.kernels import _sort_best_first, search_postings


SCAN_FACTOR = 2.0
"""Phase two reads a term's whole posting list when it is shorter than ``SCAN_FACTOR`` x the binary-search
probes the candidates would cost (candidates x log2 of its length): sequential reads are several times
cheaper than probes, and on a small index most lists are short."""

WINDOW_COST = 250.0
"""What one candidate of the window beyond k costs, in postings read: its heap insertions in phase one and
its rescoring. Measured: a window of 50 instead of 10 over SciFact (5,183 documents) added 16 us per query,
the time of about 10,000 postings."""


@kernel
def deferred_postings(terms, present_terms, indptr, window):
    """The postings phase two spares for ``terms`` (the light ones) and ``window`` candidates: the lists long
    enough to be searched rather than read, less the probes (the same rule as :func:`rescore_candidates`)."""
    spared = 0.0
    for term in terms:
        row = np.searchsorted(present_terms, term)
        if row >= present_terms.shape[0] or present_terms[row] != term:
            continue
        n = indptr[row + 1] - indptr[row]
        probes = window * np.log2(n + 1)
        if n > SCAN_FACTOR * probes:
            spared += n - probes
    return spared


@kernel
def rescore_candidates(q_offsets, q_terms, q_weights, present_terms, indptr, docs, values, binary,
                       candidates, scores, slots):
    """Add ``sum_t w_t * value(t, d)`` of each query's extra tokens to its candidates' scores; returns the work
    (postings read plus documents probed).

    ``candidates[q, j]`` are segment-local document numbers (``-1`` = none); ``scores`` is updated in place.
    A short posting list is read whole, its documents looked up in ``slots`` (float32 scratch of zeros,
    one per document, handed back zeroed: candidate ``j`` marked ``j + 1``); a long one is binary-searched
    for each candidate.
    """
    work = 0
    for q in range(q_offsets.shape[0] - 1):
        n_candidates = 0
        for c in range(candidates.shape[1]):
            if candidates[q, c] >= 0:
                slots[candidates[q, c]] = c + 1
                n_candidates += 1
        for j in range(q_offsets[q], q_offsets[q + 1]):
            term = q_terms[j]
            row = np.searchsorted(present_terms, term)
            if row >= present_terms.shape[0] or present_terms[row] != term:
                continue
            start, end = indptr[row], indptr[row + 1]
            weight = q_weights[j]
            if end - start <= SCAN_FACTOR * n_candidates * np.log2(end - start + 1):
                work += end - start
                for p in range(start, end):
                    slot = slots[docs[p]]
                    if slot > 0:
                        scores[q, np.int64(slot) - 1] += weight if binary else weight * values[p]
                continue
            postings = docs[start:end]
            work += n_candidates
            for c in range(candidates.shape[1]):
                d = candidates[q, c]
                if d < 0:
                    continue
                pos = np.searchsorted(postings, d)
                if pos < postings.shape[0] and postings[pos] == d:
                    scores[q, c] += weight if binary else weight * values[start + pos]
        for c in range(candidates.shape[1]):
            if candidates[q, c] >= 0:
                slots[candidates[q, c]] = 0
    return work


@kernel
def two_phase_search(q_offsets, q_terms, q_weights, present_terms, indptr, docs, values, maxima, binary, deleted,
                     n_docs, window, prune_ratio, adaptive, buffer, touched, out_scores, out_docs, visited):
    """Per query: phase one (:func:`~semiret.indexes.kernels.search_postings` with the terms weighing at least
    ``prune_ratio`` x the query's largest weight, ``window`` candidates), phase two (the other terms added
    to those candidates), then the best ``out_scores.shape[1]`` written best first (ties: earlier document).
    With ``adaptive``, a query whose light terms spare fewer postings than the window costs
    (:func:`deferred_postings` against ``WINDOW_COST`` per candidate beyond k) is searched exactly. So is, always,
    a query whose phase one finds fewer than k live candidates while it has light terms: documents holding only
    those would be missed, and fewer than k hits returned where k can be found (its ``visited``: phase one's work
    plus the exact search's).

    ``docs`` is the postings' document array viewed as uint32 (phase one) and read as int32 in phase two;
    ``maxima``, ``buffer`` (also phase two's candidate marks), ``touched`` and ``visited`` (phase one's work
    plus phase two's postings read and documents probed) as for ``search_postings``.
    """
    k = out_scores.shape[1]
    signed_docs = docs.view(np.int32)
    one = np.zeros(2, np.int64)
    candidate_scores = np.empty((1, window), np.float32)
    candidate_docs = np.empty((1, window), np.int32)
    phase_one_work = np.zeros(1, np.int64)
    for q in range(q_offsets.shape[0] - 1):
        lo, hi = q_offsets[q], q_offsets[q + 1]
        terms, weights = q_terms[lo:hi], q_weights[lo:hi]
        high = weights >= prune_ratio * (weights.max() if hi > lo else np.float32(0.0))
        high_terms, high_weights = terms[high], weights[high]
        low_terms, low_weights = terms[~high], weights[~high]
        if adaptive and deferred_postings(low_terms, present_terms, indptr, window) < WINDOW_COST * (window - k):
            one[1] = hi - lo
            search_postings(one, terms, weights, present_terms, indptr, docs, values, maxima, binary, deleted,
                            n_docs, k, buffer, touched, out_scores[q: q + 1], out_docs[q: q + 1], phase_one_work)
            visited[q] = phase_one_work[0]
            continue
        n_high = high_terms.shape[0]
        one[1] = n_high
        search_postings(one, high_terms, high_weights, present_terms, indptr, docs, values, maxima, binary,
                        deleted, n_docs, window, buffer, touched, candidate_scores, candidate_docs, phase_one_work)
        visited[q] = phase_one_work[0]
        if low_terms.shape[0] and candidate_docs[0, k - 1] < 0:
            # fewer than k live documents hold a heavy term (rare words, deletions, a narrow filter's hidden
            # documents): those holding only light terms were never candidates, so the query is searched exactly
            # (candidates are best first, -1 after the last: one comparison tells)
            one[1] = hi - lo
            search_postings(one, terms, weights, present_terms, indptr, docs, values, maxima, binary, deleted,
                            n_docs, k, buffer, touched, out_scores[q: q + 1], out_docs[q: q + 1], phase_one_work)
            visited[q] += phase_one_work[0]
            continue
        if low_terms.shape[0]:
            one[1] = low_terms.shape[0]
            visited[q] += rescore_candidates(one, low_terms, low_weights, present_terms, indptr, signed_docs,
                                             values, binary, candidate_docs, candidate_scores, buffer)
        # best first among the rescored window; empty slots (-1) score -inf, so they stay last
        scores, found = candidate_scores[0], candidate_docs[0]
        _sort_best_first(scores, found, window)
        out_scores[q] = scores[:k]  # callers ask for k <= window
        out_docs[q] = found[:k]
