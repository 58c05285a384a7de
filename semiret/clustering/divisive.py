"""GDR's cluster identifiers (Yuan et al., its Algorithm 1): divisive hierarchical k-means, top-down.

The corpus is split into ``k`` clusters, labelled 1..k; a cluster of at least ``c`` documents is split again,
recursively; a smaller one is a leaf, and every document in it gets the terminal symbol 0 after its labels.
A document's CID is the label sequence down to its leaf, so documents of one leaf share their CID, and the
terminal 0 makes sure no CID is a proper prefix of another. The tree is unbalanced: CIDs vary in length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from semiret import progress
from semiret.clustering.kmeans import ITERATIONS, check_branching, check_vectors, cluster_means, kmeans
from semiret.errors import SemiretError

TERMINAL = 0
BRANCHING = 30
"""k of the released GDR code (the paper does not give it)."""
EXPECTED_CLUSTERS = 5000
"""GDR's Exp(|CID|): the leaf-size threshold is ``c = |D| / 5000`` (Eq. 7)."""


def leaf_threshold(n_documents: int, expected_clusters: int = EXPECTED_CLUSTERS) -> int:
    """GDR's adaptive ``c = |D| / Exp(|CID|)``, rounded up and at least 2 (a single document is always a leaf)."""
    if expected_clusters < 1:
        raise SemiretError(f"the expected number of clusters must be positive, got {expected_clusters}")
    return max(2, math.ceil(n_documents / expected_clusters))


@dataclass(frozen=True)
class ClusterIds:
    """Each document's CID (labels 1..k per level, then the terminal 0) and each leaf's mean vector, which
    new documents are assigned by (GDR's incremental indexing: the nearest leaf)."""

    cids: tuple[tuple[int, ...], ...]
    leaf_centroids: dict[tuple[int, ...], np.ndarray]

    @cached_property
    def leaves(self) -> dict[tuple[int, ...], np.ndarray]:
        """CID -> the documents (row numbers) that share it."""
        members: dict[tuple[int, ...], list[int]] = {}
        for row, cid in enumerate(self.cids):
            members.setdefault(cid, []).append(row)
        return {cid: np.asarray(rows, np.int64) for cid, rows in members.items()}

    def paths(self) -> list[tuple[int, ...]]:
        return list(self.cids)

    def nearest_leaf(self, vectors: np.ndarray) -> list[tuple[int, ...]]:
        """The CID of the leaf whose mean is nearest (Euclidean, as the clustering) to each of ``vectors``."""
        cids = list(self.leaf_centroids)
        return [cids[j] for j in nearest_means(vectors, np.stack([self.leaf_centroids[c] for c in cids]))]


def nearest_means(vectors: np.ndarray, means: np.ndarray) -> np.ndarray:
    """The row of ``means`` nearest (Euclidean, as the clustering) to each of ``vectors``."""
    vectors = check_vectors(vectors, "new document embeddings")
    distances = (vectors ** 2).sum(1, keepdims=True) - 2 * vectors @ means.T + (means ** 2).sum(1)
    return distances.argmin(axis=1)


def per_document_ids(clusters: ClusterIds, vectors: np.ndarray, branching: int = BRANCHING) -> ClusterIds:
    """NCI-style document identifiers from ``clusters``: each document's labels, then its position in its
    leaf (1, 2, ...), then the terminal 0, so every document has an id of its own; each "leaf" is one document
    and its mean is the document's own vector. Positions must fit the labels: leaves of at most ``branching``."""
    vectors = check_vectors(vectors, "document embeddings")
    if len(vectors) != len(clusters.cids):
        raise SemiretError(f"{len(vectors)} vectors for {len(clusters.cids)} clustered documents")
    cids: list[tuple[int, ...]] = [()] * len(vectors)
    for cid, rows in clusters.leaves.items():
        for position, row in enumerate(rows.tolist(), start=1):
            cids[row] = cid[:-1] + (position, TERMINAL)
    longest = max(map(len, clusters.leaves.values()))
    if longest > branching:
        raise SemiretError(f"a leaf of {longest} documents has more positions than the {branching} labels: "
                           "lower the leaf size threshold")
    return ClusterIds(tuple(cids), {cid: vectors[row] for row, cid in enumerate(cids)})


def divisive_cluster_ids(vectors: np.ndarray, branching: int = BRANCHING, leaf_size: int | None = None,
                         seed: int = 7, iterations: int = ITERATIONS) -> ClusterIds:
    """GDR's GENERATECIDS over document ``vectors`` [N, dim] with Euclidean k-means (faiss, seed ``seed``).

    ``leaf_size`` is GDR's ``c`` (default :func:`leaf_threshold`): clusters of ``c`` or more documents are
    split again. A cluster that k-means cannot split (fewer than 2 documents, or all its documents in one
    cluster, as duplicates are) is a leaf; one with fewer than ``k`` documents is split into as many
    clusters as it has documents at most."""
    vectors = check_vectors(vectors, "document embeddings")
    n = len(vectors)
    check_branching(n, branching)
    threshold = leaf_threshold(n) if leaf_size is None else leaf_size
    if threshold < 1:
        raise SemiretError(f"the leaf size threshold must be positive, got {threshold}")
    cids: list[tuple[int, ...]] = [()] * n
    centroids: dict[tuple[int, ...], np.ndarray] = {}

    def leaves():
        pending = [((), np.arange(n))]
        while pending:
            prefix, rows = pending.pop()
            clusters = min(branching, len(rows))
            if prefix and (len(rows) < threshold or clusters < 2):
                yield prefix, rows
                continue
            _, assignment = kmeans(vectors[rows], clusters, seed + len(prefix), spherical=False,
                                   iterations=iterations)
            if assignment.max() == 0:  # one cluster: its centroids were seeded on copies of one row; the distinct rows
                distinct, copies = np.unique(vectors[rows], axis=0, return_inverse=True)  # are split, copies together
                if len(distinct) > 1:
                    _, assignment = kmeans(distinct, min(branching, len(distinct)), seed + len(prefix),
                                           spherical=False, iterations=iterations)
                    assignment = assignment[copies.reshape(-1)]
            if assignment.max() == 0 and prefix:  # k-means could not split it: copies of one vector
                yield prefix, rows
                continue
            for label in range(int(assignment.max()), -1, -1):
                pending.append((prefix + (label + 1,), rows[assignment == label]))

    for prefix, rows in progress.track(leaves(), f"clustering {n} documents (k={branching}, c={threshold})",
                                       total=n, advance=lambda leaf: len(leaf[1])):
        cid = prefix + (TERMINAL,)
        for row in rows.tolist():
            cids[row] = cid
        centroids[cid] = cluster_means(vectors[rows], np.zeros(len(rows), np.int64), spherical=False)[0]
    return ClusterIds(tuple(cids), centroids)
