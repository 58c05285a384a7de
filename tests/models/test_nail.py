"""The NAIL document model: a decoder over P learned positions, max-pooled vocabulary scores, the score types
and masks, the column shortcut training uses, save/load, and bad configurations."""

from __future__ import annotations

import pytest
import torch

from semiret.errors import SemiretError
from semiret.models.nail import NailConfig, NailModel


def _batch(model, texts=("statins reduce cancer risk", "dogs chase cats in the garden")):
    return model.inputs.padded(list(texts))


@pytest.mark.parametrize("score", ["log1p-relu", "logits", "log-softmax"])
def test_scores_are_the_maximum_over_positions_of_the_chosen_score(tiny_bert, score):
    torch.manual_seed(0)
    model = NailModel.initialise(str(tiny_bert), NailConfig(positions=3, decoder_layers=1, score=score,
                                                            residual=False))
    ids, mask = _batch(model)
    with torch.no_grad():
        per_position = model.position_states(ids, mask) @ model.lm.get_output_embeddings().weight.T \
            + model.lm.get_output_embeddings().bias
        expected = {"logits": per_position, "log1p-relu": torch.log1p(torch.relu(per_position)),
                    "log-softmax": torch.log_softmax(per_position, dim=-1)}[score].amax(dim=1)
        scores = model(ids, mask)
    assert scores.shape == (2, 30522)
    torch.testing.assert_close(scores, expected)
    if score == "log1p-relu":
        assert (scores >= 0).all()


@pytest.mark.parametrize("config", [NailConfig(positions=2, decoder_layers=1, score="log-softmax", residual=False),
                                    NailConfig(positions=2, decoder_layers=1, score="logits", residual=True)])
def test_columns_give_the_same_scores_as_the_full_vocabulary(tiny_bert, config):
    torch.manual_seed(0)
    model = NailModel.initialise(str(tiny_bert), config)
    if config.residual:
        torch.nn.init.normal_(model.residual_projection.weight)  # the decoder's share counts too
    ids, mask = _batch(model)
    columns = torch.tensor([5, 2000, 7592, 30000])
    with torch.no_grad():
        torch.testing.assert_close(model(ids, mask, columns), model(ids, mask)[:, columns])


def _mlm_pooled(model, ids, mask):
    """The encoder's own MLM logits, max-pooled over the unpadded tokens (SPLADE's document vector)."""
    logits = model.lm(input_ids=ids, attention_mask=mask).logits
    return logits.masked_fill(~mask.bool().unsqueeze(-1), float("-inf")).amax(dim=1)


def test_an_untrained_residual_model_scores_as_the_encoders_mlm_head(tiny_bert, monkeypatch):
    """Beyond the paper: the decoder's scores are added to the encoder's max-pooled MLM logits and start at 0, so
    the untrained model is the encoder's MLM head (SPLADE's document vector); training moves the decoder's share
    (the zero-initialised projection gets a gradient at once)."""
    import semiret.models.nail as nail

    torch.manual_seed(0)
    model = NailModel.initialise(str(tiny_bert), NailConfig(positions=3, decoder_layers=1))
    assert model.config.residual
    ids, mask = _batch(model)
    with torch.no_grad():
        expected = torch.log1p(torch.relu(_mlm_pooled(model, ids, mask)))
        torch.testing.assert_close(model(ids, mask), expected)
        monkeypatch.setattr(nail, "ENCODER_SCORE_ELEMENTS", 1)  # one document at a time: the same scores
        torch.testing.assert_close(model(ids, mask), expected)
    model = NailModel.initialise(str(tiny_bert), NailConfig(positions=3, decoder_layers=1, score="logits"))
    model.train()
    model(ids, mask, torch.tensor([5, 2000, 7592])).sum().backward()
    assert model.residual_projection.weight.grad.abs().sum() > 0


def test_models_saved_before_the_residual_option_load_as_the_papers(tiny_bert, tmp_path):
    import json

    torch.manual_seed(0)
    model = NailModel.initialise(str(tiny_bert), NailConfig(positions=2, decoder_layers=1, residual=False))
    path = model.save(tmp_path / "old", fp16=False)
    meta = json.loads((path / "nail.json").read_text())
    del meta["config"]["residual"]
    (path / "nail.json").write_text(json.dumps(meta))
    loaded = NailModel.load(str(path))
    assert not loaded.config.residual
    assert loaded.score_documents(["statins"]) == pytest.approx(model.score_documents(["statins"]), abs=1e-5)


def test_all_positions_see_only_position_embeddings_and_the_document(tiny_bert):
    """Non-autoregressive: a position's output does not depend on any generated token; with a causal mask the
    first position ignores the later ones, with full attention it does not."""
    torch.manual_seed(0)
    for attention, first_changes in (("causal", False), ("full", True)):
        model = NailModel.initialise(str(tiny_bert), NailConfig(positions=3, decoder_layers=1, attention=attention))
        ids, mask = _batch(model)
        with torch.no_grad():
            before = model.position_states(ids, mask)
            model.position_embeddings[2] += 1.0
            after = model.position_states(ids, mask)
        assert not torch.allclose(before[:, 2], after[:, 2])
        assert (not torch.allclose(before[:, 0], after[:, 0])) == first_changes


def test_padding_does_not_change_a_document_score(tiny_bert):
    model = NailModel.initialise(str(tiny_bert), NailConfig(positions=2, decoder_layers=1))
    alone = model.score_documents(["statins"])
    padded = model.score_documents(["statins", "a much longer text about dogs cats gardens and mailmen"])
    assert alone[0] == pytest.approx(padded[0], abs=1e-5)


def test_save_and_load_give_the_same_scores(tiny_bert, tmp_path):
    torch.manual_seed(1)
    model = NailModel.initialise(str(tiny_bert), NailConfig(positions=3, decoder_layers=1, attention="causal",
                                                            score="logits"))
    texts = ["statins reduce cancer risk"]
    path = model.save(tmp_path / "nail", training={"steps": 1}, fp16=False)
    loaded = NailModel.load(str(path))
    assert loaded.config == model.config
    assert loaded.score_documents(texts) == pytest.approx(model.score_documents(texts), abs=1e-5)
    half = NailModel.load(str(model.save(tmp_path / "nail16", fp16=True)))
    assert half.score_documents(texts) == pytest.approx(model.score_documents(texts), abs=0.05)
    assert next(model.parameters()).dtype == torch.float32  # saving in fp16 leaves the model as it was


@pytest.mark.parametrize("config, message", [
    (NailConfig(positions=0), "at least 1 decoder position"),
    (NailConfig(decoder_layers=0), "at least 1 decoder layer"),
    (NailConfig(score="softmax"), "score must be one of"),
    (NailConfig(attention="sliding"), "attention must be one of"),
    (NailConfig(score="log-softmax"), "residual document model adds logits"),
])
def test_bad_configurations_fail_before_loading(config, message):
    with pytest.raises(SemiretError, match=message):
        NailModel.initialise("no-such-model", config)


def test_load_refuses_a_directory_that_is_not_a_nail_model(tiny_bert):
    with pytest.raises(SemiretError, match="not a saved NAIL model"):
        NailModel.load(str(tiny_bert))


def test_save_refuses_to_overwrite_another_directory(tiny_bert, tmp_path):
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "keep.txt").write_text("x")
    model = NailModel.initialise(str(tiny_bert), NailConfig(positions=1, decoder_layers=1))
    with pytest.raises(SemiretError, match="not a saved NAIL model"):
        model.save(tmp_path / "other")
