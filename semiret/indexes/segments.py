"""The segmented document store every semiret index kind builds on, and the registry of index formats.

An index directory holds ``meta.json`` (what it is, its segments, the commit point of every change) and
one folder per segment, written once and never rewritten::

    seg-000000/docids.*.npy   document ids, with a hash table for lookups
               texts.*.npy    stored document JSON (optional)
               metadata.*.npy each stored document's metadata JSON, when some document has metadata
               deleted.bin    append-only local numbers of deleted documents
               ...            what the index kind keeps per document (postings, vectors, ...)
    write.lock                what writers lock (``flock``), in every process

Adding documents writes new segments (one each buffer of documents); deleting appends marks to segments'
``deleted.bin``; merging folds the live documents of segments into as few as hold them (one each buffer). Each
change ends with one atomic replace of ``meta.json``, so a crash before it leaves the index as it was: a segment
folder that no ``meta.json`` lists is replaced by the next add, and deletion marks beyond the count ``meta.json``
records are ignored, then overwritten.

Writers, in any thread or process, take turns (:meth:`SegmentedIndex.writing`: a lock, then a re-read of the
last commit, so a change never overwrites another writer's), and a change is acknowledged only once its files,
``meta.json`` and their directory entries are fsynced: it survives ``kill -9`` and power loss. Readers never
wait: each search reads one :class:`Snapshot` of the index, which a change replaces whole when it commits;
:meth:`SegmentedIndex.refresh` brings in what other processes committed.

Index kinds register by the ``format`` string of their ``meta.json`` (:func:`register_index_format`), so
:func:`open_index` opens any of them without a list of kinds to edit.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import itertools
import json
import os
import secrets
import shutil
import sys
import threading
import time
import weakref
from abc import ABC, abstractmethod
from collections import OrderedDict
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Callable, ClassVar, Container, Iterable, Iterator, Sequence

import numpy as np

from semiret import progress
from semiret.data.collection import Document, document_id_problem
from semiret.errors import IndexFormatError, SemiretError, UnknownDocumentError
from semiret.files import (
    STAGING_MARK,
    atomic_write_json,
    atomic_write_text,
    check_parent_folders,
    directory_size,
    exclusive_lock,
    link_or_copy,
    staged_directory,
    vacant_directory,
)
from semiret.indexes import kernels
from semiret.indexes.filters import MISSING, Column, TextIndex, distinct_values, field_path, field_value, value_kinds
from semiret.indexes.storage import (
    DELETED_FILE,
    META_FILE,
    StringTable,
    id_hash,
    append_deletions,
    commit_stamp,
    composite_holding,
    read_commit,
    read_deletions,
    read_meta,
)
from semiret.text.fields import TextFields, recorded_fields
from semiret.text.synonyms import parse_synonyms
from semiret.types import SearchHits, StoredDocuments

LOCK_FILE = "write.lock"
STORED_TABLES = ("docids", "texts", "metadata")
"""The string tables a segment keeps of its documents (ids with their lookup, stored texts, metadata alone)."""
SHARD_VARIABLES = ("segments", "next_segment", "created", "build", "buffer_mb", "vocab_size", "n_terms", "vocab_bytes",
                   "version", "synonyms", "shard")
"""``meta.json`` entries that differ between shards of one build (:meth:`SegmentedIndex.add_index`; synonyms are
the receiving index's, set by queries' owner, not by a build; ``shard``: which slice, checked by
:func:`merge_shards`)."""
SYNONYMS = "synonyms"
"""The ``meta.json`` entry naming the file of the synonym rules set on an index (:meth:`SegmentedIndex.set_synonyms`),
``{"file": ..., "rules": N}``; the file, named by its content's hash, is written once and never changed."""
SYNONYMS_PREFIX = "synonyms-"
FILLED = "buffer_filled_mb"
"""A segment's ``meta.json`` entry: the buffer (MB) whose filling wrote it, where one did (:meth:`SegmentedIndex.merge`
leaves such segments be)."""
DELETED_SHARE = 0.3
"""The share of a filled segment's documents deleted past which :meth:`SegmentedIndex.merge_small_segments` folds it
too (Lucene's ``deletesPctAllowed``): deleted documents cost searches and disk until a merge drops them."""
DEFAULT_BUFFER_MB = 1024
"""MB of documents (:func:`batch_bytes`) a build holds before it writes them as a segment: a BM25 build's memory
then peaks at about 3.5 times this plus the process's own (measured for 600,000 documents: 1.53 GB held whole,
0.96 GB with 256 MB, 0.59 GB with 128, 0.41 GB with 64), whatever the corpus's size. A corpus below it (about 2
million short documents) is one segment, as before: each segment costs searches time (BM25 over 600,000 documents: 0.13 ms a query in one
segment, 0.19 in two, 0.25 in seven)."""
OPEN_ATTEMPTS = 5
"""Tries to open a commit whose segments a merge in another process removes meanwhile (each try reads the
newer commit)."""

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


def _stored_documents(texts: StringTable, locals_: np.ndarray) -> Iterator[Document]:
    return (Document.from_json(record) for record in texts.iter_at(locals_))


LOCK_HOLDERS: "weakref.WeakSet" = weakref.WeakSet()
"""The open indexes, whose locks a forked child makes anew (:meth:`SegmentedIndex._fresh_locks`): a child forked
while a thread of its parent wrote (a multiprocessing pool made meanwhile) holds copies of that thread's locks, which
no thread of its own releases, and waited forever on its first write."""


def _fresh_locks_in_child() -> None:
    for index in list(LOCK_HOLDERS):
        index._fresh_locks()


os.register_at_fork(after_in_child=_fresh_locks_in_child)


def open_index(path: str | Path, as_part: bool = False):
    """Open any semiret index directory with the class registered for its ``meta.json`` format. One of the parts
    of a composite index (a hybrid's), opened on its own rather than by the composite (``as_part``), opens
    read-only: a change to one part alone would leave the parts holding different documents."""
    found = read_meta(Path(path), None).get("format")
    if found not in INDEX_FORMATS:
        raise IndexFormatError(f"{path} holds a {found!r} index, not one semiret searches ({', '.join(sorted(INDEX_FORMATS))})")
    index = INDEX_FORMATS[found].open(path)
    if not as_part:
        index.part_of = composite_holding(Path(path))
    return index


class Segment:
    """One segment folder: its documents' ids, stored texts and deletion marks (kinds add their own data)."""

    text_fields: TextFields | None = None
    """The fields its index reads as text (BM25F's ``text_fields``; None: the title and text): what its word index
    reads (:meth:`text_index`), set by the index that opens it."""

    def __init__(self, path: Path, info: dict):
        self.name: str = info["name"]
        self.path = path
        self.n_docs: int = info["n_docs"]
        self.docids = StringTable(path, "docids", with_lookup=True)
        self.texts = StringTable(path, "texts") if (path / "texts.offsets.npy").is_file() else None
        self.metadata = StringTable(path, "metadata") if (path / "metadata.offsets.npy").is_file() else None
        if (self.texts is None or self.metadata is None) and not path.is_dir():
            # a merge in another process removed the folder while it was opened: not a segment without texts (its
            # hits textless, filtered out), an error the opening retries on the newer commit
            raise IndexFormatError(f"{path}: the segment folder went while it was opened (merged meanwhile)")
        self.deleted = read_deletions(path, self.n_docs, info.get("n_deleted", 0))  # bool [n_docs], in memory
        self._id_table: tuple[memoryview, np.ndarray] | None = None
        self._id_keys: np.ndarray | None = None
        self._id_cache: dict[int, str] = {}  # local number -> id, of ids decoded for hits (document_ids)
        self._any_deleted: tuple[np.ndarray, bool] | None = None  # (the deletion array, whether any is marked)
        # which documents pass each recent filter, and which segments of other parts hold the same documents in the
        # same order: shared by with_deleted copies, and by the threads searching them
        self._matching: OrderedDict[str, np.ndarray] = OrderedDict()
        self._matching_lock = threading.Lock()
        self._fields: OrderedDict[tuple[str, ...], Column] = OrderedDict()
        self._aligned: dict[Path, bool] = {}
        self._text_index: list[TextIndex] = []  # built on the first $text filter, shared as the caches above
        self._text_index_lock = threading.Lock()

    @property
    def n_deleted(self) -> int:
        return int(self.deleted.sum())

    def any_deleted(self) -> bool:
        """Whether a document is marked deleted: ``deleted.any()`` worked out once per deletion array (every search
        asks; a change never alters an array a snapshot reads, it gives the segment a new one: ``with_deleted``)."""
        known = self._any_deleted
        deleted = self.deleted
        if known is None or known[0] is not deleted:
            known = self._any_deleted = (deleted, bool(deleted.any()))
        return known[1]

    @property
    def nbytes(self) -> int:
        """The bytes of its files (memory-mapped, as opened: also those of a folder a merge removed since)."""
        return sum(value.nbytes if isinstance(value, np.ndarray) else value.blob.nbytes + value.offsets.nbytes
                   for value in vars(self).values() if isinstance(value, (np.ndarray, StringTable)))

    def with_deleted(self, deleted: np.ndarray) -> "Segment":
        """This segment with other deletion flags (a change never alters flags a snapshot reads); the opened
        files and caches are shared."""
        changed = copy.copy(self)
        changed.deleted = deleted
        return changed

    def document(self, local: int) -> Document:
        """The stored document of a local number (needs stored texts)."""
        return Document.from_json(self.texts[local])

    def documents(self, locals_: np.ndarray) -> Iterator[Document]:
        """The stored documents of local numbers, in order (needs stored texts)."""
        return _stored_documents(self.texts, locals_)

    def stored_documents(self, locals_: np.ndarray) -> StoredDocuments:
        """The stored documents of local numbers, in order, as stored (needs stored texts): copied, not parsed."""
        return StoredDocuments(self.texts.packed(locals_),
                               None if self.metadata is None else self.metadata.packed(locals_))

    def document_ids(self, locals_: np.ndarray) -> list[str]:
        """Document ids of local numbers, decoded straight from the memory-mapped id table; a few (a search's hits)
        through a bounded cache of those decoded before (a segment's ids never change)."""
        if len(locals_) >= 64:
            return self._decoded_ids(locals_)
        cache = self._id_cache
        wanted = locals_.tolist()
        out = [cache.get(local) for local in wanted]
        if None in out:
            missing = [local for local, name in zip(wanted, out) if name is None]
            found = dict(zip(missing, self._decoded_ids(np.array(missing, np.int64))))
            if len(cache) + len(found) > ID_CACHE_SIZE:
                cache.clear()
            cache.update(found)
            out = [found[local] if name is None else name for local, name in zip(wanted, out)]
        return out

    def _decoded_ids(self, locals_: np.ndarray) -> list[str]:
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

    def matching(self, wanted) -> np.ndarray:
        """bool [n_docs]: the documents whose stored metadata (and words, for ``$text``) pass ``wanted`` (a
        :class:`~semiret.indexes.filters.MetadataFilter`), kept for the :data:`FILTERS_KEPT` latest filters (a
        segment's documents never change)."""
        with self._matching_lock:
            found = self._matching.get(wanted.key)
            if found is not None:
                self._matching.move_to_end(wanted.key)
                return found
        # worked out outside the lock: searches with other filters go on meanwhile
        columns = self._columns(wanted.fields) if self.metadata is not None else {}
        found = wanted.mask(lambda path: columns[path] if path in columns else Column.missing(self.n_docs),
                            self.text_index, self.holding_ids)
        with self._matching_lock:
            self._matching[wanted.key] = found
            while len(self._matching) > FILTERS_KEPT:
                self._matching.popitem(last=False)
        return found

    def holding_ids(self, doc_ids: list[str]) -> np.ndarray:
        """bool [n_docs]: the segment's documents of those ids (deleted ones too: the caller's deletions hide them)."""
        found = self.docids.find_many(doc_ids)
        held = np.zeros(self.n_docs, bool)
        held[found[found >= 0]] = True
        return held

    def text_index(self) -> TextIndex:
        """Which of the segment's documents hold each word of their title and text (or of the :attr:`text_fields`
        its index reads), built on first use (needs stored texts) and kept."""
        with self._text_index_lock:  # one build however many threads filter at once
            if not self._text_index:
                # its reader holds the texts, not the segment: kept by the segment, a reference back to it made a
                # cycle that kept a merged segment's files mapped until Python's collector ran
                self._text_index.append(TextIndex(self.documents(np.arange(self.n_docs)), self.n_docs,
                                                  functools.partial(_stored_documents, self.texts), self.text_fields))
            return self._text_index[0]

    def _columns(self, paths: list[tuple[str, ...]]) -> dict[tuple[str, ...], Column]:
        """Each document's value of these metadata fields, read from the metadata table in one pass for the fields
        not kept yet, and kept for the :data:`FIELDS_KEPT` latest fields: a new filter on fields read before parses
        no JSON."""
        with self._matching_lock:
            columns = {path: self._fields[path] for path in paths if path in self._fields}
            for path in columns:
                self._fields.move_to_end(path)
        missing = [path for path in dict.fromkeys(paths) if path not in columns]
        if missing:
            read = {path: Column() for path in missing}
            for local in range(self.n_docs):  # one document's metadata parsed at a time
                stored = self.metadata[local]
                record = json.loads(stored) if stored else None
                for path, column in read.items():
                    column.append(field_value(record, path))
            read = {path: column.done() for path, column in read.items()}
            with self._matching_lock:
                for path, values in read.items():
                    self._fields[path] = values
                while len(self._fields) > FIELDS_KEPT:
                    self._fields.popitem(last=False)
            columns.update(read)
        return columns

    def aligned_with(self, other: "Segment") -> bool:
        """Whether ``other`` (a segment of another part of one composite index) holds the same documents in the
        same order, so that what passes a filter there passes here (compared once per pair)."""
        known = self._aligned.get(other.path)
        if known is None:
            known = other.n_docs == self.n_docs and np.array_equal(other.id_keys(), self.id_keys())
            self._aligned[other.path] = known
        return known

    def id_keys(self) -> np.ndarray:
        """Each local document's 64-bit id hash (uint64 [n_docs]: the id lookup table's hashes put back in local
        order), made once: rankings of two indexes of the same documents join on them without decoding ids."""
        if self._id_keys is None:
            keys = np.empty(self.n_docs, np.uint64)
            keys[np.asarray(self.docids.hash_order)] = np.asarray(self.docids.hashes)
            self._id_keys = keys
        return self._id_keys


DERIVED_KEPT = 4
"""Filters (or fields) whose sorted ids (or value counts) a commit keeps: several clients scrolling at once."""
FILTERS_KEPT = 32
"""Filters whose matching documents a segment keeps (the least recently used go first)."""
FIELDS_KEPT = 8
"""Metadata fields whose values a segment keeps, for filters not seen yet (the least recently used go first)."""


def _kept(snapshot: Snapshot, kind: str, key, make: Callable[[], Any]):
    """A value derived from a snapshot's live documents, kept in its ``derived`` (shared with its restricted views,
    whose hidden documents are in the key) for the :data:`DERIVED_KEPT` latest keys of a kind."""
    kept = snapshot.derived.setdefault(kind, OrderedDict())
    key = (key, snapshot.hiding)
    value = kept.get(key)
    if value is None:
        value = kept[key] = make()
        while len(kept) > DERIVED_KEPT:
            kept.popitem(last=False)
    return value


def _shown(segment: Segment, wanted) -> np.ndarray:
    """bool [n_docs]: a segment's live documents, those whose metadata passes ``wanted`` when given."""
    return ~segment.deleted if wanted is None else ~segment.deleted & segment.matching(wanted)


def _hidden_as(segments: list[Segment], like: "SegmentedIndex") -> list[np.ndarray]:
    """Per segment, the documents ``like`` (a restricted view of another part) hides: its aligned segment's flags,
    else (parts out of step: a crash between their commits) by id among the documents it keeps."""
    shown = None
    hidden = []
    for position, segment in enumerate(segments):
        other = like.segments[position] if position < len(like.segments) else None
        if other is not None and segment.aligned_with(other):
            hidden.append(other.deleted)
            continue
        if shown is None:
            shown = np.concatenate([s.id_keys()[~s.deleted] for s in like.segments] or [np.empty(0, np.uint64)])
        hidden.append(~np.isin(segment.id_keys(), shown))
    return hidden


ID_CACHE_SIZE = 1 << 14
"""Decoded ids a segment keeps for the hits of later searches (about 1.5 MB at most; emptied when full)."""


class Snapshot:
    """One committed state of an index, all that a search reads: ``meta.json`` as committed, its segments
    open, and values derived from them (document frequencies, IDF), computed once per snapshot.

    Never changed once published: a change builds the next snapshot and publishes it in one assignment, so a
    search that took a snapshot sees all of a change or none of it."""

    __slots__ = ("meta", "segments", "stamp", "derived", "hiding", "synonyms")

    def __init__(self, meta: dict, segments: list[Segment], stamp=None):
        self.meta = meta
        self.segments = segments
        self.synonyms: tuple[str, tuple[str, ...]] | None = None
        """The synonym rules the commit names, (file name, lines), read with the commit: a reader keeps the rules of
        its snapshot whatever writers do to the files since."""
        self.stamp = stamp
        """The :func:`~semiret.indexes.storage.commit_stamp` of the ``meta.json`` it was read from or written as."""
        self.derived: dict[str, Any] = {}
        self.hiding: str | None = None
        """In a restricted view (:meth:`SegmentedIndex.restricted`), the filter whose failing documents it hides:
        what sets its values derived from the live documents apart from its index's, in the ``derived`` they share."""


class HitMetadata:
    """The metadata of some live documents found in their segments (:meth:`SegmentedIndex.hit_metadata`): their
    values of a field, and which pass a filter, from what the segments keep (no JSON parsed once a field or a
    filter has been read)."""

    def __init__(self, located: list[tuple["Segment", list[str], np.ndarray]]):
        self.located = located

    def values(self, paths: list[tuple[str, ...]]) -> dict[tuple[str, ...], dict]:
        """Each id's value of each field of ``paths`` (:data:`~semiret.indexes.filters.MISSING` where it has none),
        ``{path: {id: value}}``, the fields of a segment read together."""
        found: dict = {path: {} for path in paths}
        for segment, ids, locals_ in self.located:
            columns = segment._columns(list(found)) if segment.metadata is not None else {}
            for path, values in found.items():
                if path not in columns:
                    values.update((doc_id, MISSING) for doc_id in ids)
                    continue
                column = columns[path]
                values.update(zip(ids, (column.values[code] for code in column.codes[locals_].tolist())))
        return found

    def passing(self, wanted) -> set[str]:
        """The ids whose documents pass ``wanted`` (a :class:`~semiret.indexes.filters.MetadataFilter`), by the
        segments' kept masks of it (:meth:`Segment.matching`, as a filtered search's)."""
        found: set[str] = set()
        for segment, ids, locals_ in self.located:
            found.update(doc_id for doc_id, passes in zip(ids, segment.matching(wanted)[locals_].tolist()) if passes)
        return found


class SegmentedIndex(ABC):
    """An open index directory of segments: the life cycle every index kind shares.

    ``build`` (a kind's own classmethod, which checks its arguments and calls :meth:`_build` with its
    ``meta.json`` fields) stages a new directory beside the target, writes the documents as segments of a
    bounded size (one, for a corpus below the build buffer) and renames it into place; :meth:`open` reads
    ``meta.json`` and opens the segments; :meth:`add`, :meth:`delete` and :meth:`merge` change the index and
    commit with one atomic ``meta.json`` replace.
    Documents are found by id (:meth:`locate`, ``in``, :meth:`get_document`) in any kind.

    Concurrency: any number of threads may search while one changes the index. A change runs on a private
    copy of the index (:meth:`_change`) and is published, as a new :class:`Snapshot`, only once committed;
    ``meta`` and ``segments`` are the current snapshot's. Writers take turns across threads and processes
    (:meth:`writing`); readers in other processes see a commit when they re-open or :meth:`refresh`.

    A kind provides:

    - ``FORMAT`` and ``VERSION`` (the ``format``/``version`` of its ``meta.json``), ``DESCRIPTION`` (what
      error messages call it) and ``batch_type``: the batch it indexes, with ``ids``, ``documents``,
      ``len()`` and a static ``concatenate`` (:class:`~semiret.types.Postings`,
      :class:`~semiret.types.Embeddings`);
    - :meth:`_open_segment`: a :class:`Segment` subclass that also opens the kind's own files;
    - :meth:`_validate`: refuse a bad batch with a clear error before anything is written;
    - :meth:`_write_segment_files`: write a batch's own files into a staged segment folder;
    - :meth:`_live_batch`: a segment's live documents back as a batch (for :meth:`merge`);
    - its ``search`` (reading one snapshot: ``snapshot = self.snapshot``), and ``describe`` facts of its own
      (``{**super().describe(), ...}``);
    - where it keeps state beside the snapshot (a growable vocabulary), :meth:`_load_commit` and
      :meth:`_discard_uncommitted`.

    Decorated with :func:`register_index_format`, a kind opens through :func:`open_index`.
    """

    FORMAT: ClassVar[str]
    VERSION: ClassVar[int] = 4
    """The format version this code writes: any commit records it, so that an older semiret, which would drop what
    it does not know of (metadata tables, passage records, merge buffers) or fail on it, refuses the index instead.
    2: metadata tables, ``chunking``, ``buffer_mb`` and filled segments, all of 2026-11-29/30. 3: the analyzer's
    ``drop_invisible`` and the chunking's ``spaceless`` (2026-11-30), which a reader of version 2 failed on with a
    ``TypeError``. 4: FAISS factory structures (``ann: faiss``, segments searched exactly until trained), passages of
    sentences and of tokens (``chunk_start``) and the ``vectors`` analyzer (2026-12-02), which a reader of version 3
    searched without re-scoring, failed on, or joined wrongly."""
    OLDEST_VERSION: ClassVar[int] = 1
    """The oldest format version this code reads (and upgrades on its first write)."""
    DESCRIPTION: ClassVar[str] = "index"
    batch_type: ClassVar[type]
    part_of: Path | None = None
    """The composite index this one is a part of, when opened on its own (:func:`open_index`): no writes."""
    unrecorded_buffer_mb: ClassVar[float] = DEFAULT_BUFFER_MB
    """The buffer a merge of an index of this kind takes by default where its build recorded none (written before
    builds did): the default of builds of the kind."""

    def __init__(self, path: Path, meta: dict):
        self.path = path
        self.snapshot = Snapshot(meta, [])
        """What searches read now; replaced whole by each change and refresh."""
        self.snapshot.segments.extend(self._segment_of(path / info["name"], info, meta) for info in meta["segments"])
        self.snapshot.synonyms = _read_synonyms(path, meta, None)
        self._fresh_locks()
        LOCK_HOLDERS.add(self)

    def _fresh_locks(self) -> None:
        """This process's locks of the index, unheld (made anew in a forked child: see :data:`LOCK_HOLDERS`)."""
        self._writer = threading.RLock()  # one writing thread in this process (the file lock excludes the others)
        self._write_depth = 0  # nested writing() blocks of the thread that holds _writer
        self._publishing = threading.Lock()  # held while a snapshot is committed or re-read and published

    # ------------------------------------------------------------------ what a kind provides
    @abstractmethod
    def _open_segment(self, path: Path, info: dict) -> Segment:
        """Open one committed segment folder (``info`` is its entry in ``meta.json``)."""

    def _segment_of(self, path: Path, info: dict, meta: dict | None = None) -> Segment:
        """:meth:`_open_segment`, told the fields its index reads as text (``meta``'s, default the index's own)."""
        segment = self._open_segment(path, info)
        segment.text_fields = recorded_fields(self.meta if meta is None else meta)
        return segment

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
                    documents: Sequence[Document] | None) -> Any:
        """The documents ``live`` (local numbers, ascending) of ``segment`` as a batch, with these ids and
        stored documents."""

    @classmethod
    def written_whole(cls, options: dict) -> str | None:
        """Why an index of this kind built with these options (its ``build``'s keywords, or its ``meta.json``) is
        written, and merged, as one segment whatever the buffer, or None: it takes a buffer."""
        return None

    def _load_commit(self, meta: dict) -> None:
        """Bring state the kind keeps beside the snapshot up to ``meta``, a newer commit (before its segments
        are opened)."""

    def _discard_uncommitted(self) -> None:
        """Forget what a failed change left in state the kind keeps beside the snapshot."""

    # ------------------------------------------------------------------ creation and opening
    @classmethod
    def _build(cls, path: str | Path, fields: dict, batches: Iterable, store_texts: bool, overwrite: bool,
               extra_meta: dict | None, buffer_mb: float | None = None, **attributes):
        """Write a new index of ``batches`` (staged beside ``path``, then renamed; a segment each ``buffer_mb`` MB
        of documents, :meth:`_append_parts`): ``fields`` are the kind's ``meta.json`` entries, ``attributes`` go
        to its constructor."""
        buffer_mb = check_buffer(buffer_mb)
        target = Path(path)
        check_build_target(target, overwrite)
        with staged_directory(target, overwrite, writer_locks(target)) as staged:
            meta = {
                "format": cls.FORMAT, "version": cls.VERSION, **fields, "store_texts": store_texts,
                "segments": [], "next_segment": 0, "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
                "build": secrets.token_hex(8), "buffer_mb": buffer_mb or 0, **(extra_meta or {}),
            }
            index = cls(staged, meta, **attributes)
            with index._change() as draft:
                draft._append_parts(batches, buffer_mb, index)
        return cls.open(target)

    def _append_parts(self, batches: Iterable, buffer_mb: float | None, empty: "SegmentedIndex") -> None:
        """On a new index's draft (of ``empty``): ``batches`` written as segments (:meth:`_write_parts`), so that a
        build's memory does not grow with the corpus; then every segment normalised by the whole corpus's statistics
        (:meth:`_renormalise` with ``exact``: the weights are recomputed from the term counts, as one segment's
        are; a part's old folder goes as soon as it is rewritten, as no one else reads a staged index, so the build
        needs the disk of the index and one part)."""
        self._write_parts(((batch, []) for batch in batches), empty, False, (buffer_mb or 0) * 2**20)
        remove_folders(self._renormalise(exact=range(len(self.segments)), discard=True))

    def _append_part(self, batches: list) -> None:
        """Batches whose ids :meth:`_write_parts` checked, validated and written as one segment."""
        for batch in batches:  # each alone first: one the kind cannot take may not even concatenate
            self._validate(batch)
        self._append_segment(self.batch_type.concatenate(batches))

    def _refuse_repeats(self, ids: list[str], since: int) -> None:
        """Refuse ids that the segments from ``since`` on hold (their sorted id hashes searched, no segment read
        back): the parts already written of the documents being added."""
        if len(self.segments) <= since:
            return
        hashes = id_hash(ids)
        for segment in self.segments[since:]:
            found = np.flatnonzero(segment.docids.find_many(ids, hashes) >= 0)
            if len(found):
                raise SemiretError(f"duplicate document id {ids[int(found[0])]!r} in the documents to add")

    @classmethod
    def open(cls, path: str | Path):
        path = Path(path)
        attempt = 0
        while True:
            meta, stamp = read_commit(path, cls.FORMAT)
            cls._check_version(path, meta)
            try:
                index = cls(path.absolute(), meta)  # the folder opened, whatever the working directory later
            except (IndexFormatError, OSError):
                attempt += 1
                if attempt < OPEN_ATTEMPTS and commit_stamp(path) != stamp:
                    continue  # another process merged meanwhile and removed segments of the commit read
                raise
            index.snapshot.stamp = stamp
            return index

    @classmethod
    def _check_version(cls, path: Path, meta: dict) -> None:
        """Refuse a commit of a format version this code does not read: a newer semiret's, with what to do."""
        version = meta.get("version")
        if isinstance(version, int) and version > cls.VERSION:
            raise IndexFormatError(f"{path}: {cls.DESCRIPTION} format version {version}, written by a newer semiret "
                                   f"(this one reads versions {cls.OLDEST_VERSION} to {cls.VERSION}): upgrade "
                                   "semiret to open it (pip install -U semiret)")
        if not isinstance(version, int) or version < cls.OLDEST_VERSION:
            raise IndexFormatError(f"{path}: {cls.DESCRIPTION} format version {version!r} is not supported")

    # ------------------------------------------------------------------ properties
    @property
    def meta(self) -> dict:
        """The current snapshot's ``meta.json`` (read only: changes go through :meth:`_change`)."""
        return self.snapshot.meta

    @property
    def segments(self) -> list[Segment]:
        """The current snapshot's segments (read only)."""
        return self.snapshot.segments

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
        segments = self.segments
        live = sum(s.n_docs - s.n_deleted for s in segments)
        return {"kind": self.kind, "documents": live, "deleted": sum(s.n_docs for s in segments) - live,
                "segments": len(segments), "size_bytes": self.size_on_disk(),
                "buffer_mb": self._buffer_bytes(None) / 2**20,  # what a merge folds segments into by default
                "format_version": self.meta["version"],
                **({"synonym_rules": self.meta[SYNONYMS]["rules"]} if self.meta.get(SYNONYMS) else {})}

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

    def count(self, wanted=None) -> int:
        """Live documents, or those whose metadata passes ``wanted`` (a
        :class:`~semiret.indexes.filters.MetadataFilter`): sums of the segments' masks, no id decoded."""
        return sum(int(np.count_nonzero(_shown(segment, wanted))) for segment in self.segments)

    def iter_documents(self, wanted=None) -> Iterator[Document]:
        """The stored live documents (those passing ``wanted``), segment by segment in the order they were added,
        all from the commit current when the iteration starts (needs stored texts)."""
        return (Document.from_json(record) for record in self.iter_records(wanted))

    def iter_records(self, wanted=None) -> Iterator[str]:
        """:meth:`iter_documents` as stored: each document's JSON record (a BEIR corpus line), not parsed."""
        for segment in self.snapshot.segments:
            yield from segment.texts.iter_at(np.flatnonzero(_shown(segment, wanted)))

    def sorted_ids(self, wanted=None) -> list[str]:
        """Ids of the live documents (those passing ``wanted``) in sorted order, what a scroll pages through; kept
        for the :data:`DERIVED_KEPT` latest filters of the current commit, so that each next page costs a binary
        search."""
        snapshot = self.snapshot
        return _kept(snapshot, "sorted_ids", None if wanted is None else wanted.key, lambda: sorted(
            i for s in snapshot.segments for i in s.document_ids(np.flatnonzero(_shown(s, wanted)))))

    def ordered_entries(self, order, wanted=None) -> list[tuple]:
        """The live documents (those passing ``wanted``) as ``(value key, id)`` in ``order``'s order (a
        :class:`~semiret.indexes.filters.Ordering`), from the segments' kept values; kept per commit for the latest
        orders and filters, so that each next page costs a binary search."""
        snapshot = self.snapshot

        def ordered() -> list[tuple]:
            entries = []
            for segment in snapshot.segments:
                shown = np.flatnonzero(_shown(segment, wanted))
                if not len(shown):
                    continue
                ids = segment.document_ids(shown)
                if segment.metadata is None:
                    entries += [(None, doc_id) for doc_id in ids]
                    continue
                column = segment._columns([order.path])[order.path]
                keys = [order.value_key(value) for value in column.values]  # each distinct value once
                entries += [(keys[code], doc_id) for code, doc_id in zip(column.codes[shown].tolist(), ids)]
            return sorted(entries, key=functools.cmp_to_key(order.compare))

        return _kept(snapshot, "ordered", (order.field, order.descending, None if wanted is None else wanted.key),
                     ordered)

    def field_counts(self, path: tuple[str, ...]) -> dict[tuple, list]:
        """Each value of a metadata field and how many live documents hold it (one whose field holds a list: each of
        its values), by the values' equality keys: ``{key: [value, count]}``. What tells a grouped search that no
        more groups, or members of a group, are to be found, and what a facet counts. From the segments' kept
        values; kept per commit for the latest fields. Never change what it returns."""
        snapshot = self.snapshot

        def counted() -> dict[tuple, list]:
            counts: dict[tuple, list] = {}
            for segment in snapshot.segments:
                if segment.metadata is None:
                    continue
                column = segment._columns([path])[path]
                held = np.bincount(column.codes[~segment.deleted], minlength=len(column.values))
                for value, count in zip(column.values, held.tolist()):
                    if count:
                        for key, each in distinct_values(value).items():
                            counts.setdefault(key, [each, 0])[1] += count
            return counts

        return _kept(snapshot, "field_counts", path, counted)

    def unit_field_counts(self, path: tuple[str, ...], unit: tuple[str, ...]) -> dict[tuple, list]:
        """:meth:`field_counts` with the live documents sharing a value of the field ``unit`` counted once
        (``("parent",)``: the passages of one document, in an index of passages, count as that document); a
        document without a ``unit`` value counts on its own. ``{key: [value, count]}``; kept per commit."""
        snapshot = self.snapshot

        def counted() -> dict[tuple, list]:
            holders: dict[tuple, list] = {}  # key: [value, the units holding it, documents without a unit]
            for segment in snapshot.segments:
                if segment.metadata is None:
                    continue
                columns = segment._columns([path, unit])
                column, units = columns[path], columns[unit]
                live = ~segment.deleted
                alone = np.zeros(len(units.codes), bool)
                for code, owner in enumerate(units.values):
                    if owner is MISSING or not isinstance(owner, (str, int, float)):
                        alone |= units.codes == code
                held = np.bincount(column.codes[live & alone], minlength=len(column.values))
                for value, count in zip(column.values, held.tolist()):
                    if count:
                        for key, each in distinct_values(value).items():
                            holders.setdefault(key, [each, set(), 0])[2] += count
                width = len(column.values)
                shared = live & ~alone
                pairs = np.unique(units.codes[shared].astype(np.int64) * width + column.codes[shared])
                for pair in pairs.tolist():
                    owner, value = divmod(pair, width)
                    for key, each in distinct_values(column.values[value]).items():
                        holders.setdefault(key, [each, set(), 0])[1].add(units.values[owner])
            return {key: [value, len(owners) + alone] for key, (value, owners, alone) in holders.items()}

        return _kept(snapshot, "unit_field_counts", (path, unit), counted)

    @property
    def stores_texts(self) -> bool:
        """Whether documents are stored beside their postings or vectors (texts, titles, metadata)."""
        return bool(self.meta["store_texts"])

    def get_document(self, doc_id: str) -> Document | None:
        """The stored document, or None when it is unknown, deleted or texts were not stored."""
        found = self.locate(doc_id)
        if found is None or found[0].texts is None:
            return None
        return found[0].document(found[1])

    def get_documents(self, doc_ids: Iterable[str]) -> dict[str, Document]:
        """The stored documents of those ids that are live (none when texts were not stored): :meth:`get_document`
        for many ids, each segment's lookups and reads made at once (a page of a scroll, say)."""
        doc_ids = list(doc_ids)
        found: dict[str, Document] = {}
        for segment, ids, locals_ in self._live_locals(doc_ids):
            if segment.texts is not None:
                found.update(zip(ids, segment.documents(locals_)))
        return {doc_id: found[doc_id] for doc_id in dict.fromkeys(doc_ids) if doc_id in found}  # in the order asked

    def word_completions(self, fragment: str, context: list[str], wanted=None,
                         unit: tuple[str, ...] | None = None) -> tuple[dict[str, int], list[str]]:
        """The words of the live documents' stored titles and texts that ``fragment`` begins, each with how many
        documents hold it beside every word of ``context`` the index holds (and pass ``wanted``, a filter), from the
        segments' word indexes (:meth:`Segment.text_index`, built on first use); ``unit``: a metadata field whose
        value makes documents one (``("parent",)``: an index of passages counts documents, a document holding the
        context in any of its passages). Returns the counts and the context words used."""
        segments = [segment for segment in self.snapshot.segments
                    if segment.texts is not None and segment.n_docs > segment.n_deleted]
        known = [word for word in context if any(segment.text_index().holds(word) for segment in segments)]
        counts: dict[str, int] = {}
        for segment in segments:
            words = segment.text_index()
            among = ~segment.deleted & (segment.matching(wanted) if wanted is not None else True)
            units = (segment._columns([unit])[unit].codes if unit is not None and segment.metadata is not None
                     else None)
            if known:
                among = words.holding_all(known, among, units)
            for word, count in words.completions(fragment, among, units).items():
                counts[word] = counts.get(word, 0) + count
        return counts, known

    def word_spelling(self, word: str) -> str:
        """How the stored documents holding ``word`` (as :func:`~semiret.text.analyzer.plain_words` reads it) write
        it: the commonest spelling in the first few (:meth:`TextIndex.spelling`)."""
        for segment in reversed(self.snapshot.segments):
            if segment.texts is not None and segment.text_index().holds(word):
                spelt = segment.text_index().spelling(word, segment.deleted)
                if spelt is not None:  # (else its holders here are all deleted: an older segment's)
                    return spelt
        return word

    def hit_metadata(self, doc_ids: Iterable[str]) -> "HitMetadata":
        """What a ranking's live hits hold, each id found in its segment once for every field and filter read
        (a boosted search reads several)."""
        return HitMetadata(list(self._live_locals(doc_ids)))

    def ids_holding(self, path: tuple[str, ...], values: list) -> list[str]:
        """Ids of the live documents whose metadata field ``path`` is one of ``values`` (the passages of a few
        documents, by ``parent``), from the segments' kept values and a map of them to their codes."""
        found = []
        for segment in self.snapshot.segments:
            if segment.metadata is not None:
                held = segment._columns([path])[path].holding(values) & ~segment.deleted
                found += segment.document_ids(np.flatnonzero(held))
        return found

    def stored_batch(self, documents: dict[str, Document]) -> Any:
        """The live documents of the ids ``documents`` names as one batch of what the index stored for them
        (postings, vectors), carrying ``documents`` in place of their stored texts: re-added with ``replace``, they
        change their metadata (or title and text as stored) without any model encoding them again."""
        batches = []
        for segment, ids, locals_ in self._live_locals(list(documents)):
            order = np.argsort(locals_)
            ids = [ids[i] for i in order.tolist()]
            batches.append(self._live_batch(segment, locals_[order], ids, [documents[i] for i in ids]
                                            if segment.texts is not None else None))
        return self.batch_type.concatenate(batches)

    def _live_locals(self, doc_ids: Iterable[str]) -> Iterator[tuple[Segment, list[str], np.ndarray]]:
        """The live documents of ``doc_ids``, segment by segment: each segment's ids and local numbers (the newest
        live copy of an id, as :meth:`locate` finds it), its id lookups made at once."""
        ids = list(dict.fromkeys(doc_ids))
        hashes = id_hash(ids)
        unresolved = np.arange(len(ids))
        for segment in reversed(self.segments):
            if not len(unresolved):
                return
            locals_ = segment.docids.find_many([ids[i] for i in unresolved.tolist()], hashes[unresolved])
            live = locals_ >= 0
            live[live] = ~segment.deleted[locals_[live]]
            if live.any():
                yield segment, [ids[i] for i in unresolved[live].tolist()], locals_[live]
            unresolved = unresolved[~live]

    def backup(self, target: str | Path, overwrite: bool = False) -> Path:
        """A copy of the index as its last commit stands, at ``target``: an index directory that opens and serves on
        its own (a backup; changes to either never reach the other). The segments' files, which never change once
        written, are hard-linked where ``target`` lies on the same file system (instant, no space), else copied;
        deletion marks are copied as far as the commit counts them. Writers wait meanwhile (a merge would remove
        a folder being linked); searches go on."""
        target = check_backup_target(self.path, target, overwrite)
        with staged_directory(target, overwrite, writer_locks(target)) as staged:
            # the source's lock is let go before the target's are taken to publish the copy (which needs nothing of
            # the source then): two backups each way between two indexes (one a restore) never wait on each other
            with self.unchanging():
                backup_files(self.path, staged, self.meta)
        return target

    # ------------------------------------------------------------------ synonyms (read by query sides)
    @property
    def synonyms_file(self) -> str | None:
        """The name of the file of the synonym rules the current commit holds (None: none set): a key that changes
        whenever the rules do."""
        return self.snapshot.synonyms[0] if self.snapshot.synonyms else None

    def synonym_lines(self) -> list[str]:
        """The synonym rules the current commit holds, as the lines they were set with (none: ``[]``)."""
        return list(self.snapshot.synonyms[1]) if self.snapshot.synonyms else []

    def set_synonyms(self, lines: list[str]) -> int:
        """Set the synonym rules (lines of a Solr-format file, :mod:`semiret.text.synonyms`; ``[]``: none) in one
        commit, none when they are the rules set already: queries read them from the next search on, no document
        is encoded again (Elasticsearch's updatable synonyms). The rules' file, named by its content, is written
        before the commit that names it; files no commit names any more are removed under the write lock (readers
        hold their snapshot's rules in memory, and one that read a commit whose file went reads the newer
        commit). Returns how many rules are set."""
        rules = parse_synonyms(lines, "synonyms")
        text = "".join(f"{line}\n" for line in lines)
        name = f"{SYNONYMS_PREFIX}{hashlib.sha256(text.encode('utf-8')).hexdigest()[:16]}.txt" if rules else None
        with self.writing():
            if name != self.synonyms_file:
                with self._change() as draft:
                    if rules:
                        atomic_write_text(self.path / name, text)
                        draft.meta[SYNONYMS] = {"file": name, "rules": len(rules)}
                        draft.snapshot.synonyms = (name, tuple(lines))
                    else:
                        draft.meta.pop(SYNONYMS, None)
                        draft.snapshot.synonyms = None
                self._remove_uncommitted_files()
        return len(rules)

    @contextmanager
    def unchanging(self) -> Iterator["SegmentedIndex"]:
        """Keep writers (of every process) out while the block runs, the index refreshed to its last commit: the
        write lock, taken as a reader where the index cannot be written to (a read-only file system, another
        user's index), and for one part of a composite index too."""
        with self._writer:
            held = self._write_depth > 0  # this thread writes already: its lock is held
            with nullcontext() if held else exclusive_lock(self.path / LOCK_FILE, reading=True):
                with self._publishing:
                    self._load_newer_commit()
                yield self

    def pinned(self) -> "SegmentedIndex":
        """A read-only view of the current snapshot: searches and lookups on it all see that one commit, whatever
        is published meanwhile (a search and the stored texts of its hits, say). Never change it."""
        return copy.copy(self)

    def similarities(self, doc_ids: Sequence[str]) -> np.ndarray:
        """The cosine similarities of live documents' stored vectors, ``[n, n]`` float32 in the order of
        ``doc_ids``, from one commit: what a diversified search (maximal marginal relevance) keeps apart. An id of
        no live document is an error."""
        view = self.pinned()
        where = {doc_id: (segment, local) for segment, ids, locals_ in view._live_locals(doc_ids)
                 for doc_id, local in zip(ids, locals_.tolist())}
        missing = next((doc_id for doc_id in doc_ids if doc_id not in where), None)
        if missing is not None:
            raise UnknownDocumentError(f"no document {missing!r} in {self.path}", missing)
        return cosine_similarities(view._document_vectors([where[doc_id] for doc_id in doc_ids]))

    def _document_vectors(self, located: list[tuple[Segment, int]]):
        """The stored vectors of (segment, local number) pairs as the rows of a numpy or scipy sparse matrix."""
        raise SemiretError(f"{self.path}: a {self.kind!r} index keeps no document vectors to compare")

    def holds_field(self, field: str, kinds: "frozenset[str] | None" = None,
                    along: Sequence[tuple[str, ...]] = ()) -> bool:
        """Whether a document of the current snapshot (deleted ones too, until a merge) holds the metadata field
        ``field`` (with a value of one of ``kinds``, when given: :func:`~semiret.indexes.filters.value_kinds`). Reads
        the segments' kept columns (those of the fields ``along`` too, in the same pass, where not kept yet), their
        distinct values until one is found; kept per snapshot."""
        path = field_path(field)

        def held() -> bool:
            for segment in self.snapshot.segments:
                if segment.metadata is None:
                    continue
                for value in segment._columns([path, *along])[path].values:
                    found = value_kinds(value)
                    if found and (kinds is None or found & kinds):
                        return True
            return False

        return _kept(self.snapshot, "held fields", (path, kinds), held)

    def restricted(self, wanted, like: "SegmentedIndex | None" = None) -> "SegmentedIndex":
        """A read-only view of the current snapshot (as :meth:`pinned`) in which the documents that fail ``wanted``
        (a :class:`~semiret.indexes.filters.MetadataFilter`) count as deleted: every search kind then skips them,
        and scores stay what they are unfiltered (deleted documents count in statistics until a merge, so the
        snapshot's derived values are shared). ``like``: the view of another part of the same composite index,
        which stores the documents; this part hides the same ones (segment by segment where the two hold the same
        documents in the same order, else by id)."""
        snapshot = self.snapshot

        def restricted_segments() -> list[Segment]:
            hidden = ([~segment.matching(wanted) for segment in snapshot.segments] if like is None
                      else _hidden_as(snapshot.segments, like))
            return [segment.with_deleted(segment.deleted | mask) for segment, mask in zip(snapshot.segments, hidden)]

        # the segments' view by a filter made once (masks of n_docs each) and kept; a new snapshot object each call,
        # so that the kept list refers back to nothing (a cycle would hold merged segments' files until a collection)
        segments = restricted_segments() if like is not None else _kept(snapshot, "restricted", wanted.key,
                                                                        restricted_segments)
        view = copy.copy(self)
        view.snapshot = Snapshot(snapshot.meta, segments, snapshot.stamp)
        view.snapshot.derived, view.snapshot.synonyms = snapshot.derived, snapshot.synonyms
        view.snapshot.hiding = f"{snapshot.hiding} & {wanted.key}" if snapshot.hiding else wanted.key
        return view

    # ------------------------------------------------------------------ other processes' commits
    def refresh(self, wait: bool = False) -> bool:
        """See what other processes committed since this index was opened or last refreshed: one ``stat`` of
        ``meta.json`` when nothing changed, else the new commit is read (unchanged segments stay open).
        Returns whether there was a new commit. Long-lived readers (a server, a search loop) call it before
        each search; it never waits for a writer's work, only, when another thread of this process is reading or
        publishing a commit and the one on disk is newer than this snapshot, for that short step: what was
        committed before the call (another process's acknowledged write) is what searches see when it returns.
        ``wait``: wait for such a thread in any case."""
        if not self._publishing.acquire(blocking=wait):
            if commit_stamp(self.path) == self.snapshot.stamp:
                return False  # another thread is publishing what this snapshot already is, or a newer change
            self._publishing.acquire()
        try:
            return self._load_newer_commit()
        finally:
            self._publishing.release()

    def _load_newer_commit(self) -> bool:
        """Publish the snapshot of ``meta.json`` if it is not the current one (the caller holds _publishing)."""
        attempt = 0
        while commit_stamp(self.path) != self.snapshot.stamp:
            meta, stamp = read_commit(self.path, self.FORMAT)
            self._check_version(self.path, meta)
            # segments are re-used by name, unless the directory holds another index now (rebuilt)
            same_index = build_of(meta) == build_of(self.meta)
            if not same_index and _made_as(meta) != _made_as(self.meta):
                raise IndexFormatError(f"{self.path} was rebuilt as another index ({_made_as(meta)['retriever']}, "
                                       f"made otherwise than the one open here): open it again")
            try:
                self._load_commit(meta)
                known = {segment.name: segment for segment in self.segments} if same_index else {}
                segments = [self._reopen_segment(known.get(info["name"]), info) for info in meta["segments"]]
                synonyms = _read_synonyms(self.path, meta, self.snapshot)
            except (IndexFormatError, OSError):
                attempt += 1
                if attempt < OPEN_ATTEMPTS and commit_stamp(self.path) != stamp:
                    continue  # another process merged meanwhile and removed segments of the commit read
                raise
            self.snapshot = Snapshot(meta, segments, stamp)
            self.snapshot.synonyms = synonyms
            return True
        return False

    def _reopen_segment(self, known: Segment | None, info: dict) -> Segment:
        """A committed segment: ``known`` (the open one of that name) as it is or with the deletion marks
        committed since, else opened."""
        if known is None:
            return self._segment_of(self.path / info["name"], info)
        if known.n_deleted == info.get("n_deleted", 0):
            return known
        return known.with_deleted(read_deletions(known.path, known.n_docs, info.get("n_deleted", 0)))

    # ------------------------------------------------------------------ changes
    @contextmanager
    def writing(self) -> Iterator["SegmentedIndex"]:
        """Hold the index's write lock while the block runs, with the index refreshed to the last commit.

        One writer at a time, across threads and processes: an ``flock`` on ``write.lock`` (released by the
        kernel when its holder dies, even by ``kill -9``), so every change applies on top of every other
        writer's commit instead of replacing it. :meth:`add`, :meth:`delete` and :meth:`merge` take it
        themselves; hold it around more than one of them to make them one step for other writers, and around
        encoding documents whose encoding grows the index's vocabulary (BM25's words). A failure inside
        discards what uncommitted state it left (such words). Searches never wait for it."""
        if self.part_of is not None:
            raise SemiretError(f"{self.path} is the {self.path.name!r} part of the index {self.part_of}, whose parts "
                               f"change together: add, delete and merge there (--index {self.part_of})")
        with self._writer:
            outermost = self._write_depth == 0
            with exclusive_lock(self.path / LOCK_FILE) if outermost else nullcontext():
                self._write_depth += 1
                try:
                    if outermost:
                        with self._publishing:
                            opened = build_of(self.meta)
                            self._load_newer_commit()
                        if build_of(self.meta) != opened:
                            raise IndexFormatError(f"{self.path} was rebuilt (an index --overwrite) since this "
                                                   f"process opened it: nothing was written; open it again and "
                                                   f"repeat the change")
                        self._remove_uncommitted_files()  # what a writer killed mid-commit left (a staged meta.json)
                    yield self
                except BaseException:
                    self._discard_uncommitted()
                    raise
                finally:
                    self._write_depth -= 1

    @contextmanager
    def _change(self) -> Iterator["SegmentedIndex"]:
        """A private copy of the index at its last commit (a draft) to change; when the block ends without
        error the draft is committed, durably, and published as the new snapshot. Searches meanwhile read
        the old snapshot, which nothing here alters."""
        with self.writing():
            draft = self._draft()
            yield draft
            self._publish(draft)

    def _draft(self) -> "SegmentedIndex":
        """Under the write lock: a private copy of the index at its last commit, to change (:meth:`_change`)."""
        draft = copy.copy(self)
        draft.snapshot = Snapshot(copy.deepcopy(self.meta), list(self.segments))
        draft.snapshot.synonyms = self.snapshot.synonyms
        return draft

    def _publish(self, draft: "SegmentedIndex") -> None:
        """Commit ``draft`` (:meth:`_draft`, changed) and make it the snapshot searches read."""
        with self._publishing:
            draft._commit()
            draft.snapshot.stamp = commit_stamp(self.path)
            self.snapshot = draft.snapshot

    def add(self, batch, replace: bool = False, superseded: Iterable[str] = ()) -> int:
        """Add documents as a new segment; returns how many. Existing ids are an error unless ``replace``,
        which deletes their old versions in the same commit, as it deletes the documents ``superseded`` names (the
        old passages of documents added again)."""
        superseded = list(superseded)
        if len(batch) == 0 and not superseded:
            return 0
        return self.add_parts([(batch, superseded)], replace, buffer_mb=0)

    def add_parts(self, parts: Iterable[tuple[Any, list[str]]], replace: bool = False,
                  buffer_mb: float | None = DEFAULT_BUFFER_MB) -> int:
        """:meth:`add` of documents that come in parts (``(batch, superseded)`` pairs, consumed as they come), in
        one commit: a segment each ``buffer_mb`` MB of them (0: one), so that adding a large file holds a buffer of
        it, not all of it. An id repeated across parts is refused as within one batch. Returns how many were added;
        a failure leaves the index as it was."""
        limit = (check_buffer(buffer_mb) or 0) * 2**20
        parts = iter(parts)
        with self.writing():  # held until a failed change's folders are gone: no other writer's can be taken for them
            coming = next(parts, None)  # under the lock: making a part may add words to the vocabulary
            if coming is None:
                return 0  # nothing to add: no commit
            before = {entry.name for entry in self.path.iterdir()}
            try:
                added, replaced = self._add_parts(itertools.chain([coming], parts), replace, limit)
            except BaseException:
                self._remove_unlisted(before)
                raise
        remove_folders(replaced)
        return added

    def _add_parts(self, parts: Iterator, replace: bool, limit: float) -> tuple[int, list[Path]]:
        """:meth:`add_parts`' change: the documents added, and the folders its commit no longer lists."""
        with self._change() as draft:
            added = draft._write_parts(parts, self, replace, limit)
            replaced = draft._renormalise()
        return added, replaced

    def _write_parts(self, parts: Iterable, committed: "SegmentedIndex", replace: bool, limit: float) -> int:
        """On a draft: ``(batch, superseded)`` parts checked against the ``committed`` index and against each other,
        their old versions marked deleted (``replace``, ``superseded``), and written as segments of ``limit``
        bytes (:meth:`_write_buffered`). Returns how many documents were written."""
        first = len(self.segments)
        held_ids: set[str] = set()  # the ids of the batches held, not written yet
        written = first

        def checked() -> Iterator:
            nonlocal written
            for batch, superseded in parts:
                if len(self.segments) != written:  # what was held is written: its ids are found in its segment
                    held_ids.clear()
                    written = len(self.segments)
                committed.check_new_ids(batch.ids, replace)  # ids usable, not repeated in the batch, new (or replaced)
                self._refuse_repeats(batch.ids, first)  # nor in the parts written, nor in those held
                repeated = next((i for i in batch.ids if i in held_ids), None)
                if repeated is not None:
                    raise SemiretError(f"duplicate document id {repeated!r} in the documents to add")
                if replace or superseded:
                    self._mark_deleted([i for i in [*superseded, *batch.ids] if i in committed], missing_ok=True)
                held_ids.update(batch.ids)
                yield batch

        return self._write_buffered(checked(), limit)

    def _write_buffered(self, batches: Iterable, limit: float) -> int:
        """On a draft: checked ``batches`` written as a segment each time ``limit`` bytes of them
        (:func:`batch_bytes`) are held (0: all as one segment; Lucene's RAM buffer). Returns how many documents
        were written."""
        pending, held, written = [], 0, 0
        for batch in batches:
            if len(batch) == 0:
                continue
            pending.append(batch)
            written += len(batch)
            held += batch_bytes(batch) if limit else 0
            if limit and held >= limit:
                self._append_part(pending)
                self.meta["segments"][-1][FILLED] = limit / 2**20  # a merge with this buffer leaves it be
                pending, held = [], 0
        if pending:
            self._append_part(pending)
        return written

    def _remove_unlisted(self, before: set[str]) -> None:
        """After a failed change (under the write lock): remove the segment folders it wrote, those that were not
        here before it and that the commit on disk does not list (it may have landed before the failure)."""
        try:
            listed = {info["name"] for info in read_commit(self.path, self.FORMAT)[0]["segments"]}
        except (OSError, ValueError, IndexFormatError):
            return  # no readable commit: a merge removes them later
        remove_folders([entry for entry in self.path.iterdir()
                         if entry.name.startswith("seg-") and entry.name not in before and entry.name not in listed])

    def delete(self, doc_ids: Iterable[str], missing_ok: bool = False) -> int:
        """Mark documents deleted; they vanish from searches at once. Returns how many were deleted (none held, with
        ``missing_ok``: no commit, as :meth:`delete_where`'s)."""
        doc_ids = list(doc_ids)
        with self.writing():
            if missing_ok and not any(doc_id in self for doc_id in doc_ids):
                return 0
            with self._change() as draft:
                return draft._mark_deleted(doc_ids, missing_ok)

    def delete_where(self, wanted) -> int:
        """Delete the live documents whose stored metadata passes ``wanted`` (a
        :class:`~semiret.indexes.filters.MetadataFilter`) in one commit, decided on the last commit (under the write
        lock). Returns how many were deleted."""
        with self.writing():
            doomed = self.restricted(wanted).live_ids()
            return self.delete(doomed, missing_ok=True) if doomed else 0  # nothing to delete: no commit

    def add_index(self, other: "SegmentedIndex", buffer_mb: float | None = None) -> int:
        """Add every live document of ``other`` (a shard: an index of this kind built with the same options from
        other documents), in its order and in one commit, as segments of ``buffer_mb`` MB (default: the buffer this
        index was built with), read a part at a time; returns how many. Ids already here are an error."""
        ours, theirs = self.shard_record(self.meta), self.shard_record(other.meta)
        if ours != theirs:
            differences = "; ".join(_differences(ours, theirs))
            raise SemiretError(f"{other.path} was not built like {self.path} ({differences}): they cannot be merged "
                               "(build both with the same options and semiret version)")
        limit = self._buffer_bytes(buffer_mb)
        with progress.StepBar(f"adding {other.path.name}", other.n_docs) as bar:
            parts = ((self._translated(other, batch), []) for batch in _counted(
                (batch for segment in other.segments for batch in other._live_parts(segment, limit)), bar))
            return self.add_parts(parts, buffer_mb=limit / 2**20)

    @staticmethod
    def shard_record(meta: dict) -> dict:
        """What indexes built from parts of one corpus with the same options share: ``meta.json`` without what
        the documents decide (segments, dates, the size of a word vocabulary)."""
        return {k: v for k, v in meta.items() if k not in SHARD_VARIABLES}

    def _translated(self, other: "SegmentedIndex", batch):
        """``batch``, read from ``other``, in this index's terms (a kind with a vocabulary of its own maps ids)."""
        return batch

    def merge(self, tail: int | None = None, buffer_mb: float | None = None) -> None:
        """Fold the last ``tail`` segments (default: all), dropping their deleted documents: the segments that filled
        a buffer of ``buffer_mb`` MB when written (default: the buffer the index was built with, its kind's
        :attr:`unrecorded_buffer_mb` for indexes that did not record one; 0: none did), with nothing deleted since,
        are left as they are, and each run between them is folded in its place into as few segments as hold it, one
        each ``buffer_mb`` MB of documents (0: one): one deletion in a large index rewrites the segment that holds
        it, not all after it. A merge of all also removes what crashed changes left (folders and files no commit
        lists). The folded segments are read a part at a time, so that a merge's memory, like a build's, does not
        grow with the index."""
        limit = self._buffer_bytes(buffer_mb)
        with self.writing():
            first = 0 if tail is None else max(len(self.segments) - tail, 0)
            # a segment at the largest size this buffer makes, nothing deleted in it: left as it is (Lucene's merge
            # policies leave such segments alike)
            folded = [p for p in range(first, len(self.segments))
                      if not (self._full(p, limit) and not self.segments[p].deleted.any())]
            if not self._fold(folded, limit) and tail is None:
                self._remove_uncommitted_files()  # nothing to fold: still what crashed changes left

    def merge_small_segments(self, max_segments: int) -> None:
        """Keep at most ``max_segments`` segments besides those that filled the index's buffer (as large as it makes
        them; left where they are): past that, fold the most recent others that, together, are not smaller than the
        one before them (small ones merge with small ones, so a document is rewritten a few times, not at every
        write), with the filled segments of which more than :data:`DELETED_SHARE` is deleted, each run of
        neighbours in its place (:meth:`_fold`; small segments are the most recent ones, side by side, as merges
        keep filled segments marked). What the server does after its writes (its ``--max-segments``)."""
        with self.writing():
            limit = self._buffer_bytes(None)
            small = [p for p in range(len(self.segments)) if not self._full(p, limit)]
            folded = [p for p in range(len(self.segments)) if self._full(p, limit)
                      and self.segments[p].n_deleted > DELETED_SHARE * self.segments[p].n_docs]
            if len(small) > max_segments:
                folded += [small[i] for i in tiered_run([self.segments[p].n_docs for p in small])]
            if folded:
                self._fold(sorted(folded), limit)

    def _fold(self, positions: list[int], limit: float) -> bool:
        """Under the write lock: the segments at ``positions`` (ascending) read back a part at a time, without their
        deleted documents, and written as segments of ``limit`` bytes in their place (each run of neighbours where
        it was: documents keep their order, so ties rank as before and a document's passages stay together), in one
        commit. A run of one segment with nothing deleted is left as it is (folding it would change nothing);
        False, and nothing done, when every run is such."""
        runs = self._runs_to_fold(positions)
        if not runs:
            return False
        before = {entry.name for entry in self.path.iterdir()}
        try:
            with self._change() as draft:
                self._fold_into(draft, runs, limit)
        except BaseException:
            self._remove_unlisted(before)  # the parts written: a failed merge leaves the index as it was
            raise
        self._remove_uncommitted_files()  # the folded and rewritten segments, and what crashes left
        return True

    def _runs_to_fold(self, positions: list[int]) -> list[list[int]]:
        """The runs of neighbours among ``positions`` (ascending) that a fold rewrites: not a run of one segment
        with nothing deleted (folding it would change nothing)."""
        runs = [run.tolist() for run in np.split(np.asarray(positions, np.int64),
                                                 np.flatnonzero(np.diff(positions) != 1) + 1)]
        return [run for run in runs if len(run) > 1 or (run and self.segments[run[0]].deleted.any())]

    def _fold_into(self, draft: "SegmentedIndex", runs: list[list[int]], limit: float) -> None:
        """:meth:`_fold`'s change of ``runs`` on ``draft``, uncommitted."""
        total = sum(self.segments[p].n_docs - self.segments[p].n_deleted for run in runs for p in run)
        with progress.StepBar("merging", total) as bar:
            written = set()
            for run in reversed(runs):  # from the last: the positions of the runs before stay as they are
                start, stop = int(run[0]), int(run[-1]) + 1
                folded = draft.segments[start:stop]
                after = draft.segments[stop:], draft.meta["segments"][stop:]
                del draft.segments[start:]
                del draft.meta["segments"][start:]
                draft._write_buffered(_counted((batch for segment in folded
                                                for batch in draft._live_parts(segment, limit)), bar), limit)
                if len(draft.segments) > start and all(self._full(p, limit) for p in run):
                    # filled segments less their deletions: still as large as this buffer makes them (Lucene's
                    # singleton merges), not small ones for the policy to fold with others
                    draft.meta["segments"][-1][FILLED] = limit / 2**20
                written.update(segment.name for segment in draft.segments[start:])
                draft.segments.extend(after[0])
                draft.meta["segments"].extend(after[1])
            draft._renormalise(exact=[p for p, s in enumerate(draft.segments) if s.name in written])

    def _full(self, position: int, limit: float) -> bool:
        """Whether the segment at ``position`` was written when a buffer of at least ``limit`` bytes filled: merged
        with that buffer, its documents would make a segment as large (Lucene's merge policies leave segments at
        their largest size alike)."""
        return bool(limit) and self.meta["segments"][position].get(FILLED, 0) * 2**20 >= limit

    def _buffer_bytes(self, buffer_mb: float | None) -> float:
        """The bytes a merge or a shard's add holds before it writes a segment: ``buffer_mb`` MB, by default the
        buffer this index was built with; always 0 (one segment) for a kind that writes its options whole, which
        refuses a buffer asked for (:func:`whole_buffer`)."""
        buffer_mb = check_buffer(buffer_mb)
        if self.written_whole(self.meta) is not None:
            whole_buffer(type(self), self.meta, buffer_mb)
            return 0.0
        return (self.meta.get("buffer_mb", self.unrecorded_buffer_mb) if buffer_mb is None else buffer_mb) * 2**20

    def _live_parts(self, segment: Segment, limit: float) -> Iterator:
        """A segment's live documents as batches (:meth:`_live_batch`) of about half ``limit`` bytes each, judged
        by the segment's mapped files (0: one batch), in order: what a merge reads, not the whole segment at once."""
        live = np.flatnonzero(~segment.deleted)
        wanted = np.ceil(segment.nbytes * len(live) / max(segment.n_docs, 1) / (limit / 2)) if limit else 1
        read = self._segment_reader(segment)
        for chunk in np.array_split(live, int(max(1, min(len(live), wanted)))):
            if len(chunk):
                documents = segment.stored_documents(chunk) if segment.texts is not None else None
                yield read(chunk, segment.document_ids(chunk), documents)

    def _segment_reader(self, segment: Segment) -> Callable:
        """What reads a segment's parts in order, ``(live, ids, documents) -> batch``: :meth:`_live_batch` (a kind
        may keep where the part before left off)."""
        return functools.partial(self._live_batch, segment)

    def _remove_uncommitted_files(self) -> None:
        """Delete segment folders and staged files that the last commit does not list (what crashed changes left;
        under the write lock: no writer is making any). Readers still searching an older snapshot keep their
        memory-mapped files."""
        listed = {info["name"] for info in self.meta["segments"]}
        for entry in self.path.iterdir():
            orphan = (entry.name.startswith("seg-") and entry.name not in listed
                      or entry.name.startswith(SYNONYMS_PREFIX) and entry.name != self.synonyms_file)
            if orphan or ".tmp-" in entry.name:
                if entry.is_dir():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)

    # ------------------------------------------------------------------ writing (on a draft)
    def check_new_ids(self, ids: list[str], replace: bool = False) -> None:
        """Refuse ids of documents to add that repeat, are unusable (:func:`check_ids`) or, without ``replace``,
        are here already: what :meth:`add` checks, which callers may also ask before encoding documents."""
        check_new_ids(self.path, ids, lambda asked: (i for i in asked if i in self), replace)

    def _check_batch(self, batch) -> None:
        """Refuse a batch that repeats an id or that the kind cannot take (:meth:`_validate`)."""
        check_ids(batch.ids)
        self._validate(batch)

    def _mark_deleted(self, doc_ids: Iterable[str], missing_ok: bool) -> int:
        """Append deletion marks (durably) for these ids and flag them in new copies of their segments."""
        marks: dict[str, list[int]] = {}
        for doc_id in dict.fromkeys(doc_ids):  # each id once, in order
            found = self.locate(doc_id)
            if found is None:
                if missing_ok:
                    continue
                raise SemiretError(f"cannot delete {doc_id!r}: no such document in {self.path}")
            marks.setdefault(found[0].name, []).append(found[1])
        for position, (info, segment) in enumerate(zip(self.meta["segments"], self.segments)):
            if segment.name in marks:
                append_deletions(segment.path, info.get("n_deleted", 0), marks[segment.name])
                info["n_deleted"] = info.get("n_deleted", 0) + len(marks[segment.name])  # a later call appends after
                deleted = segment.deleted.copy()
                deleted[marks[segment.name]] = True
                self.segments[position] = segment.with_deleted(deleted)
        return sum(map(len, marks.values()))

    def _append_segment(self, batch, rewrite_of: Segment | None = None) -> None:
        """Write a checked batch as a new segment folder (staged, fsynced, then renamed) and list it; or, for
        ``rewrite_of`` (no batch), that segment's documents again (:meth:`_rewrite_segment_files`), its ids, texts and
        metadata files linked rather than written again (none is ever changed in place)."""
        n_docs = len(batch) if rewrite_of is None else rewrite_of.n_docs
        info = {"name": f"seg-{self.meta['next_segment']:06d}", "n_docs": n_docs, "n_deleted": 0}
        # a folder of this name was left by an add that crashed before its commit: the staged one replaces it
        with staged_directory(self.path / info["name"]) as staged:
            if rewrite_of is not None:
                self._rewrite_segment_files(staged, rewrite_of, info)
                for stored in rewrite_of.path.iterdir():
                    if stored.name.split(".")[0] in STORED_TABLES:
                        link_or_copy(stored, staged / stored.name)
            else:
                self._write_segment_files(staged, batch, info)
                StringTable.write(staged, "docids", batch.ids, with_lookup=True)
                if self.meta["store_texts"] and batch.documents is not None:
                    stored = StoredDocuments.of(batch.documents)
                    StringTable.write(staged, "texts", stored.records)
                    if stored.has_metadata:  # also alone: filters read it without the texts
                        StringTable.write(staged, "metadata", stored.metadata)
        self.meta["segments"].append(info)
        self.meta["next_segment"] += 1
        self.segments.append(self._segment_of(self.path / info["name"], info))

    def _rewrite_segment_files(self, directory: Path, segment: Segment, info: dict) -> None:
        """Write the kind's own files of ``segment``'s documents, all of them in its order, again from the
        statistics as they now are (:meth:`_renormalise`; ``segment`` is no longer among the draft's). By default
        read back whole and written as a batch; a kind may do it in place of that, a part at a time."""
        every = np.arange(segment.n_docs)
        whole = segment.with_deleted(np.zeros(segment.n_docs, bool))
        self._write_segment_files(directory, self._live_batch(whole, every, segment.document_ids(every), None), info)

    def _stale_segments(self, exact: Container[int] = ()) -> list[int]:
        """Positions of segments whose stored values were computed from index-wide statistics that have moved
        too far since (BM25's average document length), or at all for the positions ``exact`` (parts just
        written): :meth:`_renormalise` rewrites them. None by default."""
        return []

    def _renormalise(self, exact: Container[int] = (), discard: bool = False) -> list[Path]:
        """On a draft: rewrite each stale segment (:meth:`_stale_segments`) as the statistics now are, in its
        place, with the same documents and deletion marks (the parts of a hybrid index stay aligned, and the
        statistics themselves do not move); returns the folders the commit no longer lists, to remove once it
        is made, or removes each as soon as it is rewritten (``discard``: a staged index no one else reads)."""
        replaced = []
        for position in self._stale_segments(exact):
            segment = self.segments.pop(position)
            old_info = self.meta["segments"].pop(position)
            replaced.append(segment.path)
            self._append_segment(None, rewrite_of=segment)
            rewritten, info = self.segments.pop(), self.meta["segments"].pop()
            if FILLED in old_info:
                info[FILLED] = old_info[FILLED]
            if segment.n_deleted:
                append_deletions(rewritten.path, 0, np.flatnonzero(segment.deleted).tolist())
                rewritten = rewritten.with_deleted(segment.deleted.copy())
                info["n_deleted"] = segment.n_deleted  # the marks on disk: a later mark in this change goes after
            self.segments.insert(position, rewritten)
            self.meta["segments"].insert(position, info)
            if discard:
                remove_folders(replaced)
                replaced = []
        return replaced

    def _commit(self) -> None:
        """Record the draft's state in ``meta.json`` (one atomic rename, fsynced): the commit point of every
        change."""
        atomic_write_json(self.path / META_FILE, self._committed_meta())

    def _committed_meta(self) -> dict:
        """The ``meta.json`` that commits the draft's state, every file it names written first (called again, the
        same: a hybrid records it, then publishes it)."""
        for info, segment in zip(self.meta["segments"], self.segments):
            info["n_deleted"] = segment.n_deleted
        self.meta["version"] = self.VERSION  # what it may now hold: an older semiret refuses it
        return self.meta

    # ------------------------------------------------------------------ search results
    @staticmethod
    def _top_hits(segments: list[Segment], seg_scores: list[np.ndarray], seg_locals: list[np.ndarray], k: int,
                  n_queries: int) -> SearchHits:
        """The best ``k`` of every segment's per-query results ([queries, <= k] scores, best first, and local
        numbers, -1 where fewer), as :class:`SegmentHits` of ``segments`` (those searched: one snapshot's);
        equal scores keep the earlier segment first."""
        if not seg_scores:
            return SearchHits([[] for _ in range(n_queries)], [[] for _ in range(n_queries)])
        if len(seg_scores) == 1 and n_queries == 1:  # one query's hits of one segment (a search box's): as below
            valid = seg_locals[0] >= 0
            flat_scores = seg_scores[0][valid].tolist()
            return SegmentHits(segments, seg_locals[0][valid].astype(np.int64), [flat_scores], [0, len(flat_scores)])
        if len(seg_scores) == 1:
            scores, refs = seg_scores[0], seg_locals[0].astype(np.int64)
        else:
            scores = np.concatenate(seg_scores, axis=1)
            refs = np.concatenate([np.where(d >= 0, d.astype(np.int64) + (seg_no << 32), -1)
                                   for seg_no, d in enumerate(seg_locals)], axis=1)
            order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
            scores = np.take_along_axis(scores, order, 1)
            refs = np.take_along_axis(refs, order, 1)
        valid = refs >= 0
        flat_scores = scores[valid].tolist()
        bounds = [0, len(flat_scores)]
        if n_queries != 1:
            bounds = np.zeros(n_queries + 1, np.int64)
            np.cumsum(valid.sum(axis=1), out=bounds[1:])
            bounds = bounds.tolist()
        return SegmentHits(segments, refs[valid], [flat_scores[lo:hi] for lo, hi in zip(bounds, bounds[1:])], bounds)


class SegmentHits(SearchHits):
    """:class:`SearchHits` of a segmented index, whose ids are decoded from the segments' id tables when first
    read: :meth:`id_keys` gives the hits' 64-bit id hashes and :meth:`ids_at` a few ids without decoding the
    rest (``hybrid`` fuses 100 hits of each part and shows 10)."""

    def __init__(self, segments: list[Segment], refs: np.ndarray, scores: list[list[float]], bounds: list[int]):
        super().__init__(None, scores)
        self._segments, self._refs, self._bounds = segments, refs, bounds  # refs: segment << 32 | local, best first
        self._ref_of: dict[str, int] | None = None  # a hit's ref by its id, made on the first stored_document

    @property
    def ids(self) -> list[list[str]]:
        if self._ids is None:
            names, bounds = self._decode(self._refs), self._bounds
            self._ids = [names] if len(bounds) == 2 else [names[lo:hi] for lo, hi in zip(bounds, bounds[1:])]
        return self._ids

    @ids.setter
    def ids(self, value: list[list[str]] | None) -> None:
        self._ids = value

    def __len__(self) -> int:
        return len(self.scores)

    def __reduce__(self):
        """Pickled as plain hits, the ids decoded: the segments stay in this process."""
        return SearchHits, (self.ids, self.scores, self.postings_visited, None, self.groups)

    def __deepcopy__(self, memo) -> SearchHits:
        """Plain hits, the ids decoded, still reading the documents of the index searched."""
        return SearchHits(copy.deepcopy(self.ids, memo), copy.deepcopy(self.scores, memo), self.postings_visited,
                          self.lookup, copy.deepcopy(self.groups, memo))

    def id_keys(self, query: int) -> np.ndarray:
        refs = self._refs[self._bounds[query]: self._bounds[query + 1]]
        return self._per_segment(refs, lambda segment, locals_: segment.id_keys()[locals_], np.uint64)

    def located(self, index, doc_ids: list[str], query: int | None = None
                ) -> list[tuple[Segment, list[str], np.ndarray]] | None:
        """Where the hits of ``doc_ids`` (ids among these hits, or among query ``query``'s) are live, per segment
        their ids and local numbers, as ``index``'s lookups would find them (:meth:`SegmentedIndex._live_locals`) but
        read from where the search found them, no id looked up again; None unless these hits are of ``index``'s
        snapshot (a hybrid's are of a part's, a filtered search's of a restricted view's)."""
        if getattr(getattr(index, "snapshot", None), "segments", None) is not self._segments:
            return None
        if query is None:
            ref_of = dict(zip([d for ids in self.ids for d in ids], self._refs.tolist()))
        else:
            ref_of = dict(zip(self.ids[query], self._refs[self._bounds[query]: self._bounds[query + 1]].tolist()))
        doc_ids = list(dict.fromkeys(doc_ids))
        refs = np.fromiter((ref_of[d] for d in doc_ids), np.int64, len(doc_ids))
        seg_of = refs >> 32
        located = []
        for seg_no in np.unique(seg_of).tolist():
            here = np.flatnonzero(seg_of == seg_no)
            located.append((self._segments[seg_no], [doc_ids[i] for i in here.tolist()], refs[here] & 0xFFFFFFFF))
        return located

    def stored_document(self, doc_id: str) -> Document | None:
        """A hit's stored document as the commit searched holds it, read from the segment the search found it in
        (a writer's later delete or replace does not reach it: a search and its hits' texts are of one commit); None
        for an id of no hit, or a segment without stored texts. What a search's hits look their documents up with."""
        if self._ref_of is None:
            self._ref_of = dict(zip([doc_id for ids in self.ids for doc_id in ids], self._refs.tolist()))
        ref = self._ref_of.get(doc_id)
        segment = None if ref is None else self._segments[ref >> 32]
        return None if segment is None or segment.texts is None else segment.document(ref & 0xFFFFFFFF)

    def ids_at(self, query: int, positions) -> list[str]:
        if self._ids is not None:
            return super().ids_at(query, positions)
        return self._decode(self._refs[self._bounds[query] + np.asarray(positions, np.int64)])

    def _decode(self, refs: np.ndarray) -> list[str]:
        names = self._per_segment(refs, lambda segment, locals_: segment.document_ids(locals_), object)
        return names.tolist() if isinstance(names, np.ndarray) else names

    def _per_segment(self, refs: np.ndarray, read, dtype):
        """``read(segment, local numbers)`` for ``refs``, in their order: one call per segment."""
        if len(self._segments) == 1:
            return read(self._segments[0], refs)
        out = np.empty(len(refs), dtype)
        seg_of = refs >> 32
        for seg_no in np.unique(seg_of).tolist():
            here = seg_of == seg_no
            out[here] = read(self._segments[seg_no], refs[here] & 0xFFFFFFFF)
        return out


def _read_synonyms(path: Path, meta: dict, known: Snapshot | None) -> tuple[str, tuple[str, ...]] | None:
    """The synonym rules the commit ``meta`` names, as :attr:`Snapshot.synonyms` holds them (those of ``known``, a
    snapshot read before, when it names the same file). A missing file is an :class:`IndexFormatError`, which a
    reader of a commit replaced meanwhile answers by reading the newer one."""
    record = meta.get(SYNONYMS)
    if not record:
        return None
    if known is not None and known.synonyms and known.synonyms[0] == record["file"]:
        return known.synonyms
    try:
        text = (path / record["file"]).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise IndexFormatError(f"the synonyms file {record['file']} that the index's commit names is missing") from None
    return record["file"], tuple(text.splitlines())


def build_of(meta: dict) -> str | None:
    """What tells one build of an index from another at the same path: a random token (indexes written before it
    had one: their creation time, to the second)."""
    return meta.get("build", meta.get("created"))


CORPUS_STATISTICS = ("avgdl",)
"""Analyzer entries a build takes from its corpus (a lexical prior's average length): another corpus, same model."""


def _made_as(meta: dict) -> dict:
    """What an index's queries must be made for: its format, kind, retriever and analyzer (less what the analyzer
    took from the corpus). A rebuild that keeps them is searched as the old index was; one that does not is not."""
    def without_statistics(value):
        if isinstance(value, dict):
            return {k: without_statistics(v) for k, v in value.items() if k not in CORPUS_STATISTICS}
        return value

    return {"format": meta.get("format"), "kind": meta.get("kind"), "retriever": meta.get("retriever"),
            "analyzer": without_statistics(meta.get("analyzer"))}


def writer_locks(target: Path) -> list[Path]:
    """The lock files writers of the index at ``target`` hold (none when there is no index there): what a build
    that replaces it takes while swapping, in the order writers take them (a hybrid's parts in order)."""
    try:
        meta = read_meta(target, None)
    except (IndexFormatError, OSError, ValueError):
        return []
    if "parts" in meta:
        return [target / part / LOCK_FILE for part in meta["parts"]]
    return [target / LOCK_FILE]


def batch_bytes(batch) -> int:
    """About the memory a batch to index holds (its arrays, ids and documents: their fields' objects, shallowly, or
    their packed bytes as a merge reads them): what a build or a merge counts against its buffer."""
    size = sum(value.nbytes for value in vars(batch).values() if isinstance(value, np.ndarray))
    size += sum(map(sys.getsizeof, batch.ids))
    if isinstance(batch.documents, StoredDocuments):
        size += batch.documents.nbytes
    elif batch.documents is not None:
        size += sum(sys.getsizeof(d) + sys.getsizeof(d.text) + sys.getsizeof(d.title) + sys.getsizeof(d.metadata)
                    for d in batch.documents)
    return size


def check_buffer(buffer_mb) -> float | None:
    """A build buffer as a Python float of MB (0: no limit; None stays None), or a clear error for anything that is
    not a non-negative number (numpy numbers are taken: their own dtype would overflow or round the byte count)."""
    if buffer_mb is None:
        return None
    try:
        number = float(buffer_mb) if isinstance(buffer_mb, (int, float, np.integer, np.floating)) \
            and not isinstance(buffer_mb, (bool, np.bool_)) else None
    except OverflowError:
        number = None
    if number is None or not np.isfinite(number) or number < 0:
        raise SemiretError(f"the buffer (buffer_mb, --buffer-mb) must be a non-negative number of MB (0: no limit), "
                           f"got {buffer_mb!r}")
    return number


def tiered_run(sizes: list[int]) -> list[int]:
    """Positions (ascending) of the last segments of these sizes that, together, are not smaller than the one
    before them (at least two): the small recent segments a merge policy folds."""
    run, total = [], 0
    for position in reversed(range(len(sizes))):
        if len(run) >= 2 and sizes[position] > total:
            break
        run.append(position)
        total += sizes[position]
    return run[::-1]


def whole_buffer(index_class, options: dict, buffer_mb: float | None) -> float | None:
    """The buffer a kind's build takes: ``buffer_mb``, or None where the kind writes these options whole
    (:meth:`SegmentedIndex.written_whole`), which refuses a buffer asked for."""
    reason = index_class.written_whole(options)
    if reason is None:
        return buffer_mb
    if buffer_mb:
        raise SemiretError(f"{reason} is written and merged whole: a buffer (buffer_mb, --buffer-mb) does not apply")
    return None


def _counted(batches: Iterable, bar: "progress.StepBar") -> Iterator:
    """``batches``, each advancing ``bar`` by its documents once it is consumed."""
    for batch in batches:
        yield batch
        bar.advance(amount=len(batch))


def remove_folders(paths: list[Path]) -> None:
    """Delete segment folders a commit no longer lists (readers of an older snapshot keep their mapped files)."""
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)


def check_backup_target(source: Path, target: str | Path, overwrite: bool) -> Path:
    """Where a backup of the index at ``source`` may go: not the index itself nor inside it, and an existing
    directory only with ``overwrite`` and when it is an index (:func:`check_build_target`)."""
    target = Path(target)
    resolved = target.resolve()
    if resolved == source.resolve() or source.resolve() in resolved.parents:
        raise SemiretError(f"a backup of {source} cannot replace it or lie inside it: choose another directory")
    check_build_target(target, overwrite)
    return target


def backup_files(source: Path, folder: Path, meta: dict) -> None:
    """The files of the commit ``meta`` of the index at ``source`` into ``folder`` (held under the index's write
    lock): its segments' files linked (:func:`~semiret.files.link_or_copy`), their deletion marks copied up to the
    committed count (they are appended in place), the other files at the top (a growable vocabulary) copied, and
    ``meta`` as ``meta.json``. Segment folders of no commit, staging leftovers, the lock and caches kept in
    folders of their own (an embedding cache) are left out."""
    for entry in source.iterdir():
        if entry.is_file() and entry.name not in (META_FILE, LOCK_FILE) and STAGING_MARK not in entry.name:
            shutil.copy2(entry, folder / entry.name)
    for info in meta["segments"]:
        segment, copied = source / info["name"], folder / info["name"]
        copied.mkdir()
        for file in segment.iterdir():
            if file.name == DELETED_FILE:
                with open(file, "rb") as marks:
                    (copied / DELETED_FILE).write_bytes(marks.read(4 * info.get("n_deleted", 0)))
            elif STAGING_MARK not in file.name:
                link_or_copy(file, copied / file.name)
    # another index from now on: a process that has the original open reopens everything when the copy is restored
    # over it (build_of), instead of keeping segments it knows by name
    atomic_write_json(folder / META_FILE, {**meta, "build": secrets.token_hex(8)})


def copy_index_files(source: Path, target: Path) -> None:
    """An index directory's files copied to ``target`` (which may exist), without its lock file and the staged
    files of writes that never committed."""
    shutil.copytree(source, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns(LOCK_FILE, "*.tmp-*"))


def merge_shards(target: str | Path, shards: Sequence[str | Path], overwrite: bool = False,
                 buffer_mb: float | None = None) -> SegmentedIndex:
    """One index at ``target`` from the shard indexes of one corpus (``semiret index --shard i/n``, in shard
    order), folded into segments of ``buffer_mb`` MB (default: the first shard's build buffer; 0: one segment), read
    a part at a time: the documents and order one machine's build of the whole corpus has."""
    if not shards:
        raise SemiretError("no shard to merge")
    first = open_index(shards[0])
    if not isinstance(first, SegmentedIndex):
        raise SemiretError(f"{shards[0]} holds several indexes ({type(first).__name__}): only single-part "
                           "indexes merge as shards")
    _check_slices(shards, [first.meta] + [read_meta(Path(shard), None) for shard in shards[1:]])
    target = Path(target)
    check_build_target(target, overwrite)
    with staged_directory(target, overwrite) as staged:
        first._buffer_bytes(buffer_mb)  # a buffer the kind refuses: said of the option, before any shard is read
        copy_index_files(first.path, staged)
        merged = type(first).open(staged)
        for shard in shards[1:]:
            try:
                merged.add_index(open_index(shard), buffer_mb)
            except SemiretError as exc:  # said of the first shard, not of the staging folder it is copied to
                reason = str(exc).replace(str(staged), str(shards[0])).replace(  # no replacing among shards
                    " (use replace / --replace)", ": shards of one corpus hold different documents (a shard given twice?)")
                raise type(exc)(f"{shard} does not join {shards[0]}: {reason}") from None
        merged.merge(buffer_mb=buffer_mb)
        with merged._change() as draft:  # segments the merge left as they were, normalised by the whole corpus too
            draft._renormalise(exact=range(len(draft.segments)), discard=True)
            # another index than the first shard, whose segment names it repeats: readers of an index it replaces
            # (--overwrite) must open it anew, not keep their segments of those names
            draft.meta["build"] = secrets.token_hex(8)
            draft.meta.pop("shard", None)  # the whole corpus now
    return open_index(target)


def _check_slices(shards: Sequence[str | Path], metas: list[dict]) -> None:
    """Refuse shards that are not every slice of one corpus once, in order, as their records say (``index --shard
    i/n``): a shard missing or out of order made an index short of documents or in another order, without a word.
    Shards built before semiret recorded slices (none recorded) are taken as given."""
    slices = [meta.get("shard") for meta in metas]
    if all(record is None for record in slices):
        return
    unrecorded = next((shard for shard, record in zip(shards, slices) if record is None), None)
    if unrecorded is not None:
        raise SemiretError(f"{unrecorded} is no shard (built without --shard i/n) beside shards that are")
    for shard, record in zip(shards, slices):
        if (record["count"], record["corpus_documents"]) != (slices[0]["count"], slices[0]["corpus_documents"]):
            raise SemiretError(f"{shard} is shard {record['number']}/{record['count']} of a corpus of "
                               f"{record['corpus_documents']:,} documents; {shards[0]} is "
                               f"{slices[0]['number']}/{slices[0]['count']} of one of "
                               f"{slices[0]['corpus_documents']:,}: not shards of one build")
    numbers = [record["number"] for record in slices]
    if numbers != list(range(slices[0]["count"])):
        count = slices[0]["count"]
        missing = sorted(set(range(count)) - set(numbers))
        raise SemiretError(f"the shards given are {', '.join(f'{n}/{count}' for n in numbers)}: merge every shard "
                           f"0/{count} to {count - 1}/{count} once, in order"
                           + (f" ({', '.join(f'{n}/{count}' for n in missing)} missing)" if missing else ""))


def check_ids(ids: list[str]) -> None:
    """Refuse documents to add that repeat an id or whose id is blank or holds a control character."""
    for doc_id in ids:
        problem = document_id_problem(doc_id)
        if problem is not None:
            raise SemiretError(f"{problem} (in the documents to add)")
    if len(set(ids)) != len(ids):
        seen: set[str] = set()
        repeated = next(i for i in ids if i in seen or seen.add(i))
        raise SemiretError(f"duplicate document id {repeated!r} in the documents to add")


def check_new_ids(path, ids: list[str], present: Callable[[list[str]], Iterable[str]], replace: bool) -> None:
    """Refuse ids of documents to add to the index at ``path`` that repeat, are unusable (:func:`check_ids`) or,
    without ``replace``, are there already (``present(ids)``: those of them the index holds)."""
    check_ids(ids)
    if not replace:
        clash = next(iter(present(ids)), None)
        if clash is not None:
            raise SemiretError(f"document {clash!r} is already in {path} (use replace / --replace)")


def check_build_target(target: Path, overwrite: bool, source: Path | None = None) -> None:
    """Refuse early (before any document is read) what :func:`replace_directory` would refuse late, never
    replace a non-empty directory that is not a semiret index, even with ``overwrite``, nor the directory that
    holds ``source`` (the corpus being indexed)."""
    if not target.exists():
        check_parent_folders(target)
        return
    if vacant_directory(target):  # made beforehand, as many tools want: the index goes there
        return
    if not target.is_dir() or (any(target.iterdir()) and not (target / META_FILE).is_file()):
        raise IndexFormatError(f"{target} exists and is not a semiret index: choose another directory "
                               "(an index never replaces other files)")
    if not overwrite:
        raise IndexFormatError(f"{target} already exists (pass overwrite=True / --overwrite to replace it)")
    if source is not None and (source.resolve() == target.resolve() or target.resolve() in source.resolve().parents):
        raise IndexFormatError(f"the corpus {source} lies inside {target}, which --overwrite would replace: move "
                               "the corpus out first or choose another directory")


def _differences(ours: dict, theirs: dict, prefix: str = "") -> list[str]:
    """``name: a != b`` for each setting (nested ones as ``outer.inner``) two records give different values."""
    found = []
    for name in sorted(set(ours) | set(theirs), key=str):
        a, b = ours.get(name), theirs.get(name)
        if isinstance(a, dict) and isinstance(b, dict):
            found += _differences(a, b, f"{prefix}{name}.")
        elif a != b:
            found.append(f"{prefix}{name}: {a!r} != {b!r}")
    return found


def cosine_similarities(vectors) -> np.ndarray:
    """Cosine similarities between the rows of a numpy or scipy CSR matrix (a row of zeros: 0 to every row,
    itself included), ``[n, n]`` float32."""
    if hasattr(vectors, "indptr"):  # a hundred rows: scipy's sparse product costs more than this compiled loop
        present, terms = np.unique(vectors.indices, return_inverse=True)  # columns the rows hold, however large
        gram = kernels.sparse_gram(vectors.indptr.astype(np.int64), terms.astype(np.int64),
                                   vectors.data.astype(np.float64), len(present))
    else:
        gram = np.asarray(vectors, np.float64) @ np.asarray(vectors, np.float64).T
    norms = np.sqrt(np.clip(np.diag(gram), 0.0, None))
    norms[norms == 0] = np.inf
    return (gram / norms[:, None] / norms[None, :]).astype(np.float32)
