"""SiDR's three search pipelines over one model (``model``: a saved SiDR directory, the packaged
``sidr-scifact``, or any masked LM used as an untrained VDR):

- ``sidr-full``: parametric queries against a parametric index of SiDR document vectors (``impact``);
- ``sidr-beta``: parametric queries against the bag-of-tokens index the tokenizer alone builds (``binary``);
- ``sidr-beta-rerank``: beta search, then only the top-m documents are embedded (by the SiDR document
  encoder, or any other encoder such as ``minilm``) and re-ranked. Their embeddings go into a persistent
  :class:`~semiret.indexes.embedding_cache.EmbeddingCache`, so no document is embedded twice and the
  cache can later become the full parametric index (:func:`cache_to_full_index`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from semiret.data.collection import Document
from semiret.errors import SemiretError
from semiret.indexes.embedding_cache import CACHE_FOLDER, EmbeddingCache, content_key
from semiret.indexes.inverted import InvertedIndex
from semiret.models.checkpoints import SIDR, check_adapted_corpus, encoder_family, located, model_reference
from semiret.options import local_field
from semiret.search.lexical import TokenSets
from semiret.search.neural import (ENCODE_BATCH_SIZE, LOADING_ONCE, EncoderQueryOptions, SiameseQueries,
                                   check_encoder_index, check_weights, encoder_config)
from semiret.search.retrievers import DocumentSide, QuerySide, Retriever, index_vocabulary, register_retriever
from semiret.types import SearchHits, SparseQuery

DEFAULT_RERANK_DEPTH = 100


ADAPTED_CHECK_DOCUMENTS = 200
"""Stored documents a model adapted to a corpus is checked against when it searches an index it did not build."""


def _load_model(model: str):
    from semiret.models.sidr import SiDRModel

    return SiDRModel.load(model)


# ---------------------------------------------------------------------------------------------- full
@dataclass
class SiDRDocumentOptions:
    model: str = SIDR.default
    """SiDR model: a saved directory, the packaged sidr-scifact, or any masked LM (an untrained VDR)."""
    quantize_bits: int | None = None
    """Store document term weights in this many bits (8), not as float32."""


class SiDRDocuments(DocumentSide):
    """SiDR document vectors (the parametric index) into an ``impact`` index."""

    Options = SiDRDocumentOptions
    index_kind = "impact"
    batch_size = 1024

    def __init__(self, model: str, sidr=None, quantize_bits: int | None = None, built: dict | None = None,
                 where: str = ""):
        self.model, self._sidr, self.quantize_bits = model, sidr, quantize_bits
        self.built, self.where = built or {}, where  # an existing index's analyzer entry, checked on loading

    @property
    def sidr(self):
        if self._sidr is None:
            with LOADING_ONCE:
                if self._sidr is None:
                    model = _load_model(self.model)
                    check_weights(self.built, model, self.where)
                    self._sidr = model
        return self._sidr

    @classmethod
    def create(cls, options: SiDRDocumentOptions):
        return cls(model_reference(options.model), _load_model(options.model), options.quantize_bits)

    @classmethod
    def from_index(cls, index):
        built = check_encoder_index(index, "sidr")
        return cls(located(built["model"]), built=built, where=str(index.path))

    def prepare(self, documents):
        check_adapted_corpus(self.model, documents)

    def index_config(self) -> dict:
        return {"vocab_size": self.sidr.document_encoder.vocab_size, "quantize_bits": self.quantize_bits,
                "analyzer": self.built or encoder_config("sidr", self.model, None, self.sidr)}

    def encode(self, documents):
        vectors = self.sidr.document_encoder.encode_document([d.full_text for d in documents],
                                                             batch_size=ENCODE_BATCH_SIZE, show_progress=False)
        return vectors.to_postings([d.id for d in documents], documents)


class SiDRQueries(SiameseQueries):
    """Parametric queries from the index's own SiDR model."""

    family = "sidr"
    searches_postings = True

    def encode_queries(self, texts):
        encoder = self.documents.sidr.query_encoder
        return encoder.encode_query(texts, batch_size=self.options.encode_batch_size).to_queries()


@register_retriever
class SiDRFullRetriever(Retriever):
    """Full parametric SiDR: documents encoded by the SiDR document encoder into an ``impact`` index."""

    name = "sidr-full"
    model_kinds = ("sidr", "splade")  # a saved SiDR model, or any masked LM as an untrained VDR
    documents = SiDRDocuments
    queries = SiDRQueries


# ---------------------------------------------------------------------------------------------- beta
@dataclass
class SiDRBetaOptions(EncoderQueryOptions):
    model: str = local_field(SIDR.default)
    """SiDR model whose query encoder searches the bag-of-tokens index."""
    query_top_k: int | None = None
    """Terms kept per query vector in beta search (SiDR's query activation; default: the model's, 768)."""


class SiDRBetaQueries(QuerySide):
    """Beta search: SiDR query vectors against the tokenizer-only bag-of-tokens index (any ``bot`` index)."""

    Options = SiDRBetaOptions
    searches_postings = True

    def __init__(self, index, options: SiDRBetaOptions):
        if options.query_top_k is not None and options.query_top_k < 1:
            raise SemiretError(f"query_top_k must be at least 1, got {options.query_top_k}")
        self.index, self.vocabulary = index, index_vocabulary(index)
        self.model, self.encode_batch_size, self.query_top_k = options.model, options.encode_batch_size, options.query_top_k
        self._sidr = None

    @classmethod
    def open(cls, index, options, documents):
        return cls(index, options)

    @property
    def sidr(self):
        if self._sidr is None:
            with LOADING_ONCE:
                if self._sidr is None:
                    self._sidr = self._load_sidr()
        return self._sidr

    def _load_sidr(self):
        """The SiDR model, checked against the index (kept only if it fits: a second search fails alike)."""
        if getattr(self.index, "stores_texts", False):  # a model adapted to another corpus: said, not searched
            check_adapted_corpus(self.model, list(itertools.islice(self.index.iter_documents(),
                                                                     ADAPTED_CHECK_DOCUMENTS)))
        model = _load_model(self.model)
        if model.query_encoder.vocab_size != self.vocabulary.size:
            raise SemiretError(f"model {self.model!r} has a {model.query_encoder.vocab_size}-token vocabulary "
                               f"but the index was built with {self.vocabulary.name} ({self.vocabulary.size})")
        return model

    def encode_full_queries(self, texts) -> list[SparseQuery]:
        """The model's own query vectors (its top-k, 768 by default)."""
        return self.sidr.query_encoder.encode_query(texts, batch_size=self.encode_batch_size).to_queries()

    def first_stage(self, query: SparseQuery) -> SparseQuery:
        """The query as beta search uses it: its ``query_top_k`` heaviest terms (SiDR's query activation a)."""
        if self.query_top_k is None or len(query.terms) <= self.query_top_k:
            return query
        keep = np.sort(np.argpartition(-query.weights, self.query_top_k)[: self.query_top_k])
        return SparseQuery(query.terms[keep], query.weights[keep])

    def encode_queries(self, texts):
        return [self.first_stage(q) for q in self.encode_full_queries(texts)]


@register_retriever
class SiDRBetaRetriever(Retriever):
    """Beta search over the bag-of-tokens index the tokenizer alone builds."""

    name = "sidr-beta"
    model_kinds = ("sidr", "splade")  # a saved SiDR model, or any masked LM as an untrained VDR
    documents = TokenSets
    queries = SiDRBetaQueries


# ---------------------------------------------------------------------------------------------- late re-ranking
@dataclass
class LateParametricOptions(SiDRBetaOptions):
    rerank_depth: int = DEFAULT_RERANK_DEPTH
    """Documents re-ranked per query (m)."""
    rerank_model: str | None = local_field()
    """Second-stage encoder (default: the SiDR document encoder; e.g. minilm)."""
    cache: str | None = local_field()
    """Embedding cache directory (default: inside the index)."""


class LateParametricQueries(SiDRBetaQueries):
    """Beta search for the top ``rerank_depth`` (m), then re-rank them with embeddings computed on demand.

    ``rerank_model``: None re-ranks with the SiDR document encoder and the stage-one query vectors (no
    extra query embedding); another encoder (e.g. ``minilm``) embeds queries and documents itself.
    ``cache``: where embeddings persist (default: ``embedding-cache/`` inside the index directory).
    """

    Options = LateParametricOptions
    reads_stored_texts = True

    def __init__(self, index, options: LateParametricOptions):
        super().__init__(index, options)
        if options.rerank_depth < 1:
            raise SemiretError(f"rerank_depth must be at least 1, got {options.rerank_depth}")
        self.rerank_depth = options.rerank_depth
        self.rerank_model = options.rerank_model
        self.cache_path = Path(options.cache) if options.cache else None
        self._second = None
        self._cache = None
        self.documents_embedded = 0
        self.queries_embedded = 0
        self.rerank_pairs = 0
        self.candidates_seen: set[str] = set()
        self._known_keys: tuple[object, dict[str, str]] = (None, {})  # (snapshot, doc id -> cache key)

    @property
    def second_stage(self):
        """The document encoder of the second stage."""
        if self._second is None:
            with LOADING_ONCE:
                if self._second is None and self.rerank_model is None:
                    self._second = self.sidr.document_encoder
                elif self._second is None:
                    from semiret.models.encoders import load_encoder

                    # a saved encoder's family or a registry model's; a plain transformers model is read as dense
                    self._second = load_encoder(self.rerank_model, encoder_family(self.rerank_model) or "dense")
        return self._second

    @property
    def cache(self) -> EmbeddingCache:
        if self._cache is None:
            with LOADING_ONCE:
                if self._cache is None:
                    self._cache = self._open_cache()
        return self._cache

    def _open_cache(self) -> EmbeddingCache:
        from semiret.models.base import weights_fingerprint

        encoder = self.second_stage
        kind = "dense" if encoder.family == "dense" else "sparse"
        # the weights too: a model retrained at the same path must not re-rank with the old one's vectors
        fingerprint = (f"{encoder.family}:{model_reference(self.rerank_model or self.model)}"
                       f"@{weights_fingerprint(encoder)}")
        slug = "".join(c if c.isalnum() else "-" for c in fingerprint)[-80:]
        path = self.cache_path or Path(self.index.path) / CACHE_FOLDER / slug
        return EmbeddingCache(path, kind, fingerprint)

    def cost_figures(self) -> dict:
        """Embedding work so far: SiDR Table 8 counts queries x m re-ranked documents (``rerank_pairs``);
        with the cache each distinct candidate is embedded once (``distinct_candidates``, also as a
        fraction of the corpus); ``documents_embedded`` is what this process actually encoded."""
        return {"rerank_pairs": self.rerank_pairs, "distinct_candidates": len(self.candidates_seen),
                "distinct_candidates_fraction": round(len(self.candidates_seen) / max(self.index.n_docs, 1), 4),
                "documents_embedded": self.documents_embedded, "queries_embedded": self.queries_embedded}

    def search(self, index, queries: list[str], k: int, n_threads: int) -> SearchHits:
        full_queries = self.encode_full_queries(queries)
        first_queries = [self.first_stage(q) for q in full_queries]
        self.queries_embedded += len(queries)
        depth = max(k, self.rerank_depth)
        pinned = getattr(index, "pinned", None)
        searched = pinned() if pinned is not None else index  # the candidates' texts from the commit searched
        first = searched.search(first_queries, k=depth, n_threads=n_threads)
        candidates = [ids[: self.rerank_depth] for ids in first.ids]
        self.rerank_pairs += sum(map(len, candidates))
        self.candidates_seen.update(d for ids in candidates for d in ids)
        keys = self._candidate_keys(searched, dict.fromkeys(d for ids in candidates for d in ids))
        if self.rerank_model is None:
            query_vectors = full_queries  # the parametric score uses the whole query vector
        else:
            query_vectors = self.second_stage.encode_query(queries, batch_size=self.encode_batch_size)
            if self.cache.kind == "sparse":
                query_vectors = query_vectors.to_queries()
            self.queries_embedded += len(queries)
        out_ids, out_scores = [], []
        for qv, ids, rest_ids in zip(query_vectors, candidates, first.ids):
            scores = np.asarray([self._score(qv, self.cache.get(keys[d])) for d in ids], np.float32)
            order = np.argsort(-scores, kind="stable")
            ranked = [ids[i] for i in order]
            ranked_scores = scores[order].tolist()
            tail = rest_ids[len(ids):]  # beyond m: first-stage order, scored below every re-ranked document
            floor = (min(ranked_scores) if ranked_scores else 0.0) - 1.0
            out_ids.append((ranked + tail)[:k])
            out_scores.append((ranked_scores + [floor - i for i in range(len(tail))])[:k])
        return SearchHits(out_ids, out_scores)

    def _candidate_keys(self, index, doc_ids) -> dict[str, str]:
        """Each candidate's cache key by id (:meth:`_embed_missing`), remembered while the index is at one commit
        (a document changes under its id only in a new one): a candidate's stored text is read and hashed once
        per commit, not on every query that finds it."""
        snapshot = getattr(index, "snapshot", None)
        if snapshot is None:  # an index without snapshots (Milvus): nothing to tell a changed document by
            return self._embed_missing(self._stored(doc_ids, index))
        known = self._known_keys  # read once: another thread may start the next commit's meanwhile
        if known[0] is not snapshot:
            known = self._known_keys = (snapshot, {})
        unknown = [doc_id for doc_id in doc_ids if doc_id not in known[1]]
        if unknown:
            known[1].update(self._embed_missing(self._stored(unknown, index)))
        return known[1]

    def _stored(self, doc_ids, index=None) -> list[Document]:
        """The stored documents of these ids in ``index`` (default: the retriever's; what re-ranking embeds)."""
        index = self.index if index is None else index
        documents = []
        for doc_id in doc_ids:
            document = index.get_document(doc_id)
            if document is None:
                raise SemiretError(f"{self.index.path} does not store the text of {doc_id!r}: re-ranking needs "
                                   "stored documents (build the index with store_texts)")
            documents.append(document)
        return documents

    def _embed_missing(self, documents: list[Document]) -> dict[str, str]:
        """Embed and cache those of ``documents`` the cache lacks (by id and text: a document replaced under its
        id is embedded anew); returns each document's cache key by id."""
        keys = {document.id: content_key(document) for document in documents}
        missing = set(self.cache.missing(list(keys.values())))
        new = [document for document in documents if keys[document.id] in missing]
        if not new:
            return keys
        vectors = self.second_stage.encode_document([document.full_text for document in new],
                                                    batch_size=self.encode_batch_size, show_progress=len(new) > 256)
        rows = [vectors.row(i) for i in range(len(vectors))] if self.cache.kind == "sparse" else list(vectors)
        self.cache.put([keys[document.id] for document in new], rows)
        self.cache.flush()
        self.documents_embedded += len(new)
        return keys

    @staticmethod
    def _score(query, document) -> float:
        if isinstance(query, SparseQuery):
            terms, weights = document
            _, qi, di = np.intersect1d(query.terms, terms, assume_unique=True, return_indices=True)
            return float(np.dot(query.weights[qi], weights[di]))
        return float(np.dot(query, document))


@register_retriever
class LateParametricRetriever(Retriever):
    """Beta search, then late parametric re-ranking of the top m with cached embeddings."""

    name = "sidr-beta-rerank"
    model_kinds = ("sidr", "splade")  # a saved SiDR model, or any masked LM as an untrained VDR
    documents = TokenSets
    queries = LateParametricQueries


def cache_to_full_index(retriever: LateParametricRetriever, path: str | Path, overwrite: bool = False) -> InvertedIndex:
    """Turn a fully populated sparse embedding cache into the ``sidr-full`` index (SiDR Appendix E).

    Documents not yet embedded are embedded now; then the parametric index is written without
    re-encoding anything already cached.
    """
    late = retriever.query_side
    if late.rerank_model is not None:
        raise SemiretError("only a cache of SiDR document vectors becomes a sidr-full index")
    ids = retriever.index.live_ids()
    documents = late._stored(ids)
    keys = late._embed_missing(documents)
    postings = late.cache.to_postings([keys[i] for i in ids], documents, ids)
    return InvertedIndex.build(path, "impact", [postings], vocab_size=late.vocabulary.size,
                               analyzer=encoder_config("sidr", late.model, None, late.sidr),
                               overwrite=overwrite, extra_meta={"retriever": SiDRFullRetriever.name})
