"""The corpus hierarchy as the dense index's search structure (``--ann tree``), HCE's stated future work: an
equal-depth spherical k-means tree (:func:`semiret.clustering.agglomerative_tree`) over a segment's vectors;
a query descends it by beam search over the centroids and only the documents of the lowest clusters it
reaches are scored. The beam width trades recall for speed.

Each segment stores ``tree.npz``. The first segment clusters its own vectors; every later one (documents
added, a merge) keeps that tree's internal nodes and puts each of its documents in the nearest lowest cluster,
so new documents join the hierarchy without re-clustering.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

import numpy as np

from semiret.clustering import EqualDepthTree, agglomerative_tree, branching_for_depth
from semiret.errors import IndexFormatError, SemiretError

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

    The descent is a compiled loop (:meth:`EqualDepthTree.descend_many`); the documents of the lowest clusters it reaches
    are scanned by faiss: the tree's lowest clusters are the inverted lists of an ``IndexIVFFlat`` filled with
    the tree's own assignment (never re-trained), searched with the descent's clusters in place of faiss's
    coarse quantizer (``search_preassigned``). faiss's list scan is what a numpy gather + product per query
    cannot match; like IVF it holds a copy of the vectors in list order."""

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
    def lists(self):
        """The faiss inverted lists: one per lowest cluster, built on the first search."""
        import faiss

        centroids = np.ascontiguousarray(self.tree.centroids[-1], np.float32)
        quantizer = faiss.IndexFlatIP(centroids.shape[1])
        quantizer.add(centroids)
        lists = faiss.IndexIVFFlat(quantizer, centroids.shape[1], len(centroids), faiss.METRIC_INNER_PRODUCT)
        lists.is_trained = True  # the tree's clusters are the lists: faiss's k-means never runs
        vectors = np.ascontiguousarray(self.vectors, np.float32)
        numbers = np.arange(len(vectors), dtype=np.int64)
        clusters = np.ascontiguousarray(self.tree.parents[-1], np.int64)
        lists.add_core(len(vectors), faiss.swig_ptr(vectors), faiss.swig_ptr(numbers), faiss.swig_ptr(clusters))
        return lists

    def search(self, queries: np.ndarray, k: int, beam: int, selector=None) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` (scores, local numbers; -1 where fewer) among the documents of the lowest clusters each
        query reaches that ``selector`` (a faiss ``IDSelector`` of the live documents, or None) admits."""
        import faiss

        queries = np.ascontiguousarray(queries, np.float32)
        beam = min(beam, len(self.cluster_sizes))  # no wider than the clusters there are (its arrays are that wide)
        # -1: no list, after a row's clusters; no wider than the most reached (faiss reads the rows with a stride
        # of min(nprobe, lists))
        clusters = np.ascontiguousarray(self.tree.descend_many(queries, beam))
        self.scored += int(self.cluster_sizes[clusters[clusters >= 0]].sum())
        scores = np.empty((len(queries), k), np.float32)
        local = np.empty((len(queries), k), np.int64)
        params = faiss.SearchParametersIVF(sel=selector, nprobe=clusters.shape[1])
        # the SWIG method itself: its Python wrapper insists on the index's own nprobe
        self.lists.search_preassigned_c(len(queries), faiss.swig_ptr(queries), k, faiss.swig_ptr(clusters),
                                        faiss.swig_ptr(np.zeros(clusters.shape, np.float32)),
                                        faiss.swig_ptr(scores), faiss.swig_ptr(local), False, params)
        return scores, local

    def memory_bytes(self) -> int:
        """The centroids, the tree's links and the inverted lists' copy of the vectors with their numbers."""
        vectors = len(self.vectors) * (self.vectors.shape[1] * 4 + 8)
        return sum(c.nbytes for c in self.tree.centroids) + sum(p.nbytes for p in self.tree.parents) + vectors
