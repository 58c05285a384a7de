"""Activations and poolings shared by the encoders (all differentiable, for training)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def log_saturation(logits: torch.Tensor) -> torch.Tensor:
    """SPLADE's ``log(1 + ReLU(x))``."""
    return torch.log1p(torch.relu(logits))


def elu1p(logits: torch.Tensor) -> torch.Tensor:
    """VDR's ``elu(x) + 1``: ``x + 1`` for ``x >= 0``, ``exp(x)`` below; always positive."""
    return F.elu(logits) + 1.0


def masked_max(states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Max over positions [B, L, D] -> [B, D], padding excluded."""
    fill = torch.finfo(states.dtype).min
    return states.masked_fill(~attention_mask.bool().unsqueeze(-1), fill).amax(dim=1)


def mean_pool(states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean over unpadded positions [B, L, D] -> [B, D]."""
    mask = attention_mask.unsqueeze(-1).to(states.dtype)
    return (states * mask).sum(dim=1) / mask.sum(dim=1).clamp_min(1.0)


def cls_pool(states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The first position's state [B, L, D] -> [B, D]."""
    return states[:, 0]


POOLINGS = {"mean": mean_pool, "cls": cls_pool, "max": masked_max}


def top_k_sparsify(vectors: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the ``k`` largest entries of each row [B, V], zero the rest (gradients flow through the kept ones)."""
    if k >= vectors.shape[-1]:
        return vectors
    kept = torch.zeros_like(vectors, dtype=torch.bool).scatter_(-1, vectors.topk(k, dim=-1).indices, True)
    return vectors * kept
