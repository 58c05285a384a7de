"""The shared corpus hierarchies: HCE's equal-depth agglomerative tree, GDR's divisive cluster ids, O_pre."""

from __future__ import annotations

import math

import numpy as np
import pytest

from semiret.clustering import (TERMINAL, EqualDepthTree, agglomerative_tree, branching_for_depth, depth_for,
                                divisive_cluster_ids, kmeans, leaf_threshold, prefix_overlap)
from semiret.errors import SemiretError


def planted(groups: int, per_group: int, dim: int = 16, noise: float = 0.05, seed: int = 0) -> np.ndarray:
    """``groups`` tight groups of ``per_group`` vectors each, group after group."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(groups, dim))
    return np.concatenate([c + noise * rng.normal(size=(per_group, dim)) for c in centers]).astype(np.float32)


@pytest.mark.parametrize("n, branching", [(5183, 32), (3633, 16), (1_000_000, 128), (8674, 32), (50, 4)])
def test_the_beir_rule_is_the_smallest_power_of_two_giving_depth_three(n, branching):
    assert branching_for_depth(n) == branching  # the paper's table: SciFact 32, NFCorpus 16, 1M docs 128
    assert depth_for(n, branching) == 3 and depth_for(n, branching // 2) > 3


def test_a_depth_no_power_of_two_gives_is_an_error():
    for n in (4, 9):  # b = 2 gives depths 2 and 4, b = 4 gives 1 and 2
        with pytest.raises(SemiretError, match="depth 3"):
            branching_for_depth(n)


def test_the_agglomerative_tree_has_equal_depth_and_the_papers_level_sizes():
    vectors = planted(40, 25)
    tree = agglomerative_tree(vectors, branching=8)
    n = len(vectors)
    assert tree.depth == math.ceil(math.log(n, 8)) == 4
    assert [tree.size(t) for t in range(5)] == [1] + [math.ceil(n / 8 ** (4 - t)) for t in range(1, 5)]
    ancestors = tree.ancestors
    assert ancestors.shape == (n, 5) and (ancestors[:, 0] == 0).all() and (ancestors[:, 4] == np.arange(n)).all()
    for t in range(1, 5):  # the ancestor at depth t - 1 is the parent of the ancestor at depth t
        assert (tree.parents[t - 1][ancestors[:, t]] == ancestors[:, t - 1]).all()
        assert (np.bincount(tree.parents[t - 1], minlength=tree.size(t - 1)) > 0).all()  # no childless node


def test_node_vectors_are_the_normalised_means_of_their_children():
    vectors = planted(12, 10)
    tree = agglomerative_tree(vectors, branching=4)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    below = [None] + list(tree.centroids) + [unit]
    for t in range(1, tree.depth):
        means = np.stack([below[t + 1][tree.parents[t] == j].sum(0) for j in range(tree.size(t))])
        np.testing.assert_allclose(tree.centroids[t - 1], means / np.linalg.norm(means, axis=1, keepdims=True),
                                   atol=1e-5)


def test_documents_of_a_planted_group_share_their_lowest_cluster():
    vectors = planted(30, 8, noise=0.01)
    tree = agglomerative_tree(vectors, branching=8)  # 240 docs -> 30 lowest clusters, one per group
    lowest = tree.ancestors[:, tree.depth - 1].reshape(30, 8)
    whole = (lowest == lowest[:, :1]).all(axis=1)
    assert whole.mean() >= 0.8  # k-means from random rows may merge a few groups (a local optimum), not more


def test_the_tree_is_fixed_by_its_seed_and_survives_saving(tmp_path):
    vectors = planted(10, 30, noise=1.0)
    tree = agglomerative_tree(vectors, branching=4, seed=3)
    again = agglomerative_tree(vectors, branching=4, seed=3)
    assert all(np.array_equal(a, b) for a, b in zip(tree.parents, again.parents))
    tree.save(tmp_path / "tree.npz")
    loaded = EqualDepthTree.load(tmp_path / "tree.npz")
    assert loaded.branching == 4 and np.array_equal(loaded.ancestors, tree.ancestors)
    assert all(np.array_equal(a, b) for a, b in zip(loaded.centroids, tree.centroids))


def test_documents_under_a_node_are_its_subtree():
    tree = agglomerative_tree(planted(6, 10), branching=4)
    offsets, documents = tree.documents_under(1)
    for node in range(tree.size(1)):
        assert set(documents[offsets[node]: offsets[node + 1]]) == set(np.flatnonzero(tree.ancestors[:, 1] == node))


def test_empty_clusters_are_dropped():
    duplicates = np.ones((10, 4), np.float32)
    centroids, assignment = kmeans(duplicates, 3, seed=0, spherical=True)
    assert len(centroids) == 1 and (assignment == 0).all()
    tree = agglomerative_tree(np.concatenate([duplicates, planted(2, 3, dim=4)]), branching=2)
    assert all((np.bincount(p) > 0).all() for p in tree.parents)


@pytest.mark.parametrize("vectors, branching, message", [
    (np.ones((10, 4), np.float32), 1, "at least 2"),
    (np.ones((3, 4), np.float32), 4, "smaller than the branching"),
    (np.full((10, 4), np.nan, np.float32), 2, "NaN"),
    (np.ones(10, np.float32), 2, r"\[n, dim\]"),
])
def test_bad_input_fails_before_any_clustering(monkeypatch, vectors, branching, message):
    import semiret.clustering.divisive as divisive
    import semiret.clustering.equal_depth as equal_depth

    def no_compute(*args, **kwargs):
        raise AssertionError("k-means ran on bad input")

    monkeypatch.setattr(equal_depth, "kmeans", no_compute)
    monkeypatch.setattr(divisive, "kmeans", no_compute)
    with pytest.raises(SemiretError, match=message):
        agglomerative_tree(vectors, branching=branching)
    with pytest.raises(SemiretError, match=message):
        divisive_cluster_ids(vectors, branching=branching)


def test_cluster_ids_end_in_the_terminal_and_none_is_a_prefix_of_another():
    vectors = planted(20, 12, noise=0.5)
    ids = divisive_cluster_ids(vectors, branching=4, leaf_size=10)
    distinct = set(ids.cids)
    assert all(cid[-1] == TERMINAL and all(1 <= label <= 4 for label in cid[:-1]) for cid in distinct)
    assert not any(a != b and b[: len(a)] == a for a in distinct for b in distinct)
    assert len({len(c) for c in distinct}) > 1  # unbalanced: lengths vary
    assert all(len(rows) < 10 for rows in ids.leaves.values())  # every big cluster was split again
    assert sum(len(rows) for rows in ids.leaves.values()) == len(vectors)


def test_a_cluster_k_means_cannot_split_is_a_leaf():
    vectors = np.concatenate([np.zeros((50, 4)), planted(3, 10, dim=4)]).astype(np.float32)
    ids = divisive_cluster_ids(vectors, branching=3, leaf_size=2)  # 50 duplicates cannot be split: no endless loop
    assert len(set(ids.cids[:50])) == 1


def test_a_cluster_of_distinct_vectors_k_means_seeded_on_copies_is_split_still():
    """faiss seeded both centroids on copies of one row and returned one cluster: a cluster of 8 documents with 3
    distinct vectors became a leaf though c = 2. Its distinct vectors are clustered instead, copies kept together."""
    group = np.array([[0, -1, -2]] * 2 + [[0, 0, -2]] * 4 + [[0, 1, -2]] * 2, np.float32)
    vectors = np.concatenate([group, group + np.float32(100)])
    for seed in range(6):
        ids = divisive_cluster_ids(vectors, branching=2, leaf_size=2, seed=seed)
        for cid, rows in ids.leaves.items():
            assert len(rows) < 2 or len(np.unique(vectors[rows], axis=0)) == 1, (seed, cid, rows)


def test_a_tree_refuses_queries_of_another_dimension_and_k_means_no_iterations_and_one_of_depth_1_descends():
    """The compiled descent read as many values as the centroids have from each query row: a shorter query read
    the next row's (other clusters by what followed it), a longer one was cut; k-means ran no iterations. A tree of one level (as many
    documents as the branching) failed in its descent and its nearest cluster."""
    rng = np.random.default_rng(0)
    tree = agglomerative_tree(rng.normal(size=(300, 16)).astype(np.float32), branching=4)
    for shape in ((3, 4), (3, 64), (16,)):
        with pytest.raises(SemiretError, match="16-dimensional"):
            tree.descend_many(rng.normal(size=shape).astype(np.float32), 2)
    for iterations in (0, -1):  # accepted by both trees' builders
        with pytest.raises(SemiretError, match="at least 1 iteration"):
            kmeans(rng.normal(size=(20, 4)).astype(np.float32), 3, seed=0, spherical=False, iterations=iterations)
    flat = agglomerative_tree(rng.normal(size=(4, 3)).astype(np.float32), branching=4)
    assert flat.depth == 1
    assert flat.descend(np.ones(3, np.float32), 2).tolist() == [0]
    assert flat.nearest_cluster(np.ones((2, 3), np.float32)).tolist() == [0, 0]


def test_new_documents_join_the_nearest_leaf():
    vectors = planted(8, 10, noise=0.01)
    ids = divisive_cluster_ids(vectors, branching=4, leaf_size=12)
    assert ids.nearest_leaf(vectors[[5, 75]] + 0.001) == [ids.cids[5], ids.cids[75]]


def test_the_adaptive_leaf_threshold():
    assert leaf_threshold(334_314) == 67 and leaf_threshold(1_000_000) == 200 and leaf_threshold(100) == 2


class FixedPaths:
    def __init__(self, paths):
        self._paths = paths

    def paths(self):
        return self._paths


def test_prefix_overlap_by_hand():
    tree = FixedPaths([(1, 2, 0), (1, 3, 0), (2, 0), (1, 2, 0)])
    ids = ["a", "b", "c", "d"]
    # q1: a, b -> pairs (a,a)=1, (a,b)=1/3, (b,a)=1/3, (b,b)=1 -> 8/3 / 4; q2: a, d share a leaf -> 1
    assert prefix_overlap(tree, ids, {"q1": {"a": 1, "b": 1, "x": 1}, "q2": {"a": 2, "d": 1, "c": 0}}) == \
        pytest.approx((2 / 3 + 1) / 2)
    with pytest.raises(SemiretError, match="no query"):
        prefix_overlap(tree, ids, {"q": {"x": 1}})


def test_a_tree_that_follows_the_judgements_overlaps_more():
    vectors = planted(10, 10, noise=0.01)
    ids = [str(i) for i in range(len(vectors))]
    together = {f"q{g}": {str(g * 10 + j): 1 for j in range(3)} for g in range(10)}
    apart = {f"q{g}": {str(g * 10): 1, str(((g + 5) % 10) * 10): 1} for g in range(10)}
    tree = agglomerative_tree(vectors, branching=4)
    assert prefix_overlap(tree, ids, together) > prefix_overlap(tree, ids, apart) + 0.1


def test_a_wide_beam_reaches_every_cluster_and_a_narrow_one_the_nearest():
    vectors = planted(16, 12, noise=0.02)
    tree = agglomerative_tree(vectors, branching=4)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    lowest = tree.size(tree.depth - 1)
    assert sorted(tree.descend(unit[0], beam=lowest)) == list(range(lowest))
    reached = [tree.ancestors[i, tree.depth - 1] in tree.descend(unit[i], beam=2) for i in range(len(unit))]
    assert np.mean(reached) > 0.95  # each document's own cluster, found by its own vector
    with pytest.raises(SemiretError, match="beam"):
        tree.descend(unit[0], beam=0)


@pytest.mark.parametrize("beam", [1, 3, 8, 1000])
def test_the_compiled_descent_keeps_the_best_children_at_every_depth(beam):
    """descend_many against the textbook beam search written in numpy, query by query."""
    from semiret.clustering.equal_depth import members_of

    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(300, 8)).astype(np.float32)
    tree = agglomerative_tree(vectors, branching=3)
    queries = rng.normal(size=(12, 8)).astype(np.float32)

    def textbook(query):
        kept = np.zeros(1, np.int64)
        for depth in range(1, tree.depth):
            candidates = members_of(*tree.children(depth - 1), kept)
            scores = tree.centroids[depth - 1][candidates] @ query
            kept = candidates[np.argsort(-scores)[:beam]]
        return sorted(kept.tolist())

    reached = tree.descend_many(queries, beam)
    assert reached.shape == (12, min(beam, tree.size(tree.depth - 1)))
    for query, row in zip(queries, reached):
        assert sorted(row[row >= 0].tolist()) == textbook(query)
        assert np.all(row[: (row >= 0).sum()] >= 0)  # the clusters first, then -1


def test_a_query_vector_with_nan_or_inf_is_refused_not_descended():
    """The compiled descent assumes finite scores (fastmath): a NaN query ran its selection past the array's end
    (a crash); inf gives NaN scores too."""
    tree = agglomerative_tree(planted(8, 10, noise=0.01), branching=4)
    for bad in (np.nan, np.inf):
        queries = np.ones((3, tree.centroids[0].shape[1]), np.float32)
        queries[1, 2] = bad
        with pytest.raises(SemiretError, match="query vector 1 holds NaN or infinite"):
            tree.descend_many(queries, 2)


def test_documents_added_later_join_their_nearest_lowest_cluster():
    vectors = planted(8, 10, noise=0.01)
    tree = agglomerative_tree(vectors, branching=4)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    clusters = tree.nearest_cluster(unit[[3, 42, 77]] + 0.001)
    assert list(clusters) == list(tree.ancestors[[3, 42, 77], tree.depth - 1])
    grown = tree.with_documents(clusters)
    assert grown.n_documents == 3 and grown.depth == tree.depth
    assert list(grown.ancestors[:, 1]) == list(tree.ancestors[[3, 42, 77], 1])
    offsets, children = tree.children(0)
    assert offsets[-1] == tree.size(1) and sorted(children) == list(range(tree.size(1)))


def test_members_of_gathers_groups_in_order():
    from semiret.clustering.equal_depth import members_of

    offsets, members = np.array([0, 2, 2, 5]), np.array([7, 8, 1, 2, 3])
    assert members_of(offsets, members, np.array([2, 0, 1])).tolist() == [1, 2, 3, 7, 8]
    assert members_of(offsets, members, np.array([], np.int64)).tolist() == []
