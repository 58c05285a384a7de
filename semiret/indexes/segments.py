"""The segmented document store every semiret index kind builds on, and the registry of index formats.

An index directory holds ``meta.json`` (what it is, its segments, the commit point of every change) and
one folder per segment, written once and never rewritten::

    seg-000000/docids.*.npy   document ids, with a hash table for lookups
               texts.*.npy    stored document JSON (optional)
               deleted.bin    append-only local numbers of deleted documents
               ...            what the index kind keeps per document (postings, vectors, ...)

Adding documents writes one new segment; deleting appends marks to segments' ``deleted.bin``; merging
folds the live documents into one segment. Each change ends with one atomic replace of ``meta.json``, so
a crash before it leaves the index as it was: a segment folder that no ``meta.json`` lists is replaced by
the next add, and deletion marks beyond the count ``meta.json`` records are ignored, then overwritten.

Index kinds register by the ``format`` string of their ``meta.json`` (:func:`register_index_format`), so
:func:`open_index` opens any of them without a list of kinds to edit.
"""

from __future__ import annotations

import json
import shutil
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar, Iterable

import numpy as np

from semiret.data.collection import Document
from semiret.errors import IndexFormatError, SemiretError
from semiret.files import (
    atomic_write_json,
    directory_size,
    replace_directory,
    staged_directory,
    staging_directory,
)
from semiret.indexes.storage import (
    META_FILE,
    StringTable,
    append_deletions,
    read_deletions,
    read_meta,
)
from semiret.types import SearchHits

INDEX_FORMATS: dict[str, type] = {}
"""``meta.json`` format name -> the index class that opens it (filled by :func:`register_index_format`)."""


def register_index_format(index_class: type) -> type:
    """Class decorator: :func:`open_index` opens directories whose ``meta.json`` names ``index_class.FORMAT``
    with ``index_class.open``."""
    name = index_class.FORMAT
    known = INDEX_FORMATS.get(name)
    if known is not None and known is not index_class:
        raise SemiretError(f"index format {name!r} is already registered by {known.__module__}.{known.__qualname__}")
    INDEX_FORMATS[name] = index_class
    return index_class


def open_index(path: str | Path):
    """Open any semiret index directory with the class registered for its ``meta.json`` format."""
    found = read_meta(Path(path), None).get("format")
    if found not in INDEX_FORMATS:
        raise IndexFormatError(f"{path} holds a {found!r} index, not one semiret searches ({', '.join(sorted(INDEX_FORMATS))})")
    return INDEX_FORMATS[found].open(path)


class Segment:
    """One segment folder: its documents' ids, stored texts and deletion marks (kinds add their own data)."""

    def __init__(self, path: Path, info: dict):
        self.name: str = info["name"]
        self.path = path
        self.n_docs: int = info["n_docs"]
        self.docids = StringTable(path, "docids", with_lookup=True)
        self.texts = StringTable(path, "texts") if (path / "texts.offsets.npy").is_file() else None
        self.deleted = read_deletions(path, self.n_docs, info.get("n_deleted", 0))  # bool [n_docs], in memory
        self._id_table: tuple[memoryview, np.ndarray] | None = None

    @property
    def n_deleted(self) -> int:
        return int(self.deleted.sum())

    def document(self, local: int) -> Document:
        """The stored document of a local number (needs stored texts)."""
        record = json.loads(self.texts[local])
        return Document(record["_id"], record["text"], record.get("title", ""))

    def document_ids(self, locals_: np.ndarray) -> list[str]:
        """Document ids of local numbers, decoded straight from the memory-mapped id table."""
        if self._id_table is None:
            self._id_table = (memoryview(np.asarray(self.docids.blob)), np.asarray(self.docids.offsets))
        blob, offsets = self._id_table
        starts, ends = offsets[locals_], offsets[locals_ + 1]
        if len(locals_) >= 64:
            # many ids: gather their bytes with NUL separators, decode once and split
            lengths = ends - starts + 1
            out_starts = np.cumsum(lengths) - lengths
            gather = np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(starts - out_starts, lengths)
            joined = np.take(np.frombuffer(blob, np.uint8), gather, mode="clip")
            separators = out_starts + lengths - 1
            joined[separators] = 0
            if np.count_nonzero(joined == 0) == len(separators):  # no id holds a NUL itself
                return joined.tobytes().decode("utf-8").split("\0")[:-1]
        return [str(blob[a:b], "utf-8") for a, b in zip(starts.tolist(), ends.tolist())]


class SegmentedIndex(ABC):
    """An open index directory of segments: the life cycle every index kind shares.

    ``build`` (a kind's own classmethod, which checks its arguments and calls :meth:`_build` with its
    ``meta.json`` fields) stages a new directory beside the target, writes all documents as one segment
    and renames it into place; :meth:`open` reads ``meta.json`` and opens the segments; :meth:`add`,
    :meth:`delete` and :meth:`merge` change the index and commit with one atomic ``meta.json`` replace.
    Documents are found by id (:meth:`locate`, ``in``, :meth:`get_document`) in any kind.

    A kind provides:

    - ``FORMAT`` and ``VERSION`` (the ``format``/``version`` of its ``meta.json``), ``DESCRIPTION`` (what
      error messages call it) and ``batch_type``: the batch it indexes, with ``ids``, ``documents``,
      ``len()`` and a static ``concatenate`` (:class:`~semiret.types.Postings`,
      :class:`~semiret.types.Embeddings`);
    - :meth:`_open_segment`: a :class:`Segment` subclass that also opens the kind's own files;
    - :meth:`_validate`: refuse a bad batch with a clear error before anything is written;
    - :meth:`_write_segment_files`: write a batch's own files into a staged segment folder;
    - :meth:`_live_batch`: a segment's live documents back as a batch (for :meth:`merge`);
    - its ``search``, and ``describe`` facts of its own (``{**super().describe(), ...}``).

    Decorated with :func:`register_index_format`, a kind opens through :func:`open_index`.
    """

    FORMAT: ClassVar[str]
    VERSION: ClassVar[int]
    DESCRIPTION: ClassVar[str] = "index"
    batch_type: ClassVar[type]

    def __init__(self, path: Path, meta: dict):
        self.path = path
        self.meta = meta
        self.segments = [self._open_segment(path / info["name"], info) for info in meta["segments"]]

    # ------------------------------------------------------------------ what a kind provides
    @abstractmethod
    def _open_segment(self, path: Path, info: dict) -> Segment:
        """Open one committed segment folder (``info`` is its entry in ``meta.json``)."""

    @abstractmethod
    def _validate(self, batch: Any) -> None:
        """Raise :class:`~semiret.errors.SemiretError` for a batch this kind cannot take (ids repeated
        within the batch are the store's check)."""

    @abstractmethod
    def _write_segment_files(self, directory: Path, batch: Any, info: dict) -> None:
        """Write the kind's own files of ``batch`` into ``directory`` (ids and texts are the store's); may
        add facts to ``info``, the segment's ``meta.json`` entry."""

    @abstractmethod
    def _live_batch(self, segment: Segment, live: np.ndarray, ids: list[str],
                    documents: list[Document] | None) -> Any:
        """The documents ``live`` (local numbers, ascending) of ``segment`` as a batch, with these ids and
        stored documents."""

    # ------------------------------------------------------------------ creation and opening
    @classmethod
    def _build(cls, path: str | Path, fields: dict, batches: Iterable, store_texts: bool, overwrite: bool,
               extra_meta: dict | None, **attributes):
        """Write a new index of ``batches`` (staged beside ``path``, then renamed): ``fields`` are the kind's
        ``meta.json`` entries, ``attributes`` go to its constructor."""
        target = Path(path)
        _check_build_target(target, overwrite)
        staged = staging_directory(target)
        try:
            meta = {
                "format": cls.FORMAT, "version": cls.VERSION, **fields, "store_texts": store_texts,
                "segments": [], "next_segment": 0, "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
                **(extra_meta or {}),
            }
            batch_list = list(batches)  # consumed first: what the batches' producer fills in is complete afterwards
            index = cls(staged, meta, **attributes)
            if batch_list:
                batch = cls.batch_type.concatenate(batch_list)
                index._check_batch(batch)
                index._write_segment(batch, check_duplicates=False)
            else:
                index._commit()
        except BaseException:
            shutil.rmtree(staged, ignore_errors=True)
            raise
        replace_directory(staged, target, overwrite)
        return cls.open(target)

    @classmethod
    def open(cls, path: str | Path):
        path = Path(path)
        meta = read_meta(path, cls.FORMAT)
        if meta.get("version") != cls.VERSION:
            raise IndexFormatError(f"{path}: {cls.DESCRIPTION} format version {meta.get('version')} is not supported")
        return cls(path, meta)

    # ------------------------------------------------------------------ properties
    @property
    def kind(self) -> str:
        return self.meta["kind"]

    @property
    def n_docs(self) -> int:
        """Live (not deleted) documents."""
        return sum(s.n_docs - s.n_deleted for s in self.segments)

    @property
    def n_stored(self) -> int:
        """Documents in all segments, deleted ones included until a merge."""
        return sum(s.n_docs for s in self.segments)

    def size_on_disk(self) -> int:
        return directory_size(self.path)

    def describe(self) -> dict:
        """Facts about the index for reports: counts and size (each kind adds its own)."""
        return {"kind": self.kind, "documents": self.n_docs, "deleted": self.n_stored - self.n_docs,
                "segments": len(self.segments), "size_bytes": self.size_on_disk()}

    # ------------------------------------------------------------------ documents
    def locate(self, doc_id: str) -> tuple[Segment, int] | None:
        """The live (segment, local number) of a document id, or None."""
        for segment in reversed(self.segments):
            local = segment.docids.find(doc_id)
            if local >= 0 and not segment.deleted[local]:
                return segment, local
        return None

    def __contains__(self, doc_id: str) -> bool:
        return self.locate(doc_id) is not None

    def live_ids(self) -> list[str]:
        """Ids of the live documents, segment by segment in the order they were added."""
        return [i for s in self.segments for i in s.document_ids(np.flatnonzero(~s.deleted))]

    def get_document(self, doc_id: str) -> Document | None:
        """The stored document, or None when it is unknown, deleted or texts were not stored."""
        found = self.locate(doc_id)
        if found is None or found[0].texts is None:
            return None
        return found[0].document(found[1])

    # ------------------------------------------------------------------ changes
    def add(self, batch, replace: bool = False) -> int:
        """Add documents as a new segment; returns how many. Existing ids are an error unless ``replace``."""
        if len(batch) == 0:
            return 0
        self._check_batch(batch)  # refuse bad input before old versions are deleted
        if replace:
            self.delete([i for i in batch.ids if i in self], missing_ok=True)
        self._write_segment(batch, check_duplicates=True)
        return len(batch)

    def delete(self, doc_ids: Iterable[str], missing_ok: bool = False) -> int:
        """Mark documents deleted; they vanish from searches at once. Returns how many were deleted."""
        marks: dict[str, list[int]] = {}
        for doc_id in dict.fromkeys(doc_ids):  # each id once, in order
            found = self.locate(doc_id)
            if found is None:
                if missing_ok:
                    continue
                raise SemiretError(f"cannot delete {doc_id!r}: no such document in {self.path}")
            marks.setdefault(found[0].name, []).append(found[1])
        for info, segment in zip(self.meta["segments"], self.segments):
            if segment.name in marks:
                append_deletions(segment.path, info.get("n_deleted", 0), marks[segment.name])
                segment.deleted[marks[segment.name]] = True
        self._commit()
        return sum(map(len, marks.values()))

    def merge(self) -> None:
        """Fold all segments into one, dropping deleted documents."""
        if len(self.segments) <= 1 and not any(s.deleted.any() for s in self.segments):
            return
        parts = []
        for segment in self.segments:
            live = np.flatnonzero(~segment.deleted)
            documents = [segment.document(i) for i in live.tolist()] if segment.texts is not None else None
            parts.append(self._live_batch(segment, live, segment.document_ids(live), documents))
        merged = self.batch_type.concatenate(parts)
        old = list(self.segments)
        self.segments, self.meta["segments"] = [], []
        self._write_segment(merged, check_duplicates=False)
        for segment in old:
            shutil.rmtree(segment.path, ignore_errors=True)

    # ------------------------------------------------------------------ writing
    def _check_batch(self, batch) -> None:
        """Refuse a batch that repeats an id or that the kind cannot take (:meth:`_validate`)."""
        if len(set(batch.ids)) != len(batch.ids):
            seen: set[str] = set()
            repeated = next(i for i in batch.ids if i in seen or seen.add(i))
            raise SemiretError(f"duplicate document id {repeated!r} in the documents to add")
        self._validate(batch)

    def _write_segment(self, batch, check_duplicates: bool) -> None:
        """Write a checked batch as a new segment folder (staged, then renamed) and commit it."""
        if check_duplicates:
            clash = next((i for i in batch.ids if i in self), None)
            if clash is not None:
                raise SemiretError(f"document {clash!r} is already in {self.path} (use replace / --replace)")
        info = {"name": f"seg-{self.meta['next_segment']:06d}", "n_docs": len(batch), "n_deleted": 0}
        # a folder of this name was left by an add that crashed before its commit: the staged one replaces it
        with staged_directory(self.path / info["name"]) as staged:
            self._write_segment_files(staged, batch, info)
            StringTable.write(staged, "docids", batch.ids, with_lookup=True)
            if self.meta["store_texts"] and batch.documents is not None:
                StringTable.write(staged, "texts", [json.dumps(d.to_record(), ensure_ascii=False)
                                                    for d in batch.documents])
        self.meta["segments"].append(info)
        self.meta["next_segment"] += 1
        self.segments.append(self._open_segment(self.path / info["name"], info))
        self._commit()

    def _commit(self) -> None:
        """Record the current state in ``meta.json`` (one atomic rename): the commit point of every change."""
        for info, segment in zip(self.meta["segments"], self.segments):
            info["n_deleted"] = segment.n_deleted
        atomic_write_json(self.path / META_FILE, self.meta)

    # ------------------------------------------------------------------ search results
    def _top_hits(self, seg_scores: list[np.ndarray], seg_locals: list[np.ndarray], k: int,
                  n_queries: int) -> SearchHits:
        """The best ``k`` of every segment's per-query results ([queries, <= k] scores, best first, and local
        numbers, -1 where fewer), ids decoded; equal scores keep the earlier segment first."""
        if not seg_scores:
            return SearchHits([[] for _ in range(n_queries)], [[] for _ in range(n_queries)])
        if len(seg_scores) == 1:
            scores, locals_ = seg_scores[0], seg_locals[0]
            valid = locals_ >= 0
            names = self.segments[0].document_ids(locals_[valid])
        else:
            scores = np.concatenate(seg_scores, axis=1)
            refs = np.concatenate([np.where(d >= 0, d.astype(np.int64) + (seg_no << 32), -1)
                                   for seg_no, d in enumerate(seg_locals)], axis=1)
            order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
            scores = np.take_along_axis(scores, order, 1)
            refs = np.take_along_axis(refs, order, 1)
            valid = refs >= 0
            flat_refs = refs[valid]  # row by row, best first
            names = np.empty(len(flat_refs), dtype=object)
            seg_of = flat_refs >> 32
            for seg_no in np.unique(seg_of).tolist():
                here = seg_of == seg_no
                names[here] = self.segments[seg_no].document_ids(flat_refs[here] & 0xFFFFFFFF)
            names = names.tolist()
        flat_scores = scores[valid].tolist()
        if n_queries == 1:
            return SearchHits([names], [flat_scores])
        bounds = np.zeros(n_queries + 1, np.int64)
        np.cumsum(valid.sum(axis=1), out=bounds[1:])
        bounds = bounds.tolist()
        return SearchHits([names[lo:hi] for lo, hi in zip(bounds, bounds[1:])],
                          [flat_scores[lo:hi] for lo, hi in zip(bounds, bounds[1:])])


def _check_build_target(target: Path, overwrite: bool) -> None:
    """Refuse early (before any document is read) what :func:`replace_directory` would refuse late,
    and never replace a non-empty directory that is not a semiret index, even with ``overwrite``."""
    if not target.exists():
        return
    if not overwrite:
        raise IndexFormatError(f"{target} already exists (pass overwrite=True / --overwrite to replace it)")
    if not target.is_dir() or (any(target.iterdir()) and not (target / META_FILE).is_file()):
        raise IndexFormatError(f"{target} exists and is not a semiret index: refusing to overwrite it")
