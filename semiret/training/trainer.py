"""A small, resumable training loop: AdamW, linear warm-up and decay, gradient clipping, checkpoints.

Methods supply the model, the batches of an epoch, and a step function returning the loss; the loop
owns optimisation, logging and checkpointing so every recipe trains the same way.
"""

from __future__ import annotations

import json
import logging
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
from safetensors.torch import load_model, save_model

from semiret.errors import SemiretError
from semiret.progress import StepBar

log = logging.getLogger(__name__)
STATE_FILE = "trainer_state.json"


@dataclass
class TrainingConfig:
    epochs: int = 10
    batch_size: int = 32
    learning_rate: float = 2e-5
    weight_decay: float = 0.0
    warmup_epochs: float = 1.0
    max_grad_norm: float = 2.0
    seed: int = 12345
    threads: int | None = None


@dataclass
class EpochLog:
    epoch: int
    steps: int
    mean_loss: float
    seconds: float
    extra: dict = field(default_factory=dict)


StepFunction = Callable[[list, int], tuple[torch.Tensor, dict]]
BatchFunction = Callable[[int, random.Random], Sequence[list]]


class Trainer:
    """Run ``epochs`` over ``make_batches(epoch, rng)``, calling ``step(batch, global_step)`` for the loss."""

    def __init__(self, model: torch.nn.Module, make_batches: BatchFunction, step: StepFunction,
                 config: TrainingConfig, output_dir: str | Path, steps_per_epoch: int):
        if steps_per_epoch < 1:
            raise SemiretError("nothing to train on: an epoch has no batches")
        self.model = model
        self.make_batches = make_batches
        self.step = step
        self.config = config
        self.output_dir = Path(output_dir)
        self.total_steps = steps_per_epoch * config.epochs
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=config.weight_decay,
                                           eps=1e-8, betas=(0.9, 0.999))
        warmup = int(config.warmup_epochs * steps_per_epoch)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, _linear_schedule(warmup, self.total_steps))
        self.history: list[EpochLog] = []
        self.global_step = 0
        self.start_epoch = 0

    # ------------------------------------------------------------------ checkpoints
    @property
    def checkpoint_dir(self) -> Path:
        return self.output_dir / "checkpoint"

    def save_checkpoint(self) -> None:
        staged = self.output_dir / "checkpoint.tmp"
        staged.mkdir(parents=True, exist_ok=True)
        save_model(self.model, str(staged / "model.safetensors"))
        torch.save({"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                    "rng": torch.get_rng_state()}, staged / "optimizer.pt")
        state = {"epoch": self.start_epoch, "global_step": self.global_step, "config": asdict(self.config),
                 "history": [asdict(h) for h in self.history]}
        (staged / STATE_FILE).write_text(json.dumps(state, indent=2))
        if self.checkpoint_dir.exists():
            old = self.output_dir / "checkpoint.old"
            self.checkpoint_dir.rename(old)
            staged.rename(self.checkpoint_dir)
            for f in old.iterdir():
                f.unlink()
            old.rmdir()
        else:
            staged.rename(self.checkpoint_dir)

    def resume(self) -> bool:
        """Continue from the last checkpoint in ``output_dir`` if there is one."""
        state_file = self.checkpoint_dir / STATE_FILE
        if not state_file.is_file():
            return False
        state = json.loads(state_file.read_text())
        load_model(self.model, str(self.checkpoint_dir / "model.safetensors"))
        saved = torch.load(self.checkpoint_dir / "optimizer.pt", weights_only=False)
        self.optimizer.load_state_dict(saved["optimizer"])
        self.scheduler.load_state_dict(saved["scheduler"])
        torch.set_rng_state(saved["rng"])
        self.start_epoch = state["epoch"]
        self.global_step = state["global_step"]
        self.history = [EpochLog(**h) for h in state["history"]]
        log.warning("resuming %s from epoch %d (step %d)", self.output_dir, self.start_epoch, self.global_step)
        return True

    # ------------------------------------------------------------------ the loop
    def train(self, resume: bool = True, on_epoch_end: Callable[[EpochLog], dict] | None = None) -> list[EpochLog]:
        if self.config.threads:
            torch.set_num_threads(self.config.threads)
        torch.manual_seed(self.config.seed)
        if resume:
            self.resume()
        self.model.train()
        for epoch in range(self.start_epoch, self.config.epochs):
            rng = random.Random(self.config.seed + epoch)
            batches = self.make_batches(epoch, rng)
            losses, started = [], time.perf_counter()
            with StepBar(f"epoch {epoch + 1}/{self.config.epochs}", len(batches)) as bar:
                for batch in batches:
                    loss, figures = self.step(batch, self.global_step)
                    if not torch.isfinite(loss):
                        raise SemiretError(f"training diverged: loss is {loss.item()} at step {self.global_step}")
                    self.optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    if self.config.max_grad_norm:
                        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.max_grad_norm)
                    self.optimizer.step()
                    self.scheduler.step()
                    self.global_step += 1
                    losses.append(loss.item())
                    bar.advance(f"loss {np.mean(losses[-20:]):.4f}" + "".join(
                        f" {k} {v:.3g}" for k, v in figures.items()))
            entry = EpochLog(epoch + 1, len(batches), float(np.mean(losses)), time.perf_counter() - started)
            if on_epoch_end is not None:
                self.model.eval()
                entry.extra = on_epoch_end(entry) or {}
                self.model.train()
            self.history.append(entry)
            log.info("epoch %d: loss %.4f (%.1f s) %s", entry.epoch, entry.mean_loss, entry.seconds, entry.extra)
            self.start_epoch = epoch + 1
            self.save_checkpoint()
        self.model.eval()
        return self.history


def _linear_schedule(warmup_steps: int, total_steps: int) -> Callable[[int], float]:
    def factor(step: int) -> float:
        if warmup_steps and step < warmup_steps:
            return (step + 1) / warmup_steps
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))

    return factor
