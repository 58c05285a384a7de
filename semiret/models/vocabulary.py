"""Vocabulary-space heads at inference: exact per-text maxima of ``hidden @ weight.T + bias``, fast.

SPLADE and VDR score every vocabulary entry at every position, then keep each entry's maximum
over positions (their activations are monotone, so activating the maxima is the same as maximising
the activations). The naive way materialises a [batch, length, |V|] float32 tensor. Here each
text's unpadded positions are projected alone, one vocabulary tile at a time so the scores stay
in cache while they are reduced, and in bfloat16 where the CPU has native support (AVX512-BF16 or
AMX: about 4x the float32 matmul rate). A rigorous bound on bfloat16 rounding then selects the
entries that could pass the rule (above a threshold, or among the top k), and only those are
recomputed in float32: the result equals the float32 computation.
"""

from __future__ import annotations

import os

import torch

BF16_UNIT_ROUNDOFF = 2.0 ** -8
ACCUMULATION_SLACK = 1e-4
"""Relative allowance for float32 accumulation order (128-4096 terms at 2^-24 each, generously)."""
SCREEN_ERROR = 3 * BF16_UNIT_ROUNDOFF + 3 * BF16_UNIT_ROUNDOFF ** 2 + ACCUMULATION_SLACK
"""Bound on |bf16 score - exact score| / (|hidden| |weight row|): inputs rounded (2u), output rounded (u)."""
TILE = 4096
"""Vocabulary rows per matmul, whose scores are reduced while in cache: a bfloat16 [length, TILE] block, or a float32
[TILE, length] block reduced along its rows. The latter gives the same maxima (bit for bit on SciFact's documents
here) as one [length, |V|] product (tens of MB) reduced over its columns, in half the time on a 2-core AVX2 CPU; a
smaller tile measured a little faster on an idle CPU but slower when other processes share it (more thread
hand-overs per text; docs/results.md, "The vocabulary projection in tiles")."""


def native_bfloat16() -> bool:
    """Whether this CPU multiplies bfloat16 matrices faster than float32: with AMX tiles (Xeons since Sapphire
    Rapids). AVX512-BF16 without AMX (as some virtual machines expose a Xeon) was slower than float32 here:
    MiniLM encoded 256 SciFact abstracts in 12.8 s against 9.5 s, the inference-free encoder 512 in 9.9 s
    against 8.0 s (docs/results.md, "The demo"). ``SEMIRET_BFLOAT16=1`` or ``0`` decides instead."""
    forced = os.environ.get("SEMIRET_BFLOAT16")
    if forced in ("0", "1"):
        return forced == "1"
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported()) and bool(torch.cpu._is_amx_tile_supported())
    except (AttributeError, RuntimeError):
        return False


class MaxPooledLogits:
    """Per-text maxima of vocabulary logits over positions, for the entries a rule keeps.

    ``threshold``: keep entries whose maximum exceeds it (SPLADE: 0, below which log(1+ReLU) is 0).
    ``top_k``: keep the ``top_k`` largest maxima (VDR). Returned ids index ``weight``'s rows.
    Built once per encoding call: it holds inference copies of the weights.
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, threshold: float | None = None,
                 top_k: int | None = None, screen: bool | None = None):
        if (threshold is None) == (top_k is None):
            raise ValueError("give exactly one of threshold and top_k")
        # [V, H], a copy of its own: memory the allocator aligned, since BLAS may sum in another order at another
        # alignment (a model loaded again would then score its texts a rounding apart)
        self.weight = weight.detach().float().clone()
        self.bias = bias.detach().float() if bias is not None else torch.zeros(len(self.weight))
        self.threshold = threshold
        self.top_k = min(top_k, len(self.weight)) if top_k is not None else None
        self.screen = native_bfloat16() if screen is None else screen
        self._scratch: dict[tuple[int, torch.dtype], torch.Tensor] = {}
        if self.screen:
            self.tiles = self.weight.bfloat16().split(TILE)
            self.weight_norms = self.weight.norm(dim=1)
        else:
            self.float_tiles = self.weight.split(TILE)

    def __call__(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``hidden`` [length, H] of one text -> (kept ids ascending, their maxima)."""
        hidden = hidden.float().clone()  # aligned, as the weights (a text's rows start anywhere in its batch's)
        if not self.screen:
            return self._select(torch.arange(len(self.weight)), self._float32_maxima(hidden) + self.bias)
        approx = self._screening_maxima(hidden.bfloat16()).float() + self.bias
        margin = SCREEN_ERROR * hidden.norm(dim=1).max() * self.weight_norms
        if self.threshold is not None:
            candidates = torch.nonzero(approx + margin > self.threshold).squeeze(1)
        else:
            floor = (approx - margin).topk(self.top_k).values[-1]
            candidates = torch.nonzero(approx + margin >= floor).squeeze(1)
        exact = (hidden @ self.weight[candidates].T).amax(0) + self.bias[candidates]
        return self._select(candidates, exact)

    def _float32_maxima(self, hidden: torch.Tensor) -> torch.Tensor:
        maxima = torch.empty(len(self.weight))
        scratch = self._buffer(len(hidden), TILE, torch.float32).view(-1)  # room for one [tile, length] block
        for tile, out in zip(self.float_tiles, maxima.split(TILE)):
            block = scratch[: len(tile) * len(hidden)].view(len(tile), len(hidden))
            torch.amax(torch.matmul(tile, hidden.T, out=block), 1, out=out)
        return maxima

    def _screening_maxima(self, hidden: torch.Tensor) -> torch.Tensor:
        maxima = torch.empty(len(self.weight), dtype=torch.bfloat16)
        for tile, out in zip(self.tiles, maxima.split(TILE)):
            torch.amax(torch.matmul(hidden, tile.T, out=self._buffer(len(hidden), len(tile))), 0, out=out)
        return maxima

    def _buffer(self, rows: int, width: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
        """Reused [rows, width] scratch (a first-dimension slice of a buffer for the longest text so far).

        Reuse matters for memory too: a fresh [length, |V|] block per text (tens of MB, each length
        another size) fragments the heap between the small arrays kept per text, and a process
        encoding 10,000 texts in one call grew by 1.5 GB per 1,000 texts."""
        buffer = self._scratch.get((width, dtype))
        if buffer is None or len(buffer) < rows:
            buffer = self._scratch[(width, dtype)] = torch.empty(rows, width, dtype=dtype)
        return buffer[:rows]

    def _select(self, ids: torch.Tensor, maxima: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.threshold is not None:
            kept = maxima > self.threshold
            return ids[kept], maxima[kept]
        top = maxima.topk(min(self.top_k, len(maxima)))
        order = ids[top.indices].argsort()
        return ids[top.indices][order], top.values[order]
