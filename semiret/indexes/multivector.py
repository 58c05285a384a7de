"""The multi-vector index: each document as one unit vector per token (late interaction: ColBERT, Khattab & Zaharia
2020), searched over the whole corpus by MaxSim, the sum over the query's token vectors of the best inner product with
any of the document's. A first stage, where :mod:`semiret.search.rerank` re-ranks another's best hits.

A segmented store (:mod:`semiret.indexes.segments`) like the dense index; each ``seg-NNNNNN/`` folder holds::

    tokens.npy       float16 [n_tokens, dim], memory-mapped: every document's token vectors, one after the other
    residuals.npy    instead, with ``nbits``: each token vector's residual from its centroid, packed (uint8 [n_tokens,
                     dim * nbits / 8]), and buckets.npz, the residuals' bucket cutoffs and values (the codec)
    digests.npy      with ``nbits``, uint64 [n_docs]: each document's fingerprint of its token vectors as added
                     (float16, :func:`~semiret.types.token_digests`; 0: not known), which merges carry as they are
    offsets.npy      int64 [n_docs + 1]: document i's vectors are rows offsets[i]:offsets[i + 1]
    centroids.npy    float32 [n_centroids, dim]: spherical k-means of a sample of the segment's token vectors
    codes.npy        int32 [n_tokens]: each token vector's nearest centroid
    lists.npz        each centroid's documents (``offsets`` into ``documents``, ascending local numbers)
    docids.*, texts.*, deleted.bin   as in every segment

Search (``ann``): ``plaid`` (the default), PLAID's candidate generation and pruning (Santhanam et al. 2022, §4): each
query vector's ``nprobe`` nearest centroids give the candidate documents (those with a token vector in one of them);
the candidates are scored approximately by MaxSim over their tokens' centroids (the query-centroid similarities,
computed once a query), first with the tokens of the query's weak centroids left out (``centroid_threshold``), the
best :data:`PRUNED_STAGE_FACTOR` times ``ndocs`` kept, then with every token, the best ``ndocs`` kept and scored
exactly with their stored vectors; or ``exact``: MaxSim over every document. A segment with too few token vectors to
train centroids on (fewer than :data:`POINTS_PER_CENTROID` times two) is searched exactly, flagged ``"centroids": 0``,
its vectors kept whole; a merge trains the segment it writes.
Token vectors are kept whole in float16 (``2 * dim`` bytes a token: 768 for MiniLM), or, with ``nbits``, compressed as
ColBERTv2 compresses them (:class:`ResidualCodec`: the centroid's number and ``nbits`` bits a dimension, 4 + 96 bytes a
MiniLM token at 2 bits), and read from disk only for the ``ndocs`` candidates. A compressed index has one codec,
trained by the first segment large enough, as ColBERTv2's index updater keeps its own: later segments are compressed
by it, and merges copy codes and residuals as they are (a segment of another codec, merged shards', is decompressed
and compressed again, once; its documents' fingerprints, what a sync compares, stay those of their vectors as added).
An index whose first build was small keeps that small codec: build it again to train one on the whole corpus.

Hand-written kernels (numba): the candidates' approximate scores, the documents of the probed centroids and the
decompression of their vectors. numpy would need a [candidate tokens x query tokens] gather per query, or several
arrays of the candidates' size; faiss has no MaxSim over groups of vectors.
"""

from __future__ import annotations

import hashlib
import logging
import math
from functools import cached_property
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from semiret import progress
from semiret.compiled import kernel
from semiret.data.collection import Document
from semiret.errors import IndexFormatError, SemiretError
from semiret.indexes.segments import Segment, SegmentedIndex, register_index_format
from semiret.indexes.storage import load_array
from semiret.types import SearchHits, TokenEmbeddings, token_digests

log = logging.getLogger(__name__)

ANN_TYPES = ("plaid", "exact")
NPROBE = 4
"""Centroids each query vector probes for candidates (PLAID's ``ncells``: 1 to 4)."""
def default_ndocs(k: int) -> int:
    """Candidates scored exactly for ``k`` hits: 256 (PLAID's exactly scored share for 100 hits), or twice ``k`` when
    more, so that pages of up to 128 hits rank alike. (SciFact's 300 test queries, MiniLM: 256 candidates for 100 hits
    find exact search's R@100; docs/results.md, sixty-ninth session.)"""
    return max(256, 2 * k)


CENTROID_THRESHOLD = 0.45
"""Share of the query's best centroid similarity below which a centroid's tokens are left out of the first
approximate scores (:func:`kept_centroids`): PLAID's t_cs for 100 hits (Santhanam et al. 2022, §4; ColBERT's
``searcher.py``: 0.5 for 10, 0.4 for 1,000), taken relative to the query, whose best centroid differs from model to
model (untrained MiniLM, SciFact's train queries: 0.89 on average; 9% of the centroids, 11% of the token vectors
kept; nDCG@10 and R@100 unchanged)."""
PRUNED_STAGE_FACTOR = 4
"""Candidates the pruned approximate scores keep per document scored exactly (PLAID's ``ndocs``, then ``ndocs / 4``)."""


POINTS_PER_CENTROID = 39
"""The fewest token vectors k-means trains each centroid on (faiss's own floor)."""
TRAINING_POINTS_PER_CENTROID = 64
"""Token vectors sampled per centroid to train them (every one, in a smaller segment): ColBERTv2 trains on a sample."""
KMEANS_ITERATIONS = 4
"""Lloyd iterations training the centroids (ColBERTv2's ``kmeans_niters``): they only route candidates, which are then
scored exactly."""
EXACT_BLOCK_TOKENS = 65536
"""Token vectors scored per block of an exact MaxSim (bounds the [query tokens, block] similarities held)."""
ASSIGN_BLOCK_TOKENS = 262144
"""Token vectors assigned to their nearest centroid (and compressed) at a time while a segment is written."""
NBITS = (1, 2, 4)
"""Bits a residual's dimension may be stored in (PLAID's and ColBERTv2's choices)."""


def _unpacking_table(nbits: int) -> np.ndarray:
    """uint8 [256, 8 / nbits]: each byte's buckets, the first dimension in its highest bits."""
    shifts = np.arange(8 - nbits, -1, -nbits)
    return ((np.arange(256)[:, None] >> shifts) & (2 ** nbits - 1)).astype(np.uint8)


UNPACKED = {nbits: _unpacking_table(nbits) for nbits in NBITS}


def pack_buckets(buckets: np.ndarray, nbits: int) -> np.ndarray:
    """uint8 [n, dim * nbits / 8] of buckets uint8 [n, dim] in 0..2^nbits - 1 (:data:`UNPACKED` reads them back)."""
    per_byte = 8 // nbits
    grouped = buckets.reshape(len(buckets), -1, per_byte).astype(np.uint16)
    shifts = np.arange(8 - nbits, -1, -nbits, dtype=np.uint16)
    return (grouped << shifts).sum(axis=2).astype(np.uint8)


def default_centroids(n_tokens: int) -> int:
    """Centroids for a segment of ``n_tokens`` token vectors: the power of two nearest below 4 sqrt(n_tokens) (ColBERTv2
    takes 16 sqrt(n); a quarter of that trains 16 times faster on two cores and probes as well at our sizes), no more
    than the vectors train (:data:`POINTS_PER_CENTROID` each)."""
    wanted = 2 ** int(math.floor(math.log2(max(1.0, 4 * math.sqrt(n_tokens)))))
    return min(wanted, n_tokens // POINTS_PER_CENTROID)


def check_token_embeddings(batch: TokenEmbeddings, dim: int | None) -> None:
    """Refuse a batch whose offsets do not cut its vectors (or codes) into its documents, or whose vectors are not
    finite or of another dimension than ``dim``."""
    offsets = np.asarray(batch.offsets)
    rows = len(batch.codes) if batch.vectors is None else len(batch.vectors)
    if offsets.shape != (len(batch) + 1,) or (len(offsets) and (offsets[0] != 0 or offsets[-1] != rows)) \
            or np.any(np.diff(offsets) < 0):
        raise SemiretError(f"token vectors of {len(batch)} documents need {len(batch) + 1} ascending offsets from 0 to "
                           f"{rows}, got {offsets.shape[0]}")
    if batch.digests is not None and np.shape(batch.digests) != (len(batch),):
        raise SemiretError(f"token vectors of {len(batch)} documents need a fingerprint each, got "
                           f"{np.shape(batch.digests)}")
    if batch.vectors is None:
        return  # (codes and residuals read back from a segment)
    vectors = np.asarray(batch.vectors)
    if vectors.ndim != 2 or (dim is not None and vectors.shape[1] != dim):
        raise SemiretError(f"expected token vectors of dimension {dim}, got an array of shape {vectors.shape}")
    if not np.all(np.isfinite(vectors)):
        raise SemiretError("token vectors must be finite")


class MultiVectorSegment(Segment):
    """A segment's token vectors, their documents' offsets and its centroids (plus the store's ids, texts and marks)."""

    def __init__(self, path: Path, info: dict, dim: int):
        super().__init__(path, info)
        self.dim, self.nbits = dim, info.get("nbits", 0)
        self.offsets = np.asarray(load_array(path / "offsets.npy"), np.int64)
        self.n_tokens = int(self.offsets[-1]) if len(self.offsets) else 0
        self.lengths = np.diff(self.offsets)
        stored = path / ("residuals.npy" if self.nbits else "tokens.npy")
        self.vectors = load_array(stored)
        """float16 [n_tokens, dim], or (``nbits``) each token's residual from its centroid, packed: uint8 [n_tokens,
        dim * nbits / 8]."""
        width = dim * self.nbits // 8 if self.nbits else dim
        if self.offsets.shape != (info["n_docs"] + 1,) or self.vectors.shape != (self.n_tokens, width):
            raise IndexFormatError(f"{path}: {stored.name} {self.vectors.shape} and offsets.npy {self.offsets.shape} "
                                   f"do not hold the {info['n_docs']} documents of dimension {dim} meta.json lists: a "
                                   "damaged index; restore it from a backup, or build it again")
        self.centroids = None
        if info.get("centroids"):
            self.centroids = np.ascontiguousarray(load_array(path / "centroids.npy"), np.float32)
            self.codes = load_array(path / "codes.npy")
            with np.load(path / "lists.npz") as lists:
                self.list_offsets, self.list_documents = lists["offsets"], lists["documents"]
            if self.codes.shape != (self.n_tokens,) or len(self.list_offsets) != len(self.centroids) + 1:
                raise IndexFormatError(f"{path}: codes.npy or lists.npz do not match its {self.n_tokens} token "
                                       f"vectors and {len(self.centroids)} centroids: a damaged index; restore it "
                                       "from a backup, or build it again")
        self.codec = ResidualCodec.load(path, self.centroids, self.nbits) if self.nbits else None
        self.digests = None
        """uint64 [n_docs]: each document's :func:`~semiret.types.token_digests` as added (0: not known), where
        compressed; None in a segment written before semiret kept them."""
        if self.codec is not None and (path / "digests.npy").is_file():
            self.digests = load_array(path / "digests.npy")
            if self.digests.shape != (info["n_docs"],):
                raise IndexFormatError(f"{path}: digests.npy {self.digests.shape} does not match its {info['n_docs']} "
                                       "documents: a damaged index; restore it from a backup, or build it again")

    def token_vectors(self, rows: np.ndarray) -> np.ndarray:
        """float32 [len(rows), dim]: the token vectors of ``rows``, as stored or (``nbits``) decompressed."""
        if self.codec is None:
            return np.asarray(self.vectors[rows], np.float32)
        return self.codec.decompress(self.codes[rows], np.asarray(self.vectors[rows]))

    def search(self, query: np.ndarray, k: int, nprobe: int, ndocs: int,
               centroid_threshold: float) -> tuple[np.ndarray, np.ndarray]:
        """The best ``k`` (scores, local numbers; -1 where fewer) live documents for one query's token vectors: every
        visible document (not deleted, not filtered out, with a vector) scored exactly where they are no more than
        ``ndocs``; else PLAID's candidates, the probe widened 4x at a time until at least ``ndocs`` are found (a
        number that does not change with ``k`` up to 128: the first hits of two pages' searches agree), the best
        ``ndocs`` of them by their approximate scores (:func:`approximate_best`) scored exactly."""
        hidden = self.deleted
        visible = np.flatnonzero(~hidden & (self.lengths > 0))
        if self.centroids is None or len(visible) <= ndocs:
            candidates = visible
        else:
            similarities = query @ self.centroids.T  # [query tokens, centroids]
            probe = min(nprobe, len(self.centroids))
            while True:
                probed = np.unique(np.argpartition(-similarities, probe - 1, axis=1)[:, :probe])
                candidates = probed_documents(probed, self.list_offsets, self.list_documents, hidden)
                if len(candidates) >= ndocs or probe == len(self.centroids):  # (not k: pages rank alike)
                    break
                probe = min(probe * 4, len(self.centroids))
            if len(candidates) > ndocs:
                candidates = approximate_best(candidates, self.offsets, self.codes, similarities, ndocs,
                                              centroid_threshold)
        scores = self.maxsim(query, candidates)
        order = np.argsort(-scores, kind="stable")[:k]
        found_scores = np.full(k, -np.inf, np.float32)
        found = np.full(k, -1, np.int64)
        found_scores[:len(order)], found[:len(order)] = scores[order], candidates[order]
        return found_scores, found

    def maxsim(self, query: np.ndarray, documents: np.ndarray) -> np.ndarray:
        """float32 [len(documents)]: MaxSim of ``query`` ([query tokens, dim]) with each document (local numbers, each
        with a token vector), their vectors read a block at a time."""
        scores = np.empty(len(documents), np.float32)
        lengths = self.lengths[documents]
        ends = np.cumsum(lengths)
        start = 0
        while start < len(documents):
            stop = max(start + 1, int(np.searchsorted(ends, ends[start] - lengths[start] + EXACT_BLOCK_TOKENS,
                                                      side="right")))
            rows, offsets = self.rows_of(documents[start:stop])
            similarities = query @ self.token_vectors(rows).T
            scores[start:stop] = np.maximum.reduceat(similarities, offsets[:-1], axis=1).sum(axis=0)
            start = stop
        return scores

    def rows_of(self, documents: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(rows, offsets): the token rows of ``documents`` (local numbers) one document after the other, and where
        each document's start among them (int64 [len(documents) + 1])."""
        lengths = self.lengths[documents]
        offsets = np.zeros(len(documents) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return np.repeat(self.offsets[documents] - offsets[:-1], lengths) + np.arange(int(offsets[-1])), offsets

    def mean_vectors(self, locals_: Sequence[int]) -> np.ndarray:
        """Each document's mean token vector (zero for one without any)."""
        rows = [self.token_vectors(np.arange(self.offsets[i], self.offsets[i + 1])) for i in locals_]
        return np.array([row.mean(axis=0) if len(row) else np.zeros(self.dim, np.float32) for row in rows],
                        np.float32).reshape(len(rows), self.dim)


@kernel
def probed_documents(probed, list_offsets, list_documents, hidden):
    """The documents (ascending local numbers) with a token vector in one of the ``probed`` centroids, those
    ``hidden`` left out."""
    seen = np.zeros(hidden.shape[0], np.bool_)
    for centroid in probed:
        for position in range(list_offsets[centroid], list_offsets[centroid + 1]):
            seen[list_documents[position]] = True
    count = 0
    for local in range(seen.shape[0]):
        if seen[local] and not hidden[local]:
            count += 1
    out = np.empty(count, np.int64)
    count = 0
    for local in range(seen.shape[0]):
        if seen[local] and not hidden[local]:
            out[count] = local
            count += 1
    return out


def approximate_best(candidates: np.ndarray, offsets: np.ndarray, codes: np.ndarray, similarities: np.ndarray,
                     ndocs: int, centroid_threshold: float) -> np.ndarray:
    """The best ``ndocs`` of ``candidates`` (ascending local numbers; ``offsets`` and ``codes``: their segment's) by
    PLAID's two approximate stages (``similarities``: [query tokens, centroids]): where they are more than
    :data:`PRUNED_STAGE_FACTOR` times ``ndocs``, the best that many by centroid interaction over the tokens of the
    centroids :func:`kept_centroids` keeps (0: no pruning), then the best ``ndocs`` of those over every token."""
    centroid_similarities = np.ascontiguousarray(similarities.T)
    pruned_stage = PRUNED_STAGE_FACTOR * ndocs
    if centroid_threshold > 0 and len(candidates) > pruned_stage:
        kept = kept_centroids(similarities, centroid_threshold)
        candidates = best_of(candidates, centroid_interaction(candidates, offsets, codes, centroid_similarities, kept),
                             pruned_stage)
    every = np.ones(similarities.shape[1], np.bool_)
    return best_of(candidates, centroid_interaction(candidates, offsets, codes, centroid_similarities, every), ndocs)


def kept_centroids(similarities: np.ndarray, threshold: float) -> np.ndarray:
    """bool [centroids]: PLAID's centroid pruning, relative to the query: the centroids whose best similarity with
    any of its vectors (``similarities``: [query tokens, centroids]) is at least ``threshold`` times the best
    centroid's (which is always kept)."""
    best = similarities.max(axis=0)
    top = best.max()
    return best >= min(threshold * top, top)


def best_of(candidates: np.ndarray, scores: np.ndarray, count: int) -> np.ndarray:
    """The ``count`` of ``candidates`` with the highest ``scores`` (all of them where no more), ascending."""
    if len(candidates) <= count:
        return candidates
    return np.sort(candidates[np.argpartition(-scores, count - 1)[:count]])


@kernel
def centroid_interaction(documents, offsets, codes, centroid_similarities, kept):
    """PLAID's approximate MaxSim of each document: for each query vector, its best similarity with the centroid of
    any of the document's tokens whose centroid is ``kept`` (bool [centroids]), summed (``centroid_similarities``:
    [centroids, query tokens]); -inf for a document with no such token."""
    n_query = centroid_similarities.shape[1]
    out = np.empty(documents.shape[0], np.float32)
    best = np.empty(n_query, np.float32)
    for j in range(documents.shape[0]):
        document = documents[j]
        best[:] = -np.inf
        for token in range(offsets[document], offsets[document + 1]):
            row = codes[token]
            if not kept[row]:
                continue
            for i in range(n_query):
                value = centroid_similarities[row, i]
                if value > best[i]:
                    best[i] = value
        total = 0.0
        for i in range(n_query):
            total += best[i]
        out[j] = total
    return out


@register_index_format
class MultiVectorIndex(SegmentedIndex):
    """An open multi-vector index directory."""

    FORMAT = "semiret.multivector"
    DESCRIPTION = "multi-vector index"
    batch_type = TokenEmbeddings

    @classmethod
    def build(cls, path: str | Path, kind: str, batches: Iterable[TokenEmbeddings], dim: int, analyzer: dict,
              ann: str = "plaid", centroids: int | None = None, nbits: int | None = None, store_texts: bool = True,
              overwrite: bool = False, extra_meta: dict | None = None,
              buffer_mb: float | None = None) -> "MultiVectorIndex":
        """Write a new index from batches of token vectors (staged, then renamed), a segment each ``buffer_mb`` MB of
        documents; ``ann``: ``plaid`` (each segment's ``centroids``, default :func:`default_centroids`) or
        ``exact``; ``nbits``: each token vector stored as its residual from its centroid in that many bits a
        dimension (None: whole, float16)."""
        if kind != "multivector":
            raise SemiretError(f"a multi-vector index has kind 'multivector', not {kind!r}")
        if dim is None:
            raise SemiretError("a multi-vector index needs the dimension of its token vectors (dim, --dim): none was "
                               "given, and no document to take it from")
        check_ann(ann, centroids, nbits)
        if nbits and dim * nbits % 8:
            raise SemiretError(f"{dim}-dimensional token vectors do not pack into whole bytes of {nbits}-bit residuals "
                               f"(dim x nbits must be a multiple of 8)")
        fields = {"kind": "multivector", "ann": ann, "dim": dim, "metric": "maxsim",
                  "parameters": {"centroids": centroids, "nbits": nbits}, "analyzer": analyzer}
        return cls._build(path, fields, batches, store_texts, overwrite, extra_meta, buffer_mb)

    def _open_segment(self, path: Path, info: dict) -> MultiVectorSegment:
        return MultiVectorSegment(path, info, self.meta["dim"])

    @property
    def dim(self) -> int:
        return self.meta["dim"]

    def describe(self) -> dict:
        segments = self.segments
        return {**super().describe(), "ann": self.meta["ann"], "dim": self.dim,
                "token_vectors": sum(s.n_tokens for s in segments), "nbits": self.meta["parameters"].get("nbits"),
                "centroids": sum(0 if s.centroids is None else len(s.centroids) for s in segments),
                **({"segments_searched_exactly": sum(s.centroids is None for s in segments)}
                   if self.meta["ann"] == "plaid" and any(s.centroids is None for s in segments) else {})}

    def search(self, queries: Sequence[np.ndarray], k: int = 10, n_threads: int = 1, nprobe: int = NPROBE,
               ndocs: int | None = None, centroid_threshold: float = CENTROID_THRESHOLD) -> SearchHits:
        """Top-k by MaxSim over live documents for each query's token vectors (float32 [query tokens, dim]; one with
        none finds nothing); ``nprobe`` centroids per query vector, ``ndocs`` candidates scored exactly (default
        :func:`default_ndocs`), ``centroid_threshold`` PLAID's pruning (:func:`kept_centroids`; 0: none).
        (``n_threads``: unused, numpy and the kernels run in the caller's thread.)"""
        if k < 1:
            raise SemiretError("k must be at least 1")
        if nprobe < 1 or (ndocs is not None and ndocs < 1):
            raise SemiretError(f"nprobe and ndocs must be at least 1, got {nprobe} and {ndocs}")
        if isinstance(centroid_threshold, bool) or not isinstance(centroid_threshold, (int, float)) \
                or not 0 <= centroid_threshold <= 1:
            raise SemiretError(f"centroid_threshold must be a number from 0 to 1, got {centroid_threshold!r}")
        ndocs = max(k, ndocs or default_ndocs(k))
        segments = self.segments  # one snapshot's, whatever a writer publishes meanwhile
        seg_scores = [np.full((len(queries), min(k, s.n_docs) or 1), -np.inf, np.float32) for s in segments]
        seg_locals = [np.full(scores.shape, -1, np.int64) for scores in seg_scores]
        for position, query in enumerate(queries):
            query = np.ascontiguousarray(query, np.float32)
            if query.ndim != 2 or query.shape[1] != self.dim:
                raise SemiretError(f"a query's token vectors must be a [tokens, {self.dim}] array, got shape "
                                   f"{query.shape}")
            if not len(query):
                continue
            for segment, scores, locals_ in zip(segments, seg_scores, seg_locals):
                scores[position], locals_[position] = segment.search(query, scores.shape[1], nprobe, ndocs,
                                                                     centroid_threshold)
        return self._top_hits(segments, seg_scores, seg_locals, k, len(queries))

    def _document_vectors(self, located: list[tuple[MultiVectorSegment, int]]) -> np.ndarray:
        """Each document's mean token vector: what a diversified search compares documents by."""
        return np.concatenate([segment.mean_vectors([local]) for segment, local in located]) if located else \
            np.zeros((0, self.dim), np.float32)

    def get_vector(self, doc_id: str) -> np.ndarray | None:
        """The live document ``doc_id``'s token vectors as searched (float32 [tokens, dim], decompressed where
        compressed); None when there is no such live document."""
        found = self.locate(doc_id)
        if found is None:
            return None
        segment, local = found
        return segment.token_vectors(segment.rows_of(np.array([local]))[0])

    def holds_token_vectors(self, doc_id: str, vectors: np.ndarray) -> bool:
        """Whether the live document ``doc_id`` holds ``vectors`` (float32 [tokens, dim]) as they were added (in
        float16; compressed, the fingerprint of them it keeps, whichever codec compressed them, a merged shard's
        included; where it keeps none, as its segment's codec would compress them): what a sync leaves as it is."""
        found = self.locate(doc_id)
        if found is None:
            return False
        segment, local = found
        rows = segment.rows_of(np.array([local]))[0]
        if vectors.shape != (len(rows), self.dim):
            return False
        stored = vectors.astype(np.float16)
        if segment.codec is None:
            return bool(np.array_equal(np.asarray(segment.vectors[rows]), stored))
        held = 0 if segment.digests is None else int(segment.digests[local])
        if held:
            return held == int(token_digests(stored, np.array([0, len(stored)]))[0])
        codes, residuals = segment.codec.compress(stored)
        return bool(np.array_equal(codes, segment.codes[rows]) and
                    np.array_equal(residuals, np.asarray(segment.vectors[rows])))

    def _live_batch(self, segment: MultiVectorSegment, live: np.ndarray, ids: list[str],
                    documents: Sequence[Document] | None) -> TokenEmbeddings:
        rows, offsets = segment.rows_of(live)
        if segment.codec is not None:  # as stored: a merge writes the same codes, residuals and fingerprints
            digests = np.zeros(len(live), np.uint64) if segment.digests is None else np.asarray(segment.digests[live])
            return TokenEmbeddings(ids, offsets, None, documents, segment.codes[rows],
                                   np.asarray(segment.vectors[rows]), segment.codec, digests)
        return TokenEmbeddings(ids, offsets, np.asarray(segment.vectors[rows]), documents)

    def _validate(self, batch: TokenEmbeddings) -> None:
        check_token_embeddings(batch, self.dim)

    def _write_segment_files(self, directory: Path, batch: TokenEmbeddings, info: dict) -> None:
        offsets = np.asarray(batch.offsets, np.int64)
        np.save(directory / "offsets.npy", offsets)
        info["centroids"] = info["nbits"] = 0
        parameters = self.meta["parameters"]
        n_tokens = int(offsets[-1])
        codec = None
        if parameters.get("nbits"):  # the batch's own codec, else the index's, else one trained on these vectors
            codec = batch.codec or next((s.codec for s in self.segments if s.codec is not None), None)
        wanted = parameters.get("centroids")
        count = min(wanted, n_tokens // POINTS_PER_CENTROID) if wanted else default_centroids(n_tokens)
        if codec is None and (self.meta["ann"] != "plaid" or count < 2):
            np.save(directory / "tokens.npy", np.ascontiguousarray(batch.float_vectors(), np.float16))
            if self.meta["ann"] == "plaid":
                log.warning("%d token vectors train no centroids (at least %d needed): that segment is searched "
                            "exactly, its vectors kept whole, until a merge makes one large enough", n_tokens,
                            2 * POINTS_PER_CENTROID)
            return
        if wanted and count < wanted and codec is None:
            log.info("%d centroids asked for, %d trained: %d token vectors train at most one per %d", wanted, count,
                     n_tokens, POINTS_PER_CENTROID)
        if parameters.get("nbits"):
            if codec is None:
                codec = ResidualCodec.train(batch.float_vectors(), count, parameters["nbits"])
            coded = batch.coded_by(codec)
            codes, centroids = coded.codes, codec.centroids
            codec.save(directory)
            np.save(directory / "residuals.npy", np.ascontiguousarray(coded.residuals))
            np.save(directory / "digests.npy", np.asarray(coded.vector_digests(), np.uint64))
            info["nbits"] = codec.nbits
        else:
            vectors = np.ascontiguousarray(batch.float_vectors(), np.float16)
            centroids = train_centroids(vectors, count)
            codes = nearest_centroids(vectors, centroids)
            np.save(directory / "tokens.npy", vectors)
        documents = np.repeat(np.arange(len(offsets) - 1, dtype=np.int32), np.diff(offsets))
        pairs = np.unique(codes.astype(np.int64) * (len(offsets) - 1) + documents)  # each (centroid, document) once
        list_offsets = np.searchsorted(pairs // (len(offsets) - 1), np.arange(len(centroids) + 1)).astype(np.int64)
        np.save(directory / "centroids.npy", centroids)
        np.save(directory / "codes.npy", np.asarray(codes, np.int32))
        np.savez(directory / "lists.npz", offsets=list_offsets,
                 documents=(pairs % (len(offsets) - 1)).astype(np.int32))
        info["centroids"] = len(centroids)


def check_ann(ann: str, centroids: int | None, nbits: int | None) -> None:
    """Refuse a search structure, centroid count or residual width a multi-vector index does not take."""
    if ann not in ANN_TYPES:
        raise SemiretError(f"unknown multi-vector search {ann!r} (known: {', '.join(ANN_TYPES)})")
    if centroids is not None and (isinstance(centroids, bool) or not isinstance(centroids, int) or centroids < 2):
        raise SemiretError(f"centroids (--centroids) must be a whole number of at least 2, got {centroids!r}")
    if nbits is not None and (isinstance(nbits, bool) or nbits not in (0, *NBITS)):
        raise SemiretError(f"nbits (--nbits) is one of {', '.join(map(str, NBITS))} (0: vectors kept whole), got "
                           f"{nbits!r}")
    if ann != "plaid" and (centroids is not None or nbits):
        raise SemiretError("centroids and nbits (--centroids, --nbits) are plaid's; exact search keeps every vector "
                           "whole and scores every document")


class ResidualCodec:
    """ColBERTv2's residual compression (Santhanam et al. 2022): a token vector as its nearest centroid's number and
    its residual from it, each dimension in one of ``2^nbits`` buckets cut at the quantiles of a sample's residual
    values, read back as the bucket's value (the quantile at its middle) added to the centroid and scaled to unit
    length."""

    def __init__(self, centroids: np.ndarray, cutoffs: np.ndarray, weights: np.ndarray, nbits: int):
        self.centroids, self.cutoffs, self.weights, self.nbits = centroids, cutoffs, weights, nbits
        digest = hashlib.blake2b(digest_size=8)
        for array in (centroids, cutoffs, weights):
            digest.update(np.ascontiguousarray(array, np.float32).tobytes())
        self.id = digest.hexdigest()
        """What tells codecs apart: a merge copies the codes and residuals of segments of the index's own."""

    @classmethod
    def train(cls, vectors: np.ndarray, count: int, nbits: int, seed: int = 0) -> "ResidualCodec":
        """``count`` centroids of ``vectors`` (:func:`train_centroids`), and the buckets of a seeded sample of their
        residuals."""
        centroids = train_centroids(vectors, count, seed)
        sample = np.sort(np.random.default_rng(seed).choice(len(vectors), min(len(vectors), 65536), replace=False))
        held = np.asarray(vectors[sample], np.float32)
        residuals = (held - centroids[nearest_centroids(held, centroids)]).ravel()
        levels = 2 ** nbits
        cutoffs = np.quantile(residuals, np.arange(1, levels) / levels).astype(np.float32)
        weights = np.quantile(residuals, (np.arange(levels) + 0.5) / levels).astype(np.float32)
        return cls(centroids, cutoffs, weights, nbits)

    @classmethod
    def load(cls, directory: Path, centroids: np.ndarray, nbits: int) -> "ResidualCodec":
        with np.load(directory / "buckets.npz") as buckets:
            return cls(centroids, buckets["cutoffs"].astype(np.float32), buckets["weights"].astype(np.float32), nbits)

    def save(self, directory: Path) -> None:
        """The buckets (the centroids are the segment's ``centroids.npy``)."""
        np.savez(directory / "buckets.npz", cutoffs=self.cutoffs, weights=self.weights)

    def compress(self, vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(codes int32 [n], residuals packed uint8 [n, dim * nbits / 8]) of ``vectors``, a block at a time."""
        codes = nearest_centroids(vectors, self.centroids)
        packed = np.empty((len(vectors), vectors.shape[1] * self.nbits // 8), np.uint8)
        for start in range(0, len(vectors), ASSIGN_BLOCK_TOKENS):
            block = slice(start, start + ASSIGN_BLOCK_TOKENS)
            residuals = np.asarray(vectors[block], np.float32) - self.centroids[codes[block]]
            packed[block] = pack_buckets(np.searchsorted(self.cutoffs, residuals).astype(np.uint8), self.nbits)
        return codes, packed

    def decompress(self, codes: np.ndarray, residuals: np.ndarray) -> np.ndarray:
        """float32 unit rows [n, dim] of ``codes`` and packed ``residuals``."""
        out = np.empty((len(codes), self.centroids.shape[1]), np.float32)
        decompress_into(np.asarray(codes), np.ascontiguousarray(residuals), self.centroids, self.byte_weights, out)
        return out

    @cached_property
    def byte_weights(self) -> np.ndarray:
        """float32 [256, 8 / nbits]: the bucket values each byte of packed residuals stands for."""
        return self.weights[UNPACKED[self.nbits]]


@kernel
def decompress_into(codes, residuals, centroids, byte_weights, out):
    """``out[i]``: centroid ``codes[i]`` plus the values of row ``i``'s packed residual buckets, scaled to unit length,
    in one pass over each row (numpy would write the buckets, their values and the sum as three arrays of the
    candidates' size)."""
    per_byte = byte_weights.shape[1]
    for row in range(codes.shape[0]):
        centroid = centroids[codes[row]]
        total = 0.0
        for j in range(residuals.shape[1]):
            values = byte_weights[residuals[row, j]]
            for t in range(per_byte):
                value = centroid[j * per_byte + t] + values[t]
                out[row, j * per_byte + t] = value
                total += value * value
        scale = 1.0 / max(np.sqrt(total), 1e-12)
        for d in range(out.shape[1]):
            out[row, d] *= scale


def train_centroids(vectors: np.ndarray, count: int, seed: int = 0) -> np.ndarray:
    """float32 [count, dim]: spherical k-means (faiss) of a seeded sample of ``vectors``
    (:data:`TRAINING_POINTS_PER_CENTROID` each; SciFact's 1.2 million MiniLM token vectors, 4,096 centroids: about a
    minute on 2 cores, and as long to assign every vector, :func:`nearest_centroids`)."""
    import faiss

    sample_size = min(len(vectors), count * TRAINING_POINTS_PER_CENTROID)
    sample = np.random.default_rng(seed).choice(len(vectors), sample_size, replace=False) \
        if sample_size < len(vectors) else np.arange(len(vectors))
    progress.report(f"training {count:,} centroids on {sample_size:,} of {len(vectors):,} token vectors")
    points = np.asarray(vectors[np.sort(sample)], np.float32)
    clustering = faiss.Kmeans(points.shape[1], count, niter=KMEANS_ITERATIONS, seed=seed, spherical=True,
                              min_points_per_centroid=1, max_points_per_centroid=TRAINING_POINTS_PER_CENTROID)
    clustering.train(points)
    return np.ascontiguousarray(clustering.centroids, np.float32)


def nearest_centroids(vectors: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """int32 [n]: each vector's centroid of largest inner product (faiss), a block at a time, with a progress bar."""
    import faiss

    codes = np.empty(len(vectors), np.int32)
    blocks = range(0, len(vectors), ASSIGN_BLOCK_TOKENS)
    for start in progress.track(blocks, f"assigning {len(vectors):,} token vectors to {len(centroids):,} centroids",
                                total=len(blocks)):
        block = np.asarray(vectors[start:start + ASSIGN_BLOCK_TOKENS], np.float32)
        codes[start:start + len(block)] = faiss.knn(block, centroids, 1, metric=faiss.METRIC_INNER_PRODUCT)[1][:, 0]
    return codes
