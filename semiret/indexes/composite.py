"""Several indexes of the same documents under one directory, changed together: what a hybrid retriever
(BM25 fused with a neural retriever) searches.

The directory holds ``meta.json`` (format ``semiret.composite``, the parts in order) and one complete index
per part, each opening on its own (``open_index(path / part)``). A batch to add is a ``{part: batch}``
mapping; deletes and merges go to every part. Parts commit one after the other (first part first): a crash
between two commits leaves a document in the first part only, which the next add with ``replace`` of that
document, or its delete, repairs. Stored texts live in the first part. Writers hold every part's write lock
(:meth:`CompositeIndex.writing`), so a change reaches the parts as one step for other writers.
"""

from __future__ import annotations

import copy
import secrets
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np

from semiret.errors import IndexFormatError, SemiretError
from semiret.files import atomic_write_json, directory_size, staged_directory
from semiret.indexes.segments import (
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
from semiret.indexes.storage import COMPOSITE_FORMAT, META_FILE, read_meta


@register_index_format
class CompositeIndex:
    FORMAT = COMPOSITE_FORMAT
    VERSION = 1

    def __init__(self, path: Path, meta: dict, parts: dict):
        self.path, self.meta, self.parts = path, meta, parts

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
        path = Path(path)
        meta = read_meta(path, cls.FORMAT)
        if meta.get("version") != cls.VERSION:
            raise IndexFormatError(f"{path}: composite index format version {meta.get('version')} is not supported")
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
        return {"kind": self.kind, "documents": self.n_docs, "deleted": self.n_stored - self.n_docs,
                "segments": len(self.segments), "size_bytes": self.size_on_disk(),
                "parts": {name: part.describe() for name, part in self.parts.items()}}

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
        """Pick up what other processes committed to any part (:meth:`SegmentedIndex.refresh`)."""
        return any([part.refresh(wait) for part in self.parts.values()])

    def pinned(self) -> "CompositeIndex":
        """A read-only view of every part's current commit (:meth:`SegmentedIndex.pinned`)."""
        view = copy.copy(self)
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
            for part in self.parts.values():  # in part order, as writers take them
                held.enter_context(part.unchanging())
            for name, part in self.parts.items():
                (staged / name).mkdir()
                backup_files(part.path, staged / name, part.meta)
            atomic_write_json(staged / META_FILE, {**self.meta, "build": secrets.token_hex(8)})
        return target

    @contextmanager
    def writing(self) -> Iterator["CompositeIndex"]:
        """Hold every part's write lock, taken in part order (:meth:`SegmentedIndex.writing`)."""
        with ExitStack() as locks:
            for part in self.parts.values():
                locks.enter_context(part.writing())
            yield self

    # ------------------------------------------------------------------ changes go to every part
    def check_new_ids(self, ids: list[str], replace: bool = False) -> None:
        """:meth:`SegmentedIndex.check_new_ids`, the ids being this index's (its first part's)."""
        check_new_ids(self.path, ids, lambda asked: (i for i in asked if i in self), replace)

    def add(self, batch: dict, replace: bool = False, superseded: Iterable[str] = ()) -> int:
        """:meth:`SegmentedIndex.add` for every part (``superseded`` deleted in each part's commit)."""
        if set(batch) != set(self.parts):
            raise SemiretError(f"a batch for {self.path} needs the parts {list(self.parts)}, got {sorted(batch)}")
        superseded = list(superseded)
        with self.writing():
            for name, part in self.parts.items():  # every part's checks run before any part writes
                part._check_batch(batch[name])
            self.check_new_ids(batch[next(iter(batch))].ids, replace)
            for name, part in self.parts.items():
                added = part.add(batch[name], replace=replace, superseded=superseded)
            return added

    def delete(self, doc_ids: Iterable[str], missing_ok: bool = False) -> int:
        doc_ids = list(doc_ids)
        with self.writing():
            deleted = self.first.delete(doc_ids, missing_ok=missing_ok)
            for part in list(self.parts.values())[1:]:
                part.delete(doc_ids, missing_ok=True)
            return deleted

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
            for part in self.parts.values():
                part.merge(tail, buffer_mb=0)
