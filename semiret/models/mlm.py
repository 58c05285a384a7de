"""Masked-language-model heads split into their two parts: the transform of hidden states and the
vocabulary projection (a linear layer), so fast encoders can run the projection on their own terms."""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from semiret.errors import SemiretError


def mlm_head_parts(model: nn.Module) -> tuple[Callable[[torch.Tensor], torch.Tensor], nn.Linear]:
    """(transform, projection) of a BERT- or DistilBERT-style masked language model."""
    projection = model.get_output_embeddings()
    if hasattr(model, "cls") and hasattr(model.cls, "predictions"):  # BERT family
        return model.cls.predictions.transform, projection
    if hasattr(model, "vocab_transform"):  # DistilBERT
        return lambda h: model.vocab_layer_norm(model.activation(model.vocab_transform(h))), projection
    raise SemiretError(f"{type(model).__name__}: only BERT and DistilBERT masked-LM heads are supported")
