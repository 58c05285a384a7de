"""The Matryoshka loss: the weighted sum of a loss on the embeddings cut to each dimension (against a sum computed
by hand, and against encoders truncated as at search time), one forward pass a step, its checks of its input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from semiret.clustering import EqualDepthTree
from semiret.errors import SemiretError
from semiret.models.dense import DenseEncoder
from semiret.training.config import MatryoshkaTraining
from semiret.training.data import SeededBatch
from semiret.training.hierarchy import HierarchyBatch, HierarchyExample, HierarchyLoss, HierarchyModel
from semiret.training.losses import MatryoshkaLoss, check_matryoshka, embedding_prefix, symmetric_info_nce

DOCUMENTS = [f"document {w} about {v}" for w in ("cats", "dogs", "rain", "snow", "mice")
             for v in ("risk", "growth")]  # 10
PARENTS = (np.array([0, 0]), np.array([0, 0, 1, 1]), np.array([0, 0, 0, 1, 2, 2, 2, 3, 3, 3]))


def encoder(tiny_bert, **options) -> DenseEncoder:
    return DenseEncoder.from_pretrained(str(tiny_bert), max_length=16, precision="float32", normalize=True,
                                        **options).eval()  # no dropout: every computation gives the same vectors


def batch(pairs, seed=0.5) -> SeededBatch:
    return SeededBatch(HierarchyBatch(tuple(HierarchyExample(f"query {DOCUMENTS[d]}", d) for d in pairs)), seed)


def test_the_loss_is_the_weighted_sum_of_the_inner_loss_on_each_prefix_from_one_forward_pass(tiny_bert,
                                                                                               monkeypatch):
    model = HierarchyModel(encoder(tiny_bert), 16)
    inner = HierarchyLoss(DOCUMENTS, negatives=0, temperature=0.05)  # plain in-batch contrastive
    passes = []
    original = DenseEncoder.forward
    monkeypatch.setattr(DenseEncoder, "forward", lambda self, *a: passes.append(1) or original(self, *a))
    output = MatryoshkaLoss(inner, [32, 16, 4], [1.0, 0.5, 2.0])(model, batch([0, 3, 6, 9]), 0)
    assert len(passes) == 2  # the queries and the documents, once for the three dimensions
    with torch.no_grad():
        q = model.encode_queries([f"query {DOCUMENTS[d]}" for d in (0, 3, 6, 9)])
        d = model.encode_documents([DOCUMENTS[d] for d in (0, 3, 6, 9)])
    by_hand = {dim: symmetric_info_nce(F.normalize(q[:, :dim], dim=-1) / 0.05, F.normalize(d[:, :dim], dim=-1)).item()
               for dim in (32, 16, 4)}
    assert output.total.item() == pytest.approx(by_hand[32] + 0.5 * by_hand[16] + 2.0 * by_hand[4], rel=1e-5)
    assert {k: output.terms[f"loss@{k}"] for k in by_hand} == pytest.approx(by_hand, rel=1e-5)
    assert output.terms["S.contrastive"] == pytest.approx(output.total.item(), rel=1e-5)
    output.total.backward()
    gradients = [p.grad for p in model.parameters() if p.grad is not None]  # (the unused pooler has none)
    assert len(gradients) > 10 and all(torch.isfinite(g).all() for g in gradients)
    assert "forward" not in vars(model.encoder)  # the encoder is itself again after the step


def test_hierarchy_terms_at_a_prefix_are_those_of_an_encoder_truncated_there(tiny_bert):
    """Centroid prefixes, sampled negatives encoded without gradients, cached and mined negatives: each prefix's
    term is the loss an encoder truncated to it (``truncate_dim``, what search uses) computes."""
    rng = np.random.default_rng(0)
    tree = EqualDepthTree(2, PARENTS, tuple(rng.normal(size=(n, 32)).astype(np.float32) for n in (2, 4)))
    vectors = encoder(tiny_bert).encode_document(DOCUMENTS, show_progress=False)
    losses = {"sampled": lambda: HierarchyLoss(DOCUMENTS, tree, levels=2, negatives=2, negative_gradients=False),
              "cached": lambda: HierarchyLoss(DOCUMENTS, tree, levels=1, negatives=2, negative_gradients=False,
                                              cached_negatives=True),
              "mined": lambda: HierarchyLoss(DOCUMENTS, negatives=2, mined_from=vectors, mining_depth=4)}
    truncated = {dim: HierarchyModel(encoder(tiny_bert, truncate_dim=dim), 16, tree, 2).eval() for dim in (32, 8)}
    full = truncated[32]
    for name, make in losses.items():
        expected = {}
        for dim, model in truncated.items():
            loss = make()
            if name == "cached":
                loss.refresh_negatives(vectors)  # the full embedding, cut by the loss to the queries' width
            expected[dim] = loss(model, batch([0, 5, 8]), 0).total.item()
        loss = make()
        if name == "cached":
            loss.refresh_negatives(vectors)
        output = MatryoshkaLoss(loss, [32, 8])(full, batch([0, 5, 8]), 0)
        assert output.terms["loss@32"] == pytest.approx(expected[32], rel=1e-4), name
        assert output.terms["loss@8"] == pytest.approx(expected[8], rel=1e-4), name
        assert output.total.item() == pytest.approx(expected[32] + expected[8], rel=1e-4), name


def test_prefixes_of_arrays_and_tensors():
    vectors = np.array([[3.0, 4.0, 12.0], [1.0, 0.0, 5.0]], np.float32)
    assert np.allclose(embedding_prefix(vectors, 2, True), [[0.6, 0.8], [1.0, 0.0]])
    assert np.allclose(embedding_prefix(vectors, 2, False), vectors[:, :2])
    assert torch.allclose(embedding_prefix(torch.from_numpy(vectors), 2, True), torch.tensor([[0.6, 0.8], [1.0, 0.0]]))
    assert embedding_prefix(vectors, 3, True) is vectors  # already that wide: untouched


@pytest.mark.parametrize("dims, weights, message", [
    ([], None, "at least one"),
    ([64, 0], None, "positive whole number"),
    ([64, -8], None, "positive whole number"),
    ([64, 32.5], None, "positive whole number"),
    ([64, 32, 64], None, "each dimension once"),
    ([512, 64], None, "embeds in 384 dimensions, fewer than 512"),
    ([64, 32], [1.0], "one weight per dimension"),
    ([64, 32], [1.0, 0.0], "positive number"),
    ([64, 32], [1.0, float("nan")], "positive number"),
])
def test_bad_dimensions_and_weights_are_refused(dims, weights, message):
    with pytest.raises(SemiretError, match=message):
        check_matryoshka(dims, weights, 384)
    with pytest.raises(SemiretError, match=message):
        MatryoshkaLoss(HierarchyLoss(DOCUMENTS, negatives=0), dims, weights, dimension=384)


def test_the_options_are_parsed_and_checked():
    assert MatryoshkaTraining().matryoshka() is None
    assert MatryoshkaTraining("384,192,96").matryoshka() == ((384, 192, 96), (1.0, 1.0, 1.0))
    assert MatryoshkaTraining("384, 96", "1,0.5").matryoshka() == ((384, 96), (1.0, 0.5))
    for options, message in ((("384,x",), "--matryoshka-dims.*comma-separated whole numbers"),
                             (("384,192", "1"), "one weight per dimension"),
                             ((None, "1,1"), "give the dimensions too"),
                             (("96,96",), "each dimension once")):
        with pytest.raises(SemiretError, match=message):
            MatryoshkaTraining(*options).matryoshka()


def test_a_model_without_a_dense_encoder_is_refused():
    with pytest.raises(SemiretError, match="no dense encoder"):
        MatryoshkaLoss(HierarchyLoss(DOCUMENTS, negatives=0), [8])(torch.nn.Linear(2, 2), batch([0, 1]), 0)
