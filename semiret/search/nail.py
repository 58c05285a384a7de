"""NAIL's retrievers: documents scored over the whole vocabulary by the NAIL model at index time
(:class:`~semiret.models.nail.NailModel`), queries only tokenized (the distinct non-special tokens of the
model's own tokenizer, each weighing 1: a multi-hot set), no neural network and no torch at query time.

- ``nail-sparse``: each document's top-k tokens (default 2,000) in the ``impact`` inverted index. Policy for
  negative scores: a token absent from a document's postings scores 0 there, so only positive scores are
  kept (a kept negative would rank the document below one that lacks the token). With the default
  ``log1p-relu`` scores nothing is lost but the tokens past k; with ``logits`` or ``log-softmax`` scores this
  clips them at 0.
- ``nail-exh``: every document's full score vector, float16 and memory-mapped
  (:class:`~semiret.indexes.score_matrix.ScoreMatrixIndex`); each query scores every document.
- ``bm25+nail``: the same index; BM25 (its postings, over words) finds the top ``depth`` (default 100), which
  are re-ranked by NAIL's score alone (the paper's main setting), or by NAIL's score plus ``bm25_weight`` times
  BM25's (an interpolation beyond the paper). One index directory serves ``nail-exh``,
  ``bm25+nail`` and ``bm25``: scores and postings live in the same segments and change together.

A query with no known token finds nothing. The tokenizer recorded when the index was built (a fingerprint of
its ``tokenizer.json``) must be the model's at search time; otherwise the index is refused.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from semiret.errors import SemiretError
from semiret.indexes.score_matrix import ScoredPostings, ScoreMatrixIndex
from semiret.models.checkpoints import NAIL, check_adapted_corpus, located
from semiret.search.lexical import (
    BM25Options,
    TokenSetQueries,
    WordCountQueries,
    WordCounts,
)
from semiret.search.neural import (LOADING_ONCE, batch_size_field, check_encoder_index, check_weights, encoder_config,
                                   loaded_once)
from semiret.search.retrievers import DocumentSide, Retriever, register_retriever
from semiret.text.wordpiece import WordPieceVocabulary, tokenizer_fingerprint
from semiret.types import Postings, SearchHits

FAMILY = "nail"
DEFAULT_TOP_K = 2000
MEMORY_SHARE = 0.5
"""Share of the available memory a score matrix may take (the build holds it all before writing it)."""


class NailModelSide:
    """The NAIL model a document side scores with: loaded now (new index) or on first use (adding documents)."""

    def __init__(self, config: dict, model=None, encode_batch_size: int = 32, where: str = ""):
        self.config, self._model, self.encode_batch_size, self.where = config, model, encode_batch_size, where

    @classmethod
    def create(cls, model: str, encode_batch_size: int) -> "NailModelSide":
        from semiret.models.nail import NailModel

        path, _ = NAIL.read(model)  # a saved NAIL model, or a clear error before anything loads
        loaded = NailModel.load(str(path))
        config = encoder_config(FAMILY, str(path), loaded.config.max_length, loaded,
                                tokenizer=tokenizer_fingerprint(str(path)))
        return cls(config, loaded, encode_batch_size)

    @property
    def model(self):
        if self._model is None:
            with LOADING_ONCE:
                if self._model is None:
                    from semiret.models.nail import NailModel

                    model = NailModel.load(located(self.config["model"]))
                    check_weights(self.config, model, self.where)
                    self._model = model
        return self._model

    @loaded_once
    def vocabulary(self) -> WordPieceVocabulary:
        """The model's tokenizer, torch-free."""
        return WordPieceVocabulary(located(self.config["model"]))

    @property
    def vocab_size(self) -> int:
        return self.vocabulary.size

    def scores(self, documents) -> np.ndarray:
        """φ_d of a batch, float32 [n, |V|]."""
        return self.model.score_documents([d.full_text for d in documents], self.encode_batch_size)


def nail_vocabulary(config: dict, where) -> WordPieceVocabulary:
    """The query side's tokenizer: that of the NAIL model recorded in ``config``, provided it is still the one
    the index was built with."""
    if config.get("family") != FAMILY:
        raise SemiretError(f"{where} was not built by a NAIL model")
    model = located(config["model"])
    if tokenizer_fingerprint(model) != config.get("tokenizer"):
        raise SemiretError(f"{where} was built with another tokenizer than the one of {config['model']} now: "
                           f"rebuild the index with this model")
    return WordPieceVocabulary(model)


# ---------------------------------------------------------------------------------------------- nail-sparse
@dataclass
class NailSparseOptions:
    model: str = NAIL.default
    """NAIL model: a saved directory or the packaged nail-scifact."""
    top_k: int = DEFAULT_TOP_K
    """Tokens kept per document, those with the highest positive scores (nail-sparse: 2000 unless given)."""
    encode_batch_size: int = batch_size_field()
    """Texts per encoder batch."""


def top_token_postings(scores: np.ndarray, documents, top_k: int, excluded: np.ndarray) -> Postings:
    """Each row's ``top_k`` highest positive scores, special tokens left out, as impact postings."""
    offsets, terms, values = [0], [], []
    for row in scores:
        candidates = np.flatnonzero((row > 0) & ~excluded)
        if len(candidates) > top_k:
            candidates = np.sort(candidates[np.argpartition(-row[candidates], top_k - 1)[:top_k]])
        terms.append(candidates.astype(np.int32))
        values.append(row[candidates].astype(np.float32))
        offsets.append(offsets[-1] + len(candidates))
    return Postings([d.id for d in documents], np.asarray(offsets, np.int64), np.concatenate(terms),
                    np.concatenate(values), np.diff(offsets).astype(np.int32), documents)


class NailSparseDocuments(DocumentSide):
    """NAIL score vectors pruned to their top-k positive tokens, into an ``impact`` index."""

    Options = NailSparseOptions
    index_kind = "impact"
    batch_size = 256

    def __init__(self, scorer: NailModelSide):
        self.scorer = scorer

    def prepare(self, documents):
        check_adapted_corpus(located(self.scorer.config["model"]), documents)

    @classmethod
    def create(cls, options: NailSparseOptions):
        if options.top_k < 1:
            raise SemiretError(f"top_k must be at least 1, got {options.top_k}")
        scorer = NailModelSide.create(options.model, options.encode_batch_size)
        scorer.config["top_k"] = options.top_k
        return cls(scorer)

    @classmethod
    def from_index(cls, index):
        return cls(NailModelSide(check_encoder_index(index, FAMILY), where=str(index.path)))

    def index_config(self) -> dict:
        return {"vocab_size": self.scorer.vocab_size, "analyzer": self.scorer.config}

    def encode(self, documents):
        return top_token_postings(self.scorer.scores(documents), documents, self.scorer.config["top_k"],
                                  self.scorer.vocabulary.excluded_mask)


class NailTokenQueries(TokenSetQueries):
    """The query's distinct non-special tokens of the NAIL model's tokenizer, each weighing 1."""

    @classmethod
    def reads(cls, index) -> bool:
        return index.meta["analyzer"].get("family") == FAMILY

    @classmethod
    def open(cls, index, options, documents):
        return cls(nail_vocabulary(index.meta["analyzer"], index.path))


@register_retriever
class NailSparseRetriever(Retriever):
    """NAIL documents pruned to their top-k tokens in an inverted index; queries only tokenized."""

    name = "nail-sparse"
    model_kinds = ("nail",)
    documents = NailSparseDocuments
    queries = NailTokenQueries


# ---------------------------------------------------------------------------------------------- score matrix
@dataclass
class NailMatrixOptions:
    model: str = NAIL.default
    """NAIL model: a saved directory or the packaged nail-scifact."""
    encode_batch_size: int = batch_size_field()
    """Texts per encoder batch."""
    max_matrix_gb: float | None = None
    """Largest score matrix (float16, documents x vocabulary) to build, in GB (default: half the available
    memory); a larger one is refused: use nail-sparse."""


def available_memory() -> int:
    """Bytes of memory available now (Linux ``MemAvailable``, else the physical memory)."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


class NailMatrixDocuments(WordCounts):
    """BM25 word counts (the first stage, as the ``bm25`` retriever's) and NAIL's full score vector of every
    document, into a :class:`~semiret.indexes.score_matrix.ScoreMatrixIndex`."""

    Options = NailMatrixOptions
    index_class = ScoreMatrixIndex
    batch_size = 256
    buffer_mb = 0
    """Written whole unless a buffer is given: the matrix has its own limit (:meth:`expect`), and ``bm25+nail``
    re-ranks one segment in one compiled call (several take a slower path)."""

    scorer: NailModelSide
    limit_bytes: float | None = None
    _documents_seen = 0

    @classmethod
    def create(cls, options: NailMatrixOptions):
        if options.max_matrix_gb is not None and not options.max_matrix_gb > 0:
            raise SemiretError(f"max_matrix_gb (--max-matrix-gb) must be positive, got {options.max_matrix_gb}")
        side = super().create(BM25Options())
        side.scorer = NailModelSide.create(options.model, options.encode_batch_size)
        side.limit_bytes = options.max_matrix_gb * 1e9 if options.max_matrix_gb else MEMORY_SHARE * available_memory()
        return side

    @classmethod
    def from_index(cls, index):
        if not isinstance(index, ScoreMatrixIndex):
            raise SemiretError(f"{index.path} holds no NAIL score matrix (build it with -r nail-exh or bm25+nail)")
        if index.scorer.get("family") != FAMILY:
            raise SemiretError(f"{index.path} holds scores of {index.scorer.get('family')!r}, not of a NAIL model")
        side = super().from_index(index)
        side.scorer = NailModelSide(index.scorer, where=str(index.path))
        return side

    def prepare(self, documents):
        super().prepare(documents)
        check_adapted_corpus(located(self.scorer.config["model"]), documents)

    def index_config(self) -> dict:
        return {**super().index_config(), "score_vocab_size": self.scorer.vocab_size, "scorer": self.scorer.config}

    def _check_size(self, documents: int, more: str) -> None:
        """Refuse a score matrix of ``documents`` rows (``more``: "+" when more may follow) over the limit."""
        needed = documents * self.scorer.vocab_size * 2
        if self.limit_bytes is not None and needed > self.limit_bytes:
            raise SemiretError(f"the NAIL score matrix would take {'over ' if more else ''}{_size(needed)} (float16, "
                               f"{documents}{more} documents x {self.scorer.vocab_size} tokens), more than the "
                               f"{_size(self.limit_bytes)} allowed: index these documents with -r nail-sparse (each "
                               "document's top-k tokens) instead")

    def expect(self, total: int) -> None:
        self._check_size(total, "")

    def encode(self, documents):
        self._documents_seen += len(documents)
        self._check_size(self._documents_seen, "+")
        words = super().encode(documents)
        return ScoredPostings(**vars(words) | {"scores": self.scorer.scores(documents).astype(np.float16)})


def _size(size_bytes: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6)):
        if size_bytes >= scale / 10:
            return f"{size_bytes / scale:.1f} {unit}"
    return f"{size_bytes / 1e3:.1f} kB"


def matrix_vocabulary(index) -> WordPieceVocabulary:
    """The query tokenizer of a NAIL score matrix (the document side's checks first)."""
    NailMatrixDocuments.from_index(index)
    return nail_vocabulary(index.scorer, index.path)


class NailMatrixQueries(NailTokenQueries):
    """Token sets scored against every document's full score vector (exhaustive)."""

    @classmethod
    def open(cls, index, options, documents):
        return cls(matrix_vocabulary(index))

    def search(self, index, texts, k, n_threads) -> SearchHits:
        return index.score_all(self.encode_queries(texts), k)


@register_retriever
class NailExhaustiveRetriever(Retriever):
    """NAIL-exh: every document scored by lookup and sum over its full vocabulary scores."""

    name = "nail-exh"
    model_kinds = ("nail",)
    documents = NailMatrixDocuments
    queries = NailMatrixQueries

    @classmethod
    def can_search(cls, index) -> bool:
        return isinstance(index, ScoreMatrixIndex)  # BM25's postings with NAIL's scores beside them


@dataclass
class RerankOptions:
    rerank_depth: int = 100
    """First-stage (BM25) documents re-ranked per query."""
    bm25_weight: float | None = None
    """Add this times each candidate's BM25 score to its NAIL score (beyond the paper, which re-ranks by NAIL's
    score alone: 0). None: the weight the model records (``search.bm25_weight`` in its ``nail.json``, chosen on
    a collection it was not trained on; the packaged ``nail-scifact``'s is 1.5), else 0."""


class BM25ThenNailQueries(NailMatrixQueries):
    """BM25's top ``depth`` documents, re-ranked by NAIL's score of the query's tokens alone."""

    Options = RerankOptions

    def __init__(self, vocabulary: WordPieceVocabulary, words: WordCountQueries, depth: int,
                 bm25_weight: float = 0.0):
        super().__init__(vocabulary)
        if depth < 1:
            raise SemiretError(f"the re-ranking depth must be at least 1, got {depth}")
        if not (np.isfinite(bm25_weight) and bm25_weight >= 0):
            raise SemiretError(f"the BM25 weight must be a non-negative number, got {bm25_weight}")
        self.words, self.depth, self.bm25_weight = words, depth, bm25_weight

    @classmethod
    def open(cls, index, options: RerankOptions, documents: NailMatrixDocuments):
        vocabulary = matrix_vocabulary(index)
        weight = options.bm25_weight
        if weight is None:
            weight = NAIL.read(located(index.scorer["model"]))[1].get("search", {}).get("bm25_weight", 0.0)
        return cls(vocabulary, WordCountQueries.open(index, WordCountQueries.Options(), documents), options.rerank_depth, weight)

    def search(self, index, texts, k, n_threads) -> SearchHits:
        """BM25's best ``depth`` re-ranked, the best ``k`` of them; for ``k`` beyond ``depth``, BM25's next ones
        after them, in its order and scored below every re-ranked one (as ``sidr-beta-rerank`` does): the depth is
        the depth whatever ``k``, and the pages of a ranking (``offset``) come from one ranking."""
        first_stage = self.words.encode_queries(texts)
        if k <= self.depth:
            return index.rerank(first_stage, self.encode_queries(texts), self.depth, k, n_threads,
                                first_stage_weight=self.bm25_weight)
        pinned = index.pinned()  # both stages over one commit
        reranked = pinned.rerank(first_stage, self.encode_queries(texts), self.depth, self.depth, n_threads,
                                 first_stage_weight=self.bm25_weight)
        bm25 = pinned.search(first_stage, k=k, n_threads=n_threads)
        out_ids, out_scores = [], []
        for ids, scores, first in zip(reranked.ids, reranked.scores, bm25.ids):
            kept = set(ids)
            tail = [doc_id for doc_id in first if doc_id not in kept][: k - len(ids)]
            floor = (min(scores) if len(scores) else 0.0) - 1.0
            out_ids.append(list(ids) + tail)
            out_scores.append(list(scores) + [floor - i for i in range(len(tail))])
        return SearchHits(out_ids, out_scores)


@register_retriever
class BM25NailRetriever(Retriever):
    """BM25+NAIL: BM25's top 100 re-ranked by NAIL scores (lookup and sum), the paper's main setting."""

    name = "bm25+nail"
    model_kinds = ("nail",)
    documents = NailMatrixDocuments
    queries = BM25ThenNailQueries
    can_search = NailExhaustiveRetriever.can_search  # the same index: BM25's postings beside NAIL's scores
