"""A retriever is an index plus a document side and a query side.

- A :class:`DocumentSide` turns documents into what an index stores (postings or embeddings), says which index
  kind it writes, and re-opens itself from an index's ``meta.json`` to add documents later.
- A :class:`QuerySide` turns query texts into what the index searches (weighted terms or vectors) and runs the
  search (two-phase, ANN parameters, re-ranking).
- Each side declares its options as a dataclass (``Options``): the document side's shape the index (given to
  :meth:`Retriever.build`), the query side's only the queries (given to :meth:`Retriever.open`). The CLI
  turns the same fields into flags (:mod:`semiret.options`).

A retriever class only names the pair and registers it::

    @register_retriever
    class InferenceFreeRetriever(Retriever):
        \"\"\"SPLADE documents; queries only tokenized and weighted by IDF.\"\"\"
        name = "inference-free"
        documents = InferenceFreeDocuments
        queries = IDFQueries
"""

from __future__ import annotations

import copy
import inspect
import itertools
import json
import logging
import math
import numbers
import tempfile
from abc import ABC, abstractmethod
from dataclasses import fields
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, ClassVar, Iterable, Iterator, Mapping, Sequence

import numpy as np

from semiret import options as option_tools
from semiret import progress
from semiret.data.chunking import CHUNK_FIELD, PARENT_FIELD, Chunking
from semiret.data.collection import (ADDED_FIELDS_HINT, DOCUMENT_ID_FIELDS, EVERY_FIELD, TEXT_FIELDS, VECTOR_KINDS,
                                     CorpusFields, Document, as_document, as_documents, batched, corpus_file,
                                     iter_corpus, query_texts, query_vectors, vector_kind)
from semiret.data.folder import folder_hashes
from semiret.data.packaged import LIST_HINT
from semiret.data.paths import FILE_SUFFIXES
from semiret.errors import SemiretError, UnknownDocumentError, warn
from semiret.indexes import open_index
from semiret.indexes.filters import (MISSING, Grouping, MetadataFilter, checked_filter, checked_ranges,
                                      count_matching, delete_documents, delete_matching, documents_by_id,
                                      documents_page, facet, field_value, field_values, joined_documents,
                                      matching_documents, passage_ids, set_metadata, text_condition_fields,
                                      text_field_names)
from semiret.indexes.inverted import InvertedIndex
from semiret.indexes.segments import (DEFAULT_BUFFER_MB, HitMetadata, SegmentedIndex, SegmentHits, check_buffer,
                                      check_build_target, whole_buffer)
from semiret.search import highlight as highlighting
from semiret.search.boosting import Boost
from semiret.search.candidates import candidate_depth
from semiret.search.diversity import Diversity, maximal_marginal_relevance
from semiret.search.fusion import RRF_K, reciprocal_ranks
from semiret.search.operators import parse_operators, query_filter, scored_text
from semiret.models.checkpoints import (ENCODER_FAMILIES, encoder_family, located, model_reference, replaced_weights,
                                        saved_model_kind)
from semiret.text.acronyms import mine_abbreviations
from semiret.text.analyzer import plain_words, word_being_typed
from semiret.text.fields import TextFields
from semiret.text.synonyms import escaped, read_synonyms
from semiret.text.token_counts import counted_for_index, recorded_chunking
from semiret.text.wordpiece import WordPieceVocabulary, document_tokenizer
from semiret.types import (DocumentPage, Explanation, Hit, Postings, SearchHits, Suggestion, SyncCounts, TermContribution,
                           TermWeight)

log = logging.getLogger(__name__)

FACET_DEPTH = 100
"""The hits of a query a facet counts among by default (``facet(query=...)``)."""

DOCUMENT_READING = ("chunking", "metadata_fields", "id_field", "text_field")
"""``meta.json`` entries saying how the index reads the documents added to it (passages, the corpus fields kept as
metadata, those holding the id and the text: :class:`~semiret.data.collection.CorpusFields`): copied by
``hybrid-index``, shown by ``semiret info`` and the service."""

if TYPE_CHECKING:
    from semiret.search.learned_ranking import LearnedRanking
    from semiret.search.rerank import Reranking
    from semiret.indexes.milvus import MilvusBackend


RETRIEVER_OF_KIND = {"dense": "vectors", "sparse": "sparse-vectors", "multi": "multivectors"}
"""The retriever that indexes each kind of vector documents bring (:func:`~semiret.data.collection.vector_kind`):
what an error names for vectors of another kind than an index takes."""

class DocumentSide(ABC):
    """Documents -> what an index stores. ``create`` prepares it for a new index (may load a model);
    ``from_index`` re-opens it for adding documents (loading any model only when first needed)."""

    Options: ClassVar[type]
    """Dataclass of the options that shape the index."""
    index_kind: ClassVar[str]
    index_class: ClassVar[type] = InvertedIndex
    batch_size: ClassVar[int] = 4096
    """Documents encoded per step while building (a step of the progress bar)."""
    buffer_mb: ClassVar[float] = DEFAULT_BUFFER_MB
    """A build's default buffer: MB of documents held before they are written as a segment (0: one segment)."""
    takes_vectors: ClassVar[bool] = False
    """True where the side indexes the vectors documents bring (:attr:`~semiret.data.collection.Document.vector`)
    rather than their texts: their passages would share one vector, so it indexes whole documents only."""

    @classmethod
    @abstractmethod
    def create(cls, options) -> "DocumentSide": ...

    @classmethod
    @abstractmethod
    def from_index(cls, index) -> "DocumentSide": ...

    @abstractmethod
    def encode(self, documents: list[Document]):
        """:class:`~semiret.types.Postings` or :class:`~semiret.types.Embeddings` of a batch."""

    def expect(self, total: int) -> None:
        """Called before anything is encoded when the number of documents to index is known: a side that cannot
        hold that many raises an error here (default: nothing)."""

    def prepare(self, documents: list[Document]) -> None:
        """Called with the first batch an index is built from, before it is encoded and before the index records
        :meth:`index_config`: a side whose model only suits some corpora raises an error here, a side that
        takes statistics from the corpus (a mean length) takes them here (default: :meth:`check_documents`)."""
        self.check_documents(documents)

    def check_documents(self, documents: list[Document], adding: bool = False) -> None:
        """Warnings about documents this side reads poorly (BM25's English analyzer given another language), from
        the first batch of a build or (``adding``) of the first add into an empty index (default: none)."""

    @abstractmethod
    def index_config(self) -> dict:
        """Keyword arguments for ``index_class.build`` (vocabulary size, analyzer record, ...)."""

    def holds_alike(self, index, document: Document) -> bool:
        """Whether what ``index`` holds of a stored ``document`` beyond its stored record is what encoding it again
        would give (:meth:`Retriever.sync` then leaves it): default yes, everything else derives from the record."""
        return True

    def analyze(self, document: Document) -> tuple[Postings, list[str] | None]:
        """One document encoded as :meth:`encode` would, changing nothing an index holds (a vocabulary), and its
        terms' names where the postings' ids do not name them (words an index has not seen); None: the ids are
        the index's token vocabulary's. For a side that encodes into postings (default: :meth:`encode`)."""
        return self.encode([document]), None

    fields: TextFields | None = None
    """The fields the side reads of a document as text and their weights (BM25F's ``text_fields``; None: its title
    and text): what highlights read too (full-text filters, operators and suggestions read the index's record of
    them, :attr:`Segment.text_fields <semiret.indexes.segments.Segment.text_fields>`)."""

    def text(self, document: Document) -> str:
        """What the side reads of ``document`` as text (default: its title and text, :attr:`Document.full_text`)."""
        return document.full_text


class QuerySide(ABC):
    """Query texts -> what the index searches, and the search itself."""

    Options: ClassVar[type]
    """Dataclass of the options that shape queries only."""
    searches_postings: ClassVar[bool] = False
    """True where :meth:`search` is :meth:`encode_queries` (sparse queries) then the inverted index's own search
    (approximations such as two-phase aside): ``hybrid`` can then add two such sides' postings in one pass.
    A subclass with a ``search`` of its own is False unless it says otherwise."""

    reads_texts: ClassVar[bool] = True
    """False where the side searches query vectors only (an index of vectors brought by the user, no model)."""
    searches_vectors: ClassVar[bool] = False
    """True where :meth:`search` also takes query vectors in place of texts (a list of float32 arrays, or of
    ``{term: weight}`` dicts, :func:`~semiret.data.collection.query_vectors`): the sides of a dense index, and of an
    index of sparse vectors brought by the user."""
    vector_kind: ClassVar[str] = "dense"
    """The query vectors a side that :attr:`searches_vectors` takes: ``dense`` (arrays), ``sparse`` (dicts) or
    ``multi`` (each query's token vectors, a matrix)."""

    reads_stored_texts: ClassVar[bool] = False
    """True where a search reads the index's stored documents (a re-ranking that embeds its candidates): a hybrid
    stores them in this side's part too, not only in the first."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "search" in cls.__dict__ and "searches_postings" not in cls.__dict__:
            cls.searches_postings = False

    @classmethod
    def reads(cls, index) -> bool:
        """Whether this side can read queries for ``index`` (as :meth:`open` checks it, without opening anything)."""
        return True

    @classmethod
    @abstractmethod
    def open(cls, index, options, documents: DocumentSide) -> "QuerySide":
        """The query side for ``index``; ``documents`` is the index's own document side (siamese query sides
        share its model instead of loading a second copy)."""

    @abstractmethod
    def encode_queries(self, texts: list[str]) -> list:
        """Queries as the index searches them (a list of :class:`~semiret.types.SparseQuery` or a matrix)."""

    def search(self, index, texts: list[str], k: int, n_threads: int) -> SearchHits:
        return index.search(self.encode_queries(texts), k=k, n_threads=n_threads)

    @property
    def sums_term_weights(self) -> bool:
        """Whether a document's score is the sum, over :meth:`scored_queries`' terms, of the query's weight times
        the document's value in the index's postings: what explain and analyze show (default: where
        :attr:`searches_postings`)."""
        return self.searches_postings

    def scored_queries(self, index, texts: list[str]) -> list:
        """The sparse queries a search scores documents by, where :attr:`sums_term_weights` (default:
        :meth:`encode_queries`; BM25 with RM3: expanded)."""
        return self.encode_queries(texts)

    def unknown_terms(self, text: str) -> list[str]:
        """The terms of a query that its encoding drops because the index has never seen them (default: none
        known; BM25: words absent from its vocabulary)."""
        return []

    def synonym_target(self, index) -> "tuple[object, object] | None":
        """The index whose synonym rules this side expands queries by and the side's reader of them
        (:class:`~semiret.search.lexical.QuerySynonyms`: the rules checked as the side reads queries), or None: a
        side with no synonyms (default; those that read queries without a model take them)."""
        return None

    def matched_query(self, index, text: str):
        """The sparse query of ``text``'s own words as a search over ``index`` matches them, with no expansion by
        feedback: what a highlight marks (default: the encoded query; BM25 with ``fuzzy``: misspellings matched)."""
        return self.encode_queries([text])[0]


class Retriever:
    """Search, add and delete over one index directory (subclasses name a document and a query side)."""

    name: ClassVar[str]
    documents: ClassVar[type[DocumentSide]]
    queries: ClassVar[type[QuerySide]]
    index_kinds: ClassVar[tuple[str, ...]] = ()
    """Index kinds this retriever can search (default: the one its document side writes)."""
    model_kinds: ClassVar[tuple[str, ...]] = ()
    """What its ``model`` option takes: saved semiret models by kind (``sidr``, ``inference-free``, ``nail``,
    ``gdr``) and encoders by family (``dense``, ``splade``). A model of another kind is refused before it loads,
    naming the retrievers that take it; a model of no known kind (a hub id, a plain transformers folder) is left to
    the side that loads it."""
    _follows_commits: bool = True
    """Whether reads first bring the index up to its last commit (:meth:`_refresh`): not on a pinned view
    (:meth:`pinned`), which keeps its commit, nor on a hybrid's part, which its hybrid refreshes with the other."""

    def __init__(self, index=None, query_side: QuerySide | None = None, document_side: DocumentSide | None = None,
                 scratch=None, search_options: dict | None = None, **options):
        """A retriever over an open index and its two sides: made by :meth:`build` (``BM25Retriever.build(documents,
        path, k1=1.2)``) or :meth:`open` / :func:`open_retriever`, which take the options (a bm25s user's
        ``BM25(k1=...)`` is ``build``'s); not called directly."""
        if index is None or query_side is None or document_side is None or options:
            raise SemiretError(f"a {type(self).__name__} is made by {type(self).__name__}.build(documents, path, "
                               "**options) or opened by open_retriever(path, **options); its options: "
                               + ", ".join(sorted(option_tools.option_names([self.documents.Options,
                                                                             self.queries.Options]))))
        self.index = index
        self.query_side = query_side
        self.document_side = document_side
        self._scratch = scratch  # the temporary directory of an index built without a path, kept alive
        # what a pickled copy opens its index with: files named relative to the working directory of now, made absolute
        self._search_options = option_tools.with_local_paths_absolute([self.queries.Options], search_options or {})

    def __reduce__(self):
        """Pickled (to another process: multiprocessing, joblib) as what reopens it there: its retriever, index
        directory and search options; the other process loads its own model and maps its own files."""
        if self._scratch is not None or not Path(self.index.path).is_dir():
            raise SemiretError(f"a retriever over {self.index.path} cannot be sent to another process: only an index "
                               "directory of its own can be opened there (build it with a path; a Milvus "
                               "collection: open it there with open_retriever)")
        return _reopened, (self.name, str(Path(self.index.path).resolve()), self._search_options)

    def __copy__(self) -> "Retriever":
        """A shallow copy sharing the open index and model (what :meth:`pinned` changes the index of)."""
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        return clone

    # ------------------------------------------------------------------ options
    @classmethod
    def compatible_kinds(cls) -> tuple[str, ...]:
        return cls.index_kinds or (cls.documents.index_kind,)

    @classmethod
    def split_options(cls, options: dict) -> tuple[dict, dict]:
        """(build options, search options) of ``options``; names neither side knows are an error."""
        build_names = option_tools.option_names([cls.documents.Options])
        search_names = option_tools.option_names([cls.queries.Options])
        unknown = sorted(k for k, v in options.items() if v is not None and k not in build_names + search_names)
        if unknown:
            searching = [name for name in search_names if name not in build_names]
            raise SemiretError(f"option(s) {', '.join(unknown)} do not apply to retriever {cls.name!r} (its options: "
                               f"{', '.join(build_names) or 'none'} to build"
                               + (f"; {', '.join(searching)} to search" if searching else "") + ")")
        return option_tools.pick(options, cls.documents.Options), option_tools.pick(options, cls.queries.Options)

    @classmethod
    def search_options(cls, options: dict):
        """The query side's options object made from ``options`` (checked: unknown names and bad values fail)."""
        search_names = option_tools.option_names([cls.queries.Options])
        misplaced = sorted(k for k, v in options.items() if v is not None and k not in search_names)
        if misplaced:
            raise SemiretError(f"option(s) {', '.join(misplaced)} do not apply when searching with retriever "
                               f"{cls.name!r} (its search options: {', '.join(search_names) or 'none'})")
        built = option_tools.build(cls.queries.Options, options, cls.name)
        cls.check_model(getattr(built, "model", None))
        return built

    @classmethod
    def check_model(cls, model: str | None) -> None:
        """Refuse ``model`` when it is a saved model or an encoder this retriever does not take (see
        :attr:`model_kinds`), naming the retrievers that do."""
        if model is None or not cls.model_kinds:
            return
        saved = saved_model_kind(model)
        family = None if saved else encoder_family(model)
        kind = saved.name if saved else family
        if kind is None or kind in cls.model_kinds:
            return
        if saved is None and any(k in cls.model_kinds for k in ENCODER_FAMILIES):
            return  # an encoder of another family: loading it as this retriever's family is the user's experiment
        takers = [name for name, other in RETRIEVERS.items() if kind in other.model_kinds]
        what = saved.what if saved else f"a {family} encoder"
        raise SemiretError(f"{model} is {what}, which retriever {cls.name!r} does not take"
                           + (f"; search it with -r {', '.join(takers)}" if takers else "")
                           + f" ({LIST_HINT})")

    # ------------------------------------------------------------------ index life cycle
    @classmethod
    def build(cls, documents: Iterable[Document], path: str | Path | None = None, *, total: int | None = None,
              store_texts: bool = True, overwrite: bool = False, batch_size: int | None = None,
              backend: "str | MilvusBackend | None" = None, chunking: Chunking | dict | int | None = None,
              buffer_mb: float | None = None, corpus_head: Iterable[Document] | None = None,
              shard: dict | None = None, metadata_fields: Sequence[str] | None = None, id_field: str | None = None,
              text_field: str | None = None, **options) -> "Retriever":
        """Index ``documents`` into a new directory at ``path`` and open a retriever on it. Without a path the
        index lives in a temporary directory removed when the retriever is garbage-collected. With a
        ``backend`` (``milvus:URI``) the documents go into the Milvus collection named ``path`` instead.
        ``chunking``: index the documents' passages (:mod:`semiret.data.chunking`; a :class:`Chunking` of words or
        tokens, of whole sentences or not, a dict of its fields or a number of words; a budget in tokens is counted
        by the tokenizer it names, else the index's model's), recorded in the index, so that documents added later
        are split alike. ``buffer_mb``: the MB of documents a build holds in memory before it writes them as a
        segment (default: the document side's ``buffer_mb``, :data:`~semiret.indexes.segments.DEFAULT_BUFFER_MB` but
        for NAIL's score matrix; 0: all, one segment), so
        that memory does not grow with the corpus; the segments find what one segment would. A hybrid index and a
        Milvus collection take no buffer (a hybrid's parts are written whole). ``corpus_head``: the first documents
        of the corpus ``documents`` are a shard of, whose first batch the document side takes its statistics from (a
        lexical prior's mean length), as a build of the whole corpus does, so that the shards merge; ``shard``: which
        slice of it they are (:func:`~semiret.data.collection.read_shard`'s record), recorded so that
        :func:`~semiret.indexes.segments.merge_shards` finds a shard missing, repeated or of another corpus.
        ``metadata_fields``, ``id_field`` and ``text_field``: the corpus fields kept as metadata and those holding each
        document's id and text (:class:`~semiret.data.collection.CorpusFields`, as
        :func:`~semiret.data.collection.iter_corpus` reads a file with them), what dicts among ``documents`` are read
        with, recorded for the documents added later (:meth:`corpus_fields`). Without ``metadata_fields`` the other
        fields of the first dict are left out, named in a warning, as ``semiret index`` names a file's."""
        build_options, search_options = cls.split_options(options)
        cls.search_options(search_options)  # (a bad search option refused before any document is encoded)
        buffer_mb = check_buffer(buffer_mb)
        fields = CorpusFields(metadata_fields, id_field, text_field)
        chunking = Chunking.of(chunking)
        made_empty = isinstance(documents, (list, tuple)) and not documents  # asked for: nothing to warn of
        if chunking is not None:
            if cls.documents.takes_vectors:
                raise SemiretError(f"the {cls.name} retriever indexes the vector each document brings: its passages "
                                   "would share that one vector (split the documents and embed each passage "
                                   "yourself, then index them without --chunk-words)")
            if not store_texts:
                raise SemiretError("passages find their documents by their stored metadata (parent): build with "
                                   "stored texts to index passages")
        store = resolve_backend(backend) or cls.documents.index_class
        writes_parts = "buffer_mb" in inspect.signature(store.build).parameters  # (a kind of another package's may not)
        if buffer_mb and not writes_parts:
            where = "a Milvus collection" if backend is not None else f"a {cls.name} index (written whole)"
            raise SemiretError(f"a build buffer (buffer_mb, --buffer-mb) does not apply to {where}")
        if path is None and backend is not None:
            raise SemiretError("a Milvus collection needs a name (path)")
        if path is not None and backend is None:
            check_build_target(Path(path), overwrite)  # before a model loads or a document is read
        document_options = option_tools.build(cls.documents.Options, build_options, cls.name)
        cls.check_model(getattr(document_options, "model", None))
        cls.check_model(search_options.get("model"))  # a query side's model (sidr-beta), before anything is built
        if shard is not None and backend is None and not writes_parts:  # (a hybrid: written whole, its parts apart)
            raise SemiretError(f"a {cls.name} index holds several indexes, which merge-shards does not merge: build "
                               "it whole, or shard its neural retriever alone (index -r dense --shard i/n ...), merge "
                               "those shards and add BM25 beside them (semiret hybrid-index)")
        document_side = cls.documents.create(document_options)
        if isinstance(documents, (list, tuple)) and total is None:
            total = len(documents)
        read_as_text = TextFields.parse(build_options.get("text_fields"))  # (BM25F's: kept where it reads them)
        reading = fields.keeping(read_as_text.metadata_names if read_as_text else ())
        documents = _documents(documents, "build", reading,
                               f"metadata_fields=[...] (['{EVERY_FIELD}']: all) keeps them as metadata, to filter on")
        if chunking is not None:  # (a budget in tokens: counted by the tokenizer the side reads documents with)
            chunking = counted_for_index(chunking, document_side.index_config, cls.name)
            documents, total = chunking.split(documents), None
        if writes_parts:  # a kind writing these options whole (quantized, a tree) refuses a buffer asked for, now
            config = document_side.index_config()
            if shard is not None and store.written_whole(config):
                raise SemiretError(f"{store.written_whole(config)} is made from every document at once: its shards "
                                   "would not merge into it; build it whole (or shard without those options)")
            part_buffer = (whole_buffer(store, config, buffer_mb) or 0) if store.written_whole(config) else \
                cls.documents.buffer_mb if buffer_mb is None else buffer_mb
        scratch = None
        if path is None:
            scratch = tempfile.TemporaryDirectory(prefix="semiret-index-")
            path = Path(scratch.name) / "index"
        if total is not None:
            document_side.expect(total)

        size = batch_size or cls.documents.batch_size
        rest = iter(batched(documents, size))
        first = next(rest, None)
        head = None if corpus_head is None else next(iter(batched(_documents(
            chunking.split(corpus_head) if chunking else corpus_head, "build", reading), size)), None)
        if head or first:  # (a shard holding no document takes the corpus's statistics too: the shards merge)
            document_side.prepare(head or first)

        def encoded():
            for batch in itertools.chain([first] if first is not None else [], rest):
                yield document_side.encode(batch)

        batches = encoded()
        batches = progress.track(batches, f"indexing ({cls.name})", total=total, advance=len)
        query_model = search_options.get("model")  # (sidr-beta's: the query encoder, which no posting records)
        config = document_side.index_config()
        if writes_parts:
            config["buffer_mb"] = part_buffer
        index = store.build(path, cls.documents.index_kind, batches, **config,
                            store_texts=store_texts, overwrite=overwrite,
                            extra_meta={"retriever": cls.name, **({"chunking": chunking.record()} if chunking else {}),
                                        **({"query_model": model_reference(str(query_model))} if query_model else {}),
                                        **fields.record(),
                                        **({"shard": shard} if shard is not None else {})})
        retriever = cls.from_index(index, **search_options)  # its sides read what the index recorded
        retriever._scratch = scratch
        if first is None and not made_empty:  # an empty file, blank lines, a header alone: worth a word, not an error
            log.warning("no documents to index: %s holds an empty index (documents can be added to it)", path)
        return retriever

    @classmethod
    def open(cls, path: str | Path, backend: "str | MilvusBackend | None" = None, **options) -> "Retriever":
        """Open an index directory (or the collection ``path`` of a ``backend``) for searching with this retriever
        (``options``: its search options)."""
        return cls.from_index(open_index_at(path, backend), **options)

    @classmethod
    def can_search(cls, index) -> bool:
        """Whether this retriever searches ``index``: its kind, and what its query side needs of it (the model
        family that built it: an impact index of SPLADE's is no SiDR index); a retriever needing more says so here."""
        return index.kind in cls.compatible_kinds() and cls.queries.reads(index)

    @classmethod
    def check_index(cls, index) -> None:
        """Refuse an index of a kind this retriever cannot search, naming the retrievers that can."""
        if index.kind in cls.compatible_kinds():
            return
        built = index.meta.get("retriever")
        usable = [name for name, other in RETRIEVERS.items() if other.can_search(index)]
        article = "an" if index.kind[:1] in "aeiou" else "a"
        raise SemiretError(f"{index.path} is {article} {index.kind!r} index"
                           + (f" built for {built}" if built else "")
                           + f"; {cls.name} needs one of {cls.compatible_kinds()}. Retrievers that search it: "
                           + ", ".join(usable) + (f" (without -r: {built})" if built else ""))

    @classmethod
    def from_index(cls, index, document_side: DocumentSide | None = None, **options) -> "Retriever":
        """A retriever over an open index; ``document_side`` shares one already open on it (default: the side of
        the retriever that built the index, re-opened from its ``meta.json``)."""
        cls.check_index(index)
        stale = replaced_weights(index.meta)
        if stale is not None:
            raise SemiretError(f"{index.path} was {stale}")
        recorded = index.meta.get("query_model")
        if recorded and options.get("model") is None and "model" in {f.name for f in fields(cls.queries.Options)}:
            options = {**options, "model": located(recorded)}  # the model the index was built to be searched with
        query_options = cls.search_options(options)
        document_side = document_side or _builder_of(index, cls).documents.from_index(index)
        return cls(index, cls.queries.open(index, query_options, document_side), document_side,
                   search_options=options)

    def corpus_fields(self, metadata_fields: Sequence[str] | None = None, id_field: str | None = None,
                      text_field: str | None = None) -> CorpusFields:
        """How documents added to the index are read (dicts given to :meth:`add`, ``semiret add``'s corpus, the
        service's): the fields its build recorded (``metadata_fields``, ``id_field``, ``text_field``; those given
        here in their place), with those its analyzer reads as text kept as metadata, where it reads them (BM25F's
        ``text_fields``)."""
        recorded = CorpusFields.of({**self.index.meta, **{name: value for name, value in (
            ("metadata_fields", metadata_fields), ("id_field", id_field), ("text_field", text_field))
            if value is not None}})
        return recorded.keeping(text_field_names(self.index))

    @property
    def metadata_fields(self) -> list[str] | None:
        """The corpus fields the index's documents were read with as metadata (``build(metadata_fields=...)``,
        ``--metadata-fields``): what ``semiret add`` reads a corpus with unless told otherwise; None if none."""
        return self.index.meta.get("metadata_fields")

    @property
    def chunking(self) -> Chunking | None:
        """How the index splits documents into passages (``build(chunking=...)``, ``--chunk-words``), or None."""
        recorded = self.index.meta.get("chunking")
        return recorded_chunking(recorded) if recorded else None

    def add(self, documents: Iterable[Document], replace: bool = False, buffer_mb: float | None = None,
            total: int | None = None) -> int:
        """Index more documents; they are searchable as soon as this returns, and durable, all in one commit.
        Returns how many were added (passages, where the index holds passages: each document is split as at the
        build, and ``replace`` first deletes the passages of the documents it replaces).

        Read, checked and encoded a batch at a time, under the index's write lock, against its last commit (a
        vocabulary that grows as documents are encoded, BM25's words, then gives new words ids no other writer has
        given), and written a segment each ``buffer_mb`` MB (as :meth:`build`), so that adding a large file does
        not hold all of it; a hybrid index or a Milvus collection takes the documents whole. ``total``: how many
        documents come, for the progress bar (a list's length by default)."""
        return self._add(documents, replace, buffer_mb, total, "add")

    def _add(self, documents: Iterable[Document], replace: bool, buffer_mb: float | None, total: int | None,
             call: str, kept=None, before_commit=None) -> int:
        """:meth:`add` (``call`` names it in messages) of the documents of each group that ``kept`` (a function of a
        list of documents, under the write lock) keeps: all without one. ``before_commit``, once every group is
        read and before anything is committed, may raise to write nothing."""
        buffer_mb = check_buffer(buffer_mb)
        if isinstance(documents, (list, tuple)) and total is None:
            total = len(documents)
        documents = _documents(documents, call, self.corpus_fields(), ADDED_FIELDS_HINT)
        label = f"{'adding' if call == 'add' else 'syncing'} ({self.name})"
        if not isinstance(self.index, SegmentedIndex):
            if buffer_mb:
                raise SemiretError(f"a build buffer (buffer_mb, --buffer-mb) does not apply to {self.index.path}")
            with self.index.writing():
                whole = list(documents) if kept is None else kept(list(documents))
                if before_commit is not None:
                    before_commit()
                groups = [whole] if whole else []
                return sum(self.index.add(batch, replace=replace, superseded=superseded)
                           for batch, superseded in self._encoded_parts(groups, replace))
        with self.index.writing():
            groups = progress.track(batched(documents, self.document_side.batch_size), label, total=total, advance=len)
            if kept is not None:
                groups = (group for group in map(kept, groups) if group)
            if before_commit is not None:
                groups = _then(groups, before_commit)
            return self.index.add_parts(self._encoded_parts(groups, replace), replace,
                                        self.document_side.buffer_mb if buffer_mb is None else buffer_mb)

    def sync(self, documents: Iterable[Document], buffer_mb: float | None = None, total: int | None = None,
             force: bool = False, ids: Iterable[str] | None = None) -> SyncCounts:
        """Make the index hold exactly ``documents`` (a folder's files as they are now, say): those new or changed
        (text, title or metadata) added in one commit, those stored as they are left alone (not encoded again), then
        the documents the index holds that ``documents`` lacks deleted, in a second commit (LlamaIndex's
        upserts-and-delete, ``rsync --delete``). Compares with the stored documents, so the index must keep them;
        where it holds passages, a document is unchanged when its passages are. A sync that would delete more
        documents than it keeps (a subfolder given for its folder, an empty file) writes nothing unless ``force``
        (found before any document is read where their ids are known: ``documents`` a list, or ``ids`` given, a file
        read twice; else once all are read, before the first commit)."""
        self._check_comparable()
        if ids is None and isinstance(documents, (list, tuple)):
            fields = self.corpus_fields()
            ids = [as_document(item, position, fields).id for position, item in enumerate(documents)]  # dicts too
        with self.index.writing():
            if ids is not None:
                self._doomed(set(ids), force, "Nothing was written")
            return self._sync(documents, buffer_mb, total, set(), force)

    def _doomed(self, kept: set[str], force: bool, outcome: str) -> list[str]:
        """The documents a sync keeping ``kept`` deletes: an error saying ``outcome`` when they outnumber the kept
        ones, unless ``force``."""
        doomed = sorted(set(self.document_ids()) - kept)
        if len(doomed) > len(kept) and not force:  # (a folder's subfolder given for the folder, a file emptied)
            raise SemiretError(f"sync would delete {len(doomed)} documents of {self.index.path} (e.g. {doomed[0]!r}) "
                               f"and keep {len(kept)}: is this the corpus the index was built from? {outcome}; "
                               "force=True (--force) deletes them")
        return doomed

    def _check_comparable(self) -> None:
        if not self.index.stores_texts:
            raise SemiretError(f"{self.index.path} keeps no stored documents (built with --no-store-texts): sync "
                               "compares documents with the stored ones; add them with replace (--replace) instead")

    def _sync(self, documents: Iterable[Document], buffer_mb: float | None, total: int | None, seen: set[str],
              force: bool) -> SyncCounts:
        """:meth:`sync`, under the write lock, ``seen`` the ids of the documents known unchanged, not given
        (:meth:`sync_folder`'s files whose bytes are unchanged)."""
        counts = {"added": 0, "replaced": 0, "unchanged": len(seen)}
        chunking = self.chunking

        def changed(group: list[Document]) -> list[Document]:
            """The documents of ``group`` not stored as they are, counted."""
            stored = self._stored_forms([d.id for d in group])
            kept = []
            for document in group:
                if document.id in seen:
                    raise SemiretError(f"duplicate document id {document.id!r} in the documents to sync")
                seen.add(document.id)
                was = stored.get(document.id)
                if was is not None and was == _stored_form(document, chunking) and self.document_side.holds_alike(
                        self.index, document):
                    counts["unchanged"] += 1
                    continue
                counts["replaced" if was is not None else "added"] += 1
                kept.append(document)
            return kept

        doomed: list[str] = []
        self._add(documents, True, buffer_mb, total, "sync", changed,  # checked before the additions are committed
                  before_commit=lambda: doomed.extend(self._doomed(seen, force, "Nothing was written")))
        if doomed:
            delete_documents(self.index, doomed, missing_ok=True)
        return SyncCounts(**counts, deleted=len(doomed))

    def sync_folder(self, folder: str | Path, metadata_fields: Sequence[str] | None = None,
                    buffer_mb: float | None = None, force: bool = False) -> SyncCounts:
        """:meth:`sync` with a folder of documents (:mod:`semiret.data.folder`) read with ``metadata_fields``
        (default: the index's, :meth:`corpus_fields`, with those BM25F reads as text), parsing only the files whose
        bytes differ from those their documents were read from (the ``file_hash`` stored with them): a PDF unchanged
        costs a read of its bytes, not of its text.
        The document of a file unchanged stays as stored: its ``modified`` time when only that moved, metadata set on
        it and passages deleted from it since, and the fields it was last read with. Fields other than the index's
        record parse every file (the documents' metadata may change with them); so does the first sync of documents
        read before semiret kept ``file_hash``, or by readers that have changed since
        (:data:`~semiret.data.folder.READER_VERSION`)."""
        folder = Path(folder)
        if not folder.is_dir() or corpus_file(folder).is_file():
            raise SemiretError(f"{folder} is not a folder of documents (a folder holding no BEIR corpus file): sync "
                               "its documents with sync(iter_corpus(...))")
        self._check_comparable()
        recorded = self.corpus_fields().metadata_fields
        fields = recorded if metadata_fields is None else self.corpus_fields(metadata_fields).metadata_fields
        with self.index.writing():  # the hashes compared are the last commit's
            stored = self._stored_values("file_hash") if fields == recorded else {}
            hashes = folder_hashes(folder)
            self._doomed(set(hashes), force, "Nothing was written")
            unchanged = {doc_id for doc_id, digest in hashes.items() if stored.get(doc_id) == digest}
            return self._sync(iter_corpus(folder, fields, skip_ids=unchanged, folder=True), buffer_mb,
                              len(hashes) - len(unchanged), unchanged, force)

    def _stored_values(self, field: str) -> dict:
        """``{document id: its stored metadata field's value}`` (where it holds passages, the value all of a
        document's passages hold, else :data:`MISSING`)."""
        ids = self.index.sorted_ids()
        values = field_values(self.index, ids, (field,))
        if self.chunking is None:
            return values
        found: dict = {}
        for passage, owner in field_values(self.index, ids, (PARENT_FIELD,)).items():
            found[owner] = values[passage] if found.get(owner, values[passage]) == values[passage] else MISSING
        return found

    def _stored_forms(self, doc_ids: list[str]) -> dict[str, str]:
        """The stored records of those of ``doc_ids`` the index holds (their passages', in order, where it holds
        passages), by document id, in canonical JSON."""
        if self.chunking is None:
            return {doc_id: _canonical([document]) for doc_id, document in self.index.get_documents(doc_ids).items()}
        passages = sorted(self.index.get_documents(passage_ids(self.index, doc_ids)).values(),
                          key=lambda p: (p.metadata[PARENT_FIELD], p.metadata[CHUNK_FIELD]))
        return {parent: _canonical(list(group))
                for parent, group in itertools.groupby(passages, key=lambda p: p.metadata[PARENT_FIELD])}

    def document_ids(self) -> list[str]:
        """The ids of the documents the index holds (its passages' documents, where it holds passages)."""
        self._refresh()
        ids = self.index.sorted_ids()
        if self.chunking is None:
            return ids
        return list(set(field_values(self.index, ids, (PARENT_FIELD,)).values()))

    def _encoded_parts(self, groups: Iterable[list[Document]], replace: bool) -> Iterator[tuple[object, list[str]]]:
        """Each group of documents checked (before encoding: it may take minutes), split into passages where the
        index holds passages, and encoded: ``(batch, superseded)``, the old passages a ``replace`` deletes."""
        for number, documents in enumerate(groups):
            if number == 0 and self.index.n_docs == 0:  # an index created empty: its first documents, as a build's
                self.document_side.check_documents(documents, adding=True)
            parents = [d.id for d in documents]
            if self.chunking is not None:
                documents = list(self.chunking.split(documents))
            superseded = self._check_passages(parents, documents, replace) if self.chunking is not None else []
            self.index.check_new_ids([d.id for d in documents], replace)
            yield self.document_side.encode(documents), superseded

    def _check_passages(self, parents: list[str], passages: list[Document], replace: bool) -> list[str]:
        """The ids of the passages the documents ``parents`` have in the index (what a ``replace`` deletes), after
        refusing a document there already (without ``replace``) and a passage whose id another document's
        passage, or a document indexed whole, holds."""
        old = passage_ids(self.index, parents)
        if old and not replace:
            there = field_values(self.index, old[:1], (PARENT_FIELD,))
            raise SemiretError(f"document {next(iter(there.values()), old[0])!r} is already in {self.index.path} (use "
                               "replace / --replace)")
        ours = set(parents)
        for taken in self.index.get_documents([p.id for p in passages]).values():
            owner = (taken.metadata or {}).get(PARENT_FIELD)
            if owner not in ours:
                holder = f"the document {taken.id!r}" if owner in (None, taken.id) else f"a passage of {owner!r}"
                raise SemiretError(f"a passage would take the id {taken.id!r} of {holder} in {self.index.path}: "
                                   "give the document another id")
        return old

    def delete(self, doc_ids: Iterable[str], missing_ok: bool = False) -> int:
        """Delete documents by id (a list: one id is ``[id]``); they vanish from searches at once. An unknown id is
        an error (nothing is deleted) unless ``missing_ok``. Where the index holds passages, a document's id deletes
        all its passages (a passage's id, that passage)."""
        if isinstance(doc_ids, str):
            raise SemiretError(f"delete takes a list of ids, got the string {doc_ids!r} (one id: [{doc_ids!r}])")
        return delete_documents(self.index, [_document_id(doc_id) for doc_id in doc_ids], missing_ok)

    def delete_where(self, filter: dict) -> int:
        """Delete every document whose stored metadata passes ``filter`` (as :meth:`search` reads it; Qdrant's delete
        by filter, OpenSearch's delete by query), in one commit per part of the index; returns how many."""
        return delete_matching(self.index, filter)

    def set_metadata(self, metadata: dict, ids: list[str] | None = None, filter: dict | None = None,
                     overwrite: bool = False, missing_ok: bool = False) -> int:
        """Set ``metadata``'s fields on the documents of ``ids`` (a list; an unknown id is an error unless
        ``missing_ok``) or passing ``filter`` (``overwrite``: replace their metadata with it), in one commit, no
        model encoding anything again (Qdrant's set_payload), unless the index reads a field that changes as text
        (BM25's ``text_fields``): those documents are encoded again. Searches filter on the new values at once.
        Returns how many documents changed."""
        if isinstance(ids, str):
            raise SemiretError(f"set_metadata takes a list of ids, got the string {ids!r} (one id: [{ids!r}])")
        return set_metadata(self.index, metadata, None if ids is None else [_document_id(d) for d in ids], filter,
                            overwrite, missing_ok, encode=self.document_side.encode)

    def synonyms(self) -> list[str]:
        """The synonym rules set on the index (:meth:`set_synonyms`), as the lines they were set with."""
        self._refresh()
        index, _ = self._synonym_target()
        return index.synonym_lines()

    def set_synonyms(self, rules: "str | Path | Sequence[str] | None") -> int:
        """Set the index's synonym rules, those of a file (a path) or the lines given (:mod:`semiret.text.synonyms`:
        Solr's format, ``"heart attack, myocardial infarction"``, ``"colour => color"``); None or ``[]`` removes
        them. Checked before anything is written (a malformed line, or a phrase of stopwords only, is an error naming
        its line); searches expand queries by them from the next one on, no document encoded again (OpenSearch's
        search-time synonyms; Elasticsearch's updatable synonyms sets). Returns how many rules are set."""
        lines = self.check_synonyms(rules)
        return self._synonym_target()[0].set_synonyms(lines)

    def check_synonyms(self, rules: "str | Path | Sequence[str] | None", name: str | None = None) -> list[str]:
        """The lines of ``rules`` (as :meth:`set_synonyms` takes them) once checked as this index's queries would
        read them; a malformed line is an error naming ``name`` (default: the file, else "synonyms") and the line."""
        _, side = self._synonym_target()
        name = name or (str(rules) if isinstance(rules, (str, PurePath)) else "synonyms")
        lines = [] if rules is None else read_synonyms(rules, name)
        idle = side.compile(lines, name).idle_lines
        if idle:
            log.warning("%s: the rule%s of line%s %s add%s nothing once the index's analyzer reads them (one stem for "
                        "every phrase)", name, "s" * (len(idle) > 1), "s" * (len(idle) > 1),
                        ", ".join(map(str, idle[:10])) + (", ..." if len(idle) > 10 else ""), "" if len(idle) > 1 else "s")
        return lines

    def abbreviation_synonyms(self, min_count: int = 1) -> list[str]:
        """Synonym rules for the abbreviations the stored documents define ("myocardial infarction (MI)": ``mi,
        myocardial infarction``; :func:`~semiret.text.acronyms.mine_abbreviations`), those defined at least
        ``min_count`` times, most first, under comment lines saying how often (``# defined 3 times``); rules the
        index's analyzer would refuse (a stopword: "US") are left out. For review before :meth:`set_synonyms`."""
        _, side = self._synonym_target()
        if not self.index.stores_texts:
            raise SemiretError(f"{self.index.path} keeps no stored documents (built with --no-store-texts): the "
                               "abbreviations are read from them")
        rules, count_before = [], None
        self._refresh()
        texts = (document.full_text for document in self.index.iter_documents())
        for short, long_form, count in mine_abbreviations(texts, min_count):
            rule = f"{escaped(short.lower())}, {escaped(long_form)}"
            try:
                if not len(side.compile([rule])):  # the analyzer reads both alike
                    continue
            except SemiretError:
                continue
            if count != count_before:
                rules.append(f"# defined {count} time{'s' * (count > 1)}")
                count_before = count
            rules.append(rule)
        return rules

    def _synonym_target(self):
        target = self.query_side.synonym_target(self.index)
        if target is None:
            takers = sorted(name for name, cls in RETRIEVERS.items() if "synonyms" in
                            {f.name for f in fields(cls.queries.Options)})
            raise SemiretError(f"retriever {self.name!r} reads no words to expand by synonyms ({', '.join(takers)} "
                               "do)")
        if not hasattr(target[0], "set_synonyms"):
            raise SemiretError("a Milvus collection keeps no synonym rules; give a file with each search instead "
                               "(synonyms=FILE, --synonyms FILE)")
        return target

    # ------------------------------------------------------------------ documents
    def get_document(self, doc_id: str) -> Document | None:
        """The stored document of an id, or None (unknown, deleted, or the index keeps no texts); over an index of
        passages, a passage's id gives the passage and a document's id the document, its passages joined."""
        return self.get_documents([doc_id]).get(_document_id(doc_id))

    def get_documents(self, doc_ids: Iterable[str]) -> dict[str, Document]:
        """The stored documents of those ids the index holds (Qdrant's retrieve), by id (as :meth:`get_document`)."""
        if isinstance(doc_ids, str):
            raise SemiretError(f"get_documents takes a list of ids, got the string {doc_ids!r} (one id: get_document)")
        self._refresh()
        return documents_by_id(self.index, [_document_id(doc_id) for doc_id in doc_ids])

    def count(self, filter: dict | None = None, query: str | None = None) -> int:
        """How many documents the index holds, or how many pass ``filter`` (as :meth:`search` reads it); with a
        ``query``, how many of those its search matches (OpenSearch's total hits, "about 1,234 results"): for the
        retrievers that sum term weights (BM25, the token and learned sparse ones), the documents holding one of its
        scored terms; for a dense index, every one (each has a score). Over an index of sparse vectors (retriever
        ``sparse-vectors``) ``query`` may be a sparse query vector, ``{term: weight}``."""
        self._refresh()
        if query is None:
            return count_matching(self.index, filter)
        query = self._one_query(query, "a count of matches")
        if self.query_side.searches_vectors and not self._sums_term_weights:  # (a dense index: every document)
            if not self.query_side.reads_texts:
                self.query_side.encode_queries([query])  # (says to search it with vectors)
            return count_matching(self.index, filter)
        if not self._sums_term_weights:
            raise SemiretError(f"{self.index.path}: a query's matches are counted in an index of terms whose search "
                               "sums their weights (retrievers bm25, bot, idf, splade, inference-free, sidr-full, "
                               f"nail-sparse) or a dense one; retriever {self.name} over it ranks otherwise")
        view = self.index.pinned()
        wanted = checked_filter(view, filter, "filter on")
        if wanted is not None:
            view = view.restricted(wanted)
        return view.matching_count(self.query_side.scored_queries(view, [query])[0])

    def iter_documents(self, filter: dict | None = None) -> Iterator[Document]:
        """The stored documents (those passing ``filter``), in the order they were added, from one commit."""
        self._refresh()
        return matching_documents(self.index, filter)

    def facet(self, field: str, filter: dict | None = None, limit: int = 10, ranges: list[dict] | None = None,
              query=None, depth: int = FACET_DEPTH, operators: bool = False) -> list[tuple]:
        """The ``limit`` values of a metadata field the most documents hold (those passing ``filter``), with their
        counts, most first: ``[("pubmed", 120), ("arxiv", 35)]`` (Qdrant's facet, OpenSearch's terms aggregation).
        ``ranges``: how many have a value in each range instead, in the order given: ``[({"lt": 2010}, 52), ...]``
        (OpenSearch's range aggregation). ``query`` (a text, or a vector over a dense index): counted among its best
        ``depth`` hits only (those passing ``filter``), the search and the counts from one commit: what a search page
        shows beside its hits (OpenSearch's aggregations of a k-NN search's candidates, Meilisearch's facet
        distribution); ``operators``: the query read as a search box's, as :meth:`search` reads it (a retriever
        opened with search options searches with them here too). Over an index of passages every count is of
        documents: a document counts once however many of its passages pass (or are among the hits)."""
        if query is None:
            self._refresh()
            return facet(self.index, field, filter, limit, ranges)
        check_count(depth, "depth (--depth)")
        view = self.pinned()
        hits = view.search(query, k=depth, filter=filter, operators=operators)
        if isinstance(hits, SearchHits):
            raise SemiretError("a facet counts the hits of one query: give a text (or one vector), not a list of them")
        if not hits:  # nothing found: no value held, every range empty
            return [] if ranges is None else [(bounds, 0) for bounds in checked_ranges(field, ranges)]
        return facet(view.index, field, {"$id": [hit.id for hit in hits]}, limit, ranges)

    def scroll(self, filter: dict | None = None, limit: int = 10, offset: str | None = None,
               order_by: "str | dict | None" = None) -> DocumentPage:
        """A page of at most ``limit`` documents (those passing ``filter``) in id order, from the id ``offset`` on;
        ``page.next_offset`` starts the next one (Qdrant's scroll). ``order_by``: in a metadata field's order
        instead, ``"published"`` or ``{"key": "published", "direction": "desc"}`` (newest first; Qdrant's
        ``order_by``, :class:`~semiret.indexes.filters.Ordering`), the offsets then the tokens pages return."""
        self._refresh()
        return documents_page(self.index, filter, limit, offset, order_by)

    def backup(self, target: str | Path, overwrite: bool = False) -> Path:
        """A copy of the index as its last commit stands, at ``target``, taken while searches and writes go on: a
        backup that opens with this retriever (``open_retriever(target)``). Files that never change are
        hard-linked where ``target`` lies on the same file system, so it costs little time and no space."""
        if not hasattr(self.index, "backup"):
            raise SemiretError(f"{self.index.path}: a Milvus collection is backed up with Milvus's own tools")
        return self.index.backup(target, overwrite)

    @property
    def given_options(self) -> dict:
        """The search options this retriever was opened with (those ``with_options`` replaces)."""
        return dict(self._search_options)

    def with_options(self, **options) -> "Retriever":
        """This retriever with other search options: the same index and document side (a model it loaded is
        not loaded again), another query side."""
        query_side = self.queries.open(self.index, self.search_options(options), self.document_side)
        variant = type(self)(self.index, query_side, self.document_side, self._scratch,  # a temporary index lives on
                             search_options=options)
        variant._follows_commits = self._follows_commits  # (a pinned view's variant keeps its commit)
        return variant

    def pinned(self) -> "Retriever":
        """This retriever over a read-only view of the index's last commit (brought up to date first,
        :meth:`_refresh`; ``index.pinned()``): a search and the stored texts of its hits then come from one state,
        whatever writers publish meanwhile. A view's own reads keep to its commit."""
        self._refresh()
        view = copy.copy(self)
        view.index = self.index.pinned()
        view._follows_commits = False
        return view

    def _refresh(self) -> None:
        """Bring the index up to what was committed before the read that calls it, by any process or any other
        retriever of this one (another process's add, a server's upserts, a merge): ``index.refresh()``, one
        ``stat`` of ``meta.json`` when nothing changed; a hybrid's composite index, its parts at one change. Every
        read calls it first (most through :meth:`pinned`). A pinned view keeps its commit and a hybrid's part is
        refreshed by its hybrid; a Milvus collection has nothing to re-read."""
        if self._follows_commits:
            refresh = getattr(self.index, "refresh", None)
            if refresh is not None:
                refresh()

    # ------------------------------------------------------------------ search
    def encode_queries(self, texts: list[str]) -> list:
        return self.query_side.encode_queries(list(texts))

    def encode_query(self, text: str):
        return self.encode_queries([text])[0]

    def search(self, queries: str | Sequence[str], k: int = 10, n_threads: int = 1,
               filter: dict | None = None, group_by: str | None = None,
               group_size: int = 1, score_threshold: float | None = None, diversity: float | None = None,
               candidates: int | None = None, boost: "Boost | dict | Sequence[dict] | None" = None,
               operators: bool = False, rerank: "Reranking | LearnedRanking | None" = None
               ) -> SearchHits | list[Hit]:
        """``search("text")``: one query's hits, best first (:class:`~semiret.types.Hit`: ``doc_id, score =
        hit``, ``hit.text``). ``search([...])``: a batch, as :class:`~semiret.types.SearchHits`. Over a dense index
        (retrievers ``dense``, ``vectors``) queries may be vectors instead, searched as they are: a 1-D array or a
        list of numbers for one, a 2-D array (a row each) or a list of lists for a batch; over an index of sparse
        vectors (retriever ``sparse-vectors``), ``{term: weight}`` dicts, one or a list of them. ``filter``: only
        documents whose stored metadata passes it (:mod:`semiret.indexes.filters`: ``{"source": "pubmed"}``).
        ``group_by``: ``k`` groups of hits by a metadata field's value (each hit's ``group``), each with its best
        ``group_size`` hits, groups by their best hit (Qdrant's search groups; ``"parent"`` over an index of
        passages, ``--chunk-words``: documents by their best passage). ``score_threshold``: no hit scoring below it
        (Qdrant's ``score_threshold``, OpenSearch's ``min_score``: fewer than ``k`` hits rather than poor ones; what a
        score means is the retriever's). ``diversity`` (0 to 1): the ``k`` hits picked by maximal marginal relevance
        from the best ``candidates`` (default 100, or ``k`` when more), trading relevance for hits unlike those
        already picked (Qdrant's ``mmr``; :mod:`semiret.search.diversity`); each keeps its own score, so scores
        need not fall down the list. ``boost``: functions of the documents' metadata that multiply the scores of the
        best ``candidates`` (default 100, or ``k`` when more), which are then ranked again (OpenSearch's
        ``function_score``; :mod:`semiret.search.boosting`: ``{"decay": "gauss", "field": "published", "origin":
        "now", "scale": "30d"}`` puts fresher documents first); ``score_threshold`` then reads the boosted scores.
        ``operators``: read a search box's ``"phrase"``, ``+word`` and ``-word`` in the queries (what hits must and
        must not hold; :mod:`semiret.search.operators`). ``rerank``: the best hits scored again by a cross-encoder or late interaction
        (:class:`~semiret.search.rerank.Reranking`) or by a model learned from judged queries
        (:class:`~semiret.search.learned_ranking.LearnedRanking`), each with its score; ``score_threshold`` then
        reads those."""
        self._refresh()  # what was committed before the search, by any process
        vectors = query_vectors(queries, token_vectors=True if self.query_side.vector_kind == "multi" else None)
        if vectors is not None:
            texts, single = vectors
            self._check_vector_search(texts, operators, rerank)
        else:
            single, texts = isinstance(queries, str), query_texts(queries)
        check_count(k, "k")
        check_count(n_threads, "n_threads (--threads)")
        _check_threshold(score_threshold)
        if group_by is None and (isinstance(group_size, bool) or group_size != 1):
            raise SemiretError(f"group_size (--group-size) is the hits of each group: give group_by (--group-by) too "
                               f"(got group_size {group_size!r} without it)")
        if rerank is not None:
            if group_by is not None or diversity is not None or boost is not None or candidates is not None:
                raise SemiretError("a re-ranked search (rerank; --cross-encoder, --colbert or --ltr on the command line) is not also "
                                   "grouped, diversified or boosted, nor given candidates")
            hits = self._reranked(texts, k, n_threads, filter, score_threshold, operators, rerank)
            return hits[0] if single else hits
        if operators:
            hits = self._search_with_operators(texts, k=k, n_threads=n_threads, filter=filter, group_by=group_by,
                                               group_size=group_size, score_threshold=score_threshold,
                                               diversity=diversity, candidates=candidates, boost=boost)
            return hits[0] if single else hits
        boosting = self._checked_boost(boost)
        if diversity is not None:
            hits = self._diversified(texts, k, n_threads, filter, group_by, score_threshold,
                                     Diversity(diversity, candidates), boosting)
            return hits[0] if single else hits
        alone = group_by is not None and self._groups_are_documents(group_by)
        if alone:  # each document its own group: searched ungrouped (its group size checked all the same)
            Grouping(group_by, group_size)
            group_by, group_size = None, 1
        if boosting is not None:
            grouping = Grouping(group_by, group_size) if group_by is not None else None
            depth = candidate_depth(k, candidates, group_size if grouping is not None else 1)
            hits = self._boosted(texts, k, n_threads, filter, boosting, depth, grouping, deepen=candidates is None)
            if alone:
                hits.groups = [list(ids) for ids in hits.ids]
            if score_threshold is not None:
                hits = hits.at_least(score_threshold)
            return hits[0] if single else hits
        if candidates is not None:
            raise SemiretError("candidates (--candidates) is for a diversified or boosted search: give diversity "
                               "(--diversity) or boost (--boost) too")
        wanted = checked_filter(self.index, filter, "filter on")
        grouping = None
        if group_by is not None:
            grouping = Grouping(group_by, group_size)
            if not self.index.stores_texts:
                raise SemiretError(f"{self.index.path} keeps no stored documents (built with --no-store-texts), so "
                                   "it has no metadata to group by")
        index = self.index.pinned()  # one commit, whatever is published meanwhile: a query side reads it more than once
        if wanted is not None and hasattr(index, "restricted"):
            index, wanted = index.restricted(wanted), None  # the documents that fail count as deleted
        if wanted is None and grouping is None:  # no filter, or an empty one (as Qdrant's): every document
            hits = self.query_side.search(index, texts, k, n_threads)
        else:  # rankings and the metadata of their hits from one commit
            hits = self._search_deeper(index, texts, k, n_threads, wanted, grouping)
            if grouping is not None and not any(hits.ids) and self.index.n_docs:
                self._say_none_holds(group_by)
        # the hits' documents as the commit searched holds them, where the hits say where they were found
        hits.lookup = hits.stored_document if isinstance(hits, SegmentHits) else self.index.get_document
        if alone:
            hits.groups = [list(ids) for ids in hits.ids]
        if score_threshold is not None:
            hits = hits.at_least(score_threshold)
        return hits[0] if single else hits

    def _check_vector_search(self, vectors: list, operators: bool, rerank) -> None:
        """Refuse a search by query ``vectors`` that this retriever, or what it was asked to do, cannot make of
        them: a dense index searches dense ones, an index of sparse vectors sparse ones, an index of token vectors
        (retriever multivectors) each query's matrix of them."""
        if not self.query_side.searches_vectors:
            raise SemiretError(f"{self.index.path} is searched by query texts (retriever {self.name}): queries must be "
                               "strings; query vectors are searched over a dense index (retrievers dense, vectors), "
                               "sparse ones over an index of sparse vectors (retriever sparse-vectors), token vectors "
                               "over an index of them (retriever multivectors)")
        given = vector_kind(vectors[0]) if vectors else self.query_side.vector_kind
        if given != self.query_side.vector_kind:
            raise SemiretError(f"{self.index.path} (retriever {self.name}) is searched by query vectors "
                               f"{VECTOR_KINDS[self.query_side.vector_kind]}; these are {VECTOR_KINDS[given]}: "
                               f"search an index of the {RETRIEVER_OF_KIND[given]} retriever with them")
        if operators or rerank is not None:
            raise SemiretError("a search by query vectors has no words: neither operators nor a re-ranking (rerank, "
                               "--cross-encoder, --colbert, --ltr) read it")

    def _checked_boost(self, boost) -> Boost | None:
        """``boost`` checked, and against the index: it needs stored metadata; its filters are checked as a
        search's."""
        if boost is None:
            return None
        boosting = boost if isinstance(boost, Boost) else Boost(boost)
        if not self.index.stores_texts:
            raise SemiretError(f"{self.index.path} keeps no stored documents (built with --no-store-texts), so it has "
                               "no metadata to boost by")
        for wanted in boosting.filters:
            checked_filter(self.index, wanted.spec, "boost by")
        return boosting

    def _boosted(self, texts: list[str], k: int, n_threads: int, filter: dict | None, boosting: Boost,
                 depth: int, grouping: Grouping | None = None, deepen: bool = False) -> SearchHits:
        """:meth:`search`'s best ``depth`` hits boosted by their metadata and ranked again, the best ``k`` kept, or
        the first ``k`` groups of ``grouping`` among them; with ``deepen`` (no number of candidates given), a query
        whose candidates hold fewer than ``k`` full groups (100 passages of 21 documents) is searched again 4 times
        deeper until they do or its ranking ends. The hits and their metadata from one commit."""
        view = self.pinned()
        ids, scores, groups = [[] for _ in texts], [[] for _ in texts], [None for _ in texts]
        pending = list(range(len(texts)))
        while pending:
            found = view.search([texts[q] for q in pending], k=depth, n_threads=n_threads, filter=filter)
            short = []
            for row, (query, hit_ids, hit_scores) in enumerate(zip(pending, found.ids, found.scores)):
                located = found.located(view.index, hit_ids, row) if hasattr(found, "located") else None
                ranked, boosted = boosting.rescored(view.index, hit_ids, hit_scores, k if grouping is None else depth,
                                                    located)
                if grouping is not None:
                    ranked, boosted, groups[query], complete = grouping.pick(ranked, boosted, field_values(
                        view.index, ranked, grouping.path), k)
                    if deepen and not complete and len(hit_ids) == depth < view.index.n_docs:
                        short.append(query)
                ids[query], scores[query] = ranked, boosted
            pending, depth = short, min(depth * 4, view.index.n_docs)
        return SearchHits(ids, scores, lookup=self.index.get_document, groups=groups if grouping is not None else None)

    def _diversified(self, texts: list[str], k: int, n_threads: int, filter: dict | None, group_by: str | None,
                     score_threshold: float | None, diversity: Diversity, boosting: Boost | None) -> SearchHits:
        """:meth:`search`'s hits picked by maximal marginal relevance among its best ``diversity.depth(k)`` (boosted
        first, given ``boosting``), the candidates and their documents' vectors from one commit."""
        if group_by is not None:
            raise SemiretError("a search is grouped (group_by, --group-by) or diversified (diversity, --diversity), "
                               "not both")
        view = self.pinned()
        if not hasattr(view.index, "similarities"):
            raise SemiretError(f"{self.index.path}: a Milvus collection keeps the documents' vectors to itself, so its "
                               "searches cannot be diversified")
        depth = diversity.depth(k)
        found = view.search(texts, k=depth, n_threads=n_threads, filter=filter, score_threshold=score_threshold,
                            boost=boosting, candidates=None if boosting is None else depth)
        ids, scores = [], []
        for hit_ids, hit_scores in zip(found.ids, found.scores):
            order = maximal_marginal_relevance(hit_scores, view.index.similarities(hit_ids), k, diversity.diversity)
            ids.append([hit_ids[i] for i in order])
            scores.append([hit_scores[i] for i in order])
        return SearchHits(ids, scores, lookup=self.index.get_document, diversified=True)

    def _reranked(self, texts: list[str], k: int, n_threads: int, filter: dict | None, score_threshold: float | None,
                  operators: bool, rerank: "Reranking") -> SearchHits:
        """:meth:`search`'s best ``max(k, rerank.depth)`` hits ranked again by ``rerank``'s cross-encoder (reading
        the words a search scores, without its operators) or learned ranking, the candidates and their documents from
        one commit."""
        from semiret.search.learned_ranking import LearnedRanking
        from semiret.search.rerank import Reranking

        if not isinstance(rerank, (Reranking, LearnedRanking)):
            raise SemiretError(f"rerank is a semiret.search.rerank.Reranking (a model and a depth) or a "
                               f"semiret.search.learned_ranking.LearnedRanking, got {type(rerank).__name__}")
        rerank.check_first_stage(self)
        view = self.pinned()
        found = view.search(texts, k=max(k, rerank.depth), n_threads=n_threads, filter=filter, operators=operators)
        read = [scored_text(text, operators, self.query_side) for text in texts]
        hits = rerank.reranked(read, found, view.get_documents, k, n_threads)
        hits.lookup = view.index.get_document
        return hits.at_least(score_threshold) if score_threshold is not None else hits

    def _groups_are_documents(self, group_by: str) -> bool:
        """Whether grouping by ``group_by`` makes each document its own group: ``"parent"`` over an index of whole
        documents (no passages, and no document holding a field of that name), so that a search grouping documents
        by their best passage runs unchanged on both kinds of index."""
        if group_by != PARENT_FIELD or self.chunking is not None:
            return False
        index = getattr(self.index, "first", self.index)  # a hybrid's first part holds the documents
        if hasattr(index, "holds_field"):
            held = index.holds_field(group_by)
        else:  # (Milvus)
            held = index.stores_texts and index.count(MetadataFilter({group_by: {"exists": True}})) > 0
        if not held:
            log.debug("%s holds whole documents: grouped by %r, each document is its own group", self.index.path,
                      group_by)
        return not held

    def _say_none_holds(self, field: str) -> None:
        """A warning when no document holds the field a search grouped by (what left it without hits)."""
        if self.index.count(MetadataFilter({field: {"exists": True}})):  # (not a filter's warnings: none was given)
            return
        hint = (": only an index of passages (--chunk-words) holds it; this one holds whole documents, search it "
                "without grouping" if field == PARENT_FIELD and self.chunking is None else "")
        warn(log, f"no document of {self.index.path} holds the field {field!r} to group by, so no hits{hint}")

    def recommend(self, positive: Sequence[str], negative: Sequence[str] = (), k: int = 10, n_threads: int = 1,
                  filter: dict | None = None, score_threshold: float | None = None) -> list[Hit]:
        """Documents like the ``positive`` examples and unlike the ``negative`` ones, all given by the ids of
        documents in the index (Qdrant's recommend, OpenSearch's more like this): each example's stored text is
        searched as a query by this retriever, whatever its kind; one example's hits keep their scores, those of more
        are ranked by reciprocal rank fusion, the positives' ``1 / (60 + rank)`` less the negatives' (a document
        found only near negatives is left out). An example's text is what the index reads of it
        (:meth:`DocumentSide.text`: over BM25 of weighted fields, ``text_fields``, those fields as weighted; a
        hybrid's parts each read it as they read documents). The examples are never among the hits; ``filter`` as
        :meth:`search` reads it. Over an index of passages a document's id stands for the document (its passages
        joined) and none of its passages is recommended. ``score_threshold``: as :meth:`search`'s, on the scores
        returned."""
        positive, negative = _ids(positive, "positive"), _ids(negative, "negative")
        _check_threshold(score_threshold)
        if not positive:
            raise SemiretError("recommend needs at least one positive example (the id of a document in the index)")
        check_count(k, "k")
        check_count(n_threads, "n_threads (--threads)")
        view = self.pinned()  # the examples and the searches from one commit
        texts, excluded = self._example_texts(view.index, positive + negative)
        depth = (k if len(texts) == 1 else max(FILTER_DEPTH, 4 * k)) + len(excluded)
        found = view._search_examples(texts, depth, n_threads, filter)
        if len(texts) == 1:  # one example: its search's own ranking and scores
            ranked = [(d, float(s)) for d, s in zip(found.ids[0], found.scores[0]) if d not in excluded][:k]
        else:
            fused: dict[str, float] = {}
            for n, ids in enumerate(found.ids):
                sign = 1.0 if n < len(positive) else -1.0
                for doc_id, share in zip(ids, reciprocal_ranks(len(ids), RRF_K).tolist()):
                    fused[doc_id] = fused.get(doc_id, 0.0) + sign * share
            ranked = sorted(((d, s) for d, s in fused.items() if s > 0 and d not in excluded),
                            key=lambda item: (-item[1], item[0]))[:k]
        hits = SearchHits([[d for d, _ in ranked]], [[s for _, s in ranked]], lookup=self.index.get_document)
        return (hits if score_threshold is None else hits.at_least(score_threshold))[0]

    def _example_texts(self, index, examples: list[str]) -> tuple[list, set[str]]:
        """The texts of the documents ``examples`` name as the document side reads them (BM25F: its weighted
        fields), and the ids a recommendation leaves out (:meth:`_example_documents`)."""
        documents, excluded = self._example_documents(index, examples)
        return [self.document_side.text(document) for document in documents], excluded

    def _example_documents(self, index, examples: list[str]) -> tuple[list[Document], set[str]]:
        """The stored documents ``examples`` name (a document of an index of passages: its passages joined), and
        the ids a recommendation leaves out (theirs, and their passages'); an id of none is an error."""
        if not index.stores_texts:
            raise SemiretError(f"{self.index.path} keeps no stored documents (built with --no-store-texts): "
                               "recommend searches with the examples' texts")
        stored = index.get_documents(examples)
        documents, excluded = [], set(stored)
        for doc_id in examples:
            if doc_id in stored:
                documents.append(stored[doc_id])
                continue
            passages = passage_ids(index, [doc_id]) if self.chunking is not None else []
            if not passages:
                raise UnknownDocumentError(f"no document {doc_id!r} in {self.index.path} to recommend from", doc_id)
            documents.append(next(iter(joined_documents(index, {PARENT_FIELD: [doc_id]}))))
            excluded.update(passages)
        return documents, excluded

    def _search_examples(self, texts: list, k: int, n_threads: int, filter: dict | None) -> SearchHits:
        """:meth:`recommend`'s searches: each example's text (:meth:`_example_texts`) searched as a query, the best
        ``k`` passing ``filter``."""
        return self.search(texts, k=k, n_threads=n_threads, filter=filter)

    @property
    def _sums_term_weights(self) -> bool:
        """Whether a document's score is the sum of its weights of the query's terms, as the index stores them."""
        return self.query_side.sums_term_weights and isinstance(self.index, InvertedIndex)

    def analyze(self, text: str, side: str = "query") -> list[TermWeight]:
        """The terms ``text`` becomes, heaviest first (OpenSearch's ``_analyze``, Pyserini's ``analyze``): as a
        query (``side="query"``: each term's weight as the search scores it, BM25's count x IDF, RM3's expansion
        included; words the index has never seen with weight 0), or as a document (``side="document"``: its values
        as the index would store them, a model's expansion, BM25's saturated term frequencies at the index's
        average length; nothing is added; in an index of passages, one passage's text). For the retrievers that sum
        term weights (those :meth:`explain` takes); each term with its document frequency in the index. With RM3
        the query is expanded from the whole index, as an unfiltered search expands it."""
        if not isinstance(text, str):
            raise SemiretError(f"analyze takes one text (a string), got {type(text).__name__}")
        if side not in ("query", "document"):
            raise SemiretError(f"side must be 'query' or 'document', got {side!r}")
        self._check_term_weights("analyze")
        view = self.pinned()
        index = view.index
        if side == "query":
            query = view.query_side.scored_queries(index, [text])[0]
            terms, weights, frequencies = index.scored_query(query)
            # the index's terms a search drops for weighing 0 (an IDF of 0: a word deleted everywhere, Robertson's
            # term in over half the documents), listed as they weigh
            known = len(index.vocab) if index.vocab is not None else index_vocabulary(index).size
            weightless = np.array(sorted({t for t, w in zip(np.asarray(query.terms).tolist(),
                                                             np.asarray(query.weights).tolist())
                                          if w > 0 and 0 <= t < known} - set(terms.tolist())), np.int64)
            found = _term_weights(_term_names(index, terms.tolist()), weights, frequencies) + _term_weights(
                _term_names(index, weightless.tolist()), np.zeros(len(weightless)), index.frequencies_of(weightless))
            return heaviest_first(found + [TermWeight(term, 0.0, 0) for term in view.query_side.unknown_terms(text)])
        document = Document("", text)
        if self.chunking is not None:
            passages = self.chunking.passages(document)
            if len(passages) > 1:
                raise SemiretError(f"{self.index.path} holds {self.chunking.describe()}, each indexed "
                                   f"alone, and this text makes {len(passages)}: analyze one passage at a time")
        postings, names = view.document_side.analyze(document)
        terms = np.asarray(postings.terms)
        return heaviest_first(_term_weights(names or _term_names(index, terms.tolist()),
                                             index.stored_weights(postings.values, int(postings.lengths[0])),
                                             index.frequencies_of(terms)))

    def document_terms(self, doc_id: str) -> list[TermWeight]:
        """A stored document's terms and their values as its postings hold them, heaviest first (Lucene's term
        vectors, Pyserini's document vector; BM25: saturated term frequencies), each with its document frequency;
        for the retrievers :meth:`analyze` takes."""
        self._check_term_weights("read from a stored document")
        doc_id = _document_id(doc_id)
        self._refresh()
        found = self.index.document_terms(doc_id)
        if found is None:
            raise self._unknown(doc_id)
        terms, values, frequencies = found
        return heaviest_first(_term_weights(_term_names(self.index, terms.tolist()), values, frequencies))

    def _unknown(self, doc_id: str) -> UnknownDocumentError:
        """The error for an id the index does not hold; over an index of passages, one of a document indexed as
        passages names them (what explain, highlight and context take)."""
        passages = sorted(passage_ids(self.index, [doc_id])) if self.chunking is not None else []
        held = ""
        if passages:
            held = f": it is indexed as passages, {', '.join(passages[:3])}{', ...' if len(passages) > 3 else ''}"
        return UnknownDocumentError(f"no document {doc_id!r} in {self.index.path}{held}", doc_id, held)

    def _check_term_weights(self, action: str) -> None:
        if not self._sums_term_weights:
            raise SemiretError(f"retriever {self.name!r} does not score documents by summing term weights (or not "
                               f"with these options), so there are no terms to {action}")

    def check_explainable(self) -> None:
        """An error unless :meth:`explain` can take this retriever's scores apart (with these options)."""
        self._check_term_weights("explain its scores by")

    def explain(self, query: str, doc_id: str, filter: dict | None = None, operators: bool = False) -> Explanation:
        """How ``doc_id``'s score for ``query`` adds up, term by term (Lucene's and OpenSearch's explain): for the
        retrievers that score a document by summing its weights of the query's terms (``bm25``, ``bot``, ``idf``,
        ``splade``, ``inference-free``, ``sidr-beta``, ``sidr-full``, ``nail-sparse``), each query term's weight, the
        document's, and their product; the score is what an exact search gives the document (two-phase search
        approximates it). ``filter``: the query read as a search with that filter reads it (a misspelled word is
        corrected, a synonym added, by the words of the documents it shows); ``operators``: as a search with
        ``operators`` reads it (its scored words, against the documents that hold what it requires and not what it
        excludes). Whether that search finds the document at all is said too (``matched``, as OpenSearch's explain
        says it) and, where it does not, why (``unmatched``: the filter, the operators, or no term scoring it). Over
        an index of sparse vectors (retriever ``sparse-vectors``) ``query`` may be a sparse query vector, ``{term:
        weight}``."""
        query = self._one_query(query, "explain")
        if operators and not isinstance(query, str):
            raise SemiretError("a query vector has no words: its operators are not read (operators)")
        self.check_explainable()
        doc_id = _document_id(doc_id)
        view = self.pinned()  # the query read, the document's weights and what it passes from one commit
        reading = view._reading(query_filter(query, operators, filter))
        explanation = view._explained(scored_text(query, operators, self.query_side), doc_id, reading)
        explanation.unmatched = view._unmatched(query, doc_id, filter, operators, reading, explanation.score)
        return explanation

    def _one_query(self, query, action: str):
        """The one query ``action`` (explain, a count) reads: a text, or over an index of sparse vectors one sparse
        query vector (``{term: weight}``, checked as a search checks it)."""
        if isinstance(query, str):
            return query
        sparse = self.query_side.searches_vectors and self.query_side.vector_kind == "sparse"
        if sparse and isinstance(query, Mapping):
            vectors = query_vectors(query)
            if vectors is not None:
                return vectors[0][0]
        if not sparse and isinstance(query, Mapping):  # a sparse query vector, to a retriever that takes none
            raise SemiretError(f"{action} reads one query text: retriever {self.name!r} takes no sparse query vector "
                               "({term: weight}; an index of the sparse-vectors retriever does)")
        raise SemiretError(f"{action} reads one query text" + (" or one sparse query vector ({term: weight})"
                                                               if sparse else "") + f", got {type(query).__name__}")

    def _reading(self, filter: dict | None):
        """The index a query is read against as a search with ``filter`` reads it (its fuzzy corrections, prefixes'
        words and feedback documents are those of the documents that pass): the index restricted to them."""
        wanted = checked_filter(self.index, filter, "filter on") if filter else None
        return self.index.restricted(wanted) if wanted is not None and hasattr(self.index, "restricted") \
            else self.index

    def _unmatched(self, query: str, doc_id: str, filter: dict | None, operators: bool, reading,
                   score: float) -> str | None:
        """Why a search of ``query`` with ``filter`` and ``operators`` would not find the live document ``doc_id``
        (an :data:`~semiret.types.UNMATCHED_REASONS` key; None: it would), ``reading`` the index restricted to what
        the search passes and ``score`` the document's."""
        if doc_id not in reading:
            return "filter" if filter and doc_id not in self._reading(filter) else "operators"
        if score > 0:
            return None
        parsed = parse_operators(query) if operators else None
        if parsed is not None and parsed.required and plain_words(parsed.text) and self._sums_term_weights:
            return None  # those holding what it requires follow its scored hits at 0 (_with_unscored)
        return "no_matching_term"

    def _explained(self, query: str, doc_id: str, reading) -> Explanation:
        """:meth:`explain` of the query as read against ``reading`` (:meth:`_reading`)."""
        doc_id = _document_id(doc_id)
        found = self.index.explain(self.query_side.scored_queries(reading, [query])[0], doc_id)
        if found is None:
            raise self._unknown(doc_id)
        terms, query_weights, document_weights = found
        names = _term_names(self.index, terms.tolist())
        parts = [TermContribution(name, float(q), float(d), float(q) * float(d))
                 for name, q, d in zip(names, query_weights.tolist(), document_weights.tolist())]
        parts.sort(key=lambda part: (-part.contribution, -part.query_weight, part.term))
        return Explanation(doc_id, float(np.sum(query_weights * document_weights, dtype=np.float32)), parts)

    def highlight(self, query: str, doc_id: str, fragment_words: int = highlighting.FRAGMENT_WORDS,
                  fragments: int = highlighting.FRAGMENTS, tags: Sequence[str] | None = highlighting.TAGS,
                  encoder: str = "default", filter: dict | None = None) -> list:
        """The stored document's passages where ``query``'s matches cluster, the matching words between ``tags``
        (OpenSearch's highlight; :mod:`semiret.search.highlight`): at most ``fragments`` windows of
        ``fragment_words`` words, in the document's order; none when no word matches. ``encoder="html"`` escapes
        the document's text (not the tags) for a page to show as HTML. ``tags=None``: each fragment as
        ``(text, matched)`` pieces, for a display of its own. ``filter``: the query read as a search with that
        filter reads it (as :meth:`explain`'s: a fuzzy correction made among the documents that pass is marked).
        Over an index of BM25 over weighted fields (``text_fields``, a hybrid's BM25 part's too), the fields its BM25
        reads: the title and text (those read) as ever, a metadata field's fragments beginning with its name
        (``"keywords: <em>statins</em>; lipids"``; a piece ``("keywords: ", False)``), all ranked together
        (:func:`highlight.field_fragment_pieces <semiret.search.highlight.field_fragment_pieces>`)."""
        if not isinstance(query, str):
            raise SemiretError(f"highlight takes one query (a string), got {type(query).__name__}")
        check_count(fragment_words, "fragment_words")
        check_count(fragments, "fragments")
        if tags is not None and (isinstance(tags, str) or not isinstance(tags, Sequence) or len(tags) != 2
                                 or not all(isinstance(tag, str) for tag in tags)):
            raise SemiretError("tags are two strings: the one before a matching word and the one after")
        if encoder not in highlighting.ENCODERS:
            raise SemiretError(f"encoder must be one of {', '.join(highlighting.ENCODERS)}, got {encoder!r}")
        if tags is None and encoder != "default":
            raise SemiretError("an encoder escapes tagged fragments; with tags=None the pieces are the text as stored")
        if not self.index.stores_texts:
            raise SemiretError(f"{self.index.path} keeps no stored documents (built with --no-store-texts): there is "
                               "no text to highlight")
        view = self.pinned()  # the document and its postings from one commit
        document = view.index.get_document(_document_id(doc_id))
        if document is None:
            raise self._unknown(doc_id)
        matches = view._word_matches(query, document.id, view._reading(filter))
        texts = highlighting.field_texts(document, view.document_side.fields)  # (BM25F: the fields it reads)
        if tags is None:
            return highlighting.field_fragment_pieces(texts, matches, fragment_words, fragments)
        return highlighting.field_fragments(texts, matches, fragment_words, fragments, tags, encoder)

    def suggest(self, text: str, k: int = 5, filter: dict | None = None) -> list[Suggestion]:
        """Completions of the word being typed at the end of ``text`` (search as you type's suggestions: OpenSearch's
        completion and term suggesters, Typesense's): the words of the stored titles and texts it begins, the most
        documents holding them first (over BM25 of weighted fields, ``text_fields``: the words of the fields it
        reads), counted among the documents that also hold the earlier words of ``text`` (the
        last :data:`SUGGEST_CONTEXT_WORDS` the index holds; an index of passages counts documents, the words in any
        of their passages), topped up to ``k`` with the commonest among all documents (``in_context`` False), all
        passing ``filter``; each spelt as the documents write it, with ``text`` as typed up to that word. Words are
        matched as full-text filters match them (case-folded, not stemmed; a Han or hiragana character is a word of
        its own, so it completes to itself). ``text`` ending in a space or a mark, or in a word joined to the one
        before (``it's``, ``e.g``): nothing to complete, no suggestions. A segment's first suggestion builds its
        word index (about 0.5-0.8 s for SciFact's 5,183 documents), kept after."""
        if not isinstance(text, str):
            raise SemiretError(f"the text to complete must be a string, got {type(text).__name__}")
        check_count(k, "k")
        self._refresh()
        if not self.index.stores_texts:
            raise SemiretError(f"{self.index.path} keeps no stored documents (built with --no-store-texts), so it has "
                               "no words to suggest")
        if not hasattr(self.index, "word_completions"):
            raise SemiretError(f"{self.index.path}: a Milvus collection keeps no word index to suggest from")
        typed = word_being_typed(text)
        if typed is None:
            return []
        start, fragment = typed
        context = plain_words(text[:start])[-SUGGEST_CONTEXT_WORDS:]
        wanted = checked_filter(self.index, filter, "suggest from")
        unit = (PARENT_FIELD,) if self.chunking is not None else None
        counts, used = self.index.word_completions(fragment, context, wanted, unit)
        ranked = [(word, count, bool(used) or not context) for word, count in _commonest(counts, k)]
        if len(ranked) < k and used:  # topped up from every document
            overall, _ = self.index.word_completions(fragment, [], wanted, unit)
            ranked += [(word, count, False) for word, count in _commonest(overall, len(counts) + k)
                       if word not in counts][:k - len(ranked)]
        typed_word = text[start:]
        found = []
        for word, count, in_context in ranked:
            spelt = self.index.word_spelling(word)
            shown = typed_word + spelt[len(typed_word):] if spelt[:len(typed_word)].casefold() == \
                typed_word.casefold() else spelt  # the letters typed kept as typed
            found.append(Suggestion(text[:start] + shown, spelt, count, in_context))
        return found

    def context(self, doc_id: str, window: int = 1) -> str:
        """A hit's text with what surrounds it, for a RAG prompt (LlamaIndex's sentence window): in an index of
        passages (``--chunk-words``), the passage and up to ``window`` passages of its document on each side, joined
        without their overlaps, after the document's title; a whole document, or a passage that is its document's
        only one: its stored text (title included)."""
        if isinstance(window, bool) or not isinstance(window, numbers.Integral) or window < 0:
            raise SemiretError(f"the context window must be a whole number of passages, at least 0, got {window!r}")
        if not self.index.stores_texts:
            raise SemiretError(f"{self.index.path} keeps no stored documents (built with --no-store-texts): there is "
                               "no text to give as context")
        view = self.pinned()
        doc_id = _document_id(doc_id)
        document = view.index.get_document(doc_id)
        if document is None:
            raise self._unknown(doc_id)
        metadata = document.metadata or {}
        if self.chunking is None or PARENT_FIELD not in metadata or document.id == metadata[PARENT_FIELD]:
            return document.full_text
        parent, chunk = metadata[PARENT_FIELD], metadata[CHUNK_FIELD]
        # the document's live passages by their numbers (never ids that only look like its passages')
        chunk_of = field_values(view.index, passage_ids(view.index, [parent]), (CHUNK_FIELD,))
        near = sorted((number, passage) for passage, number in chunk_of.items()
                      if isinstance(number, int) and abs(number - chunk) <= window)
        stored = view.index.get_documents([passage for _, passage in near])
        return self.chunking.joined([stored[passage] for _, passage in near if passage in stored]).full_text

    def _word_matches(self, query: str, doc_id: str, reading=None):
        """What :func:`highlight.fragment_pieces <semiret.search.highlight.fragment_pieces>` asks: for a document's
        words, the query terms each stands for. Retrievers that sum term weights: the terms that the query (read
        against ``reading``, :meth:`_reading`; default the index) and the document both hold with a weight, of those a
        word is made of (the index's analyzer for words, else its tokenizer alone: no model runs); others: the
        word's English stem where the query has it."""
        if self._sums_term_weights:
            terms, query_weights, document_weights = self.index.explain(
                self.query_side.matched_query(self.index if reading is None else reading, query), doc_id)
            held = set(terms[(query_weights > 0) & (document_weights > 0)].tolist())
            if self.index.vocab is not None:  # words (BM25): the query side's own analyzer and dictionary
                word_terms = self.query_side.word_terms
            else:
                vocabulary = index_vocabulary(self.index)

                def word_terms(words: list[str]) -> list:
                    return [vocabulary.encode(word) for word in words]

            def matches(words: list[str]) -> list[frozenset]:
                if not held:
                    return [frozenset()] * len(words)
                distinct = list(dict.fromkeys(words))
                found = {word: frozenset(t for t in ids if t in held)
                         for word, ids in zip(distinct, word_terms(distinct))}
                return [found[word] for word in words]

            return matches
        stems = set(highlighting.STEMMER(query))

        def by_stem(words: list[str]) -> list[frozenset]:
            return [frozenset(t for t in highlighting.STEMMER(word) if t in stems) for word in words]

        return by_stem

    def _search_with_operators(self, texts: list[str], filter: dict | None, **options) -> SearchHits:
        """:meth:`search` of queries read for their operators (:mod:`semiret.search.operators`): queries that require
        and exclude the same words searched in one batch with their filter, all batches from one commit. A query
        left with no word to score (``-mouse``) has no hits. Past the documents its words score, a query that
        requires words has those that hold them and score nothing (:meth:`_with_unscored`)."""
        parsed = [parse_operators(text) for text in texts]
        batches: dict[str, list[int]] = {}
        for position, query in enumerate(parsed):
            if plain_words(query.text):
                batches.setdefault(query.filter_key(filter), []).append(position)
        requiring = any(parsed[positions[0]].required for positions in batches.values())
        searcher = self.pinned() if len(batches) > 1 or requiring else self
        parts = [(positions, searcher.search([parsed[p].scored(self.query_side) for p in positions],
                                             filter=parsed[positions[0]].filter(filter), **options))
                 for positions in batches.values()]
        threshold = options["score_threshold"]
        if requiring and self._sums_term_weights and options["group_by"] is None and options["diversity"] is None and (
                threshold is None or threshold <= 0):  # (a document no term of the query reaches scores 0)
            parts = [(positions, self._with_unscored(searcher, found, parsed[positions[0]].filter(filter),
                                                     options["k"]) if parsed[positions[0]].required else found)
                     for positions, found in parts]
        if not parts:  # nothing to search: the options and filter are checked all the same
            parts = [((), searcher.search([], filter=filter, **options))]
        hits = SearchHits.gathered(parts, len(texts), grouped=options["group_by"] is not None)
        hits.lookup = searcher.index.get_document
        return hits

    @staticmethod
    def _with_unscored(searcher: "Retriever", found: SearchHits, spec: dict, k: int) -> SearchHits:
        """``found`` with, after each query's scored hits, the documents that pass ``spec`` (what the queries
        require, and the search's filter) and that its words do not score, at 0 in id order, up to ``k`` (for
        retrievers that sum term weights, where a document no term reaches scores 0): a required word's documents
        are all hits, as a required clause's match in OpenSearch, also where the retriever scores nothing of it
        (``+stat*`` alone: every document holding a word it begins, not only those holding "stat"; ``+5``, a word
        BM25's analyzer drops)."""
        if all(len(hit_ids) >= k for hit_ids in found.ids):
            return found
        passing = searcher.index.sorted_ids(checked_filter(searcher.index, spec, "filter on"))
        ids, scores = [], []
        for hit_ids, hit_scores in zip(found.ids, found.scores):
            if len(hit_ids) < k:
                scored = set(hit_ids)
                unscored = list(itertools.islice((d for d in passing if d not in scored), k - len(hit_ids)))
                hit_ids, hit_scores = [*hit_ids, *unscored], [*hit_scores, *[0.0] * len(unscored)]
            ids.append(hit_ids)
            scores.append(hit_scores)
        return SearchHits(ids, scores, found.postings_visited, diversified=found.diversified)

    def _search_deeper(self, index, texts: list[str], k: int, n_threads: int, wanted: MetadataFilter | None,
                       grouping: Grouping | None) -> SearchHits:
        """Hits chosen by their stored metadata: those passing ``wanted`` (an index that cannot hide documents from
        a search: Milvus, searched narrowed by the part of the filter it tests, then post-filtered), then ``k``
        groups of ``grouping``, or the first ``k``. Each query is
        searched deeper (x4, from :data:`FILTER_DEPTH`) until it has them, its ranking ends or it reaches every
        document (exact for exhaustive retrievers), or the index's deepest search (Milvus's 16,384 hits)."""
        if wanted is not None and hasattr(index, "narrowed"):  # Milvus: searched for what it can test, then filtered
            if getattr(getattr(self.query_side, "options", None), "prf_depth", 0):
                raise SemiretError("vector PRF (prf_depth, --prf-depth) with a filter over a Milvus collection: its "
                                   "feedback documents would pass only the part of the filter Milvus tests; search "
                                   "without one of the two")
            index = index.narrowed(wanted)
        passes: dict[str, bool] = {}
        values: dict = {}
        fields = text_condition_fields(index)  # ($text: the words its segments' word index would read)
        counts = index.field_counts(grouping.path) if grouping is not None and wanted is None and hasattr(
            index, "field_counts") else None

        def read(found: SearchHits) -> None:  # the new candidates' metadata, in as few requests as the index allows
            unread = [d for d in dict.fromkeys(d for hit_ids in found.ids for d in hit_ids) if d not in passes]
            located = found.located(index, unread) if wanted is None and hasattr(found, "located") else None
            if located is not None:  # read where the search found them: no id looked up again
                passes.update((d, True) for d in unread)
                values.update(HitMetadata(located).values([grouping.path])[grouping.path])
            elif wanted is not None and wanted.reads_only_ids and grouping is None:  # ($id: told by the ids, no
                passes.update((d, wanted.matches(None, Document(d, ""))) for d in unread)  # stored document read)
            elif wanted is not None:
                documents = index.get_documents(unread)
                passes.update((d, d in documents and wanted.matches(documents[d].metadata, documents[d], fields))
                              for d in unread)
                if grouping is not None:
                    values.update((d, field_value(documents[d].metadata, grouping.path)) for d in unread
                                  if d in documents)
            else:
                passes.update((d, True) for d in unread)
                values.update(field_values(index, unread, grouping.path))

        def chosen(hit_ids: list[str], hit_scores: list[float]) -> tuple[list, list, list | None, bool]:
            if wanted is not None:
                kept = [(d, s) for d, s in zip(hit_ids, hit_scores) if passes[d]]
                hit_ids, hit_scores = [d for d, _ in kept], [s for _, s in kept]
            if grouping is not None:
                return grouping.pick(hit_ids, hit_scores, values, k, counts)
            return hit_ids[:k], hit_scores[:k], None, len(hit_ids) >= k

        total = min(index.n_docs, getattr(index, "max_top_k", index.n_docs))  # deeper than Milvus's limit is not to be had
        ids: list[list[str]] = [[] for _ in texts]
        scores: list[list[float]] = [[] for _ in texts]
        groups: list[list] = [[] for _ in texts]
        pending, depth = list(range(len(texts))), min(max(4 * k, FILTER_DEPTH), max(total, 1))
        while pending:
            found = self.query_side.search(index, [texts[i] for i in pending], depth, n_threads)
            unfinished = []
            read(found)
            for i, hit_ids, hit_scores in zip(pending, found.ids, found.scores):
                ids[i], scores[i], groups[i], enough = chosen(list(hit_ids), list(hit_scores))
                if not enough and len(hit_ids) >= depth and depth < total:
                    unfinished.append(i)
            pending, depth = unfinished, min(depth * 4, total)
        return SearchHits(ids, scores, groups=groups if grouping is not None else None)


def _stored_form(document: Document, chunking: Chunking | None) -> str:
    """The records an index would store of ``document`` (its passages', split by ``chunking``), as JSON reads them
    back, in canonical JSON (:func:`_canonical`): what :meth:`Retriever.sync` compares with the stored ones."""
    parts = chunking.split([document]) if chunking is not None else [document]
    return _canonical([Document.from_json(part.to_json()) for part in parts])


def _canonical(documents: list[Document]) -> str:
    """Documents' records as one JSON text, keys sorted: equal exactly when the records are, values' types included
    (``true`` is not ``1``, nor ``1`` ``1.0``, as filters tell them apart; Python's ``==`` does not)."""
    return json.dumps([document.to_record() for document in documents], sort_keys=True, ensure_ascii=False)


def _then(items: Iterable, action) -> Iterator:
    """``items``, then ``action()`` once they are all given (before the consumer's next step: its commit)."""
    yield from items
    action()


def _documents(documents, call: str, fields: CorpusFields | None = None, keep: str = "") -> Iterable[Document]:
    """The documents given to ``build`` or ``add``: :class:`Document` objects, or dicts read as a corpus file's
    lines are, with ``fields`` (``{"_id": ..., "text": ...}``, Pyserini's ``id``/``contents``, ...; the other fields
    of the first left out, named in a warning where ``keep`` says how to keep them), or BEIR's corpus dict
    (``{id: {"title", "text"}}``); one document alone, or an item of another type, is a clear error rather than an
    ``AttributeError`` from the encoder."""
    if isinstance(documents, PurePath) or (isinstance(documents, str) and documents.lower().endswith(
            (*FILE_SUFFIXES, ".gz"))):
        raise SemiretError(f"{call} takes documents, not a file's name: read {str(documents)!r} with "
                           f"semiret.data.iter_corpus (JSONL, TSV or CSV, gzipped or not): {call}(iter_corpus(path), ...)")
    if isinstance(documents, dict) and documents and all(isinstance(value, dict) for value in documents.values()):
        # BEIR's corpus ({id: {"title", "text"}}, GenericDataLoader's): each value the document of its key's id
        named = fields.id_field if fields is not None and fields.id_field else "_id"  # (the field the id is read from)
        return as_documents(({**record, named: doc_id} for doc_id, record in documents.items()), fields, call, keep)
    if isinstance(documents, dict) and documents and all(isinstance(value, str) for value in documents.values()) \
            and not set(documents) & {*DOCUMENT_ID_FIELDS, *TEXT_FIELDS}:  # (not one document's fields)
        raise SemiretError(f"{call} takes a list of documents, got a dict of texts: [Document(doc_id, text) for "
                           "doc_id, text in texts.items()]")
    if isinstance(documents, (Document, dict, str, bytes)):
        raise SemiretError(f"{call} takes a list of documents, got a single {type(documents).__name__} "
                           "(one document: [document])")
    return as_documents(documents, fields, call, keep)


def index_vocabulary(index) -> WordPieceVocabulary:
    """The token vocabulary an index was built over: its WordPiece analyzer, or the tokenizer of the encoder
    that made it (learned sparse indexes)."""
    config = index.meta["analyzer"]
    if config.get("type") == "wordpiece":
        return WordPieceVocabulary(config["tokenizer"], max_length=config["max_length"], min_id=config["min_id"])
    if config.get("type") == "encoder":
        return WordPieceVocabulary(document_tokenizer(located(config["model"])))
    raise SemiretError(f"{index.path} was not built over a token vocabulary (its analyzer: {config.get('type')!r})")


def _term_names(index, term_ids: list[int]) -> list[str]:
    """The words or tokens of an inverted index's term ids: its growable word vocabulary (BM25), else the
    tokenizer's vocabulary it was built over."""
    if index.vocab is not None:
        return [index.vocab[t] for t in term_ids]
    vocabulary = index_vocabulary(index)
    return [vocabulary.token(t) for t in term_ids]


def _term_weights(names: list[str], weights: np.ndarray, frequencies: np.ndarray) -> list[TermWeight]:
    return [TermWeight(name, float(weight), int(df))
            for name, weight, df in zip(names, np.asarray(weights).tolist(), np.asarray(frequencies).tolist())]


def heaviest_first(terms: list[TermWeight]) -> list[TermWeight]:
    """Terms by weight, heaviest first (equal weights: by term)."""
    return sorted(terms, key=lambda term: (-term.weight, term.term))


def check_count(value, name: str) -> None:
    """``value`` is a whole number >= 1 (an int, numpy's too; not a bool, a float or a string)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise SemiretError(f"{name} must be a whole number, got {value!r}")
    if value < 1:
        raise SemiretError(f"{name} must be at least 1, got {value}")


def _check_threshold(score_threshold) -> None:
    if score_threshold is None:
        return
    if isinstance(score_threshold, bool) or not isinstance(score_threshold, numbers.Real) or not math.isfinite(
            score_threshold):  # (numpy's numbers too: a threshold read off a hit's score)
        raise SemiretError(f"score_threshold must be a finite number, got {score_threshold!r}")


def _ids(doc_ids, role: str) -> list[str]:
    """A list of document ids given to ``recommend`` (a single string is refused: it would read as its letters)."""
    if isinstance(doc_ids, str):
        raise SemiretError(f"{role} takes a list of ids, got the string {doc_ids!r} (one id: [{doc_ids!r}])")
    return [_document_id(doc_id) for doc_id in doc_ids]


def _document_id(doc_id) -> str:
    """An id given to ``delete``: a string, or an integer read as its string (as corpus files' ids are)."""
    if isinstance(doc_id, int) and not isinstance(doc_id, bool):
        return str(doc_id)
    if not isinstance(doc_id, str):
        raise SemiretError(f"document ids are strings, got {type(doc_id).__name__} {doc_id!r}")
    return doc_id


FILTER_DEPTH = 100
"""Hits a post-filtered search reads first (at least 4 k); deeper by 4x while too few pass."""

RETRIEVERS: dict[str, type[Retriever]] = {}


def register_retriever(cls: type[Retriever]) -> type[Retriever]:
    """Class decorator: make a retriever known by its ``name`` (CLI, evaluation, :func:`open_retriever`)."""
    if cls.name in RETRIEVERS and RETRIEVERS[cls.name] is not cls:
        raise SemiretError(f"two retrievers are named {cls.name!r}")
    RETRIEVERS[cls.name] = cls
    return cls


def retriever_class(name: str) -> type[Retriever]:
    try:
        return RETRIEVERS[name]
    except KeyError:
        raise SemiretError(f"unknown retriever {name!r} (known: {', '.join(RETRIEVERS)})") from None


def _builder_of(index, default: type[Retriever]) -> type[Retriever]:
    """The retriever that built ``index`` (its document side adds documents to it), else ``default``."""
    return RETRIEVERS.get(index.meta.get("retriever", ""), default)


def _reopened(name: str, path: str, options: dict) -> Retriever:
    """A pickled retriever, opened again (:meth:`Retriever.__reduce__`)."""
    return retriever_class(name).open(path, **options)


SUGGEST_CONTEXT_WORDS = 8
"""The earlier words of a text that a suggestion counts its completions beside (the last ones typed)."""


def _commonest(counts: dict[str, int], k: int) -> list[tuple[str, int]]:
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:k]


def open_retriever(path: str | Path, name: str | None = None, backend: "str | MilvusBackend | None" = None,
                   **options) -> Retriever:
    """Open an index directory (or the collection ``path`` of a ``backend``) with the retriever it was built for,
    or with ``name``."""
    index = open_index_at(path, backend)
    recorded = index.meta.get("retriever", "")
    if name is None and recorded and recorded not in RETRIEVERS:
        raise SemiretError(f"{path} was built by the retriever {recorded!r}, which this process has not registered: "
                           f"import the module that defines it first (known: {', '.join(RETRIEVERS)})")
    return retriever_class(name or recorded).from_index(index, **options)


def resolve_backend(backend: "str | MilvusBackend | None") -> "MilvusBackend | None":
    """None (semiret's own index, the default), or the Milvus backend of a ``milvus:URI`` spec."""
    if backend is None or not isinstance(backend, str):
        return backend
    from semiret.indexes.milvus import MilvusBackend

    return MilvusBackend.parse(backend)


def open_index_at(path: str | Path, backend: "str | MilvusBackend | None" = None):
    """The index directory ``path``, or the collection ``path`` of a ``backend``."""
    store = resolve_backend(backend)
    return store.open(path) if store is not None else open_index(path)
