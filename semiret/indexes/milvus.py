"""Milvus as the store of a retriever's documents, for serving beyond one machine (``--backend milvus:URI``).

A collection holds one retriever's document side: learned-sparse and bag-of-tokens documents (``impact``,
``binary``) as a ``SPARSE_FLOAT_VECTOR`` under a ``SPARSE_INVERTED_INDEX``, dense documents as a
``FLOAT_VECTOR``, both searched by inner product, so scores are those of semiret's own index. semiret keeps
what is its own: tokenizing and weighting queries, the query encoders, and checking every vector before it
leaves (Milvus takes negative weights, NaN and any term id): term ids outside the vocabulary, negative or
non-finite weights, vectors of the wrong dimension and repeated ids are refused with the collection unchanged.

- **Writes are upserts**, never inserts: a retried or repeated write cannot leave two rows with one id.
  ``add`` without ``replace`` still refuses ids the collection holds, as semiret's own index does.
- **Reads are Strong** by default (the backend's ``consistency``): a search sees every write acknowledged
  before it started.
- **The collection describes itself**: its description is a JSON record like an index's ``meta.json``
  (format, kind, retriever, analyzer, vocabulary size or dimension, whether texts are stored), so
  ``open_retriever(name, backend=...)`` re-opens it with the retriever and model that built it.
- A document's text, when stored, is a ``VARCHAR`` of its JSON record (at most 65,535 bytes), and its metadata a
  ``JSON`` field too, which filters are pushed down to: the part of a filter Milvus can test exactly enough
  (:func:`milvus_expression`) narrows its search and reads, and the whole filter is then applied to what comes
  back, so results are exact whatever Milvus cannot express (collections made before this field: read through).
  ``$id`` conditions are pushed down as the primary key's, in every collection, those without stored texts too,
  and tested by the hits' ids, with no document read.

``pymilvus`` is optional (``pip install semiret[milvus]``) and imported only when a collection is used; the URI
is a Milvus standalone or cluster address (``http://host:19530``, with a token) or a local ``.db`` file that
Milvus Lite serves.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import logging
import math
import os
import re
import socket
import threading
import time
import uuid
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from semiret.data.collection import Document
from semiret.errors import IndexFormatError, SemiretError
from semiret.indexes.dense import check_embeddings
from semiret.indexes.filters import ID, text_condition_fields
from semiret.indexes.inverted import check_postings, pack_queries
from semiret.indexes.segments import check_buffer, check_ids, check_new_ids
from semiret.types import Embeddings, Postings, SearchHits

SCHEME = "milvus:"
TOKEN_ENVIRONMENT = "MILVUS_TOKEN"
FORMAT = "semiret.milvus"
VERSION = 1
SPARSE_KINDS = ("impact", "binary")
DENSE_KIND = "dense"
CONSISTENCY_LEVELS = ("Strong", "Bounded", "Session", "Eventually")
ID_FIELD, VECTOR_FIELD, DOCUMENT_FIELD, METADATA_FIELD = "id", "vector", "document", "metadata"
MAX_ID_BYTES = 512
MAX_DOCUMENT_BYTES = 65_535
ROWS_PER_REQUEST = 1000
"""Rows per upsert, id lookup, read or delete request (well under Milvus's 64 MB message limit at 768 dimensions)."""
MAX_TOP_K = 16_384
"""The most hits Milvus returns for a query (its ``limit``)."""
COLLECTION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}")
UNQUOTED_ID_CHARACTERS = ("'", "\\")
"""Characters pymilvus cannot look an id up with (it writes ids into its lookups' expressions, single-quoted,
unescaped): no document of such an id can be read or deleted."""
UNWRITABLE_ID_CHARACTERS = (*UNQUOTED_ID_CHARACTERS, '"')
"""Characters a new document's id may not hold in Milvus: those, and ``"``, which breaks paging past it (its reads
of every document, exports, scrolls)."""


@dataclass(frozen=True)
class MilvusBackend:
    """Where collections live: a Milvus URI (server, or a local ``.db`` file for Milvus Lite), its token, and
    the consistency level of reads."""

    uri: str
    token: str = field(default="", repr=False)
    consistency: str = "Strong"

    def __post_init__(self):
        if self.consistency not in CONSISTENCY_LEVELS:
            raise SemiretError(f"unknown Milvus consistency level {self.consistency!r} "
                               f"(known: {', '.join(CONSISTENCY_LEVELS)})")

    @classmethod
    def parse(cls, spec: str, token: str | None = None) -> "MilvusBackend":
        """``milvus:URI`` -> a backend; the token defaults to ``$MILVUS_TOKEN``."""
        if not spec.startswith(SCHEME) or not spec[len(SCHEME):]:
            raise SemiretError(f"unknown backend {spec!r}: expected milvus:URI (a Milvus server such as "
                               "milvus:http://localhost:19530, or a local file such as milvus:./milvus.db)")
        return cls(spec[len(SCHEME):], token if token is not None else os.environ.get(TOKEN_ENVIRONMENT, ""))

    @property
    def client(self):
        return _client(self.uri, self.token)

    def exists(self, name: str) -> bool:
        with milvus_errors(f"looking up collection {name!r}"):
            return self.client.has_collection(_collection_name(name))

    def drop(self, name: str) -> None:
        name = _collection_name(name)
        with milvus_errors(f"dropping collection {name!r}"):
            self.client.drop_collection(name)
        _forget_schema(self.client, name)

    def open(self, name) -> "MilvusIndex":
        """The semiret collection ``name`` (its description says what it is)."""
        name = _collection_name(name)
        if is_lite_file(self.uri) and not Path(self.uri).is_file():  # (a client would make the file: a typo's)
            raise IndexFormatError(f"no collection {name!r}: there is no Milvus Lite file {self.uri}")
        if not self.exists(name):
            asides = self.asides(name)
            if asides:  # the latest of those whose builds stopped (a running one's is incomplete)
                aside = ([each for each, builder in asides if _stopped(builder)] or [asides[-1][0]])[-1]
                raise IndexFormatError(f"no collection {name!r} in Milvus at {self.uri}: an overwrite of it stopped "
                                       f"after dropping the old one; its new documents are in {aside!r} "
                                       f"(build {name!r} again, or open {aside!r})")
            raise IndexFormatError(f"no collection {name!r} in Milvus at {self.uri}")
        meta = self._description(name)
        if meta.get("format") != FORMAT:
            raise IndexFormatError(f"collection {name!r} at {self.uri} was not made by semiret")
        aside = meta.get("copied_from")
        if aside and self.exists(aside) and self._description(aside).get("building_for") == name:
            raise IndexFormatError(f"collection {name!r} at {self.uri} is incomplete: an overwrite of it stopped while "
                                   f"copying its new documents, which are whole in {aside!r} (build {name!r} again "
                                   f"with --overwrite, or open {aside!r})")
        if meta.get("version") != VERSION:
            raise IndexFormatError(f"collection {name!r}: semiret Milvus format version {meta.get('version')} "
                                   "is not supported")
        return MilvusIndex(self, name, meta)

    def _description(self, name: str) -> dict:
        """What a collection's description says of it (semiret writes its ``meta`` there; {} for another's)."""
        with milvus_errors(f"describing collection {name!r}"):
            description = self.client.describe_collection(name).get("description", "")
        try:
            meta = json.loads(description)
        except json.JSONDecodeError:
            return {}
        return meta if isinstance(meta, dict) else {}

    def build(self, name, kind: str, batches: Iterable[Postings | Embeddings], *, analyzer: dict | None = None,
              vocab_size: int | None = None, dim: int | None = None, store_texts: bool = True,
              overwrite: bool = False, extra_meta: dict | None = None, **structure) -> "MilvusIndex":
        """A new collection of ``batches`` (the ``build`` of semiret's index kinds, over Milvus): refused before
        anything is written if the kind or a search structure has no Milvus equivalent; dropped again if a
        batch is refused. ``overwrite`` replaces an existing collection of semiret's: the new one is built aside
        (:func:`aside_name`, a collection of this build's own) and takes the name only once complete, so a build
        that fails leaves the old one as it was (:meth:`_take_name`), and two overwrites of one name at once never
        write into one collection (the last to finish holds the name). What overwrites that stopped left aside is
        dropped first (:func:`_stopped`)."""
        name = _collection_name(name)
        if kind not in (*SPARSE_KINDS, DENSE_KIND):
            raise SemiretError(f"a {kind!r} index cannot live in Milvus (it holds learned-sparse, bag-of-tokens "
                               f"and dense documents: kinds {', '.join((*SPARSE_KINDS, DENSE_KIND))})")
        if structure.get("vocab") is not None:
            raise SemiretError("an index whose documents grow its vocabulary (sparse vectors brought with their own "
                               "terms) cannot live in Milvus, whose sparse vectors are over a fixed tokenizer's ids: "
                               "build it as semiret's own index")
        index_type, index_params = _index_structure(kind, structure)
        replacing = self.exists(name)
        if replacing:
            if not overwrite:
                raise IndexFormatError(f"collection {name!r} already exists in Milvus at {self.uri} "
                                       "(pass overwrite=True / --overwrite to replace it)")
            self._check_replaceable(name)
        build = uuid.uuid4().hex[:12]
        target = aside_name(name, build) if replacing else name
        meta = {"format": FORMAT, "version": VERSION, "kind": kind, "analyzer": analyzer, "metric": "ip",
                "store_texts": store_texts, "metadata_field": store_texts,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
                **({"dim": dim} if kind == DENSE_KIND else {"vocab_size": vocab_size}),
                "index_type": index_type, **(extra_meta or {})}
        builder = {"host": socket.gethostname(), "pid": os.getpid(), "build": build}
        index = MilvusIndex(self, target, {**meta, "building_for": name, "builder": builder} if replacing else meta)
        _BUILDS_RUNNING.add(build)
        try:
            self._create_collection(target, index.meta, index_type, index_params)  # (one Milvus refuses goes again)
            seen: set[str] = set()
            for batch in batches:
                check_ids(batch.ids)
                repeated = next((i for i in batch.ids if i in seen), None)
                if repeated is not None:
                    raise SemiretError(f"duplicate document id {repeated!r} in the documents to add")
                seen.update(batch.ids)
                index.upsert(batch)
        except BaseException:
            if self.exists(target):
                self.drop(target)
            _BUILDS_RUNNING.discard(build)
            raise
        try:  # running until its collection has the name (a Lite copy takes a while)
            built = self._take_name(index, name, meta, index_type, index_params) if replacing else index
        finally:
            _BUILDS_RUNNING.discard(build)
        for remains, builder in self.asides(name):  # (only now: a build that fails leaves them to open's message)
            if _stopped(builder):
                self.drop(remains)
        return built

    def asides(self, name: str) -> list[tuple[str, dict]]:
        """The collections overwrites of ``name`` built aside and left (running, or stopped before they took the
        name), each with what its description says of its builder ({} from a semiret before builders were
        recorded), the latest made last."""
        with milvus_errors("listing collections"):
            candidates = [each for each in self.client.list_collections() if each.startswith(BUILDING_PREFIX)]
        found = []
        for each in candidates:
            try:
                found.append((each, self._description(each)))
            except SemiretError:  # dropped since it was listed (a build that finished meanwhile)
                continue
        return [(each, meta.get("builder") or {}) for each, meta in sorted(found, key=lambda f: f[1].get("created", ""))
                if meta.get("building_for") == name]

    def _check_replaceable(self, name: str) -> None:
        if self._description(name).get("format") != FORMAT:  # another application's data: never replaced
            raise IndexFormatError(f"collection {name!r} at {self.uri} was not made by semiret: choose another "
                                   "name (an index never replaces other data)")

    def _take_name(self, built: "MilvusIndex", name: str, meta: dict, index_type: str, index_params: dict
                   ) -> "MilvusIndex":
        """The complete collection ``built`` aside, under ``name`` in place of the old one: renamed on a server;
        on Milvus Lite, which cannot rename, copied a page at a time (its rows were checked when written) into a
        collection marked as copied from it, which :meth:`open` refuses while the collection aside is there (a copy
        that stopped midway). Stopped between dropping the old one and renaming or copying, :meth:`open` names the
        collection aside."""
        if not is_lite_file(self.uri):
            self.drop(name)
            with milvus_errors(f"renaming collection {built.name!r} to {name!r} (the new documents are complete "
                               f"in {built.name!r})"):
                self.client.rename_collection(built.name, name)
            _forget_schema(self.client, built.name)
            return MilvusIndex(self, name, built.meta)  # (its description still names the build: it is that one)
        with _LITE_COPIES:  # two threads' copies into one name would mix their pages (a server renames at once)
            return self._copied_under(built, name, meta, index_type, index_params)

    def _copied_under(self, built: "MilvusIndex", name: str, meta: dict, index_type: str, index_params: dict
                      ) -> "MilvusIndex":
        """:meth:`_take_name` on Milvus Lite: ``built`` copied a page at a time into the collection ``name``."""
        self.drop(name)
        copied = MilvusIndex(self, name, {**meta, "copied_from": built.name})
        self._create_collection(name, copied.meta, index_type, index_params)
        fields = [ID_FIELD, VECTOR_FIELD, *([DOCUMENT_FIELD] if built.stores_texts else []),
                  *([METADATA_FIELD] if built.meta.get("metadata_field") else [])]
        for page in built._pages(fields):
            with milvus_errors(f"copying {built.name!r} into {name!r} (the new documents are complete in "
                               f"{built.name!r})"):
                self.client.upsert(name, page)
        if copied.n_docs != built.n_docs:
            raise SemiretError(f"copying {built.name!r} into {name!r} gave {copied.n_docs} documents of "
                               f"{built.n_docs} (the new documents are complete in {built.name!r})")
        self.drop(built.name)
        return copied

    def _create_collection(self, name: str, meta: dict, index_type: str, index_params: dict) -> None:
        from pymilvus import DataType

        client = self.client
        schema = client.create_schema(auto_id=False, enable_dynamic_field=False, description=json.dumps(meta))
        schema.add_field(ID_FIELD, DataType.VARCHAR, is_primary=True, max_length=MAX_ID_BYTES)
        if meta["kind"] == DENSE_KIND:
            schema.add_field(VECTOR_FIELD, DataType.FLOAT_VECTOR, dim=meta["dim"])
        else:
            schema.add_field(VECTOR_FIELD, DataType.SPARSE_FLOAT_VECTOR)
        if meta["store_texts"]:
            schema.add_field(DOCUMENT_FIELD, DataType.VARCHAR, max_length=MAX_DOCUMENT_BYTES)
        if meta.get("metadata_field"):
            schema.add_field(METADATA_FIELD, DataType.JSON)
        indexes = client.prepare_index_params()
        indexes.add_index(VECTOR_FIELD, index_type=index_type, metric_type="IP", params=index_params)
        with milvus_errors(f"creating collection {name!r}"):
            client.create_collection(name, schema=schema, index_params=indexes, consistency_level=self.consistency)


class MilvusIndex:
    """One semiret collection in Milvus, with the interface retrievers use of semiret's own indexes: ``meta``,
    ``kind``, ``search``, ``add``, ``delete``, ``writing``, document lookups and ``describe``."""

    def __init__(self, backend: MilvusBackend, name: str, meta: dict, where: str = ""):
        self.backend, self.name, self.meta = backend, name, meta
        self.where = where
        """A Milvus expression every search and read of this view is narrowed by (:meth:`narrowed`)."""
        self.path = f"{SCHEME}{backend.uri} collection {name}"
        """Where the collection is, for messages (semiret's own indexes name their directory)."""

    @property
    def kind(self) -> str:
        return self.meta["kind"]

    @property
    def _client(self):
        return self.backend.client

    # ------------------------------------------------------------------ documents
    def narrowed(self, wanted) -> "MilvusIndex":
        """This collection as searches and reads see it narrowed by the part of the filter ``wanted`` Milvus tests
        (:func:`milvus_expression`): every document passing ``wanted`` and maybe others, so a caller still applies
        ``wanted`` to what comes back. Itself where nothing can be pushed down (a collection without a metadata
        field, made before it had one or without stored texts, pushes only ``$id`` conditions: its primary key)."""
        where = milvus_expression(wanted.spec, bool(self.meta.get("metadata_field"))) if wanted is not None else ""
        return MilvusIndex(self.backend, self.name, self.meta, where) if where else self

    @property
    def n_docs(self) -> int:
        """The documents of the collection (of this view, when :meth:`narrowed`)."""
        with milvus_errors(f"counting {self.name!r}"):
            rows = self._client.query(self.name, filter=self.where, output_fields=["count(*)"],
                                      consistency_level=self.backend.consistency)
        return int(rows[0]["count(*)"])

    def present(self, doc_ids: Iterable[str]) -> set[str]:
        """Which of ``doc_ids`` the collection holds (none of an id it cannot hold)."""
        ids = [i for i in dict.fromkeys(doc_ids) if _lookup_safe(i)]
        found: set[str] = set()
        for start in range(0, len(ids), ROWS_PER_REQUEST):
            with milvus_errors(f"looking up ids in {self.name!r}"):
                rows = self._client.query(self.name, ids=ids[start: start + ROWS_PER_REQUEST],
                                          output_fields=[ID_FIELD], consistency_level=self.backend.consistency)
            found.update(row[ID_FIELD] for row in rows)
        return found

    def __contains__(self, doc_id: str) -> bool:
        return bool(self.present([doc_id]))

    @property
    def stores_texts(self) -> bool:
        return bool(self.meta["store_texts"])

    max_top_k = MAX_TOP_K

    def get_document(self, doc_id: str) -> Document | None:
        """The stored document, or None when it is unknown or its text was not stored."""
        return self.get_documents([doc_id]).get(doc_id)

    def get_documents(self, doc_ids: Iterable[str]) -> dict[str, Document]:
        """The stored documents of those ids the collection holds, in a request per :data:`ROWS_PER_REQUEST`."""
        if not self.meta["store_texts"]:
            return {}
        ids = [i for i in dict.fromkeys(doc_ids) if _lookup_safe(i)]
        found: dict[str, Document] = {}
        for start in range(0, len(ids), ROWS_PER_REQUEST):
            with milvus_errors(f"reading documents of {self.name!r}"):
                rows = self._client.query(self.name, ids=ids[start: start + ROWS_PER_REQUEST],
                                          output_fields=[ID_FIELD, DOCUMENT_FIELD],
                                          consistency_level=self.backend.consistency)
            found.update((row[ID_FIELD], Document.from_json(row[DOCUMENT_FIELD]))
                         for row in rows if row[DOCUMENT_FIELD])
        return found

    def get_vector(self, doc_id: str) -> np.ndarray | None:
        """A dense collection's vector of the document (float32), or None when it holds no such document."""
        return self.get_vectors([doc_id]).get(doc_id)

    def get_vectors(self, doc_ids: Iterable[str]) -> dict[str, np.ndarray]:
        """A dense collection's vectors (float32) of those ids it holds, in a request per :data:`ROWS_PER_REQUEST`."""
        if self.kind != DENSE_KIND:
            raise SemiretError(f"{self.name!r} is a {self.kind} collection: its documents have no dense vector")
        ids = [i for i in dict.fromkeys(doc_ids) if _lookup_safe(i)]
        found: dict[str, np.ndarray] = {}
        for start in range(0, len(ids), ROWS_PER_REQUEST):
            with milvus_errors(f"reading vectors of {self.name!r}"):
                rows = self._client.query(self.name, ids=ids[start: start + ROWS_PER_REQUEST],
                                          output_fields=[ID_FIELD, VECTOR_FIELD],
                                          consistency_level=self.backend.consistency)
            found.update((row[ID_FIELD], np.asarray(row[VECTOR_FIELD], dtype=np.float32)) for row in rows)
        return found

    def count(self, wanted=None) -> int:
        """Documents, or those whose stored metadata passes ``wanted`` (those Milvus narrows to, read through)."""
        return self.n_docs if wanted is None else sum(1 for _ in self._passing_ids(wanted))

    def _passing_ids(self, wanted) -> Iterator[str]:
        """Ids of the documents passing ``wanted``, in Milvus's order: a filter of ``$id`` conditions only tested on
        the ids of the rows Milvus narrows to (no stored document read, so also in a collection without them);
        any other, on the stored documents (:meth:`iter_documents`)."""
        if not wanted.reads_only_ids:
            yield from (document.id for document in self.iter_documents(wanted))
            return
        for row in self.narrowed(wanted)._rows([ID_FIELD]):
            if passes_by_id(wanted, row[ID_FIELD]):
                yield row[ID_FIELD]

    def iter_documents(self, wanted=None) -> Iterator[Document]:
        """The stored documents (those passing ``wanted``, a ``$text`` condition reading the fields the collection's
        analyzer records: :func:`~semiret.indexes.filters.text_condition_fields`), in Milvus's order, read a page at a
        time."""
        fields = text_condition_fields(self)
        for row in self.narrowed(wanted)._rows([ID_FIELD, DOCUMENT_FIELD]):
            if row[DOCUMENT_FIELD]:
                document = Document.from_json(row[DOCUMENT_FIELD])
                if wanted is None or wanted.matches(document.metadata, document, fields):
                    yield document

    def sorted_ids(self, wanted=None) -> list[str]:
        """Ids of the documents (those passing ``wanted``) in sorted order, what a scroll pages through."""
        if wanted is None:
            return sorted(row[ID_FIELD] for row in self._rows([ID_FIELD]))
        return sorted(self._passing_ids(wanted))

    def _rows(self, output_fields: list[str]) -> Iterator[dict]:
        """Every row's ``output_fields`` (:meth:`_pages`)."""
        for page in self._pages(output_fields):
            yield from page

    def _pages(self, output_fields: list[str]) -> Iterator[list[dict]]:
        """Every row's ``output_fields``, :data:`ROWS_PER_REQUEST` rows a request (Milvus's query iterator)."""
        with milvus_errors(f"reading {self.name!r}"):
            pages = self._client.query_iterator(self.name, batch_size=ROWS_PER_REQUEST, filter=self.where,
                                                output_fields=output_fields,
                                                consistency_level=self.backend.consistency)
        try:
            while True:
                with milvus_errors(f"reading {self.name!r}"):
                    page = pages.next()
                if not page:
                    return
                yield page
        finally:
            pages.close()

    def describe(self) -> dict:
        return {"kind": self.kind, "documents": self.n_docs, "backend": "milvus", "uri": self.backend.uri,
                "collection": self.name, "index_type": self.meta["index_type"],
                **({"dim": self.meta["dim"]} if self.kind == DENSE_KIND else {"terms": self.meta["vocab_size"]})}

    def size_on_disk(self) -> None:
        """Unknown: Milvus keeps the collection."""
        return None

    # ------------------------------------------------------------------ changes
    @contextmanager
    def writing(self) -> Iterator["MilvusIndex"]:
        """What :meth:`Retriever.add` holds around encoding: nothing to lock here, the vocabulary is fixed and
        Milvus orders the writes (the last upsert of an id wins)."""
        yield self

    def check_new_ids(self, ids: list[str], replace: bool = False) -> None:
        """Refuse ids of documents to add that repeat, are unusable or, without ``replace``, are in the
        collection already (one query for all of them); those Milvus cannot hold, :meth:`validate` refuses."""
        check_new_ids(self.path, ids, self.present, replace)

    def add(self, batch: Postings | Embeddings, replace: bool = False, superseded: Iterable[str] = ()) -> int:
        """Upsert documents; returns how many. Ids the collection holds are an error unless ``replace``. Every
        vector is checked before the first is sent (:meth:`upsert`): a refused batch leaves the collection
        unchanged. ``superseded``: ids deleted first (not in one step with the upsert: Milvus has no
        transactions), those the batch does not upsert again."""
        self.check_new_ids(batch.ids, replace)
        stale = sorted(set(superseded) - set(batch.ids))
        if stale:
            self.validate(batch)  # a refused batch deletes nothing either
            self.delete(stale, missing_ok=True)
        if len(batch) == 0:
            return 0
        self.upsert(batch)
        return len(batch)

    def delete(self, doc_ids: Iterable[str], missing_ok: bool = False) -> int:
        """Delete documents by id; returns how many there were. An unknown id is an error (nothing deleted)
        unless ``missing_ok``."""
        ids = list(dict.fromkeys(doc_ids))
        present = self.present(ids)
        missing = next((i for i in ids if i not in present), None)
        if missing is not None and not missing_ok:
            raise SemiretError(f"cannot delete {missing!r}: no such document in {self.path}")
        ids = [i for i in ids if i in present]
        for start in range(0, len(ids), ROWS_PER_REQUEST):
            with milvus_errors(f"deleting from {self.name!r}"):
                self._client.delete(self.name, ids=ids[start: start + ROWS_PER_REQUEST])
        return len(ids)

    def delete_where(self, wanted) -> int:
        """Delete the documents whose stored metadata passes ``wanted`` (those Milvus narrows to, read through)."""
        doomed = list(self._passing_ids(wanted))
        return self.delete(doomed, missing_ok=True) if doomed else 0

    def merge(self, tail: int | None = None, buffer_mb: float | None = None) -> None:
        """Nothing to do: Milvus merges its segments itself (compaction), and sizes them itself."""
        if check_buffer(buffer_mb):
            raise SemiretError(f"Milvus sizes the segments of {self.name!r} itself: a buffer (buffer_mb, --buffer-mb) "
                               "does not apply")

    def validate(self, batch: Postings | Embeddings) -> list[str] | None:
        """Refuse what Milvus would take but semiret's own index would not: vectors of the wrong dimension or
        not finite; term ids outside the vocabulary; negative or non-finite weights; ids or texts too long, ids
        it could not look up. Returns the documents' records (:meth:`_document_records`)."""
        if self.kind == DENSE_KIND:
            if not isinstance(batch, Embeddings):
                raise SemiretError(f"{self.path} holds dense vectors, not {type(batch).__name__}")
            check_embeddings(batch, self.meta["dim"])
        else:
            if not isinstance(batch, Postings):
                raise SemiretError(f"{self.path} holds sparse vectors, not {type(batch).__name__}")
            check_postings(batch, self.meta["vocab_size"], self.kind)
        long_id = next((i for i in batch.ids if len(i.encode("utf-8")) > MAX_ID_BYTES), None)
        if long_id is not None:
            raise SemiretError(f"document id {long_id[:40]!r}... is longer than Milvus's {MAX_ID_BYTES} bytes")
        _check_writable_ids(batch.ids, self.name)
        return self._document_records(batch)  # (a text too long is refused before a replace deletes anything)

    def upsert(self, batch: Postings | Embeddings) -> None:
        """Check a batch (:meth:`validate`), then write it in requests of ``ROWS_PER_REQUEST`` rows."""
        documents = self.validate(batch)
        for start in range(0, len(batch), ROWS_PER_REQUEST):
            stop = min(start + ROWS_PER_REQUEST, len(batch))
            rows = [{ID_FIELD: doc_id, VECTOR_FIELD: vector}
                    for doc_id, vector in zip(batch.ids[start:stop], self._vectors(batch, start, stop))]
            if documents is not None:
                for row, document in zip(rows, documents[start:stop]):
                    row[DOCUMENT_FIELD] = document
            if self.meta.get("metadata_field"):
                for row, document in zip(rows, (batch.documents or [None] * len(batch))[start:stop]):
                    row[METADATA_FIELD] = (document.metadata if document is not None else None) or {}
            with milvus_errors(f"upserting into {self.name!r}"):
                self._client.upsert(self.name, rows)

    def _vectors(self, batch: Postings | Embeddings, start: int, stop: int) -> list:
        """Vectors of rows ``start`` to ``stop`` as pymilvus takes them: float lists, or ``{term: weight}``
        without zero weights (every weight 1 in a bag-of-tokens collection)."""
        if self.kind == DENSE_KIND:
            return np.asarray(batch.vectors[start:stop], np.float32).tolist()
        offsets = batch.offsets[start: stop + 1]
        terms = np.asarray(batch.terms[offsets[0]: offsets[-1]], np.int64)
        if self.kind == "binary":
            values = np.ones(len(terms), np.float32)
        else:
            values = np.asarray(batch.values[offsets[0]: offsets[-1]], np.float32)
        kept = values != 0
        row_of_term = np.repeat(np.arange(stop - start), np.diff(offsets))
        bounds = np.concatenate([[0], np.cumsum(np.bincount(row_of_term[kept], minlength=stop - start))]).tolist()
        terms, values = terms[kept].tolist(), values[kept].tolist()
        return [dict(zip(terms[lo:hi], values[lo:hi])) for lo, hi in zip(bounds, bounds[1:])]

    def _document_records(self, batch: Postings | Embeddings) -> list[str] | None:
        """Each document's JSON record ("" for a batch without documents); None when texts are not stored."""
        if not self.meta["store_texts"]:
            return None
        if batch.documents is None:
            return [""] * len(batch)
        records = [d.to_json() for d in batch.documents]
        too_long = next((d.id for d, r in zip(batch.documents, records) if len(r.encode("utf-8")) > MAX_DOCUMENT_BYTES),
                        None)
        if too_long is not None:
            raise SemiretError(f"document {too_long!r} is longer than the {MAX_DOCUMENT_BYTES} bytes Milvus stores "
                               "as text (build without stored texts: store_texts=False / --no-store-texts)")
        return records

    # ------------------------------------------------------------------ search
    def search(self, queries, k: int = 10, n_threads: int = 1, two_phase=None, nprobe: int = 16,
               ef_search: int = 128, beam: int | None = None, rescore: int | None = None) -> SearchHits:
        """Top-k by inner product: sparse queries (:class:`~semiret.types.SparseQuery`, terms outside the
        vocabulary and zero weights dropped, negative weights an error) or a [n, dim] matrix. Empty queries find
        nothing. ``nprobe`` and ``ef_search`` reach IVF and HNSW collections; ``n_threads``, ``beam`` and
        ``rescore`` are semiret's own index's (Milvus searches on its side, its vectors whole)."""
        if k < 1:
            raise SemiretError("k must be at least 1")
        if k > MAX_TOP_K:
            raise SemiretError(f"a Milvus collection returns at most {MAX_TOP_K:,} hits a query, not k = {k:,}")
        if two_phase is not None:
            raise SemiretError("two-phase search is semiret's own index's; a Milvus collection is searched exactly")
        if self.kind == DENSE_KIND:
            vectors = np.ascontiguousarray(queries, np.float32)
            if vectors.ndim != 2 or vectors.shape[1] != self.meta["dim"]:
                raise SemiretError(f"queries must be a [n, {self.meta['dim']}] array, got shape {vectors.shape}")
            if not np.all(np.isfinite(vectors)):
                raise SemiretError("query vectors must be finite")
            searched = np.flatnonzero(np.any(vectors != 0, axis=1))
            data = vectors[searched].tolist()
            params = {"nprobe": nprobe, "ef": max(ef_search, k)}
        else:
            offsets, terms, weights = pack_queries(queries, self.meta["vocab_size"])
            bounds = offsets.tolist()
            searched = np.flatnonzero(np.diff(offsets) > 0)
            terms, weights = terms.tolist(), weights.tolist()
            data = [dict(zip(terms[bounds[q]: bounds[q + 1]], weights[bounds[q]: bounds[q + 1]]))
                    for q in searched.tolist()]
            params = {"drop_ratio_search": 0.0}
        n_queries = len(queries)
        ids: list[list[str]] = [[] for _ in range(n_queries)]
        scores: list[list[float]] = [[] for _ in range(n_queries)]
        pending, limit = list(zip(searched.tolist(), data)), min(k + 1, MAX_TOP_K)  # one more: a tie at the cut?
        while pending:
            with milvus_errors(f"searching {self.name!r}"):
                results = self._client.search(self.name, [query for _, query in pending], limit=limit,
                                              anns_field=VECTOR_FIELD, filter=self.where,
                                              search_params={"metric_type": "IP", "params": params},
                                              consistency_level=self.backend.consistency)
            tied = []
            for (query, data_row), hits in zip(pending, results):
                # Milvus orders equal scores, and chooses which of them make the cut, differently for each limit:
                # ranked here by (score, id), and searched deeper while the k-th score's ties may go on past it
                ranked = sorted(((float(hit["distance"]), hit["id"]) for hit in hits), key=lambda h: (-h[0], h[1]))
                if len(ranked) == limit > k and limit < MAX_TOP_K and ranked[-1][0] == ranked[k - 1][0]:
                    tied.append((query, data_row))
                ids[query] = [doc_id for _, doc_id in ranked[:k]]
                scores[query] = [score for score, _ in ranked[:k]]
            pending, limit = tied, min(limit * 2, MAX_TOP_K)
        return SearchHits(ids, scores)

    def idf(self):
        raise SemiretError(f"{self.path}: corpus IDF needs document frequencies, which a Milvus collection does not "
                           "give; weight queries by a table instead (idf='msmarco' / --idf msmarco, or a JSON file)")

    def pinned(self) -> "MilvusIndex":
        """Itself: Milvus decides what each read sees (the backend's consistency level)."""
        return self

    def refresh(self, wait: bool = False) -> bool:
        """Nothing to re-read: every search asks Milvus."""
        return False


SAFE_STRING = re.compile(r"[^\x00-\x1f\x7f\"\\]+")
"""Strings written into a Milvus expression as they are (quotes, backslashes and control characters would need
Milvus's escaping, whose rules it does not document: such conditions are not pushed down)."""
SAFE_FIELD = re.compile(r"[^\x00-\x1f\x7f\"\\/~]+")
"""Field names likewise, without ``/`` and ``~`` too: Milvus reads ``metadata["a/b"]`` as the path a -> b (a JSON
pointer), which would miss the documents whose top-level field is named ``a/b``."""
SAFE_ID = re.compile(r"[^\x00-\x1f\x7f'\\]+")
"""Ids written single-quoted into a Milvus expression as they are (``$id``'s: :func:`_id_expression`)."""
EXACT_INTEGERS = 2 ** 53
"""Integers beyond this are not pushed down (Milvus may compare them as doubles)."""
MAX_PUSHED_IDS = 65_536
"""The most ids an ``$id`` condition pushes down (a filter's most values a server takes; more: post-filtered)."""


def milvus_expression(spec: dict, metadata: bool = True) -> str:
    """A Milvus boolean expression over the metadata field and the primary key that every document passing the
    normalised filter ``spec`` passes (a superset: its caller applies the whole filter to what comes back), or ""
    when no part of it can be pushed down. Pushed: a top-level field's value or any of values (strings, numbers,
    booleans), matched as a scalar or inside a list (``metadata``: the collection has the metadata field), and
    ``$id``'s ids as the primary key's (:func:`_id_expression`), joined by ``and`` and by ``or`` (an ``$or`` only
    when all its filters are). Left to semiret (read as "true"): nested fields (a list of objects between the
    names), ranges (a list's elements, which semiret tests one by one), ``exists``, ``null``, ``$not`` and
    ``$text``; Milvus Lite has no ``not`` or ``exists`` and compares numbers inside lists by type, which the two
    forms written here cover."""
    parts = []
    for key, wanted in spec.items():
        if key == "$and":
            parts += [p for p in (milvus_expression(each, metadata) for each in wanted) if p]
        elif key == "$or":
            each = [milvus_expression(p, metadata) for p in wanted]
            if all(each):
                parts.append("(" + " or ".join(each) + ")")
        elif key == ID:
            parts += [p for p in [_id_expression(wanted)] if p]
        elif metadata and not key.startswith("$"):
            parts += [p for p in [_field_expression(key, wanted)] if p]
    return " and ".join(parts)


def _id_expression(ids: list[str]) -> str:
    """An ``$id`` condition's ids as a membership test of the primary key, or "" (:func:`milvus_expression`). Ids
    no collection holds (those pymilvus cannot look up, holding ``'`` or ``\\``; longer than :data:`MAX_ID_BYTES`;
    not UTF-8) are left out, as :meth:`MilvusIndex.present` leaves them; none left: a test no document passes (no id
    is blank). The others are single-quoted, as pymilvus's own lookups write them (so an id holding ``"``, which an
    earlier semiret wrote, is found). Not pushed: an id holding a control character (:data:`SAFE_ID`), or more than
    :data:`MAX_PUSHED_IDS` ids."""
    held = [doc_id for doc_id in ids if _could_hold(doc_id)]
    if len(held) > MAX_PUSHED_IDS or not all(SAFE_ID.fullmatch(doc_id) for doc_id in held):
        return ""
    listed = ", ".join(f"'{doc_id}'" for doc_id in held) or "''"
    return f"{ID_FIELD} in [{listed}]"


def passes_by_id(wanted, doc_id: str) -> bool:
    """Whether the document ``doc_id`` passes ``wanted``, a filter of ``$id`` conditions only
    (:attr:`~semiret.indexes.filters.MetadataFilter.reads_only_ids`), told by its id alone: no stored document
    read."""
    return wanted.matches(None, Document(doc_id, ""))


def _field_expression(field: str, wanted) -> str:
    """One top-level field's value (or any of values) as a Milvus expression, or "" (:func:`milvus_expression`)."""
    values = wanted if isinstance(wanted, list) else [wanted]
    if "." in field or not SAFE_FIELD.fullmatch(field) or isinstance(wanted, dict) or any(
            v is None or (isinstance(v, str) and not SAFE_STRING.fullmatch(v)) or
            (isinstance(v, int) and not isinstance(v, bool) and abs(v) > EXACT_INTEGERS) or
            (isinstance(v, float) and not math.isfinite(v)) for v in values):  # Milvus reads no Infinity, no NaN
        return ""
    target = f'{METADATA_FIELD}["{field}"]'
    strings = [json.dumps(v, ensure_ascii=False) for v in values if isinstance(v, str)]
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    tests = [f"{target} == {json.dumps(v)}" for v in values if isinstance(v, bool)]  # as a scalar
    tests += [f"json_contains({target}, {json.dumps(v)})" for v in values if isinstance(v, bool)]  # in a list
    for group in (strings, [json.dumps(int(v)) for v in numbers if float(v).is_integer() and abs(v) <= EXACT_INTEGERS],
                  [json.dumps(float(v)) for v in numbers]):  # 2020 and 2020.0: Milvus's lists tell them apart
        if group:
            tests += [f"{target} in [{', '.join(group)}]", f"json_contains_any({target}, [{', '.join(group)}])"]
    return "(" + " or ".join(tests) + ")"


def _index_structure(kind: str, structure: dict) -> tuple[str, dict]:
    """The Milvus index type and build parameters for a kind and the dense options semiret's own index takes
    (``ann``, ``nlist``, ``hnsw_m``); options without a Milvus equivalent are refused."""
    ann = structure.pop("ann", "exact")
    nlist, hnsw_m = structure.pop("nlist", None), structure.pop("hnsw_m", None)
    unsupported = sorted(name for name, value in structure.items() if value is not None)
    if unsupported:
        raise SemiretError(f"option(s) {', '.join(unsupported)} of semiret's own index have no Milvus equivalent")
    if kind in SPARSE_KINDS:
        return "SPARSE_INVERTED_INDEX", {"drop_ratio_build": 0.0}
    if ann in ("exact", "flat"):
        return "FLAT", {}
    if ann == "ivf":
        return "IVF_FLAT", {"nlist": nlist or 1024}
    if ann == "hnsw":
        return "HNSW", {"M": hnsw_m or 32, "efConstruction": 200}
    raise SemiretError(f"dense search structure {ann!r} has no Milvus equivalent (exact, flat, ivf or hnsw)")


BUILDING_PREFIX = "semiret_building_"
_BUILDS_RUNNING: set[str] = set()
"""The builds of this process still writing their collection aside."""
_LITE_COPIES = threading.Lock()
"""Held while a build's collection aside is copied under its name on Milvus Lite (one process holds a Lite file)."""


def aside_name(name: str, build: str) -> str:
    """Where ``build`` (a token of its own) builds a collection replacing ``name`` until it is complete (a digest
    of a name too long for Milvus with the prefix and token)."""
    aside = f"{BUILDING_PREFIX}{name}_{build}"
    if COLLECTION_NAME.fullmatch(aside):
        return aside
    return f"{BUILDING_PREFIX}{hashlib.sha1(name.encode()).hexdigest()}_{build}"


def _stopped(builder: dict) -> bool:
    """Whether the build described by ``builder`` (:meth:`MilvusBackend.asides`) has stopped, so that its collection
    aside is remains to drop: one of this machine whose process has ended, or of this process no longer running;
    one from before builders were recorded. Another machine's is left: whether it still runs cannot be told here."""
    if not builder:
        return True
    if builder.get("host") != socket.gethostname():
        return False
    if builder.get("pid") == os.getpid():
        return builder.get("build") not in _BUILDS_RUNNING
    try:
        os.kill(int(builder.get("pid")), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, TypeError, ValueError, OverflowError):
        return False
    return False


def _collection_name(name) -> str:
    name = str(name)
    if not COLLECTION_NAME.fullmatch(name):
        raise SemiretError(f"{name!r} is not a Milvus collection name (letters, digits and underscores, not "
                           "starting with a digit, at most 255)")
    return name


REMOTE_SCHEMES = ("http://", "https://", "tcp://", "grpc://", "unix:")


def is_lite_file(uri: str) -> bool:
    """Whether ``uri`` names a Milvus Lite file (a local database one process serves), not a server (its scheme
    read in any case, as pymilvus reads it)."""
    return not uri.lower().startswith(REMOTE_SCHEMES)


_LITE_LOCKS: dict[str, int] = {}
"""The Milvus Lite files this process holds, by path: the open lock files (kept until the process ends)."""


def _hold_lite_file(uri: str) -> None:
    """Take this process's lock on a Milvus Lite file, or refuse: milvus-lite's own lock is removed by a second
    process it refuses, after which a third opens the file beside the first and their writes split (each sees its
    own). semiret's lock (``<file>.semiret.lock``, never removed) is released by the kernel when its holder ends."""
    path = str(Path(uri).resolve())
    if path in _LITE_LOCKS:
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path + ".semiret.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        raise SemiretError(f"the Milvus Lite file {uri} is open in another process (a server?): a Lite file belongs "
                           "to one process; search and write through that one, or stop it first") from None
    _LITE_LOCKS[path] = descriptor


@functools.lru_cache(maxsize=None)
def _client(uri: str, token: str):
    """One client per URI and token (a Milvus Lite file is served by one process, started on first use)."""
    try:
        from pymilvus import MilvusClient
    except ImportError:
        raise SemiretError("the Milvus backend needs pymilvus: pip install 'semiret[milvus]'") from None
    if is_lite_file(uri):
        _hold_lite_file(uri)
    # a Milvus Lite server gives its query iterator no timestamp, and pymilvus says so at every read
    logging.getLogger("pymilvus.orm.iterator").addFilter(_not_a_timestamp_notice)
    for name in ("pymilvus", "pymilvus.milvus_client"):  # its error lines and traces: milvus_errors says it once
        logging.getLogger(name).setLevel(logging.CRITICAL)  # (the client's logger does not propagate to the first)
    with warnings.catch_warnings(), milvus_errors(f"connecting to {uri}"):
        warnings.filterwarnings("ignore", message="pkg_resources is deprecated", category=UserWarning)
        return MilvusClient(uri=uri, token=token)


def _lookup_safe(doc_id: str) -> bool:
    """Whether pymilvus can look ``doc_id`` up (one it cannot is in no collection: its write failed)."""
    return not any(character in doc_id for character in UNQUOTED_ID_CHARACTERS)


def _could_hold(doc_id: str) -> bool:
    """Whether a collection could hold a document of the id ``doc_id`` (:func:`_id_expression`)."""
    try:
        size = len(doc_id.encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate
        return False
    return _lookup_safe(doc_id) and size <= MAX_ID_BYTES


def _check_writable_ids(ids: Iterable[str], collection: str) -> None:
    unsafe = next((i for i in ids if any(character in i for character in UNWRITABLE_ID_CHARACTERS)), None)
    if unsafe is not None:
        raise SemiretError(f"document id {unsafe!r} cannot go into Milvus collection {collection!r}: Milvus looks "
                           "ids up in expressions that cannot hold ' \" or \\ (rename such ids; semiret's own index "
                           "takes them)")


def _forget_schema(client, name: str) -> None:
    """Drop pymilvus's cached schema of a dropped collection: a client keeps it by name, and a collection made again
    under that name with other fields was written with the old one ("Insert missed an field")."""
    cache = getattr(getattr(client, "_get_connection", lambda: None)(), "schema_cache", None)
    if isinstance(cache, dict):
        cache.pop(name, None)


def _not_a_timestamp_notice(record: logging.LogRecord) -> bool:
    return "mvccTs" not in record.getMessage()


@contextmanager
def milvus_errors(what: str) -> Iterator[None]:
    """Milvus's exceptions as one-line :class:`SemiretError`s saying what failed."""
    from pymilvus.exceptions import MilvusException

    try:
        yield
    except MilvusException as exc:
        raise SemiretError(f"Milvus: {what} failed: {exc.message}") from exc
