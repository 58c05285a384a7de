"""A small, resumable training loop: AdamW, linear warm-up and decay, gradient clipping, checkpoints.

Recipes supply the model, a :class:`~semiret.training.losses.Loss` and a
:class:`~semiret.training.data.BatchSource`; the loop owns the device and mixed precision
(:mod:`semiret.training.devices`), several processes under ``torchrun`` (:mod:`semiret.training.distributed`),
optimisation, logging (the loss and its named terms) and checkpointing, so every recipe trains the same way.
Checkpoints hold CPU tensors: a run resumes on another device.
"""

from __future__ import annotations

import json
import logging
import random
import shutil
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from safetensors.torch import load_model, save_model

from semiret.errors import SemiretError
from semiret.files import atomic_write_json, staged_directory
from semiret.models.devices import resolve_device
from semiret import progress
from semiret.progress import StepBar
from semiret.training.config import Schedule, TrainingConfig
from semiret.training.data import BatchSource
from semiret.training.devices import MixedPrecision
from semiret.training.distributed import (average_gradients, broadcast_from_main, encoders_in, is_main_process,
                                          main_process_first, processes)
from semiret.training.losses import Loss

log = logging.getLogger(__name__)
STATE_FILE = "trainer_state.json"
FUSED_OPTIMIZER_DEVICES = ("cpu", "cuda")
"""Where AdamW runs its fused kernel (elsewhere, MPS included, the per-tensor loop)."""


@dataclass
class EpochLog:
    epoch: int
    steps: int
    mean_loss: float
    seconds: float
    terms: dict[str, float] = field(default_factory=dict)
    """The loss's named terms, averaged over the epoch's steps."""
    notes: dict = field(default_factory=dict)
    """What the recipe's ``after_epoch`` hook reported (a dev metric, a re-clustering; ``stop``: true to end
    training after this epoch, early stopping)."""
    gpu_peak_gb: float | None = None
    """On CUDA, the most GPU memory torch held for tensors so far in the run (GiB): what sizes runs that share a GPU."""

    @classmethod
    def from_json(cls, entry: dict) -> EpochLog:
        """An entry of a saved history (older checkpoints have no ``terms``)."""
        return cls(**{f.name: entry[f.name] for f in fields(cls) if f.name in entry})


def epoch_line(entry: EpochLog, epochs: int) -> str:
    """One finished epoch as the run reports it: its loss, each term, what ``after_epoch`` noted, its time."""
    figures = [f"loss {entry.mean_loss:.4f}", *(f"{name} {value:.4g}" for name, value in entry.terms.items()),
               *(f"{name} {value:.4g}" if isinstance(value, float) else f"{name} {value}"
                 for name, value in entry.notes.items() if isinstance(value, (int, float, str)))]
    return f"epoch {entry.epoch}/{epochs}: {', '.join(figures)} ({entry.seconds:.1f} s)"


def epoch_summary(history: list[EpochLog]) -> dict:
    """What a recipe's summary reports of a history: the loss and the mean of each term, per epoch (and, on
    CUDA, the run's peak GPU memory)."""
    peaks = [h.gpu_peak_gb for h in history if h.gpu_peak_gb is not None]
    return {"loss_per_epoch": [round(h.mean_loss, 4) for h in history],
            "terms_per_epoch": [{k: round(v, 4) for k, v in h.terms.items()} for h in history],
            **({"gpu_peak_gb": round(max(peaks), 2)} if peaks else {})}


def train_stage(model, loss, batches, config, schedule, folder: Path, learning_rates: dict | None = None,
                resume: bool = True) -> dict:
    """One stage of a recipe (pre-training or fine-tuning) trained by :class:`Trainer` in ``folder``; what the
    recipe's summary reports of it: steps per epoch, epochs, seconds and :func:`epoch_summary`."""
    started = time.perf_counter()
    history = Trainer(model, loss, batches, config, schedule, folder, learning_rates=learning_rates).train(
        resume=resume)
    return {"steps_per_epoch": len(batches), "epochs": schedule.epochs,
            "seconds": round(time.perf_counter() - started, 1), **epoch_summary(history)}


def start_afresh(output: str | Path, stages: tuple[str, ...]) -> None:
    """A run started again (``--no-resume``): the folders of its ``stages`` removed before any trains, so that one
    stopped early never brings an old stage's checkpoint or model back (a stage's trainer removes its own checkpoint
    only once reached). The main process does it; the others wait."""
    with main_process_first():
        if is_main_process():
            for stage in stages:
                shutil.rmtree(Path(output) / stage, ignore_errors=True)


def write_run_summary(output: str | Path, summary: dict) -> dict:
    """``summary`` with where the run's model is (``model``: ``<output>/model``), written to
    ``<output>/summary.json`` in one rename; what every recipe returns."""
    summary = {**summary, "model": str(Path(output) / "model")}
    atomic_write_json(Path(output) / "summary.json", summary)
    return summary


class Trainer:
    """Minimise ``loss(model, batch, step)`` over ``schedule.epochs`` epochs of ``batches``, checkpointing to
    ``output_dir/checkpoint`` after each epoch (``config``: device, mixed precision, clipping, seed, threads;
    recorded with the state). The model trains on ``config.device`` and is back on the CPU after :meth:`train`.

    ``learning_rates`` maps parameter-name prefixes to their own peak rate (say, trainable cluster centroids);
    every other parameter trains at the schedule's. All follow the same warm-up and decay."""

    def __init__(self, model: torch.nn.Module, loss: Loss, batches: BatchSource, config: TrainingConfig,
                 schedule: Schedule, output_dir: str | Path, learning_rates: dict[str, float] | None = None):
        steps_per_epoch = len(batches)
        if steps_per_epoch < 1:
            raise SemiretError("nothing to train on: an epoch has no batches")
        self.processes = processes()
        self.device = resolve_device(config.device, self.processes.local_rank)
        self.precision = MixedPrecision(self.device, config.mixed_precision)
        self.model, self.loss, self.batches = model.to(self.device), loss, batches
        self.config, self.schedule = config, schedule
        self.output_dir = Path(output_dir)
        self.total_steps = batches.steps(config.seed, schedule.epochs)  # each epoch's own count: the decay ends at 0
        # the fused kernel updates every tensor in one pass: 4x faster than the per-tensor loop on a CPU (a step
        # of GDR's 15M trainable parameters, 61 -> 16 ms on 2 cores, docs/results.md), the same update
        self.optimizer = torch.optim.AdamW(_parameter_groups(model, schedule.learning_rate, learning_rates or {}),
                                           lr=schedule.learning_rate, weight_decay=0.0, eps=1e-8, betas=(0.9, 0.999),
                                           fused=self.device.type in FUSED_OPTIMIZER_DEVICES)
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
        """Write the checkpoint (the main process alone)."""
        if not self.processes.main:
            return
        with staged_directory(self.checkpoint_dir) as staged:  # an interrupted save leaves the last checkpoint
            save_model(self.model, str(staged / "model.safetensors"))
            torch.save({"optimizer": _cpu_copy(self.optimizer.state_dict()), "scheduler": self.scheduler.state_dict(),
                        "rng": torch.get_rng_state(), "precision": self.precision.state_dict(),
                        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []},
                       staged / "optimizer.pt")
            state = {"epoch": self.start_epoch, "global_step": self.global_step, "config": asdict(self.config),
                     "schedule": asdict(self.schedule), "steps_per_epoch": len(self.batches),
                     "history": [asdict(h) for h in self.history]}
            (staged / STATE_FILE).write_text(json.dumps(state, indent=2))

    def forget_optimizer_state(self, parameters) -> None:
        """Drop the optimizer's moments of ``parameters`` (their values were replaced, say by a re-clustering)."""
        for parameter in parameters:
            self.optimizer.state.pop(parameter, None)

    def resume(self) -> bool:
        """Continue from the last checkpoint in ``output_dir`` if there is one."""
        state = _saved_state(self.checkpoint_dir)
        if state is None:
            return False
        recorded = {name: state[name] if isinstance(state.get(name), dict) else {} for name in ("config", "schedule")}
        changes = {**_changes(recorded["config"], asdict(self.config)), **_changes(recorded["schedule"], asdict(self.schedule)),
                   **_changes({"steps_per_epoch": state.get("steps_per_epoch", len(self.batches))},
                              {"steps_per_epoch": len(self.batches)})}
        changed = _written(changes)
        _refuse_fixed(changes, f"{self.output_dir}: its checkpoint")
        try:
            load_model(self.model, str(self.checkpoint_dir / "model.safetensors"))
            saved = torch.load(self.checkpoint_dir / "optimizer.pt", map_location="cpu", weights_only=False)
            self.optimizer.load_state_dict(saved["optimizer"])  # moved to the parameters' device
            self.precision.load_state_dict(saved.get("precision", {}))
            self.scheduler.load_state_dict(saved["scheduler"])
            torch.set_rng_state(saved["rng"])
            if saved.get("cuda_rng") and torch.cuda.is_available() and len(saved["cuda_rng"]) == torch.cuda.device_count():
                torch.cuda.set_rng_state_all(saved["cuda_rng"])  # dropout on a GPU draws from the GPU's generators
            self.start_epoch = state["epoch"]
            self.global_step = state["global_step"]
            self.history = [EpochLog.from_json(h) for h in state["history"]]
        except SemiretError:
            raise
        except Exception as exc:  # truncated files, another model's weights: safetensors, torch and pickle errors
            raise _unusable(self.checkpoint_dir, exc, changed) from None
        if changed:
            log.warning("resuming %s with options other than its checkpoint's: %s", self.output_dir, changed)
        log.warning("resuming %s from epoch %d (step %d)", self.output_dir, self.start_epoch, self.global_step)
        if self.start_epoch >= self.schedule.epochs:
            log.warning("%s has trained all its %d epochs: nothing is trained again, and the model is its checkpoint's "
                        "(to train again: train(resume=False), --no-resume, or another output folder)",
                        self.output_dir, self.schedule.epochs)
        return True

    # ------------------------------------------------------------------ the loop
    def _gpu_peak_gb(self) -> float | None:
        if self.device.type != "cuda":
            return None
        return torch.cuda.max_memory_allocated(self.device) / 2**30

    def train(self, resume: bool = True, after_epoch: Callable[[int], dict] | None = None) -> list[EpochLog]:
        """Run the remaining epochs. ``after_epoch(epoch)`` (1-based) runs after each epoch's last step and before
        its checkpoint, with the model where it trains (dense encoders encode there: a corpus embedding for a
        dev metric takes seconds on a GPU, where moving to the CPU made it minutes); what it returns is kept in the epoch's
        log (``notes``), so a resumed run knows it. A note ``stop`` ends the training after that epoch (a
        resumed run too). Torch's global generator is seeded with the run's seed, as transformers' ``Trainer``
        seeds it; its thread count (``threads``) is the caller's again afterwards."""
        threads = torch.get_num_threads()
        if self.config.threads:
            torch.set_num_threads(self.config.threads)
        try:
            torch.manual_seed(self.config.seed)
            if resume:
                self.resume()
            elif self.processes.main and self.checkpoint_dir.exists():  # starting again: a run stopped early never
                shutil.rmtree(self.checkpoint_dir)  # brings the old one back
            broadcast_from_main(self.model)
            self.model.train()
            with encoders_in(self.precision):
                self._run_epochs(after_epoch)
            self.model.eval()
            self.model.to("cpu")
            return self.history
        finally:
            torch.set_num_threads(threads)

    def _run_epochs(self, after_epoch: Callable[[int], dict] | None) -> None:
        epochs = self.schedule.epochs
        for epoch in range(self.start_epoch, epochs):
            if self.history and self.history[-1].notes.get("stop"):
                return
            batches = self.batches.epoch(random.Random(self.config.seed + epoch))
            losses, terms, started = [], defaultdict(list), time.perf_counter()
            with StepBar(f"epoch {epoch + 1}/{epochs}", len(batches)) as bar:
                for batch in batches:
                    output = self.loss(self.model, batch, self.global_step)
                    if not torch.isfinite(output.total):
                        raise SemiretError(f"training diverged: loss is {output.total.item()} "
                                           f"at step {self.global_step}")
                    self.optimizer.zero_grad(set_to_none=True)
                    self.precision.scaled(output.total).backward()
                    average_gradients(self.model.parameters())
                    self.precision.unscale(self.optimizer)
                    if self.config.max_grad_norm:
                        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.max_grad_norm)
                    self.precision.step(self.optimizer)
                    self.scheduler.step()
                    self.global_step += 1
                    losses.append(output.total.item())
                    for name, value in output.terms.items():
                        terms[name].append(value)
                    bar.advance(f"loss {np.mean(losses[-20:]):.4f}" + "".join(
                        f" {k} {v:.3g}" for k, v in output.terms.items()))
            entry = EpochLog(epoch + 1, len(batches), float(np.mean(losses)), time.perf_counter() - started,
                             {name: float(np.mean(values)) for name, values in terms.items()},
                             after_epoch(epoch + 1) if after_epoch is not None else {}, self._gpu_peak_gb())
            self.history.append(entry)
            progress.report(epoch_line(entry, epochs))
            self.start_epoch = epoch + 1
            self.save_checkpoint()



def saved_history(output_dir: str | Path) -> list[EpochLog]:
    """The epochs of the last checkpoint in ``output_dir`` ([] when there is none): what a resumed run starts
    from, for recipes that must rebuild their state (a tree, say) before the trainer resumes."""
    checkpoint = Path(output_dir) / "checkpoint"
    state = _saved_state(checkpoint)
    if state is None:
        return []
    try:
        return [EpochLog.from_json(h) for h in state["history"]]
    except (KeyError, TypeError) as exc:
        raise _unusable(checkpoint, exc) from None


def start_state_reusable(recorded: dict | None, made_with: dict, checkpointed: bool, what: str | Path) -> bool:
    """Whether what a run built before its first step (``what``: a tree, clusters), recorded as made with the
    options ``recorded``, serves this run, made with ``made_with``: yes when they agree (or an older run recorded
    none). When they differ, a run without a checkpoint yet builds it again (False: a run stopped within its first
    epoch and started with another branching reused the old tree), and one with a checkpoint is an error, its
    weights having trained against the old state."""
    if recorded is None or recorded == made_with:
        return True
    changed = ", ".join(f"{name}: {recorded.get(name)!r} -> {value!r}" for name, value in made_with.items()
                        if recorded.get(name) != value)
    if checkpointed:
        raise SemiretError(f"{what} was made with other options than this run's ({changed}), and the run's checkpoint "
                           f"trained on it: resume with the options it was made with, or start again with --no-resume")
    log.warning("%s was made with other options (%s): it is made again", what, changed)
    return False


RESUMABLE_CHANGES = {"output", "threads", "device", "mixed_precision", "epochs", "finetune_epochs", "pretrain_epochs"}
"""Options a run may resume with other values of (where it runs; how long it goes on)."""


def _saved_state(checkpoint: Path) -> dict | None:
    """The checkpoint's trainer state (None when there is no checkpoint); unreadable: a :class:`SemiretError`."""
    state_file = checkpoint / STATE_FILE
    if not state_file.is_file():
        return None
    try:
        state = json.loads(state_file.read_text())
        if not isinstance(state, dict):
            raise ValueError(f"expected a JSON object, got {type(state).__name__}")
        return state
    except (OSError, ValueError) as exc:
        raise _unusable(checkpoint, exc) from None


FIXED_ON_RESUME = {"data", "split", "base", "seed", "steps_per_epoch", "warmup_epochs", "pretrain_corpora"}
"""Options a resumed run cannot take up (with those named ``*learning_rate``: the optimizer's, kept in its state;
``*batch_size``, every stage's; ``steps_per_epoch``: the batches an epoch has, which other data or batch sizes change,
and the schedule is made of; ``pretrain_corpora``: a pre-training's data): a resume changing them is refused rather
than recorded as if they had been used."""
PATH_OPTIONS = {"data", "pretrain_corpora", "finetune_also", "base"}
"""Options naming folders or files: compared as the paths they resolve to (``small`` run from its folder is
``/data/small``)."""


def _fixed(name: str) -> bool:
    return name in FIXED_ON_RESUME or name.endswith("learning_rate") or name.endswith("batch_size")


def _refuse_fixed(changes: dict[str, tuple], what: str) -> None:
    """Refuse the ``changes`` (:func:`_changes`) a resume cannot take up (:data:`FIXED_ON_RESUME`)."""
    refused = {name: change for name, change in changes.items() if _fixed(name)}
    if refused:
        raise SemiretError(f"{what} was trained with other {_written(refused)}, which a resumed run cannot take up "
                           "(its optimizer, schedule, data and random state are the checkpoint's): resume with the "
                           "options it was made with, or start again with --no-resume (train(resume=False)) or "
                           "another output folder")


def _resolved(name: str, value):
    """``value`` as compared across runs: a path option as the path it resolves to, where it exists."""
    if name not in PATH_OPTIONS or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_resolved(name, each) for each in value]
    return str(Path(value).resolve()) if isinstance(value, str) and Path(value).exists() else value


def _changes(saved: dict, current: dict) -> dict[str, tuple]:
    """The options a resumed run changes from its checkpoint's, ``{name: (old, new)}``, those it may change aside."""
    return {name: (saved[name], value) for name, value in current.items()
            if name in saved and _resolved(name, saved[name]) != _resolved(name, value)
            and name not in RESUMABLE_CHANGES}


def check_reused_stage(folder: str | Path, config, epochs: int, later: tuple[str, ...] = ()) -> bool:
    """Whether the finished stage in ``folder`` (a recipe's pre-training, whose model a resumed run loads rather than
    make its inputs again) serves this run, made with ``config`` for ``epochs`` epochs: False when its checkpoint
    trained fewer (the stage resumes to go on); refused, as a resume of its checkpoint would be, where the run
    changes what the stage was trained with (:data:`FIXED_ON_RESUME`: its data, seed, batch sizes, learning rates;
    the later stages' ``finetune*`` options and those named in ``later`` aside); other changes warned of. A stage
    without a checkpoint (an older run's) serves."""
    state = _saved_state(Path(folder) / "checkpoint")
    if state is None:
        return True
    if state.get("epoch", 0) < epochs:
        return False
    recorded = state.get("config") if isinstance(state.get("config"), dict) else {}
    changes = {name: change for name, change in _changes(recorded, asdict(config)).items()
               if not name.startswith("finetune") and name not in later}
    _refuse_fixed(changes, f"the pre-training in {folder}")
    if changes:
        log.warning("reusing the pre-training in %s, made with other options: %s", folder, _written(changes))
    return True


def _written(changes: dict[str, tuple]) -> str:
    """:func:`_changes` written ``name: old -> new``."""
    return ", ".join(f"{name}: {old!r} -> {new!r}" for name, (old, new) in changes.items())


def _unusable(checkpoint: Path, exc: BaseException, changed: str = "") -> SemiretError:
    """The error for a checkpoint that cannot be resumed: its cause in one line, and what to do instead."""
    cause = " ".join(str(exc).split())
    cause = cause if len(cause) <= 300 else cause[:300] + "..."
    because = f" (it was saved with other options: {changed})" if changed else ""
    return SemiretError(f"cannot resume from {checkpoint}{because}: {type(exc).__name__}: {cause}; start the run "
                        f"again with --no-resume, or give another --output")


def _cpu_copy(state):
    """``state`` (nested dicts and lists) with every tensor copied to the CPU."""
    if isinstance(state, torch.Tensor):
        return state.cpu()
    if isinstance(state, dict):
        return {key: _cpu_copy(value) for key, value in state.items()}
    if isinstance(state, list):
        return [_cpu_copy(value) for value in state]
    return state


def _parameter_groups(model: torch.nn.Module, learning_rate: float, learning_rates: dict[str, float]) -> list[dict]:
    """The trainable parameters in optimizer groups: one per prefix of ``learning_rates`` that names any, then
    the rest at ``learning_rate``."""
    groups: dict[str, list] = {prefix: [] for prefix in learning_rates}
    rest = []
    for name, parameter in model.named_parameters():
        if parameter.requires_grad:
            prefix = next((p for p in learning_rates if name.startswith(p)), None)
            (groups[prefix] if prefix is not None else rest).append(parameter)
    return [{"params": rest, "lr": learning_rate}] + [{"params": params, "lr": learning_rates[prefix]}
                                                      for prefix, params in groups.items() if params]


def _linear_schedule(warmup_steps: int, total_steps: int) -> Callable[[int], float]:
    """Linear warm-up, then linear decay to 0: ``transformers.get_linear_schedule_with_warmup``'s shape, written
    here because its warm-up starts at a factor of 0 (the first step then changes nothing) where this one starts at
    ``1 / warmup_steps``, which every recorded training of this project used."""

    def factor(step: int) -> float:
        if warmup_steps and step < warmup_steps:
            return (step + 1) / warmup_steps
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))

    return factor
