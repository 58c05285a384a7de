"""Inference-free learned sparse retrieval (Geng et al., "Towards Competitive Search Relevance For
Inference-Free Learned Sparse Retrievers", arXiv 2411.04403), composed from shared pieces:

- the model: :class:`~semiret.models.inference_free.InferenceFreeModel`, a SPLADE document encoder
  (initialised from ``splade-tiny``) and a query side that is a tokenizer plus a frozen token-weight table
  (IDF); ``s(q, d) = sum_t idf(t) q_t d_t`` over the inverted index (the ``inference-free`` retriever);
- training: :class:`~semiret.training.distillation.DistillationLoss`, KL distillation with the IDF-aware
  student score plus the (sampled) FLOPS regularizer with a quadratic lambda warm-up, from a heterogeneous
  ensemble teacher (:mod:`semiret.training.teachers`, per-query min-max normalized, averaged, scaled by S);
  corpus pre-training on pseudo-queries (:mod:`semiret.training.pseudo_queries`) then fine-tuning on qrels,
  each stage with the shared resumable :class:`~semiret.training.trainer.Trainer`.

A saved model (``--model <dir>`` for the ``inference-free`` and ``splade`` retrievers) is described in
:mod:`semiret.models.inference_free`.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from semiret.data.collection import Collection, Document
from semiret.data.packaged import model_directory
from semiret.errors import SemiretError
from semiret.files import atomic_write_json
from semiret.models.checkpoints import (IDF_FILE, INFERENCE_FREE, inference_free_document_threshold,
                                       inference_free_lexical_prior, resolve_inference_free)
from semiret.text.wordpiece import WordPieceVocabulary
from semiret.training.config import Pretraining, TrainingConfig, WeightAveraging

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------- static pruning
def document_threshold_sweep(model: str, data: str, split: str, measures: tuple[str, ...] = ("nDCG@10",)) -> list[dict]:
    """:func:`~semiret.evaluation.pruning.threshold_sweep` of a saved model on ``data``'s ``split`` queries,
    weighted as the ``inference-free`` retriever weights them (the model's table, default ``min_idf``), with
    the model's lexical prior added as the retriever adds it; the corpus is encoded once."""
    from semiret.evaluation.pruning import threshold_sweep
    from semiret.models.encoders import load_encoder
    from semiret.search.lexical import IDFQueries
    from semiret.text.bm25 import LexicalPrior

    path, meta = INFERENCE_FREE.read(model)
    collection = Collection(data)
    qrels, queries = collection.qrels(split), collection.queries(split)
    documents = list(collection.corpus())
    vectors = load_encoder(str(path), "splade").encode_document([d.full_text for d in documents])
    vocabulary = WordPieceVocabulary(str(path))
    prior = LexicalPrior.from_config(meta.get("lexical_prior"))
    added = prior.vectors(vocabulary, [d.full_text for d in documents]) if prior else None
    query_side = IDFQueries.from_table(path / IDF_FILE, vocabulary)
    return threshold_sweep(vectors, [d.id for d in documents], list(queries),
                           query_side.encode_queries(list(queries.values())), qrels, measures=measures, added=added)


def choose_document_threshold(model: str, data: str, split: str = "train") -> dict:
    """Choose a document-weight threshold that keeps nDCG@10 on ``data``'s ``split`` queries
    (:func:`~semiret.evaluation.pruning.largest_safe_threshold`) and record it, with the sweep, in the
    model's ``inference-free.json``."""
    from semiret.evaluation.pruning import largest_safe_threshold

    rows = document_threshold_sweep(model, data, split)
    return record_document_threshold(model, largest_safe_threshold(rows),
                                     sweep={"data": str(data), "split": split, "rows": rows})


def record_document_threshold(model: str | Path, threshold: float | None, sweep: dict | None = None) -> dict:
    """Write ``threshold`` (and the sweep that chose it) into a saved model's ``inference-free.json``."""
    chosen = {"document_threshold": threshold, **({"document_threshold_sweep": sweep} if sweep else {})}
    path, meta = INFERENCE_FREE.read(str(model))
    atomic_write_json(path / INFERENCE_FREE.marker, {**meta, **chosen})
    return chosen


# ---------------------------------------------------------------------------------------------- lexical prior
LEXICAL_PRIOR_WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0)
"""The weights :func:`choose_lexical_prior` tries: those the packaged model's prior was chosen among (it took 1),
and up to 5, where students fitted harder to their training collection peaked (2-3, docs/results.md)."""


def lexical_prior_sweep(model: str, data: str, split: str, weights=LEXICAL_PRIOR_WEIGHTS, stems: bool = True,
                        idf: str = "model", measures: tuple[str, ...] = ("nDCG@10", "R@100"),
                        prior_alone: bool = False) -> list[dict]:
    """One row of ``measures`` per lexical-prior weight W: ``data``'s ``split`` queries (weighted as the
    ``inference-free`` retriever weights them; ``idf="corpus"``: by this corpus's IDF) over the model's document
    vectors (pruned at its recorded threshold) plus W x BM25 over the documents' own tokens
    (:class:`~semiret.text.bm25.LexicalPrior`); ``prior_alone`` adds a row of the prior without the model. The
    corpus is encoded once, so the sweep costs one indexing of the model, not one per weight."""
    import tempfile

    from semiret.evaluation.pruning import search_vectors
    from semiret.models.encoders import load_encoder
    from semiret.models.sparse import SparseVectors
    from semiret.search.lexical import IDFQueries
    from semiret.text.bm25 import LexicalPrior
    from semiret.text.token_weights import corpus_idf, weights_table

    path, _ = INFERENCE_FREE.read(model)
    collection = Collection(data)
    qrels, queries = collection.qrels(split), collection.queries(split)
    documents = list(collection.corpus())
    texts, ids = [d.full_text for d in documents], [d.id for d in documents]
    vocabulary = WordPieceVocabulary(str(path))
    with tempfile.TemporaryDirectory() as scratch:
        table = path / IDF_FILE
        if idf == "corpus":  # Lucene IDF of this corpus's tokens, as `--idf corpus` computes it
            table = Path(scratch) / IDF_FILE
            table.write_text(json.dumps(weights_table(corpus_idf(texts, vocabulary), vocabulary)))
        encoded = IDFQueries.from_table(table, vocabulary).encode_queries(list(queries.values()))
    learned = load_encoder(str(path), "splade").encode_document(texts).prune(
        threshold=inference_free_document_threshold(str(path))).to_csr()
    prior = LexicalPrior(1.0, stems=stems).vectors(vocabulary, texts)
    rows = []
    for weight in [float(w) for w in weights] + ([None] if prior_alone else []):
        vectors = SparseVectors.from_csr(prior if weight is None else learned + weight * prior)
        figures, _ = search_vectors(vectors, ids, list(queries), encoded, qrels, measures)
        rows.append({"weight": "prior alone" if weight is None else weight, **figures})
    return rows


def choose_lexical_prior(model: str, data: str, split: str = "train", weights=LEXICAL_PRIOR_WEIGHTS,
                         stems: bool = True, tolerance: float = 0.001) -> dict:
    """Choose the weight of a lexical prior added to a trained model at indexing (not trained with: a student
    trained with it leans on it less and generalises worse, docs/results.md), on another collection's
    ``split`` queries: the smallest weight within ``tolerance`` nDCG@10 of the best; record it and the sweep
    in the model's ``inference-free.json``. Test queries are refused: choosing on them tunes on them."""
    if split == "test":
        raise SemiretError(f"the lexical prior's weight would be chosen on {data}'s test queries: choose it on "
                           "a training or dev split")
    from semiret.text.bm25 import LexicalPrior

    rows = lexical_prior_sweep(model, data, split, weights, stems, measures=("nDCG@10",))
    best = max(row["nDCG@10"] for row in rows)
    weight = min(row["weight"] for row in rows if row["nDCG@10"] >= best - tolerance)
    if len(rows) > 1 and weight == max(weights):
        log.warning("the lexical prior's best weight on %s is the largest tried, %s: a larger one may be better",
                    data, weight)
    choice = {"data": str(data), "split": split, "measure": "nDCG@10", "stems": stems, "tolerance": tolerance,
              "rows": rows, "note": f"added to the trained model without retraining; the smallest weight within "
                                    f"{tolerance} of the best on these queries"}
    return record_lexical_prior(model, LexicalPrior(weight, stems=stems) if weight else None, choice)


def record_lexical_prior(model: str | Path, prior, choice: dict | None = None) -> dict:
    """Write a :class:`~semiret.text.bm25.LexicalPrior` (None: none) and the choice that made it into a saved
    model's ``inference-free.json``, which the ``inference-free`` retriever applies at indexing."""
    from semiret.data.packaged import PACKAGED_CHECKPOINTS

    path, meta = INFERENCE_FREE.read(str(model))
    if PACKAGED_CHECKPOINTS.resolve() in path.resolve().parents:
        raise SemiretError(f"{model} is a packaged model, whose files are never rewritten: copy its folder and "
                           "record the prior in the copy")
    recorded = {k: v for k, v in prior.config().items() if k != "avgdl"} if prior else None
    chosen = {"lexical_prior": recorded, **({"lexical_prior_choice": choice} if choice else {})}
    atomic_write_json(path / INFERENCE_FREE.marker, {**meta, **chosen})
    return chosen


# ---------------------------------------------------------------------------------------------- query weights
def is_corpus_idf(idf) -> bool:
    """``corpus`` or ``corpus:<collection>``: IDF computed from a collection's documents, not read from a table."""
    return str(idf) == "corpus" or str(idf).startswith("corpus:")


def idf_corpus(idf: str, data: str) -> str | None:
    """The collection whose documents an IDF option is computed from: ``corpus`` -> ``data``,
    ``corpus:<name or folder>`` -> that collection (say, an unlabelled target corpus); None for tables."""
    from semiret.data.paths import dataset

    if not is_corpus_idf(idf):
        return None
    return data if idf == "corpus" else str(dataset(idf.removeprefix("corpus:")))


def load_idf(idf, base: str, documents: list[Document] | None = None) -> tuple[np.ndarray, str]:
    """(weights over ``base``'s vocabulary, description) for an IDF option (``msmarco``, a JSON table, ``corpus``
    with ``documents``, or an array); errors before any model loads."""
    import numpy as np

    from semiret.text.token_weights import check_weights, corpus_idf, load_token_weights

    vocabulary = WordPieceVocabulary(str(model_directory(base)))
    if isinstance(idf, np.ndarray):
        return check_weights(idf, vocabulary.size, "IDF"), "array"
    if is_corpus_idf(idf):
        if not documents:
            raise SemiretError("corpus IDF needs the corpus documents")
        return corpus_idf([d.full_text for d in documents], vocabulary), str(idf)
    return load_token_weights(idf, vocabulary), str(idf)


# ---------------------------------------------------------------------------------------------- training
@dataclass
class InferenceFreeTrainingConfig(Pretraining, WeightAveraging, TrainingConfig):
    output: str = "runs/inference-free"
    """Run folder: teacher caches, checkpoints, final model."""
    idf: str = "msmarco"
    """Query token weights: 'msmarco', 'corpus' (IDF of --data's documents), 'corpus:<name or folder>' (of
    another collection's, e.g. the unlabelled target corpus) or a JSON {token: weight} table."""
    idf_aware: bool = True
    """IDF-aware student score (Eq. 5); off: the plain binary score (Eq. 2)."""
    teachers: str = "dense:minilm@128,sparse:splade-tiny,bm25"
    """Comma-separated teachers: dense[:model], sparse[:model], sidr[:model] (full SiDR), bm25; a model name may
    end in @N (its inputs cut to N tokens)."""
    learn_query_weights: bool = False
    """Learn each query token's weight beside the document encoder, starting from the IDF (a factor per token,
    Li-LSR: Nardini et al. 2025); the query side stays a lookup table, tokens no training query has keep their
    IDF. Needs --idf-aware."""
    query_weights_learning_rate: float = 5e-3
    """Peak learning rate of the query-weight factors (their logarithms) with --learn-query-weights."""
    freeze_document_encoder: bool = False
    """With --learn-query-weights: keep the --base model's document encoder as it is and learn the query weights
    alone, so the indexes already built with --base stay valid (search them with --idf MODEL/idf.json)."""
    normalize_teachers: bool = True
    """Min-max normalize, average and scale teachers; off: 'simply add' raw scores."""
    fit_student_scale: bool = True
    """Distil the student's scores times a factor fitted per step; off: the paper's plain KL, under which our
    student prunes its expansion to shrink its scores.

    The factor: :func:`~semiret.training.losses.fitted_student_scale`."""
    pseudo_queries_per_document: int = 1
    """Pseudo-queries generated from each pre-training document."""
    pretrain_queries_per_epoch: int = 1024
    """Pseudo-queries drawn per pre-training epoch, shared equally between the corpora."""
    pretrain_epochs: int = 2
    pretrain_scale: float = 10.0
    """Scale S of the ensemble teacher's scores in pre-training."""
    pretrain_flops_weight: float = 1e-7
    """FLOPS weight in pre-training (the paper: 1e-7)."""
    pretrain_learning_rate: float = 1e-4
    pretrain_max_length: int = 128
    """Document tokens the student reads in pre-training (the saved model indexes at the fine-tuning length)."""
    pretrain_in_batch_negatives: bool = False
    """Score each pre-training query against every document of its batch (the paper's pre-training: 48
    queries x 384 documents), not only its own candidates; the teachers score the same pairs."""
    finetune_epochs: int = 8
    finetune_scale: float = 30.0
    """Scale S of the ensemble teacher's scores in fine-tuning."""
    finetune_flops_weight: float = 0.002
    """FLOPS weight in fine-tuning. The paper's Pareto point, 0.02, halves SPLADE-tiny's expansion on SciFact
    within 52 steps and costs quality (docs/results.md), so the default is ten times lower."""
    finetune_learning_rate: float = 2e-4
    finetune_max_length: int = 256
    finetune_in_batch_negatives: bool = False
    """The same in fine-tuning."""
    flops_warmup_fraction: float = 0.3
    """Fraction of a stage's steps over which the FLOPS weight grows quadratically to its value."""
    candidates: int = 8
    """Documents per query."""
    mining_depth: int = 20
    """Top documents of each teacher's (and BM25's) ranking that negatives are drawn from."""
    flops_sample: int = 2048
    """Vocabulary entries outside the batch's query tokens sampled per step for the FLOPS term."""
    teacher_cache: str | None = None
    """Teacher vector cache folder (default <output>/teachers; share it between ablation runs)."""
    lexical_prior: float | None = None
    """Weight of BM25 over each document's own tokens added to the student's learned document weights, in
    training and at indexing (beyond the paper: the student learns what it adds to BM25). Default: the --base
    model's own (a trained inference-free model's), else none, the paper's."""
    lexical_prior_stems: bool = True
    """With --lexical-prior: each document word also counts for the other whole-word tokens of its stem, as
    stemming does for BM25 over words."""
    finetune_also: list[str] | None = field(default=None, metadata={"flag": "--finetune-also"})
    """More labelled collections (names or folders, repeatable) fine-tuned on beside --data, their --split
    queries; every query of every collection once per epoch."""
    choose_document_threshold: bool = field(default=True,
                                            metadata={"flag": "--document-threshold/--no-document-threshold"})
    """After fine-tuning, record a document-weight threshold that keeps nDCG@10 on the fine-tuning split; the
    retriever drops document weights below it (applied at indexing).

    The choice: :func:`choose_document_threshold`."""
    choose_lexical_prior: str | None = None
    """A collection (name or folder) whose --split queries choose the weight of a lexical prior recorded with the
    saved model after training (added at indexing, not trained with; stem variants per --lexical-prior-stems):
    the smallest of 0-5 within 0.001 nDCG@10 of the best. Another collection than --data, so the prior is
    chosen for corpora the model was not fitted to. The choice: :func:`choose_lexical_prior`."""

    def stage(self, stage: str, option: str):
        """A per-stage option (``scale``, ``epochs``...) of ``stage`` (``pretrain`` or ``finetune``)."""
        return getattr(self, f"{stage}_{option}")

    def resolved(self) -> InferenceFreeTrainingConfig:
        """A copy whose ``data`` and pre-training corpora are folders, the corpora listed explicitly."""
        from semiret.data.paths import dataset

        resolved = super().resolved()
        resolved.base = resolve_inference_free(resolved.base)  # a packaged model's name: its directory
        resolved.resolve_pretraining()
        resolved.finetune_also = [str(dataset(c)) for c in resolved.finetune_also or []]
        if resolved.choose_lexical_prior is not None:
            resolved.choose_lexical_prior = str(dataset(resolved.choose_lexical_prior))
        return resolved

    def validate(self) -> None:
        from semiret.training.teachers import parse_teachers

        parse_teachers(self.teachers)
        if self.batch_size < 1 or self.candidates < 2:
            raise SemiretError("training needs batches of at least 1 query and at least 2 candidates per query")
        if self.finetune_epochs < 0 or self.pretrain_epochs < 0:
            raise SemiretError("epochs must be non-negative")
        self.validate_stages()
        for name in ("pretrain_scale", "finetune_scale"):
            if not getattr(self, name) > 0:
                raise SemiretError(f"{name} must be positive")
        self.validate_averaging()
        if self.learn_query_weights and not self.idf_aware:
            raise SemiretError("--learn-query-weights starts from the IDF: it needs --idf-aware")
        if self.freeze_document_encoder and not self.learn_query_weights:
            raise SemiretError("--freeze-document-encoder leaves nothing to train without --learn-query-weights")
        if not self.query_weights_learning_rate > 0:
            raise SemiretError("query_weights_learning_rate must be positive")
        for name in ("pretrain_flops_weight", "finetune_flops_weight"):
            if not getattr(self, name) >= 0:
                raise SemiretError(f"{name} must be non-negative")
        if self.choose_lexical_prior is not None:
            trained_with = self.lexical_prior if self.lexical_prior is not None else (
                inference_free_lexical_prior(resolve_inference_free(self.base)) or {}).get("weight")
            if trained_with:
                raise SemiretError("--choose-lexical-prior chooses a prior for a model trained without one, and this "
                                   "run trains with one (--lexical-prior, or --base's own): give --lexical-prior 0")
            if self.split == "test":
                raise SemiretError("--choose-lexical-prior reads --split's queries, which are the test queries here: "
                                   "choosing on them tunes on them")
            if self.freeze_document_encoder:
                raise SemiretError("--choose-lexical-prior would change the frozen base's document weights and "
                                   "invalidate its indexes: record a prior with the base instead")


def _set_trainable(model, config: InferenceFreeTrainingConfig) -> None:
    """The query weights trainable with --learn-query-weights; the document encoder frozen with
    --freeze-document-encoder."""
    if config.learn_query_weights:
        model.learn_query_weights()
    if config.freeze_document_encoder:
        model.encoder.requires_grad_(False)


def _train_stage(model, sets, config: InferenceFreeTrainingConfig, stage: str, resume: bool) -> dict:
    """One stage (``pretrain`` or ``finetune``) with the shared Trainer; returns its summary."""
    from semiret.training.config import Schedule
    from semiret.training.distillation import DistillationBatches, DistillationLoss
    from semiret.training.trainer import train_stage

    model.encoder.inputs.max_length = config.stage(stage, "max_length")
    epochs = config.stage(stage, "epochs")
    batches = DistillationBatches(sets, config.batch_size,
                                  config.pretrain_queries_per_epoch if stage == "pretrain" else None)
    loss = DistillationLoss(
        sets, candidates=config.candidates, scale=config.stage(stage, "scale"),
        flops_weight=config.stage(stage, "flops_weight"),
        flops_ramp_steps=int(config.flops_warmup_fraction * len(batches) * epochs), flops_sample=config.flops_sample,
        idf_aware=config.idf_aware, normalize_teachers=config.normalize_teachers,
        fit_student_scale=config.fit_student_scale, in_batch_negatives=config.stage(stage, "in_batch_negatives"))
    schedule = Schedule(epochs, config.stage(stage, "learning_rate"), warmup_epochs=0.1)
    rates = {"query_log_scale": config.query_weights_learning_rate} if model.query_log_scale is not None else None
    return {"stage": stage, "corpora": [s.name for s in sets], "queries": sum(len(s.examples) for s in sets),
            **train_stage(model, loss, batches, config, schedule, Path(config.output) / stage, rates, resume)}


def train_inference_free(config: InferenceFreeTrainingConfig, resume: bool = True) -> dict:
    """Pre-train on pseudo-queries of the pre-training corpora (if any), then fine-tune on ``data``'s qrels.

    Writes ``<output>/pretrain/`` and ``<output>/finetune/`` (resumable checkpoints, teacher caches under
    ``<output>/teachers``) and the final model to ``<output>/model``; returns a summary.
    """
    import torch

    from semiret.models.inference_free import InferenceFreeModel
    from semiret.text.bm25 import LexicalPrior
    from semiret.models.splade import SpladeEncoder
    from semiret.training.data import TrainingSet
    from semiret.training.distillation import DistillationSet
    from semiret.training.trainer import check_reused_stage, start_afresh, write_run_summary
    from semiret.training.distributed import is_main_process, main_process_first, training_device
    from semiret.training.teachers import run_teachers

    started = time.perf_counter()
    config.validate()  # teacher list, numbers
    config = config.resolved()
    output = Path(config.output)
    # everything that can be wrong with the inputs fails here, before teachers or the student run
    training_sets = [(root, TrainingSet.from_collection(Collection(root), config.split))
                     for root in [config.data, *(config.finetune_also or [])]] if config.finetune_epochs else []
    if config.choose_lexical_prior is not None:  # its queries and judgements exist before anything trains
        Collection(config.choose_lexical_prior).qrels(config.split)
    source_corpus = idf_corpus(config.idf, config.data)
    idf_documents = list(Collection(source_corpus).corpus()) if source_corpus else None
    weights, source = load_idf(config.idf, config.base, idf_documents)
    teachers, cache_dir = run_teachers(config.teachers, output, config.teacher_cache, training_device(config.device))

    if config.lexical_prior is None:  # the base model's own (none for an untrained one)
        prior = LexicalPrior.from_config(inference_free_lexical_prior(config.base))
    else:
        prior = LexicalPrior(config.lexical_prior, stems=config.lexical_prior_stems) if config.lexical_prior else None
    model = InferenceFreeModel(SpladeEncoder.from_pretrained(config.base).float(), weights,
                               "idf" if config.idf_aware else "binary", source, prior)
    _set_trainable(model, config)
    if config.threads:
        torch.set_num_threads(config.threads)
    summary: dict = {"config": asdict(config), "stages": []}
    pretrained = output / "pretrain" / "model"
    if not resume:
        start_afresh(output, ("pretrain", "finetune"))
    if config.pretrain_corpora and config.pretrain_epochs:
        if (pretrained / INFERENCE_FREE.marker).is_file() and resume and \
                check_reused_stage(output / "pretrain", config, config.pretrain_epochs):
            log.warning("pre-training already done: loading %s", pretrained)
            done = json.loads((pretrained / INFERENCE_FREE.marker).read_text())["training"]
            model = InferenceFreeModel.load(str(pretrained))
            _set_trainable(model, config)  # fine-tuning goes on from the table pre-training learned
            summary["stages"].append(done)
        else:
            t0 = time.perf_counter()
            with main_process_first():  # the others read the teacher caches it wrote
                sets = [DistillationSet.from_pseudo_queries(corpus, config.pseudo_queries_per_document,
                                                            config.seed + k, f"pq{k}", teachers, cache_dir,
                                                            config.mining_depth, model.vocabulary)
                        for k, corpus in enumerate(config.pretrain_corpora)]
            prep = time.perf_counter() - t0
            result = _train_stage(model, sets, config, "pretrain", resume)
            result["preparation_seconds"] = round(prep, 1)
            summary["stages"].append(result)
            if is_main_process():
                model.save(pretrained, training=result, fp16=False, max_length=config.finetune_max_length)
            start_afresh(output, ("finetune",))  # a fine-tuning of an earlier pre-training (fewer epochs) is stale
    if config.finetune_epochs:
        t0 = time.perf_counter()
        with main_process_first():
            data = [DistillationSet.from_training_set(Path(root).name, labelled, teachers, cache_dir,
                                                      config.mining_depth, model.vocabulary)
                    for root, labelled in training_sets]
        prep = time.perf_counter() - t0
        result = _train_stage(model, data, config, "finetune", resume)
        result["preparation_seconds"] = round(prep, 1)
        summary["stages"].append(result)
    summary["train_seconds"] = round(time.perf_counter() - started, 1)
    summary["teachers"] = [t.name for t in teachers]
    # pre-training crops documents to 128 tokens to be fast; indexing must not (the paper indexes at 512): the
    # saved model indexes at the fine-tuning length, whichever stage ran last
    if config.average_with_base:
        from semiret.models.base import average_weights

        average_weights(model.encoder, SpladeEncoder.from_pretrained(config.base).float(), config.average_with_base)
    if is_main_process():
        model.save(output / "model", training={k: v for k, v in summary.items()}, max_length=config.finetune_max_length)
        if config.freeze_document_encoder:  # the base's document weights, so its pruning: its indexes stay valid
            summary.update(record_document_threshold(output / "model", inference_free_document_threshold(config.base)))
        elif config.finetune_epochs and config.choose_document_threshold:
            summary.update(choose_document_threshold(str(output / "model"), config.data, config.split))
        if config.choose_lexical_prior is not None:
            summary.update(choose_lexical_prior(str(output / "model"), config.choose_lexical_prior, config.split,
                                                stems=config.lexical_prior_stems))
        summary = write_run_summary(output, summary)
    return summary
