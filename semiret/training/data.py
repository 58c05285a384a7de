"""Training examples and their batches: (query, positive document) pairs from qrels, validated before any
compute starts; batch sources that give an epoch's batches, each with the seed of its own random draws."""

from __future__ import annotations

import logging
import random
from collections import Counter
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from semiret.data.collection import Collection, Document
from semiret.errors import SemiretError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainingPair:
    query_id: str
    query: str
    positive: Document
    negatives: tuple[Document, ...] = ()
    answers: tuple[str, ...] = ()


@dataclass
class TrainingSet:
    """Query/positive pairs plus what miners need: every query's judged positives and the corpus texts."""

    pairs: list[TrainingPair]
    positives: dict[str, set[str]] = field(default_factory=dict)
    documents: dict[str, Document] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.pairs)

    @classmethod
    def from_collection(cls, collection: Collection, split: str = "train",
                        negatives: dict[str, list[str]] | None = None) -> TrainingSet:
        """One pair per relevant (query, document) judgement of ``split``; ``negatives`` maps query ids to given negatives.

        Raises before any training when the split is empty or names queries or documents that do not exist.
        """
        qrels = collection.qrels(split)
        queries = collection.queries()
        documents = {d.id: d for d in collection.corpus()}
        positives = {q: {d for d, grade in judged.items() if grade > 0} for q, judged in qrels.items()}
        positives = {q: ds for q, ds in positives.items() if ds}
        missing_queries = sorted(q for q in positives if q not in queries)
        missing_docs = sorted({d for ds in positives.values() for d in ds} - documents.keys()
                              | {d for ds in (negatives or {}).values() for d in ds} - documents.keys())
        problems = []
        if missing_queries:
            problems.append(f"{len(missing_queries)} query ids not in queries.jsonl (e.g. {missing_queries[:3]})")
        if missing_docs:
            problems.append(f"{len(missing_docs)} document ids not in the corpus (e.g. {missing_docs[:3]})")
        if problems:
            raise SemiretError(f"training data of {collection.root} split {split!r}: " + "; ".join(problems))
        blank = sorted(q for q in positives if not queries[q].strip())
        if blank:  # nothing to learn from, and a query of no tokens to every model
            log.warning("%s split %r: %d quer%s without text left out of training (%s%s)", collection.root, split,
                        len(blank), "y" if len(blank) == 1 else "ies", ", ".join(map(repr, blank[:3])),
                        ", ..." if len(blank) > 3 else "")
        pairs = [
            TrainingPair(q, queries[q], documents[d], tuple(documents[n] for n in (negatives or {}).get(q, [])))
            for q, ds in positives.items() if queries[q].strip() for d in sorted(ds)
        ]
        if not pairs:
            raise SemiretError(f"split {split!r} of {collection.root} has no relevant judgements to train on")
        return cls(pairs, positives, documents)

    def batches(self, batch_size: int, rng: random.Random) -> list[list[TrainingPair]]:
        """Shuffled batches in which no pair's positive is another's, nor judged relevant to another's query: in-batch
        negatives are never a query's own positives (sentence-transformers' ``NoDuplicatesBatchSampler``, by judgement
        too). So at most one pair per query in each; a pair that does not fit waits for a later batch."""
        order = list(self.pairs)
        rng.shuffle(order)
        # the pairs a batch left waiting go on in the order of their queries' pairs, most first, then of their
        # positive's sharing: each later batch takes one of each, and they spread over the epoch (in the shuffled
        # order they were left to the end, a batch each: 35 batches of 1-2 pairs in 100 SciFact epochs, batch 32)
        per_query = Counter(pair.query_id for pair in order)
        sharing = Counter(pair.positive.id for pair in order)
        batches: list[list[TrainingPair]] = []
        pending = order
        while pending:
            batch, queries, documents, judged, rest = [], set(), set(), set(), []
            for pair in pending:
                relevant = self.positives.get(pair.query_id) or {pair.positive.id}
                if (len(batch) < batch_size and pair.query_id not in queries and pair.positive.id not in judged
                        and relevant.isdisjoint(documents)):
                    batch.append(pair)
                    queries.add(pair.query_id)
                    documents.add(pair.positive.id)
                    judged.update(relevant)
                else:
                    rest.append(pair)
            batches.append(batch)
            pending = sorted(rest, key=lambda pair: (-per_query[pair.query_id], -sharing[pair.positive.id]))
        return batches


@dataclass(frozen=True)
class SeededBatch:
    """A batch and the seed of its random draws (sampled negatives, sampled vocabulary): a step's randomness
    depends on its batch alone, not on what ran before it in this process (resumed runs, several workers)."""

    items: Any
    seed: float

    def random(self) -> random.Random:
        return random.Random(self.seed)

    def numpy_random(self) -> np.random.Generator:
        return np.random.default_rng(int(self.seed * 2**32))


def seeded(batches: Sequence, rng: random.Random) -> list[SeededBatch]:
    """``batches`` in order, each with a seed drawn from one generator seeded by ``rng``."""
    seeds = random.Random(rng.random())
    return [SeededBatch(items, seeds.random()) for items in batches]


class BatchSource(ABC):
    """What a :class:`~semiret.training.trainer.Trainer` iterates: an epoch's batches, drawn with an rng."""

    @abstractmethod
    def epoch(self, rng: random.Random) -> list[SeededBatch]:
        """One epoch's batches, in training order."""

    def __len__(self) -> int:
        """Batches per epoch (those of the order ``Random(0)`` draws: the count does not depend on the order,
        or barely, and the warm-up and loss-weight schedules need it before training)."""
        return len(self.epoch(random.Random(0)))

    counts_depend_on_the_draw = False
    """Whether an epoch's number of batches depends on its order (pairs kept apart in :meth:`TrainingSet.batches`)."""

    def steps(self, seed: int, epochs: int) -> int:
        """Batches in ``epochs`` epochs as a trainer draws them (epoch ``e`` with ``Random(seed + e)``): the length
        of the learning rate's decay, which then ends at 0 on the last step (a count taken from one order ran a step
        at 0, or stopped short of it, where pairs kept apart made another order's count differ)."""
        if not self.counts_depend_on_the_draw:
            return len(self) * epochs  # one draw (an epoch of a large corpus's pseudo-queries takes seconds)
        return sum(len(self.epoch(random.Random(seed + epoch))) for epoch in range(epochs))


class PairBatches(BatchSource):
    """A training set's pairs in shuffled batches of ``batch_size``, at most one pair per query in each; with
    ``per_epoch``, each epoch draws a fresh sample of that many pairs (large pre-training sets)."""

    counts_depend_on_the_draw = True

    def __init__(self, training_set: TrainingSet, batch_size: int, per_epoch: int | None = None):
        if batch_size < 1:
            raise SemiretError(f"the batch size must be at least 1, got {batch_size}")
        if per_epoch is not None and per_epoch < 1:
            raise SemiretError(f"pairs per epoch must be at least 1, got {per_epoch}")
        self.training_set, self.batch_size, self.per_epoch = training_set, batch_size, per_epoch

    def epoch(self, rng: random.Random) -> list[SeededBatch]:
        pairs = self.training_set
        if self.per_epoch is not None and self.per_epoch < len(pairs):
            pairs = TrainingSet(rng.sample(pairs.pairs, self.per_epoch), pairs.positives, pairs.documents)
        return seeded(pairs.batches(self.batch_size, rng), rng)
