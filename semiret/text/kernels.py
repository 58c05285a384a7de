"""Numba kernels of text analysis: per-document term counting.

Hand-written because numpy would need a sort per document (``np.unique``) where one pass with a last-seen
table over the vocabulary is linear.
"""

from __future__ import annotations

import numpy as np

from semiret.compiled import kernel


@kernel
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
