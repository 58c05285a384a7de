"""Late interaction as a first stage (retriever ``colbert``): every document's token vectors in a multi-vector index
(:class:`~semiret.indexes.multivector.MultiVectorIndex`), each query's searched over the whole corpus by MaxSim with
PLAID's candidate generation (RAGatouille's and PyLate's ``index`` then ``search``; Qdrant's multivectors). The model
is any :class:`~semiret.models.late_interaction.LateInteraction`: a ColBERT checkpoint (PyLate's or Stanford's) or any
encoder's token vectors, untrained. ``--colbert MODEL`` re-ranks another retriever's hits with the same models
instead (:mod:`semiret.search.rerank`): no index of token vectors, a model call per query's hits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from semiret.clustering.kmeans import unit_rows
from semiret.data.packaged import REGISTRY
from semiret.errors import SemiretError
from semiret.indexes.multivector import CENTROID_THRESHOLD, NPROBE, MultiVectorIndex, check_ann
from semiret.models.checkpoints import check_adapted_corpus, located
from semiret.search.neural import EncoderDocuments, SiameseQueries, batch_size_field, check_weights, encoder_config
from semiret.search.retrievers import Retriever, register_retriever
from semiret.types import TokenEmbeddings

FAMILY = "late-interaction"
DEFAULT_NBITS = 2
POOLING_WINDOW = 2048
"""Token vectors of one document that token pooling clusters together at most (a longer document's are pooled a
window at a time: Ward's clustering holds a distance for every pair, 17 MB for 2,048 vectors)."""
POOLING_PROTECTED_TOKENS = 1
"""A document's first token vectors that token pooling keeps as they are (ColBERT's [CLS], as PyLate keeps it)."""


@dataclass
class MultiVectorIndexOptions:
    """How a multi-vector index holds and searches its token vectors: what the colbert and multivectors retrievers
    build with."""

    ann: str = "plaid"
    """Multi-vector search: plaid (candidates from the centroids nearest each query vector, the best re-scored
    exactly) or exact (MaxSim over every document)."""
    centroids: int | None = None
    """Centroids a segment's token vectors are clustered into (--ann plaid; default: the power of two below
    4 sqrt(token vectors))."""
    nbits: int | None = None
    """Store each token vector as its residual from its centroid in this many bits a dimension (--ann plaid; 1, 2 or
    4: ColBERTv2's compression; 0: vectors kept whole in float16; default: 2 where the dimension packs into bytes, as
    ColBERTv2's default: 7 times smaller than float16 and as good on SciFact, docs/results.md)."""
    pool_factor: int = 1
    """Token pooling (Clavie et al. 2024, PyLate's pool_factor): each document's token vectors clustered (Ward) into
    1/POOL_FACTOR as many, each cluster's mean kept: an index that many times smaller, for a little quality
    (docs/results.md; 1: none). Queries are not pooled."""

    def __post_init__(self) -> None:
        check_ann(self.ann, self.centroids, self.nbits)
        check_pool_factor(self.pool_factor)


@dataclass
class LateInteractionDocumentOptions(MultiVectorIndexOptions):
    model: str = "minilm"
    """Late-interaction model: a ColBERT checkpoint (PyLate's or Stanford's: a directory or hub id, e.g.
    colbert-ir/colbertv2.0, answerdotai/answerai-colbert-small-v1) or any encoder, whose token vectors are used
    untrained (minilm)."""
    encode_batch_size: int = batch_size_field()
    """Texts per encoder batch."""


def check_pool_factor(pool_factor: int) -> None:
    if isinstance(pool_factor, bool) or not isinstance(pool_factor, int) or pool_factor < 1:
        raise SemiretError(f"pool_factor (--pool-factor) must be a whole number of at least 1, got {pool_factor!r}")


def pooled_tokens(vectors: np.ndarray, pool_factor: int, protected: int, unit: bool) -> np.ndarray:
    """One document's token vectors pooled (Clavie et al. 2024, "Reducing the Footprint of Multi-Vector Retrieval
    with Minimal Performance Impact via Token Pooling"): the first ``protected`` kept as they are (ColBERT's [CLS] and
    marker), the others clustered by Ward's hierarchical clustering (scipy) into ``len // pool_factor`` (at least 1),
    each cluster replaced by its mean, scaled to unit length where ``unit`` (vectors compared by their cosine)."""
    from scipy.cluster.hierarchy import fcluster, linkage

    head, rest = vectors[:protected], vectors[protected:]
    if len(rest) > POOLING_WINDOW:  # (Ward's memory grows with the square of the vectors: a long one pooled in parts)
        parts = [pooled_tokens(rest[start:start + POOLING_WINDOW], pool_factor, 0, unit)
                 for start in range(0, len(rest), POOLING_WINDOW)]
        return np.concatenate([np.asarray(head, np.float32), *parts])
    clusters = max(1, len(rest) // pool_factor)
    if len(rest) <= clusters:
        return vectors
    labels = fcluster(linkage(np.asarray(rest, np.float64), method="ward"), t=clusters, criterion="maxclust") - 1
    sums = np.zeros((labels.max() + 1, vectors.shape[1]), np.float64)
    np.add.at(sums, labels, rest)
    means = (sums / np.bincount(labels)[:, None]).astype(np.float32)
    if unit:  # a cluster of opposite vectors, whose mean has no direction, is kept as it is
        cancelled = np.linalg.norm(means, axis=1) < 1e-3
        means = np.concatenate([unit_rows(means[~cancelled]),
                                np.asarray(rest, np.float32)[np.isin(labels, np.flatnonzero(cancelled))]])
    return np.concatenate([np.asarray(head, np.float32), means])


def token_embeddings(documents, matrices: list[np.ndarray], dim: int, pool_factor: int = 1, protected: int = 0,
                     unit: bool = True) -> TokenEmbeddings:
    """``documents``' token vectors (a matrix each) as one batch for a multi-vector index, in float16, each pooled
    first where ``pool_factor`` is more than 1 (:func:`pooled_tokens`)."""
    if pool_factor > 1:
        matrices = [pooled_tokens(matrix, pool_factor, protected, unit) for matrix in matrices]
    offsets = np.zeros(len(matrices) + 1, np.int64)
    np.cumsum([len(matrix) for matrix in matrices], out=offsets[1:])
    stacked = np.concatenate(matrices) if matrices else np.zeros((0, dim), np.float32)
    return TokenEmbeddings([d.id for d in documents], offsets, stacked.astype(np.float16).reshape(-1, dim), documents)


class LateInteractionDocuments(EncoderDocuments):
    """Each document's token vectors (float16) into a ``multivector`` index."""

    Options = LateInteractionDocumentOptions
    family = FAMILY
    index_kind = "multivector"
    index_class = MultiVectorIndex
    batch_size = 256

    ann_options: dict = {}

    @classmethod
    def create(cls, options: LateInteractionDocumentOptions):
        from semiret.models.late_interaction import LateInteraction

        model = LateInteraction.from_pretrained(located(options.model))
        config = encoder_config(FAMILY, options.model, model.config.document_length, weights=model.weights_fingerprint,
                                query_length=model.config.query_length, checkpoint=model.config.kind,
                                **({"pool_factor": options.pool_factor} if options.pool_factor > 1 else {}))
        side = cls(config, model, options.encode_batch_size)
        nbits = options.nbits
        if nbits is None:
            nbits = DEFAULT_NBITS if options.ann == "plaid" and model.dim * DEFAULT_NBITS % 8 == 0 else 0
        side.ann_options = {"ann": options.ann, "centroids": options.centroids, "nbits": nbits or None}
        return side

    def _load_encoder(self):
        """The index's late-interaction model (checked against the weights it recorded at first use)."""
        from semiret.models.late_interaction import LateInteraction

        return LateInteraction.from_pretrained(located(self.config["model"]))

    def check_encoder(self, model) -> None:
        check_weights(self.config, model.weights_fingerprint, self.index_path)

    def prepare(self, documents):
        check_adapted_corpus(located(self.config["model"]), documents)

    def index_config(self) -> dict:
        return {"dim": self.encoder.dim, "analyzer": self.config, **self.ann_options}

    def encode(self, documents) -> TokenEmbeddings:
        vectors = self.encoder.encode_document([d.full_text for d in documents], batch_size=self.encode_batch_size)
        return token_embeddings(documents, vectors, self.encoder.dim, self.config.get("pool_factor", 1),
                                protected=POOLING_PROTECTED_TOKENS)


@dataclass
class MaxSimSearchOptions:
    """How far a multi-vector index's search looks: what the colbert and multivectors retrievers search with."""

    nprobe: int = NPROBE
    """Centroids each query token vector takes its candidates from (--ann plaid): more finds more, scores more."""
    ndocs: int | None = None
    """Candidates per query scored exactly by MaxSim (--ann plaid; default: 256, or 2 k when more)."""
    centroid_threshold: float = CENTROID_THRESHOLD
    """PLAID's centroid pruning (--ann plaid): the candidates' first approximate scores leave out the tokens of the
    centroids less similar to every query vector than this share of the query's best centroid; the best 4 ndocs
    are then scored over every token (0 to 1; 0: no pruning)."""

    def __post_init__(self) -> None:
        for name in ("nprobe", "ndocs"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise SemiretError(f"{name} (--{name}) must be a whole number of at least 1, got {value!r}")
        threshold = self.centroid_threshold
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 <= threshold <= 1:
            raise SemiretError(f"centroid_threshold (--centroid-threshold) must be a number from 0 to 1, got "
                               f"{threshold!r}")

    def search(self, index, queries: list[np.ndarray], k: int, n_threads: int):
        """``index``'s search of each query's token vectors with these options."""
        return index.search(queries, k=k, n_threads=n_threads, nprobe=self.nprobe, ndocs=self.ndocs,
                            centroid_threshold=self.centroid_threshold)


@dataclass
class LateInteractionQueryOptions(MaxSimSearchOptions):
    encode_batch_size: int = batch_size_field()
    """Texts per encoder batch."""


class LateInteractionQueries(SiameseQueries):
    """Queries encoded by the index's own model into token vectors; a blank query finds nothing."""

    Options = LateInteractionQueryOptions
    family = FAMILY

    def encode_queries(self, texts):
        model = self.documents.encoder
        encoded = iter(model.encode_query([t for t in texts if t.strip()], batch_size=self.options.encode_batch_size))
        return [next(encoded) if text.strip() else np.zeros((0, model.dim), np.float32) for text in texts]

    def search(self, index, texts, k, n_threads):
        if texts and not isinstance(texts[0], str):
            raise SemiretError("a colbert index is searched by query texts, which its model encodes")
        return self.options.search(index, self.encode_queries(texts), k, n_threads)


@register_retriever
class ColbertRetriever(Retriever):
    """Late interaction over the whole corpus: each document's token vectors in a multi-vector index, searched by
    MaxSim with PLAID's candidate generation (``ann``: plaid or exact)."""

    name = "colbert"
    model_kinds = ("dense", "splade")  # (any encoder's token vectors; a ColBERT checkpoint: no family semiret lists)
    documents = LateInteractionDocuments
    queries = LateInteractionQueries

    @classmethod
    def check_model(cls, model: str | None) -> None:
        """Also refuses the registry's models that are no encoders (a decoder LM), before they load."""
        super().check_model(model)
        registered = REGISTRY.get(model) if model else None
        if registered is not None and registered.family is None:
            raise SemiretError(f"{model} is {registered.description}, not an encoder: late interaction compares an "
                               "encoder's token vectors (a ColBERT checkpoint, or an encoder such as minilm)")
