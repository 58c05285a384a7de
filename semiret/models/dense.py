"""Dense bi-encoders: a transformer, mean or CLS pooling, optional L2 normalisation.

Defaults come from a sentence-transformers model directory when there is one (pooling mode,
``Normalize`` module, ``max_seq_length``), so ``minilm`` encodes as sentence-transformers does.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from semiret.errors import SemiretError
from semiret.models.base import TextEncoder
from semiret.models.inputs import Batch
from semiret.models.pooling import POOLINGS
from semiret.data.packaged import model_directory
from semiret.models.loading import load_encoder_model, load_tokenizer
from semiret.models.vocabulary import native_bfloat16

PRECISIONS = ("float32", "bfloat16", "auto")


class DenseEncoder(TextEncoder):
    family = "dense"

    def __init__(self, backbone, tokenizer, name: str, max_length: int | None = None, pooling: str = "mean",
                 normalize: bool = True, precision: str = "float32"):
        if pooling not in ("mean", "cls"):
            raise SemiretError(f"unknown pooling {pooling!r} (known: mean, cls)")
        if precision not in PRECISIONS:
            raise SemiretError(f"unknown precision {precision!r} (known: {', '.join(PRECISIONS)})")
        super().__init__(backbone, tokenizer, name, max_length)
        self.pooling, self.normalize = pooling, normalize
        self.requested_precision = precision  # what is saved: "auto" is decided again on each machine
        self.precision = ("bfloat16" if native_bfloat16() else "float32") if precision == "auto" else precision

    @classmethod
    def from_pretrained(cls, model: str = "minilm", max_length: int | None = None, pooling: str | None = None,
                        normalize: bool | None = None, precision: str = "auto") -> "DenseEncoder":
        defaults = sentence_transformers_defaults(model_directory(model))
        return cls(load_encoder_model(model), load_tokenizer(model), model,
                   defaults.get("max_length") if max_length is None else max_length,
                   pooling or defaults.get("pooling", "mean"),
                   defaults.get("normalize", False) if normalize is None else normalize, precision)

    def config(self) -> dict:
        return {**super().config(), "pooling": self.pooling, "normalize": self.normalize,
                "precision": self.requested_precision}

    @property
    def dim(self) -> int:
        return self.backbone.config.hidden_size

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Pooled (and normalised) float32 embeddings [B, dim] (differentiable), the transformer computed in the
        encoder's precision (bfloat16 halves training time on CPUs that have it; the weights stay float32)."""
        return self.states_and_embeddings(input_ids, attention_mask)[1]

    def states_and_embeddings(self, input_ids: torch.Tensor,
                              attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(the token states [B, L, dim], the pooled embeddings [B, dim] :meth:`forward` returns), float32."""
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.precision == "bfloat16"):
            states = self.backbone(input_ids=input_ids, attention_mask=attention_mask)[0].float()
        pooled = POOLINGS[self.pooling](states, attention_mask)
        return states, F.normalize(pooled, dim=-1) if self.normalize else pooled

    def _encode_batch(self, batch: Batch, side: str, prepared) -> np.ndarray:
        return self(batch.input_ids, batch.attention_mask).cpu().numpy()

    def _empty_outputs(self, n: int) -> np.ndarray:
        return np.zeros((n, self.dim), np.float32)

    def _store(self, outputs, positions, encoded) -> None:
        outputs[positions] = encoded

    def _single(self, encoded: np.ndarray) -> np.ndarray:
        return encoded[0]


def sentence_transformers_defaults(directory: Path) -> dict:
    """Pooling, normalisation and length limit of a sentence-transformers directory ({} for others)."""
    modules_file = directory / "modules.json"
    if not modules_file.is_file():
        return {}
    modules = json.loads(modules_file.read_text())
    defaults = {"normalize": any(m.get("type", "").endswith("Normalize") for m in modules)}
    for module in modules:
        config_file = directory / module.get("path", "") / "config.json"
        if module.get("type", "").endswith("Pooling") and config_file.is_file():
            pooling = json.loads(config_file.read_text())
            defaults["pooling"] = "cls" if pooling.get("pooling_mode_cls_token") else "mean"
    settings = directory / "sentence_bert_config.json"
    if settings.is_file():
        defaults["max_length"] = json.loads(settings.read_text()).get("max_seq_length")
    return defaults
