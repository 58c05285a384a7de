"""GDR's retriever (``gdr``): documents embedded by the model's frozen E_D into a clustered dense index, each in
its leaf cluster; a query's cluster ids decoded by constrained beam search, then only the documents of those
clusters scored, by ``S_inter + beta * sigmoid(<r_q, r_d>)``; a query whose decoded clusters hold fewer than k live
documents is decoded again with 4x the beams, up to every leaf.

Documents of the model's training corpus keep the leaf they were trained in; any other document (added later,
or a corpus the model has not seen) joins the leaf whose mean E_D vector is nearest: the prefix tree and the
decoder stay as they are, nothing is retrained. Deleted documents leave their leaf at once.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from semiret.clustering import nearest_means
from semiret.errors import SemiretError
from semiret.indexes.clustered import ClusteredDenseIndex, ClusteredEmbeddings
from semiret.indexes.embedding_cache import EmbeddingCache, content_key
from semiret.models.checkpoints import GDR, check_adapted_corpus, located
from semiret.search.neural import (ENCODE_BATCH_SIZE, batch_size_field, check_encoder_index, check_weights,
                                   encoder_config, loaded_once)
from semiret.options import local_field
from semiret.search.retrievers import DocumentSide, QuerySide, Retriever, register_retriever
from semiret.types import SearchHits

FAMILY = "gdr"
BEAMS = 100
"""The paper's beam size (and its length penalty, 0.8, the option's default)."""


def document_encoder_fingerprint(encoder: str, max_length: int | None) -> str:
    """What an embedding cache of E_D's vectors records about the encoder that made them."""
    return f"{encoder} (dense, {max_length or 'its own'} document tokens)"


@dataclass
class GDRDocumentOptions:
    model: str = GDR.default
    """GDR model: a saved directory (semiret train gdr) or the packaged gdr-scifact."""
    encode_batch_size: int = batch_size_field()
    """Texts per encoder batch."""
    embedding_cache: str | None = local_field()
    """A directory keeping E_D's document vectors by id and text (created when absent): documents found there
    are not embedded again, others (new, or with a changed text) are added. For several indexes of one corpus by
    models sharing E_D (what ``semiret adapt`` builds)."""


class GDRDocuments(DocumentSide):
    """E_D's vectors and each document's leaf (its trained one, else the nearest leaf mean)."""

    Options = GDRDocumentOptions
    index_kind = "gdr"
    index_class = ClusteredDenseIndex
    batch_size = 1024

    def __init__(self, config: dict, encode_batch_size: int = ENCODE_BATCH_SIZE, embedding_cache: str | None = None):
        from semiret.models.gdr import PrefixTree, read_clusters

        self.config, self.encode_batch_size = config, encode_batch_size
        path, meta, self.clusters = read_clusters(located(config["model"]))  # another model kind: a clear error here
        self.model_config = meta["config"]
        self.tree = PrefixTree(self.clusters.cids, self.model_config["branching"])
        self.trained_leaf = self.clusters.trained_leaves()
        self.keyed_by_text = self.clusters.document_keys is not None
        self.cache = None
        if embedding_cache:
            self.cache = EmbeddingCache(embedding_cache, "dense",
                                        document_encoder_fingerprint(self.model_config["document_encoder"],
                                                                     self.model_config["document_max_length"]),
                                        self.clusters.leaf_means.shape[1])

    @classmethod
    def create(cls, options: GDRDocumentOptions):
        from semiret.models.base import weights_fingerprint

        path, _ = GDR.read(options.model)
        side = cls(encoder_config(FAMILY, str(path), None), options.encode_batch_size, options.embedding_cache)
        # E_D's weights, which a build loads anyway, as a dense index records its model's: E_D retrained in place
        # would place new documents by other vectors than the indexed ones
        side.config["document_weights"] = weights_fingerprint(side.encoder)
        return side

    @classmethod
    def from_index(cls, index):
        return cls(check_encoder_index(index, FAMILY))

    @loaded_once
    def encoder(self):
        """E_D, loaded on first use."""
        from semiret.models.encoders import load_encoder

        encoder = load_encoder(self.model_config["document_encoder"], "dense",
                               max_length=self.model_config["document_max_length"])
        check_weights(self.config, encoder, f"the index of {self.config['model']}", "document_weights",
                      f"its document encoder {self.model_config['document_encoder']}")
        return encoder

    def index_config(self) -> dict:
        return {"dim": self.clusters.leaf_means.shape[1], "analyzer": self.config,
                "leaf_count": len(self.clusters.cids), "fingerprint": self.tree.fingerprint()}

    def prepare(self, documents):
        check_adapted_corpus(located(self.config["model"]), documents)

    def encode(self, documents) -> ClusteredEmbeddings:
        def embed(positions):
            return self.encoder.encode_document([documents[p].full_text for p in positions],
                                                batch_size=self.encode_batch_size, show_progress=False)

        keys = [content_key(d) for d in documents]
        vectors = self.cache.dense_vectors(keys, embed) if self.cache is not None else embed(range(len(documents)))
        # a document keeps the leaf it was trained in only with the text it was trained with (a replaced one, or
        # another corpus's document of the same id, joins the nearest leaf as any new document does)
        looked_up = keys if self.keyed_by_text else [d.id for d in documents]
        leaves = np.asarray([self.trained_leaf.get(key, -1) for key in looked_up], np.int64)
        new = leaves < 0
        if new.any():
            leaves[new] = nearest_means(vectors[new], self.clusters.leaf_means)
        return ClusteredEmbeddings([d.id for d in documents], vectors, documents, leaves)


@dataclass
class GDRQueryOptions:
    beams: int | None = None
    """Beam size of the constrained beam search: cluster ids decoded per query (default 100, or all of them
    when there are fewer; more than there are is an error). A query whose clusters hold fewer than k live
    documents is decoded again with 4x as many, up to all of them."""
    length_penalty: float = 0.8
    """Beam ranking: log-probability / length ** this."""
    beta: float | None = None
    """Weight of the intra-cluster score: S_inter + beta * sigmoid(<r_q, r_d>). None: the weight the model
    records (``search.beta`` in its ``gdr.json``, chosen on training queries), else the paper's 1."""


class GDRQueries(QuerySide):
    """Cluster ids decoded by the model; the documents of those clusters scored. A query whose decoded clusters hold
    fewer than k live documents is decoded again with 4x the beams (up to every leaf) until k are found: the
    documents scored (:meth:`cost_figures`) count that work too."""

    Options = GDRQueryOptions

    def __init__(self, model_path: str, options: GDRQueryOptions):
        self.model_path, self.options = model_path, options
        self.queries_searched = 0
        self.documents_scored = 0
        self.documents_searchable = 0
        """Documents each query could have scored, summed over the queries: the live ones it searched among."""

    @classmethod
    def reads(cls, index) -> bool:
        return index.meta["analyzer"].get("family") == FAMILY

    @classmethod
    def open(cls, index, options: GDRQueryOptions, documents: GDRDocuments):
        check_encoder_index(index, FAMILY)
        if options.beams is None:
            options = dataclasses.replace(options, beams=min(BEAMS, index.leaf_count))
        if options.beta is None:
            recorded = GDR.read(located(documents.config["model"]))[1].get("search", {}).get("beta", 1.0)
            options = dataclasses.replace(options, beta=float(recorded))
        if options.beams < 1 or not 0 < options.length_penalty or options.beta < 0:
            raise SemiretError("beams must be at least 1, the length penalty positive and beta non-negative")
        if options.beams > index.leaf_count:
            raise SemiretError(f"{options.beams} beams for {index.leaf_count} valid cluster ids: lower --beams")
        if documents.tree.fingerprint() != index.fingerprint:
            raise SemiretError(f"the prefix tree of {documents.config['model']} does not match {index.path}: "
                               "the index was built with other clusters (rebuild it with this model)")
        return cls(located(documents.config["model"]), options)

    @loaded_once
    def model(self):
        """E_Q and the cluster decoder, loaded on the first search (adding documents needs neither)."""
        from semiret.models.gdr import GDRModel

        return GDRModel.load(self.model_path)

    def encode_queries(self, texts):
        return self.model.query_vectors(self._checked(texts))

    def search(self, index, texts, k, n_threads):
        asked = [i for i, text in enumerate(texts) if text.strip()]
        if len(asked) < len(texts):  # an empty query finds nothing, as with every retriever; the others are searched
            found = self.search(index, [texts[i] for i in asked], k, n_threads) if asked else None
            ids, scores = [[] for _ in texts], [[] for _ in texts]
            for row, i in enumerate(asked):
                ids[i], scores[i] = list(found.ids[row]), list(found.scores[row])
            return SearchHits(ids, scores)
        held = index.held_leaves()  # the beams follow only leaves with documents to find
        leaves, inter, vectors = self.model.search_clusters(self._checked(texts), self.options.beams,
                                                            self.options.length_penalty, held)
        beams = [self.options.beams]

        def wider(rows):
            # A query whose decoded leaves hold fewer than k live documents (few beams, small leaves, deletions, a
            # filter hiding most documents) is decoded again with 4x the beams, up to the number of leaves: the
            # constrained beam search returns min(beams, held leaves) cluster ids, so the widest decoding reaches
            # every held leaf and every live document is scored. Decoding again, rather than taking the leaves whose
            # means lie nearest the query vector, gives the new leaves their S_inter from the decoder, so their
            # documents rank on the same scale as the first ones; it costs a decoding only for the queries left short.
            if beams[0] >= index.leaf_count:
                return None
            beams[0] = min(beams[0] * 4, index.leaf_count)
            wide_leaves, wide_inter, _ = self.model.search_clusters([texts[row] for row in rows], beams[0],
                                                                    self.options.length_penalty, held)
            return wide_leaves, wide_inter

        hits, scored = index.search_clusters(vectors, leaves, inter, k, self.options.beta, wider)
        self.queries_searched += len(texts)
        self.documents_scored += sum(scored)
        self.documents_searchable += len(texts) * index.n_docs  # a filter's view: the documents it lets through
        return hits

    @staticmethod
    def _checked(texts: list[str]) -> list[str]:
        empty = sum(not t.strip() for t in texts)
        if empty:
            raise SemiretError(f"{empty} of {len(texts)} queries are empty: GDR decodes cluster ids from the text")
        return texts

    def cost_figures(self) -> dict:
        """Documents scored per query (those of the decoded clusters), and as a share of the corpus."""
        per_query = self.documents_scored / max(self.queries_searched, 1)
        return {"documents_scored_per_query": round(per_query, 1),
                "documents_scored_fraction": round(self.documents_scored / max(self.documents_searchable, 1), 4)}


@register_retriever
class GDRRetriever(Retriever):
    """GDR: cluster ids decoded by constrained beam search, dense matching inside the decoded clusters."""

    name = "gdr"
    model_kinds = ("gdr",)
    documents = GDRDocuments
    queries = GDRQueries
