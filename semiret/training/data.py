"""Training examples: (query, positive document) pairs from qrels, validated before any compute starts."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from semiret.data.collection import Collection, Document
from semiret.errors import SemiretError


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
                        negatives: dict[str, list[str]] | None = None) -> "TrainingSet":
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
        pairs = [
            TrainingPair(q, queries[q], documents[d], tuple(documents[n] for n in (negatives or {}).get(q, [])))
            for q, ds in positives.items() for d in sorted(ds)
        ]
        if not pairs:
            raise SemiretError(f"split {split!r} of {collection.root} has no relevant judgements to train on")
        return cls(pairs, positives, documents)

    def batches(self, batch_size: int, rng: random.Random) -> list[list[TrainingPair]]:
        """Shuffled batches with at most one pair per query in each (its other positives would be false negatives)."""
        order = list(self.pairs)
        rng.shuffle(order)
        batches: list[list[TrainingPair]] = []
        pending = order
        while pending:
            batch, seen, rest = [], set(), []
            for pair in pending:
                if len(batch) < batch_size and pair.query_id not in seen:
                    batch.append(pair)
                    seen.add(pair.query_id)
                else:
                    rest.append(pair)
            batches.append(batch)
            pending = rest
        return batches
