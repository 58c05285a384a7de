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
    raise SemiretError("shared data not found: set SEMIRET_DATA or place shared/data beside the checkout")


def dataset(name: str) -> Path:
    """A dataset folder by name (``scifact``) or any existing path."""
    if Path(name).exists():
        return Path(name)
    path = data_root() / name
    if not path.exists():
        raise SemiretError(f"no dataset {name!r} under {data_root()}")
    return path


def msmarco_idf() -> Path:
    return data_root() / "idf" / "msmarco-bert-base-uncased.json"
