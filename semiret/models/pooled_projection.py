"""Max-pooled vocabulary logits for training, without a differentiable [batch, length, |V|] tensor.

SPLADE and VDR take, for every vocabulary entry, the maximum over positions of ``h_t . w_j + b_j``.
The gradient of a maximum flows only through the position that attains it, so the positions are
found without autograd, and the kept logits are recomputed with autograd from the gathered hidden
states: ``(h[argmax_j] * w_j).sum() + b_j``. No [B, L, |V|] activation is kept and the backward pass
costs O(B·|V|·H) instead of the O(B·L·|V|·H) matmul backward.

With ``top_k`` (VDR's sparsification) only the k kept entries of each row are recomputed with
autograd, which makes the differentiable part negligible; the positions are then located in
bfloat16 where the CPU multiplies it natively (about 2.5x the float32 rate): rounding can only swap
near-tied positions or entries at the top-k boundary, and every kept value is recomputed in float32.
"""

from __future__ import annotations

import torch

from semiret.models.vocabulary import TILE, native_bfloat16

ROWS_PER_CHUNK = 8
"""Texts whose [length, |V|] scores are materialised at once while locating maxima off the CPU (bounds memory)."""


def _locate_maxima(states, attention_mask, weight, dtype):
    """(max value, argmax position) over unpadded positions for every entry, without autograd: [B, V] each."""
    with torch.no_grad():
        w = weight.detach().to(dtype)
        if states.device.type == "cpu":
            return _locate_maxima_by_tiles(states.detach().to(dtype), attention_mask, w)
        values, positions = [], []
        for rows, mask in zip(states.detach().split(ROWS_PER_CHUNK), attention_mask.split(ROWS_PER_CHUNK)):
            scores = torch.matmul(rows.to(dtype), w.T)  # [b, L, V]
            scores.masked_fill_(~mask.bool().unsqueeze(-1), float("-inf"))
            best = scores.max(dim=1)
            values.append(best.values.float())
            positions.append(best.indices)
        return torch.cat(values), torch.cat(positions)


def _locate_maxima_by_tiles(states, attention_mask, weight):
    """:func:`_locate_maxima` on a CPU: each text's unpadded positions against one tile of vocabulary rows at a time,
    a [tile, length] block reduced along its rows while in cache (as inference does,
    :data:`~semiret.models.vocabulary.TILE`; the same maxima and positions as one [length, |V|] product)."""
    weight = weight.clone()  # aligned memory of its own: BLAS may sum in another order at another alignment
    values = torch.full((states.shape[0], weight.shape[0]), float("-inf"))
    positions = torch.zeros(values.shape, dtype=torch.long)
    for row, mask in enumerate(attention_mask.bool()):
        kept = torch.nonzero(mask).squeeze(1)
        if not len(kept):
            continue
        hidden = states[row, kept].clone()
        start = 0
        for tile in weight.split(TILE):
            best = torch.matmul(tile, hidden.T).max(dim=1)
            values[row, start: start + len(tile)] = best.values
            positions[row, start: start + len(tile)] = kept[best.indices]
            start += len(tile)
    return values, positions


def max_pooled_projection(states: torch.Tensor, attention_mask: torch.Tensor, weight: torch.Tensor,
                          bias: torch.Tensor | None = None) -> torch.Tensor:
    """``max_t (states[:, t] @ weight.T + bias)`` over unpadded positions, [B, L, H] -> [B, V], differentiable."""
    _, positions = _locate_maxima(states, attention_mask, weight, states.dtype)
    gathered = states.gather(1, positions.unsqueeze(-1).expand(-1, -1, states.shape[-1]))  # [B, V, H]
    logits = (gathered * weight.unsqueeze(0)).sum(-1)
    return logits + bias if bias is not None else logits


def top_k_max_pooled_projection(states: torch.Tensor, attention_mask: torch.Tensor, weight: torch.Tensor,
                                bias: torch.Tensor | None, top_k: int, activation) -> torch.Tensor:
    """``activation`` of the ``top_k`` largest max-pooled logits of each row, zeros elsewhere: [B, V].

    ``activation`` must be monotone non-decreasing (elu1p, log(1+ReLU)), so ranking logits ranks outputs.
    """
    dtype = torch.bfloat16 if native_bfloat16() else states.dtype
    values, positions = _locate_maxima(states, attention_mask, weight, dtype)
    if bias is not None:
        values = values + bias.detach()
    kept = values.topk(min(top_k, values.shape[1]), dim=1).indices  # [B, k]
    hidden = states.gather(1, positions.gather(1, kept).unsqueeze(-1).expand(-1, -1, states.shape[-1]))  # [B, k, H]
    logits = (hidden * weight[kept]).sum(-1)
    if bias is not None:
        logits = logits + bias[kept]
    return torch.zeros(values.shape, dtype=states.dtype, device=states.device).scatter(1, kept, activation(logits))


def thresholded_max_pooled_projection(states: torch.Tensor, attention_mask: torch.Tensor, weight: torch.Tensor,
                                      bias: torch.Tensor | None, activation, threshold: float = 0.0,
                                      exact: bool = False) -> torch.Tensor:
    """``activation`` of the max-pooled logits that exceed ``threshold``, zeros elsewhere: [B, V].

    SPLADE's ``log(1 + ReLU)`` is zero (with zero gradient) at or below 0, so only entries whose maximum
    logit is positive matter. They are located without autograd (bfloat16 where native; an entry whose
    rounded maximum lands on the wrong side of 0 is within rounding of 0, where the activation is ~0),
    and only those are recomputed exactly with autograd from the gathered hidden states. Near-tied
    positions may swap in bfloat16 (a difference within its rounding); ``exact`` locates in ``states.dtype``.
    """
    dtype = torch.bfloat16 if native_bfloat16() and not exact else states.dtype
    values, positions = _locate_maxima(states, attention_mask, weight, dtype)
    if bias is not None:
        values = values + bias.detach()
    rows, cols = torch.nonzero(values > threshold, as_tuple=True)  # kept entries, row-major
    hidden = states[rows, positions[rows, cols]]  # [nnz, H]
    logits = (hidden * weight[cols]).sum(-1)
    if bias is not None:
        logits = logits + bias[cols]
    out = torch.zeros(values.shape, dtype=states.dtype, device=states.device)
    return out.index_put((rows, cols), activation(logits))
