"""Distillation from cached teachers (the inference-free recipe): per-corpus query sets with their teachers'
scores and mined candidate pools, their batches, and the IDF-aware KL + FLOPS loss.

A query set's teachers score every (query, candidate) pair from cached vectors, so a step costs one student
forward over its candidates; candidates are the query's positive and negatives drawn from a pool that
interleaves the teachers' rankings (BM25's too, whether or not it teaches).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from semiret.data.collection import Collection, Document
from semiret.models.devices import module_device
from semiret.training.data import BatchSource, SeededBatch, TrainingSet, seeded
from semiret.training.distributed import encode_rows
from semiret.training.losses import (
    Loss,
    LossOutput,
    VocabularySample,
    ensemble_teacher_scores,
    fitted_student_scale,
    flops_regularizer,
    grouped_scores,
    kl_distillation,
    quadratic_warmup,
)
from semiret.training.miners import negative_pool, sample_negatives


@dataclass
class Example:
    query_id: str
    text: str
    positives: tuple[int, ...]  # document rows


def query_texts(training_set: TrainingSet) -> dict[str, str]:
    """Each query's text by id, in the order of ``training_set.positives`` (the order teacher caches are keyed by)."""
    texts = {}
    for pair in training_set.pairs:
        texts.setdefault(pair.query_id, pair.query)
    return {q: texts[q] for q in training_set.positives}


class DistillationSet:
    """One corpus with its queries, cached teacher scores, mined candidate pools and query tokens."""

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
        self.pools = [negative_pool([top[i].tolist() for top in tops], example.positives)
                      for i, example in enumerate(examples)]
        self.tokens = [np.unique(np.asarray(vocabulary.encode(t), np.int64)) for t in texts]

    @classmethod
    def from_pseudo_queries(cls, root: str | Path, per_document: int, seed: int, prefix: str, teachers,
                            cache_dir: Path, mining_depth: int, vocabulary) -> DistillationSet:
        """Label-free: pseudo-queries of a corpus's documents, each with its source document as the positive."""
        from semiret.training.pseudo_queries import generate_pseudo_queries

        documents = list(Collection(root).corpus())
        row = {d.id: i for i, d in enumerate(documents)}
        queries = generate_pseudo_queries(documents, per_document, seed=seed, prefix=prefix)
        examples = [Example(q.id, q.text, (row[q.document_id],)) for q in queries]
        return cls(Path(root).name, documents, examples, teachers, cache_dir, mining_depth, vocabulary)

    @classmethod
    def from_training_set(cls, name: str, training_set: TrainingSet, teachers, cache_dir: Path, mining_depth: int,
                          vocabulary) -> DistillationSet:
        """Labelled: a qrels split's queries with all their judged positives."""
        documents = list(training_set.documents.values())
        row = {d.id: i for i, d in enumerate(documents)}
        texts = query_texts(training_set)
        examples = [Example(q, texts[q], tuple(sorted(row[d] for d in ds))) for q, ds in training_set.positives.items()]
        return cls(name, documents, examples, teachers, cache_dir, mining_depth, vocabulary)

    def candidates(self, i: int, n: int, rng: random.Random) -> list[int]:
        """The first positive (random among several) and ``n - 1`` negatives drawn from the pool."""
        example = self.examples[i]
        positive = rng.choice(example.positives)
        negatives = sample_negatives(self.pools[i], n - 1, rng, range(len(self.documents)), example.positives)
        return [positive, *negatives]


class DistillationBatches(BatchSource):
    """Batches of ``batch_size`` queries, each from one query set, the sets interleaved (the paper's sampler);
    ``queries_per_epoch`` caps an epoch, shared equally between the sets. A batch is ``(set index, rows)``."""

    def __init__(self, sets: Sequence[DistillationSet], batch_size: int, queries_per_epoch: int | None = None):
        self.sets, self.batch_size, self.queries_per_epoch = sets, batch_size, queries_per_epoch

    def epoch(self, rng: random.Random) -> list[SeededBatch]:
        batches = []
        for s, data in enumerate(self.sets):
            order = list(range(len(data.examples)))
            rng.shuffle(order)
            if self.queries_per_epoch:
                order = order[: max(1, self.queries_per_epoch // len(self.sets))]
            batches += [(s, order[i: i + self.batch_size]) for i in range(0, len(order), self.batch_size)]
        rng.shuffle(batches)
        return seeded(batches, rng)


class DistillationLoss(Loss):
    """The inference-free loss: KL from the ensemble teacher to the IDF-aware student scores, plus FLOPS
    weighted by ``flops_weight`` warmed up quadratically over ``flops_ramp_steps``.

    The ranking loss only sees the batch's query tokens, so the vocabulary projection is computed for those
    exactly plus a uniform sample of ``flops_sample`` others, and FLOPS is estimated from that sample
    (:class:`~semiret.training.losses.VocabularySample`). ``in_batch_negatives``: each query is scored against
    every candidate of the batch, not only its own (the teachers score the same pairs). ``fit_student_scale``:
    the student's scores are distilled times a factor fitted per step (:func:`fitted_student_scale`).
    Terms: ``kl``, ``flops`` (estimated), ``nnz`` (estimated non-zeros per document), ``student_scale``,
    ``documents_per_query``.
    """

    def __init__(self, sets: Sequence[DistillationSet], *, candidates: int, scale: float, flops_weight: float,
                 flops_ramp_steps: int, flops_sample: int, idf_aware: bool = True, normalize_teachers: bool = True,
                 fit_student_scale: bool = True, in_batch_negatives: bool = False):
        self.sets, self.candidates, self.scale = sets, candidates, scale
        self.flops_weight, self.flops_ramp_steps, self.flops_sample = flops_weight, flops_ramp_steps, flops_sample
        self.idf_aware, self.normalize_teachers = idf_aware, normalize_teachers
        self.fit_student_scale, self.in_batch_negatives = fit_student_scale, in_batch_negatives
        self._priors: dict = {}

    def _prior(self, model, s: int):
        """The lexical prior's weights of set ``s``'s documents [D, V], with that corpus's mean length."""
        if s not in self._priors:
            prior = replace(model.lexical_prior, avgdl=None)
            self._priors[s] = prior.vectors(model.vocabulary, [d.full_text for d in self.sets[s].documents]).tocsr()
        return self._priors[s]

    def __call__(self, model, batch: SeededBatch, step: int) -> LossOutput:
        s, rows = batch.items
        data = self.sets[s]
        rng = batch.random()
        candidates = np.array([data.candidates(i, self.candidates, rng) for i in rows])  # [N, C]
        tokens = [data.tokens[i] for i in rows]
        in_queries = np.unique(np.concatenate(tokens)) if tokens else np.empty(0, np.int64)
        sample = VocabularySample.draw(in_queries, model.encoder.vocab_size, self.flops_sample, batch.numpy_random())
        device = module_device(model)
        columns = sample.columns.to(device)

        def document_vectors(texts):
            return model.document_vectors(*model.encoder.inputs.padded(texts, device), columns)

        d = encode_rows(document_vectors, [data.documents[r].full_text for r in candidates.ravel()])
        flops = flops_regularizer(d, sample)
        nnz = sample.sum((d > 0).float()).mean().item()
        if model.lexical_prior is not None:  # what indexing adds to the learned weights; not regularised
            prior = self._prior(model, s)[candidates.ravel()][:, sample.columns.cpu().numpy()]
            d = d + torch.from_numpy(prior.toarray()).to(device)
        q = model.query_vectors(tokens, self.idf_aware)[:, columns]
        if self.in_batch_negatives:  # every query against every document of the batch [N, N * C]
            student = q @ d.T
            scored = np.broadcast_to(candidates.ravel(), (len(rows), candidates.size))
        else:
            student, scored = grouped_scores(q, d), candidates
        query_ids = [data.examples[i].query_id for i in rows]
        teacher = teacher_ensemble_scores(data.teachers, query_ids, scored, self.scale, self.normalize_teachers,
                                          device)
        student_scale = fitted_student_scale(student, teacher) if self.fit_student_scale else 1.0
        kl = kl_distillation(student_scale * student, teacher)
        total = kl + quadratic_warmup(self.flops_weight, step, self.flops_ramp_steps) * flops
        return LossOutput(total, {"kl": kl.item(), "flops": flops.item(), "nnz": nnz, "student_scale": student_scale,
                                  "documents_per_query": student.shape[1]})


def teacher_ensemble_scores(teachers: Sequence, query_ids: Sequence[str], doc_rows: np.ndarray, scale: float,
                            normalize: bool, device) -> torch.Tensor:
    """The ensemble teacher's scores [N, C] of query ``query_ids[i]`` against document rows ``doc_rows[i]``, from
    cached :class:`~semiret.training.teachers.TeacherScores` (:func:`ensemble_teacher_scores`)."""
    return ensemble_teacher_scores([torch.from_numpy(t.scores(query_ids, doc_rows)).to(device) for t in teachers],
                                   scale, normalize=normalize)


class InBatchDistillation:
    """A distillation term for a contrastive batch: KL from cached teachers' ensemble to the student's scores of
    every query of the batch against every passage of the batch (in-batch distillation, as TAS-B does it), the
    student's scores times a factor fitted per step (:func:`fitted_student_scale`), so the term leaves the
    contrastive loss's temperature alone. ``weight`` multiplies the KL in the total.

    ``teachers`` score one fixed query set (the training set's queries) over ``documents``; a passage is found by
    its document id."""

    def __init__(self, teachers: Sequence, documents: Sequence[Document], scale: float, weight: float = 1.0,
                 normalize: bool = True):
        self.teachers, self.scale, self.weight, self.normalize = teachers, scale, weight, normalize
        self.row = {d.id: i for i, d in enumerate(documents)}

    @classmethod
    def from_training_set(cls, training_set: TrainingSet, teachers, cache_dir: Path, scale: float,
                          weight: float = 1.0, normalize: bool = True) -> InBatchDistillation:
        """Teachers over a qrels split's queries and corpus, cached in ``cache_dir`` (the same query set and
        cache keys as :meth:`DistillationSet.from_training_set`, so the two recipes share a cache)."""
        from semiret.training.teachers import TeacherScores

        documents = list(training_set.documents.values())
        texts = query_texts(training_set)
        return cls([TeacherScores(t, documents, list(texts), list(texts.values()), cache_dir) for t in teachers],
                   documents, scale, weight, normalize)

    @classmethod
    def of_config(cls, config, training_set: TrainingSet) -> InBatchDistillation:
        """The term a recipe's :class:`~semiret.training.config.InBatchTeachers` options ask for over
        ``training_set``: the teachers run (and cached) on the training device by the main process, read by the
        others."""
        from semiret.training.distributed import main_process_first, training_device
        from semiret.training.teachers import run_teachers

        teachers, cache_dir = run_teachers(config.teachers, Path(config.output), config.teacher_cache,
                                           training_device(config.device))
        with main_process_first():  # the others read the teacher caches it wrote
            return cls.from_training_set(training_set, teachers, cache_dir, config.teacher_scale,
                                         config.distillation_weight)

    def __call__(self, student: torch.Tensor, query_ids: Sequence[str], passage_ids: Sequence[str]) -> LossOutput:
        """``student`` [N, M]: the batch's N queries against its M passages (``passage_ids``)."""
        rows = np.fromiter((self.row[p] for p in passage_ids), np.int64, len(passage_ids))
        teacher = teacher_ensemble_scores(self.teachers, query_ids, np.broadcast_to(rows, student.shape),
                                          self.scale, self.normalize, student.device)
        student_scale = fitted_student_scale(student, teacher)
        kl = kl_distillation(student_scale * student, teacher)
        return LossOutput(self.weight * kl, {"kl": kl.item(), "student_scale": student_scale})
