"""VDR / SiDR vocabulary-space encoder (Zhou et al.): elu1p activation, max pooling, top-k sparsity.

``head="fresh"`` is the authors' code: BERT -> a fresh LayerNorm -> the tied input word embeddings of
ids >= ``first_id`` (999 drops [PAD], [unused*], [UNK], [CLS], [SEP], [MASK] of bert-base-uncased)
-> elu1p -> max over unpadded positions -> top-``top_k`` (768). ``head="mlm"`` keeps a pretrained MLM
head instead (its transform, projection and bias), for encoders initialised from an MLM such as SPLADE.
Vectors are indexed by tokenizer ids, so they share the bag-of-tokens index's dimensions.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from semiret.errors import SemiretError
from semiret.models.base import SparseEncoder
from semiret.models.inputs import Batch
from semiret.models.mlm import mlm_head_parts
from semiret.models.pooled_projection import max_pooled_projection, top_k_max_pooled_projection
from semiret.models.pooling import elu1p, top_k_sparsify
from semiret.models.loading import load_encoder_model, load_masked_lm, load_tokenizer
from semiret.models.vocabulary import MaxPooledLogits

HEADS = ("fresh", "mlm")


class VDREncoder(SparseEncoder):
    family = "vdr"

    def __init__(self, backbone, tokenizer, name: str, max_length: int | None = None, top_k: int = 768,
                 first_id: int = 999, head: str = "fresh"):
        if head not in HEADS:
            raise SemiretError(f"unknown VDR head {head!r} (known: {', '.join(HEADS)})")
        if top_k < 1:
            raise SemiretError(f"top_k must be at least 1, got {top_k}")
        super().__init__(backbone, tokenizer, name, max_length)
        self.top_k, self.first_id, self.head = top_k, first_id, head
        if head == "fresh":
            self.norm = nn.LayerNorm(backbone.config.hidden_size, eps=backbone.config.layer_norm_eps)
        else:
            self._mlm_transform, self._mlm_projection = mlm_head_parts(backbone)

    @classmethod
    def from_pretrained(cls, model: str = "splade-tiny", max_length: int | None = None, top_k: int = 768,
                        first_id: int = 999, head: str = "fresh") -> "VDREncoder":
        backbone = load_masked_lm(model) if head == "mlm" else load_encoder_model(model)
        return cls(backbone, load_tokenizer(model), model, max_length, top_k, first_id, head)

    def config(self) -> dict:
        return {**super().config(), "top_k": self.top_k, "first_id": self.first_id, "head": self.head}

    # ------------------------------------------------------------------ the vocabulary projection
    def _projection(self):
        """(transform, weight [V - first_id, H], bias or None): views, so training updates the tied weights."""
        if self.head == "fresh":
            return self.norm, self.backbone.get_input_embeddings().weight[self.first_id:], None
        projection = self._mlm_projection
        return self._mlm_transform, projection.weight[self.first_id:], projection.bias[self.first_id:]

    def _hidden(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.backbone.base_model(input_ids=input_ids, attention_mask=attention_mask)[0]

    # ------------------------------------------------------------------ training
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, sparse: bool = False) -> torch.Tensor:
        """Vectors [B, V - first_id]: elu1p of max-pooled logits (padding excluded).

        ``sparse=True`` returns the top-``top_k`` vectors directly (what :meth:`sparsify` gives), computing
        gradients for the kept entries only: much faster to train when the loss needs nothing else.
        """
        transform, weight, bias = self._projection()
        states = transform(self._hidden(input_ids, attention_mask))
        if sparse:
            return top_k_max_pooled_projection(states, attention_mask, weight, bias, self.top_k, elu1p)
        return elu1p(max_pooled_projection(states, attention_mask, weight, bias))

    def sparsify(self, vectors: torch.Tensor) -> torch.Tensor:
        """Top-``top_k`` of each row (the inference representation)."""
        return top_k_sparsify(vectors, self.top_k)

    def bag_of_tokens(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Binary bag-of-tokens vectors [B, V - first_id] in the same space (SiDR's non-parametric side)."""
        out = torch.zeros(len(input_ids), self.vocab_size - self.first_id, dtype=torch.float32,
                          device=input_ids.device)
        present = (input_ids >= self.first_id) & attention_mask.bool()
        rows = torch.arange(len(input_ids), device=input_ids.device).unsqueeze(1).expand_as(input_ids)
        out[rows[present], input_ids[present] - self.first_id] = 1.0
        return out

    # ------------------------------------------------------------------ fast inference
    def _prepare(self) -> MaxPooledLogits | None:
        _, weight, bias = self._projection()
        return MaxPooledLogits(weight, bias, top_k=self.top_k) if self.device.type == "cpu" else None

    def _encode_batch(self, batch: Batch, side: str, pool: MaxPooledLogits | None):
        if pool is None:  # off the CPU: the whole batch's top-k vectors at once, then each row's kept entries
            return self._rows_of(self(batch.input_ids, batch.attention_mask, sparse=True), self.first_id)
        transform, _, _ = self._projection()
        packed = transform(self._hidden(batch.input_ids, batch.attention_mask)[batch.attention_mask.bool()])
        rows = []
        for states in packed.split(batch.lengths):
            ids, maxima = pool(states)
            rows.append(((ids + self.first_id).numpy().astype(np.int32), elu1p(maxima).numpy()))
        return rows
