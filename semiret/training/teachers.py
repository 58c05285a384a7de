"""Siamese teachers for distillation: every teacher scores ``s(q, d) = <query vector, document vector>``.

- ``dense``: a bi-encoder (default ``minilm``), normalized embeddings (cosine);
- ``sparse``: a siamese SPLADE model (default ``splade-tiny``) encoding queries and documents;
- ``bm25``: BM25 weights (Lucene IDF, k1/b saturation) as a sparse document matrix, term counts as queries.

The corpus side is encoded once per run and cached in the run folder (``<cache>/<teacher>-<fingerprint>``),
so at training time a teacher's scores for a batch are dot products of cached rows. Query vectors are
cached the same way for a fixed query set (pseudo-queries, training queries). Teachers also mine
candidates: each query's top documents by the teacher's score.
"""

from __future__ import annotations

import hashlib
import json
import logging
from abc import ABC, abstractmethod
from functools import cached_property
from pathlib import Path
from typing import Sequence

import numpy as np
import scipy.sparse as sp

from semiret.data.collection import Document
from semiret.data.packaged import PACKAGED_CHECKPOINTS
from semiret.errors import SemiretError

log = logging.getLogger(__name__)

TEACHER_KINDS = ("dense", "sparse", "sidr", "bm25")
DEFAULT_MODELS = {"dense": "minilm", "sparse": "splade-tiny", "sidr": "sidr-scifact", "bm25": "bm25"}


def fingerprint(*parts) -> str:
    digest = hashlib.sha1()
    for part in parts:
        if isinstance(part, (list, tuple)):
            for item in part:
                digest.update(str(item).encode("utf-8", "replace"))
                digest.update(b"\0")
        else:
            digest.update(str(part).encode("utf-8", "replace"))
        digest.update(b"\1")
    return digest.hexdigest()[:16]


def model_identity(model: str) -> str:
    """What a teacher's cached vectors depend on besides its name: for a local model folder (a path, or a
    packaged checkpoint's short name) a hash of its weight files, so a model retrained or repackaged under the
    same name never reads the vectors of the one before; a registry or hub name stands for itself."""
    for candidate in (Path(model), PACKAGED_CHECKPOINTS / model):
        if candidate.is_dir():
            digest = hashlib.sha1()
            for weights in sorted(candidate.rglob("*.safetensors")):
                digest.update(str(weights.relative_to(candidate)).encode())
                with weights.open("rb") as handle:
                    for block in iter(lambda: handle.read(1 << 22), b""):
                        digest.update(block)
            return digest.hexdigest()[:16]
    return model


def parse_teachers(spec: str | Sequence[str]) -> list[tuple[str, str, int | None]]:
    """``"dense:minilm@128,sparse:splade-tiny,bm25"`` (or a list) -> [(kind, model, max_length)]; ``@N``
    truncates the teacher's inputs to N tokens. An empty list is an error."""
    items = [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec) if s and s.strip()]
    if not items:
        raise SemiretError("the teacher list is empty: give at least one of dense[:model], sparse[:model], bm25")
    teachers = []
    for item in items:
        item, _, length = item.partition("@")
        kind, _, model = item.partition(":")
        if kind not in TEACHER_KINDS:
            raise SemiretError(f"unknown teacher {kind!r} (known: {', '.join(TEACHER_KINDS)})")
        if length and not (length.isdigit() and int(length) >= 2):
            raise SemiretError(f"teacher {item!r}: @{length} is not a token length")
        teachers.append((kind, model or DEFAULT_MODELS[kind], int(length) if length else None))
    return teachers


class Teacher(ABC):
    """Vectors for documents and queries whose inner product is the teacher's score."""

    kind: str
    device: str = "cpu"
    """Where a neural teacher encodes (the student's training device: a corpus pass there, not on the CPU); BM25
    needs none."""

    def __init__(self, model: str, max_length: int | None = None):
        self.model = model
        self.max_length = max_length

    @property
    def name(self) -> str:
        return f"{self.kind}:{self.model}"

    @abstractmethod
    def encode_documents(self, texts: list[str]): ...

    @abstractmethod
    def encode_queries(self, texts: list[str]): ...

    @cached_property
    def _identity(self) -> str:
        """The model's identity in cache keys, hashed once per teacher (its documents and queries share it)."""
        return model_identity(self.model)

    def _cached(self, cache_dir: Path | None, what: str, texts: list[str], ids: list[str], encode):
        if cache_dir is None:
            return encode(texts)
        key = fingerprint(self.name, self._identity, self.max_length, what, ids, texts)
        path = Path(cache_dir) / f"{self.kind}-{what}-{key}"
        dense_file, sparse_file = path.with_suffix(".npy"), path.with_suffix(".npz")
        if dense_file.is_file():
            log.info("teacher %s: %s vectors from %s", self.name, what, dense_file)
            return np.load(dense_file)
        if sparse_file.is_file():
            log.info("teacher %s: %s vectors from %s", self.name, what, sparse_file)
            return sp.load_npz(sparse_file)
        matrix = encode(texts)
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
        if sp.issparse(matrix):
            sp.save_npz(str(sparse_file) + ".tmp.npz", matrix)
            Path(str(sparse_file) + ".tmp.npz").rename(sparse_file)
        else:
            np.save(str(dense_file) + ".tmp.npy", matrix)
            Path(str(dense_file) + ".tmp.npy").rename(dense_file)
        return matrix

    def document_matrix(self, documents: list[Document], cache_dir: Path | None = None):
        return self._cached(cache_dir, "docs", [d.full_text for d in documents], [d.id for d in documents],
                            self.encode_documents)

    def query_matrix(self, query_ids: list[str], texts: list[str], cache_dir: Path | None = None):
        return self._cached(cache_dir, "queries", texts, query_ids, self.encode_queries)


class DenseTeacher(Teacher):
    kind = "dense"

    def __init__(self, model: str = "minilm", max_length: int | None = None):
        super().__init__(model, max_length)
        self._encoder = None

    @property
    def encoder(self):
        if self._encoder is None:
            from semiret.models.encoders import load_encoder

            encoder = load_encoder(self.model, "dense", max_length=self.max_length, normalize=True)
            self._encoder = encoder.to(self.device)
        return self._encoder

    def encode_documents(self, texts):
        return self.encoder.encode_document(texts, show_progress=True).astype(np.float32)

    def encode_queries(self, texts):
        return self.encoder.encode_query(texts, show_progress=len(texts) > 1000).astype(np.float32)


class SparseTeacher(Teacher):
    kind = "sparse"

    def __init__(self, model: str = "splade-tiny", max_length: int | None = None):
        super().__init__(model, max_length)
        self._encoder = None

    @property
    def encoder(self):
        if self._encoder is None:
            from semiret.models.encoders import load_encoder

            self._encoder = load_encoder(self.model, "splade", max_length=self.max_length).to(self.device)
        return self._encoder

    def _csr(self, vectors, excluded) -> sp.csr_matrix:
        matrix = vectors.to_csr()
        if excluded is not None:  # the paper's sparse teacher zeroes special tokens on both sides
            matrix = matrix @ sp.diags((~excluded).astype(np.float32))
        matrix.eliminate_zeros()
        return matrix.tocsr()

    def _excluded(self):
        from semiret.text.wordpiece import WordPieceVocabulary

        from semiret.data.packaged import model_directory

        try:
            return WordPieceVocabulary(str(model_directory(self.model))).excluded_mask
        except SemiretError:
            return None

    def encode_documents(self, texts):
        return self._csr(self.encoder.encode_document(texts, show_progress=True), self._excluded())

    def encode_queries(self, texts):
        return self._csr(self.encoder.encode_query(texts, show_progress=len(texts) > 1000), self._excluded())


class SiDRTeacher(SparseTeacher):
    """Full parametric SiDR, as the ``sidr-full`` retriever scores: the model's query encoder against its document
    encoder, both vocabulary-space vectors (``@N`` cuts the documents)."""

    kind = "sidr"

    def __init__(self, model: str = "sidr-scifact", max_length: int | None = None):
        super().__init__(model, max_length)
        self._sidr = None

    @property
    def sidr(self):
        if self._sidr is None:
            from semiret.models.sidr import SiDRModel

            self._sidr = SiDRModel.load(self.model).to(self.device)
            if self.max_length:
                self._sidr.document_encoder.inputs.max_length = self.max_length
        return self._sidr

    def encode_documents(self, texts):
        return self._csr(self.sidr.document_encoder.encode_document(texts, show_progress=True), None)

    def encode_queries(self, texts):
        return self._csr(self.sidr.query_encoder.encode_query(texts, show_progress=len(texts) > 1000), None)


class BM25Teacher(Teacher):
    """Okapi BM25 (k1=1.5, b=0.75, English stopwords, Snowball), the ``bm25`` retriever's scoring."""

    kind = "bm25"

    def __init__(self, model: str = "bm25", max_length: int | None = None, k1: float = 1.5, b: float = 0.75):
        super().__init__(model, max_length)
        from semiret.text.analyzer import TermDictionary, WordAnalyzer

        self.analyzer, self.terms = WordAnalyzer(stopwords="en", stemmer="english"), TermDictionary()
        self.k1, self.b = k1, b
        self._documents_seen = False

    def _counts(self, texts: list[str], add: bool) -> sp.csr_matrix:
        rows, cols = [], []
        for i, text in enumerate(texts):
            ids = [t for t in self.terms.lookup(self.analyzer(text), add=add) if t is not None and t >= 0]
            rows.extend([i] * len(ids))
            cols.extend(ids)
        shape = (len(texts), max(len(self.terms.terms), 1))
        counts = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=shape)
        counts.sum_duplicates()
        return counts

    def encode_documents(self, texts):
        from semiret.text.bm25 import BM25Parameters
        from semiret.text.token_weights import lucene_idf

        counts = self._counts(texts, add=True)
        self._documents_seen = True
        df = np.bincount(counts.indices, minlength=counts.shape[1])
        weights = BM25Parameters(self.k1, self.b).weights(counts)
        return (weights @ sp.diags(lucene_idf(df, counts.shape[0]).astype(np.float32))).tocsr()

    def document_matrix(self, documents, cache_dir=None):
        # the vocabulary is built from the documents, so this is never cached (it is fast anyway)
        return self.encode_documents([d.full_text for d in documents])

    def query_matrix(self, query_ids, texts, cache_dir=None):
        return self.encode_queries(texts)

    def encode_queries(self, texts):
        if not self._documents_seen:
            raise SemiretError("the BM25 teacher needs the documents before the queries")
        return self._counts(texts, add=False)


TEACHERS = {t.kind: t for t in (DenseTeacher, SparseTeacher, SiDRTeacher, BM25Teacher)}


def make_teacher(kind: str, model: str, max_length: int | None = None, device: str = "cpu") -> Teacher:
    """A teacher of ``kind``; a neural one encodes on ``device``."""
    teacher = TEACHERS[kind](model, max_length)
    teacher.device = device
    return teacher


def _rows_dot(queries, documents, query_rows: np.ndarray, doc_rows: np.ndarray) -> np.ndarray:
    """``<queries[query_rows[i]], documents[doc_rows[i, c]]>`` -> [N, C]."""
    n, c = doc_rows.shape
    if sp.issparse(documents):
        q = queries[query_rows]  # [N, V] sparse
        d = documents[doc_rows.ravel()]  # [N*C, V]
        q_rep = q[np.repeat(np.arange(n), c)]
        return np.asarray(q_rep.multiply(d).sum(axis=1), np.float32).reshape(n, c)
    q = np.asarray(queries[query_rows], np.float32)
    d = np.asarray(documents[doc_rows.ravel()], np.float32).reshape(n, c, -1)
    return np.einsum("nh,nch->nc", q, d)


class TeacherScores:
    """One teacher's cached query and document matrices over a fixed corpus and query set."""

    def __init__(self, teacher: Teacher, documents: list[Document], query_ids: list[str], query_texts: list[str],
                 cache_dir: Path | None = None):
        self.teacher = teacher
        self.documents = teacher.document_matrix(documents, cache_dir)
        self.queries = teacher.query_matrix(query_ids, query_texts, cache_dir)
        self.query_row = {q: i for i, q in enumerate(query_ids)}

    def scores(self, query_ids: Sequence[str], doc_rows: np.ndarray) -> np.ndarray:
        rows = np.fromiter((self.query_row[q] for q in query_ids), np.int64, len(query_ids))
        return _rows_dot(self.queries, self.documents, rows, np.asarray(doc_rows))

    def top(self, k: int, chunk: int = 512) -> np.ndarray:
        """Each query's ``k`` best document rows [Q, k], best first."""
        n_queries, n_docs = self.queries.shape[0], self.documents.shape[0]
        k = min(k, n_docs)
        out = np.empty((n_queries, k), np.int64)
        docs_t = self.documents.T.tocsr() if sp.issparse(self.documents) else self.documents.T
        for lo in range(0, n_queries, chunk):
            block = self.queries[lo: lo + chunk] @ docs_t
            block = block.toarray() if sp.issparse(block) else np.asarray(block)
            part = np.argpartition(-block, k - 1, axis=1)[:, :k]
            order = np.argsort(-np.take_along_axis(block, part, 1), axis=1, kind="stable")
            out[lo: lo + chunk] = np.take_along_axis(part, order, 1)
        return out


def describe(teachers: Sequence[Teacher]) -> list[str]:
    return [t.name for t in teachers]


def run_teachers(spec: str | Sequence[str], output: Path, cache: str | None, device) -> tuple[list[Teacher], Path]:
    """A training run's teachers from ``spec`` (:func:`parse_teachers`), neural ones encoding on ``device``, their
    list recorded in ``output/teachers.json`` by the main process; and the folder their cached vectors go to
    (``cache``, else ``output/teachers``: a shared one lets runs and recipes reuse each other's vectors)."""
    from semiret.training.distributed import is_main_process

    teachers = [make_teacher(kind, model, length, str(device)) for kind, model, length in parse_teachers(spec)]
    if is_main_process():
        write_manifest(output, teachers)
    return teachers, Path(cache) if cache else Path(output) / "teachers"


def write_manifest(cache_dir: Path, teachers: Sequence[Teacher]) -> None:
    Path(cache_dir).mkdir(parents=True, exist_ok=True)
    (Path(cache_dir) / "teachers.json").write_text(json.dumps(describe(teachers)))
