"""The dense index: segments of float32 vectors with ids, searched exactly (numpy) or with faiss.

Same directory convention as the inverted index: ``meta.json`` says what it is and commits every
change in one rename; each ``seg-NNNNNN/`` folder holds::

    vectors.npy      float32 [n_docs, dim], memory-mapped
    docids.*.npy     document ids, with a hash table for lookups
    texts.*.npy      stored document JSON (optional)
    ann.faiss        the segment's faiss index (``ivf`` and ``hnsw``; ``flat`` builds it on open)
    deleted.bin      append-only local numbers of deleted documents

Search structures (``ann``): ``exact`` (numpy matmul over the memory-mapped vectors, nothing in RAM
up front), ``flat`` (faiss exhaustive inner product), ``ivf`` (faiss IVF-Flat, ``nprobe`` lists
searched), ``hnsw`` (faiss HNSW graph, ``ef_search``). Scores are inner products: with normalised
embeddings, cosine similarity. Adding writes a new segment; deleting appends marks (faiss searches
skip them with an id selector); :meth:`DenseIndex.merge` folds segments into one.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np

from semiret.data.collection import Document
from semiret.errors import IndexFormatError, SemiretError
from semiret.files import atomic_write_json, directory_size, replace_directory, staging_directory
from semiret.indexes.inverted import _check_build_target, _record_fields
from semiret.indexes.storage import (
    META_FILE, StringTable, append_deletions, load_array, read_deletions, read_meta,
)
from semiret.types import Embeddings, SearchHits

FORMAT = "semiret.dense"
VERSION = 1
ANN_TYPES = ("exact", "flat", "ivf", "hnsw")
ANN_FILE = "ann.faiss"
EXACT_CHUNK = 65536
"""Documents scored per matmul in exact search (bounds the [queries, chunk] score block)."""




@dataclass
class DenseSegment:
    name: str
    path: Path
    n_docs: int
    vectors: np.ndarray
    docids: StringTable
    texts: StringTable | None
    deleted: np.ndarray  # bool [n_docs]
    ann: object | None  # a faiss index, or None for exact search

    @classmethod
    def open(cls, path: Path, info: dict, ann_type: str) -> "DenseSegment":
        vectors = load_array(path / "vectors.npy")
        return cls(info["name"], path, info["n_docs"], vectors, StringTable(path, "docids", with_lookup=True),
                   StringTable(path, "texts") if (path / "texts.offsets.npy").is_file() else None,
                   read_deletions(path, info["n_docs"], info.get("n_deleted", 0)), _open_ann(path, vectors, ann_type))

    def search(self, queries: np.ndarray, k: int, nprobe: int, ef_search: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` (scores, local numbers; -1 where fewer) of each query among live documents."""
        if self.ann is None:
            return self._exact(queries, k)
        import faiss

        deleted = np.flatnonzero(self.deleted).astype(np.int64)
        selector = faiss.IDSelectorNot(faiss.IDSelectorBatch(deleted)) if len(deleted) else None
        if isinstance(self.ann, faiss.IndexHNSW):
            params = faiss.SearchParametersHNSW(sel=selector, efSearch=max(ef_search, k))
        elif isinstance(self.ann, faiss.IndexIVF):
            params = faiss.SearchParametersIVF(sel=selector, nprobe=nprobe)
        else:
            params = faiss.SearchParameters(sel=selector)
        scores, local = self.ann.search(queries, k, params=params)
        return scores, local

    def _exact(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        best_scores = np.full((len(queries), 0), -np.inf, np.float32)
        best_local = np.full((len(queries), 0), -1, np.int64)
        for start in range(0, self.n_docs, EXACT_CHUNK):
            scores = queries @ np.asarray(self.vectors[start: start + EXACT_CHUNK]).T
            scores[:, self.deleted[start: start + EXACT_CHUNK]] = -np.inf
            kk = min(k, scores.shape[1])
            top = np.argpartition(-scores, kk - 1, axis=1)[:, :kk]
            best_scores = np.concatenate([best_scores, np.take_along_axis(scores, top, 1)], axis=1)
            best_local = np.concatenate([best_local, top + start], axis=1)
        order = np.argsort(-best_scores, axis=1, kind="stable")[:, :k]
        scores, local = np.take_along_axis(best_scores, order, 1), np.take_along_axis(best_local, order, 1)
        local[~np.isfinite(scores)] = -1
        return scores, local

    def memory_bytes(self) -> int:
        """Bytes a search keeps resident: the faiss structure, or the memory-mapped vectors."""
        if self.ann is None:
            return self.vectors.nbytes
        import faiss

        return int(faiss.serialize_index(self.ann).nbytes)


class DenseIndex:
    """An open dense index directory."""

    def __init__(self, path: Path, meta: dict, segments: list[DenseSegment]):
        self.path = path
        self.meta = meta
        self.segments = segments

    # ------------------------------------------------------------------ creation and opening
    @classmethod
    def build(cls, path: str | Path, kind: str, batches: Iterable[Embeddings], dim: int, analyzer: dict,
              ann: str = "exact", nlist: int | None = None, hnsw_m: int = 32, ef_construction: int = 200,
              store_texts: bool = True, overwrite: bool = False, extra_meta: dict | None = None) -> "DenseIndex":
        """Write a new index from batches of embeddings (staged in a temporary directory, then renamed)."""
        if kind != "dense":
            raise SemiretError(f"a dense index has kind 'dense', not {kind!r}")
        if ann not in ANN_TYPES:
            raise SemiretError(f"unknown dense search structure {ann!r} (known: {', '.join(ANN_TYPES)})")
        if ann != "exact":
            import faiss  # noqa: F401  (fail before any document is encoded)
        target = Path(path)
        _check_build_target(target, overwrite)
        staged = staging_directory(target)
        try:
            meta = {
                "format": FORMAT, "version": VERSION, "kind": "dense", "ann": ann, "dim": dim, "metric": "ip",
                "parameters": {"nlist": nlist, "hnsw_m": hnsw_m, "ef_construction": ef_construction},
                "analyzer": analyzer, "store_texts": store_texts, "segments": [], "next_segment": 0,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S"), **(extra_meta or {}),
            }
            index = cls(staged, meta, [])
            batch_list = list(batches)
            if batch_list:
                index._write_segment(Embeddings.concatenate(batch_list), check_duplicates=False)
            else:
                index._commit()
        except BaseException:
            shutil.rmtree(staged, ignore_errors=True)
            raise
        replace_directory(staged, target, overwrite)
        return cls.open(target)

    @classmethod
    def open(cls, path: str | Path) -> "DenseIndex":
        path = Path(path)
        meta = read_meta(path, FORMAT)
        if meta.get("version") != VERSION:
            raise IndexFormatError(f"{path}: dense index format version {meta.get('version')} is not supported")
        return cls(path, meta, [DenseSegment.open(path / s["name"], s, meta["ann"]) for s in meta["segments"]])

    # ------------------------------------------------------------------ properties
    @property
    def kind(self) -> str:
        return self.meta["kind"]

    @property
    def dim(self) -> int:
        return self.meta["dim"]

    @property
    def n_docs(self) -> int:
        return sum(s.n_docs - int(s.deleted.sum()) for s in self.segments)

    @property
    def n_stored(self) -> int:
        return sum(s.n_docs for s in self.segments)

    def size_on_disk(self) -> int:
        return directory_size(self.path)

    def memory_bytes(self) -> int:
        return sum(s.memory_bytes() for s in self.segments)

    def describe(self) -> dict:
        return {
            "kind": self.kind, "ann": self.meta["ann"], "documents": self.n_docs,
            "deleted": self.n_stored - self.n_docs, "segments": len(self.segments), "dim": self.dim,
            "size_bytes": self.size_on_disk(), "memory_bytes": self.memory_bytes(),
        }

    # ------------------------------------------------------------------ search
    def search(self, queries: np.ndarray, k: int = 10, n_threads: int = 1, nprobe: int = 16,
               ef_search: int = 128) -> SearchHits:
        """Top-k by inner product over live documents; all-zero queries (empty texts) find nothing.

        ``n_threads`` is accepted for the retriever interface: numpy and faiss use their own thread pools.
        """
        if k < 1:
            raise SemiretError("k must be at least 1")
        queries = np.ascontiguousarray(queries, np.float32)
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise SemiretError(f"queries must be a [n, {self.dim}] array, got shape {queries.shape}")
        parts_scores, parts_refs = [], []
        for seg_no, segment in enumerate(self.segments):
            scores, local = segment.search(queries, min(k, segment.n_docs) or 1, nprobe, ef_search)
            parts_scores.append(scores)
            parts_refs.append(np.where(local >= 0, local + (seg_no << 32), -1))
        if not parts_scores:
            return SearchHits([[] for _ in queries], [[] for _ in queries])
        scores, refs = np.concatenate(parts_scores, axis=1), np.concatenate(parts_refs, axis=1)
        order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        scores, refs = np.take_along_axis(scores, order, 1), np.take_along_axis(refs, order, 1)
        refs[~np.any(queries != 0, axis=1)] = -1
        ids, out_scores = [], []
        for row_scores, row_refs in zip(scores, refs):
            valid = row_refs >= 0
            ids.append([self.segments[r >> 32].docids[r & 0xFFFFFFFF] for r in row_refs[valid].tolist()])
            out_scores.append(row_scores[valid].tolist())
        return SearchHits(ids, out_scores)

    # ------------------------------------------------------------------ documents
    def locate(self, doc_id: str) -> tuple[DenseSegment, int] | None:
        for segment in reversed(self.segments):
            local = segment.docids.find(doc_id)
            if local >= 0 and not segment.deleted[local]:
                return segment, local
        return None

    def __contains__(self, doc_id: str) -> bool:
        return self.locate(doc_id) is not None

    def get_document(self, doc_id: str) -> Document | None:
        found = self.locate(doc_id)
        if found is None or found[0].texts is None:
            return None
        return Document(**_record_fields(found[0].texts[found[1]]))

    def get_vector(self, doc_id: str) -> np.ndarray | None:
        found = self.locate(doc_id)
        return None if found is None else np.array(found[0].vectors[found[1]])

    # ------------------------------------------------------------------ changes
    def add(self, embeddings: Embeddings, replace: bool = False) -> int:
        """Add documents as a new segment; existing ids are an error unless ``replace``."""
        if len(embeddings) == 0:
            return 0
        self._validate(embeddings)
        if replace:
            self.delete([i for i in embeddings.ids if i in self], missing_ok=True)
        self._write_segment(embeddings, check_duplicates=True)
        return len(embeddings)

    def delete(self, doc_ids: Iterable[str], missing_ok: bool = False) -> int:
        """Mark documents deleted; they vanish from searches at once. Returns how many were deleted."""
        marks: dict[str, list[int]] = {}
        for doc_id in dict.fromkeys(doc_ids):
            hit = self.locate(doc_id)
            if hit is None:
                if missing_ok:
                    continue
                raise SemiretError(f"cannot delete {doc_id!r}: no such document in {self.path}")
            marks.setdefault(hit[0].name, []).append(hit[1])
        for info, segment in zip(self.meta["segments"], self.segments):
            if segment.name in marks:
                append_deletions(segment.path, info.get("n_deleted", 0), marks[segment.name])
                segment.deleted[marks[segment.name]] = True
        self._commit()
        return sum(map(len, marks.values()))

    def merge(self) -> None:
        """Fold all segments into one, dropping deleted documents (and rebuilding the faiss structure)."""
        if len(self.segments) <= 1 and not any(s.deleted.any() for s in self.segments):
            return
        parts = []
        for segment in self.segments:
            live = np.flatnonzero(~segment.deleted)
            documents = None
            if segment.texts is not None:
                documents = [Document(**_record_fields(segment.texts[i])) for i in live]
            parts.append(Embeddings([segment.docids[i] for i in live], np.asarray(segment.vectors)[live], documents))
        old = list(self.segments)
        self.segments, self.meta["segments"] = [], []
        self._write_segment(Embeddings.concatenate(parts), check_duplicates=False)
        for segment in old:
            shutil.rmtree(segment.path, ignore_errors=True)

    # ------------------------------------------------------------------ writing
    def _validate(self, embeddings: Embeddings) -> None:
        if len(set(embeddings.ids)) != len(embeddings.ids):
            seen: set[str] = set()
            dup = next(i for i in embeddings.ids if i in seen or seen.add(i))
            raise SemiretError(f"duplicate document id {dup!r} in the documents to add")
        vectors = np.asarray(embeddings.vectors)
        if vectors.shape != (len(embeddings), self.dim):
            raise SemiretError(f"expected {len(embeddings)} vectors of dimension {self.dim}, got shape {vectors.shape}")
        if not np.all(np.isfinite(vectors)):
            raise SemiretError("vectors must be finite")

    def _write_segment(self, embeddings: Embeddings, check_duplicates: bool) -> None:
        self._validate(embeddings)
        if check_duplicates:
            clash = next((i for i in embeddings.ids if i in self), None)
            if clash is not None:
                raise SemiretError(f"document {clash!r} is already in {self.path} (use replace / --replace)")
        info = {"name": f"seg-{self.meta['next_segment']:06d}", "n_docs": len(embeddings), "n_deleted": 0}
        vectors = np.ascontiguousarray(embeddings.vectors, np.float32)
        staged = staging_directory(self.path / info["name"])
        try:
            np.save(staged / "vectors.npy", vectors)
            StringTable.write(staged, "docids", embeddings.ids, with_lookup=True)
            if self.meta["store_texts"] and embeddings.documents is not None:
                StringTable.write(staged, "texts", [json.dumps(d.to_record(), ensure_ascii=False)
                                                    for d in embeddings.documents])
            if self.meta["ann"] in ("ivf", "hnsw"):
                import faiss

                faiss.write_index(self._build_ann(vectors), str(staged / ANN_FILE))
            final = self.path / info["name"]
            if final.exists():  # left by an add that crashed before its commit
                shutil.rmtree(final)
            os.replace(staged, final)
        except BaseException:
            shutil.rmtree(staged, ignore_errors=True)
            raise
        self.meta["segments"].append(info)
        self.meta["next_segment"] += 1
        self.segments.append(DenseSegment.open(self.path / info["name"], info, self.meta["ann"]))
        self._commit()

    def _build_ann(self, vectors: np.ndarray):
        import faiss

        params = self.meta["parameters"]
        if self.meta["ann"] == "hnsw":
            index = faiss.index_factory(self.dim, f"HNSW{params['hnsw_m']},Flat", faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = params["ef_construction"]
        else:
            nlist = params["nlist"] or round(4 * math.sqrt(len(vectors)))
            nlist = max(1, min(nlist, len(vectors) // 39 or 1))  # faiss wants >= 39 training points per list
            index = faiss.index_factory(self.dim, f"IVF{nlist},Flat", faiss.METRIC_INNER_PRODUCT)
            index.cp.min_points_per_centroid = 1  # tiny segments get one list; no warning about it
            index.train(vectors)
        index.add(vectors)
        return index

    def _commit(self) -> None:
        for info, segment in zip(self.meta["segments"], self.segments):
            info["n_deleted"] = int(segment.deleted.sum())
        atomic_write_json(self.path / META_FILE, self.meta)


def _open_ann(path: Path, vectors: np.ndarray, ann_type: str):
    if ann_type == "exact":
        return None
    import faiss

    if ann_type == "flat":
        index = faiss.IndexFlatIP(vectors.shape[1])
        index.add(np.ascontiguousarray(vectors, np.float32))
        return index
    ann_file = path / ANN_FILE
    if not ann_file.is_file():
        raise IndexFormatError(f"missing index file {ann_file}")
    return faiss.read_index(str(ann_file))
