"""The corpus hierarchy as the dense index's search structure (``--ann tree``), HCE's stated future work: an
equal-depth spherical k-means tree (:func:`semiret.clustering.agglomerative_tree`) over a segment's vectors;
a query descends it by beam search over the centroids and only the documents of the lowest clusters it
reaches are scored. The beam width trades recall for speed.

Each segment stores ``tree.npz``. The first segment clusters its own vectors; every later one (documents
added) keeps that tree's internal nodes and puts each of its documents in the nearest lowest cluster, so new
documents join the hierarchy without re-clustering. A merge of every segment into one clusters its vectors anew,
as a build of those documents would.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from functools import cached_property
from pathlib import Path

import numpy as np

from semiret.clustering import EqualDepthTree, agglomerative_tree, branching_for_depth
from semiret.compiled import kernel
from semiret.errors import IndexFormatError, SemiretError
from semiret.indexes.kernels import offer, ranks_below, write_hits

TREE_FILE = "tree.npz"
BEAM = 8
"""Default beam width: clusters kept at each depth of the descent."""


def makes_a_tree(n_documents: int, branching: int | None) -> bool:
    """Whether a segment of ``n_documents`` without a tree before it clusters into one with a level of clusters to
    descend: more documents than the branching factor given (depth 2 or more), or, by default, a count the BEIR rule
    gives depth 3 (:func:`~semiret.clustering.branching_for_depth`: 5 to 8, then from 17 on). Another one is searched
    exactly until a segment with a tree comes (an index emptied and merged, then given a document; a build of a
    few)."""
    if branching is not None:
        return n_documents > branching
    try:
        branching_for_depth(n_documents)
    except SemiretError:
        return False
    return True


def write_tree(directory: Path, vectors: np.ndarray, base: EqualDepthTree | None, branching: int | None) -> None:
    """The segment's tree: ``base``'s internal nodes with the vectors in their nearest lowest clusters, or,
    without a base, a new tree of the vectors (``branching`` default: the BEIR rule, depth 3)."""
    tree = base.with_documents(base.nearest_cluster(vectors)) if base is not None else \
        agglomerative_tree(vectors, branching)
    tree.save(directory / TREE_FILE)


class TreeSearch:
    """A segment's tree and vectors, searched by beam descent.

    The descent is a compiled loop (:meth:`EqualDepthTree.descend_many`), and so is the scan of the documents of the
    lowest clusters it reaches (:func:`scan_clusters`): their vectors are kept in cluster order, as an IVF index's
    inverted lists hold them, so each cluster is one run of rows. (faiss's list scan, ``search_preassigned`` with
    the tree's clusters as its lists, paid a fixed cost per list: at a beam of 64 clusters of about five documents,
    two thirds of a SciFact query's time.)"""

    def __init__(self, path: Path, vectors: np.ndarray):
        tree_file = path / TREE_FILE
        if not tree_file.is_file():
            raise IndexFormatError(f"missing index file {tree_file}")
        try:
            self.tree = EqualDepthTree.load(tree_file)
        except Exception as error:  # cut short or overwritten: numpy's and zipfile's messages name no file
            raise IndexFormatError(f"damaged index file {tree_file} ({error}): restore the index from a backup, or "
                                   "build it again") from None
        self.vectors = vectors
        self.cluster_sizes = np.bincount(self.tree.parents[-1], minlength=self.tree.size(self.tree.depth - 1))
        self.scored = 0
        """Documents in the lowest clusters the searches so far reached (the share of the corpus a descent
        scans; deleted documents included)."""

    @cached_property
    def lists(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The vectors in cluster order (a copy), where each lowest cluster's rows start, and each row's local
        number: built on the first search."""
        numbers = np.argsort(self.tree.parents[-1], kind="stable")
        starts = np.concatenate([[0], np.cumsum(self.cluster_sizes)]).astype(np.int64)
        return np.ascontiguousarray(self.vectors[numbers], np.float32), starts, numbers.astype(np.int64)

    def search(self, queries: np.ndarray, k: int, beam: int, hidden: np.ndarray | None = None, n_threads: int = 1
               ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` (scores, local numbers; ``-inf`` and -1 where fewer) among the documents of the lowest clusters
        each query reaches, but those ``hidden`` marks (bool [n_docs]: deleted), ties by local number; the queries
        shared out among ``n_threads`` threads (the compiled loops release the GIL)."""
        queries = np.ascontiguousarray(queries, np.float32)
        beam = min(beam, len(self.cluster_sizes))  # no wider than the clusters there are (its arrays are that wide)
        hidden = np.zeros(0, np.bool_) if hidden is None else hidden
        lists = self.lists  # (built here, before any thread needs it)
        scores = np.empty((len(queries), k), np.float32)
        local = np.empty((len(queries), k), np.int64)

        def run(lo: int, hi: int) -> int:
            clusters = self.tree.descend_many(queries[lo:hi], beam)  # -1 after a row's clusters
            scan_clusters(queries[lo:hi], *lists, clusters, hidden, scores[lo:hi], local[lo:hi])
            return int(self.cluster_sizes[clusters[clusters >= 0]].sum())

        if n_threads <= 1 or len(queries) <= 1:
            self.scored += run(0, len(queries))
        else:
            chunks = np.linspace(0, len(queries), min(n_threads, len(queries)) + 1).astype(int)
            with ThreadPoolExecutor(n_threads) as pool:
                self.scored += sum(pool.map(run, chunks[:-1], chunks[1:]))
        return scores, local

    def memory_bytes(self) -> int:
        """The centroids, the tree's links and the copy of the vectors in cluster order with their numbers."""
        vectors = len(self.vectors) * (self.vectors.shape[1] * 4 + 8)
        return sum(c.nbytes for c in self.tree.centroids) + sum(p.nbytes for p in self.tree.parents) + vectors


@kernel(fastmath=True)
def scan_clusters(queries, vectors, starts, numbers, clusters, hidden, out_scores, out_local):
    """For each query, its top ``out_scores.shape[1]`` by inner product among the rows of the clusters in its row of
    ``clusters`` (-1 ends it) whose local number ``hidden`` does not mark (empty: none hidden), best first, ties by
    local number, ``-inf`` and -1 after the last. Written by hand: a few hundred rows in a few dozen runs, where a
    library call per run costs more than its arithmetic."""
    k = out_scores.shape[1]
    heap_scores = np.empty(k, np.float32)
    heap_local = np.empty(k, np.int64)
    any_hidden = hidden.shape[0] > 0
    for q in range(queries.shape[0]):
        query = queries[q]
        size = 0
        for c in range(clusters.shape[1]):
            cluster = clusters[q, c]
            if cluster < 0:
                break
            for row in range(starts[cluster], starts[cluster + 1]):
                number = numbers[row]
                if any_hidden and hidden[number]:
                    continue
                total = np.float32(0.0)
                for d in range(query.shape[0]):
                    total += vectors[row, d] * query[d]
                if size < k or not ranks_below(total, number, heap_scores[0], heap_local[0]):
                    size = offer(heap_scores, heap_local, size, total, number)
        write_hits(heap_scores, heap_local, size, out_scores[q], out_local[q])
