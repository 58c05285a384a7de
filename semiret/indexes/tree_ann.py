"""The corpus hierarchy as the dense index's search structure (``--ann tree``), HCE's stated future work: an
equal-depth spherical k-means tree (:func:`semiret.clustering.agglomerative_tree`) over a segment's vectors;
a query descends it by beam search over the centroids and only the documents of the lowest clusters it
reaches are scored. The beam width trades recall for speed.

Each segment stores ``tree.npz``. The first segment clusters its own vectors; every later one (documents
added, a merge) keeps that tree's internal nodes and puts each of its documents in the nearest lowest cluster,
so new documents join the hierarchy without re-clustering.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from semiret.clustering import EqualDepthTree, agglomerative_tree
from semiret.clustering.equal_depth import members_of
from semiret.errors import IndexFormatError

TREE_FILE = "tree.npz"
BEAM = 8
"""Default beam width: clusters kept at each depth of the descent."""


def write_tree(directory: Path, vectors: np.ndarray, base: EqualDepthTree | None, branching: int | None) -> None:
    """The segment's tree: ``base``'s internal nodes with the vectors in their nearest lowest clusters, or,
    without a base, a new tree of the vectors (``branching`` default: the BEIR rule, depth 3)."""
    tree = base.with_documents(base.nearest_cluster(vectors)) if base is not None else \
        agglomerative_tree(vectors, branching)
    tree.save(directory / TREE_FILE)


class TreeSearch:
    """A segment's tree and vectors, searched by beam descent."""

    def __init__(self, path: Path, vectors: np.ndarray):
        tree_file = path / TREE_FILE
        if not tree_file.is_file():
            raise IndexFormatError(f"missing index file {tree_file}")
        self.tree = EqualDepthTree.load(tree_file)
        self.vectors = vectors
        self.offsets, self.members = self.tree.documents_under(self.tree.depth - 1)
        self.scored = 0
        """Documents scored by the searches so far (the share of the corpus a descent touches)."""

    def search(self, queries: np.ndarray, k: int, beam: int, deleted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` (scores, local numbers; -1 where fewer) among the live documents of the lowest clusters
        each query reaches."""
        scores = np.full((len(queries), k), -np.inf, np.float32)
        local = np.full((len(queries), k), -1, np.int64)
        for row, query in enumerate(queries):
            clusters = self.tree.descend(query, beam)
            candidates = np.sort(members_of(self.offsets, self.members, clusters))
            candidates = candidates[~deleted[candidates]]
            self.scored += len(candidates)
            found = np.asarray(self.vectors[candidates]) @ query
            top = np.argsort(-found, kind="stable")[:k]
            scores[row, : len(top)] = found[top]
            local[row, : len(top)] = candidates[top]
        return scores, local

    def memory_bytes(self) -> int:
        """The centroids and cluster lists (the vectors are memory-mapped, as exact search reads them)."""
        return sum(c.nbytes for c in self.tree.centroids) + sum(p.nbytes for p in self.tree.parents) + \
            self.members.nbytes + self.offsets.nbytes
