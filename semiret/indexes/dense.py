"""The dense index: segments of float32 vectors with ids, searched exactly (numpy) or with faiss.

A segmented store (:mod:`semiret.indexes.segments`) like the inverted index: ``meta.json`` says what it
is and commits every change in one rename; each ``seg-NNNNNN/`` folder holds::

    vectors.npy      float32 [n_docs, dim], memory-mapped
    docids.*.npy     document ids, with a hash table for lookups
    texts.*.npy      stored document JSON (optional)
    ann.faiss        the segment's faiss index (``ivf``, ``hnsw``, ``faiss:FACTORY``; ``flat`` builds it on open)
    tree.npz         the segment's corpus tree (``tree``: :mod:`semiret.indexes.tree_ann`)
    deleted.bin      append-only local numbers of deleted documents

Search structures (``ann``): ``exact`` (numpy matmul over the memory-mapped vectors, nothing in RAM
up front), ``flat`` (faiss exhaustive inner product), ``ivf`` (faiss IVF-Flat, ``nprobe`` lists
searched), ``hnsw`` (faiss HNSW graph, ``ef_search``), ``tree`` (beam descent over an equal-depth k-means
tree of the corpus, ``beam`` clusters kept per level; added documents join their nearest cluster), ``faiss:FACTORY``
(a FAISS ``index_factory`` string whose search skips documents by id and scores by inner product: IVF over Flat, PQ
or SQ codes, HNSW over Flat or SQ codes, SQ alone, after a transform such as OPQ or PCA, before a refinement such as
RFlat; e.g. ``faiss:IVF256,PQ16``, ``faiss:HNSW32,SQ8``: compressed codes in memory, the float vectors read only to
re-score candidates), ``binary`` (each vector's signs, one bit a dimension, compared by Hamming distance in a faiss
``IndexBinaryFlat``: 32 times less memory than the float vectors, which stay on disk and re-score ``rescore`` times the
hits asked for, as Qdrant's binary quantization and sentence-transformers' ``ubinary`` embeddings with rescoring do).
Scores are inner products: with normalised embeddings, cosine similarity. Adding writes a new
segment; deleting appends marks (faiss searches skip them with an id selector); :meth:`DenseIndex.merge` folds
segments into one.

A factory structure is trained on each segment's own vectors, as ``ivf``'s lists are. A segment whose vectors
faiss cannot train it on (fewer than one of its quantizers has centroids: an IVF's lists, the 2^bits codewords of
each PQ sub-quantizer, 256 at 8 bits; or than a PCA's output dimensions) gets no ``ann.faiss``: it is searched
exactly, flagged ``"ann": false`` in its segment record, with a warning; a merge into a segment large enough trains
it. Lossy codes (PQ, SQ, a transform) give approximate scores: a search fetches ``rescore`` times the hits it needs
(default :data:`RESCORE`; 1 where the codes are the vectors themselves) and scores them again exactly with the
segment's float vectors, as FAISS's IndexRefine and Qdrant's rescoring do.
"""

from __future__ import annotations

import logging
import math
import re
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from semiret.data.collection import Document
from semiret.errors import IndexFormatError, SemiretError
from semiret.indexes.segments import Segment, SegmentedIndex, check_buffer, register_index_format, whole_buffer
from semiret.indexes.storage import load_array
from semiret.indexes.tree_ann import BEAM, TreeSearch, makes_a_tree, write_tree
from semiret.types import Embeddings, SearchHits

log = logging.getLogger(__name__)

ANN_TYPES = ("exact", "flat", "ivf", "hnsw", "tree", "binary")
FACTORY = "faiss"
"""The ``ann`` of an index built with a FAISS factory string (``ann="faiss:IVF256,PQ16"``): ``meta.json`` records
``"ann": "faiss"`` and the string as ``parameters["factory"]``."""
RESCORE = 4
"""Candidates per hit a faiss structure with lossy codes (PQ, SQ, a transform) fetches by default, to score them
again exactly with the stored vectors (``rescore``)."""
ANN_FILE = "ann.faiss"
RESCORED_ROWS = 65536
"""Candidate vectors re-scored at a time (``rescore``): 200 MB of 768-dimensional float32 rows at most."""
EXACT_CHUNK = 65536
"""Documents scored per matmul in exact search (bounds the [queries, chunk] score block)."""


class DenseSegment(Segment):
    """A segment's vectors and its faiss search structure (plus the store's ids, texts and marks)."""

    def __init__(self, path: Path, info: dict, ann_type: str, dim: int):
        super().__init__(path, info)
        self.vectors = load_array(path / "vectors.npy")
        if self.vectors.shape != (info["n_docs"], dim):
            raise IndexFormatError(f"{path / 'vectors.npy'} holds an array of shape {self.vectors.shape}, not the "
                                   f"{info['n_docs']} vectors of dimension {dim} meta.json lists: a damaged index; "
                                   "restore it from a backup, or build it again")
        self.tree = TreeSearch(path, self.vectors) if ann_type == "tree" and info.get("tree", True) else None
        if self.tree is not None and self.tree.tree.depth < 2:
            self.tree = None  # no cluster to descend (a tree of one level, written before makes_a_tree refused it)
        # a faiss index, or None for exact and tree search and for a segment too small to train a factory's structure
        self.ann = _open_ann(path, self.vectors, ann_type) if info.get("ann", True) else None
        self.binary = ann_type == "binary" and self.ann is not None
        self.rescore = 1 if self.ann is None or (not self.binary and _scores_exactly(self.ann)) else RESCORE
        """Candidates per hit re-scored exactly by default: :data:`RESCORE` where faiss's codes are lossy."""

    def search(self, queries: np.ndarray, k: int, nprobe: int, ef_search: int, beam: int = BEAM, n_threads: int = 1,
               rescore: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` (scores, local numbers; -1 where fewer) of each query among live documents (``n_threads``: the
        tree's; faiss uses its own thread pool); ``rescore``: faiss's best ``k * rescore`` re-scored exactly with the
        stored vectors (None: :attr:`rescore`, 1: faiss's own scores)."""
        if self.tree is None and self.ann is None:
            return self._exact(queries, k)
        hidden = self.deleted if self.any_deleted() else None
        excluded = hidden if self.tree is not None else _faiss_selector(hidden)
        rescore = 1 if self.tree is not None else self.rescore if rescore is None else rescore  # (a tree: exact scores)
        fetched = min(k * rescore, max(k, self.n_docs))  # (never more candidates than the segment holds)
        scores, local = self._approximate(queries, fetched, nprobe, ef_search, beam, excluded, n_threads)
        # the clusters or graph neighbours searched may hold fewer than k live documents (few documents in them: a
        # small segment added to the first one's tree; many hidden, deleted or failing a filter): the queries left
        # short are searched again, 4x wider each time, as far as it goes
        wanted = min(k, self.n_docs - (0 if hidden is None else int(hidden.sum())))
        short = np.flatnonzero((local >= 0).sum(axis=1) < wanted)
        while len(short):
            wider = self._wider(nprobe, ef_search, beam)
            if wider is None:
                break
            nprobe, ef_search, beam = wider
            scores[short], local[short] = self._approximate(queries[short], fetched, nprobe, ef_search, beam,
                                                            excluded, n_threads)
            short = short[(local[short] >= 0).sum(axis=1) < wanted]
        if rescore == 1 and not self.binary:  # (a binary search's scores are Hamming distances: always re-scored)
            return scores, local
        return self._rescored(queries, local, k)

    def _approximate(self, queries: np.ndarray, k: int, nprobe: int, ef_search: int, beam: int, excluded,
                     n_threads: int = 1):
        """The tree's or faiss's search; ``excluded``: the hidden documents as the tree takes them (bool [n_docs])
        or as faiss does (an ``IDSelector`` of the others), None for none."""
        if self.tree is not None:
            return self.tree.search(queries, k, beam, excluded, n_threads)
        if self.binary:
            import faiss

            return self.ann.search(sign_bits(queries), k, params=faiss.SearchParameters(sel=excluded))
        return self.ann.search(queries, k, params=_search_parameters(self.ann, excluded, nprobe, ef_search, k))

    def _wider(self, nprobe: int, ef_search: int, beam: int) -> tuple[int, int, int] | None:
        """The search breadth 4x wider where this segment's structure has room left, else None."""
        import faiss

        if self.tree is not None:
            widest = len(self.tree.cluster_sizes)
            return (nprobe, ef_search, min(beam * 4, widest)) if beam < widest else None
        if self.binary:
            return None  # (every document's bits are compared)
        searched = _searched_structure(self.ann)
        if isinstance(searched, faiss.IndexIVF):
            return (min(nprobe * 4, searched.nlist), ef_search, beam) if nprobe < searched.nlist else None
        if isinstance(searched, faiss.IndexHNSW):
            return (nprobe, min(ef_search * 4, self.n_docs), beam) if ef_search < self.n_docs else None
        return None

    def _rescored(self, queries: np.ndarray, candidates: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The best ``k`` of each query's ``candidates`` (local numbers, -1 where none) by their exact inner products
        with the stored float vectors (only the candidates' rows are read, for :data:`RESCORED_ROWS` candidates of
        the queries at a time: a batch's candidate vectors are never all held at once)."""
        block = max(1, RESCORED_ROWS // max(1, candidates.shape[1]))
        parts = [self._rescored_block(queries[start:start + block], candidates[start:start + block], k)
                 for start in range(0, len(queries), block)]
        if not parts:
            return np.zeros((0, k), np.float32), np.full((0, k), -1, np.int64)
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    def _rescored_block(self, queries: np.ndarray, candidates: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        found = candidates >= 0
        rows = np.asarray(self.vectors[np.where(found, candidates, 0).ravel()]).reshape(*candidates.shape, -1)
        scores = np.where(found, np.einsum("qcd,qd->qc", rows, queries), -np.inf).astype(np.float32)
        order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        scores, local = np.take_along_axis(scores, order, 1), np.take_along_axis(candidates, order, 1)
        local[~np.isfinite(scores)] = -1
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
        """Bytes a search keeps resident: the faiss structure, the tree, or the memory-mapped vectors."""
        if self.tree is not None:
            return self.tree.memory_bytes()
        if self.ann is None:
            return self.vectors.nbytes
        import faiss

        return int((faiss.serialize_index_binary if self.binary else faiss.serialize_index)(self.ann).nbytes)


def check_tree_branching(tree_branching: int | None) -> None:
    """The ``tree`` structure's branching factor (None: the BEIR rule) must be at least 2."""
    if tree_branching is not None and tree_branching < 2:
        raise SemiretError(f"tree_branching (--tree-branching) must be at least 2, got {tree_branching}")


@register_index_format
class DenseIndex(SegmentedIndex):
    """An open dense index directory."""

    FORMAT = "semiret.dense"
    DESCRIPTION = "dense index"
    batch_type = Embeddings

    # ------------------------------------------------------------------ creation
    @classmethod
    def build(cls, path: str | Path, kind: str, batches: Iterable[Embeddings], dim: int, analyzer: dict,
              ann: str = "exact", nlist: int | None = None, hnsw_m: int = 32, ef_construction: int = 200,
              tree_branching: int | None = None, store_texts: bool = True, overwrite: bool = False,
              extra_meta: dict | None = None, buffer_mb: float | None = None) -> "DenseIndex":
        """Write a new index from batches of embeddings (staged in a temporary directory, then renamed), a segment
        each ``buffer_mb`` MB of documents (None or 0: one segment), each with its own IVF or HNSW structure (a
        tree is clustered from every document: written whole, and refuses a buffer);
        ``tree_branching``: the ``tree`` structure's branching factor (default: the BEIR rule, depth 3); ``ann``:
        one of :data:`ANN_TYPES` or ``faiss:FACTORY`` (checked here, before any batch is read or encoded)."""
        if kind != "dense":
            raise SemiretError(f"a dense index has kind 'dense', not {kind!r}")
        if dim is None:
            raise SemiretError("a dense index needs the dimension of its vectors (dim, --dim): none was given, and no "
                               "document to take it from")
        ann, factory = split_ann(ann)
        if ann not in ANN_TYPES and ann != FACTORY:
            raise SemiretError(f"unknown dense search structure {ann!r} (known: {', '.join(ANN_TYPES)}, "
                               f"{FACTORY}:FACTORY, a FAISS index_factory string)")
        if ann != "exact":
            import faiss  # noqa: F401  (fail before any document is encoded)
        if ann == FACTORY:
            factory_index(factory, dim)
        if ann == "binary" and dim % 8:
            raise SemiretError(f"binary codes pack a vector's signs 8 to a byte: {dim}-dimensional vectors do not fill "
                               "whole bytes (use --ann faiss:...,SQ8 or another structure)")
        check_tree_branching(tree_branching)
        fields = {
            "kind": "dense", "ann": ann, "dim": dim, "metric": "ip",
            "parameters": {"nlist": nlist, "hnsw_m": hnsw_m, "ef_construction": ef_construction,
                           "tree_branching": tree_branching, **({"factory": factory} if ann == FACTORY else {})},
            "analyzer": analyzer,
        }
        buffer_mb = whole_buffer(cls, {"ann": ann}, check_buffer(buffer_mb))
        return cls._build(path, fields, batches, store_texts, overwrite, extra_meta, buffer_mb)

    @classmethod
    def written_whole(cls, options: dict) -> str | None:
        return "a dense index with a tree (clustered from every document)" if options.get("ann") == "tree" else None

    def _open_segment(self, path: Path, info: dict) -> DenseSegment:
        return DenseSegment(path, info, self.meta["ann"], self.meta["dim"])

    # ------------------------------------------------------------------ properties
    @property
    def dim(self) -> int:
        return self.meta["dim"]

    def memory_bytes(self) -> int:
        return sum(s.memory_bytes() for s in self.segments)

    def describe(self) -> dict:
        ann, factory = self.meta["ann"], self.meta["parameters"].get("factory")
        searched_exactly = sum(s.tree is None and s.ann is None for s in self.segments) if ann in ("tree", FACTORY) \
            else None
        return {**super().describe(), "ann": ann, **({"factory": factory} if factory else {}), "dim": self.dim,
                "memory_bytes": self.memory_bytes(),
                **({"segments_without_tree" if ann == "tree" else "segments_searched_exactly": searched_exactly}
                   if searched_exactly else {})}

    # ------------------------------------------------------------------ search
    def search(self, queries: np.ndarray, k: int = 10, n_threads: int = 1, nprobe: int = 16,
               ef_search: int = 128, beam: int = BEAM, rescore: int | None = None) -> SearchHits:
        """Top-k by inner product over live documents; all-zero queries (empty texts) find nothing.

        ``n_threads``: the tree's descents and scans (numpy and faiss use their own thread pools); ``rescore``: the
        candidates per hit a faiss search fetches to score again exactly (default: :data:`RESCORE` where its codes
        are lossy, else 1: none).
        """
        if k < 1:
            raise SemiretError("k must be at least 1")
        queries = np.ascontiguousarray(queries, np.float32)
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise SemiretError(f"queries must be a [n, {self.dim}] array, got shape {queries.shape}")
        empty = ~np.any(queries != 0, axis=1)
        segments = self.segments  # one snapshot's, whatever a writer publishes meanwhile
        seg_scores, seg_locals = [], []
        for segment in segments:
            scores, local = segment.search(queries, min(k, segment.n_docs) or 1, nprobe, ef_search, beam, n_threads,
                                           rescore)
            local[empty] = -1
            seg_scores.append(scores)
            seg_locals.append(local)
        return self._top_hits(segments, seg_scores, seg_locals, k, len(queries))

    # ------------------------------------------------------------------ documents
    def get_vector(self, doc_id: str) -> np.ndarray | None:
        found = self.locate(doc_id)
        return None if found is None else np.array(found[0].vectors[found[1]])

    def get_vectors(self, doc_ids: Iterable[str]) -> dict[str, np.ndarray]:
        """The vectors of those ids the index holds live, their lookups made at once (:meth:`_live_locals`)."""
        return {doc_id: np.array(segment.vectors[local]) for segment, ids, locals_ in self._live_locals(doc_ids)
                for doc_id, local in zip(ids, locals_.tolist())}

    def _document_vectors(self, located: list[tuple[DenseSegment, int]]) -> np.ndarray:
        return np.array([segment.vectors[local] for segment, local in located], np.float32).reshape(
            len(located), self.dim)

    # ------------------------------------------------------------------ segments
    def _live_batch(self, segment: DenseSegment, live: np.ndarray, ids: list[str],
                    documents: Sequence[Document] | None) -> Embeddings:
        return Embeddings(ids, np.asarray(segment.vectors)[live], documents)

    def _validate(self, embeddings: Embeddings) -> None:
        check_embeddings(embeddings, self.dim)

    def _write_segment_files(self, directory: Path, embeddings: Embeddings, info: dict) -> None:
        vectors = np.ascontiguousarray(embeddings.vectors, np.float32)
        np.save(directory / "vectors.npy", vectors)
        if self.meta["ann"] in ("ivf", "hnsw", FACTORY, "binary"):
            import faiss

            index = self._build_ann(vectors)
            if index is None:
                info["ann"] = False  # searched exactly until a merge makes a segment large enough
            elif self.meta["ann"] == "binary":
                faiss.write_index_binary(index, str(directory / ANN_FILE))
            else:
                faiss.write_index(index, str(directory / ANN_FILE))
        elif self.meta["ann"] == "tree":  # later segments keep the first one's tree: new documents join it
            base = next((s.tree.tree for s in self.segments if s.tree is not None), None)
            branching = self.meta["parameters"].get("tree_branching")
            if base is None and not makes_a_tree(len(vectors), branching):
                info["tree"] = False  # searched exactly; the first segment large enough gets the tree
                log.warning("%d documents make no tree (%s): they are searched exactly until a segment large enough "
                            "is written (documents added, then a merge), which gets the tree", len(vectors),
                            f"branching {branching}: more documents than that are needed" if branching else
                            "the default branching needs 5-8 or at least 17 documents; give --tree-branching")
            else:
                write_tree(directory, vectors, base, branching)

    def _build_ann(self, vectors: np.ndarray):
        """The segment's faiss index of ``vectors``; None for a factory structure faiss cannot train on so few."""
        import faiss

        params = self.meta["parameters"]
        if self.meta["ann"] == "binary":
            index = faiss.IndexBinaryFlat(self.dim)
            index.add(sign_bits(vectors))
            return index
        if self.meta["ann"] == FACTORY:
            index = factory_index(params["factory"], self.dim)
            try:
                index.train(vectors)
            except RuntimeError as error:
                log.warning("%d vectors do not train faiss:%s (%s): that segment is searched exactly until a merge "
                            "makes one large enough", len(vectors), params["factory"], faiss_message(error))
                return None
        elif self.meta["ann"] == "hnsw":
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


def sign_bits(vectors: np.ndarray) -> np.ndarray:
    """uint8 [n, dim / 8]: each component's sign, 1 where positive (sentence-transformers' ``ubinary``
    quantization), 8 to a byte: what a ``binary`` structure compares by Hamming distance."""
    return np.packbits(np.asarray(vectors) > 0, axis=1)


def check_embeddings(embeddings: Embeddings, dim: int) -> None:
    """Refuse vectors that are not of dimension ``dim`` or not finite."""
    vectors = np.asarray(embeddings.vectors)
    if vectors.shape != (len(embeddings), dim):
        raise SemiretError(f"expected {len(embeddings)} vectors of dimension {dim}, got shape {vectors.shape}")
    if not np.all(np.isfinite(vectors)):
        raise SemiretError("vectors must be finite")


def split_ann(ann: str) -> tuple[str, str | None]:
    """A dense index's ``ann`` as its structure's name and, for ``faiss:FACTORY``, the factory string (else None)."""
    name, colon, factory = ann.partition(":")
    return (FACTORY, factory.strip()) if name == FACTORY and colon else (ann, None)


def factory_index(factory: str | None, dim: int):
    """A new, untrained faiss index of the ``index_factory`` string ``factory`` for ``dim``-dimensional vectors and
    inner products; a clear error where faiss cannot parse it or it gives a structure whose search cannot skip
    deleted or filtered-out documents (:func:`_search_parameters`), or that keeps ids of its own."""
    import faiss

    if not factory:
        raise SemiretError(f"{FACTORY}: needs a FAISS index_factory string after it: {FACTORY}:IVF256,PQ16, "
                           f"{FACTORY}:HNSW32,SQ8, {FACTORY}:OPQ16,IVF1024,PQ16, ...")
    _check_factory_sizes(factory)
    try:
        index = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as error:
        raise SemiretError(f"faiss makes no index of {factory!r} for {dim}-dimensional vectors scored by inner "
                           f"product: {faiss_message(error)}") from None
    _search_parameters(index, None, 1, 1, 1)
    searched = _searched_structure(index)
    if isinstance(searched, faiss.IndexIVFPQ):  # (what the factory turns on for polysemous filtering, which no search
        searched.do_polysemous_training = False  # here uses: seconds of training a segment for nothing)
    return index


_FACTORY_SIZE = re.compile(r"(HNSW|IVF|PCAW?R?|OPQ|PQ)(\d+)(?:x(\d+))?")
"""A structure of a factory string and its size: HNSW's degree, IVF's lists, a PCA's or OPQ's output, PQ's
sub-quantizers and bits."""


def _check_factory_sizes(factory: str) -> None:
    """Refuse the sizes faiss parses but cannot build with (an HNSW of degree 1 crashes the process on its first add,
    one of 0 at once; no IVF list fails every search; PQ codes outside 1 to 16 bits), before any index is made."""
    for found in _FACTORY_SIZE.finditer(factory):
        name, size, bits = found[1], int(found[2]), found[3]
        least = 2 if name == "HNSW" else 1
        if size < least:
            raise SemiretError(f"{FACTORY}:{factory}: {name}{size} is no structure faiss can build ({name} takes at "
                               f"least {least})")
        if bits is not None and not 1 <= int(bits) <= 16:
            raise SemiretError(f"{FACTORY}:{factory}: {found[0]} asks for {bits}-bit codes; PQ codes take 1 to 16 bits")


def faiss_message(error: RuntimeError) -> str:
    """What a faiss exception says, without the C++ function and source line it names."""
    return re.sub(r"^Error in .* at \S+:\d+: (Error: )?", "", str(error).strip().splitlines()[-1])


def _search_parameters(index, selector, nprobe: int, ef_search: int, k: int):
    """faiss's parameters for a search of ``index`` (through its transforms and refinement) for ``k`` hits: the id
    ``selector`` of the documents searched, ``nprobe`` inverted lists, an HNSW graph's ``ef_search`` (at least ``k``;
    a coarse quantizer's at least ``nprobe``). A structure that cannot take them is refused, naming what can."""
    import faiss

    index = faiss.downcast_index(index)
    if isinstance(index, faiss.IndexPreTransform):
        return faiss.SearchParametersPreTransform(
            index_params=_search_parameters(index.index, selector, nprobe, ef_search, k))
    if isinstance(index, faiss.IndexRefine):
        return faiss.IndexRefineSearchParameters(
            k_factor=index.k_factor, base_index_params=_search_parameters(index.base_index, selector, nprobe,
                                                                          ef_search, k))
    if isinstance(index, faiss.IndexHNSW) and isinstance(
            faiss.downcast_index(index.storage), (faiss.IndexFlat, faiss.IndexScalarQuantizer)):
        return faiss.SearchParametersHNSW(sel=selector, efSearch=max(ef_search, k))
    if isinstance(index, (faiss.IndexIVFFlat, faiss.IndexIVFPQ, faiss.IndexIVFScalarQuantizer,
                          faiss.IndexIVFPQFastScan)):
        quantizer = faiss.downcast_index(index.quantizer)
        if isinstance(quantizer, faiss.IndexFlat):
            return faiss.SearchParametersIVF(sel=selector, nprobe=nprobe)
        if isinstance(quantizer, faiss.IndexHNSW):
            return faiss.SearchParametersIVF(sel=selector, nprobe=nprobe, quantizer_params=_search_parameters(
                quantizer, None, nprobe, ef_search, nprobe))
    if isinstance(index, (faiss.IndexFlat, faiss.IndexScalarQuantizer)):
        return faiss.SearchParameters(sel=selector)
    raise SemiretError(f"a faiss {type(index).__name__} is not a structure semiret searches (by inner product, "
                       "skipping deleted and filtered-out documents): use IVF (a Flat or HNSW coarse quantizer) over "
                       "Flat, PQ or SQ codes, HNSW over Flat or SQ codes, or SQ alone, optionally after a transform "
                       "(OPQ, PCA) or before a refinement (RFlat); for exhaustive PQ codes (PQ32), IVF1,PQ32")


def _searched_structure(index):
    """The faiss index a search's breadth applies to: ``index`` inside its transforms and refinement."""
    import faiss

    index = faiss.downcast_index(index)
    while isinstance(index, (faiss.IndexPreTransform, faiss.IndexRefine)):
        index = faiss.downcast_index(index.index if isinstance(index, faiss.IndexPreTransform) else index.base_index)
    return index


def _scores_exactly(index) -> bool:
    """Whether a faiss index finds and scores its candidates with the float vectors themselves (Flat, IVF-Flat, HNSW
    over Flat): re-scoring them changes nothing. (A refinement, RFlat, scores exactly but chooses among candidates its
    lossy codes found: re-scoring more of them finds more.)"""
    import faiss

    index = faiss.downcast_index(index)
    if isinstance(index, faiss.IndexHNSW):
        return _scores_exactly(index.storage)
    return isinstance(index, (faiss.IndexFlat, faiss.IndexIVFFlat))


def _faiss_selector(hidden: np.ndarray | None):
    """The documents ``hidden`` does not mark, as a faiss search takes them (None: every document)."""
    if hidden is None:
        return None
    import faiss

    return faiss.IDSelectorNot(faiss.IDSelectorBatch(np.flatnonzero(hidden).astype(np.int64)))


def _open_ann(path: Path, vectors: np.ndarray, ann_type: str):
    if ann_type in ("exact", "tree"):
        return None
    import faiss

    if ann_type == "flat":
        index = faiss.IndexFlatIP(vectors.shape[1])
        index.add(np.ascontiguousarray(vectors, np.float32))
        return index
    ann_file = path / ANN_FILE
    if not ann_file.is_file():
        raise IndexFormatError(f"missing index file {ann_file}")
    try:
        index = (faiss.read_index_binary if ann_type == "binary" else faiss.read_index)(str(ann_file))
    except RuntimeError as error:  # cut short or overwritten
        raise IndexFormatError(f"damaged index file {ann_file} ({str(error).splitlines()[-1]}): restore the index "
                               "from a backup, or build it again") from None
    if index.ntotal != len(vectors) or index.d != vectors.shape[1]:
        raise IndexFormatError(f"{ann_file} holds {index.ntotal} vectors of dimension {index.d}, not the "
                               f"{len(vectors)} of vectors.npy: a damaged index; restore it from a backup, or build "
                               "it again")
    return index
