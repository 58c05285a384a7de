"""Saved semiret models: what marks each kind of model directory, the packaged default of each, and the
lookups the search side needs (torch-free: opening an index never loads a training module).

A saved model is a directory holding one marker file (``sidr.json``, ``inference-free.json``, ...); a
packaged short name (``sidr-scifact``) names a directory under :data:`semiret.data.packaged.PACKAGED_CHECKPOINTS`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from semiret.data import packaged
from semiret.data.packaged import located
from semiret.errors import SemiretError
from semiret.files import atomic_write_json


def read_model_json(path: Path) -> dict:
    """A saved model's JSON file (its marker, ``semiret-encoder.json``): one cut short, damaged or not an object is an
    error naming it (it was a traceback)."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:  # json.JSONDecodeError is a ValueError
        raise SemiretError(f"cannot read {path}: {exc} (copy the model folder again)") from None
    if not isinstance(value, dict):
        raise SemiretError(f"{path} holds no JSON object (copy the model folder again)")
    return value


@dataclass(frozen=True)
class SavedModelKind:
    """One kind of saved model: its marker file, a description, the packaged default and how to train it."""

    marker: str
    what: str
    default: str
    train_command: str

    def directory(self, name_or_path: str) -> Path | None:
        """The directory of a saved model of this kind: ``name_or_path`` itself or the packaged checkpoint of
        that name. None when neither is one (a plain model name such as ``splade-tiny``); a directory of
        another kind, or the packaged default missing, is an error."""
        for candidate in _candidates(name_or_path):
            if (candidate / self.marker).is_file():
                return candidate.resolve()
            for other in SAVED_MODEL_KINDS:
                if other is not self and (candidate / other.marker).is_file():
                    raise SemiretError(f"{candidate} is {other.what} ({other.marker}), not the model asked for "
                                       f"here (it needs {self.marker})")
        if name_or_path == self.default:
            raise SemiretError(f"the packaged checkpoint {self.default!r} is missing from "
                               f"{packaged.PACKAGED_CHECKPOINTS}; train it with `{self.train_command}`")
        return None

    def read(self, name_or_path: str) -> tuple[Path, dict]:
        """(directory, marker JSON) of a saved model of this kind; an error for anything else."""
        path = self.directory(name_or_path)
        if path is None:
            raise SemiretError(f"{name_or_path} is not {self.what} (no {self.marker})")
        meta = read_model_json(path / self.marker)
        if meta.get("format") != self.format:
            raise SemiretError(f"{path / self.marker} does not describe {self.what}")
        return path, meta

    def write_marker(self, directory: Path, **fields) -> None:
        """Mark ``directory`` (a staged model folder) as this kind: the marker JSON, format and version first."""
        atomic_write_json(Path(directory) / self.marker, {"format": self.format, "version": 1, **fields})

    @property
    def name(self) -> str:
        """The kind's short name (``sidr``, ``inference-free``, ...)."""
        return self.marker.removesuffix(".json")

    @property
    def format(self) -> str:
        return "semiret." + self.name


SIDR = SavedModelKind("sidr.json", "a saved SiDR model", "sidr-scifact", "semiret train sidr")
INFERENCE_FREE = SavedModelKind("inference-free.json", "a saved inference-free model", "inference-free-scifact",
                                "semiret train inference-free")
NAIL = SavedModelKind("nail.json", "a saved NAIL model", "nail-scifact", "semiret train nail")
GDR = SavedModelKind("gdr.json", "a saved GDR model", "gdr-scifact", "semiret train gdr")
SAVED_MODEL_KINDS = (SIDR, INFERENCE_FREE, NAIL, GDR)



def _candidates(name_or_path: str) -> tuple[Path, Path]:
    """Where a model named so may be: the folder itself, else the packaged checkpoint of that name."""
    return Path(name_or_path), packaged.PACKAGED_CHECKPOINTS / name_or_path


def saved_model_kind(name_or_path: str) -> SavedModelKind | None:
    """The kind of saved model ``name_or_path`` is (a directory, or a packaged checkpoint's name), else None (an
    encoder, a registry name, a hub id, or nothing at all)."""
    for candidate in _candidates(name_or_path):
        for kind in SAVED_MODEL_KINDS:
            if (candidate / kind.marker).is_file():
                return kind
    return None


def model_reference(model: str) -> str:
    """How an index records the model it was built with: a folder by its absolute path, except the packaged
    checkpoints, recorded by their short name (``inference-free-scifact``), so that the index outlives the virtual
    environment it was built in; a name (registry name, hub id) as it is."""
    path = Path(model)
    if not path.is_dir():
        return model
    resolved = path.resolve()
    return resolved.name if resolved.parent == packaged.PACKAGED_CHECKPOINTS.resolve() else str(resolved)


def replaced_weights(meta: dict) -> str | None:
    """Why an index cannot be searched with the packaged model it names, or None: made before that checkpoint took
    other weights (:data:`~semiret.data.packaged.WEIGHTS_REPLACED`) and recording no fingerprint of the weights it
    was made with (indexes before 2026-11-28), its vectors are of weights no longer shipped."""
    config = meta.get("analyzer") or {}
    model, created = config.get("model"), meta.get("created")
    if not isinstance(model, str) or config.get("weights") is not None or not isinstance(created, str):
        return None
    replaced = packaged.WEIGHTS_REPLACED.get(Path(model).name)
    if replaced is None or Path(located(model)).parent != packaged.PACKAGED_CHECKPOINTS or created >= replaced:
        return None
    return (f"made {created} with the packaged {Path(model).name}, which took other weights on {replaced} (the index "
            "records none of its own): its vectors are not this model's; rebuild it (--overwrite)")


ENCODER_FILE = "semiret-encoder.json"
"""Written beside an encoder semiret trained or adapted: its family (``dense``, ``splade``), pooling, lengths."""
ENCODER_FAMILIES = ("dense", "splade")


def encoder_family(name_or_path: str) -> str | None:
    """``dense`` or ``splade`` for an encoder semiret saved (its :data:`ENCODER_FILE`) or a registry model whose
    family is known; None otherwise (a saved model of another kind, a hub id, an unknown folder)."""
    entry = packaged.REGISTRY.get(name_or_path)
    if entry is not None:
        return entry.family
    for candidate in _candidates(name_or_path):
        if (candidate / ENCODER_FILE).is_file():
            return read_model_json(candidate / ENCODER_FILE).get("family")
    return None


IDF_FILE = "idf.json"
"""The token-weight table an inference-free model was trained with (its query side)."""


def resolve_inference_free(name_or_path: str) -> str:
    """A saved inference-free model directory for a packaged short name or a path; anything else
    (``splade-tiny``, a plain SPLADE directory) is returned unchanged."""
    found = INFERENCE_FREE.directory(name_or_path)
    return str(found) if found is not None else name_or_path


def inference_free_token_weights(model: str) -> Path | None:
    """The ``idf.json`` a saved inference-free model was trained with (None for other models)."""
    path = Path(resolve_inference_free(model)) / IDF_FILE
    return path if path.is_file() else None


def token_weights_fingerprint(path: Path) -> str:
    """A short hash of a query-weight table's bytes (an inference-free model's ``idf.json``): recorded by an index
    whose queries read the table from the model, so that the table replaced since (the model retrained in place) is
    noticed rather than weighting queries for other document vectors."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def _inference_free_record(model: str) -> dict:
    path = Path(resolve_inference_free(model)) / INFERENCE_FREE.marker
    return read_model_json(path) if path.is_file() else {}


def inference_free_document_threshold(model: str) -> float | None:
    """The static-pruning threshold recorded with a saved inference-free model (None: none recorded), which
    the ``inference-free`` retriever applies when it indexes documents."""
    return _inference_free_record(model).get("document_threshold")


def inference_free_lexical_prior(model: str) -> dict | None:
    """The lexical prior a saved inference-free model was trained with (``{"weight", "k1", "b"}``; None for
    none, and for other models), which the ``inference-free`` retriever adds when it indexes documents."""
    return _inference_free_record(model).get("lexical_prior")


ADAPTED_CORPUS_FILE = "adapted-corpus.json"
"""Written by ``semiret adapt`` into an adapted model: the corpus it was adapted to (a hash of each document)."""


def _hash(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


def _document_hash(document) -> str:
    """A document's id and text together: classic collections number their documents 1, 2, ..., so ids alone
    would take one corpus for another."""
    return _hash(f"{document.id}\x00{document.full_text}")


def corpus_fingerprint(documents: Iterable) -> dict:
    """``{"documents", "document_hashes"}`` of a corpus, what :func:`check_adapted_corpus` compares against."""
    hashes = sorted({_document_hash(d) for d in documents})
    return {"documents": len(hashes), "document_hashes": hashes}


def check_adapted_corpus(model: str, documents: list) -> None:
    """An error when ``model`` was adapted to a corpus (``semiret adapt``) and fewer than half of ``documents``
    (the first ones an index is built from) belong to it, by id and text: a model adapted to one corpus is made to
    index another. Documents added later are not checked (a corpus grows). Records written before texts were
    hashed hold id hashes and are compared by id."""
    marker = Path(model) / ADAPTED_CORPUS_FILE  # adapted models are folders (adapt never writes a packaged one)
    if not documents or not marker.is_file():
        return
    adapted = read_model_json(marker)
    by_text = "document_hashes" in adapted
    known = set(adapted["document_hashes"] if by_text else adapted["id_hashes"])
    shared = sum((_document_hash(d) if by_text else _hash(d.id)) in known for d in documents)
    if shared * 2 < len(documents):
        raise SemiretError(f"{model} was adapted to {adapted.get('corpus')} ({adapted['documents']} documents), and "
                           f"only {shared} of the first {len(documents)} documents indexed here belong to it: adapt it "
                           "to this corpus (semiret adapt --data ...) or index it with the model it started from")


def sentence_transformers_normalizes(directory: Path) -> bool | None:
    """Whether a sentence-transformers model directory's modules end its vectors with a ``Normalize`` (None: no
    ``modules.json``, not such a directory)."""
    modules = directory / "modules.json"
    if not modules.is_file():
        return None
    return any(module.get("type", "").endswith("Normalize") for module in json.loads(modules.read_text()))
