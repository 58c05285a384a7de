"""Index storage: the segmented store (:mod:`~semiret.indexes.segments`) and the index kinds built on it, the
memory-mapped inverted index and the dense index, and composites of them (hybrid search). :func:`open_index`
opens any registered kind."""

from semiret.indexes.clustered import ClusteredDenseIndex
from semiret.indexes.composite import CompositeIndex
from semiret.indexes.dense import DenseIndex
from semiret.indexes.inverted import BM25Parameters, InvertedIndex
from semiret.indexes.segments import SegmentedIndex, open_index, register_index_format

__all__ = ["BM25Parameters", "ClusteredDenseIndex", "CompositeIndex", "DenseIndex", "InvertedIndex", "SegmentedIndex", "open_index",
           "register_index_format"]
