"""Turning document batches into index postings: word counts for BM25, token sets for bag-of-tokens."""

from __future__ import annotations

import numpy as np

from semiret.data.collection import Document
from semiret.indexes import kernels
from semiret.indexes.inverted import Postings
from semiret.text.analyzer import TermDictionary, WordAnalyzer
from semiret.text.wordpiece import WordPieceVocabulary


def word_count_postings(documents: list[Document], analyzer: WordAnalyzer, terms: TermDictionary,
                        keep_documents: bool = True) -> Postings:
    """Term counts per document over a growable word vocabulary (new words get new ids)."""
    id_lists = [terms.lookup(analyzer(d.full_text), add=True) for d in documents]
    lengths = np.fromiter(map(len, id_lists), dtype=np.int64, count=len(id_lists))
    offsets = np.zeros(len(id_lists) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.fromiter((i for ids in id_lists for i in ids), dtype=np.int32, count=int(offsets[-1]))
    return _counted(documents, flat, offsets, len(terms), np.empty(0, bool), keep_documents)


def token_set_postings(documents: list[Document], vocabulary: WordPieceVocabulary,
                       keep_documents: bool = True) -> Postings:
    """Binary bag-of-tokens rows: which (non-excluded) vocabulary ids occur in each document."""
    flat, offsets = vocabulary.encode_batch([d.full_text for d in documents])
    return _counted(documents, flat, offsets, vocabulary.size, vocabulary.excluded_mask, keep_documents)


def _counted(documents, flat, offsets, vocab_size, excluded, keep_documents) -> Postings:
    terms, counts, doc_offsets, lengths = kernels.count_terms(flat, offsets, excluded, vocab_size)
    return Postings(ids=[d.id for d in documents], offsets=doc_offsets, terms=terms,
                    values=counts.astype(np.float32), lengths=lengths,
                    documents=documents if keep_documents else None)
