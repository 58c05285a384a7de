"""Index storage: the segmented, memory-mapped inverted index and the dense index."""

from pathlib import Path

from semiret.errors import IndexFormatError
from semiret.indexes.inverted import BM25Parameters, InvertedIndex
from semiret.types import Postings, SearchHits, SparseQuery
from semiret.indexes.storage import read_meta

__all__ = ["BM25Parameters", "InvertedIndex", "Postings", "SearchHits", "SparseQuery", "open_index"]


def open_index(path: str | Path):
    """Open any semiret index directory (inverted or dense), as its ``meta.json`` says."""
    from semiret.indexes import dense, inverted

    kinds = {inverted.FORMAT: inverted.InvertedIndex, dense.FORMAT: dense.DenseIndex}
    found = read_meta(Path(path), None).get("format")
    if found not in kinds:
        raise IndexFormatError(f"{path} holds a {found!r} index, not one semiret searches ({', '.join(kinds)})")
    return kinds[found].open(path)
