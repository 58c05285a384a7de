"""Sparse vectors the user brings (retriever ``sparse-vectors``): each document carries its own ``{term: weight}``
vector (a corpus line's ``vector`` object, Pyserini's JsonVectorCollection; :attr:`~semiret.data.collection.Document.
vector`), made by a learned sparse model run elsewhere (SPLADE, uniCOIL, DeepImpact on a GPU, an embedding API's
sparse vectors), and is searched as Pyserini's ``--impact`` search and Qdrant's sparse vectors search it: a
document's score is the dot product of its vector and the query's.

The documents go into an ``impact`` index over a vocabulary of the terms they bring, grown as documents are added
(the growable vocabulary of the ``bm25`` index, :class:`~semiret.text.analyzer.TermDictionary`): terms are any
strings (WordPiece tokens such as ``##ing``, words, ids), and documents added later bring new ones. Queries are:

- sparse vectors too (``search({"term": weight})``, a list of them for a batch; ``--query-vectors FILE``; the
  service's ``"vectors"``), their terms the index has never seen left out;
- texts, where the index was built with the tokenizer that made its documents' terms (``query_tokenizer``): the
  query's distinct tokens, each of weight 1, or (``query_idf``) its IDF over the index or a table's, as the
  inference-free models' queries are read (documents encoded elsewhere, queries only tokenized), with the
  ``idf`` retriever's tokenization (:func:`~semiret.search.lexical.query_tokens`) and tables
  (:func:`~semiret.text.token_weights.load_token_weights`).

No model runs and torch is never imported.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from pathlib import Path

import numpy as np

from semiret.data.collection import Document
from semiret.errors import SemiretError
from semiret.options import local_field
from semiret.search.lexical import query_tokens
from semiret.search.retrievers import DocumentSide, QuerySide, register_retriever
from semiret.search.vectors import SPARSE_RETRIEVER, BroughtVectorsRetriever, check_vectors_index, vector_of
from semiret.text.analyzer import TermDictionary
from semiret.text.token_weights import load_token_weights
from semiret.text.wordpiece import WordPieceVocabulary, tokenizer_fingerprint
from semiret.types import Postings, SparseQuery

CORPUS_IDF = "corpus"


@dataclass
class SparseVectorDocumentOptions:
    query_tokenizer: str | None = None
    """The tokenizer that made the documents' terms (a registry name, a model directory or a tokenizer.json), by which
    query texts then become terms: their distinct tokens (default: none; queries are sparse vectors only)."""


def _reference(tokenizer: str) -> str:
    """How the index records its query tokenizer: a file or folder by its absolute path (the index is opened from
    anywhere), a name as it is."""
    path = Path(tokenizer)
    return str(path.resolve()) if path.exists() else tokenizer


class SparseVectorDocuments(DocumentSide):
    """Documents' own sparse vectors into an ``impact`` index over the terms they bring (a vocabulary that grows as
    documents are added), checked: each document brings one, sparse."""

    Options = SparseVectorDocumentOptions
    index_kind = "impact"
    takes_vectors = True

    def __init__(self, terms: TermDictionary, config: dict):
        self.terms, self.config = terms, config

    @classmethod
    def create(cls, options: SparseVectorDocumentOptions):
        config = {"type": SPARSE_RETRIEVER}
        if options.query_tokenizer is not None:
            WordPieceVocabulary(options.query_tokenizer)  # (a tokenizer that cannot be read fails before any document)
            config |= {"query_tokenizer": _reference(options.query_tokenizer),
                       "tokenizer_fingerprint": tokenizer_fingerprint(options.query_tokenizer)}
        return cls(TermDictionary(), config)

    @classmethod
    def from_index(cls, index):
        check_vectors_index(index, SPARSE_RETRIEVER)
        return cls(index.terms, index.meta["analyzer"])  # encodes into the index's own vocabulary

    def index_config(self) -> dict:
        return {"vocab_size": 0, "analyzer": self.config, "vocab": self.terms}

    def encode(self, documents: list[Document]) -> Postings:
        vectors = [vector_of(document, SPARSE_RETRIEVER) for document in documents]  # all checked before any term
        sizes = np.fromiter(map(len, vectors), np.int64, len(vectors))  # is given an id
        offsets = np.zeros(len(vectors) + 1, np.int64)
        np.cumsum(sizes, out=offsets[1:])
        terms = np.array(self.terms.lookup(list(chain.from_iterable(vectors)), add=True), np.int32)
        values = np.fromiter(chain.from_iterable(vector.values() for vector in vectors), np.float32, int(offsets[-1]))
        return Postings(ids=[d.id for d in documents], offsets=offsets, terms=terms, values=values,
                        lengths=sizes.astype(np.int32), documents=documents)

    def analyze(self, document: Document):
        raise SemiretError("an index of the sparse-vectors retriever holds the vectors its documents bring: a text "
                           "is no document vector (document_terms reads a stored document's)")

    def holds_alike(self, index, document: Document) -> bool:
        """Whether the index holds the sparse vector ``document`` brings, weights as float32 (a sync replaces the
        documents whose vectors alone changed)."""
        held = index.get_vector(document.id)
        brought = document.vector
        if not isinstance(brought, dict) or held is None or held.keys() != brought.keys():
            return False
        return all(np.float32(held[term]) == np.float32(weight) for term, weight in brought.items())


@dataclass
class SparseVectorQueryOptions:
    query_idf: str | None = local_field(names=(CORPUS_IDF, "msmarco"))
    """Weights of a query text's tokens (an index built with a query_tokenizer): 'corpus' (each token's IDF over the
    index, kept current as documents are added), 'msmarco' or a JSON {token: weight} table (an inference-free model's
    IDF); default: 1 each."""


class SparseVectorQueries(QuerySide):
    """Sparse query vectors over the index's terms; or query texts cut by the tokenizer the index was built with,
    each distinct token a term of weight 1 or its IDF (``query_idf``). A search sums, for each document, its weights
    of the query's terms times theirs."""

    Options = SparseVectorQueryOptions
    searches_postings = True  # what it searches: sparse queries, by the inverted index's own search
    searches_vectors = True
    vector_kind = "sparse"

    def __init__(self, index, vocabulary: WordPieceVocabulary | None, idf: str | None):
        self.index, self.path, self.terms = index, index.path, index.terms
        self.vocabulary, self.idf = vocabulary, idf
        self._table = None if idf in (None, CORPUS_IDF) else load_token_weights(idf, vocabulary)

    @property
    def reads_texts(self) -> bool:
        """Whether query texts are read: the index was built with a query tokenizer."""
        return self.vocabulary is not None

    @classmethod
    def reads(cls, index) -> bool:
        return index.meta["analyzer"].get("type") == SPARSE_RETRIEVER

    @classmethod
    def open(cls, index, options: SparseVectorQueryOptions, documents):
        check_vectors_index(index, SPARSE_RETRIEVER)
        config = index.meta["analyzer"]
        tokenizer = config.get("query_tokenizer")
        if tokenizer is None:
            if options.query_idf is not None:
                raise SemiretError(f"query_idf (--query-idf) weighs the tokens of query texts, and {index.path} was "
                                   "built without a query tokenizer (query_tokenizer, --query-tokenizer) to cut them")
            return cls(index, None, None)
        if tokenizer_fingerprint(tokenizer) != config.get("tokenizer_fingerprint"):
            raise SemiretError(f"{index.path} was built with the query tokenizer {tokenizer}, whose tokenizer.json has "
                               "changed since: its query texts would not become the terms its documents hold; "
                               "rebuild the index (--overwrite)")
        return cls(index, WordPieceVocabulary(tokenizer), options.query_idf)

    # ------------------------------------------------------------------ queries
    def encode_queries(self, texts):
        return self.scored_queries(self.index, texts)

    def scored_queries(self, index, texts):
        """Each query (a sparse vector, or a text) over the index's term ids; a text's token weights from ``index``
        (the commit a search reads) with ``query_idf="corpus"``."""
        weights = None
        out = []
        for query in texts:
            if isinstance(query, dict):
                out.append(self._vector_query(query))
                continue
            if weights is None and self.idf == CORPUS_IDF:
                weights = index.idf()
            out.append(self._text_query(query, weights))
        return out

    def search(self, index, texts, k, n_threads):
        return index.search(self.scored_queries(index, texts), k=k, n_threads=n_threads)

    def _vector_query(self, vector: dict[str, float]) -> SparseQuery:
        """A sparse query vector over the index's term ids: terms it has never seen left out (a search then finds
        nothing of them)."""
        ids = self.terms.ids
        known = [(ids[term], weight) for term, weight in vector.items() if term in ids]
        return SparseQuery(np.array([t for t, _ in known], np.int32), np.array([w for _, w in known], np.float32))

    def _text_query(self, text: str, corpus_idf: np.ndarray | None) -> SparseQuery:
        """A query text's distinct tokens that the index holds as terms, weighted 1, by IDF or by the table."""
        tokens = query_tokens(self._vocabulary(), text)
        terms, kept = self._token_terms(tokens)
        if corpus_idf is not None:
            inside = terms < len(corpus_idf)  # (a term an add is still encoding: not searched)
            terms, kept = terms[inside], kept[inside]
            return SparseQuery(terms, corpus_idf[terms])
        if self._table is not None:
            weights = self._table[tokens[kept]]
            return SparseQuery(terms[weights > 0], weights[weights > 0])
        return SparseQuery(terms, np.ones(len(terms), np.float32))

    def _token_terms(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The index's term ids of the tokenizer's ``tokens`` that it holds, and the positions of those tokens."""
        ids, vocabulary = self.terms.ids, self.vocabulary
        found = [(position, ids.get(vocabulary.token(token), -1)) for position, token in enumerate(tokens.tolist())]
        kept = np.array([position for position, term in found if term >= 0], np.int64)
        return np.array([term for _, term in found if term >= 0], np.int32), kept

    def _vocabulary(self) -> WordPieceVocabulary:
        if self.vocabulary is None:
            raise SemiretError(f"{self.path} was built without a query tokenizer, so a query text cannot become its "
                               "terms: search it with sparse query vectors ({term: weight}: search(dict), "
                               "--query-vectors FILE, the service's \"vectors\"), or build it with the tokenizer that "
                               "made its documents' terms (query_tokenizer, --query-tokenizer NAME_OR_DIR)")
        return self.vocabulary

    def unknown_terms(self, text: str) -> list[str]:
        """A query text's tokens that no document of the index brought (its search leaves them out)."""
        vocabulary = self._vocabulary()
        ids = self.terms.ids
        return [token for token in (vocabulary.token(t) for t in query_tokens(vocabulary, text).tolist())
                if token not in ids]

    def word_terms(self, words: list[str]) -> list[list[int]]:
        """Each word's tokens as the index's term ids (those it holds): what a highlight marks a word by."""
        vocabulary = self._vocabulary()
        return [self._token_terms(np.asarray(vocabulary.encode(word), np.int32))[0].tolist() for word in words]


@register_retriever
class SparseVectorsRetriever(BroughtVectorsRetriever):
    """Documents that bring their own sparse vectors (``{term: weight}``) in an impact index over the terms they
    bring; queries that are sparse vectors too, or texts cut by the tokenizer the index was built with."""

    name = SPARSE_RETRIEVER
    documents = SparseVectorDocuments
    queries = SparseVectorQueries
