"""HCE's hierarchy-aware loss on a hand-made tree and fixed embeddings: the sibling softmax of Eq. 5, sampled
sibling negatives and the policy for clusters too small to sample from, named terms, the joint weighting."""

from __future__ import annotations


import numpy as np
import pytest
import torch
import torch.nn.functional as F

from semiret.clustering import EqualDepthTree
from semiret.errors import SemiretError
from semiret.training.data import SeededBatch
from semiret.training.hierarchy import HierarchyBatch, HierarchyExample, HierarchyLoss
from semiret.training.losses import symmetric_info_nce

# depth 3: root -> 2 nodes -> 4 nodes -> 10 documents; node 1 (depth 2) holds one document only
PARENTS = (np.array([0, 0]), np.array([0, 0, 1, 1]), np.array([0, 0, 0, 1, 2, 2, 2, 3, 3, 3]))
DIM = 8


def hand_tree() -> EqualDepthTree:
    rng = np.random.default_rng(0)
    centroids = tuple(F.normalize(torch.from_numpy(rng.normal(size=(n, DIM)).astype(np.float32)), dim=-1).numpy()
                      for n in (2, 4))
    return EqualDepthTree(2, PARENTS, centroids)


class FixedEmbeddings(torch.nn.Module):
    """Texts 'q<i>' and 'd<i>' embedded by two trainable tables (unit rows); centroids as HierarchyModel's."""

    def __init__(self, tree: EqualDepthTree, levels: int = 2):
        super().__init__()
        torch.manual_seed(0)
        self.queries = torch.nn.Parameter(torch.randn(10, DIM))
        self.documents = torch.nn.Parameter(torch.randn(10, DIM))
        self.centroids = torch.nn.ParameterList(
            [torch.nn.Parameter(torch.from_numpy(c.copy())) for c in tree.centroids[:levels]])
        self.encoded: list[str] = []

    def encode_queries(self, texts):
        return F.normalize(self.queries[[int(t[1:]) for t in texts]], dim=-1)

    def encode_documents(self, texts):
        self.encoded += texts
        return F.normalize(self.documents[[int(t[1:]) for t in texts]], dim=-1)


DOCUMENTS = [f"d{i}" for i in range(10)]


def batch(supervised=(), unsupervised=(), seed=0.5) -> SeededBatch:
    return SeededBatch(HierarchyBatch(tuple(HierarchyExample(f"q{q}", d, tuple(x)) for q, d, *x in supervised),
                                      tuple(HierarchyExample(f"q{q}", d) for q, d in unsupervised)), seed)


def test_each_level_is_a_softmax_over_the_positives_siblings_only():
    tree = hand_tree()
    model = FixedEmbeddings(tree)
    loss = HierarchyLoss(DOCUMENTS, tree, levels=2, negatives=0)
    output = loss(model, batch([(0, 4), (1, 8)]), 0)
    q = model.encode_queries(["q0", "q1"])
    c1, c2 = (F.normalize(c, dim=-1) for c in model.centroids)
    # depth 1: both nodes are children of the root; depth 2: doc 4 is under node 2 (siblings 2, 3), doc 8 under 3
    level1 = F.cross_entropy(q @ c1.T / 0.01, torch.tensor([1, 1]))
    level2 = F.cross_entropy((q @ c2[[2, 3]].T) / 0.01, torch.tensor([0, 1]))
    assert output.terms["S.hierarchy"] == pytest.approx((level1 + level2).item(), rel=1e-5)
    with torch.no_grad():  # a non-sibling centroid, however close to the queries, changes nothing
        model.centroids[1][0] = q[0] * 5
    assert loss(model, batch([(0, 4), (1, 8)]), 0).terms["S.hierarchy"] == pytest.approx(output.terms["S.hierarchy"],
                                                                                        rel=1e-5)


def test_gradients_reach_the_centroids_the_queries_and_the_documents():
    tree = hand_tree()
    model = FixedEmbeddings(tree)
    output = HierarchyLoss(DOCUMENTS, tree, levels=2)(model, batch([(0, 4), (1, 8)]), 0)
    output.total.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_negatives_are_the_positives_siblings_and_never_a_batch_positive():
    tree = hand_tree()
    loss = HierarchyLoss(DOCUMENTS, tree, levels=2, negatives=2)
    rng = np.random.default_rng(0)
    for _ in range(20):
        sample = loss.sample(7, 2, {8}, rng)  # doc 7's cluster is {7, 8, 9}; 8 is another query's positive
        # only doc 9 is left in the cluster: the second comes from the parent's subtree (docs 4-9)
        assert sample[0] == 9 and sample[1] in {4, 5, 6}


def test_a_cluster_too_small_to_sample_from_widens_to_the_parent_then_the_corpus():
    tree = hand_tree()
    loss = HierarchyLoss(DOCUMENTS, tree, levels=2, negatives=4)
    rng = np.random.default_rng(1)
    sample = loss.sample(3, 2, set(), rng)  # doc 3 is alone in node 1; node 0 of depth 1 holds docs 0-3
    assert set(sample[:3].tolist()) == {0, 1, 2} and sample[3] >= 4
    with pytest.raises(SemiretError, match="too few"):
        HierarchyLoss(DOCUMENTS, tree, levels=2, negatives=4).sample(3, 2, set(range(4, 10)), rng)


def test_the_contrastive_level_meets_the_sampled_siblings():
    tree = hand_tree()
    model = FixedEmbeddings(tree)
    loss = HierarchyLoss(DOCUMENTS, tree, levels=2, negatives=2)
    output = loss(model, batch([(0, 4), (1, 8)], seed=0.25), 0)
    sampled = model.encoded[2:]
    assert len(sampled) == 4 and set(sampled[:2]) <= {"d5", "d6"} and set(sampled[2:]) <= {"d7", "d9"}
    q = model.encode_queries(["q0", "q1"])
    passages = model.encode_documents(["d4", "d8"] + sampled)
    assert output.terms["S.contrastive"] == pytest.approx(symmetric_info_nce(q / 0.01, passages).item(), rel=1e-5)


def test_joint_batches_weigh_the_unsupervised_terms_by_alpha():
    tree = hand_tree()
    model = FixedEmbeddings(tree)
    loss = HierarchyLoss(DOCUMENTS, tree, levels=2, unsupervised_weight=0.5)
    output = loss(model, batch([(0, 4), (1, 8)], [(2, 0), (3, 5)]), 0)
    assert set(output.terms) == {"S.hierarchy", "S.contrastive", "U.hierarchy", "U.contrastive"}
    expected = (output.terms["S.hierarchy"] + output.terms["S.contrastive"]
                + 0.5 * (output.terms["U.hierarchy"] + output.terms["U.contrastive"]))
    assert output.total.item() == pytest.approx(expected, rel=1e-5)
    alone = loss(model, batch(unsupervised=[(2, 0), (3, 5)]), 0)  # unsupervised alone: weight 1
    assert alone.total.item() == pytest.approx(alone.terms["U.hierarchy"] + alone.terms["U.contrastive"], rel=1e-5)


def test_sampled_negatives_without_gradients_are_encoded_without_them_or_dropout():
    tree = hand_tree()
    model = FixedEmbeddings(tree)
    modes = []
    model.encode_documents = lambda texts, encode=model.encode_documents: modes.append(model.training) or encode(texts)
    loss = HierarchyLoss(DOCUMENTS, tree, levels=0, negatives=2, negative_gradients=False)
    model.train()
    loss(model, batch([(0, 4), (1, 8)]), 0).total.backward()
    touched = set(np.flatnonzero(model.documents.grad.abs().sum(1).numpy()))
    assert touched == {4, 8}  # the sampled siblings got no gradient
    assert modes == [True, False, False, False] and model.training  # positives with dropout; 3 levels of negatives


def test_cached_negatives_are_read_from_the_refreshed_embedding_not_encoded():
    tree = hand_tree()
    model = FixedEmbeddings(tree, levels=0)
    encoded = HierarchyLoss(DOCUMENTS, tree, levels=0, negatives=2, negative_gradients=False)
    cached = HierarchyLoss(DOCUMENTS, tree, levels=0, negatives=2, negative_gradients=False, cached_negatives=True)
    with pytest.raises(SemiretError, match="no corpus embedding"):
        cached(model, batch([(0, 4), (1, 8)]), 0)
    current = F.normalize(model.documents, dim=-1).detach().numpy()
    cached.refresh_negatives(current)
    expected = encoded(model, batch([(0, 4), (1, 8)]), 0).total.item()
    model.encoded.clear()
    output = cached(model, batch([(0, 4), (1, 8)]), 0)  # the same draws read from a cache of the same vectors
    assert output.total.item() == pytest.approx(expected, rel=1e-5)
    assert model.encoded == ["d4", "d8"]  # only the positives were encoded
    output.total.backward()
    assert set(np.flatnonzero(model.documents.grad.abs().sum(1).numpy())) == {4, 8}
    cached.refresh_negatives(-current)  # a stale cache is what the loss reads
    assert cached(model, batch([(0, 4), (1, 8)]), 0).total.item() != pytest.approx(expected, rel=1e-3)
    with pytest.raises(SemiretError, match="cached vectors"):
        cached.refresh_negatives(current[:5])
    with pytest.raises(SemiretError, match="without gradients"):
        HierarchyLoss(DOCUMENTS, tree, negatives=2, negative_gradients=True, cached_negatives=True)


def test_plain_contrastive_needs_no_tree():
    model = FixedEmbeddings(hand_tree(), levels=0)
    output = HierarchyLoss(DOCUMENTS, negatives=0)(model, batch([(0, 4), (1, 8), (2, 1)]), 0)
    assert set(output.terms) == {"S.contrastive"}
    q = model.encode_queries(["q0", "q1", "q2"])
    d = model.encode_documents(["d4", "d8", "d1"])
    assert output.total.item() == pytest.approx(symmetric_info_nce(q / 0.01, d).item(), rel=1e-5)
    with pytest.raises(SemiretError, match="tree"):
        HierarchyLoss(DOCUMENTS, levels=2)


def test_mined_negatives_come_from_each_querys_top_documents_and_skip_the_batch_positives():
    model = FixedEmbeddings(hand_tree(), levels=0)
    mined_from = F.normalize(model.documents, dim=-1).detach().numpy()
    loss = HierarchyLoss(DOCUMENTS, negatives=2, mined_from=mined_from, mining_depth=3)
    output = loss(model, batch([(0, 4, 7), (1, 8)]), 0)
    assert set(output.terms) == {"S.contrastive"}
    negatives = [int(t[1:]) for t in model.encoded[2:]]
    scores = model.encode_queries(["q0", "q1"]).detach().numpy() @ mined_from.T
    for query, drawn, excluded in ((0, negatives[:2], {4, 8, 7}), (1, negatives[2:], {4, 8})):
        allowed = [d for d in np.argsort(-scores[query]).tolist() if d not in excluded][:3]
        assert len(set(drawn)) == 2 and set(drawn) <= set(allowed)
    with pytest.raises(SemiretError, match="one vector per document"):
        HierarchyLoss(DOCUMENTS, negatives=2, mined_from=mined_from[:5])
