"""Retrievers with neural encoders, registered beside the lexical ones:

- ``splade``: siamese SPLADE, the same model encodes documents (into an ``impact`` index) and queries;
- ``inference-free``: SPLADE documents, queries only tokenized and weighted by IDF (``idf`` retriever's
  query side): no model on the query path;
- ``dense``: a bi-encoder into a dense index (exact, or faiss flat / IVF / HNSW).

The encoder is recorded in the index's ``meta.json`` (``analyzer``) and loaded when first needed, so
``inference-free`` searches never import torch, and an index built by ``splade`` serves both.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import numpy as np

from semiret.errors import SemiretError
from semiret.models.checkpoints import (
    INFERENCE_FREE, inference_free_document_threshold, inference_free_token_weights, resolve_inference_free,
)
from semiret.indexes.dense import DenseIndex
from semiret.types import Embeddings, SearchHits, SparseQuery
from semiret.search.retrievers import DEFAULT_MIN_IDF, RETRIEVERS, IDFRetriever, Retriever
from semiret.text.wordpiece import WordPieceVocabulary

INFERENCE_FREE_MODEL = INFERENCE_FREE.default
"""The default document model of ``inference-free``: the packaged trained checkpoint."""

ENCODE_BATCH_SIZE = 32


def encoder_config(family: str, model: str, max_length: int | None, **extra) -> dict:
    """The ``analyzer`` entry of an index made by an encoder (a model directory is stored as an absolute path)."""
    if Path(model).is_dir():
        model = str(Path(model).resolve())
    return {"type": "encoder", "family": family, "model": model, "max_length": max_length, **extra}


def load_configured_encoder(config: dict, **overrides):
    from semiret.models.encoders import load_encoder

    options = {k: v for k, v in config.items() if k not in ("type", "family", "model", "top_k", "threshold")}
    return load_encoder(config["model"], config["family"], **options, **overrides)


def check_encoder_index(index, family: str) -> dict:
    config = index.meta["analyzer"]
    if config.get("type") != "encoder" or config.get("family") != family:
        raise SemiretError(f"{index.path} was not built with a {family} encoder")
    return config


class SpladeDocuments:
    """Document side shared by ``splade`` and ``inference-free``: SPLADE vectors, optionally pruned
    (``top_k`` per document, ``threshold``), into an ``impact`` index (float32 or 8-bit weights)."""

    index_kind: ClassVar[str] = "impact"
    build_batch_size: ClassVar[int] = 1024
    build_parameters: ClassVar[tuple[str, ...]] = ("model", "max_length", "encode_batch_size", "top_k", "threshold",
                                                   "quantize_bits")
    config: dict
    encode_batch_size: int
    quantize_bits: int | None = None
    _document_encoder = None

    @property
    def document_encoder(self):
        if self._document_encoder is None:
            self._document_encoder = load_configured_encoder(self.config)
        return self._document_encoder

    def encode_documents(self, documents):
        vectors = self.document_encoder.encode_document([d.full_text for d in documents],
                                                        batch_size=self.encode_batch_size, show_progress=False)
        if self.config.get("top_k") is not None or self.config.get("threshold") is not None:
            vectors = vectors.prune(self.config.get("top_k"), self.config.get("threshold"))
        return vectors.to_postings([d.id for d in documents], documents)

    def _index_options(self) -> dict:
        return {"vocab_size": self.document_encoder.vocab_size, "analyzer": self.config,
                "quantize_bits": self.quantize_bits}

    @staticmethod
    def splade_builder_state(model: str, max_length: int | None, top_k: int | None, threshold: float | None,
                             quantize_bits: int | None) -> dict:
        from semiret.models.encoders import load_encoder

        model = resolve_inference_free(model)  # packaged short names of trained inference-free models
        encoder = load_encoder(model, "splade", max_length=max_length)
        config = encoder_config("splade", model, encoder.max_length, top_k=top_k, threshold=threshold)
        return {"config": config, "encoder": encoder, "quantize_bits": quantize_bits}


class SpladeRetriever(SpladeDocuments, Retriever):
    """Siamese SPLADE: queries are encoded by the document model (batched)."""

    name = "splade"
    search_parameters = ("encode_batch_size",)

    def __init__(self, index, config: dict, encoder=None, encode_batch_size: int = ENCODE_BATCH_SIZE,
                 quantize_bits: int | None = None):
        super().__init__(index)
        self.config, self._document_encoder = config, encoder
        self.encode_batch_size, self.quantize_bits = encode_batch_size, quantize_bits

    @classmethod
    def _builder(cls, model: str = "splade-tiny", max_length: int | None = None,
                 encode_batch_size: int = ENCODE_BATCH_SIZE, top_k: int | None = None,
                 threshold: float | None = None, quantize_bits: int | None = None):
        state = cls.splade_builder_state(model, max_length, top_k, threshold, quantize_bits)
        return cls(None, state["config"], state["encoder"], encode_batch_size, state["quantize_bits"])

    @classmethod
    def _from_index(cls, index, encode_batch_size: int = ENCODE_BATCH_SIZE):
        return cls(index, check_encoder_index(index, "splade"), encode_batch_size=encode_batch_size)

    def encode_queries(self, texts: list[str]) -> list[SparseQuery]:
        return self.document_encoder.encode_query(texts, batch_size=self.encode_batch_size).to_queries()

    def encode_query(self, text: str) -> SparseQuery:
        return self.encode_queries([text])[0]


class InferenceFreeRetriever(SpladeDocuments, IDFRetriever):
    """SPLADE documents; queries weighted by IDF only (``idf``: 'corpus' or a JSON table), as in the
    inference-free paper. Opens indexes built by ``splade`` too: same document vectors."""

    name = "inference-free"

    def __init__(self, index, config: dict, vocabulary: WordPieceVocabulary, idf: str | Path = "corpus",
                 encoder=None, encode_batch_size: int = ENCODE_BATCH_SIZE, quantize_bits: int | None = None,
                 two_phase=None, min_idf: float = DEFAULT_MIN_IDF):
        IDFRetriever.__init__(self, index, vocabulary, idf, two_phase, min_idf)
        self.config, self._document_encoder = config, encoder
        self.encode_batch_size, self.quantize_bits = encode_batch_size, quantize_bits

    @classmethod
    def compatible_kinds(cls):
        return ("impact",)

    @classmethod
    def _builder(cls, model: str = INFERENCE_FREE_MODEL, max_length: int | None = None,
                 encode_batch_size: int = ENCODE_BATCH_SIZE, top_k: int | None = None,
                 threshold: float | None = None, quantize_bits: int | None = None):
        """``model`` defaults to the packaged trained model (``splade-tiny`` gives untrained SPLADE vectors);
        ``threshold`` to the one recorded with a trained model (0 keeps every weight)."""
        if threshold is None:
            threshold = inference_free_document_threshold(model)
        state = cls.splade_builder_state(model, max_length, top_k, threshold, quantize_bits)
        return cls(None, state["config"], WordPieceVocabulary(state["config"]["model"]), encoder=state["encoder"],
                   encode_batch_size=encode_batch_size, quantize_bits=state["quantize_bits"])

    @classmethod
    def _from_index(cls, index, idf: str | Path | None = None, two_phase=None, min_idf: float = DEFAULT_MIN_IDF):
        """``idf`` defaults to the table a trained inference-free model was saved with, else the corpus IDF."""
        config = check_encoder_index(index, "splade")
        if idf is None:
            idf = inference_free_token_weights(config["model"]) or "corpus"
        return cls(index, config, WordPieceVocabulary(config["model"]), idf, two_phase=two_phase, min_idf=min_idf)


class DenseRetriever(Retriever):
    """A dense bi-encoder (``model``, default ``minilm``) over a dense index (``ann``: exact, flat, ivf, hnsw)."""

    name = "dense"
    index_kind = "dense"
    index_class = DenseIndex
    build_batch_size = 1024
    build_parameters = ("model", "max_length", "encode_batch_size", "precision", "ann", "nlist", "hnsw_m")
    search_parameters = ("encode_batch_size", "nprobe", "ef_search")

    def __init__(self, index, config: dict, encoder=None, encode_batch_size: int = ENCODE_BATCH_SIZE,
                 ann_options: dict | None = None, nprobe: int = 16, ef_search: int = 128):
        super().__init__(index)
        self.config, self._encoder = config, encoder
        self.encode_batch_size, self.ann_options = encode_batch_size, ann_options or {}
        self.nprobe, self.ef_search = nprobe, ef_search

    @property
    def encoder(self):
        if self._encoder is None:
            self._encoder = load_configured_encoder(self.config)
        return self._encoder

    @classmethod
    def _builder(cls, model: str = "minilm", max_length: int | None = None,
                 encode_batch_size: int = ENCODE_BATCH_SIZE, precision: str | None = None, ann: str = "exact",
                 nlist: int | None = None, hnsw_m: int | None = None):
        from semiret.models.encoders import load_encoder

        encoder = load_encoder(model, "dense", max_length=max_length, precision=precision)
        config = encoder_config("dense", model, encoder.max_length, precision=encoder.precision)
        ann_options = {"ann": ann, "nlist": nlist, **({"hnsw_m": hnsw_m} if hnsw_m else {})}
        return cls(None, config, encoder, encode_batch_size, ann_options)

    @classmethod
    def _from_index(cls, index, encode_batch_size: int = ENCODE_BATCH_SIZE, nprobe: int = 16, ef_search: int = 128):
        return cls(index, check_encoder_index(index, "dense"), encode_batch_size=encode_batch_size,
                   nprobe=nprobe, ef_search=ef_search)

    def _index_options(self) -> dict:
        return {"dim": self.encoder.dim, "analyzer": self.config, **self.ann_options}

    def encode_documents(self, documents) -> Embeddings:
        vectors = self.encoder.encode_document([d.full_text for d in documents], batch_size=self.encode_batch_size,
                                               show_progress=False)
        return Embeddings([d.id for d in documents], vectors, documents)

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        return self.encoder.encode_query(texts, batch_size=self.encode_batch_size)

    def encode_query(self, text: str) -> np.ndarray:
        return self.encode_queries([text])[0]

    def search(self, queries: list[str], k: int = 10, n_threads: int = 1) -> SearchHits:
        return self.index.search(self.encode_queries(queries), k=k, n_threads=n_threads, nprobe=self.nprobe,
                                 ef_search=self.ef_search)


RETRIEVERS.update({r.name: r for r in (SpladeRetriever, InferenceFreeRetriever, DenseRetriever)})
