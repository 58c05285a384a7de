"""Index storage: the segmented, memory-mapped inverted index."""

from semiret.indexes.inverted import BM25Parameters, InvertedIndex, Postings, SearchHits, SparseQuery

__all__ = ["BM25Parameters", "InvertedIndex", "Postings", "SearchHits", "SparseQuery"]
