"""Small on-disk building blocks shared by every index directory.

- :func:`read_meta` reads and checks ``meta.json``, each index's commit point (written with
  :func:`semiret.files.atomic_write_json`);
- :class:`StringTable` stores variable-length strings (document ids, texts) as one blob plus offsets,
  memory-mapped, so opening an index with a million documents reads nothing up front.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from semiret.errors import IndexFormatError

META_FILE = "meta.json"


def read_meta(path: Path, expected_format: str | None) -> dict:
    """Read ``meta.json`` of an index directory and check what it is (any format when ``None``)."""
    meta_path = Path(path) / META_FILE
    if not meta_path.is_file():
        raise IndexFormatError(f"{path} is not a semiret index (no {META_FILE})")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise IndexFormatError(f"{meta_path}: malformed JSON ({exc.msg})") from None
    if expected_format is not None and meta.get("format") != expected_format:
        raise IndexFormatError(f"{path} holds a {meta.get('format')!r} index, not {expected_format!r}")
    return meta


def load_array(path: Path, mmap: bool = True) -> np.ndarray:
    if not path.is_file():
        raise IndexFormatError(f"missing index file {path}")
    return np.load(path, mmap_mode="r" if mmap else None)


def id_hash(values: list[str]) -> np.ndarray:
    """Stable 64-bit hashes of strings (for id lookups without loading all ids)."""
    return np.fromiter(
        (int.from_bytes(hashlib.blake2b(v.encode("utf-8"), digest_size=8).digest(), "little") for v in values),
        dtype=np.uint64, count=len(values),
    )


class StringTable:
    """Read-only strings ``<name>.blob.npy`` + ``<name>.offsets.npy`` with optional sorted-hash lookup."""

    def __init__(self, directory: Path, name: str, with_lookup: bool = False):
        self.blob = load_array(directory / f"{name}.blob.npy")
        self.offsets = load_array(directory / f"{name}.offsets.npy")
        self.hashes = load_array(directory / f"{name}.hash.npy") if with_lookup else None
        self.hash_order = load_array(directory / f"{name}.hash_order.npy") if with_lookup else None

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> str:
        return bytes(self.blob[self.offsets[i]: self.offsets[i + 1]]).decode("utf-8")

    def find(self, value: str) -> int:
        """Position of ``value`` or -1 (needs ``with_lookup``)."""
        h = id_hash([value])[0]
        lo = np.searchsorted(self.hashes, h, side="left")
        hi = np.searchsorted(self.hashes, h, side="right")
        for pos in range(lo, hi):
            i = int(self.hash_order[pos])
            if self[i] == value:
                return i
        return -1

    @staticmethod
    def write(directory: Path, name: str, values: list[str], with_lookup: bool = False) -> None:
        encoded = [v.encode("utf-8") for v in values]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(e) for e in encoded], out=offsets[1:])
        np.save(directory / f"{name}.blob.npy", np.frombuffer(b"".join(encoded), dtype=np.uint8))
        np.save(directory / f"{name}.offsets.npy", offsets)
        if with_lookup:
            hashes = id_hash(values)
            order = np.argsort(hashes, kind="stable")
            np.save(directory / f"{name}.hash.npy", hashes[order])
            np.save(directory / f"{name}.hash_order.npy", order.astype(np.int64))


DELETED_FILE = "deleted.bin"


def read_deletions(segment: Path, n_docs: int, n_committed: int) -> np.ndarray:
    """Deletion flags [n_docs] from a segment's ``deleted.bin``: only its first ``n_committed`` marks count
    (marks after them belong to a delete that crashed before its commit)."""
    deleted = np.zeros(n_docs, dtype=bool)
    if n_committed:
        deleted[np.fromfile(segment / DELETED_FILE, dtype=np.int32, count=n_committed)] = True
    return deleted


def append_deletions(segment: Path, n_committed: int, locals_: list[int]) -> None:
    """Durably append deletion marks after the ``n_committed`` ones (dropping any uncommitted marks)."""
    with open(segment / DELETED_FILE, "ab") as handle:
        handle.truncate(4 * n_committed)
        handle.write(np.asarray(locals_, np.int32).tobytes())
        handle.flush()
        os.fsync(handle.fileno())
