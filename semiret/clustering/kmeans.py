"""One k-means call for every tree builder: faiss, seeded, spherical or Euclidean, with one rule for empty
clusters, and checks of the vectors before any compute."""

from __future__ import annotations

import numpy as np

from semiret.errors import SemiretError

ITERATIONS = 50
"""Lloyd iterations per k-means (HCE reports convergence within 256 on every corpus; 50 suffices for ours)."""


def check_vectors(vectors: np.ndarray, what: str = "embeddings") -> np.ndarray:
    """``vectors`` as a C-contiguous float32 [n, dim] matrix; errors for other shapes, no rows, NaN or inf."""
    array = np.ascontiguousarray(vectors, dtype=np.float32)
    if array.ndim != 2 or array.shape[0] == 0 or array.shape[1] == 0:
        raise SemiretError(f"{what} must be a non-empty [n, dim] matrix, got shape {array.shape}")
    if not np.isfinite(array).all():
        raise SemiretError(f"{what} hold NaN or infinite values")
    return array


def check_branching(n: int, branching: int) -> None:
    """Refuse a tree's branching factor below 2, or above the ``n`` documents it would split."""
    if branching < 2:
        raise SemiretError(f"the branching factor must be at least 2, got {branching}")
    if n < branching:
        raise SemiretError(f"a corpus of {n} documents is smaller than the branching factor {branching}")


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero)."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.maximum(norms, 1e-12)).astype(np.float32)


def kmeans(vectors: np.ndarray, k: int, seed: int, spherical: bool, iterations: int = ITERATIONS
           ) -> tuple[np.ndarray, np.ndarray]:
    """(centroids [k', dim], assignment [n] in 0..k'-1) of ``vectors`` in at most ``k`` clusters.

    ``spherical``: Dhillon & Modha's spherical k-means (HCE's Algorithm 2): the rows are put on the unit
    sphere, centroids are normalised means, each row goes to the centroid of largest inner product. Else
    plain Euclidean k-means (GDR's). faiss initialises with ``k`` distinct random rows (HCE's paper draws a
    random assignment instead, which starts every centroid near the global mean) and re-seeds clusters that
    empty during training by splitting large ones. The returned centroids are the means of the final clusters.

    Empty clusters: a cluster left empty by the final assignment is dropped and the others renumbered in
    order, so every returned cluster has at least one member (``k' <= k``).
    """
    import faiss

    n, dim = vectors.shape
    if not 1 <= k <= n:
        raise SemiretError(f"cannot make {k} clusters of {n} vectors")
    if iterations < 1:
        raise SemiretError(f"k-means needs at least 1 iteration, got {iterations}")
    points = unit_rows(vectors) if spherical else np.ascontiguousarray(vectors, dtype=np.float32)
    if k == 1:
        assignment = np.zeros(n, np.int64)
        return cluster_means(points, assignment, spherical), assignment
    clustering = faiss.Kmeans(dim, k, niter=iterations, seed=seed, spherical=spherical, min_points_per_centroid=1,
                              max_points_per_centroid=max(256, n // k + 1))
    clustering.train(points)
    if spherical:
        _, nearest = faiss.knn(points, clustering.centroids, 1, metric=faiss.METRIC_INNER_PRODUCT)
    else:
        _, nearest = clustering.index.search(points, 1)
    _, assignment = np.unique(nearest[:, 0], return_inverse=True)
    return cluster_means(points, assignment, spherical), assignment.astype(np.int64)


def cluster_means(points: np.ndarray, assignment: np.ndarray, spherical: bool) -> np.ndarray:
    """Each cluster's mean of its members (normalised when ``spherical``): node vectors that agree with the
    final assignment, not with the one before the last update."""
    order = np.argsort(assignment, kind="stable")
    counts = np.bincount(assignment)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    means = np.add.reduceat(points[order].astype(np.float64), starts, axis=0) / counts[:, None]
    return unit_rows(means) if spherical else means.astype(np.float32)
