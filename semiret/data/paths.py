"""Where shared data lives: ``$SEMIRET_DATA`` or a ``shared/data`` folder beside the checkout."""

from __future__ import annotations

import os
from pathlib import Path

from semiret.errors import SemiretError


def data_root() -> Path:
    candidates = []
    if os.environ.get("SEMIRET_DATA"):
        candidates.append(Path(os.environ["SEMIRET_DATA"]))
    candidates += [Path.cwd().parent / "shared" / "data", Path(__file__).resolve().parents[3] / "shared" / "data"]
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    raise SemiretError("no folder of named collections found (scifact, vaswani, ...): give --data a folder or a "
                       "corpus file's path, or set SEMIRET_DATA to the folder holding the collections (and the "
                       "idf/ tables); a checkout finds shared/data beside it")


FILE_SUFFIXES = (".jsonl", ".json", ".jsonl.gz", ".tsv", ".tsv.gz", ".csv", ".csv.gz")
"""Names ending so are files the user meant, never dataset names."""


def dataset(name: str) -> Path:
    """A dataset folder by name (``scifact``), any existing path, or ``irds:ID``, a collection of ir_datasets
    (written once into a BEIR folder of the user's cache: :mod:`semiret.data.irds`).

    A name that looks like a path (a path separator, or a suffix of :data:`FILE_SUFFIXES`) and exists neither as
    given nor under :func:`data_root` is reported as a missing file (``<name>: no such file``); only a bare name
    gets the "no dataset under ..." hint.
    """
    if name.startswith("irds:"):
        from semiret.data.irds import irds_collection

        return irds_collection(name)
    if Path(name).exists():
        return Path(name)
    missing = f"{name}: no such file" if _looks_like_a_path(name) else None
    try:
        path = data_root() / name  # a relative name under the shared data (``cqadupstack/android``) too
    except SemiretError:  # no shared data: a missing file is reported as such all the same
        if missing:
            raise SemiretError(missing) from None
        raise
    if not path.exists():
        raise SemiretError(missing or f"no file or folder {name!r} here, and no dataset of that name under "
                           f"{data_root()}")
    return path


def _looks_like_a_path(name: str) -> bool:
    separators = {os.sep, "/"} | ({os.altsep} if os.altsep else set())
    return any(sep in name for sep in separators) or name.lower().endswith(FILE_SUFFIXES)


def msmarco_idf() -> Path:
    return data_root() / "idf" / "msmarco-bert-base-uncased.json"
