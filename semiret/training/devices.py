"""Mixed precision for training on CUDA (the device names ``--device`` takes: :mod:`semiret.models.devices`).

Mixed precision covers the encoders' forward passes only (:func:`semiret.training.distributed.encode_rows`):
bf16 autocast where the GPU supports it, else fp16 with a gradient scaler. The losses' scores, softmaxes
and regularizers are computed in float32 from the encoders' outputs (SiDR's inner products reach the
hundreds, where bf16 keeps two or three significant digits).
"""

from __future__ import annotations

from contextlib import nullcontext

import torch


class MixedPrecision:
    """Autocast for the encoders and, for fp16, the gradient scaler; nothing on a CPU or MPS, or when
    ``enabled`` is false."""

    def __init__(self, device: torch.device, enabled: bool = True):
        self.device_type = device.type
        self.dtype = None
        if enabled and device.type == "cuda":
            self.dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        self.scaler = torch.amp.GradScaler("cuda") if self.dtype == torch.float16 else None

    def autocast(self):
        """The context the encoders run in."""
        return torch.autocast(self.device_type, dtype=self.dtype) if self.dtype else nullcontext()

    def scaled(self, loss: torch.Tensor) -> torch.Tensor:
        """What to call ``backward`` on."""
        return self.scaler.scale(loss) if self.scaler else loss

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        """Gradients back to their true size (before clipping)."""
        if self.scaler:
            self.scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """The optimizer's step (skipped by the scaler when fp16 gradients overflowed)."""
        if self.scaler:
            self.scaler.step(optimizer)
            self.scaler.update()
        else:
            optimizer.step()

    def state_dict(self) -> dict:
        return self.scaler.state_dict() if self.scaler else {}

    def load_state_dict(self, state: dict) -> None:
        if self.scaler and state:
            self.scaler.load_state_dict(state)
