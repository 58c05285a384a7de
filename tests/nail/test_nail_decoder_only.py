"""The decoder-only NAIL variant on a tiny random Llama (2 layers, 32 wide, tied embeddings, BERT's tokenizer):
untrained it scores documents exactly as the plain LM's head at the placeholders does; ``semiret train nail
--architecture decoder-only`` trains only the last layers, the final norm, the (untied) head and the
placeholders' vectors, saves a model that loads as itself, and the NAIL retrievers search with it unchanged;
bad configurations fail before any work."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from helpers import MAX_POSITIONS, TINY_DOCS, TOKENIZER_SOURCE
from safetensors.torch import load_file

from semiret.errors import SemiretError
from semiret.methods.nail import NailTrainingConfig, train_nail
from semiret.models.nail import NailConfig, NailDecoderOnlyModel, NailModel
from semiret.search import open_retriever
from semiret.search.nail import BM25NailRetriever, NailExhaustiveRetriever, NailSparseRetriever
from semiret.text.wordpiece import WordPieceVocabulary

QUERY = "statins cancer risk"


def decoder_only(**changes) -> NailConfig:
    return NailConfig(**{"architecture": "decoder-only", "residual": False, "positions": 3, "trainable_layers": 1,
                         "max_length": 32, "precision": "float32", **changes})


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    """A saved 2-layer, 32-wide LlamaForCausalLM with tied input and output embeddings."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from semiret.models.loading import load_tokenizer

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=30522, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True,
                                         max_position_embeddings=MAX_POSITIONS))
    assert model.lm_head.weight is model.model.embed_tokens.weight
    directory = tmp_path_factory.mktemp("tiny-llama")
    model.save_pretrained(directory)
    load_tokenizer(TOKENIZER_SOURCE).save_pretrained(directory)
    return directory


def test_untrained_scores_are_the_plain_lms_head_at_the_placeholders(tiny_llama):
    """φ_d = score(max over the P positions after the document of the LM's logits), placeholders = the SEP token
    (BERT's tokenizer has no end-of-sequence token); padding in a batch changes nothing."""
    from semiret.models.loading import load_causal_lm

    model = NailModel.initialise(str(tiny_llama), decoder_only())
    assert isinstance(model, NailDecoderOnlyModel) and model.vocab_size == 30522
    lm, tokenizer = load_causal_lm(str(tiny_llama))
    texts = [d.full_text for d in TINY_DOCS[:3]]
    scores = model.score_documents(texts)
    for text, row in zip(texts, scores):
        ids = tokenizer(text, truncation=True, max_length=32, return_tensors="pt").input_ids
        ids = torch.cat([ids, torch.full((1, 3), tokenizer.sep_token_id)], dim=1)
        with torch.no_grad():
            logits = lm(input_ids=ids).logits[0, -3:]
        assert row == pytest.approx(torch.log1p(torch.relu(logits.amax(dim=0))).numpy(), abs=1e-5)
    logits_model = NailModel.initialise(str(tiny_llama), decoder_only(score="log-softmax"))
    assert (logits_model.score_documents(texts[:1]) <= 0).all()  # log-probabilities


def test_training_changes_only_the_last_layers_the_norm_the_head_and_the_placeholders(tiny_llama, beir_dir,
                                                                                     tmp_path):
    config = dict(data=str(beir_dir), split="test", output=str(tmp_path / "run"), base=str(tiny_llama),
                  architecture="decoder-only", positions=3, trainable_layers=1, max_length=32, pretrain_epochs=1,
                  pretrain_batch_size=4, finetune_epochs=1, batch_size=2, hard_negatives=1, threads=1,
                  precision="float32")
    summary = train_nail(NailTrainingConfig(**config))
    assert [s["stage"] for s in summary["stages"]] == ["pretrain", "finetune"]
    assert 0 < summary["parameters"]["trained"] < summary["parameters"]["total"]
    before = load_file(str(tiny_llama / "model.safetensors"))
    after = load_file(str(tmp_path / "run" / "finetune" / "checkpoint" / "model.safetensors"))  # float32
    for name, tensor in before.items():
        trained = name.startswith(("model.layers.1.", "model.norm.")) or name == "lm_head.weight"
        saved = after["lm." + name]
        if trained:
            assert not torch.equal(saved, tensor), name
        else:
            assert torch.equal(saved, tensor), name  # layer 0 and the input embeddings are frozen
    assert not torch.equal(after["lm.lm_head.weight"], after["lm.model.embed_tokens.weight"])  # untied
    assert after["placeholder_vectors"].abs().sum() > 0

    model_dir = tmp_path / "run" / "model"
    marker = json.loads((model_dir / "nail.json").read_text())
    assert marker["config"]["architecture"] == "decoder-only" and marker["config"]["trainable_layers"] == 1
    loaded = NailModel.load(str(model_dir))
    assert isinstance(loaded, NailDecoderOnlyModel)
    assert not torch.equal(loaded.lm.lm_head.weight, loaded.lm.model.embed_tokens.weight)

    # the NAIL retrievers, unchanged, over the saved model
    phi = loaded.score_documents([d.full_text for d in TINY_DOCS])
    tokens = sorted(set(WordPieceVocabulary(str(model_dir)).encode(QUERY)))
    expected = sorted(((d.id, phi[i, tokens].sum()) for i, d in enumerate(TINY_DOCS)), key=lambda x: -x[1])
    hits = NailExhaustiveRetriever.build(TINY_DOCS, tmp_path / "exh", model=str(model_dir)).search(QUERY, k=6)
    assert [h.id for h in hits] == [d for d, _ in expected]
    assert [h.score for h in hits] == pytest.approx([s for _, s in expected], rel=2e-3, abs=2e-3)
    BM25NailRetriever.build(TINY_DOCS, tmp_path / "rerank", model=str(model_dir))
    assert open_retriever(tmp_path / "rerank").search(QUERY, k=3)
    assert NailSparseRetriever.build(TINY_DOCS, tmp_path / "sparse", model=str(model_dir),
                                     top_k=30522).search(QUERY, k=3)


@pytest.mark.parametrize("changes, message", [
    ({"positions": 0}, "at least 1 placeholder position"),
    ({"trainable_layers": -1}, "trainable_layers must be >= 0"),
    ({"residual": True}, "no residual"),
    ({"precision": "float8"}, "precision must be one of"),
    ({"architecture": "encoder-only"}, "architecture must be one of"),
])
def test_bad_decoder_only_configurations_fail_before_the_model_loads(changes, message):
    with pytest.raises(SemiretError, match=message):
        NailModel.initialise("no-such-model", decoder_only(**changes))


def test_models_the_variant_cannot_use_are_refused(tiny_llama, tiny_bert):
    with pytest.raises(SemiretError, match="has 2 layers: cannot train the last 3"):
        NailModel.initialise(str(tiny_llama), decoder_only(trainable_layers=3))
    with pytest.raises(SemiretError, match="placeholder token"):
        NailModel.initialise(str(tiny_llama), decoder_only(placeholder="<no-such-token>"))
    with pytest.raises(SemiretError, match="Llama-style causal LM"):
        NailModel.initialise(str(tiny_bert), decoder_only())  # BERT loads as a causal LM, without `layers`
    assert np.isfinite(NailModel.initialise(str(tiny_llama), decoder_only()).score_documents(["", "cats"])).all()


def test_the_train_command_takes_the_decoder_only_options_and_their_defaults(monkeypatch):
    from typer.testing import CliRunner

    from semiret.methods import cli

    seen = []
    monkeypatch.setitem(cli.RECIPES, "nail", (NailTrainingConfig, lambda config, resume: seen.append(config)
                                              or {"config": {}}, "NAIL"))
    result = CliRunner().invoke(cli.train_app, ["nail", "--architecture", "decoder-only", "--trainable-layers",
                                                "3", "--positions", "8"])
    assert result.exit_code == 0, result.output
    config = seen[0]
    assert (config.base, config.max_length, config.pretrain_epochs, config.finetune_epochs) == ("smollm2-135m", 128,
                                                                                                1, 3)
    model = config.model_config()
    assert model.decoder_only and model.trainable_layers == 3 and model.positions == 8 and not model.residual
    plain = NailTrainingConfig()
    assert (plain.base, plain.max_length, plain.pretrain_epochs, plain.finetune_epochs) == ("splade-tiny", 256, 4, 8)
