"""Where models compute: the device names ``--device`` takes, and the device inference encodes on.

Training chooses its device per run (its own ``--device``, :mod:`semiret.training.trainer`). Inference (an index
built, documents added, queries encoded, a corpus scored) runs on one process-wide *encoding device*: the CPU unless
:func:`set_encoding_device` (the CLI's ``--device``) or the ``SEMIRET_DEVICE`` variable names another. The CPU stays
the default, as in bm25s and Pyserini: its kernels are the ones the project's figures were measured with, and a GPU
ranks a rounding apart. Every saved model loads onto the encoding device; its outputs come back to the CPU.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

import torch

from semiret.errors import SemiretError

DEVICES = "auto, cpu, cuda, cuda:N, mps"
ENCODING_DEVICE_VARIABLE = "SEMIRET_DEVICE"
"""The environment variable naming the encoding device (inherited by the service's worker processes)."""


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """The device ``name`` means here: ``auto`` is CUDA when torch sees a GPU, else the CPU; ``cuda`` without
    an index is the GPU of this process's local rank (under ``torchrun``). An error, before any compute, for a
    device that is unknown or not available on this machine."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda", "mps"):
        raise SemiretError(f"unknown device {name!r} (one of {DEVICES})")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise SemiretError(f"device {name!r} is not available: torch {torch.__version__} sees no CUDA GPU")
        index = local_rank if device.index is None else device.index
        if index >= torch.cuda.device_count():
            raise SemiretError(f"device {name!r} is not available: torch sees {torch.cuda.device_count()} GPU(s)"
                               + (f" and this is local rank {local_rank}" if device.index is None else ""))
        return torch.device("cuda", index)
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise SemiretError(f"device {name!r} is not available on this machine")
    return device


def module_device(module: torch.nn.Module) -> torch.device:
    """The device of ``module``'s parameters (the CPU when it has none)."""
    return next(module.parameters(), torch.empty(0)).device


def set_encoding_device(name: str) -> torch.device:
    """Make ``name`` (checked first, :func:`resolve_device`) the device models load onto for inference in this
    process and the processes it starts."""
    device = resolve_device(name)
    os.environ[ENCODING_DEVICE_VARIABLE] = str(device)
    return device


@contextmanager
def encoding_on(name: str):
    """:func:`set_encoding_device` for the ``with`` block only (the variable as it was afterwards)."""
    before = os.environ.get(ENCODING_DEVICE_VARIABLE)
    try:
        yield set_encoding_device(name)
    finally:
        if before is None:
            os.environ.pop(ENCODING_DEVICE_VARIABLE, None)
        else:
            os.environ[ENCODING_DEVICE_VARIABLE] = before


def encoding_device() -> torch.device:
    """The device models load onto for inference (the CPU unless :func:`set_encoding_device` or
    ``SEMIRET_DEVICE`` says otherwise)."""
    name = os.environ.get(ENCODING_DEVICE_VARIABLE, "cpu")
    try:
        return resolve_device(name)
    except SemiretError as exc:
        raise SemiretError(f"{ENCODING_DEVICE_VARIABLE}={name}: {exc}") from None


def to_encoding_device(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` moved to :func:`encoding_device` (in place, as ``Module.to``)."""
    device = encoding_device()
    return model if device.type == "cpu" else model.to(device)
