"""Small on-disk building blocks shared by every index directory.

- :func:`read_meta` reads and checks ``meta.json``, each index's commit point (written with
  :func:`semiret.files.atomic_write_json`); :func:`read_commit` also returns its :func:`commit_stamp`, which
  changes with every commit, so a reader learns of a new one from a ``stat``;
- :class:`StringTable` stores variable-length strings (document ids, texts) as one blob plus offsets,
  memory-mapped, so opening an index with a million documents reads nothing up front.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Iterator

import numpy as np

from semiret.compiled import kernel
from semiret.errors import IndexFormatError
from semiret.files import fsync_directory
from semiret.types import PackedStrings

META_FILE = "meta.json"
COMPOSITE_FORMAT = "semiret.composite"
"""The ``meta.json`` format of a directory of several indexes of the same documents (a hybrid's)."""


def composite_holding(path: Path) -> Path | None:
    """The composite index (a hybrid's directory) that lists the index at ``path`` as one of its parts, if any."""
    path = Path(path).resolve()
    try:
        meta = json.loads((path.parent / META_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if isinstance(meta, dict) and meta.get("format") == COMPOSITE_FORMAT and path.name in meta.get("parts", []):
        return path.parent
    return None


CommitStamp = tuple[int, int, int]
"""(inode, size, modification time in ns) of ``meta.json``: each commit writes a new file and renames it into
place, so a new commit shows as a new stamp."""


def read_meta(path: Path, expected_format: str | None) -> dict:
    """Read ``meta.json`` of an index directory and check what it is (any format when ``None``)."""
    return read_commit(path, expected_format)[0]


def read_commit(path: Path, expected_format: str | None) -> tuple[dict, CommitStamp]:
    """``meta.json`` of an index directory, checked as :func:`read_meta` does, and the stamp of that very file
    (taken from the open file, so the two always belong together)."""
    meta_path = Path(path) / META_FILE
    try:
        with open(meta_path, "rb") as handle:
            stamp = _stamp(os.fstat(handle.fileno()))
            text = handle.read()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        raise IndexFormatError(_not_an_index(Path(path))) from None
    try:
        meta = json.loads(text.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise IndexFormatError(f"{meta_path}: malformed JSON ({getattr(exc, 'msg', exc)})") from None
    if expected_format is not None and meta.get("format") != expected_format:
        raise IndexFormatError(f"{path} holds a {meta.get('format')!r} index, not {expected_format!r}")
    return meta, stamp


def _not_an_index(path: Path) -> str:
    """Why ``path`` cannot be opened as an index, in the words that say what to do."""
    if path.is_dir():
        return f"{path} is not a semiret index (no {META_FILE})"
    if path.exists():
        return f"{path} is a file, not an index directory"
    hint = "" if len(path.parts) > 1 else " (a Milvus collection? add --backend milvus:URI)"
    return f"{path}: no such index directory{hint}"


def commit_stamp(path: Path) -> CommitStamp | None:
    """The stamp of an index directory's current ``meta.json`` (one ``stat``), or None if it has none."""
    try:
        return _stamp(os.stat(os.path.join(path, META_FILE)))  # no Path made: a served search's refresh calls it
    except FileNotFoundError:
        return None


def _stamp(stat: os.stat_result) -> CommitStamp:
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


SMALL_ARRAY_BYTES = 1 << 16
"""Files up to this size are read rather than memory-mapped: a mapping costs more to set up than reading a few
pages (a served index opens the small segment of every add)."""


def load_array(path: Path, mmap: bool = True) -> np.ndarray:
    """A stored array, memory-mapped read-only (``mmap``; small files are read, and read-only too) or read."""
    try:
        size = os.stat(path).st_size
    except FileNotFoundError:
        raise IndexFormatError(f"missing index file {path}") from None
    try:
        if not mmap or size > SMALL_ARRAY_BYTES:
            return np.load(path, mmap_mode="r" if mmap else None)
        array = np.load(path)
    except (ValueError, EOFError) as error:  # cut short, overwritten, not an array (numpy's messages name no file)
        raise IndexFormatError(f"damaged index file {path} ({error}): restore the index from a backup, or build it "
                               "again") from None
    array.flags.writeable = False
    return array


def id_hash(values: list[str]) -> np.ndarray:
    """Stable 64-bit hashes of strings (for id lookups without loading all ids): each one's 8-byte BLAKE2b digest
    read little-endian (the digests joined and read as one array: a third faster than an int per digest)."""
    digests = b"".join([hashlib.blake2b(v.encode("utf-8"), digest_size=8).digest() for v in values])
    return np.frombuffer(digests, dtype="<u8").astype(np.uint64)


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

    def find_many(self, values: list[str], hashes: np.ndarray | None = None) -> np.ndarray:
        """int64 positions of ``values`` (-1 where absent; needs ``with_lookup``): :meth:`find` with the hash
        lookups of all of them made at once (``hashes``: their :func:`id_hash`, when the caller has them)."""
        hashes = id_hash(values) if hashes is None else hashes
        table, order = np.asarray(self.hashes), np.asarray(self.hash_order)
        low, high = np.searchsorted(table, hashes, side="left"), np.searchsorted(table, hashes, side="right")
        found = np.full(len(values), -1, np.int64)
        held = np.flatnonzero(high > low)
        firsts = order[low[held]].astype(np.int64)
        for i, first, stored in zip(held.tolist(), firsts.tolist(), self.iter_at(firsts)):
            if stored == values[i]:
                found[i] = first
                continue
            for position in range(int(low[i]) + 1, int(high[i])):  # a hash shared by two ids: the one that is equal
                candidate = int(order[position])
                if self[candidate] == values[i]:
                    found[i] = candidate
                    break
        return found

    def iter_at(self, positions: np.ndarray) -> Iterator[str]:
        """The strings at ``positions``, in order, decoded from one view of the blob (indexing the memory-mapped
        arrays once per string cost as much again as decoding it)."""
        blob, offsets = memoryview(np.asarray(self.blob)), np.asarray(self.offsets)
        for start, end in zip(offsets[positions].tolist(), offsets[positions + 1].tolist()):
            yield str(blob[start:end], "utf-8")

    def packed(self, positions: np.ndarray) -> PackedStrings:
        """The strings at ``positions``, in order, as bytes copied out of the blob (nothing decoded)."""
        offsets = np.asarray(self.offsets)
        lengths = offsets[positions + 1] - offsets[positions]
        packed_offsets = np.zeros(len(positions) + 1, np.int64)
        np.cumsum(lengths, out=packed_offsets[1:])
        blob = np.empty(int(packed_offsets[-1]), np.uint8)
        _gather_bytes(np.asarray(self.blob), offsets, np.asarray(positions, np.int64), packed_offsets, blob)
        return PackedStrings(blob, packed_offsets)

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
    def write(directory: Path, name: str, values: list[str] | PackedStrings, with_lookup: bool = False) -> None:
        packed = values if isinstance(values, PackedStrings) else PackedStrings.of(values)
        np.save(directory / f"{name}.blob.npy", packed.blob)
        np.save(directory / f"{name}.offsets.npy", packed.offsets)
        if with_lookup:
            hashes = id_hash(values)
            order = np.argsort(hashes, kind="stable")
            np.save(directory / f"{name}.hash.npy", hashes[order])
            np.save(directory / f"{name}.hash_order.npy", order.astype(np.int64))


@kernel
def _gather_bytes(blob, offsets, positions, out_offsets, out):
    """Copy the byte ranges of strings ``positions`` of ``blob`` one after another into ``out``: a loop, as numpy
    would need an index array eight times the bytes copied (or a Python call per string)."""
    for i in range(positions.shape[0]):
        start = offsets[positions[i]]
        out[out_offsets[i]: out_offsets[i + 1]] = blob[start: start + out_offsets[i + 1] - out_offsets[i]]


DELETED_FILE = "deleted.bin"


def read_deletions(segment: Path, n_docs: int, n_committed: int) -> np.ndarray:
    """Deletion flags [n_docs] from a segment's ``deleted.bin``: only its first ``n_committed`` marks count
    (marks after them belong to a delete that crashed before its commit)."""
    deleted = np.zeros(n_docs, dtype=bool)
    if n_committed:
        deleted[np.fromfile(segment / DELETED_FILE, dtype=np.int32, count=n_committed)] = True
    return deleted


def append_deletions(segment: Path, n_committed: int, locals_: list[int]) -> None:
    """Durably append deletion marks after the ``n_committed`` ones (dropping any uncommitted marks).

    Readers read only the marks their commit counts, a prefix this never changes: it runs under the index's
    write lock, after a refresh, so ``n_committed`` is the newest count."""
    created = not (segment / DELETED_FILE).exists()
    with open(segment / DELETED_FILE, "ab") as handle:
        handle.truncate(4 * n_committed)
        handle.write(np.asarray(locals_, np.int32).tobytes())
        handle.flush()
        os.fsync(handle.fileno())
    if created:
        fsync_directory(segment)
