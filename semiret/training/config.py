"""What every training recipe is configured with, torch-free so the CLI can generate flags from it quickly.

A recipe's configuration extends :class:`TrainingConfig` with its own fields; the ``semiret train <method>``
command is generated from that dataclass (:func:`semiret.options.command_with_options`), so a field is declared
once, with its default and help (the attribute docstring), for the Python API and the CLI alike.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

from semiret.errors import SemiretError


MINIMUM_BY_SUFFIX = {"batch_size": 1, "_depth": 1, "_per_epoch": 1, "_iterations": 1, "max_length": 2}
"""The least value of a training option whose name ends so (a text batch needs a token beside its special ones)."""


@dataclass
class TrainingConfig:
    """Options shared by every recipe: the data, the run folder, batches, clipping, seed, threads and device."""

    data: str = "scifact"
    """BEIR collection to train on (a folder, or a name under shared/data)."""
    output: str = "runs/train"
    """Run folder: checkpoints, caches, the final model and summary.json (each recipe names its own default)."""
    split: str = "train"
    """Qrels split to train on."""
    base: str = "splade-tiny"
    """Masked LM to initialise the trained encoders from."""
    batch_size: int = 32
    """Queries per step."""
    max_grad_norm: float = 2.0
    """Gradients are clipped to this norm (0: no clipping)."""
    seed: int = 12345
    """Seed of the run: initial torch state, each epoch's order and each batch's random draws."""
    threads: int | None = None
    """Torch threads (default: torch's choice)."""
    device: str = "auto"
    """Device to train on: auto (CUDA when torch sees a GPU, else the CPU), cpu, cuda, cuda:N or mps; under
    torchrun, auto and cuda mean each process's local GPU."""
    mixed_precision: bool = True
    """On CUDA, run the encoders in bf16 autocast (fp16 with a gradient scaler where the GPU lacks bf16); the
    losses stay in float32. No effect on a CPU or MPS."""

    def __post_init__(self) -> None:
        """Reject numbers no training can use, naming the option: every float finite (NaN or inf reached AdamW
        or the loss as a traceback, or trained on silently), learning rates positive, epochs, warm-up and the
        clipping norm non-negative (a negative norm turned clipping into gradient ascent), shares between 0 and
        1, and the least :data:`MINIMUM_BY_SUFFIX` allows (a batch of 0 looped forever, a mining depth of 0
        trained without negatives), by the field's name, so every recipe's fields are checked alike."""
        def bad(name: str, requirement: str) -> SemiretError:
            flag = "--" + name.replace("_", "-")
            return SemiretError(f"{name} ({flag}) must be {requirement}, got {getattr(self, name)!r}")

        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if not math.isfinite(value):
                raise bad(f.name, "a finite number")
            if f.name.endswith("learning_rate") and not value > 0:
                raise bad(f.name, "positive")
            if (f.name.endswith("epochs") or f.name == "max_grad_norm") and value < 0:
                raise bad(f.name, "non-negative")
            if f.name.endswith("_fraction") and not 0 <= value <= 1:
                raise bad(f.name, "a share between 0 and 1")
            least = next((n for suffix, n in MINIMUM_BY_SUFFIX.items() if f.name.endswith(suffix)), None)
            if least is not None and value < least:
                raise bad(f.name, f"at least {least}")
        if self.threads is not None and self.threads < 0:
            raise bad("threads", "at least 1 (0 or unset: torch's choice)")

    def resolved(self):
        """A copy whose ``data`` is a folder (:func:`semiret.data.paths.dataset`); errors for unknown names and for
        an ``output`` that is (or lies under) a file."""
        from semiret.data.paths import dataset

        existing = Path(self.output)
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if not existing.is_dir():
            raise SemiretError(f"--output {self.output}: {existing} is a file, not a folder (the run folder needs one)")
        return dataclasses.replace(self, data=str(dataset(self.data).resolve()))  # the folder, wherever run from


@dataclass
class InBatchTeachers:
    """The options of recipes that can distil from a teacher ensemble beside their contrastive loss, every query
    of a batch against every passage of it (:class:`semiret.training.distillation.InBatchDistillation`)."""

    teachers: str = ""
    """Teachers to distil from beside the contrastive loss, as for train inference-free (dense[:model],
    sparse[:model], sidr[:model], bm25, comma-separated): KL from their normalised ensemble to the model's
    scores of every query against every passage of the batch. Empty: no distillation (the paper's recipe)."""
    distillation_weight: float = 1.0
    """Weight of the distillation term beside the contrastive loss (with --teachers)."""
    teacher_scale: float = 30.0
    """Scale S of the ensemble teacher's scores (with --teachers; train inference-free's fine-tuning default)."""
    teacher_cache: str | None = None
    """Teacher vector cache folder (default <output>/teachers; train inference-free's caches can be shared)."""

    def validate_teachers(self) -> None:
        if self.teachers:
            from semiret.training.teachers import parse_teachers

            parse_teachers(self.teachers)
            if not (self.distillation_weight > 0 and self.teacher_scale > 0):
                raise SemiretError(f"--distillation-weight and --teacher-scale must be positive with --teachers (got "
                                   f"{self.distillation_weight} and {self.teacher_scale})")


@dataclass
class WeightAveraging:
    """The option of recipes that can average their trained weights with their starting model's."""

    average_with_base: float = 0.0
    """After training, average the trained weights with the --base model's, this share the base's (WiSE-FT:
    keeps more of the start's robustness on collections unlike the training's); 0: the trained weights."""

    def validate_averaging(self) -> None:
        if not 0.0 <= self.average_with_base <= 1.0:
            raise SemiretError(f"average_with_base is the base model's share, between 0 and 1; got "
                               f"{self.average_with_base}")


@dataclass
class MatryoshkaTraining:
    """The options of dense recipes that can train for truncated embeddings (Matryoshka representation learning,
    Kusupati et al. 2022: :class:`semiret.training.losses.MatryoshkaLoss`)."""

    matryoshka_dims: str | None = None
    """Train for embeddings cut to these first dimensions (comma-separated, say 384,192,96): the loss is the
    weighted sum of the recipe's loss on the embeddings cut to each (re-normalised where the encoder normalises),
    so that the model searches well at --truncate-dim N for each N given. Unset: the full embeddings only."""
    matryoshka_weights: str | None = None
    """Weight of each --matryoshka-dims term (comma-separated, one per dimension, in their order; default 1 each,
    as sentence-transformers' MatryoshkaLoss)."""

    def matryoshka(self) -> tuple[tuple[int, ...], tuple[float, ...]] | None:
        """(the dimensions, their weights) of --matryoshka-dims and --matryoshka-weights, checked (see
        :func:`semiret.training.losses.check_matryoshka`, the encoder's width aside); None when unset."""
        if self.matryoshka_dims is None:
            if self.matryoshka_weights is not None:
                raise SemiretError("--matryoshka-weights weighs the --matryoshka-dims terms: give the dimensions too")
            return None
        dims = _numbers(self.matryoshka_dims, int, "matryoshka_dims", "whole numbers")
        weights = (None if self.matryoshka_weights is None
                   else _numbers(self.matryoshka_weights, float, "matryoshka_weights", "numbers"))
        from semiret.training.losses import check_matryoshka

        return check_matryoshka(dims, weights)


def _numbers(text: str, kind: type, name: str, what: str) -> list:
    """The comma-separated ``kind`` values of option ``name``; an error naming the option for any other text."""
    flag = "--" + name.replace("_", "-")
    try:
        values = [kind(part) for part in str(text).split(",")]
    except ValueError:
        raise SemiretError(f"{name} ({flag}) takes comma-separated {what} (say 384,192,96), got {text!r}") from None
    return values


@dataclass
class Pretraining:
    """The option of two-stage recipes (label-free pre-training, then fine-tuning: inference-free, NAIL) that names
    the pre-training corpora; the recipe has ``pretrain_epochs`` and ``finetune_epochs``."""

    pretrain_corpora: list[str] | None = field(default=None, metadata={"flag": "--pretrain"})
    """Corpora for label-free pre-training (names or folders, repeatable); 'none' skips it. Default: the
    --data corpus."""

    def pretraining(self) -> list[str]:
        """The pre-training corpora: ``pretrain_corpora``, or the ``data`` corpus when unset; 'none' dropped."""
        return [c for c in (self.pretrain_corpora if self.pretrain_corpora is not None else [self.data])
                if c != "none"]

    def validate_stages(self) -> None:
        if self.finetune_epochs == 0 and not (self.pretraining() and self.pretrain_epochs):
            raise SemiretError("nothing to train: no fine-tuning epochs and no pre-training")

    def resolve_pretraining(self) -> None:
        """``pretrain_corpora`` as the folders of every corpus :meth:`pretraining` names (in a resolved copy)."""
        from semiret.data.paths import dataset

        self.pretrain_corpora = [str(dataset(c).resolve()) for c in self.pretraining()]


@dataclass(frozen=True)
class Schedule:
    """One training stage's length and learning-rate schedule: AdamW, linear warm-up, then linear decay to 0."""

    epochs: int
    learning_rate: float
    warmup_epochs: float = 1.0
