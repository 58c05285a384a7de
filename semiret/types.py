"""The values the layers hand each other: documents as postings or embeddings (text and models -> indexes),
queries as weighted terms (search -> indexes), and search results (indexes -> search -> users).

They live here, beside :mod:`semiret.data`, so that text analysis and models can produce what an index
consumes without importing the index.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
from collections.abc import Sequence as SequenceABC
from dataclasses import dataclass, field, fields
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np

from semiret.data.collection import Document
from semiret.errors import SemiretError

log = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)
class PackedStrings:
    """Strings as an index's string tables hold them: their UTF-8 bytes in one array and each one's offsets into it,
    joined by numpy and decoded only when read (a merge copies stored texts through without parsing them)."""

    blob: np.ndarray  # uint8 [total bytes]
    offsets: np.ndarray  # int64 [n + 1]

    @classmethod
    def of(cls, values: Iterable[str]) -> "PackedStrings":
        encoded = [value.encode("utf-8") for value in values]
        offsets = np.zeros(len(encoded) + 1, np.int64)
        np.cumsum([len(e) for e in encoded], out=offsets[1:])
        return cls(np.frombuffer(b"".join(encoded), np.uint8), offsets)

    @classmethod
    def empty(cls, n: int) -> "PackedStrings":
        """``n`` empty strings."""
        return cls(np.zeros(0, np.uint8), np.zeros(n + 1, np.int64))

    @staticmethod
    def concatenate(parts: Sequence["PackedStrings"]) -> "PackedStrings":
        if len(parts) == 1:
            return parts[0]
        starts = np.cumsum([0] + [int(p.offsets[-1]) for p in parts[:-1]])
        offsets = np.concatenate([np.zeros(1, np.int64)] + [p.offsets[1:] + start for p, start in zip(parts, starts)])
        return PackedStrings(np.concatenate([p.blob[: p.offsets[-1]] for p in parts]), offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> str:
        if not -len(self) <= i < len(self):
            raise IndexError(f"string {i} of {len(self)}")
        i %= len(self)
        return bytes(self.blob[self.offsets[i]: self.offsets[i + 1]]).decode("utf-8")

    @property
    def nbytes(self) -> int:
        return self.blob.nbytes + self.offsets.nbytes


class StoredDocuments(SequenceABC):
    """Documents as an index stores them (a :class:`Document` sequence): each one's JSON record, and its metadata's
    JSON alone (empty without; what filters read), packed (:class:`PackedStrings`) and decoded only when a document
    is read. What a merge reads from one segment and writes to another, unparsed."""

    def __init__(self, records: PackedStrings, metadata: PackedStrings | None = None):
        self.records = records
        self.metadata = PackedStrings.empty(len(records)) if metadata is None else metadata

    @classmethod
    def of(cls, documents: Sequence[Document]) -> "StoredDocuments":
        """Documents packed as an index stores them (themselves when they are so already)."""
        if isinstance(documents, StoredDocuments):
            return documents
        return cls(PackedStrings.of(d.to_json() for d in documents),
                   PackedStrings.of(json.dumps(d.metadata, ensure_ascii=False) if d.metadata else ""
                                    for d in documents))

    @staticmethod
    def concatenate(parts: Sequence["StoredDocuments"]) -> "StoredDocuments":
        return StoredDocuments(PackedStrings.concatenate([p.records for p in parts]),
                               PackedStrings.concatenate([p.metadata for p in parts]))

    @property
    def has_metadata(self) -> bool:
        return bool(self.metadata.offsets[-1])

    @property
    def nbytes(self) -> int:
        return self.records.nbytes + self.metadata.nbytes

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return Document.from_json(self.records[i])


def _concatenated_documents(batches: Sequence) -> Sequence[Document] | None:
    """The documents of batches to concatenate: None unless every batch has them; packed when all of them are."""
    documents = [b.documents for b in batches]
    if any(d is None for d in documents):
        return None
    if all(isinstance(d, StoredDocuments) for d in documents):
        return StoredDocuments.concatenate(documents)
    return [d for part in documents for d in part]


@dataclass
class Postings:
    """A batch of documents as doc-major sparse rows: what analyzers and encoders hand to the index."""

    ids: list[str]
    offsets: np.ndarray  # int64 [n_docs + 1]
    terms: np.ndarray  # int32 [nnz]
    values: np.ndarray  # float32 [nnz]: term counts (bm25), weights (impact), ignored (binary)
    lengths: np.ndarray  # int32 [n_docs]: tokens per document (BM25 length normalisation)
    documents: Sequence[Document] | None = None  # stored as texts when the index keeps them

    def __len__(self) -> int:
        return len(self.ids)

    @staticmethod
    def concatenate(batches: Sequence["Postings"]) -> "Postings":
        if len(batches) == 1:
            return batches[0]
        offsets = [np.zeros(1, np.int64)]
        base = 0
        for b in batches:
            offsets.append(b.offsets[1:] + base)
            base += int(b.offsets[-1])
        return Postings(
            ids=[i for b in batches for i in b.ids],
            offsets=np.concatenate(offsets),
            terms=np.concatenate([b.terms for b in batches]),
            values=np.concatenate([b.values for b in batches]),
            lengths=np.concatenate([b.lengths for b in batches]),
            documents=_concatenated_documents(batches),
        )


@dataclass
class Embeddings:
    """A batch of documents as dense vectors: what dense encoders hand to the index."""

    ids: list[str]
    vectors: np.ndarray  # float32 [n, dim]
    documents: Sequence[Document] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    @staticmethod
    def concatenate(batches: Sequence["Embeddings"]) -> "Embeddings":
        return Embeddings([i for b in batches for i in b.ids], np.concatenate([b.vectors for b in batches]),
                          _concatenated_documents(batches))


def token_digests(vectors: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """uint64 [len(offsets) - 1]: each document's fingerprint of its token vectors (the rows ``offsets[i]:offsets[i +
    1]`` of ``vectors``) in float16, as a multi-vector index takes them: the 8-byte BLAKE2b digest of their bytes,
    read little-endian. What a compressed index keeps of each document beside its lossy codes, so that a sync knows
    it unchanged whichever codec compressed it (a shard's, then the merged index's)."""
    rows = np.ascontiguousarray(vectors, np.float16)  # [n_tokens, dim]
    data = rows.reshape(-1).view(np.uint8)
    bounds = np.asarray(offsets, np.int64) * (rows.shape[1] * rows.itemsize)
    digests = b"".join([hashlib.blake2b(data[start:stop], digest_size=8).digest()
                        for start, stop in zip(bounds[:-1].tolist(), bounds[1:].tolist())])
    return np.frombuffer(digests, dtype="<u8").astype(np.uint64)


@dataclass
class TokenEmbeddings:
    """A batch of documents as one vector per token (late interaction, ColBERT): what a late-interaction encoder hands
    to a multi-vector index. Document ``i``'s vectors are the rows ``offsets[i]:offsets[i + 1]`` of ``vectors``; or,
    read back from a compressed segment, of ``codes`` and ``residuals`` under ``codec`` (its ``id``, ``compress`` and
    ``decompress``: :class:`~semiret.indexes.multivector.ResidualCodec`), ``vectors`` then None, so that a merge
    writes them again as they are, with ``digests``, each document's :func:`token_digests` as it was added (0: not
    known), which a second compression (another codec's codes compressed again) leaves as they were."""

    ids: list[str]
    offsets: np.ndarray  # int64 [n + 1]
    vectors: np.ndarray | None  # float16 [n_tokens, dim]
    documents: Sequence[Document] | None = None
    codes: np.ndarray | None = None  # int32 [n_tokens]: each token's centroid
    residuals: np.ndarray | None = None  # uint8 [n_tokens, dim * nbits / 8]
    codec: object | None = None
    digests: np.ndarray | None = None  # uint64 [n]: each document's token_digests as added (0: not known)

    def __len__(self) -> int:
        return len(self.ids)

    def vector_digests(self) -> np.ndarray:
        """uint64 [n]: each document's :func:`token_digests` as it was added: those carried, else those of its
        vectors kept whole, else 0 (not known: codes and residuals read back without them)."""
        if self.digests is not None:
            return self.digests
        if self.codec is None:
            return token_digests(self.vectors, self.offsets)
        return np.zeros(len(self), np.uint64)

    def float_vectors(self) -> np.ndarray:
        """float16 [n_tokens, dim]: the vectors, decompressed where compressed."""
        return self.vectors if self.codec is None else self.codec.decompress(self.codes, self.residuals).astype(
            np.float16)

    def coded_by(self, codec) -> "TokenEmbeddings":
        """This batch compressed by ``codec`` (as it is where it already is)."""
        if self.codec is not None and self.codec.id == codec.id:
            return self
        if self.codec is not None:
            log.warning("%d documents' token vectors compressed by another codec (a shard's) are compressed again by "
                        "the index's: a second compression's loss (build the index whole to avoid it)", len(self))
        codes, residuals = codec.compress(self.float_vectors())
        return TokenEmbeddings(self.ids, self.offsets, None, self.documents, codes, residuals, codec,
                               self.vector_digests())

    @staticmethod
    def concatenate(batches: Sequence["TokenEmbeddings"]) -> "TokenEmbeddings":
        """One batch of ``batches``; compressed where one of them is (the others compressed by its codec)."""
        if len(batches) == 1:
            return batches[0]
        offsets, base = [np.zeros(1, np.int64)], 0
        for b in batches:
            offsets.append(np.asarray(b.offsets[1:], np.int64) + base)
            base += int(b.offsets[-1])
        ids, documents = [i for b in batches for i in b.ids], _concatenated_documents(batches)
        codec = next((b.codec for b in batches if b.codec is not None), None)
        if codec is None:
            return TokenEmbeddings(ids, np.concatenate(offsets), np.concatenate([b.vectors for b in batches]),
                                   documents)
        coded = [b.coded_by(codec) for b in batches]
        return TokenEmbeddings(ids, np.concatenate(offsets), None, documents, np.concatenate([b.codes for b in coded]),
                               np.concatenate([b.residuals for b in coded]), codec,
                               np.concatenate([b.vector_digests() for b in coded]))


@dataclass
class DocumentPage:
    """A page of an index's documents in id order (``Retriever.scroll``): their ``ids``, stored ``documents`` (None
    when the index keeps no texts), and ``next_offset``, the id the next page starts at (None after the last)."""

    ids: list[str]
    documents: list[Document] | None
    next_offset: str | None


@dataclass(frozen=True)
class SyncCounts:
    """What ``Retriever.sync`` did, in documents: ``added`` (new), ``replaced`` (changed), ``unchanged`` (stored as
    they are: not encoded again) and ``deleted`` (held by the index, no longer given)."""

    added: int
    replaced: int
    unchanged: int
    deleted: int


@dataclass
class SparseQuery:
    """A weighted bag of term ids; weights must be positive."""

    terms: np.ndarray
    weights: np.ndarray

    @classmethod
    def from_pairs(cls, terms: Iterable[int], weights: Iterable[float] | None = None) -> "SparseQuery":
        terms = np.asarray(list(terms), dtype=np.int32)
        weights = np.ones(len(terms), np.float32) if weights is None else np.asarray(list(weights), np.float32)
        return cls(terms, weights)


DocumentLookup = Callable[[str], "Document | None"]


@dataclass(frozen=True)
class Hit:
    """One result. Unpacks as ``doc_id, score = hit``; ``hit.document`` / ``hit.text`` / ``hit.metadata`` read the
    stored document (None when the index keeps no texts)."""

    id: str
    score: float
    lookup: DocumentLookup | None = field(default=None, repr=False, compare=False)
    group: object = None
    """The value of the metadata field a grouped search grouped by (``search(..., group_by=...)``), else None."""

    def __iter__(self) -> Iterator:
        yield self.id
        yield self.score

    def __reduce__(self):
        """Pickled (to another process, a cache) without the index it reads documents from: every other field."""
        return type(self), tuple(None if f.name == "lookup" else getattr(self, f.name) for f in fields(self))

    def __copy__(self) -> "Hit":
        return self

    def __deepcopy__(self, memo) -> "Hit":
        return self  # frozen: a copy would be equal in every field, and read the same index

    @property
    def document(self) -> Document | None:
        return self.lookup(self.id) if self.lookup is not None else None

    @property
    def text(self) -> str | None:
        document = self.document
        return document.full_text if document is not None else None

    @property
    def metadata(self) -> dict | None:
        """The stored document's metadata ({} when it has none; None when the index keeps no documents)."""
        document = self.document
        return (document.metadata or {}) if document is not None else None


@dataclass
class SearchHits:
    """Top-k results of a batch of queries, best first: parallel ``ids`` / ``scores`` lists per query, or
    ``hits[i]`` (and iteration): query ``i``'s results as :class:`Hit` objects."""

    ids: list[list[str]]
    scores: list[list[float]]
    postings_visited: list[int] | None = None
    """Per query, postings read plus documents probed, summed over segments (inverted indexes only)."""
    lookup: DocumentLookup | None = field(default=None, repr=False, compare=False)
    """Where :attr:`Hit.document` reads stored documents (set by the retriever that searched)."""
    groups: list[list] | None = None
    """Per query, each hit's group (a grouped search's, ``group_by``): the value of the field it was grouped by."""
    diversified: bool = False
    """Hits in the order maximal marginal relevance picked them (``diversity``), each with its own score, so
    scores need not fall down a list; as a run (:meth:`as_run`) they score by that order instead."""

    def __len__(self) -> int:
        return len(self.ids)

    def __getstate__(self) -> dict:
        """Pickled (to another process, a cache) without the index its hits read documents from."""
        return {**vars(self), "lookup": None}

    def __copy__(self) -> "SearchHits":
        clone = object.__new__(type(self))
        clone.__dict__.update(vars(self))
        return clone

    def __deepcopy__(self, memo) -> "SearchHits":
        """A copy that still reads the documents of the index searched (the index itself is not copied)."""
        memo[id(self.lookup)] = self.lookup
        clone = object.__new__(type(self))
        memo[id(self)] = clone
        clone.__dict__.update({name: copy.deepcopy(value, memo) for name, value in vars(self).items()})
        return clone

    def __getitem__(self, query: int) -> list[Hit]:
        """Query ``query``'s hits, best first (one query: a slice of queries is ``list(hits)[a:b]``)."""
        if not isinstance(query, (int, np.integer)):
            raise TypeError(f"search hits are indexed by query number (an int), not {type(query).__name__}")
        if self.groups is not None:
            return [Hit(i, s, self.lookup, g) for i, s, g in zip(self.ids[query], self.scores[query], self.groups[query])]
        return [Hit(i, s, self.lookup) for i, s in zip(self.ids[query], self.scores[query])]

    def __iter__(self) -> Iterator[list[Hit]]:
        return (self[i] for i in range(len(self)))

    def at_least(self, score_threshold: float) -> "SearchHits":
        """These hits without those scoring below ``score_threshold`` (Qdrant's ``score_threshold``, OpenSearch's
        ``min_score``), each query's order kept."""
        kept = [[n for n, score in enumerate(scores) if score >= score_threshold] for scores in self.scores]
        return SearchHits([[ids[n] for n in keep] for ids, keep in zip(self.ids, kept)],
                          [[scores[n] for n in keep] for scores, keep in zip(self.scores, kept)],
                          lookup=self.lookup,
                          groups=None if self.groups is None else [[groups[n] for n in keep]
                                                                   for groups, keep in zip(self.groups, kept)],
                          diversified=self.diversified)

    @classmethod
    def gathered(cls, parts: Sequence[tuple[Sequence[int], "SearchHits"]], n_queries: int,
                 grouped: bool = False) -> "SearchHits":
        """One batch's hits from parts searched apart: ``(positions, hits)`` each, a part's queries at those
        positions of the batch; a query no part holds has no hits (``grouped``: hits of grouped searches)."""
        ids: list[list[str]] = [[] for _ in range(n_queries)]
        scores: list[list[float]] = [[] for _ in range(n_queries)]
        groups: list[list] | None = [[] for _ in range(n_queries)] if grouped else None
        visited: list[int] | None = [0] * n_queries
        for positions, hits in parts:
            for n, position in enumerate(positions):
                ids[position], scores[position] = hits.ids[n], hits.scores[n]
                if groups is not None:
                    groups[position] = hits.groups[n]
            if hits.postings_visited is None:
                visited = None
            elif visited is not None:
                for position, count in zip(positions, hits.postings_visited):
                    visited[position] = count
        return cls(ids, scores, visited, groups=groups,
                   diversified=any(hits.diversified for _, hits in parts))

    def as_run(self, query_ids: Sequence[str], by_group: bool = False) -> dict[str, dict[str, float]]:
        """The hits as a run ``{query id: {document id: score}}``, ``query_ids`` naming the queries in order: what
        :func:`~semiret.evaluation.metrics.score_run`, :func:`~semiret.evaluation.significance.compare_runs` and
        :func:`~semiret.data.trec.write_trec_run` take. ``by_group``: a grouped search's groups as the documents,
        each with its best hit's score (passages grouped by ``parent``: their documents, MaxP). A diversified
        search's hits score by the order they were picked in (``n, n - 1, ..., 1``), since runs are read by score."""
        if len(query_ids) != len(self.ids):  # a query left out would score as 0 wherever the run is judged
            raise SemiretError(f"{len(query_ids)} query ids for the hits of {len(self.ids)} queries")
        if self.diversified:
            return {q: {d: float(len(i) - rank) for rank, d in enumerate(i)} for q, i in zip(query_ids, self.ids)}
        if not by_group:
            return {q: dict(zip(i, s)) for q, i, s in zip(query_ids, self.ids, self.scores)}
        if self.groups is None:
            raise SemiretError("these hits were not grouped (search with group_by)")
        run = {}
        for q, groups, scores in zip(query_ids, self.groups, self.scores):
            ranking: dict[str, float] = {}
            for group, score in zip(groups, scores):
                if not isinstance(group, str):  # 2020 and "2020" would be one document of a run
                    raise SemiretError(f"a run names documents by string ids; a group's value is {group!r}")
                ranking.setdefault(group, score)  # a group's hits come best first
            run[q] = ranking
        return run

    def id_keys(self, query: int) -> np.ndarray | None:
        """Query ``query``'s hits as 64-bit hashes of their ids (uint64, best first), for joining rankings
        without decoding ids; None where the hits hold only ids (:class:`~semiret.indexes.segments.SegmentHits`
        has them)."""
        return None

    def ids_at(self, query: int, positions: Sequence[int]) -> list[str]:
        """The ids of query ``query``'s hits at ``positions`` (a few of them: a segmented index decodes only
        those)."""
        ids = self.ids[query]
        return [ids[p] for p in positions]


@dataclass
class TermContribution:
    """One query term's part in a document's score: ``contribution = query_weight * document_weight``."""

    term: str
    query_weight: float
    """The term's weight in the query as the index scores it (for BM25: its count times its IDF)."""
    document_weight: float
    """Its value in the document's postings (BM25: the saturated term frequency; 0: the document lacks it)."""
    contribution: float


@dataclass
class TermWeight:
    """One term of a text or a document as an index reads it (OpenSearch's ``_analyze`` and term vectors, Pyserini's
    ``analyze`` and document vectors)."""

    term: str
    weight: float
    """As the index scores it: a query's (BM25: count x IDF) or a document's value in the postings (BM25: the
    saturated term frequency)."""
    document_frequency: int
    """Documents of the index holding the term (deleted ones count until a merge, as in BM25's IDF); 0 for a word
    the index has never seen."""


@dataclass
class Suggestion:
    """A completion of the text being typed (``Retriever.suggest``): ``text``, the words typed with the last one
    completed, and ``count``, how many documents hold the completed ``word`` (with the earlier words, where
    ``in_context``)."""

    text: str
    word: str
    count: int
    in_context: bool


@dataclass
class Explanation:
    """How a document's score for a query adds up (Lucene's and OpenSearch's explain): ``score`` is the sum of the
    terms' contributions, the score an exact search gives the document."""

    doc_id: str
    score: float
    terms: list[TermContribution]
    """The query's terms, the document's matches first, largest contribution first."""
    boost_factor: float | None = None
    """What a boosted search multiplied the score by (:mod:`~semiret.search.boosting`; None: no boost)."""
    unmatched: str | None = None
    """Why the search explained would not find the document at all (None: it would), one of
    :data:`UNMATCHED_REASONS`; the terms are then what they would give it."""

    @property
    def matched(self) -> bool:
        """Whether the search explained finds the document, deep enough (OpenSearch's explain's ``matched``)."""
        return self.unmatched is None

    def to_json(self) -> dict:
        found = {"id": self.doc_id, "score": self.score, "matched": self.matched,
                 **({"unmatched": self.unmatched} if self.unmatched else {}),
                 "terms": [vars(term) for term in self.terms]}
        return found if self.boost_factor is None else {**found, "boost_factor": self.boost_factor}


UNMATCHED_REASONS = {
    "filter": "it fails the search's filter",
    "operators": "it lacks what the query's operators require, or holds what they exclude",
    "no_matching_term": "no term of the query scores it",
}
"""Why a search would not find a document (:attr:`Explanation.unmatched`), and what that means."""
