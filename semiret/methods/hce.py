"""HCE, the Hierarchical Corpus Encoder (Chen et al. 2025, arXiv 2502.18877): a dense encoder trained against
a k-means tree of its own corpus, composed from shared pieces:

- the tree: :func:`semiret.clustering.agglomerative_tree` (equal depth, branching by the paper's BEIR rule
  unless given) over the corpus as the encoder being trained embeds it;
- the loss: :class:`semiret.training.hierarchy.HierarchyLoss`: sibling-centroid softmaxes for levels 1..M
  (centroids trained with their own learning rate), sampled-sibling in-batch contrastive below, tau = 0.01;
- the scenarios: supervised (HCE-S, qrels), unsupervised (HCE-U, inverse cloze: a 64-word span of each
  document is its pseudo-query, the document kept whole; the query side reads at most 64 tokens of it),
  joint (HCE-J, ``L_S + alpha L_U``: every batch holds both kinds);
- EM co-training (Algorithm 3): after each epoch the corpus is embedded again and the dev metric measured;
  when it improved the tree is rebuilt from the new embeddings and the centroids reset to it (with no dev set,
  after every epoch but the last). The dev split is carved from the training queries (``dev_fraction``).
  HCE-U has no labels: its dev set is inverse-cloze pseudo-queries of a sample of documents (drawn with another
  seed), each judged relevant to its source. ``patience`` stops when the dev metric has not improved for that
  many epochs (the algorithm's early stopping); ``best_epoch`` saves the best dev epoch's encoder, not the last;
- ``loss="contrastive"``: the same data, batches and steps with plain in-batch contrastive fine-tuning (no
  tree, no sampled negatives), the baseline HCE must beat;
- ``matryoshka_dims``: any of these losses trained for truncated embeddings
  (:class:`~semiret.training.losses.MatryoshkaLoss`): the loss summed over the embeddings cut to each of the given
  first dimensions, query-document similarities at each prefix and, for the hierarchy levels, each centroid's
  prefix (the centroids stay trainable in the full dimension; the tree, the dev metric and the cached or mining
  vectors are the full embeddings', the latter cut like the centroids). The saved model records the dimensions
  (its ``--truncate-dim`` settings).

The trained model is a plain dense encoder (the tree and centroids are dropped): ``semiret eval -r dense
--model <output>/model``. Runs resume from their last epoch (the tree in use then is reloaded).
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections import deque
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from semiret.data.collection import Collection, Document
from semiret.errors import SemiretError
from semiret.files import atomic_write_json
from semiret.training.config import MatryoshkaTraining, TrainingConfig, WeightAveraging
from semiret.training.data import BatchSource, SeededBatch, TrainingSet, seeded
from semiret.training.pseudo_queries import independent_crop

log = logging.getLogger(__name__)

SCENARIOS = ("supervised", "unsupervised", "joint")
LOSSES = ("hierarchy", "contrastive", "mined")
PSEUDO_QUERIES = ("span", "dropout", "title")
TRAINING_FILE = "training.json"
"""Written beside a trained model's weights: the run's summary (configuration, dev figures per epoch, time)."""


@dataclass
class HCETrainingConfig(WeightAveraging, MatryoshkaTraining, TrainingConfig):
    output: str = "runs/hce"
    """Run folder: checkpoints, trees, the final model (<output>/model) and summary.json."""
    base: str = "minilm"
    """Dense encoder to start from (a registry name, a saved encoder, a hub id)."""
    scenario: str = "joint"
    """'supervised' (HCE-S, the --split qrels), 'unsupervised' (HCE-U, inverse cloze on the corpus alone) or
    'joint' (HCE-J, both)."""
    loss: str = "hierarchy"
    """'hierarchy' (HCE), 'contrastive' (plain in-batch contrastive fine-tuning on the same data and steps) or
    'mined' (the same with --negatives hard negatives per query mined by the starting encoder)."""
    branching: int | None = None
    """Tree branching factor b (default: the smallest power of two giving depth 3, the paper's BEIR rule)."""
    hierarchy_levels: int | None = None
    """M: tree levels trained with the centroid softmax (default L - 1); levels M+1..L use sampled negatives."""
    negatives: int = 4
    """n_NS: documents sampled from the positive's subtree per query and level."""
    mining_depth: int = 30
    """--loss mined: negatives are drawn from each query's top this-many documents."""
    negative_gradients: bool | None = None
    """Back-propagate through the sampled negatives (the paper's loss). Default: on when training on a GPU (there
    it lifted HCE-J on SciFact test from 0.782 to 0.809 nDCG@10, docs/results.md), off on a CPU, where the
    negatives are encoded as at inference, without gradients or dropout: a step takes about half the time and
    holds no activations for them (with gradients, a joint batch of 32 holds 320 documents of 256 tokens, about
    25 GB in MiniLM: more than a 24 GB machine)."""
    cached_negatives: bool = False
    """Read the sampled negatives' vectors from the corpus embedding made after the last epoch (the one the dev
    metric and the tree use; the starting encoder's before the first) instead of encoding them at every step:
    1.85x the default recipe's step rate on a 2-core CPU, the negatives up to an epoch stale (as ANCE's
    asynchronously refreshed index; slightly lower quality on SciFact, docs/results.md). Needs the negatives
    without gradients; the corpus is embedded after every epoch."""
    temperature: float = 0.01
    alpha: float = 0.5
    """Weight of the unsupervised loss in the joint scenario."""
    epochs: int = 4
    learning_rate: float = 1e-4
    """Peak learning rate of the encoder (AdamW, linear warm-up then decay). The paper's 1e-4; on SciFact's dev
    split it beat 2e-5 for HCE-J and the contrastive baseline alike (docs/results.md, HCE)."""
    centroid_learning_rate: float = 1e-3
    """Peak learning rate of the trainable centroids."""
    warmup_epochs: float = 0.1
    query_max_length: int = 64
    """Query tokens read in training (pseudo-queries included)."""
    document_max_length: int = 128
    """Document tokens read in training and when the corpus is embedded for clustering and the dev metric
    (the saved model still indexes at --index-max-length). 128, not 256, to fit the 45-minute budget on 2
    cores: at 256 one epoch of the plain contrastive baseline on SciFact took 21 minutes on one loaded core,
    and HCE adds the sampled negatives and the corpus embedding of each co-training step."""
    index_max_length: int = 256
    """Document tokens the saved model reads when it indexes."""
    pseudo_queries: str = "span"
    """HCE-U's pseudo-query of a document: 'span' (the paper's ICT: ``span_words`` consecutive words), 'dropout'
    (the paper's SimCSE option: the document's own text, read at ``query_max_length`` tokens, a second view only
    through its dropout mask and truncation) or 'title' (beyond the paper: the document's title, a span where a
    document has none; titles of scientific abstracts read like the claims users search with)."""
    span_words: int = 64
    """Words of a document cut out as its inverse-cloze pseudo-query (at most half of its words)."""
    unsupervised_batch_size: int | None = None
    """Pseudo-queries per batch (default --batch-size)."""
    unsupervised_per_epoch: int | None = None
    """HCE-U: documents drawn per epoch (default: all of them)."""
    co_training: bool = True
    """Re-cluster the corpus after an epoch that improved the dev metric (off: the tree stays the first one)."""
    patience: int | None = None
    """Early stopping (Algorithm 3's loop condition): stop once the dev metric has not improved for this many
    epochs in a row (None: train every --epochs)."""
    best_epoch: bool = False
    """Save the encoder of the epoch with the best dev metric (the starting encoder if none beat it) instead of
    the last one (Algorithm 3 keeps the last). Needs a dev set."""
    dev_every_epoch: bool = True
    """Measure the dev metric after every epoch, the last included, whatever the loss (one corpus embedding
    each); off, it is measured only where co-training needs it. The per-epoch figures are what compares the
    losses and picks settings without touching test queries."""
    dev_fraction: float = 0.1
    """Share of the training queries held out as the dev split (HCE-S/J)."""
    dev_seed: int = 12345
    """Seed that draws the dev split (HCE-U: its pseudo-queries), apart from --seed so that runs of several
    seeds are judged on the same held-out queries, none of which any of them trained on."""
    dev_pseudo_queries: int = 300
    """HCE-U: inverse-cloze pseudo-queries in the label-free dev set (spans, whatever --pseudo-queries)."""
    kmeans_iterations: int = 50

    @property
    def supervised(self) -> bool:
        return self.scenario in ("supervised", "joint")

    @property
    def unsupervised(self) -> bool:
        return self.scenario in ("unsupervised", "joint")

    @property
    def uses_tree(self) -> bool:
        return self.loss == "hierarchy"

    def resolved(self) -> "HCETrainingConfig":
        """Also decides ``negative_gradients`` when unset: on where the training runs on CUDA."""
        resolved = super().resolved()
        if resolved.negative_gradients is None:
            from semiret.models.devices import resolve_device

            on_gpu = resolve_device(resolved.device).type == "cuda"
            resolved = replace(resolved, negative_gradients=on_gpu and not resolved.cached_negatives)
        return resolved

    def validate(self) -> None:
        if self.scenario not in SCENARIOS:
            raise SemiretError(f"scenario must be one of {', '.join(SCENARIOS)}, not {self.scenario!r}")
        if self.loss not in LOSSES:
            raise SemiretError(f"loss must be one of {', '.join(LOSSES)}, not {self.loss!r}")
        if self.epochs < 1 or self.batch_size < 2:
            raise SemiretError("training needs at least 1 epoch and batches of at least 2 examples")
        if self.branching is not None and self.branching < 2:
            raise SemiretError(f"branching (--branching) must be at least 2, got {self.branching}")
        if self.hierarchy_levels is not None and self.hierarchy_levels < 0:
            raise SemiretError(f"hierarchy levels must be non-negative, got {self.hierarchy_levels}")
        if self.negatives < 0 or self.temperature <= 0 or self.alpha < 0:
            raise SemiretError("negatives and alpha must be non-negative, the temperature positive")
        if self.cached_negatives and (self.negative_gradients or self.loss == "contrastive" or not self.negatives):
            raise SemiretError("--cached-negatives reads sampled negatives without gradients: it needs --loss "
                               "hierarchy or mined, --negatives above 0 and --no-negative-gradients")
        if not 0 <= self.dev_fraction < 1:
            raise SemiretError(f"the dev fraction must be in [0, 1), got {self.dev_fraction}")
        if self.pseudo_queries not in PSEUDO_QUERIES:
            raise SemiretError(f"pseudo-queries must be one of {', '.join(PSEUDO_QUERIES)}, not {self.pseudo_queries!r}")
        if self.span_words < 1 or (self.unsupervised_batch_size or 2) < 2:
            raise SemiretError("the pseudo-query span needs a word and unsupervised batches two examples")
        self.validate_averaging()
        self.matryoshka()
        if self.patience is not None and self.patience < 1:
            raise SemiretError(f"the patience must be at least 1 epoch, got {self.patience}")
        if self.patience or self.best_epoch:
            if not self.dev_every_epoch:
                raise SemiretError("--patience and --best-epoch read the dev metric of every epoch: drop "
                                   "--no-dev-every-epoch")
            if not (self.dev_fraction if self.supervised else self.dev_pseudo_queries):
                raise SemiretError("--patience and --best-epoch need a dev set (--dev-fraction, or for HCE-U "
                                   "--dev-pseudo-queries, above 0)")


# ---------------------------------------------------------------------------------------------- data
@dataclass(frozen=True)
class Corpus:
    """The clustered corpus: its documents in row order, the texts the encoder reads."""

    documents: list[Document]

    @property
    def texts(self) -> list[str]:
        return [d.full_text for d in self.documents]

    @property
    def ids(self) -> list[str]:
        return [d.id for d in self.documents]


def split_dev(training_set: TrainingSet, fraction: float, seed: int) -> tuple[TrainingSet, dict[str, dict[str, int]]]:
    """(the training pairs of the kept queries, the dev qrels of ``fraction`` of the queries drawn with
    ``seed``); an error when ``fraction`` leaves no dev or no training query."""
    queries = sorted(training_set.positives)
    dev = set(random.Random(seed).sample(queries, round(fraction * len(queries)))) if fraction else set()
    if fraction and not dev:
        raise SemiretError(f"a dev fraction of {fraction} of {len(queries)} training queries holds no query: "
                           "the dev split has no qrels (raise --dev-fraction, or 0 for none)")
    if len(dev) == len(queries):
        raise SemiretError("the dev split takes every training query")
    kept = TrainingSet([p for p in training_set.pairs if p.query_id not in dev],
                       {q: ds for q, ds in training_set.positives.items() if q not in dev}, training_set.documents)
    return kept, {q: {d: 1 for d in training_set.positives[q]} for q in sorted(dev)}


def pseudo_query(document: Document, span_words: int, rng: random.Random, kind: str = "span") -> str:
    """A pseudo-query of ``kind`` (:attr:`HCETrainingConfig.pseudo_queries`). A span is ``span_words``
    consecutive words of the document, at most half of its words (a query that is the whole document teaches
    only self-matching, unless dropout makes it a second view)."""
    if kind == "dropout":
        return document.full_text
    if kind == "title" and document.title.strip():
        return document.title.strip()
    words = document.full_text.split()
    length = max(1, min(span_words, len(words) // 2))
    return independent_crop(words, rng, length, length)


class HierarchyBatches(BatchSource):
    """An epoch of :class:`~semiret.training.hierarchy.HierarchyBatch`: the training pairs in shuffled batches
    (one pair per query in each) with, in the joint scenario, ``unsupervised_batch_size`` fresh pseudo-queries
    each (documents in a shuffled cycle); unsupervised alone, ``per_epoch`` documents' pseudo-queries."""

    def __init__(self, corpus: Corpus, training_set: TrainingSet | None, batch_size: int, unsupervised: bool,
                 unsupervised_batch_size: int | None, per_epoch: int | None, span_words: int,
                 pseudo_queries: str = "span"):
        self.corpus, self.training_set, self.batch_size = corpus, training_set, batch_size
        self.unsupervised, self.span_words, self.pseudo_queries = unsupervised, span_words, pseudo_queries
        self.unsupervised_batch_size = unsupervised_batch_size or batch_size
        self.per_epoch = per_epoch
        self.rows = {doc_id: row for row, doc_id in enumerate(corpus.ids)}
        self.counts_depend_on_the_draw = training_set is not None  # a batch per batch of pairs

    def epoch(self, rng: random.Random) -> list[SeededBatch]:
        from semiret.training.hierarchy import HierarchyBatch, HierarchyExample

        supervised = []
        if self.training_set is not None:
            for pairs in self.training_set.batches(self.batch_size, rng):
                supervised.append(tuple(HierarchyExample.labelled(p, self.rows, self.training_set.positives)
                                        for p in pairs))
        if not self.unsupervised:
            return seeded([HierarchyBatch(supervised=s) for s in supervised], rng)
        if supervised:
            sizes = [self.unsupervised_batch_size] * len(supervised)
        else:
            count = min(self.per_epoch or len(self.corpus.documents), len(self.corpus.documents))
            sizes = [min(self.batch_size, count - start) for start in range(0, count, self.batch_size)]
        order: deque[int] = deque()
        unsupervised = []
        n_documents = len(self.corpus.documents)
        for size in sizes:
            rows, taken, later = [], set(), []
            while len(rows) < min(size, n_documents):  # distinct, where the shuffled cycle starts again within a
                if not order:  # batch: a document twice would be its own in-batch negative
                    order.extend(rng.sample(range(n_documents), n_documents))
                row = order.popleft()
                if row in taken:
                    later.append(row)  # the next batch's
                else:
                    rows.append(row)
                    taken.add(row)
            order.extendleft(reversed(later))
            unsupervised.append(tuple(HierarchyExample(pseudo_query(self.corpus.documents[r], self.span_words, rng,
                                                                     self.pseudo_queries), r)
                                      for r in rows))
        if not supervised:
            return seeded([HierarchyBatch(unsupervised=u) for u in unsupervised], rng)
        return seeded([HierarchyBatch(s, u) for s, u in zip(supervised, unsupervised)], rng)


def pseudo_dev_set(corpus: Corpus, count: int, span_words: int, seed: int) -> tuple[dict[str, str], dict]:
    """HCE-U's label-free dev set: (queries, qrels) of ``count`` inverse-cloze pseudo-queries, each relevant
    to the document it was cut from. Spans whatever the training's pseudo-queries: a document is its own
    'dropout' query (the dev metric would be 1 from the start) and holds its title (0.99 on SciFact)."""
    rng = random.Random(seed)
    rows = rng.sample(range(len(corpus.documents)), min(count, len(corpus.documents)))
    queries = {f"dev-{r}": pseudo_query(corpus.documents[r], span_words, rng) for r in rows}
    return queries, {f"dev-{r}": {corpus.documents[r].id: 1} for r in rows}


# ---------------------------------------------------------------------------------------------- co-training
START_OPTIONS = ("data", "base", "document_max_length", "branching", "kmeans_iterations", "seed", "loss",
                 "cached_negatives", "scenario", "split", "dev_fraction", "dev_seed", "dev_pseudo_queries", "span_words")
"""The options that shape what a run builds before its first step (the corpus embedding, the tree, the dev set and
its first metric, the mining or negative vectors): a run restarted with others builds them again."""


class CoTraining:
    """Algorithm 3 around the trainer: the corpus embedded by the current encoder, the dev metric, the tree;
    trees are saved as ``<output>/trees/tree-<epoch>.npz`` (the epoch after which each came into use)."""

    MEASURE = "nDCG@10"

    def __init__(self, config: HCETrainingConfig, corpus: Corpus, dev_queries: dict[str, str], dev_qrels: dict):
        self.config, self.corpus = config, corpus
        self.dev_queries, self.dev_qrels = dev_queries, dev_qrels
        self.trees = Path(config.output) / "trees"

    def embed(self, encoder) -> np.ndarray:
        return encoder.encode_document(self.corpus.texts, batch_size=64)

    def dev_metric(self, encoder, vectors: np.ndarray) -> float | None:
        """nDCG@10 of the dev queries over the whole corpus (None without a dev set)."""
        return self.measure(encoder, vectors, [self.MEASURE])[self.MEASURE] if self.dev_queries else None

    def search(self, encoder, vectors: np.ndarray, depth: int = 100) -> dict[str, dict[str, float]]:
        """The dev queries' run: each query's top ``depth`` documents, searched exactly over the corpus ``vectors``."""
        query_ids = list(self.dev_queries)
        scores = encoder.encode_query([self.dev_queries[q] for q in query_ids], batch_size=64) @ vectors.T
        top = np.argsort(-scores, axis=1)[:, :depth]
        ids = self.corpus.ids
        return {q: {ids[d]: float(scores[i, d]) for d in top[i]} for i, q in enumerate(query_ids)}

    def measure(self, encoder, vectors: np.ndarray, measures: list[str]) -> dict[str, float]:
        """``measures`` of the dev queries' exact search (the top 100 each)."""
        from semiret.evaluation.metrics import parse_measures, score_run

        return score_run(self.search(encoder, vectors), self.dev_qrels, parse_measures(measures))

    def cluster(self, vectors: np.ndarray, epoch: int):
        from semiret.clustering import agglomerative_tree

        tree = agglomerative_tree(vectors, self.config.branching, seed=self.config.seed,
                                  iterations=self.config.kmeans_iterations)
        self.trees.mkdir(parents=True, exist_ok=True)
        tree.save(self.trees / f"tree-{epoch}.npz")
        return tree

    @property
    def best_model(self) -> Path:
        """--best-epoch: the encoder of the best epoch so far."""
        return Path(self.config.output) / "best-model"

    @property
    def mining_file(self) -> Path:
        """--loss mined: the corpus as the starting encoder embedded it (saved by :meth:`start`)."""
        return Path(self.config.output) / "mining-vectors.npy"

    def negatives_file(self, epoch: int) -> Path:
        """--cached-negatives: the corpus embedding made after ``epoch`` (0: the starting encoder's)."""
        return Path(self.config.output) / f"negative-vectors-{epoch}.npy"

    def keep_negatives(self, vectors: np.ndarray, epoch: int) -> np.ndarray:
        """--cached-negatives: ``vectors`` saved as the cache after ``epoch`` (the earlier ones removed: a resumed
        run reads the one of its last checkpointed epoch, at most one epoch behind this)."""
        if self.config.cached_negatives:
            np.save(self.negatives_file(epoch), vectors)
            for old in Path(self.config.output).glob("negative-vectors-*.npy"):
                if old.name != self.negatives_file(epoch).name and old != self.negatives_file(epoch - 1):
                    old.unlink()
        return vectors

    def start(self, encoder, history, resume: bool) -> tuple[object, float | None, np.ndarray | None]:
        """(the tree in use after the last saved epoch, the dev metric of the starting encoder, the cached
        negatives' vectors or None): built and saved on a fresh run, read back when resuming (also a run that
        stopped within its first epoch, unless restarted with other :data:`START_OPTIONS`)."""
        from semiret.clustering import EqualDepthTree

        from semiret.training.trainer import start_state_reusable

        initial = Path(self.config.output) / "initial.json"
        last = max([0] + [h.epoch for h in history if h.notes.get("reclustered")])
        made_with = {name: getattr(self.config, name) for name in START_OPTIONS}
        if resume and initial.is_file() and start_state_reusable(json.loads(initial.read_text()).get("made_with"),
                                                                 made_with, bool(history), initial.parent):
            tree_file = self.trees / f"tree-{last}.npz"
            cache = self.negatives_file(history[-1].epoch if history else 0)
            if self.config.cached_negatives and not cache.is_file() and history and \
                    self.negatives_file(history[-1].epoch - 1).is_file():
                # a finished run given more epochs: its last epoch embedded no corpus (none was to follow)
                cache = self.negatives_file(history[-1].epoch - 1)
                log.warning("the run's last epoch kept no corpus embedding for its cached negatives: the next epoch "
                            "draws them from epoch %d's, then each epoch's as usual", history[-1].epoch - 1)
            for needed, wanted in ((tree_file, self.config.uses_tree), (cache, self.config.cached_negatives)):
                if wanted and not needed.is_file():
                    raise SemiretError(f"{needed} is missing: the run cannot resume (start it again with --no-resume)")
            tree = EqualDepthTree.load(tree_file) if self.config.uses_tree else None
            vectors = np.load(cache) if self.config.cached_negatives else None
            return tree, json.loads(initial.read_text())["dev"], vectors
        vectors = self.embed(encoder)
        initial.parent.mkdir(parents=True, exist_ok=True)
        if self.config.loss == "mined":
            np.save(self.mining_file, vectors)
        tree = self.cluster(vectors, 0) if self.config.uses_tree else None
        dev = self.dev_metric(encoder, vectors)
        self.keep_negatives(vectors, 0)
        atomic_write_json(initial, {"dev": dev, "made_with": made_with})
        return tree, dev, vectors if self.config.cached_negatives else None


def train_hce(config: HCETrainingConfig, resume: bool = True) -> dict:
    """Train HCE (or the plain contrastive baseline) on a BEIR collection; writes ``<output>/model`` (a dense
    encoder in float16) and ``<output>/summary.json`` and returns the summary."""
    from semiret.clustering import branching_for_depth, depth_for
    from semiret.models.base import copy_model_directory
    from semiret.models.encoders import average_with_base, load_encoder
    from semiret.training.config import Schedule
    from semiret.training.distributed import is_main_process, main_process_result, training_device
    from semiret.training.hierarchy import HierarchyLoss, HierarchyModel
    from semiret.training.trainer import Trainer, epoch_summary, saved_history, write_run_summary

    config.validate()
    config = config.resolved()
    output = Path(config.output)
    collection = Collection(config.data)
    corpus = Corpus(list(collection.corpus()))
    n = len(corpus.documents)
    # every input problem fails here, before the encoder runs
    training_set, dev_qrels, dev_queries = None, {}, {}
    if config.supervised:
        training_set = TrainingSet.from_collection(collection, config.split)
        training_set, dev_qrels = split_dev(training_set, config.dev_fraction, config.dev_seed)
        queries = collection.queries()
        dev_queries = {q: queries[q] for q in dev_qrels}
    elif config.dev_pseudo_queries:
        dev_queries, dev_qrels = pseudo_dev_set(corpus, config.dev_pseudo_queries, config.span_words,
                                                config.dev_seed + 1)
    if config.uses_tree:
        branching = config.branching or branching_for_depth(n)
        if n < branching:
            raise SemiretError(f"a corpus of {n} documents is smaller than the branching factor {branching}")
        depth = depth_for(n, branching)
        levels = depth - 1 if config.hierarchy_levels is None else config.hierarchy_levels
        if levels >= depth:
            raise SemiretError(f"{levels} hierarchy levels need a tree deeper than its {depth} levels "
                               f"({n} documents, b = {branching})")
        if depth < 2:
            log.warning("with b = %d the tree over %d documents has one level, every document a sibling of every "
                        "other: the hierarchy loss has no cluster level to learn from (a smaller --branching, or the "
                        "default, gives a deeper tree)", branching, n)
    else:
        levels = 0
    negatives = config.negatives if config.loss in ("hierarchy", "mined") else 0
    # a batch's positives are never sampled as its negatives: the corpus must hold both
    positives = min(n, (config.batch_size if config.supervised else 0)
                    + ((config.unsupervised_batch_size or config.batch_size) if config.unsupervised else 0))
    if negatives and n - positives < negatives:
        raise SemiretError(f"{n} documents are too few to sample {negatives} negatives beside a batch's "
                           f"{positives} positives: lower --batch-size or --negatives")

    encoder = load_encoder(config.base, "dense", max_length=config.document_max_length)
    matryoshka = config.matryoshka()
    if matryoshka is not None:  # the dimensions against the encoder's width, before it embeds anything
        from semiret.training.losses import check_matryoshka

        check_matryoshka(*matryoshka, encoder.dim, config.base)
    # saved with the model: the --truncate-dim settings it is meant for (none once trained without; a Matryoshka
    # base fine-tuned on at full width loses what its prefixes were trained for)
    encoder.matryoshka_dims = list(matryoshka[0]) if matryoshka is not None else None
    # on the training device from the start: the first corpus embedding (tree, dev metric, mining) runs there too
    encoder.to(training_device(config.device))
    if config.threads:
        import torch

        torch.set_num_threads(config.threads)
    history = saved_history(output) if resume else []
    co_training = CoTraining(config, corpus, dev_queries, dev_qrels)
    started = time.perf_counter()
    tree, initial_dev, cached = main_process_result(lambda: co_training.start(encoder, history, resume))
    model = HierarchyModel(encoder, config.query_max_length, tree, levels)
    mined_from = np.load(co_training.mining_file) if config.loss == "mined" else None
    loss = HierarchyLoss(corpus.texts, tree, levels, negatives, config.temperature, config.alpha,
                         config.negative_gradients, mined_from, config.mining_depth, config.cached_negatives)
    if cached is not None:
        loss.refresh_negatives(cached)
    batches = HierarchyBatches(corpus, training_set, config.batch_size, config.unsupervised,
                               config.unsupervised_batch_size, config.unsupervised_per_epoch, config.span_words,
                               config.pseudo_queries)
    schedule = Schedule(config.epochs, config.learning_rate, config.warmup_epochs)
    objective = loss
    if matryoshka is not None:
        from semiret.training.losses import MatryoshkaLoss

        objective = MatryoshkaLoss(loss, *matryoshka, dimension=encoder.dim)
    trainer = Trainer(model, objective, batches, config, schedule, output,
                      learning_rates={"centroids.": config.centroid_learning_rate})

    def reclustering(epoch: int, may_recluster: bool) -> tuple[dict, object, np.ndarray | None]:
        """(the epoch's notes, the new tree or None, the new cached negatives or None): the dev metric and, when
        it improved and ``may_recluster``, a new tree."""
        vectors = co_training.keep_negatives(co_training.embed(encoder), epoch)
        dev = co_training.dev_metric(encoder, vectors)
        best = max([m for m in [initial_dev] + [h.notes.get("dev") for h in trainer.history] if m is not None],
                   default=None)
        improved = dev is None or best is None or dev > best  # without a dev set: after every epoch
        recluster = may_recluster and improved
        notes = {"dev": None if dev is None else round(dev, 4), "reclustered": recluster}
        if dev is not None and config.patience is not None:
            previous = trainer.history[-1].notes.get("stale", 0) if trainer.history else 0
            stale = 0 if improved else previous + 1  # epochs in a row without a better dev metric
            notes.update(stale=stale, **({"stop": True} if stale >= config.patience else {}))
        if dev is not None and improved and config.best_epoch:
            encoder.save(co_training.best_model, fp16=True, max_length=config.index_max_length)
            notes["best"] = True
        return (notes, co_training.cluster(vectors, epoch) if recluster else None,
                vectors if config.cached_negatives else None)

    def after_epoch(epoch: int) -> dict:
        """Algorithm 3's step between epochs (the main process's, its tree and vectors given to the others), the
        dev metric and the cached negatives; skipped (no corpus embedding) where no tree, no wanted dev figure and
        no cache would follow."""
        may_recluster = config.co_training and tree is not None and epoch < config.epochs
        if not (may_recluster or (config.dev_every_epoch and dev_queries)
                or (config.cached_negatives and epoch < config.epochs)):
            return {}
        notes, new_tree, vectors = main_process_result(lambda: reclustering(epoch, may_recluster))
        if vectors is not None:
            loss.refresh_negatives(vectors)
        if new_tree is not None:
            model.set_tree(new_tree, levels)
            trainer.forget_optimizer_state(model.centroids.parameters())
            loss.set_tree(new_tree)
        return notes

    trained = trainer.train(resume=resume, after_epoch=after_epoch)
    seconds = time.perf_counter() - started
    summary = {"config": asdict(config), "documents": n,
               "pairs": len(training_set) if training_set is not None else 0, "dev_queries": len(dev_queries),
               "tree": ({"branching": tree.branching, "depth": tree.depth, "hierarchy_levels": levels,
                         "nodes": [tree.size(t) for t in range(tree.depth + 1)]} if tree is not None else None),
               **({"matryoshka_dims": list(matryoshka[0]), "matryoshka_weights": list(matryoshka[1])}
                  if matryoshka is not None else {}),
               "steps_per_epoch": len(batches), "train_seconds": round(seconds, 1),
               f"dev_{CoTraining.MEASURE}_initial": initial_dev,
               f"dev_{CoTraining.MEASURE}_per_epoch": [h.notes.get("dev") for h in trained],
               "reclustered_after_epochs": [h.epoch for h in trained if h.notes.get("reclustered")],
               **epoch_summary(trained)}
    if is_main_process():
        best = [h.epoch for h in trained if h.notes.get("best")]
        last = trained[-1].epoch if trained else 0
        summary["saved_epoch"] = (best[-1] if best else 0) if config.best_epoch else last
        if not config.best_epoch:
            encoder.save(output / "model", fp16=True, max_length=config.index_max_length)
        elif best:  # copied, not moved: a run started again once finished finds its best epoch where it was
            copy_model_directory(co_training.best_model, output / "model")
        else:  # no epoch beat the starting encoder: it is the result
            load_encoder(config.base, "dense").save(output / "model", fp16=True, max_length=config.index_max_length)
        if config.average_with_base:
            average_with_base(str(output / "model"), config.base, config.average_with_base, output / "model")
            summary["averaged_with_base"] = config.average_with_base
        # the model carries how it was made (a packaged copy keeps its recipe, dev figures and time beside it)
        atomic_write_json(output / "model" / TRAINING_FILE, summary)
        summary = write_run_summary(output, summary)
    return summary
