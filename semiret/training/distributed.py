"""Training on several processes (``torchrun``, without a DDP wrapper), with what one process computes.

Every process draws the same global batch (a batch's random draws come from its own seed) and the losses
encode through :func:`encode_rows`: each process encodes a contiguous share of the rows and receives the
others' with their gradients (all-gather), so every process computes the loss of the whole global batch, in
its order: in-batch negatives, the vocabulary sample, FLOPS over the batch and the miners' draws are those of
one process. Each process's gradients then flow back through the all-gather to the shares it encoded;
:func:`average_gradients` averages them, which gives the gradient of the global batch's loss. The main process
(rank 0) alone writes checkpoints, models and summaries and shows progress.
"""

from __future__ import annotations

import atexit
import os
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence, TypeVar

import torch
import torch.distributed as dist

from semiret import progress
from semiret.models.devices import resolve_device
from semiret.training.devices import MixedPrecision

T = TypeVar("T")


@dataclass(frozen=True)
class Processes:
    """This process's place in the run (one process: rank 0 of 1)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0


_processes: Processes | None = None
_precision = MixedPrecision(torch.device("cpu"), enabled=False)


def processes() -> Processes:
    """This process's rank, from ``torchrun``'s environment (``WORLD_SIZE`` > 1); the first call initialises the
    process group: gloo for CPU tensors and, where torch sees a GPU, NCCL for CUDA ones. Processes other than
    the main one show no progress bars."""
    global _processes
    if _processes is None:
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        if world_size > 1 and not dist.is_initialized():
            dist.init_process_group("cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo")
            atexit.register(dist.destroy_process_group)
        _processes = Processes(int(os.environ.get("RANK", "0")), world_size, int(os.environ.get("LOCAL_RANK", "0")))
        if not _processes.main:
            progress.set_enabled(False)
    return _processes


def is_main_process() -> bool:
    return processes().main


def training_device(name: str) -> torch.device:
    """The device a ``--device`` option means for this process (under ``torchrun``, its local rank's GPU): where a
    recipe also runs what it encodes before the first step (trees, teachers, mined negatives)."""
    return resolve_device(name, processes().local_rank)


def shares(rows: int, world_size: int) -> list[int]:
    """How many of ``rows`` each rank encodes (contiguous slices, in rank order, sizes differing by one at most)."""
    return [rows // world_size + (rank < rows % world_size) for rank in range(world_size)]


@contextmanager
def encoders_in(precision: MixedPrecision):
    """:func:`encode_rows` runs the encoders under ``precision`` inside the block (the trainer's)."""
    global _precision
    previous, _precision = _precision, precision
    try:
        yield
    finally:
        _precision = previous


def encode_rows(encode: Callable[[Sequence[T]], torch.Tensor | tuple[torch.Tensor, ...]], items: Sequence[T]):
    """``encode(items)``: one row per item (a tensor, or a tuple of them), computed as the module says: each
    process encodes its share of ``items`` under the trainer's mixed precision and gets the whole batch back in
    float32, the other shares with their gradients. In one process at full precision, ``encode(items)`` itself."""
    group = processes()
    if not items or (group.world_size == 1 and _precision.dtype is None):
        return encode(items)
    counts = shares(len(items), group.world_size)
    start = sum(counts[: group.rank])
    local = items[start: start + counts[group.rank]] or items[:1]  # a stand-in row for an empty share, dropped
    with _precision.autocast():
        encoded = encode(local)
    parts = tuple(part.float() for part in (encoded if isinstance(encoded, tuple) else (encoded,)))
    if group.world_size > 1:
        parts = tuple(_gathered(part, counts) for part in parts)
    return parts if isinstance(encoded, tuple) else parts[0]


def _gathered(local: torch.Tensor, counts: list[int]) -> torch.Tensor:
    """Every rank's rows (``counts[r]`` of rank r's), in rank order, with gradients back to each rank's own."""
    from torch.distributed.nn.functional import all_gather

    width = max(counts)
    if len(local) < width:
        local = torch.cat([local, local.new_zeros((width - len(local), *local.shape[1:]))])
    with warnings.catch_warnings():  # the autograd all-gather the papers' code uses; its successor is private
        warnings.filterwarnings("ignore", "torch.distributed.nn.functional.all_gather is deprecated", FutureWarning)
        pieces = all_gather(local)
    return torch.cat([piece[:count] for piece, count in zip(pieces, counts)])


def average_gradients(parameters: Iterable[torch.nn.Parameter]) -> None:
    """Each trainable parameter's gradient averaged over the processes, in one all-reduce; a parameter that no
    process has a gradient for keeps none (as the optimizer expects). Nothing in one process."""
    if processes().world_size == 1:
        return
    parameters = [p for p in parameters if p.requires_grad]
    if not parameters:
        return
    present = torch.tensor([p.grad is not None for p in parameters], dtype=torch.float32,
                           device=parameters[0].device)
    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in parameters]
                     + [present])
    dist.all_reduce(flat)
    flat /= processes().world_size
    offset = 0
    for parameter, anywhere in zip(parameters, flat[-len(parameters):].tolist()):
        size = parameter.numel()
        parameter.grad = flat[offset: offset + size].view_as(parameter) if anywhere > 0 else None
        offset += size


def broadcast_from_main(module: torch.nn.Module) -> None:
    """Give every process the main process's parameters and buffers (a freshly initialised head, say)."""
    if processes().world_size > 1:
        for tensor in [*module.parameters(), *module.buffers()]:
            dist.broadcast(tensor.data, 0)


def _wait_for_all() -> None:
    dist.all_reduce(torch.zeros(1))  # a barrier over gloo, whatever the training device


@contextmanager
def main_process_first():
    """The block runs on the main process, then on the others, which find what it wrote (an index, a cache)."""
    group = processes()
    if group.world_size > 1 and not group.main:
        _wait_for_all()
    yield
    if group.world_size > 1 and group.main:
        _wait_for_all()


def main_process_result(compute: Callable[[], T]) -> T:
    """``compute()`` run by the main process alone, its (picklable) result given to every process."""
    group = processes()
    if group.world_size == 1:
        return compute()
    result = [compute() if group.main else None]
    dist.broadcast_object_list(result, 0, device=torch.device("cpu"))
    return result[0]
