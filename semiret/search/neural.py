"""Sides with neural encoders, and the retrievers they make:

- ``splade``: siamese SPLADE, the same model encodes documents (into an ``impact`` index) and queries;
- ``inference-free``: SPLADE documents, queries only tokenized and weighted by IDF (the ``idf`` query side):
  no model on the query path;
- ``dense``: a bi-encoder into a dense index (exact, or faiss flat / IVF / HNSW).

The encoder is recorded in the index's ``meta.json`` (``analyzer``) and loaded when first needed, so
``inference-free`` searches never import torch, and an index built by ``splade`` serves both.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from functools import cached_property
from typing import ClassVar

import numpy as np

from semiret.clustering.kmeans import unit_rows
from semiret.data.packaged import model_directory
from semiret.errors import SemiretError
from semiret.indexes.dense import DenseIndex, check_tree_branching
from semiret.indexes.tree_ann import BEAM
from semiret.models.checkpoints import (INFERENCE_FREE, check_adapted_corpus, encoder_family,
                                        inference_free_document_threshold, inference_free_lexical_prior,
                                        inference_free_token_weights, located, model_reference,
                                        resolve_inference_free, sentence_transformers_normalizes,
                                        token_weights_fingerprint)
from semiret.search.feedback import VectorFeedbackOptions
from semiret.search.lexical import IDFQueries
from semiret.text.bm25 import LexicalPrior
from semiret.search.retrievers import DocumentSide, QuerySide, Retriever, register_retriever
from semiret.types import Embeddings

ENCODE_BATCH_SIZE = 32


def batch_size_field():
    """``encode_batch_size``, the ``--batch-size`` flag shared by every encoder side."""
    return field(default=ENCODE_BATCH_SIZE, metadata={"flag": "--batch-size"})


def encoder_config(family: str, model: str, max_length: int | None, loaded=None, **extra) -> dict:
    """The ``analyzer`` entry of an index made by an encoder (a model directory is stored as an absolute path, a
    packaged checkpoint by its name: :func:`model_reference`; with the ``loaded`` model, its weights' fingerprint,
    which :func:`check_weights` compares)."""
    model = model_reference(model)
    if loaded is not None:
        from semiret.models.base import weights_fingerprint

        extra["weights"] = weights_fingerprint(loaded)
    return {"type": "encoder", "family": family, "model": model, "max_length": max_length, **extra}


def check_weights(config: dict, module, where, recorded_as: str = "weights", model: str | None = None) -> None:
    """Refuse a model loaded for the index at ``where`` whose weights are not those recorded when it was built
    (``config[recorded_as]``; the model directory retrained or replaced since): its queries or new documents would
    be matched against vectors of the old weights. ``module``: the model, or its weights' fingerprint. ``model``: the
    model's name, if not ``config``'s. Indexes from before weights were recorded are not checked."""
    recorded = config.get(recorded_as)
    if recorded is None:
        return
    from semiret.models.base import weights_fingerprint

    now = module if isinstance(module, str) else weights_fingerprint(module)
    if now != recorded:
        raise SemiretError(f"{where} was built with other weights than {model or config['model']} holds now "
                           f"(fingerprint {recorded} then, {now} now: retrained or replaced since): rebuild the index "
                           "with this model (--overwrite), or give it the model files it was built with")


def check_encoder_index(index, family: str) -> dict:
    config = index.meta["analyzer"]
    if config.get("type") != "encoder" or config.get("family") != family:
        built = (f"{config.get('family')} model {config.get('model')}" if config.get("type") == "encoder"
                 else f"the {config.get('type')} analyzer")
        raise SemiretError(f"{index.path} was not built with a {family} encoder but with {built}"
                           + (f" (search it as {index.meta['retriever']}: without -r)"
                              if index.meta.get("retriever") else ""))
    return config


NOT_ENCODER_OPTIONS = ("type", "family", "model", "top_k", "threshold", "lexical_prior", "weights", "query_weights")
"""The entries of an encoder's ``analyzer`` record that are not options its encoder loads with: what the index
does with the vectors, and the fingerprints it checks."""


LOADING_ONCE = threading.RLock()
"""Held while a searcher loads what it loads at its first use (an encoder, a model, a tokenizer), so that threads
searching at once (a server's first requests, a learned ranking's feature searches) load it once; models load one
at a time in a process anyway. Reentrant: a loaded model's check may load another."""


class loaded_once(cached_property):
    """``functools.cached_property`` computed under :data:`LOADING_ONCE`: once, however many threads ask at once
    (Python 3.12 dropped the lock cached_property held)."""

    def __get__(self, instance, owner=None):
        if instance is None or self.attrname in instance.__dict__:
            return super().__get__(instance, owner)
        with LOADING_ONCE:
            return super().__get__(instance, owner)


class EncoderDocuments(DocumentSide):
    """A document side whose encoder is recorded in the index and loaded on first use."""

    family: str

    index_path: str = ""

    def __init__(self, config: dict, encoder=None, encode_batch_size: int = ENCODE_BATCH_SIZE):
        self.config, self._encoder, self.encode_batch_size = config, encoder, encode_batch_size

    @classmethod
    def from_index(cls, index):
        side = cls(check_encoder_index(index, cls.family))
        side.index_path = str(index.path)
        return side

    @property
    def encoder(self):
        """The recorded encoder, loaded at first use: once, however many threads search at once (a server's first
        searches, a learned ranking's feature searches)."""
        if self._encoder is None:
            with LOADING_ONCE:
                if self._encoder is None:
                    encoder = self._load_encoder()
                    self.check_encoder(encoder)
                    self._encoder = encoder
        return self._encoder

    def _load_encoder(self):
        """The encoder the index records, loaded."""
        from semiret.models.encoders import load_encoder

        options = {k: v for k, v in self.config.items() if k not in NOT_ENCODER_OPTIONS}
        return load_encoder(located(self.config["model"]), self.config["family"], **options)

    def check_encoder(self, encoder) -> None:
        """Refuse a loaded encoder that does not fit the index (before it encodes anything)."""
        check_weights(self.config, encoder, self.index_path)

    def prepare(self, documents):
        check_adapted_corpus(located(self.config["model"]), documents)

    def encode_texts(self, documents):
        return self.encoder.encode_document([d.full_text for d in documents], batch_size=self.encode_batch_size,
                                            show_progress=False)


# ---------------------------------------------------------------------------------------------- SPLADE
@dataclass
class SpladeDocumentOptions:
    model: str = "splade-tiny"
    """Model: a registry name (splade-tiny, minilm), a packaged trained model (inference-free-scifact,
    sidr-scifact), a directory or a hub id; each retriever has its own default."""
    max_length: int | None = None
    """Truncate documents to this many tokens (default: the model's)."""
    encode_batch_size: int = batch_size_field()
    """Texts per encoder batch."""
    top_k: int | None = None
    """Keep each document's k heaviest terms."""
    threshold: float | None = None
    """Drop document term weights below this."""
    quantize_bits: int | None = None
    """Store document term weights in this many bits (8), not as float32."""


class SpladeDocuments(EncoderDocuments):
    """SPLADE vectors, optionally pruned (``top_k`` per document, ``threshold``), into an ``impact`` index."""

    Options = SpladeDocumentOptions
    family = "splade"
    index_kind = "impact"
    batch_size = 1024

    quantize_bits: int | None = None

    @classmethod
    def create(cls, options: SpladeDocumentOptions):
        from semiret.models.encoders import load_encoder

        model = resolve_inference_free(options.model)  # packaged short names of trained inference-free models
        encoder = load_encoder(model, "splade", max_length=options.max_length)
        table = inference_free_token_weights(model)  # what the `inference-free` query side of this index reads
        config = encoder_config("splade", model, encoder.max_length, encoder, top_k=options.top_k,
                                threshold=options.threshold,
                                **({"query_weights": token_weights_fingerprint(table)} if table else {}))
        side = cls(config, encoder, options.encode_batch_size)
        side.quantize_bits = options.quantize_bits
        return side

    def index_config(self) -> dict:
        return {"vocab_size": self.encoder.vocab_size, "analyzer": self.config, "quantize_bits": self.quantize_bits}

    def vectors(self, documents):
        """The documents' SPLADE vectors, pruned as the index was configured."""
        vectors = self.encode_texts(documents)
        if self.config.get("top_k") is not None or self.config.get("threshold") is not None:
            vectors = vectors.prune(self.config.get("top_k"), self.config.get("threshold"))
        return vectors

    def encode(self, documents):
        return self.vectors(documents).to_postings([d.id for d in documents], documents)


@dataclass
class InferenceFreeDocumentOptions(SpladeDocumentOptions):
    model: str = INFERENCE_FREE.default
    """Document encoder: a trained inference-free model (default: the packaged one), or any SPLADE model
    (splade-tiny gives untrained vectors)."""
    threshold: float | None = None
    """Drop document term weights below this (default: the threshold recorded with a trained model; 0 keeps
    every weight)."""
    lexical_prior: float | None = None
    """Add this weight times BM25 over each document's own tokens to its learned weights (default: the weight
    the model was trained with, none for untrained models; 0: none)."""
    lexical_prior_stems: bool | None = None
    """The prior also credits each document word's stem variants among whole-word tokens (default: as the
    model was trained)."""


class InferenceFreeDocuments(SpladeDocuments):
    """SPLADE documents pruned at the threshold the trained model recorded (unless one is given), plus the
    model's lexical prior (:class:`~semiret.text.bm25.LexicalPrior`) when it has one."""

    Options = InferenceFreeDocumentOptions

    @classmethod
    def create(cls, options: InferenceFreeDocumentOptions):
        if options.threshold is None:
            options.threshold = inference_free_document_threshold(options.model)
        recorded = inference_free_lexical_prior(options.model) or {}
        weight = recorded.get("weight", 0.0) if options.lexical_prior is None else options.lexical_prior
        side = super().create(options)
        if weight:
            shape = {k: recorded[k] for k in ("k1", "b", "stems") if k in recorded}
            if options.lexical_prior_stems is not None:
                shape["stems"] = options.lexical_prior_stems
            side.config["lexical_prior"] = LexicalPrior(weight, **shape).config()
        return side

    @property
    def prior(self) -> LexicalPrior | None:
        return LexicalPrior.from_config(self.config.get("lexical_prior"))

    def prepare(self, documents):
        super().prepare(documents)
        prior = self.prior
        if prior is not None and prior.avgdl is None:  # the corpus's mean length, kept for later adds
            self.config["lexical_prior"] = prior.fit(self.vocabulary, [d.full_text for d in documents]).config()

    @loaded_once
    def vocabulary(self):
        from semiret.text.wordpiece import WordPieceVocabulary

        return WordPieceVocabulary(self.encoder.tokenizer_source)

    def vectors(self, documents):
        vectors = super().vectors(documents)
        prior = self.prior
        if prior is None:
            return vectors
        from semiret.models.sparse import SparseVectors

        added = prior.vectors(self.vocabulary, [d.full_text for d in documents])
        return SparseVectors.from_csr(vectors.to_csr() + added)


@dataclass
class EncoderQueryOptions:
    encode_batch_size: int = batch_size_field()
    """Texts per encoder batch."""


class SiameseQueries(QuerySide):
    """Queries encoded by the index's own model: the document side's, loaded once for both sides."""

    Options = EncoderQueryOptions
    family: ClassVar[str]

    def __init__(self, documents, options):
        self.documents, self.options = documents, options

    @classmethod
    def reads(cls, index) -> bool:
        analyzer = index.meta["analyzer"]
        return analyzer.get("type") == "encoder" and analyzer.get("family") == cls.family

    @classmethod
    def open(cls, index, options, documents):
        check_encoder_index(index, cls.family)
        return cls(documents, options)


class SpladeQueries(SiameseQueries):
    """Queries encoded (in batches) by the index's own SPLADE model."""

    family = "splade"
    searches_postings = True

    def encode_queries(self, texts):
        return self.documents.encoder.encode_query(texts, batch_size=self.options.encode_batch_size).to_queries()


@register_retriever
class SpladeRetriever(Retriever):
    """Siamese SPLADE: queries are encoded by the document model."""

    name = "splade"
    model_kinds = ("splade", "inference-free")
    documents = SpladeDocuments
    queries = SpladeQueries


@register_retriever
class InferenceFreeRetriever(Retriever):
    """SPLADE documents; queries only tokenized and weighted by IDF (default: the table the model was trained
    with), as in the inference-free paper. Opens indexes built by ``splade`` too: same document vectors."""

    name = "inference-free"
    model_kinds = ("inference-free", "splade")
    documents = InferenceFreeDocuments
    queries = IDFQueries


# ---------------------------------------------------------------------------------------------- dense
@dataclass
class AnnOptions:
    """How a dense index searches its vectors: what the dense and vectors retrievers build with."""

    ann: str = "exact"
    """Dense search structure: exact, flat, ivf, hnsw, tree (beam descent over a k-means tree of the corpus),
    binary (one bit a dimension in memory, compared by Hamming distance, candidates re-scored exactly, --rescore) or
    faiss:FACTORY, a FAISS index_factory string (faiss:IVF256,PQ16, faiss:HNSW32,SQ8: compressed codes, candidates
    re-scored exactly, --rescore). (colbert: plaid or exact.)"""
    nlist: int | None = None
    """IVF lists (--ann ivf; default 4 sqrt(N))."""
    hnsw_m: int | None = None
    """HNSW graph degree (--ann hnsw; default 32)."""
    tree_branching: int | None = None
    """Branching factor of the corpus tree (--ann tree; default: the smallest power of two giving depth 3).
    Smaller gives smaller lowest clusters and a finer choice of what a search scans (better recall for the
    same share scanned: docs/results.md, tree ANN) at a slower build."""

    def __post_init__(self) -> None:
        for name, least in (("nlist", 1), ("hnsw_m", 2)):
            value = getattr(self, name)
            if value is not None and value < least:
                raise SemiretError(f"{name} (--{name.replace('_', '-')}) must be at least {least}, got {value}")
        check_tree_branching(self.tree_branching)
        if self.ann.startswith("faiss:") and (self.nlist is not None or self.hnsw_m is not None):
            raise SemiretError("a FAISS factory string names its own sizes (faiss:IVF256,PQ16, faiss:HNSW32,SQ8): "
                               "--nlist and --hnsw-m set those of --ann ivf and hnsw")

    def index_options(self) -> dict:
        """The options as the dense index records them."""
        return {"ann": self.ann, "nlist": self.nlist, "tree_branching": self.tree_branching,
                **({"hnsw_m": self.hnsw_m} if self.hnsw_m is not None else {})}


@dataclass
class DenseDocumentOptions(AnnOptions):
    model: str = "minilm"
    """Bi-encoder: a registry name (minilm), a directory or a hub id."""
    max_length: int | None = None
    """Truncate documents to this many tokens (default: the model's)."""
    encode_batch_size: int = batch_size_field()
    """Texts per encoder batch."""
    precision: str | None = None
    """Dense encoder arithmetic: float32, bfloat16 or auto (default: bfloat16 where the CPU computes it natively,
    about twice as fast; a text's vector then depends slightly on the batch it is encoded in, up to about 1e-3 a
    component, so a document added later or encoded again can score a little differently; float32 does not)."""
    query_prompt: str | None = None
    """Text put before each query (default: the query prompt of the model's sentence-transformers config, as E5's
    "query: "; "" for none). The index records both prompts: its queries and added documents are read alike."""
    document_prompt: str | None = None
    """Text put before each document (default: the model's document, passage or corpus prompt; "" for none)."""
    truncate_dim: int | None = None
    """Keep the first dimensions of each embedding (a Matryoshka model's, as sentence-transformers' truncate_dim:
    smaller vectors, faster search), normalised again where the model normalises; queries alike (default: all)."""


class DenseDocuments(EncoderDocuments):
    """Pooled embeddings into a ``dense`` index."""

    Options = DenseDocumentOptions
    family = "dense"
    index_kind = "dense"
    index_class = DenseIndex
    batch_size = 1024

    ann_options: dict = {}
    index_dim: int | None = None

    @classmethod
    def from_index(cls, index):
        side = super().from_index(index)
        side.index_dim = index.meta["dim"]
        if "query_prompt" not in side.config:  # an index from before prompts and similarities were read
            side.config = {**_as_read_before_prompts(side.config["model"]), **side.config}
        return side

    def check_encoder(self, encoder) -> None:
        """An index of vectors of another dimension than its recorded encoder's (the model directory replaced by
        another model since it was built) is refused before any query or document is encoded."""
        if self.index_dim is not None and encoder.dim != self.index_dim:
            raise SemiretError(f"{self.index_path} holds {self.index_dim}-dimensional vectors but its encoder "
                               f"{self.config['model']} gives {encoder.dim}: rebuild the index with this encoder")
        super().check_encoder(encoder)

    @classmethod
    def create(cls, options: DenseDocumentOptions):
        from semiret.models.encoders import load_encoder

        encoder = load_encoder(options.model, "dense", max_length=options.max_length, precision=options.precision,
                               query_prompt=options.query_prompt, document_prompt=options.document_prompt,
                               truncate_dim=options.truncate_dim)
        config = encoder_config("dense", options.model, encoder.max_length, encoder,
                                precision=encoder.requested_precision, query_prompt=encoder.prompts["query"],
                                document_prompt=encoder.prompts["document"], normalize=encoder.normalize,
                                **({"truncate_dim": encoder.truncate_dim} if encoder.truncate_dim else {}))
        side = cls(config, encoder, options.encode_batch_size)
        side.ann_options = options.index_options()
        return side

    def index_config(self) -> dict:
        return {"dim": self.encoder.dim, "analyzer": self.config, **self.ann_options}

    def encode(self, documents) -> Embeddings:
        return Embeddings([d.id for d in documents], self.encode_texts(documents), documents)


def _as_read_before_prompts(model: str) -> dict:
    """How semiret read a dense index's model before it read its sentence-transformers prompts and similarity (the
    sixty-sixth session): no prompts, and a model folder's vectors normalised only where a ``Normalize`` module ends
    it (a saved encoder records its own); so that its queries and added documents are read as its documents were."""
    read = {"query_prompt": "", "document_prompt": ""}
    if encoder_family(located(model)) is None:  # a model folder or hub id, not a saved encoder
        try:
            normalizes = sentence_transformers_normalizes(model_directory(located(model)))
        except SemiretError:  # not available here: loading it will say so
            normalizes = None
        if normalizes is not None:
            read["normalize"] = normalizes
    return read


MAX_RESCORE = 100
"""The most candidates per hit a search re-scores (``rescore``): more reads the whole index, as exact search does."""


@dataclass
class AnnSearchOptions(VectorFeedbackOptions):
    """How far an approximate dense search looks, and its pseudo-relevance feedback: what the dense and vectors
    retrievers search with."""

    nprobe: int = 16
    """IVF lists searched per query (--ann ivf, or a faiss:FACTORY with IVF); colbert's: centroids each query token
    vector takes candidates from (--ann plaid)."""
    ef_search: int = 128
    """HNSW candidate list size (--ann hnsw, or a faiss:FACTORY with HNSW)."""
    beam: int = BEAM
    """Tree clusters kept at each level of the descent (--ann tree): wider finds more, scores more."""
    rescore: int | None = None
    """Candidates per hit a faiss search fetches and scores again exactly with the stored vectors (--ann binary or
    faiss:FACTORY; default: 4 where its codes are lossy, binary, PQ or SQ; 1: faiss's approximate scores, or binary's
    best k alone re-scored)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("nprobe", "ef_search", "beam", "rescore"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise SemiretError(f"{name} (--{name.replace('_', '-')}) must be at least 1, got {getattr(self, name)}")
        if self.rescore is not None and self.rescore > MAX_RESCORE:
            raise SemiretError(f"rescore (--rescore) fetches that many candidates per hit: at most {MAX_RESCORE}, got "
                               f"{self.rescore}")

    def search(self, index, vectors, k: int, n_threads: int):
        """``index``'s search of the query ``vectors`` (a matrix) with these options; with ``prf_depth``, a first
        search's best documents' vectors (as the index holds them, read at once) move each query, searched again."""
        if self.prf_depth:
            first = self._searched(index, vectors, self.prf_depth, n_threads)
            held = index.get_vectors([doc_id for ids in first.ids for doc_id in ids if doc_id])  # (in one read)
            feedback = [np.array([held[doc_id] for doc_id in ids if doc_id in held],  # (one deleted since: left out)
                                 np.float32).reshape(-1, vectors.shape[1]) for ids in first.ids]
            vectors = self.moved(vectors, feedback)
        return self._searched(index, vectors, k, n_threads)

    def _searched(self, index, vectors, k: int, n_threads: int):
        return index.search(vectors, k=k, n_threads=n_threads, nprobe=self.nprobe, ef_search=self.ef_search,
                            beam=self.beam, rescore=self.rescore)


@dataclass
class DenseQueryOptions(AnnSearchOptions):
    encode_batch_size: int = batch_size_field()
    """Texts per encoder batch."""


class DenseQueries(SiameseQueries):
    """Queries embedded by the index's own encoder; exact or ANN search by inner product."""

    Options = DenseQueryOptions
    family = "dense"
    searches_vectors = True

    def encode_queries(self, texts):
        return self.documents.encoder.encode_query(texts, batch_size=self.options.encode_batch_size)

    def search(self, index, texts, k, n_threads):
        if are_vectors(texts):  # vectors made elsewhere, read as the encoder's own queries are: normalised alike
            normalize = self.documents.config.get("normalize")
            vectors = given_vectors(texts, index, self.documents.encoder.normalize if normalize is None else normalize)
        else:
            vectors = self.encode_queries(texts)
        return self.options.search(index, vectors, k, n_threads)


def are_vectors(queries: list) -> bool:
    """Whether a search's queries are vectors (:func:`~semiret.data.collection.query_vectors`), not texts."""
    return bool(queries) and isinstance(queries[0], np.ndarray)


def given_vectors(vectors: list[np.ndarray], index, normalize: bool) -> np.ndarray:
    """Query vectors a search was given as the matrix a dense ``index`` searches: each of its dimension (else a clear
    error), scaled to unit length where ``normalize`` (a cosine similarity; a zero vector then finds nothing)."""
    dim = index.meta["dim"]
    for position, vector in enumerate(vectors):
        if len(vector) != dim:
            raise SemiretError(f"{index.path} holds {dim}-dimensional vectors; query vector {position} has "
                               f"{len(vector)}")
    matrix = np.stack(vectors)
    return unit_rows(matrix) if normalize else matrix


@register_retriever
class DenseRetriever(Retriever):
    """A dense bi-encoder (``model``, default ``minilm``) over a dense index (``ann``: exact, flat, ivf, hnsw,
    tree)."""

    name = "dense"
    model_kinds = ("dense",)
    documents = DenseDocuments
    queries = DenseQueries
