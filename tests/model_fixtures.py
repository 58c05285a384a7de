"""Tiny randomly initialised transformers for unit tests: built once per session, offline.

They use the packaged splade-tiny tokenizer (the bert-base-uncased WordPiece vocabulary). The MLM
bias is set negative so SPLADE vectors are sparse, as trained ones are.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

TOKENIZER_SOURCE = "splade-tiny"
MAX_POSITIONS = 64


def _save(model, directory: Path) -> Path:
    from semiret.models.registry import load_tokenizer

    model.save_pretrained(directory)
    load_tokenizer(TOKENIZER_SOURCE).save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory) -> Path:
    """A 2-layer, 32-wide BertForMaskedLM directory."""
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    model = BertForMaskedLM(BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                       intermediate_size=64, max_position_embeddings=MAX_POSITIONS))
    with torch.no_grad():
        model.cls.predictions.bias.fill_(-0.3)
    return _save(model, tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="session")
def tiny_distilbert(tmp_path_factory) -> Path:
    """A 2-layer, 32-wide DistilBertForMaskedLM directory."""
    from transformers import DistilBertConfig, DistilBertForMaskedLM

    torch.manual_seed(1)
    model = DistilBertForMaskedLM(DistilBertConfig(vocab_size=30522, dim=32, n_layers=2, n_heads=2, hidden_dim=64,
                                                   max_position_embeddings=MAX_POSITIONS))
    with torch.no_grad():
        model.vocab_projector.bias.fill_(-0.3)
    return _save(model, tmp_path_factory.mktemp("tiny-distilbert"))


def naive_splade(directory: Path, texts: list[str], max_length: int = MAX_POSITIONS):
    """The textbook SPLADE forward, for comparison: full [batch, length, V] logits, masked max."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    model = AutoModelForMaskedLM.from_pretrained(directory).eval()
    tokenizer = AutoTokenizer.from_pretrained(directory)
    batch = tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    with torch.inference_mode():
        logits = model(**batch).logits
    weights = torch.log1p(torch.relu(logits)) * batch["attention_mask"].unsqueeze(-1)
    return weights.amax(dim=1).numpy()
