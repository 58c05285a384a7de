"""Several indexes of the same documents under one directory, changed together: what a hybrid retriever
(BM25 fused with a neural retriever) searches.

The directory holds ``meta.json`` (format ``semiret.composite``, the parts in order) and one complete index
per part, each opening on its own (``open_index(path / part)``). A batch to add is a ``{part: batch}``
mapping; deletes and merges go to every part. Stored texts live in the first part. Writers hold the composite's
write lock and every part's (:meth:`CompositeIndex.writing`), so a change reaches the parts as one step for other
writers, and it commits as one (:meth:`CompositeIndex._changed_together`): every part's change is written first,
then the parts' new ``meta.json`` recorded in the composite's (its commit point), then each part's published. A
crash before that record leaves every part as it was; after it, the next writer or reader publishes what it
records in the parts not yet published (rolled forward): never one part changed and another not, which left a
document searchable by one part, and refused by the other on its next add or delete.
"""

from __future__ import annotations

import copy
import secrets
import threading
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np

from semiret.errors import IndexFormatError, SemiretError
from semiret.files import atomic_write_json, directory_size, exclusive_lock, staged_directory
from semiret.indexes.segments import (
    LOCK_FILE,
    LOCK_HOLDERS,
    check_buffer,
    check_build_target,
    check_new_ids,
    check_backup_target,
    open_index,
    register_index_format,
    tiered_run,
    backup_files,
    writer_locks,
)
from semiret.indexes.storage import COMPOSITE_FORMAT, META_FILE, commit_stamp, read_meta


PENDING = "commit"
"""The composite ``meta.json`` entry recording, while a change commits, every part's new ``meta.json``."""

PUBLICATION_PATIENCE = 1.0
"""Seconds a refresh waits for a writer publishing a change in every part (milliseconds: a ``meta.json`` written
per part) before it takes the write lock, in case that writer died."""


@register_index_format
class CompositeIndex:
    FORMAT = COMPOSITE_FORMAT
    VERSION = 1

    def __init__(self, path: Path, meta: dict, parts: dict):
        self.path, self.meta, self.parts = path, meta, parts
        self._fresh_locks()
        LOCK_HOLDERS.add(self)

    def _fresh_locks(self) -> None:
        """This process's lock of the composite, unheld (:data:`~semiret.indexes.segments.LOCK_HOLDERS`)."""
        self._writer = threading.RLock()  # one writing thread in this process (the file lock excludes the others)
        self._write_depth = 0
        self._publishing = threading.Lock()  # held while the parts' commits are published and while a view pins them
        self._stable_stamp = None  # the composite meta.json's stamp when the parts were last read as one change

    @classmethod
    def build(cls, path: str | Path, kind: str, batches: Iterable[dict], parts: dict[str, dict],
              store_texts: bool = True, overwrite: bool = False, extra_meta: dict | None = None) -> "CompositeIndex":
        """Build every part from ``{part: batch}`` batches; ``parts`` maps each part's name to its index class
        (``index_class``), kind (``kind``) and build options (the rest). ``store_texts``: in the first part, and in
        those whose options say ``store_texts`` (a part whose searches read them)."""
        batch_list = list(batches)

        def part_writer(name: str, config: dict, position: int):
            config = dict(config)
            index_class, part_kind = config.pop("index_class"), config.pop("kind")
            part_meta = {"retriever": config.pop("retriever")} if "retriever" in config else None
            stores = store_texts and (config.pop("store_texts", False) or position == 0)
            return lambda target: index_class.build(target, part_kind, [batch[name] for batch in batch_list],
                                                    **config, store_texts=stores, extra_meta=part_meta)

        return cls.assemble(path, kind, {name: part_writer(name, config, position)
                                         for position, (name, config) in enumerate(parts.items())},
                            overwrite=overwrite, extra_meta=extra_meta)

    @classmethod
    def assemble(cls, path: str | Path, kind: str, writers: dict[str, Callable[[Path], object]],
                 overwrite: bool = False, extra_meta: dict | None = None) -> "CompositeIndex":
        """A composite index whose parts are written, in order, by ``writers`` (part name -> a function that
        writes a complete index at the path it is given), staged and published as one directory: a failing
        writer leaves any old index at ``path`` untouched. Texts are read from the first part."""
        target = Path(path)
        check_build_target(target, overwrite)
        with staged_directory(target, overwrite, writer_locks(target)) as staged:
            for name, write in writers.items():
                write(staged / name)
            atomic_write_json(staged / META_FILE, {
                "format": cls.FORMAT, "version": cls.VERSION, "kind": kind, "parts": list(writers),
                "analyzer": {"type": "composite", "parts": list(writers)},
                "created": time.strftime("%Y-%m-%dT%H:%M:%S"), **(extra_meta or {})})
        return cls.open(target)

    @classmethod
    def open(cls, path: str | Path) -> "CompositeIndex":
        path = Path(path).absolute()  # the folder opened, whatever the working directory later
        meta = read_meta(path, cls.FORMAT)
        if meta.get("version") != cls.VERSION:
            raise IndexFormatError(f"{path}: composite index format version {meta.get('version')} is not supported")
        if PENDING in meta:  # a writer died committing (or commits now: its lock is waited for)
            with exclusive_lock(path / LOCK_FILE, reading=True):
                meta = _complete_commit_if_writable(path)
        return cls(path, meta, {name: open_index(path / name, as_part=True) for name in meta["parts"]})

    # ------------------------------------------------------------------ the first part answers for the documents
    @property
    def first(self):
        return next(iter(self.parts.values()))

    @property
    def kind(self) -> str:
        return self.meta["kind"]

    @property
    def n_docs(self) -> int:
        return self.first.n_docs

    @property
    def n_stored(self) -> int:
        return self.first.n_stored

    @property
    def segments(self) -> list:
        return self.first.segments

    def __contains__(self, doc_id: str) -> bool:
        return doc_id in self.first

    @property
    def stores_texts(self) -> bool:
        return self.first.stores_texts  # the first part holds the documents

    def get_document(self, doc_id: str):
        return self.first.get_document(doc_id)

    def get_documents(self, doc_ids):
        return self.first.get_documents(doc_ids)

    def field_counts(self, path: tuple[str, ...]) -> dict:
        return self.first.field_counts(path)

    def unit_field_counts(self, path: tuple[str, ...], unit: tuple[str, ...]) -> dict:
        return self.first.unit_field_counts(path, unit)

    def ids_holding(self, path: tuple[str, ...], values: list) -> list[str]:
        return self.first.ids_holding(path, values)

    def hit_metadata(self, doc_ids):
        return self.first.hit_metadata(doc_ids)

    def word_completions(self, fragment: str, context: list[str], wanted=None, unit=None):
        return self.first.word_completions(fragment, context, wanted, unit)

    def word_spelling(self, word: str) -> str:
        return self.first.word_spelling(word)

    def live_ids(self) -> list[str]:
        return self.first.live_ids()

    def count(self, wanted=None) -> int:
        return self.first.count(wanted)

    def iter_documents(self, wanted=None):
        return self.first.iter_documents(wanted)

    def iter_records(self, wanted=None):
        return self.first.iter_records(wanted)

    def ordered_entries(self, order, wanted=None) -> list[tuple]:
        return self.first.ordered_entries(order, wanted)

    def sorted_ids(self, wanted=None) -> list[str]:
        return self.first.sorted_ids(wanted)

    def size_on_disk(self) -> int:
        return directory_size(self.path)

    def describe(self) -> dict:
        """Counts and size, and each part's own description with the retriever and analyzer its ``meta.json``
        records (a BM25 part's stemmer, stopwords and ``text_fields``; a neural part's model), as ``semiret info``
        shows an index of its own."""
        return {"kind": self.kind, "documents": self.n_docs, "deleted": self.n_stored - self.n_docs,
                "segments": len(self.segments), "size_bytes": self.size_on_disk(),
                "parts": {name: {**part.describe(), **{key: part.meta[key] for key in ("retriever", "analyzer")
                                                       if part.meta.get(key) is not None}}
                          for name, part in self.parts.items()}}

    @property
    def synonyms_file(self) -> str | None:
        return self.first.synonyms_file

    def synonym_lines(self) -> list[str]:
        return self.first.synonym_lines()

    def set_synonyms(self, lines: list[str]) -> int:
        """:meth:`SegmentedIndex.set_synonyms` for every part (each part's query side reads its own part's), every
        part's write lock held; returns how many rules are set."""
        with self.writing():
            counts = [part.set_synonyms(lines) for part in self.parts.values()]
        return counts[0]

    @property
    def bm25_part(self):
        """The part that is a BM25 index (a hybrid's lexical part), whose BM25 parameters are this index's; None."""
        return next((part for part in self.parts.values() if part.kind == "bm25"), None)

    def bm25_with(self, **parameters):
        """:meth:`InvertedIndex.bm25_with <semiret.indexes.inverted.InvertedIndex.bm25_with>` of :attr:`bm25_part`."""
        return self._bm25_part_or_error().bm25_with(**parameters)

    def set_bm25(self, **parameters) -> bool:
        """:meth:`InvertedIndex.set_bm25 <semiret.indexes.inverted.InvertedIndex.set_bm25>` of :attr:`bm25_part`,
        every part's write lock held; its segments keep their documents and order, so the parts stay aligned."""
        lexical = self._bm25_part_or_error()
        with self.writing():
            return lexical.set_bm25(**parameters)

    def _bm25_part_or_error(self):
        lexical = self.bm25_part
        if lexical is None:
            raise SemiretError(f"{self.path} holds no BM25 index (its parts: {', '.join(self.parts)}), so no BM25 "
                               "parameters")
        return lexical

    def search(self, *_, **__):
        raise SemiretError(f"{self.path} holds several indexes: search it with the retriever that fuses them "
                           f"({self.meta.get('retriever', 'hybrid')})")

    # ------------------------------------------------------------------ readers and writers (as in every part)
    def refresh(self, wait: bool = False) -> bool:
        """Pick up what other processes committed to any part (:meth:`SegmentedIndex.refresh`), every part at one
        change: a writer in another process publishes its parts one by one while the composite's ``meta.json``
        records its change (:meth:`_changed_together`), so the parts are read while that file stands still and
        records none, else read again (put back as they were meanwhile: a view pins the old change, never half the
        new). A change whose writer died publishing it is completed, as :meth:`open` completes it."""
        waited_since = None
        while True:
            stamp = commit_stamp(self.path)
            if stamp != self._stable_stamp and PENDING in read_meta(self.path, self.FORMAT):
                waited_since = waited_since or time.monotonic()
                self._await_publication(time.monotonic() - waited_since)
                continue
            with self._publishing:
                before = {name: part.snapshot for name, part in self.parts.items()}
                refreshed = any([part.refresh(wait) for part in self.parts.values()])
                if not refreshed or commit_stamp(self.path) == stamp:  # (no part read anew: still one change)
                    self._stable_stamp = stamp
                    return refreshed
                for name, part in self.parts.items():  # a change was published while the parts were read
                    with part._publishing:
                        part.snapshot = before[name]

    def _await_publication(self, waited: float) -> None:
        """Wait a little for a writer to publish its change in every part; after :data:`PUBLICATION_PATIENCE`
        seconds, for its write lock, and complete what a writer that died left (this thread holds no lock a
        writer of this process would wait for). Where it cannot be completed (a read-only copy, a full disk) the
        parts are read as they are, as :meth:`open` reads them."""
        if waited < PUBLICATION_PATIENCE:
            time.sleep(0.001)
            return
        with exclusive_lock(self.path / LOCK_FILE, reading=True):
            _complete_commit_if_writable(self.path)
            self._stable_stamp = commit_stamp(self.path)  # the record, if it stays, is not waited for again

    def pinned(self) -> "CompositeIndex":
        """A read-only view of every part's current commit (:meth:`SegmentedIndex.pinned`), of one change: never a
        part's new commit beside another's old one."""
        view = copy.copy(self)
        with self._publishing:
            view.parts = {name: part.pinned() for name, part in self.parts.items()}
        return view

    def similarities(self, doc_ids) -> np.ndarray:
        """The mean of its parts' cosine similarities (each part compares its own vectors), from one commit."""
        view = self.pinned()
        return np.mean([part.similarities(doc_ids) for part in view.parts.values()], axis=0, dtype=np.float32)

    def restricted(self, wanted) -> "CompositeIndex":
        """Every part restricted to the documents that pass ``wanted`` (:meth:`SegmentedIndex.restricted`): the
        first part, which stores the documents, by their metadata; the others as it is."""
        first = self.first.restricted(wanted)
        view = copy.copy(self)
        view.parts = {name: first if part is self.first else part.restricted(wanted, like=first)
                      for name, part in self.parts.items()}
        return view

    def backup(self, target: str | Path, overwrite: bool = False) -> Path:
        """A copy of every part as its last commit stands (:meth:`SegmentedIndex.snapshot`), taken with every
        part's write lock held: the parts agree in it as they do here."""
        target = check_backup_target(self.path, target, overwrite)
        # the parts' locks let go before the target's are taken to publish the copy (see SegmentedIndex.backup)
        with staged_directory(target, overwrite, writer_locks(target)) as staged, ExitStack() as held:
            held.enter_context(self._writer)
            if self._write_depth == 0:  # (this thread writes already: its locks are held, its commits whole)
                held.enter_context(exclusive_lock(self.path / LOCK_FILE, reading=True))  # as writers take them
                _complete_commit_if_writable(self.path)
            for part in self.parts.values():  # in part order
                held.enter_context(part.unchanging())
            for name, part in self.parts.items():
                (staged / name).mkdir()
                backup_files(part.path, staged / name, part.meta)
            atomic_write_json(staged / META_FILE, {**self.meta, "build": secrets.token_hex(8)})
        return target

    @contextmanager
    def writing(self) -> Iterator["CompositeIndex"]:
        """Hold the composite's write lock, then every part's, taken in part order (:meth:`SegmentedIndex.writing`),
        a commit a writer died in the middle of completed first (before a part removes what no commit of its own
        lists: the segments that commit records)."""
        with self._writer:
            outermost = self._write_depth == 0
            with ExitStack() as locks:
                if outermost:
                    locks.enter_context(exclusive_lock(self.path / LOCK_FILE))
                    self.meta = _complete_commit(self.path)  # as on disk (another process rebuilt it, say)
                self._write_depth += 1
                locks.callback(self._leave)
                for part in self.parts.values():
                    locks.enter_context(part.writing())
                yield self

    def _leave(self) -> None:
        self._write_depth -= 1

    def _changed_together(self, change: Callable[[str, object, object], object]) -> dict:
        """Change every part on a draft of its own (``change(name, part, draft)``, each part's result returned by
        name), then commit the drafts as one change: their ``meta.json`` recorded in the composite's (the commit
        point), then each part's published, then the record removed (:func:`_complete_commit` finishes what a
        crash leaves). A failure before the record leaves every part as it was."""
        with self.writing():
            before = {name: {entry.name for entry in part.path.iterdir()} for name, part in self.parts.items()}
            drafts = {name: part._draft() for name, part in self.parts.items()}
            try:
                results = {name: change(name, part, drafts[name]) for name, part in self.parts.items()}
                atomic_write_json(self.path / META_FILE, {**self.meta, PENDING: {
                    name: draft._committed_meta() for name, draft in drafts.items()}})
            except BaseException:
                for name, part in self.parts.items():
                    part._remove_unlisted(before[name])
                raise
            with self._publishing:  # a view pins every part's old commit or every part's new one
                for name, part in self.parts.items():
                    part._publish(drafts[name])
            atomic_write_json(self.path / META_FILE, self.meta)
            for part in self.parts.values():
                part._remove_uncommitted_files()  # the segments the change rewrote or folded
            return results

    # ------------------------------------------------------------------ changes go to every part
    def check_new_ids(self, ids: list[str], replace: bool = False) -> None:
        """:meth:`SegmentedIndex.check_new_ids`, the ids being this index's (its first part's)."""
        check_new_ids(self.path, ids, lambda asked: (i for i in asked if i in self), replace)

    def add(self, batch: dict, replace: bool = False, superseded: Iterable[str] = ()) -> int:
        """:meth:`SegmentedIndex.add` for every part (``superseded`` deleted in each part's commit)."""
        if set(batch) != set(self.parts):
            raise SemiretError(f"a batch for {self.path} needs the parts {list(self.parts)}, got {sorted(batch)}")
        superseded = list(superseded)
        if len(batch[next(iter(batch))]) == 0 and not superseded:
            return 0
        with self.writing():
            for name, part in self.parts.items():  # every part's checks run before any part writes
                part._check_batch(batch[name])
            self.check_new_ids(batch[next(iter(batch))].ids, replace)

            def add_part(name, part, draft) -> int:
                added = draft._write_parts([(batch[name], superseded)], part, replace, 0.0)
                draft._renormalise()
                return added

            return self._changed_together(add_part)[next(iter(self.parts))]

    def delete(self, doc_ids: Iterable[str], missing_ok: bool = False) -> int:
        """Delete the documents in every part, in one commit; returns how many the first part held (none, with
        ``missing_ok``: no commit)."""
        doc_ids = list(doc_ids)
        first = next(iter(self.parts))
        with self.writing():
            if missing_ok and not any(doc_id in self for doc_id in doc_ids):
                return 0
            deleted = self._changed_together(lambda name, part, draft: draft._mark_deleted(
                doc_ids, missing_ok=missing_ok or name != first))
        return deleted[first]

    def delete_where(self, wanted) -> int:
        """:meth:`SegmentedIndex.delete_where` for every part: what the first part's metadata says, deleted in all."""
        with self.writing():
            doomed = self.first.restricted(wanted).live_ids()
            return self.delete(doomed, missing_ok=True) if doomed else 0  # nothing to delete: no commit

    def merge_small_segments(self, max_segments: int) -> None:
        """:meth:`SegmentedIndex.merge_small_segments` for parts that merge whole: the same recent run of each."""
        with self.writing():
            if len(self.segments) > max_segments:
                self.merge(tail=len(tiered_run([segment.n_docs for segment in self.segments])))

    def merge(self, tail: int | None = None, buffer_mb: float | None = None) -> None:
        """Merge every part (:meth:`SegmentedIndex.merge`) into one segment each: parts split by size would not
        stay aligned (their documents take different room), so a buffer asked for is refused."""
        if check_buffer(buffer_mb):
            raise SemiretError(f"{self.path} holds several indexes, merged whole: a buffer (buffer_mb, --buffer-mb) "
                               "does not apply")
        with self.writing():
            start = 0 if tail is None else max(len(self.segments) - tail, 0)
            runs = self.first._runs_to_fold(list(range(start, len(self.segments))))  # the parts' segments align
            if runs:
                self._changed_together(lambda name, part, draft: part._fold_into(draft, runs, 0.0))
            elif tail is None:
                for part in self.parts.values():
                    part._remove_uncommitted_files()  # nothing to fold: still what crashed changes left


def _complete_commit_if_writable(path: Path) -> dict:
    """:func:`_complete_commit`; where the index cannot be written (a read-only copy), its ``meta.json`` without
    the record, the parts as they are."""
    try:
        return _complete_commit(path)
    except OSError:
        return {name: value for name, value in read_meta(path, CompositeIndex.FORMAT).items() if name != PENDING}


def _complete_commit(path: Path) -> dict:
    """Under the composite's write lock: publish, in each part that does not have it yet, the ``meta.json`` that
    the last commit recorded (a writer died between its commit point and the last part's publication), then remove
    the record; returns the composite's ``meta.json``, without it. The segments it lists were all written before it
    was recorded."""
    meta = read_meta(path, CompositeIndex.FORMAT)
    pending = meta.pop(PENDING, None)
    if pending is None:
        return meta
    for name, part_meta in pending.items():
        if read_meta(path / name, None) != part_meta:
            atomic_write_json(path / name / META_FILE, part_meta)
    atomic_write_json(path / META_FILE, meta)
    return meta
