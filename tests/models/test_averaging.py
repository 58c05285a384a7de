"""Weight averaging with the starting model (WiSE-FT)."""

from __future__ import annotations

import pytest
import torch

from semiret.errors import SemiretError
from semiret.models.base import average_weights, undo_averaging
from semiret.models.splade import SpladeEncoder


def test_averaging_interpolates_every_weight_once_tied_ones_included(tiny_bert):
    start = SpladeEncoder.from_pretrained(str(tiny_bert)).float()
    trained = SpladeEncoder.from_pretrained(str(tiny_bert)).float()
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(1.0)  # tied embeddings/output weights are one parameter: moved once
    expected = {k: v.clone() for k, v in trained.state_dict().items()}
    original = start.state_dict()
    average_weights(trained, start, 0.25)
    for name, tensor in trained.state_dict().items():
        if tensor.is_floating_point():
            assert torch.allclose(tensor, 0.75 * expected[name] + 0.25 * original[name], atol=1e-6), name
    with pytest.raises(SemiretError, match="between 0 and 1"):
        average_weights(trained, start, 1.5)
    with pytest.raises(SemiretError, match="same architecture"):
        average_weights(trained, torch.nn.Linear(2, 2), 0.5)


def test_undoing_an_averaging_gives_back_the_trained_weights(tiny_bert):
    start = SpladeEncoder.from_pretrained(str(tiny_bert)).float()
    model = SpladeEncoder.from_pretrained(str(tiny_bert)).float()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p))
    trained = {k: v.clone() for k, v in model.state_dict().items()}
    undo_averaging(average_weights(model, start, 0.5), start, 0.5)
    for name, tensor in model.state_dict().items():
        if tensor.is_floating_point():
            assert torch.allclose(tensor, trained[name], atol=1e-5), name
    with pytest.raises(SemiretError, match="below 1"):
        undo_averaging(model, start, 1.0)
