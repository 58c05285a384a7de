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


def _saved_inference_free(tiny_bert, path, shift: float, base: str = "splade-tiny"):
    import numpy as np

    from semiret.models.inference_free import InferenceFreeModel

    model = InferenceFreeModel(SpladeEncoder.from_pretrained(str(tiny_bert)).float(), np.full(30522, 1.0 + shift, np.float32))
    with torch.no_grad():
        for p in model.encoder.parameters():
            p.add_(shift)
    model.save(path, training={"config": {"base": base}}, fp16=False)
    return model


def test_a_soup_of_inference_free_models_is_the_mean_of_their_weights_and_query_tables(tiny_bert, tmp_path,
                                                                                    monkeypatch):
    """scripts/soup_inference_free.py: three models' uniform average (encoder and query-weight table), saved; models
    from different starts refused."""
    import json
    import runpy
    import sys
    from pathlib import Path

    script = str(Path(__file__).resolve().parents[2] / "scripts" / "soup_inference_free.py")
    models = [_saved_inference_free(tiny_bert, tmp_path / f"m{i}", shift) for i, shift in enumerate((0.0, 0.3, 0.9))]
    monkeypatch.setattr(sys, "argv", ["soup", *(str(tmp_path / f"m{i}") for i in range(3)), "--out", str(tmp_path / "soup")])
    runpy.run_path(script, run_name="__main__")

    from semiret.models.inference_free import InferenceFreeModel

    soup = InferenceFreeModel.load(str(tmp_path / "soup")).float()
    states = [m.state_dict() for m in models]
    for name, tensor in soup.state_dict().items():
        if tensor.is_floating_point():
            mean = sum(s[name] for s in states) / 3
            assert torch.allclose(tensor, mean, atol=2e-3), name  # saved in float16
    table = json.loads((tmp_path / "soup" / "idf.json").read_text())
    assert table["science"] == pytest.approx(1.4, abs=1e-5)  # (1.0 + 1.3 + 1.9) / 3
    _saved_inference_free(tiny_bert, tmp_path / "other", 0.1, base="another-start")
    monkeypatch.setattr(sys, "argv", ["soup", str(tmp_path / "m0"), str(tmp_path / "other"), "--out", str(tmp_path / "x")])
    with pytest.raises(SemiretError, match="different bases"):
        runpy.run_path(script, run_name="__main__")
    assert not (tmp_path / "x").exists()
