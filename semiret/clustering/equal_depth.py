"""HCE's corpus hierarchy (Chen et al. 2025, Algorithms 1-2): agglomerative spherical k-means, bottom-up, into a
tree whose leaves (the documents) all sit at the same depth L.

Depth 0 is the root; depth ``L`` holds the ``N`` documents; depth ``l`` holds at most ``ceil(N / b^(L-l))``
nodes, each the spherical k-means cluster of nodes one level down, its vector the normalised mean of theirs.
``b`` (the branching) is an expected number of children, not an exact one. ``L = ceil(log_b N)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from semiret import progress
from semiret.clustering.kmeans import ITERATIONS, check_branching, check_vectors, kmeans, unit_rows
from semiret.compiled import kernel, select_largest
from semiret.errors import SemiretError


def members_of(offsets: np.ndarray, members: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """The members of ``nodes`` in a (offsets, members) grouping (:meth:`EqualDepthTree.children`,
    :meth:`EqualDepthTree.documents_under`), node after node, gathered without a Python loop."""
    starts, lengths = offsets[nodes], offsets[nodes + 1] - offsets[nodes]
    ends = np.cumsum(lengths)
    return members[np.repeat(starts - ends + lengths, lengths) + np.arange(ends[-1] if len(ends) else 0)]


def depth_for(n_documents: int, branching: int) -> int:
    """``ceil(log_b N)`` in integers: the smallest L with ``b^L >= N``."""
    if branching < 2:
        raise SemiretError(f"the branching factor must be at least 2, got {branching}")
    depth, capacity = 0, 1
    while capacity < n_documents:
        depth, capacity = depth + 1, capacity * branching
    return depth


def branching_for_depth(n_documents: int, depth: int = 3) -> int:
    """The paper's BEIR rule: the smallest power of two ``b`` whose tree over ``N`` documents has depth
    ``depth`` (b = 2^ceil(log2 N^(1/depth))); an error when no power of two gives exactly that depth."""
    if depth < 1:
        raise SemiretError(f"a tree needs a depth of at least 1, got {depth}")
    branching = 2
    while branching ** depth < n_documents:
        branching *= 2
    if depth_for(n_documents, branching) != depth:
        raise SemiretError(f"no power-of-two branching gives a tree of depth {depth} over {n_documents} documents "
                           f"(b = {branching} gives depth {depth_for(n_documents, branching)}): give the branching "
                           f"factor (--tree-branching when indexing, --branching when training)")
    return branching


@dataclass(frozen=True)
class EqualDepthTree:
    """A tree whose documents are all at depth L, with a vector for every internal node below the root.

    ``parents[t - 1][j]`` is the parent (a node number at depth ``t - 1``) of node ``j`` at depth ``t``, for
    t = 1..L; depth L's nodes are the documents, in the order of the clustered matrix. ``centroids[t - 1]``
    holds the unit vectors of depth ``t``'s nodes, t = 1..L-1."""

    branching: int
    parents: tuple[np.ndarray, ...]
    centroids: tuple[np.ndarray, ...]

    @property
    def depth(self) -> int:
        return len(self.parents)

    @property
    def n_documents(self) -> int:
        return len(self.parents[-1])

    def size(self, depth: int) -> int:
        """Nodes at ``depth`` (1 at the root, N at depth L)."""
        return 1 if depth == 0 else len(self.parents[depth - 1])

    @cached_property
    def ancestors(self) -> np.ndarray:
        """[N, L + 1] int64: column ``t`` is each document's ancestor at depth ``t`` (0 at the root, the document
        itself at depth L)."""
        columns = [np.arange(self.n_documents)]
        for parents in reversed(self.parents):
            columns.append(parents[columns[-1]])
        return np.stack(columns[::-1], axis=1).astype(np.int64)

    def documents_under(self, depth: int) -> tuple[np.ndarray, np.ndarray]:
        """(offsets [nodes + 1], documents) of the documents below each node at ``depth``: node ``j``'s are
        ``documents[offsets[j]:offsets[j + 1]]``."""
        owner = self.ancestors[:, depth]
        order = np.argsort(owner, kind="stable")
        offsets = np.concatenate([[0], np.cumsum(np.bincount(owner, minlength=self.size(depth)))])
        return offsets.astype(np.int64), order.astype(np.int64)

    def children(self, depth: int) -> tuple[np.ndarray, np.ndarray]:
        """(offsets [nodes + 1], children) of each node at ``depth`` (its nodes at depth + 1), as
        :meth:`documents_under` gives documents."""
        parents = self.parents[depth]
        order = np.argsort(parents, kind="stable")
        offsets = np.concatenate([[0], np.cumsum(np.bincount(parents, minlength=self.size(depth)))])
        return offsets.astype(np.int64), order.astype(np.int64)

    def descend(self, query: np.ndarray, beam: int) -> np.ndarray:
        """The lowest clusters (nodes at depth L-1) a beam search of width ``beam`` reaches for one query
        vector: at each depth the children of the nodes kept so far are scored by inner product with their
        centroids and the best ``beam`` kept."""
        reached = self.descend_many(query[None, :], beam)[0]
        return reached[reached >= 0]

    def descend_many(self, queries: np.ndarray, beam: int) -> np.ndarray:
        """:meth:`descend` for each row of ``queries`` [n, d]: [n, w] lowest clusters, w <= ``beam`` the most
        any row reached, -1 past the end of a row that reached fewer."""
        if beam < 1:
            raise SemiretError(f"the beam width must be at least 1, got {beam}")
        width = self.centroids[0].shape[1] if self.centroids else None
        if np.ndim(queries) != 2 or (width is not None and np.shape(queries)[1] != width):
            raise SemiretError(f"query vectors of shape {np.shape(queries)} for a tree of {width}-dimensional "
                               "centroids: give [n, d] vectors of its dimension")
        queries = np.ascontiguousarray(queries, np.float32)
        if not np.isfinite(queries).all():  # (the compiled descent assumes finite scores: fastmath)
            bad = int(np.flatnonzero(~np.isfinite(queries).all(axis=1))[0])
            raise SemiretError(f"query vector {bad} holds NaN or infinite values: the tree cannot be descended by it")
        reached = np.full((len(queries), beam), -1, np.int64)
        if self.depth == 1:  # one level: the documents hang from the root, the only lowest cluster
            reached[:, 0] = 0
            return reached[:, :1]
        centroids, first, offsets, children = self._descent_layout
        widest = descent_kernel(queries, centroids, first, offsets, children, beam, reached)
        return reached[:, :widest]

    @cached_property
    def _descent_layout(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The internal nodes numbered globally (root 0, then depth 1's, ...): their centroids [nodes, d] (the
        root's row unused), the first global number of each depth, and each node's children as global numbers
        (offsets, children), for :func:`descent_kernel`."""
        sizes = [self.size(t) for t in range(self.depth)]
        first = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        width = self.centroids[0].shape[1] if self.centroids else 0
        centroids = np.concatenate([np.zeros((1, width), np.float32)] +
                                   [np.asarray(c, np.float32) for c in self.centroids]).astype(np.float32)
        offsets, children = [np.zeros(1, np.int64)], []
        for t in range(self.depth - 1):  # the nodes of depth t, whose children are at depth t + 1
            local_offsets, local_children = self._children[t]
            offsets.append(local_offsets[1:] + offsets[-1][-1])
            children.append(local_children + first[t + 1])
        return (np.ascontiguousarray(centroids), first,
                np.concatenate(offsets).astype(np.int64), np.concatenate(children).astype(np.int64))

    def nearest_cluster(self, vectors: np.ndarray) -> np.ndarray:
        """The lowest cluster (a node at depth L-1) of largest inner product with each of ``vectors``: where
        a document added after clustering joins the tree."""
        vectors = check_vectors(vectors, "new document embeddings")
        if not self.centroids:  # one level: the root is the only lowest cluster
            return np.zeros(len(vectors), np.int64)
        return np.argmax(vectors @ self.centroids[-1].T, axis=1)

    def with_documents(self, clusters: np.ndarray) -> EqualDepthTree:
        """This tree's internal nodes over other documents, given each one's lowest cluster."""
        return EqualDepthTree(self.branching, self.parents[:-1] + (np.asarray(clusters, np.int64),), self.centroids)

    @cached_property
    def _children(self) -> list[tuple[np.ndarray, np.ndarray]]:
        return [self.children(t) for t in range(self.depth - 1)]

    def paths(self) -> list[tuple[int, ...]]:
        """Each document's root path (its ancestors at depths 1..L): two documents share a prefix exactly as
        long as the depth of their lowest common ancestor."""
        return [tuple(row) for row in self.ancestors[:, 1:].tolist()]

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path) -> None:
        arrays = {"branching": np.asarray(self.branching)}
        arrays.update({f"parents_{t}": p for t, p in enumerate(self.parents, 1)})
        arrays.update({f"centroids_{t}": c for t, c in enumerate(self.centroids, 1)})
        target = Path(path)
        staged = target.with_name(target.name + ".tmp-npz")
        with open(staged, "wb") as handle:
            np.savez(handle, **arrays)
        staged.replace(target)

    @classmethod
    def load(cls, path: str | Path) -> EqualDepthTree:
        with np.load(path) as saved:
            depth = sum(1 for name in saved.files if name.startswith("parents_"))
            return cls(int(saved["branching"]), tuple(saved[f"parents_{t}"] for t in range(1, depth + 1)),
                       tuple(saved[f"centroids_{t}"] for t in range(1, depth)))


def agglomerative_tree(vectors: np.ndarray, branching: int | None = None, seed: int = 0,
                       iterations: int = ITERATIONS) -> EqualDepthTree:
    """HCE's HierAggCluster over document ``vectors`` [N, dim]: cluster the documents into ``ceil(N / b)``
    nodes, those into ``ceil(nodes / b)``, ... up to one root, each step a spherical k-means
    (:func:`~semiret.clustering.kmeans.kmeans`, seeded with ``seed`` + depth).

    ``branching`` default: the paper's BEIR rule, the smallest power of two giving depth 3
    (:func:`branching_for_depth`). A cluster that ends empty is dropped (its level has fewer nodes); the
    depth stays L. Bad input (b < 2, fewer documents than b) fails before any clustering."""
    vectors = check_vectors(vectors, "document embeddings")
    n = len(vectors)
    if branching is None:
        branching = branching_for_depth(n)
    check_branching(n, branching)
    depth = depth_for(n, branching)
    level = unit_rows(vectors)
    parents: list[np.ndarray] = []
    centroids: list[np.ndarray] = []
    for t in progress.track(range(depth - 1, -1, -1), f"clustering {n} documents (b={branching}, L={depth})",
                            total=depth):
        clusters = -(-len(level) // branching) if t else 1
        level, assignment = kmeans(level, clusters, seed + t, spherical=True, iterations=iterations)
        parents.insert(0, assignment)
        if t:
            centroids.insert(0, level)
    return EqualDepthTree(branching, tuple(parents), tuple(centroids))


@kernel(fastmath=True)
def descent_kernel(queries, centroids, first, offsets, children, beam, reached):
    """Beam descent of each query over the tree laid out by ``EqualDepthTree._descent_layout``; writes the
    lowest clusters reached (local numbers at depth L-1) into ``reached`` [n, beam] and returns the most any
    query reached. A compiled loop: the numpy version spent its time in a dozen small array calls per depth
    (0.45 ms a SciFact query against IVF's 0.23), where the arithmetic is a few thousand multiply-adds."""
    depths = len(first) - 1  # internal depths 0..L-1
    most = beam * (offsets[1:] - offsets[:-1]).max()
    kept = np.zeros(max(beam, 1), np.int64)
    candidates = np.empty(max(most, 1), np.int64)
    scores = np.empty(max(most, 1), np.float32)
    work = np.empty(max(most, 1), np.float32)  # the scores reordered by the selection
    widest = 1
    for q in range(queries.shape[0]):
        query = queries[q]
        kept[0] = 0
        n_kept = 1
        for _ in range(1, depths):
            n = 0
            for i in range(n_kept):
                for j in range(offsets[kept[i]], offsets[kept[i] + 1]):
                    candidates[n] = children[j]
                    n += 1
            if n > beam:
                for i in range(n):
                    row = centroids[candidates[i]]
                    total = np.float32(0.0)
                    for d in range(row.shape[0]):
                        total += row[d] * query[d]
                    scores[i] = total
                    work[i] = total
                # the beam best by a selection, not a sort: those above the beam-th score, then ties with it
                select_largest(work, n, beam - 1)
                threshold = work[beam - 1]
                n_kept = 0
                for i in range(n):
                    if scores[i] > threshold:
                        kept[n_kept] = candidates[i]
                        n_kept += 1
                for i in range(n):
                    if n_kept == beam:
                        break
                    if scores[i] == threshold:
                        kept[n_kept] = candidates[i]
                        n_kept += 1
            else:
                kept[:n] = candidates[:n]
                n_kept = n
        for i in range(n_kept):
            reached[q, i] = kept[i] - first[depths - 1]
        widest = max(widest, n_kept)
    return widest
