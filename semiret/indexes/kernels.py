"""Numba kernels for building and searching term-major postings.

These loops (CSR transposition, score accumulation with dynamic pruning
and top-k) are hand-written because numpy/scipy would need a sort or a dense [queries x documents]
matrix for each of them and cannot skip postings; compiled loops are linear and keep one reusable
score buffer.
"""

from __future__ import annotations

import numpy as np

from semiret.compiled import kernel, select_largest


@kernel
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


@kernel
def rows_of_term_major(present_terms, indptr, docs, values, cursors, live):
    """Term-major postings back in doc-major CSR for the documents ``live`` (ascending), terms ascending in each
    row (``values`` empty: a binary segment, every weight 1). ``cursors`` holds each term's first posting not read
    yet and is advanced past ``live[-1]``: parts read in ascending order read each posting once, and hold only
    their own rows (a merge reads a large segment so).

    Returns ``(offsets, terms, values)``.
    """
    n_rows = live.shape[0]
    if n_rows == 0:
        return np.zeros(1, np.int64), np.empty(0, np.int32), np.empty(0, np.float32)
    low, high = live[0], live[-1] + 1
    row_of_doc = np.full(high - low, -1, np.int64)
    for row in range(n_rows):
        row_of_doc[live[row] - low] = row
    counts = np.zeros(n_rows + 1, np.int64)
    for i in range(present_terms.shape[0]):
        j = cursors[i]
        while j < indptr[i + 1] and docs[j] < high:
            if docs[j] >= low and row_of_doc[docs[j] - low] >= 0:
                counts[row_of_doc[docs[j] - low] + 1] += 1
            j += 1
    offsets = np.cumsum(counts)
    fill = offsets[:-1].copy()
    terms_out = np.empty(offsets[n_rows], np.int32)
    values_out = np.ones(offsets[n_rows], np.float32)
    weighted = values.shape[0] > 0
    for i in range(present_terms.shape[0]):
        j = cursors[i]
        while j < indptr[i + 1] and docs[j] < high:
            if docs[j] >= low and row_of_doc[docs[j] - low] >= 0:
                row = row_of_doc[docs[j] - low]
                terms_out[fill[row]] = present_terms[i]
                if weighted:
                    values_out[fill[row]] = values[j]
                fill[row] += 1
            j += 1
        cursors[i] = j
    return offsets, terms_out, values_out


PRUNE_SLACK = 1e-4
"""Relative slack on score bounds: float32 sums taken in another order may differ in the last bits."""

DENSE_FRACTION = 1.0
"""Without pruning, a query with this many postings per segment document is scored densely (``_finish_dense``)..."""

SMALL_SEGMENT_DOCS = 65_536
SMALL_SEGMENT_DENSE_FRACTION = 0.25
"""... or this many, in a segment whose score buffer (4 bytes a document) stays in the CPU cache: scanning it
costs little next to tracking touched documents (SciFact BM25 queries: 6.5 against 12.7 us), while a 1M buffer
scan is what made the old kernel 2.5x slower than tracking there."""

FALLBACK_FRACTION = 0.25
"""With pruning, a query that has read this many postings per segment document without being able to
stop is finished densely: tracking touched documents costs more per posting than a plain add."""

PROBE_COST = 4
"""Probing a list for one document (galloping search) costs about this many sequential postings."""

DEEP_K = 32
"""From this k on, a search's best hits are selected among candidates (:func:`select_best_keys`) rather than kept
in a bounded heap, which costs more the deeper it is; below about 30 the heap is the cheaper."""


@kernel
def term_maxima(indptr, values):
    """The largest value in each term's posting list: the term's score bound for dynamic pruning."""
    n_terms = indptr.shape[0] - 1
    out = np.zeros(n_terms, np.float32)
    for row in range(n_terms):
        best = np.float32(0.0)
        for p in range(indptr[row], indptr[row + 1]):
            if values[p] > best:
                best = np.float32(values[p])
        out[row] = best
    return out


@kernel
def ranks_below(score_a, doc_a, score_b, doc_b):
    """Hit a ranks below hit b: a lower score, or the same score and a later document.

    Breaking ties by document number makes the top-k independent of the order hits are offered in.
    """
    return score_a < score_b or (score_a == score_b and doc_a > doc_b)


@kernel
def _sift_down(scores, docs, pos, size):
    """Restore the heap property below ``pos`` (the root holds the lowest-ranked hit)."""
    score, doc = scores[pos], docs[pos]
    while True:
        child = 2 * pos + 1
        if child >= size:
            break
        right = child + 1
        if right < size and ranks_below(scores[right], docs[right], scores[child], docs[child]):
            child = right
        if not ranks_below(scores[child], docs[child], score, doc):
            break
        scores[pos], docs[pos] = scores[child], docs[child]
        pos = child
    scores[pos], docs[pos] = score, doc


@kernel
def offer(heap_scores, heap_docs, size, score, doc):
    """Put a hit into a bounded heap of ``len(heap_scores)`` best hits holding ``size``; returns the new size.

    Callers first compare the score with a local copy of the root's (the k-th best once full): most hits
    fail that test, and a call that passes arrays costs numba more than the comparison."""
    k = heap_scores.shape[0]
    if size < k:
        heap_scores[size] = score
        heap_docs[size] = doc
        size += 1
        if size == k:
            for pos in range(k // 2 - 1, -1, -1):
                _sift_down(heap_scores, heap_docs, pos, k)
    elif ranks_below(heap_scores[0], heap_docs[0], score, doc):
        heap_scores[0] = score
        heap_docs[0] = doc
        _sift_down(heap_scores, heap_docs, 0, k)
    return size


@kernel
def _sort_best_first(scores, docs, size):
    """Order the first ``size`` hits best first, in place (insertion sort: for a window that is nearly in
    order already)."""
    for i in range(1, size):
        s, d = scores[i], docs[i]
        j = i - 1
        while j >= 0 and ranks_below(scores[j], docs[j], s, d):
            scores[j + 1], docs[j + 1] = scores[j], docs[j]
            j -= 1
        scores[j + 1], docs[j + 1] = s, d


@kernel
def _heap_sort_best_first(scores, docs, size):
    """Order the first ``size`` hits best first, in place, in O(size log size) (heapsort: the lowest-ranked
    hit goes last, then the next; an insertion sort of k = 1,000 hits costs half a millisecond)."""
    for pos in range(size // 2 - 1, -1, -1):  # a heap not yet full is not yet a heap
        _sift_down(scores, docs, pos, size)
    for end in range(size - 1, 0, -1):
        scores[0], scores[end] = scores[end], scores[0]
        docs[0], docs[end] = docs[end], docs[0]
        _sift_down(scores, docs, 0, end)


@kernel
def _probe(docs, values, binary, start, end, contenders, n_contenders, weight, buffer):
    """Add one posting list's weight to each contender it holds, found by galloping search.

    ``contenders`` are ascending, so each search starts where the previous one ended: exponential
    then binary search costs O(log gap) per contender, cheap whether they are sparse or dense in
    the list. (One call per list: numba calls that pass arrays are too costly per contender.)
    """
    pos = start
    for j in range(n_contenders):
        doc = contenders[j]
        if pos >= end:
            break
        if docs[pos] < doc:
            prev, step = pos, 1
            cur = pos + 1
            while cur < end and docs[cur] < doc:
                prev = cur
                step *= 2
                cur = pos + step
            lo, hi = prev + 1, min(cur, end)
            while lo < hi:
                mid = (lo + hi) >> 1
                if docs[mid] < doc:
                    lo = mid + 1
                else:
                    hi = mid
            pos = lo
        if pos < end and docs[pos] == doc:
            buffer[doc] += weight if binary else weight * values[pos]


@kernel
def _kth_best(buffer, some_docs, n_docs, deleted, has_deleted, heap_scores, heap_docs):
    """The k-th best current score among the first ``n_docs`` of ``some_docs`` (distinct documents),
    the live ones (0 when there are fewer than k)."""
    k = heap_scores.shape[0]
    size = 0
    threshold = np.float32(-1.0)
    for i in range(n_docs):
        d = some_docs[i]
        s = buffer[d]
        if s >= threshold and not (has_deleted and deleted[d]):
            size = offer(heap_scores, heap_docs, size, s, np.int32(d))
            if size == k:
                threshold = heap_scores[0]
    return heap_scores[0] if size == k else np.float32(0.0)


@kernel
def _keep_contenders(buffer, touched, n_touched, deleted, has_deleted, remaining_bound, theta):
    """Compact ``touched`` to the live documents whose score plus ``remaining_bound`` can still reach
    ``theta``; the others' scores are cleared. Keeps the order; returns how many are kept."""
    n_kept = 0
    for j in range(n_touched):
        d = touched[j]
        if (has_deleted and deleted[d]) or (buffer[d] + remaining_bound) * (1.0 + PRUNE_SLACK) < theta:
            buffer[d] = 0.0
        else:
            touched[n_kept] = d
            n_kept += 1
    return n_kept


@kernel
def _finish_dense(weights, rows, order, first, indptr, docs, values, binary, buffer):
    """Add the query terms ``order[first:]`` without tracking documents, for a scan of the whole buffer in
    document order afterwards: for a query reading more postings than the segment has documents (such as
    SiDR's 768-term query vectors) this beats revisiting touched documents one by one."""
    for idx in range(first, order.shape[0]):
        i = order[idx]
        row = rows[i]
        if row < 0:
            continue
        weight = weights[i]
        if binary:
            for p in range(indptr[row], indptr[row + 1]):
                buffer[docs[p]] += weight
        else:
            for p in range(indptr[row], indptr[row + 1]):
                buffer[docs[p]] += weight * values[p]


@kernel
def _add_list(docs, values, binary, start, end, weight, buffer, touched, n_touched):
    """Add ``weight`` x the postings ``start:end`` to ``buffer``; a document enters ``touched`` when its score
    was still zero. Branch-free: each document enters once (``weight`` > 0, values > 0), so it never
    overflows: the slot after the last entry is written, not counted. Returns the new ``n_touched``."""
    if binary:
        for p in range(start, end):
            d = docs[p]
            old = buffer[d]
            touched[n_touched] = d
            n_touched += old == 0.0
            buffer[d] = old + weight
    else:
        for p in range(start, end):
            d = docs[p]
            old = buffer[d]
            touched[n_touched] = d
            n_touched += old == 0.0
            buffer[d] = old + weight * values[p]
    return n_touched


@kernel
def _collect_hits(buffer, touched, n, in_order, deleted, has_deleted, heap_scores, heap_docs):
    """The best live hits among documents ``range(n)`` (``in_order``) or ``touched[:n]`` into the heap; clears
    their scores and returns the heap's size."""
    k = heap_scores.shape[0]
    size = 0
    threshold = np.float32(0.0)  # the k-th score once the heap is full: most documents fail this test
    for j in range(n):
        d = j if in_order else touched[j]
        s = buffer[d]
        buffer[d] = 0.0
        # in document order a tie never displaces a kept hit, so only a higher score is offered
        if (s > threshold or (s == threshold and not in_order)) and s > 0.0 and not (has_deleted and deleted[d]):
            size = offer(heap_scores, heap_docs, size, s, np.int32(d))
            if size == k:
                threshold = heap_scores[0]
    return size


@kernel
def write_hits(heap_scores, heap_docs, size, out_scores, out_docs):
    """The heap's hits best first into one output row, ``-inf``/``-1`` padded."""
    _heap_sort_best_first(heap_scores, heap_docs, size)
    for r in range(out_scores.shape[0]):
        if r < size:
            out_scores[r] = heap_scores[r]
            out_docs[r] = heap_docs[r]
        else:
            out_scores[r] = -np.inf
            out_docs[r] = -1


@kernel
def _hit_key(score, doc):
    """One integer ordering hits as :func:`ranks_below` does (larger: better): the bits of a positive float32
    order as its value, and a lower document number ranks first among equal scores."""
    return (np.uint64(np.float32(score).view(np.uint32)) << np.uint64(32)) | np.uint64(np.uint32(0xFFFFFFFF) - np.uint32(doc))


@kernel
def key_hit(key):
    """The (score, document) of a :func:`_hit_key`."""
    return np.uint32(key >> np.uint64(32)).view(np.float32), np.int32(np.uint32(0xFFFFFFFF) - np.uint32(key & np.uint64(0xFFFFFFFF)))


@kernel
def _sample_bar(buffer, touched, n, in_order, deleted, has_deleted, k):
    """A score that about 2k of the hits reach: the 16th best of every m-th hit, m = k / 8 (0 when the sample
    has fewer). A first bar for :func:`select_best_keys`, so that most hits are passed over by one comparison
    instead of entering the candidates."""
    stride = max(1, k // 8)
    rank = (2 * k) // stride
    sample = np.empty(rank, np.float32)
    sample_docs = np.empty(rank, np.int32)
    size = 0
    bar = np.float32(0.0)
    for j in range(0, n, stride):
        d = j if in_order else touched[j]
        s = buffer[d]
        if s > bar and not (has_deleted and deleted[d]):
            size = offer(sample, sample_docs, size, s, np.int32(d))
            if size == rank:
                bar = sample[0]
    return bar if size == rank else np.float32(0.0)


@kernel
def select_best_keys(buffer, touched, n, in_order, deleted, has_deleted, keys, k):
    """The best ``k`` live hits among documents ``range(n)`` (``in_order``) or ``touched[:n]``, as
    :func:`_hit_key` keys in ``keys[:size]`` in no particular order (``keys`` a few times k long); returns
    ``size`` and clears the hits' scores. Hits that beat the bar enter the candidates; when these fill ``keys``
    the best k are selected (quickselect) and the k-th best becomes the bar. With many hits the first bar
    comes from a sample (:func:`_sample_bar`); should fewer than k hits reach it, the pass is repeated without.
    The same hits as the bounded heap, at a fraction of its cost for a deep k (SciFact's BM25 queries, about
    2,700 hits, the collection alone: 31 us for k = 100 with the heap, 13 with this)."""
    capacity = keys.shape[0]
    sampled = n >= 16 * k
    bar_score = _sample_bar(buffer, touched, n, in_order, deleted, has_deleted, k) if sampled else np.float32(0.0)
    bar_doc = np.iinfo(np.int32).max  # equal to a sampled bar is enough; a selected bar also compares documents
    clear = not sampled  # with a sampled bar the scores are kept until enough hits are known to reach it
    while True:
        size = 0
        for j in range(n):
            d = j if in_order else touched[j]
            s = buffer[d]
            if clear:
                buffer[d] = 0.0
            if s > bar_score or (s == bar_score and s > 0.0 and d < bar_doc):
                if has_deleted and deleted[d]:
                    continue
                keys[size] = _hit_key(s, d)
                size += 1
                if size == capacity:
                    select_largest(keys, size, k - 1)
                    bar_score, bar_doc = key_hit(keys[k - 1])
                    size = k
        if clear:
            break
        if size >= k or bar_score == 0.0:
            if in_order:
                buffer[:n] = 0.0
            else:
                for j in range(n):
                    buffer[touched[j]] = 0.0
            break
        bar_score, bar_doc, clear = np.float32(0.0), np.iinfo(np.int32).max, True  # the sample's bar was too high
    if size > k:
        select_largest(keys, size, k - 1)
        size = k
    return size


@kernel
def _collect_deep(buffer, touched, n, in_order, deleted, has_deleted, keys, out_scores, out_docs):
    """:func:`_collect_hits` and :func:`write_hits` for a deep k (:func:`select_best_keys`, then sorted)."""
    k = out_scores.shape[0]
    size = select_best_keys(buffer, touched, n, in_order, deleted, has_deleted, keys, k)
    best = keys[:size]
    best.sort()
    for r in range(k):
        if r < size:
            out_scores[r], out_docs[r] = key_hit(best[size - 1 - r])
        else:
            out_scores[r] = -np.inf
            out_docs[r] = -1


@kernel
def _collect_best(buffer, touched, n, in_order, deleted, has_deleted, heap_scores, heap_docs, keys, out_scores,
                  out_docs):
    """The best live hits among documents ``range(n)`` (``in_order``) or ``touched[:n]``, best first into the
    output rows (``-inf``/``-1`` padded), their scores cleared: by selection when ``keys`` is given (a deep
    k), else through the bounded heap."""
    if keys.shape[0] > 0:
        _collect_deep(buffer, touched, n, in_order, deleted, has_deleted, keys, out_scores, out_docs)
    else:
        size = _collect_hits(buffer, touched, n, in_order, deleted, has_deleted, heap_scores, heap_docs)
        write_hits(heap_scores, heap_docs, size, out_scores, out_docs)


@kernel
def accumulate_query(terms, weights, present_terms, indptr, docs, values, maxima, binary, deleted, n_docs, buffer,
                     touched, heap_scores, heap_docs):
    """One query's scores into ``buffer``, with dynamic pruning towards its best ``len(heap_scores)`` (the
    heap is scratch); what :func:`search_postings` does before collecting the hits. Returns ``(n, in_order,
    work)``: the hits are the documents ``range(n)`` when ``in_order`` (the query was scored densely), else
    ``touched[:n]``; ``work`` counts the postings read and documents probed."""
    k = heap_scores.shape[0]
    n_present = present_terms.shape[0]
    prune = maxima.shape[0] > 0
    has_deleted = deleted.shape[0] > 0
    dense_fraction = SMALL_SEGMENT_DENSE_FRACTION if n_docs < SMALL_SEGMENT_DOCS else DENSE_FRACTION
    n_terms = terms.shape[0]
    rows = np.full(n_terms, -1, np.int64)
    bounds = np.zeros(n_terms, np.float64)
    remaining_postings = 0
    for i in range(n_terms):
        term = terms[i]
        row = np.searchsorted(present_terms, term)
        if row < n_present and present_terms[row] == term:
            rows[i] = row
            remaining_postings += indptr[row + 1] - indptr[row]
            if prune:
                bounds[i] = weights[i] * maxima[row]
    order = np.argsort(-bounds, kind="mergesort") if prune else np.arange(n_terms)
    dense_from_start = not prune and remaining_postings >= n_docs * dense_fraction
    remaining_bound = bounds.sum()
    raise_at = 0.5 * remaining_bound
    work = 0
    n_touched = 0
    theta = np.float32(0.0)  # a lower bound of the k-th best final score
    first_probed = n_terms
    went_dense = False
    for idx in range(n_terms):
        i = order[idx]
        row = rows[i]
        if row < 0:
            continue
        # no unseen document can reach the top k, and dropping them saves more than it costs
        if remaining_bound * (1.0 + PRUNE_SLACK) < theta and remaining_postings > 2 * n_touched:
            first_probed = idx
            break
        # too many postings to track documents one by one, from the start without pruning, or once
        # pruning has not stopped the query within a quarter as many postings as the segment has
        # documents (a query vector of hundreds of comparable weights): finish without tracking
        if dense_from_start or (prune and work >= n_docs * FALLBACK_FRACTION):
            went_dense = True
            _finish_dense(weights, rows, order, idx, indptr, docs, values, binary, buffer)
            work += remaining_postings + n_docs
            break
        start, end = indptr[row], indptr[row + 1]
        n_touched = _add_list(docs, values, binary, start, end, weights[i], buffer, touched, n_touched)
        work += end - start
        remaining_postings -= end - start
        remaining_bound -= bounds[i]
        if prune and remaining_bound <= raise_at:
            # raise theta, a lower bound of the final k-th best score (scores only grow): the k-th
            # best partial score among all touched documents while they are few against the
            # postings still to read, else among this list's documents (any subset bounds it from
            # below). Worth it only once theta can exceed the bound still to come (no partial
            # score exceeds the bounds added so far: the first raise_at), then each time that
            # bound has halved.
            if 4 * n_touched < remaining_postings:
                theta = _kth_best(buffer, touched, n_touched, deleted, has_deleted, heap_scores, heap_docs)
                work += n_touched
                raise_at = 0.5 * remaining_bound
            elif end - start >= k and 4 * (end - start) < remaining_postings:
                theta = max(theta, _kth_best(buffer, docs[start:end], end - start, deleted, has_deleted,
                                             heap_scores, heap_docs))
                work += end - start
                raise_at = 0.5 * remaining_bound
    if went_dense:
        return n_docs, True, work
    n_hits = n_touched
    if first_probed < n_terms:
        n_hits = _keep_contenders(buffer, touched, n_touched, deleted, has_deleted, remaining_bound, theta)
        work += n_touched
        raise_at = 0.5 * remaining_bound
        touched[:n_hits].sort()  # document order, for galloping
        for idx in range(first_probed, n_terms):
            i = order[idx]
            row = rows[i]
            if row < 0:
                continue
            weight = weights[i]
            pos, end = indptr[row], indptr[row + 1]
            if PROBE_COST * n_hits < end - pos:
                _probe(docs, values, binary, pos, end, touched, n_hits, weight, buffer)
                work += PROBE_COST * n_hits
            else:  # as many contenders as postings: read the list, adding to contenders only
                for p in range(pos, end):
                    d = docs[p]
                    if buffer[d] > 0.0:
                        buffer[d] += weight if binary else weight * values[p]
                work += end - pos
            remaining_bound -= bounds[i]
            if n_hits > k and remaining_bound <= raise_at:
                # theta rises and the bound falls: fewer documents can still make it (checked
                # each time the bound has halved, so long queries do not pay a pass per term)
                theta = max(theta, _kth_best(buffer, touched, n_hits, deleted, False, heap_scores, heap_docs))
                work += 2 * n_hits
                n_hits = _keep_contenders(buffer, touched, n_hits, deleted, False, remaining_bound, theta)
                raise_at = 0.5 * remaining_bound
    return n_hits, False, work + n_hits


@kernel
def search_postings(q_offsets, q_terms, q_weights, present_terms, indptr, docs, values, maxima, binary,
                    deleted, n_docs, k, buffer, touched, out_scores, out_docs, visited):
    """Exact top-k of ``sum_t w_t * value(t, d)`` for each query over one segment, with dynamic pruning.

    Term at a time, heaviest score bound (``w_t * maxima[t]``) first, keeping theta, a lower bound of
    the final k-th best score. Once the bounds of the terms still to come sum to less than theta, no
    document not yet seen can reach the top k: the remaining lists are then only probed (galloping
    search) for the documents that still can, and those are re-filtered as the bound falls. This is
    the MaxScore idea (Turtle & Flood 1995) for a term-at-a-time accumulator; it needs non-negative
    weights, which every index kind has. ``maxima`` empty turns pruning off (plain exhaustive search).
    Without pruning, a query reading more postings than the segment has documents (a quarter of that in a
    small segment) is scored densely (``_finish_dense``); with pruning, a query that has read a quarter
    of that without stopping is finished densely.

    ``binary`` segments have implicit values of 1. ``deleted`` marks dead documents (may be empty).
    ``docs`` is viewed as uint32, which spares numba a negative-index check per posting.
    Only documents with a positive score are hits; ties rank the earlier document first.
    ``buffer`` is float32 scratch of ``n_docs`` zeros, handed back all zeros, and ``touched`` uint32
    scratch of ``n_docs + 1`` (any contents): callers reuse both, so a search neither clears nor
    allocates (page-faults) arrays the size of the segment.
    Results are written, best first, into ``out_scores``/``out_docs`` (``-1`` pads missing hits);
    ``visited[q]`` receives the postings read plus the documents probed, the query's work.
    """
    n_queries = q_offsets.shape[0] - 1
    has_deleted = deleted.shape[0] > 0
    heap_scores = np.empty(k, np.float32)
    heap_docs = np.empty(k, np.int32)
    keys = np.empty(4 * k if k >= DEEP_K else 0, np.uint64)
    for q in range(n_queries):
        lo, hi = q_offsets[q], q_offsets[q + 1]
        n, in_order, visited[q] = accumulate_query(q_terms[lo:hi], q_weights[lo:hi], present_terms, indptr, docs,
                                                   values, maxima, binary, deleted, n_docs, buffer, touched,
                                                   heap_scores, heap_docs)
        _collect_best(buffer, touched, n, in_order, deleted, has_deleted, heap_scores, heap_docs, keys,
                      out_scores[q], out_docs[q])


@kernel
def _variant_idf(variant, df, n):
    """:meth:`BM25Parameters.idf <semiret.text.bm25.BM25Parameters.idf>` of one term (``variant``: its position in
    ``BM25_VARIANTS``; lucene, robertson, atire, bm25l, bm25+)."""
    if df <= 0.0:
        return 0.0
    if variant == 0:
        return np.log1p((n - df + 0.5) / (df + 0.5))
    if variant == 1:
        return np.log(max((n - df + 0.5) / (df + 0.5), 1.0))
    if variant == 2:
        return np.log(n / df)
    if variant == 3:
        return np.log((n + 1.0) / (df + 0.5))
    return np.log((n + 1.0) / df)


@kernel
def filter_queries(offsets, terms, weights, vocab_size, document_frequencies, n_docs, variant=0):
    """Drop query terms with zero weight or outside the vocabulary; with ``document_frequencies`` (BM25),
    multiply each weight by its term's IDF over ``n_docs`` documents as the BM25 ``variant`` computes it (0:
    Lucene's ``log(1 + (N - df + 0.5) / (df + 0.5))``; :func:`_variant_idf`): per query term, so a search never
    needs the whole table, which each commit would change. A term whose weight is then 0 is dropped too.

    Returns ``(bad, offsets, terms, weights)``: ``bad`` is the first query holding a negative or
    non-finite weight (nothing else is then computed), or -1.
    """
    n_queries = offsets.shape[0] - 1
    for q in range(n_queries):
        for j in range(offsets[q], offsets[q + 1]):
            w = weights[j]
            if not np.isfinite(w) or w < 0:
                return q, offsets, terms[:0], weights[:0]
    has_idf = document_frequencies.shape[0] > 0
    out_offsets = np.zeros(n_queries + 1, np.int64)
    out_terms = np.empty(terms.shape[0], np.int32)
    out_weights = np.empty(terms.shape[0], np.float32)
    m = 0
    for q in range(n_queries):
        for j in range(offsets[q], offsets[q + 1]):
            t = terms[j]
            w = weights[j]
            if w > 0 and t >= 0 and t < vocab_size:
                if has_idf:
                    w = w * np.float32(_variant_idf(variant, float(document_frequencies[t]), float(n_docs)))
                if w > 0:  # an IDF clipped to 0 (Robertson's, a term in over half the documents): no term
                    # (the kernels add a document to a query's touched list until its score leaves 0: a zero weight
                    # listed it once per such term, hits came back twice and the list overran its buffer)
                    out_terms[m] = t
                    out_weights[m] = w
                    m += 1
        out_offsets[q + 1] = m
    return -1, out_offsets, out_terms[:m], out_weights[:m]


@kernel
def _rows_of(terms, present_terms, indptr):
    """Each query term's row in ``present_terms`` (-1 when absent) and the postings of those rows."""
    n_present = present_terms.shape[0]
    rows = np.full(terms.shape[0], -1, np.int64)
    postings = 0
    for i in range(terms.shape[0]):
        row = np.searchsorted(present_terms, terms[i])
        if row < n_present and present_terms[row] == terms[i]:
            rows[i] = row
            postings += indptr[row + 1] - indptr[row]
    return rows, postings


@kernel
def mark_held(terms, present_terms, indptr, docs, deleted, held):
    """Set ``held[i]`` where term ``terms[i]`` has a posting of a document ``deleted`` does not mark (each list read
    up to its first live document: at once in a segment without deletions)."""
    rows, _ = _rows_of(terms, present_terms, indptr)
    for i in range(terms.shape[0]):
        if held[i] or rows[i] < 0:
            continue
        for p in range(indptr[rows[i]], indptr[rows[i] + 1]):
            if not deleted[docs[p]]:
                held[i] = True
                break


@kernel
def _add_part(weights, factor, rows, indptr, docs, values, binary, dense, buffer, touched, n_touched):
    """One part's query terms (weights x ``factor``) into the shared buffer, tracked in ``touched`` unless
    ``dense``; tracked terms whose weight comes to zero are skipped (they would enter documents twice)."""
    scaled = (weights * factor).astype(np.float32)
    if dense:
        _finish_dense(scaled, rows, np.arange(rows.shape[0]), 0, indptr, docs, values, binary, buffer)
        return n_touched
    for i in range(rows.shape[0]):
        row = rows[i]
        if row >= 0 and scaled[i] > 0:
            n_touched = _add_list(docs, values, binary, indptr[row], indptr[row + 1], scaled[i], buffer, touched,
                                  n_touched)
    return n_touched


@kernel
def search_two_postings(q_offsets_a, q_terms_a, q_weights_a, bounds_a, share_a, present_a, indptr_a, docs_a,
                        values_a, binary_a, q_offsets_b, q_terms_b, q_weights_b, bounds_b, share_b, present_b,
                        indptr_b, docs_b, values_b, binary_b, deleted, n_docs, k, buffer, touched, out_scores,
                        out_docs, visited):
    """Exact top-k of ``share_a x score_a(q, d) / bounds_a[q] + share_b x score_b(q, d) / bounds_b[q]`` (a part
    whose bound is 0 adds nothing) over one pair of segments that hold the same documents in the same order (a
    hybrid's two parts, written together), both parts' postings added into one score buffer: one pass and one
    selection where two searches and a fusion of their rankings would cost two of each. Each part's arguments are
    :func:`search_postings`' (no pruning: its bound is one part's); ``deleted``, scratch and outputs as there. A
    quantized part's ``share`` carries its scale (its postings hold quantized units, its bounds real ones)."""
    n_queries = q_offsets_a.shape[0] - 1
    has_deleted = deleted.shape[0] > 0
    dense_fraction = SMALL_SEGMENT_DENSE_FRACTION if n_docs < SMALL_SEGMENT_DOCS else DENSE_FRACTION
    heap_scores = np.empty(k, np.float32)
    heap_docs = np.empty(k, np.int32)
    keys = np.empty(4 * k if k >= DEEP_K else 0, np.uint64)
    for q in range(n_queries):
        rows_a, postings_a = _rows_of(q_terms_a[q_offsets_a[q]:q_offsets_a[q + 1]], present_a, indptr_a)
        rows_b, postings_b = _rows_of(q_terms_b[q_offsets_b[q]:q_offsets_b[q + 1]], present_b, indptr_b)
        dense = postings_a + postings_b >= n_docs * dense_fraction
        factor_a = share_a / bounds_a[q] if bounds_a[q] > 0 else 0.0
        factor_b = share_b / bounds_b[q] if bounds_b[q] > 0 else 0.0
        n = _add_part(q_weights_a[q_offsets_a[q]:q_offsets_a[q + 1]], factor_a, rows_a, indptr_a, docs_a,
                      values_a, binary_a, dense, buffer, touched, 0)
        n = _add_part(q_weights_b[q_offsets_b[q]:q_offsets_b[q + 1]], factor_b, rows_b, indptr_b, docs_b,
                      values_b, binary_b, dense, buffer, touched, n)
        visited[q] = postings_a + postings_b + (n_docs if dense else n)
        _collect_best(buffer, touched, n_docs if dense else n, dense, deleted, has_deleted, heap_scores, heap_docs,
                      keys, out_scores[q], out_docs[q])


@kernel
def query_score_bounds(q_offsets, q_terms, q_weights, term_bounds):
    """Each query's ``sum_t w_t x term_bounds[t]``: the largest score any document can get (``term_bounds``:
    each term's largest value over the index)."""
    n_queries = q_offsets.shape[0] - 1
    out = np.zeros(n_queries, np.float64)
    for q in range(n_queries):
        total = 0.0
        for j in range(q_offsets[q], q_offsets[q + 1]):
            total += q_weights[j] * term_bounds[q_terms[j]]
        out[q] = total
    return out


@kernel
def filter_queries_with_bounds(offsets, terms, weights, vocab_size, document_frequencies, n_docs, variant,
                               term_bounds):
    """:func:`filter_queries` then :func:`query_score_bounds` of what it kept, in one call (a hybrid's part packs
    its queries and their bounds per search: one call less to pay). Returns ``(bad, offsets, terms, weights,
    bounds)``; ``bounds`` is empty where ``bad`` is not -1."""
    bad, out_offsets, out_terms, out_weights = filter_queries(offsets, terms, weights, vocab_size,
                                                              document_frequencies, n_docs, variant)
    if bad >= 0:
        return bad, out_offsets, out_terms, out_weights, np.zeros(0, np.float64)
    return bad, out_offsets, out_terms, out_weights, query_score_bounds(out_offsets, out_terms, out_weights,
                                                                        term_bounds)


@kernel
def sparse_gram(indptr, terms, values, vocab_size):
    """The dot products of a few sparse rows (CSR, term ids below ``vocab_size``) with each other, ``[n, n]``
    float64: the entries counting-sorted by term, each term's run multiplied out pairwise (half, by symmetry)."""
    n = indptr.shape[0] - 1
    starts = np.zeros(vocab_size + 1, np.int64)
    for j in range(terms.shape[0]):
        starts[terms[j] + 1] += 1
    for t in range(vocab_size):
        starts[t + 1] += starts[t]
    fill = starts[:-1].copy()
    rows = np.empty(terms.shape[0], np.int64)
    sorted_values = np.empty(terms.shape[0], np.float64)
    for row in range(n):
        for j in range(indptr[row], indptr[row + 1]):
            at = fill[terms[j]]
            rows[at], sorted_values[at] = row, values[j]
            fill[terms[j]] += 1
    gram = np.zeros((n, n), np.float64)
    for t in range(vocab_size):
        for a in range(starts[t], starts[t + 1]):
            row_a, value_a = rows[a], sorted_values[a]
            gram[row_a, row_a] += value_a * value_a
            for b in range(a + 1, starts[t + 1]):
                gram[row_a, rows[b]] += value_a * sorted_values[b]
    for a in range(n):  # each pair was added once, on the side its term run met it
        for b in range(a + 1, n):
            gram[a, b] = gram[b, a] = gram[a, b] + gram[b, a]
    return gram
