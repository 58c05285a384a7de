"""A small, resumable training loop: AdamW, linear warm-up and decay, gradient clipping, checkpoints.

Recipes supply the model, a :class:`~semiret.training.losses.Loss` and a
:class:`~semiret.training.data.BatchSource`; the loop owns optimisation, logging (the loss and its named
terms) and checkpointing, so every recipe trains the same way.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from safetensors.torch import load_model, save_model

from semiret.errors import SemiretError
from semiret.progress import StepBar
from semiret.training.config import Schedule, TrainingConfig
from semiret.training.data import BatchSource
from semiret.training.losses import Loss

log = logging.getLogger(__name__)
STATE_FILE = "trainer_state.json"


@dataclass
class EpochLog:
    epoch: int
    steps: int
    mean_loss: float
    seconds: float
    terms: dict[str, float] = field(default_factory=dict)
    """The loss's named terms, averaged over the epoch's steps."""

    @classmethod
    def from_json(cls, entry: dict) -> EpochLog:
        """An entry of a saved history (older checkpoints have no ``terms``)."""
        return cls(**{f.name: entry[f.name] for f in fields(cls) if f.name in entry})


def epoch_summary(history: list[EpochLog]) -> dict:
    """What a recipe's summary reports of a history: the loss and the mean of each term, per epoch."""
    return {"loss_per_epoch": [round(h.mean_loss, 4) for h in history],
            "terms_per_epoch": [{k: round(v, 4) for k, v in h.terms.items()} for h in history]}


class Trainer:
    """Minimise ``loss(model, batch, step)`` over ``schedule.epochs`` epochs of ``batches``, checkpointing to
    ``output_dir/checkpoint`` after each epoch (``config``: clipping, seed, threads; recorded with the state)."""

    def __init__(self, model: torch.nn.Module, loss: Loss, batches: BatchSource, config: TrainingConfig,
                 schedule: Schedule, output_dir: str | Path):
        steps_per_epoch = len(batches)
        if steps_per_epoch < 1:
            raise SemiretError("nothing to train on: an epoch has no batches")
        self.model, self.loss, self.batches = model, loss, batches
        self.config, self.schedule = config, schedule
        self.output_dir = Path(output_dir)
        self.total_steps = steps_per_epoch * schedule.epochs
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=schedule.learning_rate, weight_decay=0.0, eps=1e-8,
                                           betas=(0.9, 0.999))
        warmup = int(schedule.warmup_epochs * steps_per_epoch)
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
                 "schedule": asdict(self.schedule), "history": [asdict(h) for h in self.history]}
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
        self.history = [EpochLog.from_json(h) for h in state["history"]]
        log.warning("resuming %s from epoch %d (step %d)", self.output_dir, self.start_epoch, self.global_step)
        return True

    # ------------------------------------------------------------------ the loop
    def train(self, resume: bool = True) -> list[EpochLog]:
        if self.config.threads:
            torch.set_num_threads(self.config.threads)
        torch.manual_seed(self.config.seed)
        if resume:
            self.resume()
        self.model.train()
        epochs = self.schedule.epochs
        for epoch in range(self.start_epoch, epochs):
            batches = self.batches.epoch(random.Random(self.config.seed + epoch))
            losses, terms, started = [], defaultdict(list), time.perf_counter()
            with StepBar(f"epoch {epoch + 1}/{epochs}", len(batches)) as bar:
                for batch in batches:
                    output = self.loss(self.model, batch, self.global_step)
                    if not torch.isfinite(output.total):
                        raise SemiretError(f"training diverged: loss is {output.total.item()} "
                                           f"at step {self.global_step}")
                    self.optimizer.zero_grad(set_to_none=True)
                    output.total.backward()
                    if self.config.max_grad_norm:
                        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.max_grad_norm)
                    self.optimizer.step()
                    self.scheduler.step()
                    self.global_step += 1
                    losses.append(output.total.item())
                    for name, value in output.terms.items():
                        terms[name].append(value)
                    bar.advance(f"loss {np.mean(losses[-20:]):.4f}" + "".join(
                        f" {k} {v:.3g}" for k, v in output.terms.items()))
            entry = EpochLog(epoch + 1, len(batches), float(np.mean(losses)), time.perf_counter() - started,
                             {name: float(np.mean(values)) for name, values in terms.items()})
            self.history.append(entry)
            log.info("epoch %d: loss %.4f (%.1f s) %s", entry.epoch, entry.mean_loss, entry.seconds, entry.terms)
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
