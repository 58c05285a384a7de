"""Retrievers over the inverted index: a document side that makes postings, a query side that makes
weighted token queries, and the index between them. Registered by name for the CLI and evaluation."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar, Iterable

import numpy as np

from semiret import progress
from semiret.data.collection import Document, batched
from semiret.errors import SemiretError
from semiret.indexes import open_index
from semiret.indexes.inverted import BM25Parameters, InvertedIndex
from semiret.types import Postings, SearchHits, SparseQuery
from semiret.text.analyzer import TermDictionary, WordAnalyzer
from semiret.text.postings import QueryTerms, token_set_postings, word_count_postings
from semiret.text.token_weights import load_token_weights
from semiret.text.wordpiece import WordPieceVocabulary

BATCH_SIZE = 4096
DEFAULT_MIN_IDF = 1.0
"""Query tokens with a lower IDF are dropped by IDF-weighted retrievers (see :class:`IDFRetriever`)."""


class Retriever(ABC):
    """Search over one index directory. Subclasses define how texts become postings and queries."""

    name: ClassVar[str]
    index_kind: ClassVar[str]
    index_class: ClassVar[type] = InvertedIndex
    """The index type (anything with build/open/add/delete/search, e.g. the dense index)."""
    build_batch_size: ClassVar[int] = BATCH_SIZE
    """Documents encoded per step while building (a step of the progress bar)."""
    build_parameters: ClassVar[tuple[str, ...]] = ()
    """Options that shape the index (given to :meth:`build`)."""
    search_parameters: ClassVar[tuple[str, ...]] = ()
    """Options that shape queries only (given to :meth:`open`)."""

    def __init__(self, index: InvertedIndex):
        self.index = index

    # ------------------------------------------------------------------ the two sides
    @abstractmethod
    def encode_documents(self, documents: list[Document]) -> Postings: ...

    @abstractmethod
    def encode_query(self, text: str) -> SparseQuery: ...

    # ------------------------------------------------------------------ index life cycle
    @classmethod
    def build(cls, documents: Iterable[Document], path: str | Path, *, total: int | None = None,
              store_texts: bool = True, overwrite: bool = False, batch_size: int | None = None,
              **options) -> "Retriever":
        """Index documents into a new directory at ``path`` and open a retriever on it."""
        builder = cls._builder(**cls.build_options(options))
        batches = (builder.encode_documents(batch) for batch in batched(documents, batch_size or cls.build_batch_size))
        batches = progress.track(batches, f"indexing ({cls.name})", total=total, advance=len)
        cls.index_class.build(path, cls.index_kind, batches, **builder._index_options(), store_texts=store_texts,
                            overwrite=overwrite, extra_meta={"retriever": cls.name})
        return cls.open(path, **cls.search_options(options))

    @classmethod
    def build_options(cls, options: dict) -> dict:
        cls.check_options(options)
        return _pick(options, cls.build_parameters)

    @classmethod
    def search_options(cls, options: dict) -> dict:
        cls.check_options(options)
        return _pick(options, cls.search_parameters)

    @classmethod
    def check_options(cls, options: dict) -> None:
        unknown = sorted(k for k, v in options.items()
                         if v is not None and k not in cls.build_parameters + cls.search_parameters)
        if unknown:
            allowed = ", ".join(cls.build_parameters + cls.search_parameters) or "none"
            raise SemiretError(f"option(s) {', '.join(unknown)} do not apply to retriever {cls.name!r} (its options: {allowed})")

    @classmethod
    def open(cls, path: str | Path, **options) -> "Retriever":
        index = cls.index_class.open(path)
        if index.kind not in cls.compatible_kinds():
            raise SemiretError(f"{path} is a {index.kind!r} index; {cls.name} needs one of {cls.compatible_kinds()}")
        return cls._from_index(index, **cls.open_options(options))

    @classmethod
    def open_options(cls, options: dict) -> dict:
        """Options for opening an existing index: search options only (build options are fixed in the index)."""
        misplaced = sorted(k for k, v in options.items() if v is not None and k not in cls.search_parameters)
        if misplaced:
            allowed = ", ".join(cls.search_parameters) or "none"
            raise SemiretError(f"option(s) {', '.join(misplaced)} do not apply when searching with retriever "
                               f"{cls.name!r} (its search options: {allowed})")
        return _pick(options, cls.search_parameters)

    @classmethod
    def compatible_kinds(cls) -> tuple[str, ...]:
        return (cls.index_kind,)

    @classmethod
    @abstractmethod
    def _builder(cls, **options) -> "Retriever":
        """An instance without an index, used to encode documents while building."""

    @classmethod
    @abstractmethod
    def _from_index(cls, index: InvertedIndex, **options) -> "Retriever": ...

    @abstractmethod
    def _index_options(self) -> dict: ...

    def add(self, documents: Iterable[Document], replace: bool = False) -> int:
        """Index more documents; they are searchable as soon as this returns."""
        documents = list(documents)
        return self.index.add(self.encode_documents(documents), replace=replace)

    def delete(self, doc_ids: Iterable[str]) -> int:
        return self.index.delete(doc_ids)

    # ------------------------------------------------------------------ search
    def encode_queries(self, texts: list[str]) -> list:
        """Queries as the index searches them (neural retrievers encode the batch at once)."""
        return [self.encode_query(t) for t in texts]

    def search(self, queries: list[str], k: int = 10, n_threads: int = 1) -> SearchHits:
        return self.index.search(self.encode_queries(queries), k=k, n_threads=n_threads)


class BM25Retriever(Retriever):
    """Okapi BM25 over words (lowercase, English stopwords, Snowball stems), Lucene IDF."""

    name = "bm25"
    index_kind = "bm25"
    build_parameters = ("k1", "b", "stopwords", "stemmer")

    def __init__(self, index, analyzer: WordAnalyzer, terms: TermDictionary, params: BM25Parameters):
        super().__init__(index)
        self.analyzer, self.terms, self.params = analyzer, terms, params
        self._query_terms = QueryTerms(analyzer, terms)

    @classmethod
    def _builder(cls, k1: float = 1.5, b: float = 0.75, stopwords: str = "en", stemmer: str | None = "english"):
        return cls(None, WordAnalyzer(stopwords=stopwords, stemmer=stemmer), TermDictionary(), BM25Parameters(k1, b))

    @classmethod
    def _from_index(cls, index, **_):
        config = {k: v for k, v in index.meta["analyzer"].items() if k != "type"}
        return cls(index, WordAnalyzer(**config), TermDictionary(index.vocab), index.bm25)

    def _index_options(self) -> dict:
        return {"vocab_size": 0, "analyzer": self.analyzer.config(), "vocab": self.terms.terms, "bm25": self.params}

    def encode_documents(self, documents):
        return word_count_postings(documents, self.analyzer, self.terms)

    def encode_query(self, text):
        # what np.unique(ids, return_counts=True) gives, without its per-call cost (queries are short)
        ids = self._query_terms(text)  # = self.terms.lookup(self.analyzer(text), add=False)
        terms = sorted(set(ids))
        if len(terms) == len(ids):
            counts = np.ones(len(terms), np.float32)
        else:
            counts = np.array([ids.count(t) for t in terms], np.float32)
        return SparseQuery(np.array(terms, np.int32), counts)


class WordPieceRetriever(Retriever):
    """Shared document side of token-space retrievers: a binary bag-of-tokens index."""

    index_kind = "binary"
    build_parameters = ("tokenizer", "max_length")

    def __init__(self, index, vocabulary: WordPieceVocabulary):
        super().__init__(index)
        self.vocabulary = vocabulary

    @classmethod
    def _builder(cls, tokenizer: str = "bert-base-uncased", max_length: int | None = None):
        return cls(None, WordPieceVocabulary(tokenizer, max_length=max_length))

    @classmethod
    def _from_index(cls, index, **options):
        config = index.meta["analyzer"]
        if config.get("type") != "wordpiece":
            raise SemiretError(f"{index.path} was not built with a WordPiece tokenizer")
        vocabulary = WordPieceVocabulary(config["tokenizer"], max_length=config["max_length"], min_id=config["min_id"])
        return cls(index, vocabulary, **options)

    def _index_options(self) -> dict:
        return {"vocab_size": self.vocabulary.size, "analyzer": self.vocabulary.config()}

    def encode_documents(self, documents):
        return token_set_postings(documents, self.vocabulary)

    def query_tokens(self, text: str) -> np.ndarray:
        """The distinct tokens of a query, sorted (``np.unique`` costs more than this for a short query)."""
        return np.array(sorted(set(self.vocabulary.encode(text))), np.int32)


class BagOfTokensRetriever(WordPieceRetriever):
    """Number of distinct query tokens a document contains (SiDR's "BoT overlap")."""

    name = "bot"

    def encode_query(self, text):
        terms = self.query_tokens(text)
        return SparseQuery(terms, np.ones(len(terms), np.float32))


class IDFRetriever(WordPieceRetriever):
    """Query tokens weighted by IDF, over a bag-of-tokens or impact index: no network at query time.

    ``idf="corpus"`` computes Lucene IDF from the index's document frequencies (kept current as
    documents are added); a path loads a ``{token: weight}`` JSON table such as the MS MARCO one.

    ``min_idf`` drops query tokens weighted below it: query-side stopwords chosen by IDF, as BM25 drops a
    stopword list. The default, 1.0, drops tokens found in more than about a third of the documents (with the
    MS MARCO table exactly ``. the , of and a to in is for``): they add almost nothing to a score but own the
    longest posting lists (docs/results.md: a third fewer postings per query, nDCG@10 unchanged).
    """

    name = "idf"
    search_parameters = ("idf", "two_phase", "min_idf")

    def __init__(self, index, vocabulary, idf: str | Path = "corpus", two_phase=None,
                 min_idf: float = DEFAULT_MIN_IDF):
        from semiret.indexes.inverted import TwoPhase

        super().__init__(index, vocabulary)
        if not np.isfinite(min_idf) or min_idf < 0:
            raise SemiretError(f"min_idf must be a finite number >= 0, got {min_idf}")
        self.idf_source = str(idf)
        self._table = None if self.idf_source == "corpus" else load_token_weights(idf, vocabulary)
        self.two_phase = TwoPhase.parse(two_phase)
        """Two-phase search (high-IDF query tokens first, then rescoring): None for exhaustive search."""
        self.min_idf = float(min_idf)
        self._min_weight = max(self.min_idf, float(np.finfo(np.float32).tiny))  # zero-weight tokens never score

    def search(self, queries: list[str], k: int = 10, n_threads: int = 1) -> SearchHits:
        return self.index.search(self.encode_queries(queries), k=k, n_threads=n_threads, two_phase=self.two_phase)

    @classmethod
    def compatible_kinds(cls):
        return ("binary", "impact")

    def token_weights(self) -> np.ndarray:
        if self._table is not None:
            return self._table
        return self.index.idf()

    def encode_query(self, text):
        terms = self.query_tokens(text)
        weights = self.token_weights()[terms]
        kept = weights >= self._min_weight
        return SparseQuery(terms[kept], weights[kept])


def _pick(options: dict, allowed: tuple[str, ...]) -> dict:
    return {k: v for k, v in options.items() if k in allowed and v is not None}


RETRIEVERS: dict[str, type[Retriever]] = {r.name: r for r in (BM25Retriever, BagOfTokensRetriever, IDFRetriever)}


def retriever_class(name: str) -> type[Retriever]:
    try:
        return RETRIEVERS[name]
    except KeyError:
        raise SemiretError(f"unknown retriever {name!r} (known: {', '.join(RETRIEVERS)})") from None


def open_retriever(path: str | Path, name: str | None = None, **options) -> Retriever:
    """Open an index directory with the retriever it was built for, or with ``name``."""
    index = open_index(path)
    cls = retriever_class(name or index.meta.get("retriever", ""))
    if index.kind not in cls.compatible_kinds():
        raise SemiretError(f"{path} is a {index.kind!r} index; {cls.name} needs one of {cls.compatible_kinds()}")
    return cls._from_index(index, **cls.open_options(options))
