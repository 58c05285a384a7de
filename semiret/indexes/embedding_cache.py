"""A persistent cache of document embeddings that several runs share: SiDR's late-parametric re-ranking (computed on
the query path), GDR's ``--embedding-cache`` (its builds and training) and late interaction's token vectors
(``--colbert-cache``).

Re-ranking embeds only the top-m documents of each query; the cache keeps every embedding so a
document is never embedded twice, across queries and across runs. Over time the cache covers the
corpus and can be turned into the full parametric index (SiDR Appendix E): :meth:`to_postings`
feeds an ``impact`` inverted index for sparse vectors (``cache-to-full``); dense vectors are read back by
:meth:`dense_vectors`.

Embeddings are kept under a key: :func:`content_key` (a document's id and a digest of its text) wherever documents
are embedded, so a document replaced under its id, or another corpus's document of the same id, is embedded anew
rather than handed the vector of the text it had.

On disk: ``meta.json`` (kind, the encoder's fingerprint, chunks) and append-only ``chunk-NNNNNN/``
folders, each staged under a temporary name and renamed before ``meta.json`` lists it, so the cache is never
half-written. Threads may share a cache (a server's concurrent searches): adding and flushing take a lock.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from semiret.data.collection import Document
from semiret.errors import IndexFormatError, SemiretError
from semiret.files import atomic_write_json, staged_directory
from semiret.indexes.storage import META_FILE, StringTable, load_array, read_meta
from semiret.types import Postings

FORMAT = "semiret.embedding-cache"
CACHE_FOLDER = "embedding-cache"
"""The folder inside an index where a re-ranking retriever keeps its caches (one per model, by default)."""
SparseVector = tuple[np.ndarray, np.ndarray]
"""Token ids (int32) and their weights (float32)."""


def content_key(document: Document) -> str:
    """A document's key in a cache: its id and a digest of the text its embedding is computed from (ids hold no
    control characters, so the separator cannot make two documents' keys equal)."""
    digest = hashlib.blake2b(document.full_text.encode("utf-8"), digest_size=8).hexdigest()
    return f"{document.id}\x1f{digest}"


KINDS = ("sparse", "dense", "tokens")
"""What a cache holds per document: a sparse token vector, a dense vector, or a matrix of token vectors (late
interaction's, float16, read memory-mapped)."""


class EmbeddingCache:
    """Key (:func:`content_key`) -> embedding (sparse token vector, dense array or token vectors), persisted in
    chunks."""

    def __init__(self, path: str | Path, kind: str, encoder: str, dim: int | None = None):
        if kind not in KINDS:
            raise SemiretError(f"embedding cache kind must be one of {', '.join(KINDS)}, not {kind!r}")
        self.path = Path(path)
        self.kind = kind
        self.encoder = encoder
        self._vectors: dict[str, SparseVector | np.ndarray] = {}
        self._pending: list[str] = []
        self._lock = threading.Lock()  # put and flush: a chunk's ids and vectors must come from one moment
        if (self.path / META_FILE).is_file():
            self.meta = read_meta(self.path, FORMAT)
            if self.meta["kind"] != kind or self.meta["encoder"] != encoder:
                raise SemiretError(
                    f"{self.path} caches {self.meta['kind']} embeddings of {self.meta['encoder']!r}, "
                    f"not {kind} embeddings of {encoder!r}: use another cache directory")
            for chunk in self.meta["chunks"]:
                self._load_chunk(self.path / chunk)
        else:
            self.path.mkdir(parents=True, exist_ok=True)
            self.meta = {"format": FORMAT, "version": 1, "kind": kind, "encoder": encoder, "dim": dim, "chunks": []}
            atomic_write_json(self.path / META_FILE, self.meta)

    def __len__(self) -> int:
        return len(self._vectors)

    def __contains__(self, doc_id: str) -> bool:
        return doc_id in self._vectors

    def get(self, doc_id: str):
        return self._vectors.get(doc_id)

    def missing(self, doc_ids: Sequence[str]) -> list[str]:
        """The ids (in order, without repeats) that have no cached embedding yet."""
        seen, out = set(), []
        for doc_id in doc_ids:
            if doc_id not in self._vectors and doc_id not in seen:
                seen.add(doc_id)
                out.append(doc_id)
        return out

    def put(self, doc_ids: Sequence[str], vectors: Sequence) -> None:
        with self._lock:
            for doc_id, vector in zip(doc_ids, vectors, strict=True):
                if doc_id not in self._vectors:
                    self._vectors[doc_id] = vector
                    self._pending.append(doc_id)

    def dense_vectors(self, doc_ids: Sequence[str], embed: Callable[[list[int]], np.ndarray]) -> np.ndarray:
        """The dense vectors of ``doc_ids`` in order (a matrix): cached ones read, the others computed by
        ``embed`` (given their positions in ``doc_ids``), cached and flushed."""
        if self.kind != "dense":
            raise SemiretError("this embedding cache holds sparse vectors")
        absent = [position for position, doc_id in enumerate(doc_ids) if doc_id not in self._vectors]
        if absent:
            self.put([doc_ids[p] for p in absent], embed(absent))
            self.flush()
        return np.stack([self._vectors[doc_id] for doc_id in doc_ids]).astype(np.float32, copy=False)

    def flush(self) -> None:
        """Write embeddings added since the last flush as one new chunk."""
        with self._lock:
            if not self._pending:
                return
            name = f"chunk-{len(self.meta['chunks']):06d}"
            # a folder of this name was left by a flush that crashed before its commit: the staged one replaces it
            with staged_directory(self.path / name) as staged:
                StringTable.write(staged, "ids", self._pending)
                vectors = [self._vectors[i] for i in self._pending]
                if self.kind == "dense":
                    np.save(staged / "vectors.npy", np.stack(vectors).astype(np.float32))
                elif self.kind == "tokens":
                    offsets = np.zeros(len(vectors) + 1, np.int64)
                    np.cumsum([len(v) for v in vectors], out=offsets[1:])
                    np.save(staged / "offsets.npy", offsets)
                    np.save(staged / "vectors.npy", np.concatenate(vectors).astype(np.float16))
                else:
                    offsets = np.zeros(len(vectors) + 1, np.int64)
                    np.cumsum([len(t) for t, _ in vectors], out=offsets[1:])
                    np.save(staged / "offsets.npy", offsets)
                    np.save(staged / "terms.npy", np.concatenate([t for t, _ in vectors]).astype(np.int32))
                    np.save(staged / "weights.npy", np.concatenate([w for _, w in vectors]).astype(np.float32))
            self.meta["chunks"].append(name)
            atomic_write_json(self.path / META_FILE, self.meta)
            self._pending = []

    def _load_chunk(self, chunk: Path) -> None:
        ids = StringTable(chunk, "ids")
        if self.kind == "dense":
            matrix = np.asarray(load_array(chunk / "vectors.npy", mmap=False))
            if len(matrix) != len(ids):
                raise IndexFormatError(f"{chunk}: {len(matrix)} vectors for {len(ids)} ids (a damaged cache chunk): "
                                       f"remove {chunk.parent}, which is embedded again as searches need it")
            for i in range(len(ids)):
                self._vectors[ids[i]] = matrix[i]
            return
        if self.kind == "tokens":  # (memory-mapped: a corpus's token vectors are read as searches need them)
            offsets, vectors = load_array(chunk / "offsets.npy", mmap=False), load_array(chunk / "vectors.npy")
            if len(offsets) != len(ids) + 1 or offsets[-1] != len(vectors):
                raise IndexFormatError(f"{chunk}: its offsets and token vectors disagree (a damaged cache chunk): "
                                       f"remove {chunk.parent}, which is encoded again as searches need it")
            for i in range(len(ids)):
                self._vectors[ids[i]] = vectors[offsets[i]:offsets[i + 1]]
            return
        offsets = load_array(chunk / "offsets.npy", mmap=False)
        terms = np.asarray(load_array(chunk / "terms.npy", mmap=False))
        weights = np.asarray(load_array(chunk / "weights.npy", mmap=False))
        if len(offsets) != len(ids) + 1 or offsets[-1] != len(terms) or len(terms) != len(weights):
            raise IndexFormatError(f"{chunk}: its offsets, terms and weights disagree (a damaged cache chunk): remove "
                                   f"{chunk.parent}, which is embedded again as searches need it")
        for i in range(len(ids)):
            lo, hi = offsets[i], offsets[i + 1]
            self._vectors[ids[i]] = (terms[lo:hi], weights[lo:hi])

    # ------------------------------------------------------------------ towards the parametric index
    def to_postings(self, keys: Sequence[str] | None = None, documents=None,
                    ids: Sequence[str] | None = None) -> Postings:
        """Cached sparse vectors as postings for an ``impact`` index (all of them, or those of ``keys``), the
        documents named ``ids`` (default: the keys)."""
        if self.kind != "sparse":
            raise SemiretError("only a sparse embedding cache becomes an inverted index")
        keys = list(keys) if keys is not None else list(self._vectors)
        absent = [i for i in keys if i not in self._vectors]
        if absent:
            raise SemiretError(f"{len(absent)} documents are not embedded yet (e.g. {absent[0]!r})")
        vectors = [self._vectors[i] for i in keys]
        ids = list(ids) if ids is not None else keys
        offsets = np.zeros(len(ids) + 1, np.int64)
        np.cumsum([len(t) for t, _ in vectors], out=offsets[1:])
        return Postings(ids=ids, offsets=offsets,
                        terms=np.concatenate([t for t, _ in vectors]).astype(np.int32) if ids else np.empty(0, np.int32),
                        values=np.concatenate([w for _, w in vectors]).astype(np.float32) if ids else np.empty(0, np.float32),
                        lengths=np.diff(offsets).astype(np.int32), documents=documents)
