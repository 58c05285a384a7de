"""SPLADE (Formal et al.): MLM logits, ``log(1 + ReLU)``, max over unpadded positions."""

from __future__ import annotations

import numpy as np
import torch

from semiret.models.base import SparseEncoder
from semiret.models.inputs import Batch
from semiret.models.loading import load_masked_lm, load_tokenizer
from semiret.models.mlm import mlm_head_parts
from semiret.models.pooled_projection import thresholded_max_pooled_projection
from semiret.models.pooling import log_saturation, masked_max
from semiret.models.vocabulary import MaxPooledLogits


class SpladeEncoder(SparseEncoder):
    """Siamese SPLADE: the same masked language model encodes queries and documents."""

    family = "splade"

    def __init__(self, masked_lm, tokenizer, name: str, max_length: int | None = None):
        super().__init__(masked_lm, tokenizer, name, max_length)
        self._transform, self._projection = mlm_head_parts(masked_lm)

    @classmethod
    def from_pretrained(cls, model: str = "splade-tiny", max_length: int | None = None) -> "SpladeEncoder":
        return cls(load_masked_lm(model), load_tokenizer(model), model, max_length)

    # ------------------------------------------------------------------ training
    def token_logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Un-pooled MLM logits [B, L, V]."""
        return self.backbone(input_ids=input_ids, attention_mask=attention_mask).logits

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Pooled term weights [B, V] (differentiable)."""
        return log_saturation(masked_max(self.token_logits(input_ids, attention_mask), attention_mask))

    def training_vectors(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                         columns: torch.Tensor | None = None) -> torch.Tensor:
        """:meth:`forward` [B, V] (or [B, len(columns)] over vocabulary ids ``columns``), computed with gradients
        through the positive max-pooled logits only: the same values, several times faster on a CPU."""
        hidden = self.backbone.base_model(input_ids=input_ids, attention_mask=attention_mask)[0]
        states = self._transform(hidden)
        weight, bias = self._projection.weight, self._projection.bias
        if columns is not None:
            weight, bias = weight[columns], (bias[columns] if bias is not None else None)
        return thresholded_max_pooled_projection(states, attention_mask, weight, bias, log_saturation)

    # ------------------------------------------------------------------ fast inference
    def _prepare(self) -> MaxPooledLogits | None:
        on_cpu = self.device.type == "cpu"
        return MaxPooledLogits(self._projection.weight, self._projection.bias, threshold=0.0) if on_cpu else None

    def _encode_batch(self, batch: Batch, side: str, pool: MaxPooledLogits | None):
        if pool is None:  # off the CPU: the whole batch's [B, V] weights at once, then each row's nonzero ones
            return self._rows_of(self.training_vectors(batch.input_ids, batch.attention_mask))
        hidden = self.backbone.base_model(input_ids=batch.input_ids, attention_mask=batch.attention_mask)[0]
        packed = self._transform(hidden[batch.attention_mask.bool()])
        rows = []
        for states in packed.split(batch.lengths):
            ids, maxima = pool(states)
            rows.append((ids.numpy().astype(np.int32), log_saturation(maxima).numpy()))
        return rows
