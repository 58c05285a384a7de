"""The dense index: exact and faiss search, add, delete, merge, persistence, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from semiret.data.collection import Document
from semiret.errors import IndexFormatError, SemiretError
from semiret.indexes import open_index
from semiret.indexes.dense import ANN_TYPES, DenseIndex
from semiret.types import Embeddings

DIM = 16


def unit_vectors(n: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def embeddings(vectors: np.ndarray, prefix: str = "d") -> Embeddings:
    ids = [f"{prefix}{i}" for i in range(len(vectors))]
    return Embeddings(ids, vectors, [Document(i, f"text of {i}") for i in ids])


def brute_force(vectors: np.ndarray, ids: list[str], queries: np.ndarray, k: int) -> list[list[str]]:
    scores = queries @ vectors.T
    return [[ids[j] for j in np.argsort(-row, kind="stable")[:k]] for row in scores]


@pytest.fixture
def corpus():
    return unit_vectors(600, seed=0)


@pytest.mark.parametrize("ann", ANN_TYPES)
def test_search_matches_brute_force(tmp_path, corpus, ann):
    index = DenseIndex.build(tmp_path / ann, "dense", [embeddings(corpus[:350]), embeddings(corpus[350:], "e")],
                             dim=DIM, analyzer={"type": "test"}, ann=ann)
    ids = [f"d{i}" for i in range(350)] + [f"e{i}" for i in range(250)]
    queries = unit_vectors(20, seed=1)
    hits = DenseIndex.open(tmp_path / ann).search(queries, k=10, nprobe=1000, ef_search=600, beam=1000,
                                                  rescore=60)  # (binary: all 600 documents re-scored)
    expected = brute_force(corpus, ids, queries, 10)
    recall = np.mean([len(set(h) & set(e)) / 10 for h, e in zip(hits.ids, expected)])
    assert recall == 1.0 if ann in ("exact", "flat") else recall > 0.95
    assert all(np.all(np.diff(s) <= 1e-6) for s in hits.scores)


@pytest.mark.parametrize("ann", ANN_TYPES)
def test_add_delete_merge_reopen(tmp_path, corpus, ann):
    index = DenseIndex.build(tmp_path / "idx", "dense", [embeddings(corpus[:300])], dim=DIM,
                             analyzer={"type": "test"}, ann=ann)
    query = corpus[5:6]
    assert index.search(query, k=1).ids == [["d5"]]
    assert index.delete(["d5", "d5"]) == 1
    assert "d5" not in index and index.search(query, k=3).ids[0][0] != "d5"
    with pytest.raises(SemiretError, match="no such document"):
        index.delete(["d5"])
    assert index.add(Embeddings(["new"], corpus[5:6], [Document("new", "added")])) == 1
    reopened = DenseIndex.open(tmp_path / "idx")
    assert reopened.search(query, k=1).ids == [["new"]]
    assert reopened.n_docs == 300 and reopened.describe()["deleted"] == 1
    assert reopened.get_document("new").text == "added"
    np.testing.assert_array_equal(reopened.get_vector("d7"), corpus[7])
    with pytest.raises(SemiretError, match="already in"):
        reopened.add(Embeddings(["d6"], corpus[6:7]))
    reopened.add(Embeddings(["d6"], corpus[9:10]), replace=True)
    assert set(reopened.search(corpus[9:10], k=2).ids[0]) == {"d9", "d6"}  # d6 now holds d9's vector
    reopened.merge()
    merged = DenseIndex.open(tmp_path / "idx")
    assert len(merged.segments) == 1 and merged.n_docs == 300 and merged.describe()["deleted"] == 0
    assert merged.search(query, k=1).ids == [["new"]]


def test_empty_queries_and_bad_input(tmp_path, corpus):
    index = DenseIndex.build(tmp_path / "idx", "dense", [embeddings(corpus[:20])], dim=DIM, analyzer={})
    hits = index.search(np.vstack([np.zeros(DIM, np.float32), corpus[3]]), k=2)
    assert hits.ids[0] == [] and hits.ids[1][0] == "d3"
    with pytest.raises(SemiretError, match=r"queries must be a \[n, 16\] array"):
        index.search(np.zeros((1, 8), np.float32))
    with pytest.raises(SemiretError, match="vectors of dimension 16"):
        index.add(Embeddings(["x"], np.zeros((1, 4), np.float32)))
    with pytest.raises(SemiretError, match="finite"):
        index.add(Embeddings(["x"], np.full((1, DIM), np.nan, np.float32)))
    with pytest.raises(SemiretError, match="duplicate document id 'x'"):
        index.add(Embeddings(["x", "x"], corpus[:2]))
    with pytest.raises(SemiretError, match="unknown dense search structure 'lsh'"):
        DenseIndex.build(tmp_path / "other", "dense", [], dim=DIM, analyzer={}, ann="lsh")
    with pytest.raises(IndexFormatError, match="already exists"):
        DenseIndex.build(tmp_path / "idx", "dense", [], dim=DIM, analyzer={})


def test_open_index_dispatches_on_format(tmp_path, corpus):
    DenseIndex.build(tmp_path / "dense", "dense", [embeddings(corpus[:10])], dim=DIM, analyzer={}, ann="hnsw")
    opened = open_index(tmp_path / "dense")
    assert isinstance(opened, DenseIndex) and opened.meta["ann"] == "hnsw"
    with pytest.raises(IndexFormatError, match="nowhere: no such index directory"):
        open_index(tmp_path / "nowhere")


def test_sizes_are_reported(tmp_path, corpus):
    figures = {}
    for ann in ANN_TYPES:
        index = DenseIndex.build(tmp_path / ann, "dense", [embeddings(corpus)], dim=DIM, analyzer={}, ann=ann,
                                 store_texts=False)
        figures[ann] = index.describe()
    assert figures["exact"]["memory_bytes"] == corpus.nbytes
    assert figures["hnsw"]["memory_bytes"] > figures["flat"]["memory_bytes"] >= corpus.nbytes
    assert figures["ivf"]["size_bytes"] > figures["exact"]["size_bytes"]


def clustered(n: int, groups: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centers = unit_vectors(groups, seed + 100)
    vectors = centers[rng.integers(0, groups, n)] + 0.1 * rng.standard_normal((n, DIM)).astype(np.float32)
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def test_the_tree_beam_trades_scored_documents_for_recall(tmp_path):
    corpus = clustered(2000, 40, seed=0)
    index = DenseIndex.build(tmp_path / "tree", "dense", [embeddings(corpus)], dim=DIM, analyzer={}, ann="tree")
    queries = clustered(50, 40, seed=1)
    expected = brute_force(corpus, [f"d{i}" for i in range(2000)], queries, 10)
    (segment,) = index.segments
    figures = []
    for beam in (1, 4, 16):
        segment.tree.scored = 0
        hits = index.search(queries, k=10, beam=beam)
        recall = np.mean([len(set(h) & set(e)) / 10 for h, e in zip(hits.ids, expected)])
        figures.append((recall, segment.tree.scored / len(queries) / len(corpus)))
    assert figures[0][1] < figures[1][1] < figures[2][1] < 0.5  # a descent scores a share of the corpus
    assert figures[0][0] <= figures[1][0] <= figures[2][0] and figures[2][0] > 0.9


def test_documents_added_to_a_tree_index_join_its_nearest_clusters(tmp_path):
    corpus = clustered(600, 20, seed=0)
    index = DenseIndex.build(tmp_path / "tree", "dense", [embeddings(corpus[:500])], dim=DIM, analyzer={},
                             ann="tree", tree_branching=8)
    index.add(embeddings(corpus[500:], "new"))
    first, added = (s.tree.tree for s in DenseIndex.open(tmp_path / "tree").segments)
    assert first.branching == added.branching == 8 and added.n_documents == 100
    assert all(np.array_equal(a, b) for a, b in zip(first.centroids, added.centroids))
    assert all(np.array_equal(a, b) for a, b in zip(first.parents[:-1], added.parents[:-1]))
    assert list(added.parents[-1]) == list(first.nearest_cluster(corpus[500:]))
    assert index.search(corpus[550:551], k=1, beam=2).ids == [["new50"]]
    with pytest.raises(SemiretError, match="at least 2"):
        DenseIndex.build(tmp_path / "bad", "dense", [], dim=DIM, analyzer={}, ann="tree", tree_branching=1)


def test_a_tree_search_is_exact_over_the_clusters_it_reaches_and_skips_deleted_documents(tmp_path):
    corpus = clustered(800, 20, seed=3)
    ids = [f"d{i}" for i in range(800)]
    index = DenseIndex.build(tmp_path / "tree", "dense", [embeddings(corpus)], dim=DIM, analyzer={}, ann="tree",
                             tree_branching=8)
    queries = clustered(20, 20, seed=4)
    (segment,) = index.segments
    tree = segment.tree.tree
    hits = index.search(queries, k=5, beam=3)
    for query, found in zip(queries, hits.ids):
        reached = np.flatnonzero(np.isin(tree.parents[-1], tree.descend(query, 3)))
        best = reached[np.argsort(-(corpus[reached] @ query), kind="stable")[:5]]
        assert found == [ids[i] for i in best]
    index.delete([hits.ids[0][0]])
    assert hits.ids[0][0] not in index.search(queries[:1], k=5, beam=3).ids[0]
    alone, shared = index.search(queries, k=5, beam=3), index.search(queries, k=5, beam=3, n_threads=3)
    assert (alone.ids, alone.scores) == (shared.ids, shared.scores)  # the queries shared out among threads


@pytest.mark.parametrize("ann,breadth", [("tree", {"beam": 1}), ("ivf", {"nprobe": 1})])
def test_an_approximate_search_widens_until_k_live_documents_are_found(tmp_path, ann, breadth):
    """Where the clusters reached hold fewer than k documents, nothing hidden or not (a small segment that joined
    the first one's tree; k deeper than a cluster), the query is searched again wider: min(k, live) hits, as many
    with an unrelated document deleted as without."""
    corpus = unit_vectors(400, seed=5)
    index = DenseIndex.build(tmp_path / ann, "dense", [embeddings(corpus)], dim=DIM, analyzer={}, ann=ann)
    queries = unit_vectors(5, seed=6)
    assert [len(ids) for ids in index.search(queries, k=150, **breadth).ids] == [150] * 5
    index.delete(["d399"])
    assert [len(ids) for ids in index.search(queries, k=150, **breadth).ids] == [150] * 5
    index.add(embeddings(unit_vectors(2, seed=7), "new"))
    index.delete([f"d{i}" for i in range(399)])
    hits = index.search(unit_vectors(20, seed=8), k=10, **breadth)
    assert all(sorted(ids) == ["new0", "new1"] for ids in hits.ids)


@pytest.mark.parametrize("n_docs,branching", [(8, 8), (2, 2), (12, None), (16, None)])
def test_a_segment_too_small_for_a_level_of_clusters_is_searched_exactly(tmp_path, n_docs, branching, caplog):
    """As many documents as the branching factor (a tree of one level: nothing to descend), or a count no power of
    two gives depth 3 (9 to 16, by the BEIR rule): searched exactly, said (it was silent: `info` said "tree"), and
    merged, added to and searched after."""
    corpus = unit_vectors(n_docs + 30, seed=9)
    options = {} if branching is None else {"tree_branching": branching}
    index = DenseIndex.build(tmp_path / "tree", "dense", [embeddings(corpus[:n_docs])], dim=DIM, analyzer={},
                             ann="tree", **options)
    assert index.segments[0].tree is None
    assert f"{n_docs} documents make no tree" in caplog.text and index.describe()["segments_without_tree"] == 1
    ids = [f"d{i}" for i in range(n_docs)]
    assert index.search(corpus[:3], k=3).ids == brute_force(corpus[:n_docs], ids, corpus[:3], 3)
    index.add(embeddings(corpus[n_docs:], "e"))
    index.merge()
    assert DenseIndex.open(tmp_path / "tree").search(corpus[-1:], k=1, beam=10**9).ids == [["e29"]]  # beam capped
    index.delete([f"e{i}" for i in range(30)])
    index.merge()  # back to the small count: exact again
    assert index.search(corpus[:1], k=1).ids == [["d0"]]


def test_damaged_vector_files_are_named(tmp_path, corpus):
    for ann in ("exact", "ivf", "tree"):
        path = tmp_path / ann
        DenseIndex.build(path, "dense", [embeddings(corpus[:100])], dim=DIM, analyzer={}, ann=ann)
        vectors = path / "seg-000000" / "vectors.npy"
        whole = vectors.read_bytes()
        vectors.write_bytes(whole[: len(whole) // 2])
        with pytest.raises(IndexFormatError, match="damaged index file .*vectors.npy"):
            DenseIndex.open(path)
        np.save(vectors, corpus[:50])
        with pytest.raises(IndexFormatError, match="shape"):
            DenseIndex.open(path)
        np.save(vectors, corpus[:100])
        if ann != "exact":
            extra = path / "seg-000000" / ("ann.faiss" if ann == "ivf" else "tree.npz")
            extra.write_bytes(extra.read_bytes()[:40])
            with pytest.raises(IndexFormatError, match=f"damaged index file .*{extra.name}"):
                DenseIndex.open(path)
