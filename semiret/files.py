"""Writing files and directories so that a crash never leaves a half-written one: every index, model and
checkpoint is staged beside its target and published by one rename.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from semiret.errors import IndexFormatError


def atomic_write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def staging_directory(target: Path) -> Path:
    """A fresh empty directory beside ``target`` (same filesystem, so a rename publishes it)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))


def replace_directory(staged: Path, target: Path, overwrite: bool) -> None:
    """Move a fully written ``staged`` directory to ``target``; an old ``target`` is replaced only if allowed."""
    if target.exists():
        if not overwrite:
            shutil.rmtree(staged, ignore_errors=True)
            raise IndexFormatError(f"{target} already exists (pass overwrite=True / --overwrite to replace it)")
        trash = target.with_name(f".{target.name}.old-{os.getpid()}")
        os.replace(target, trash)
        os.replace(staged, target)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.replace(staged, target)


def directory_size(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())




@contextmanager
def staged_directory(target: str | Path, overwrite: bool = True) -> Iterator[Path]:
    """Write a directory in a staging folder beside ``target`` and publish it when the block ends; an
    exception removes the staging folder and leaves any old ``target`` untouched."""
    target = Path(target)
    staged = staging_directory(target)
    try:
        yield staged
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    replace_directory(staged, target, overwrite)
