"""GDR, Generative Dense Retrieval (Yuan et al. 2024, arXiv 2401.10487), composed from shared pieces:

- E_D: a frozen dense encoder (``--document-encoder``, default the packaged ``minilm``); the corpus is embedded
  once (cached in the run folder as ``document-vectors.npz``);
- the cluster ids: :func:`semiret.clustering.divisive_cluster_ids` over E_D's vectors (Algorithm 1: branching
  k = 30, leaf threshold ``c = |D| / Exp(|CID|)``, terminal 0); O_pre (Eq. 6) is reported on the training and
  test qrels. ``--identifiers document`` gives every document its own id (cluster id plus position in its
  leaf, NCI style): the memory-burden baseline, trained and searched the same way;
- the model: :class:`semiret.models.gdr.GDRModel` (E_Q initialised from ``--base``, a random cluster decoder,
  the PAWA head as a switch); the loss: :class:`semiret.training.gdr.GDRLoss` (``L_inter + L_intra``,
  cluster-adaptive negatives with gamma = 2, plus in-batch);
- the data: the ``--split`` pairs, plus fresh augmented queries per document each epoch: random
  ``--span-words`` (40) consecutive words (the paper's spans) and inverse-cloze sentences, which replace
  docT5query (no doc2query model ships offline; a sentence of the document is the nearest label-free query);
- ``--held-out-fraction``: the paper's Table 6 protocol: that share of the documents (drawn with the seed) is
  neither clustered nor trained on, nor are the queries judging any of them; ``held-out.json`` lists them, to
  add to an index later without retraining.

The trained model is ``<output>/model``: ``semiret eval -r gdr --model <output>/model``.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from semiret.data.collection import Collection, Document
from semiret.data.packaged import REGISTRY
from semiret.errors import SemiretError
from semiret.files import atomic_write_json
from semiret.training.config import TrainingConfig
from semiret.training.data import BatchSource, SeededBatch, TrainingSet, seeded
from semiret.training.pseudo_queries import independent_crop, inverse_cloze

IDENTIFIERS = ("cluster", "document")
VECTORS_FILE = "document-vectors.npz"
CLUSTERS_FILE = "clusters.npz"
HELD_OUT_FILE = "held-out.json"


@dataclass
class GDRTrainingConfig(TrainingConfig):
    output: str = "runs/gdr"
    """Run folder: E_D's vectors, the clusters, checkpoints, the final model (<output>/model), summary.json."""
    base: str = "minilm"
    """Dense encoder E_Q starts from (its pooled vector must live in E_D's space: E_D itself, or a copy)."""
    document_encoder: str | None = None
    """E_D, frozen: embeds the corpus for clustering and scoring (default: --base)."""
    identifiers: str = "cluster"
    """'cluster' (GDR: documents of a leaf share its id) or 'document' (NCI-style per-document ids)."""
    branching: int = 30
    """k of Algorithm 1 (the released code's)."""
    expected_clusters: int = 100
    """Exp(|CID|) of Eq. 7: the leaf threshold is c = |D| / this (the paper's 5000 is for 334K-4M passages; on
    SciFact 100 gives c = 52 and about 900 leaves of 6 documents, as unbalanced as the paper's)."""
    leaf_size: int | None = None
    """c itself (default: from --expected-clusters)."""
    decoder_layers: int = 2
    heads: int = 6
    adaptive_head: bool = True
    """The prefix-aware weight-adaptive head (PAWA)."""
    adaptor_layers: int = 1
    gamma: float = 2.0
    """Weight of the intra-cluster negatives in L_intra's denominator."""
    intra_negatives: int = 10
    """Documents drawn from the positive's cluster per example."""
    temperature: float = 0.05
    epochs: int = 2
    learning_rate: float = 2e-5
    """Peak learning rate of E_Q (AdamW, linear warm-up then decay)."""
    decoder_learning_rate: float = 1e-3
    """Peak learning rate of the cluster decoder and its head."""
    warmup_epochs: float = 0.1
    trained_query_layers: int | None = None
    """E_Q's top transformer layers that train (default: all; 0: E_Q stays E_D, only the decoder trains): on a
    loaded CPU, backpropagating through a few layers only is what fits the time."""
    query_max_length: int = 64
    """Query tokens E_Q reads (pseudo-queries included)."""
    document_max_length: int | None = None
    """Document tokens E_D reads (default: the encoder's)."""
    span_words: int = 40
    """Words of each random-span pseudo-query."""
    spans_per_document: int = 1
    """Random-span pseudo-queries per document and epoch (the paper: 5)."""
    cloze_per_document: int = 1
    """Inverse-cloze pseudo-queries per document and epoch (in place of docT5query's 5)."""
    supervised_repeats: int = 1
    """Times the --split pairs appear in each epoch."""
    held_out_fraction: float = 0.0
    """Share of the documents left out of clustering and training (the Table 6 protocol)."""
    kmeans_iterations: int = 50
    embedding_cache: str | None = None
    """A directory keeping E_D's vectors by document id and text (the ``gdr`` retriever's option of that name):
    vectors found there are not computed again, others are added."""

    def validate(self) -> None:
        if self.identifiers not in IDENTIFIERS:
            raise SemiretError(f"identifiers must be one of {', '.join(IDENTIFIERS)}, not {self.identifiers!r}")
        if self.epochs < 1 or self.batch_size < 2:
            raise SemiretError("training needs at least 1 epoch and batches of at least 2 examples")
        if self.branching < 2 or self.expected_clusters < 1 or (self.leaf_size is not None and self.leaf_size < 1):
            raise SemiretError("the branching factor must be at least 2, the expected clusters and leaf size positive")
        if self.span_words < 1 or min(self.spans_per_document, self.cloze_per_document, self.supervised_repeats) < 0:
            raise SemiretError("pseudo-query counts and repeats must be non-negative, spans at least a word")
        if self.trained_query_layers is not None and self.trained_query_layers < 0:
            raise SemiretError(f"trained query layers must be non-negative, got {self.trained_query_layers}")
        if not 0 <= self.held_out_fraction < 1:
            raise SemiretError(f"the held-out fraction must be in [0, 1), got {self.held_out_fraction}")

    @property
    def encoder_of_documents(self) -> str:
        return self.document_encoder or self.base


# ---------------------------------------------------------------------------------------------- data
class GDRBatches(BatchSource):
    """An epoch of examples (:class:`~semiret.training.hierarchy.HierarchyExample`: a query, its positive's row):
    the training pairs ``repeats`` times, and each document's fresh pseudo-queries, shuffled together (a last
    batch of a single example is dropped: in-batch negatives need two)."""

    def __init__(self, documents: list[Document], training_set: TrainingSet | None, batch_size: int, repeats: int,
                 spans: int, clozes: int, span_words: int):
        self.documents, self.training_set, self.batch_size = documents, training_set, batch_size
        self.repeats, self.spans, self.clozes, self.span_words = repeats, spans, clozes, span_words
        self.rows = {d.id: row for row, d in enumerate(documents)}

    def epoch(self, rng: random.Random) -> list[SeededBatch]:
        from semiret.training.hierarchy import HierarchyExample

        examples = []
        if self.training_set is not None:
            for pair in self.training_set.pairs * self.repeats:
                examples.append(HierarchyExample.labelled(pair, self.rows, self.training_set.positives))
        for row, document in enumerate(self.documents):
            words = document.full_text.split()
            for _ in range(self.spans):
                examples.append(HierarchyExample(independent_crop(words, rng, self.span_words, self.span_words), row))
            for _ in range(self.clozes):
                query = inverse_cloze(document.full_text, rng) or independent_crop(words, rng, self.span_words,
                                                                                   self.span_words)
                examples.append(HierarchyExample(query, row))
        rng.shuffle(examples)
        batches = [tuple(examples[i: i + self.batch_size]) for i in range(0, len(examples), self.batch_size)]
        return seeded([b for b in batches if len(b) > 1], rng)


def held_out_documents(documents: list[Document], fraction: float, seed: int) -> set[str]:
    """The ids of ``fraction`` of the documents, drawn with ``seed``."""
    ids = [d.id for d in documents]
    return set(random.Random(seed).sample(ids, round(fraction * len(ids)))) if fraction else set()


def run_document_vectors(output: str | Path, encoder: str, max_length: int | None,
                         documents: list[Document]) -> np.ndarray | None:
    """The E_D vectors of ``documents`` a GDR run in ``output`` cached (``document-vectors.npz``), when ``encoder``
    made them at ``max_length`` for these very documents, ids and texts in this order; else None."""
    from semiret.indexes.embedding_cache import content_key
    from semiret.search.gdr import document_encoder_fingerprint

    cache = Path(output) / VECTORS_FILE
    if not cache.is_file():
        return None
    with np.load(cache, allow_pickle=False) as saved:
        if ("keys" in saved and str(saved["encoder"]) == document_encoder_fingerprint(encoder, max_length)
                and np.array_equal(saved["keys"], np.asarray([content_key(d) for d in documents], dtype=str))):
            return saved["vectors"]
    return None


def document_vectors(config: GDRTrainingConfig, documents: list[Document]) -> np.ndarray:
    """E_D's vectors of ``documents``, read from the run folder when they were computed for the same documents
    (ids and texts) by the same encoder at the same length (:func:`run_document_vectors`), else computed (one
    pass of E_D, less what ``embedding_cache`` holds) and stored there."""
    from semiret.indexes.embedding_cache import content_key
    from semiret.search.gdr import document_encoder_fingerprint

    cached = run_document_vectors(config.output, config.encoder_of_documents, config.document_max_length, documents)
    if cached is not None:
        return cached
    cache = Path(config.output) / VECTORS_FILE
    keys = np.asarray([content_key(d) for d in documents], dtype=str)
    fingerprint = document_encoder_fingerprint(config.encoder_of_documents, config.document_max_length)
    from semiret.models.encoders import load_encoder
    from semiret.training.distributed import training_device

    def embed(positions):
        encoder = load_encoder(config.encoder_of_documents, "dense", max_length=config.document_max_length)
        encoder.to(training_device(config.device))  # one pass over the corpus: on the GPU where training runs
        if config.threads:
            encoder.threads = config.threads
        return encoder.encode_document([documents[p].full_text for p in positions], batch_size=64)

    if config.embedding_cache:
        from semiret.indexes.embedding_cache import EmbeddingCache

        vectors = EmbeddingCache(config.embedding_cache, "dense", fingerprint).dense_vectors(keys.tolist(), embed)
    else:
        vectors = embed(range(len(documents)))
    cache.parent.mkdir(parents=True, exist_ok=True)
    staged = cache.with_suffix(".tmp.npz")
    np.savez(staged, keys=keys, vectors=vectors, encoder=fingerprint)
    staged.replace(cache)
    return vectors


def cluster_corpus(config: GDRTrainingConfig, vectors: np.ndarray, documents: list[Document], resume: bool):
    """The :class:`~semiret.models.gdr.Clusters` of the trained documents: read back when resuming a run whose
    clusters were made with these options (and vectors), else Algorithm 1 (and, for --identifiers document,
    per-document ids), saved in the run folder with the options they were made with."""
    from semiret.clustering import divisive_cluster_ids, leaf_threshold, per_document_ids
    from semiret.indexes.embedding_cache import content_key
    from semiret.models.gdr import Clusters
    from semiret.search.gdr import document_encoder_fingerprint
    from semiret.training.trainer import saved_history, start_state_reusable

    ids, keys = [d.id for d in documents], [content_key(d) for d in documents]
    saved = Path(config.output) / CLUSTERS_FILE
    threshold = config.leaf_size or leaf_threshold(len(ids), config.expected_clusters)
    made_with = {"vectors": document_encoder_fingerprint(config.encoder_of_documents, config.document_max_length),
                 "branching": config.branching, "leaf_size": threshold, "identifiers": config.identifiers,
                 "seed": config.seed, "kmeans_iterations": config.kmeans_iterations}
    record = saved.with_suffix(".json")
    recorded = json.loads(record.read_text())["made_with"] if record.is_file() else None
    if (resume and saved.is_file()
            and start_state_reusable(recorded, made_with, bool(saved_history(config.output)), saved)):
        clusters = Clusters.load(saved)
        if clusters.document_keys not in (None, keys) or list(clusters.document_ids) != ids:
            raise SemiretError(f"{saved} clusters other documents ({len(clusters.document_ids)}) than --data "
                               f"{config.data} trains on ({len(ids)}): the run folder holds another corpus's run; "
                               f"start again with --no-resume, or give another --output")
        return clusters
    tree = divisive_cluster_ids(vectors, config.branching, threshold, config.seed, config.kmeans_iterations)
    if config.identifiers == "document":
        tree = per_document_ids(tree, vectors, config.branching)
    cids = list(tree.leaf_centroids)
    leaf_of = {cid: leaf for leaf, cid in enumerate(cids)}
    clusters = Clusters(cids, np.stack([tree.leaf_centroids[c] for c in cids]), list(ids),
                        np.asarray([leaf_of[c] for c in tree.cids], np.int64), keys)
    saved.parent.mkdir(parents=True, exist_ok=True)
    clusters.save(saved)
    atomic_write_json(record, {"made_with": made_with})
    return clusters


def prefix_overlaps(clusters, collection: Collection) -> dict[str, float]:
    """O_pre (Eq. 6) of the clusters on each qrels split that judges a clustered document."""
    from semiret.clustering import prefix_overlap

    class Paths:
        def paths(self):
            return [clusters.cids[leaf] for leaf in clusters.document_leaves]

    found = {}
    for split in collection.splits():
        try:
            found[split] = round(prefix_overlap(Paths(), clusters.document_ids, collection.qrels(split)), 4)
        except SemiretError:
            continue
    return found


def freeze_lower_layers(backbone, trained: int) -> None:
    """Stop the gradients of a transformer's embeddings and of all but its top ``trained`` layers (more than
    it has: an error naming the option, where asking for 99 of 6 layers trained all of them silently)."""
    layers = backbone.encoder.layer
    if trained > len(layers):
        raise SemiretError(f"--trained-query-layers {trained}: E_Q has {len(layers)} transformer layers (leave the "
                           f"option out to train them all)")
    for module in [backbone.embeddings, *layers[: len(layers) - trained]]:
        module.requires_grad_(False)
    if trained == 0:
        backbone.requires_grad_(False)


def train_gdr(config: GDRTrainingConfig, resume: bool = True) -> dict:
    """Train GDR (or the per-document-id baseline) on a BEIR collection; writes ``<output>/model`` (fp16) and
    ``<output>/summary.json`` and returns the summary."""
    from semiret.models.encoders import load_encoder
    from semiret.models.gdr import GDRConfig, GDRModel, check_query_encoder
    from semiret.training.config import Schedule
    from semiret.training.gdr import GDRLoss
    from semiret.training.distributed import is_main_process, main_process_first, main_process_result
    from semiret.training.trainer import Trainer, epoch_summary, write_run_summary

    config.validate()
    config = config.resolved()
    output = Path(config.output)
    collection = Collection(config.data)
    corpus = list(collection.corpus())
    held_out = held_out_documents(corpus, config.held_out_fraction, config.seed)
    documents = [d for d in corpus if d.id not in held_out]
    # every input problem fails here, before E_D runs
    training_set = TrainingSet.from_collection(collection, config.split)
    if held_out:
        kept = {q for q, ds in training_set.positives.items() if not ds & held_out}
        training_set = TrainingSet([p for p in training_set.pairs if p.query_id in kept],
                                   {q: training_set.positives[q] for q in kept}, training_set.documents)
    if len(documents) < config.branching:
        raise SemiretError(f"{len(documents)} documents are fewer than the branching factor {config.branching}")
    model_config = GDRConfig(config.branching, config.decoder_layers, config.heads, config.adaptive_head,
                             config.adaptor_layers, query_max_length=config.query_max_length,
                             document_encoder=config.encoder_of_documents,
                             document_max_length=config.document_max_length,
                             query_base=config.base if config.base in REGISTRY else None)
    model_config.validate()
    query_encoder = load_encoder(config.base, "dense")
    check_query_encoder(query_encoder, model_config)
    if config.trained_query_layers is not None:
        freeze_lower_layers(query_encoder.backbone, config.trained_query_layers)
    import torch

    if config.threads:
        torch.set_num_threads(config.threads)

    started = time.perf_counter()
    # the corpus embedded and clustered once, by the main process (the others would write the same files at once):
    # the others then read its vectors from the run folder (not sent through the process group: gigabytes at scale)
    with main_process_first():
        vectors = document_vectors(config, corpus)
    rows = [i for i, d in enumerate(corpus) if d.id not in held_out]
    vectors = vectors[rows]
    clusters = main_process_result(lambda: cluster_corpus(config, vectors, documents, resume))
    if held_out and is_main_process():
        atomic_write_json(output / HELD_OUT_FILE, sorted(held_out))
    torch.manual_seed(config.seed)  # the decoder's initial weights
    model = GDRModel(query_encoder, clusters, model_config)
    loss = GDRLoss(vectors, clusters.document_leaves, config.gamma, config.intra_negatives, config.temperature)
    batches = GDRBatches(documents, training_set, config.batch_size, config.supervised_repeats,
                         config.spans_per_document, config.cloze_per_document, config.span_words)
    schedule = Schedule(config.epochs, config.learning_rate, config.warmup_epochs)
    decoder_rate = config.decoder_learning_rate
    trainer = Trainer(model, loss, batches, config, schedule, output,
                      learning_rates={"decoder.": decoder_rate, "token_embeddings.": decoder_rate,
                                      "adaptor": decoder_rate})
    trained = trainer.train(resume=resume)
    sizes = np.bincount(clusters.document_leaves)
    summary = {"config": asdict(config), "documents": len(documents), "held_out_documents": len(held_out),
               "pairs": len(training_set), "clusters": len(clusters.cids),
               "cluster_size": {"mean": round(float(sizes.mean()), 2), "max": int(sizes.max())},
               "cid_length_max": model.tree.max_length, "prefix_overlap": prefix_overlaps(clusters, collection),
               "steps_per_epoch": len(batches), "train_seconds": round(time.perf_counter() - started, 1),
               **epoch_summary(trained)}
    if not is_main_process():  # rank 0 alone writes the model and the summary
        return {**summary, "model": str(output / "model")}
    model.save(output / "model", training=summary)  # its config too: what its card and `semiret models` read
    return write_run_summary(output, summary)
