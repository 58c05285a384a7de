"""Inference-free learned sparse retrieval (Geng et al., "Towards Competitive Search Relevance For
Inference-Free Learned Sparse Retrievers", arXiv 2411.04403), composed from shared pieces:

- the model: :class:`~semiret.models.inference_free.InferenceFreeModel`, a SPLADE document encoder
  (initialised from ``splade-tiny``) and a query side that is a tokenizer plus a frozen token-weight table
  (IDF); ``s(q, d) = sum_t idf(t) q_t d_t`` over the inverted index (the ``inference-free`` retriever);
- training: KL distillation (:func:`~semiret.training.losses.kl_distillation`) with the IDF-aware student
  score, the FLOPS regularizer with a quadratic lambda warm-up, a heterogeneous ensemble teacher
  (:mod:`semiret.training.teachers`, per-query min-max normalized, averaged, scaled by S), corpus
  pre-training on pseudo-queries (:mod:`semiret.training.pseudo_queries`) then fine-tuning on qrels, each
  stage with the shared resumable :class:`~semiret.training.trainer.Trainer`.

A saved model (``--model <dir>`` for the ``inference-free`` and ``splade`` retrievers) is described in
:mod:`semiret.models.inference_free`.
"""

from __future__ import annotations

import json
import logging
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from semiret.data.collection import Collection, Document
from semiret.data.packaged import model_directory
from semiret.errors import SemiretError
from semiret.files import atomic_write_json
from semiret.models.checkpoints import IDF_FILE, INFERENCE_FREE
from semiret.models.inference_free import InferenceFreeModel
from semiret.text.token_weights import check_weights, corpus_idf, load_token_weights
from semiret.text.wordpiece import WordPieceVocabulary

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------- static pruning
def document_threshold_sweep(model: str, data: str, split: str, measures: tuple[str, ...] = ("nDCG@10",)) -> list[dict]:
    """:func:`~semiret.evaluation.pruning.threshold_sweep` of a saved model on ``data``'s ``split`` queries,
    weighted as the ``inference-free`` retriever weights them (the model's table, default ``min_idf``); the
    corpus is encoded once."""
    from semiret.evaluation.pruning import threshold_sweep
    from semiret.models.encoders import load_encoder
    from semiret.search.retrievers import IDFRetriever

    path, _ = INFERENCE_FREE.read(model)
    collection = Collection(data)
    qrels, queries = collection.qrels(split), collection.queries(split)
    documents = list(collection.corpus())
    vectors = load_encoder(str(path), "splade").encode_document([d.full_text for d in documents])
    query_side = IDFRetriever(None, WordPieceVocabulary(str(path)), idf=path / IDF_FILE)
    return threshold_sweep(vectors, [d.id for d in documents], list(queries),
                           query_side.encode_queries(list(queries.values())), qrels, measures=measures)


def choose_document_threshold(model: str, data: str, split: str = "train") -> dict:
    """Choose a document-weight threshold that keeps nDCG@10 on ``data``'s ``split`` queries
    (:func:`~semiret.evaluation.pruning.largest_safe_threshold`) and record it, with the sweep, in the
    model's ``inference-free.json``."""
    from semiret.evaluation.pruning import largest_safe_threshold

    rows = document_threshold_sweep(model, data, split)
    chosen = {"document_threshold": largest_safe_threshold(rows),
              "document_threshold_sweep": {"data": str(data), "split": split, "rows": rows}}
    path, meta = INFERENCE_FREE.read(model)
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
class InferenceFreeTrainingConfig:
    data: str
    """Fine-tuning collection (its ``split`` qrels); also the first pre-training corpus unless ``pretrain_corpora``."""
    output: str
    split: str = "train"
    base: str = "splade-tiny"
    idf: str = "msmarco"
    idf_aware: bool = True
    teachers: str = "dense:minilm@128,sparse:splade-tiny,bm25"
    normalize_teachers: bool = True
    fit_student_scale: bool = True
    """Distil ``a * student`` with ``a`` fitted per step (:func:`~semiret.training.losses.fitted_student_scale`);
    off: the paper's plain KL, under which our student prunes its expansion to shrink its scores."""
    pretrain_corpora: list[str] = field(default_factory=list)
    """Corpora for label-free pre-training (names or folders); empty: no pre-training."""
    pseudo_queries_per_document: int = 1
    pretrain_queries_per_epoch: int = 1024
    pretrain_epochs: int = 2
    pretrain_scale: float = 10.0
    pretrain_flops_weight: float = 1e-7
    pretrain_learning_rate: float = 1e-4
    pretrain_max_length: int = 128
    pretrain_in_batch_negatives: bool = False
    """Score each pre-training query against every document of its batch (the paper's pre-training: 48
    queries x 384 documents), not only its own candidates; the teachers score the same pairs."""
    finetune_epochs: int = 8
    finetune_scale: float = 30.0
    finetune_flops_weight: float = 0.002
    """The paper's Pareto point is 0.02; on SciFact with SPLADE-tiny it halves the expansion within 52 steps
    and costs quality (docs/results.md), so the default is ten times lower."""
    finetune_learning_rate: float = 2e-4
    finetune_max_length: int = 256
    finetune_in_batch_negatives: bool = False
    flops_warmup_fraction: float = 0.3
    batch_size: int = 32
    candidates: int = 8
    mining_depth: int = 20
    flops_sample: int = 2048
    """Vocabulary entries outside the batch's query tokens sampled per step for the FLOPS term."""
    max_grad_norm: float = 2.0
    seed: int = 12345
    threads: int | None = None
    teacher_cache: str | None = None
    """Where teacher vectors are cached (default ``<output>/teachers``; share it between ablation runs)."""
    choose_document_threshold: bool = True
    """After fine-tuning, record the static-pruning threshold that keeps nDCG@10 on the fine-tuning split
    (:func:`choose_document_threshold`); the retriever drops document weights below it."""

    def validate(self) -> None:
        from semiret.training.teachers import parse_teachers

        parse_teachers(self.teachers)
        if self.batch_size < 1 or self.candidates < 2:
            raise SemiretError("training needs batches of at least 1 query and at least 2 candidates per query")
        if self.finetune_epochs < 0 or self.pretrain_epochs < 0:
            raise SemiretError("epochs must be non-negative")
        if self.finetune_epochs == 0 and not (self.pretrain_corpora and self.pretrain_epochs):
            raise SemiretError("nothing to train: no fine-tuning epochs and no pre-training")
        for name in ("pretrain_scale", "finetune_scale"):
            if not getattr(self, name) > 0:
                raise SemiretError(f"{name} must be positive")
        for name in ("pretrain_flops_weight", "finetune_flops_weight"):
            if not getattr(self, name) >= 0:
                raise SemiretError(f"{name} must be non-negative")


@dataclass
class Example:
    query_id: str
    text: str
    positives: tuple[int, ...]  # document rows


class StageData:
    """One corpus with its queries, cached teacher vectors and mined candidate pools."""

    def __init__(self, name: str, documents: list[Document], examples: list[Example], teachers, cache_dir: Path,
                 mining_depth: int, vocabulary):
        from semiret.training.teachers import BM25Teacher, TeacherScores

        self.name, self.documents, self.examples = name, documents, examples
        ids = [e.query_id for e in examples]
        texts = [e.text for e in examples]
        self.teachers = [TeacherScores(t, documents, ids, texts, cache_dir) for t in teachers]
        miners = list(self.teachers)
        if not any(t.teacher.kind == "bm25" for t in miners):
            miners.append(TeacherScores(BM25Teacher(), documents, ids, texts, None))
        tops = [m.top(mining_depth) for m in miners]
        self.pools = []
        for i, example in enumerate(examples):
            pool, seen = [], set(example.positives)
            for rank in range(mining_depth):  # interleave the sources' rankings
                for top in tops:
                    row = int(top[i, rank]) if rank < top.shape[1] else -1
                    if row >= 0 and row not in seen:
                        seen.add(row)
                        pool.append(row)
            self.pools.append(pool)
        self.tokens = [np.unique(np.asarray(vocabulary.encode(t), np.int64)) for t in texts]

    def candidates(self, i: int, n: int, rng: random.Random) -> list[int]:
        """The first positive (random among several) and ``n - 1`` negatives drawn from the pool."""
        example = self.examples[i]
        positive = rng.choice(example.positives)
        pool = self.pools[i]
        negatives = rng.sample(pool, n - 1) if len(pool) >= n - 1 else (
            pool + [rng.randrange(len(self.documents)) for _ in range(n - 1 - len(pool))])
        return [positive, *negatives]


def _documents(root) -> list[Document]:
    return list(Collection(root).corpus())


def _pretrain_stages(config, teachers, cache_dir, vocabulary) -> list[StageData]:
    from semiret.data.paths import dataset
    from semiret.training.pseudo_queries import generate_pseudo_queries

    stages = []
    for k, corpus in enumerate(config.pretrain_corpora):
        root = dataset(corpus)
        documents = _documents(root)
        row = {d.id: i for i, d in enumerate(documents)}
        queries = generate_pseudo_queries(documents, config.pseudo_queries_per_document, seed=config.seed + k,
                                          prefix=f"pq{k}")
        examples = [Example(q.id, q.text, (row[q.document_id],)) for q in queries]
        stages.append(StageData(Path(root).name, documents, examples, teachers, cache_dir, config.mining_depth,
                                vocabulary))
    return stages


def _finetune_stage(config, training_set, teachers, cache_dir, vocabulary) -> StageData:
    documents = list(training_set.documents.values())
    row = {d.id: i for i, d in enumerate(documents)}
    examples = [Example(q, next(p.query for p in training_set.pairs if p.query_id == q),
                        tuple(sorted(row[d] for d in ds))) for q, ds in training_set.positives.items()]
    return StageData(Path(config.data).name, documents, examples, teachers, cache_dir, config.mining_depth,
                     vocabulary)


def rng_np(seed: float) -> np.random.Generator:
    return np.random.default_rng(int(seed * 2**32))


def _tokens(encoder, texts: list[str]):
    batch = next(encoder.inputs.batches(texts, len(texts)))
    order = np.argsort(batch.positions)
    return batch.input_ids[order], batch.attention_mask[order]


def _run_stage(model, stages: list[StageData], config, stage: str, output: Path, resume: bool) -> dict:
    """One stage (``pretrain`` or ``finetune``) with the shared Trainer; returns its summary."""
    from semiret.training.losses import (
        ensemble_teacher_scores, fitted_student_scale, grouped_scores, kl_distillation, quadratic_warmup,
    )
    from semiret.training.trainer import Trainer, TrainingConfig

    pre = stage == "pretrain"
    scale = config.pretrain_scale if pre else config.finetune_scale
    flops_weight = config.pretrain_flops_weight if pre else config.finetune_flops_weight
    max_length = config.pretrain_max_length if pre else config.finetune_max_length
    epochs = config.pretrain_epochs if pre else config.finetune_epochs
    in_batch = config.pretrain_in_batch_negatives if pre else config.finetune_in_batch_negatives
    per_epoch = config.pretrain_queries_per_epoch if pre else None
    model.encoder.inputs.max_length = max_length

    def make_batches(epoch: int, rng: random.Random):
        batches = []
        for s, data in enumerate(stages):
            order = list(range(len(data.examples)))
            rng.shuffle(order)
            if per_epoch:
                order = order[: max(1, per_epoch // len(stages))]
            batches += [(s, order[i: i + config.batch_size]) for i in range(0, len(order), config.batch_size)]
        rng.shuffle(batches)  # each batch from one corpus, corpora interleaved (the paper's sampler)
        seeded = random.Random(rng.random())
        return [(s, rows, seeded.random()) for s, rows in batches]

    steps_per_epoch = len(make_batches(0, random.Random(0)))
    total_steps = steps_per_epoch * epochs
    ramp = int(config.flops_warmup_fraction * total_steps)

    def step(batch, global_step):
        s, rows, seed = batch
        data = stages[s]
        rng = random.Random(seed)
        candidates = np.array([data.candidates(i, config.candidates, rng) for i in rows])  # [N, C]
        texts = [data.documents[r].full_text for r in candidates.ravel()]
        ids, mask = _tokens(model.encoder, texts)
        tokens = [data.tokens[i] for i in rows]
        # The ranking loss only sees the batch's query tokens, so the vocabulary projection is computed for
        # those exactly plus a uniform sample of the rest, whose FLOPS term is scaled up by the sampling rate
        # (an unbiased estimate of the full FLOPS regularizer and of its gradient).
        vocab = model.encoder.vocab_size
        in_queries = np.unique(np.concatenate(tokens)) if tokens else np.empty(0, np.int64)
        others = np.setdiff1d(np.arange(vocab), in_queries)
        sampled = np.sort(rng_np(seed).choice(others, min(config.flops_sample, len(others)), replace=False))
        columns = torch.from_numpy(np.concatenate([in_queries, sampled]))
        d = model.document_vectors(ids, mask, columns)
        q = model.query_vectors(tokens, config.idf_aware)[:, columns]
        if in_batch:  # every query against every document of the batch [N, N * C]
            student = q @ d.T
            scored = np.broadcast_to(candidates.ravel(), (len(rows), candidates.size))
        else:
            student, scored = grouped_scores(q, d), candidates
        query_ids = [data.examples[i].query_id for i in rows]
        teacher = ensemble_teacher_scores([torch.from_numpy(t.scores(query_ids, scored)) for t in data.teachers],
                                          scale, normalize=config.normalize_teachers)
        student_scale = fitted_student_scale(student, teacher) if config.fit_student_scale else 1.0
        rank = kl_distillation(student_scale * student, teacher)
        lam = quadratic_warmup(flops_weight, global_step, ramp)
        k = len(in_queries)
        rate = len(others) / max(len(sampled), 1)
        per_token = d.abs().mean(dim=0).pow(2)
        flops = per_token[:k].sum() + rate * per_token[k:].sum()
        nnz = ((d[:, :k] > 0).sum(dim=1).float() + rate * (d[:, k:] > 0).sum(dim=1).float()).mean().item()
        return rank + lam * flops, {"kl": rank.item(), "flops": flops.item(), "nnz": nnz, "scale": student_scale,
                                    "scored": student.shape[1]}

    trainer_config = TrainingConfig(epochs=epochs, batch_size=config.batch_size,
                                    learning_rate=config.pretrain_learning_rate if pre else config.finetune_learning_rate,
                                    warmup_epochs=0.1, max_grad_norm=config.max_grad_norm, seed=config.seed,
                                    threads=config.threads)
    figures: list[dict] = []
    original_step = step

    def recording_step(batch, global_step):
        loss, extra = original_step(batch, global_step)
        figures.append(extra)
        return loss, extra

    trainer = Trainer(model, make_batches, recording_step, trainer_config, output, steps_per_epoch)
    started = time.perf_counter()
    history = trainer.train(resume=resume)
    last = figures[-20:]
    return {"stage": stage, "corpora": [d.name for d in stages], "queries": sum(len(d.examples) for d in stages),
            "steps_per_epoch": steps_per_epoch, "epochs": epochs, "seconds": round(time.perf_counter() - started, 1),
            "loss_per_epoch": [round(h.mean_loss, 4) for h in history],
            "final_kl": round(float(np.mean([f["kl"] for f in last])), 4) if last else None,
            "final_nnz": round(float(np.mean([f["nnz"] for f in last])), 1) if last else None,
            "final_student_scale": round(float(np.mean([f["scale"] for f in last])), 4) if last else None,
            "documents_per_query": max((f["scored"] for f in figures), default=None)}


def train_inference_free(config: InferenceFreeTrainingConfig, resume: bool = True) -> dict:
    """Pre-train on pseudo-queries of ``pretrain_corpora`` (if any), then fine-tune on ``data``'s qrels.

    Writes ``<output>/pretrain/`` and ``<output>/finetune/`` (resumable checkpoints, teacher caches under
    ``<output>/teachers``) and the final model to ``<output>/model``; returns a summary.
    """
    from semiret.training.data import TrainingSet
    from semiret.training.teachers import make_teacher, parse_teachers, write_manifest

    started = time.perf_counter()
    config.validate()  # teacher list, numbers
    output = Path(config.output)
    teacher_specs = parse_teachers(config.teachers)
    # everything that can be wrong with the inputs fails here, before teachers or the student run
    collection = Collection(config.data)
    training_set = TrainingSet.from_collection(collection, config.split) if config.finetune_epochs else None
    source_corpus = idf_corpus(config.idf, config.data)
    idf_documents = _documents(source_corpus) if source_corpus else None
    weights, source = load_idf(config.idf, config.base, idf_documents)
    cache_dir = Path(config.teacher_cache) if config.teacher_cache else output / "teachers"
    teachers = [make_teacher(kind, model, length) for kind, model, length in teacher_specs]
    write_manifest(output, teachers)

    from semiret.models.splade import SpladeEncoder

    model = InferenceFreeModel(SpladeEncoder.from_pretrained(config.base), weights,
                               "idf" if config.idf_aware else "binary", source)
    if config.threads:
        torch.set_num_threads(config.threads)
    summary: dict = {"config": asdict(config), "stages": []}
    pretrained = output / "pretrain" / "model"
    if config.pretrain_corpora and config.pretrain_epochs:
        if (pretrained / INFERENCE_FREE.marker).is_file() and resume:
            log.warning("pre-training already done: loading %s", pretrained)
            done = json.loads((pretrained / INFERENCE_FREE.marker).read_text())["training"]
            model = InferenceFreeModel.load(str(pretrained))
            summary["stages"].append(done)
        else:
            t0 = time.perf_counter()
            stages = _pretrain_stages(config, teachers, cache_dir, model.vocabulary)
            prep = time.perf_counter() - t0
            result = _run_stage(model, stages, config, "pretrain", output / "pretrain", resume)
            result["preparation_seconds"] = round(prep, 1)
            summary["stages"].append(result)
            model.save(pretrained, training=result, fp16=False, max_length=config.finetune_max_length)
    if config.finetune_epochs:
        t0 = time.perf_counter()
        stage = _finetune_stage(config, training_set, teachers, cache_dir, model.vocabulary)
        prep = time.perf_counter() - t0
        result = _run_stage(model, [stage], config, "finetune", output / "finetune", resume)
        result["preparation_seconds"] = round(prep, 1)
        summary["stages"].append(result)
    summary["train_seconds"] = round(time.perf_counter() - started, 1)
    summary["teachers"] = [t.name for t in teachers]
    # pre-training crops documents to 128 tokens to be fast; indexing must not (the paper indexes at 512): the
    # saved model indexes at the fine-tuning length, whichever stage ran last
    model.save(output / "model", training={k: v for k, v in summary.items()}, max_length=config.finetune_max_length)
    if config.finetune_epochs and config.choose_document_threshold:
        summary.update(choose_document_threshold(str(output / "model"), config.data, config.split))
    (output / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary
