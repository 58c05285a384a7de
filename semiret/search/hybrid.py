"""``hybrid``: BM25 fused with a neural retriever, what practitioners reach for when a model is out of its
domain. Both indexes live in one composite index directory (:class:`~semiret.indexes.composite.CompositeIndex`)
and change together. Each query is scored by both and fused, with a configurable weight: each part's scores
divided by the query's score bound there, summed over every document in one pass over both parts' postings
(sparse neural parts), or the two rankings fused (min-max normalised scores, or reciprocal rank fusion).
"""

from __future__ import annotations

import copy
import logging
import math
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from semiret.compiled import kernel
from semiret.errors import SemiretError, UnknownDocumentError
from semiret.options import local_field
from semiret.indexes import open_index
from semiret.indexes.composite import CompositeIndex
from semiret.indexes.inverted import InvertedIndex, search_normalised_sum
from semiret.indexes.segments import copy_index_files
from semiret.search.fusion import RRF_K, SCORE_SHARES, reciprocal_ranks
from semiret.search.retrievers import (
    DOCUMENT_READING,
    RETRIEVERS,
    DocumentSide,
    QuerySide,
    Retriever,
    heaviest_first,
    register_retriever,
    retriever_class,
)
from semiret.text import languages
from semiret.text.bm25 import BM25_PARAMETER_NAMES, BM25Parameters
from semiret.text.fields import TextFields
from semiret.types import Explanation, SearchHits, TermContribution, TermWeight

log = logging.getLogger(__name__)

LEXICAL, NEURAL = "lexical", "neural"
FUSIONS = ("bound", "score", "rrf", "zscore", "dbsf")


@dataclass
class HybridDocumentOptions:
    neural: str = "inference-free"
    """The retriever fused with BM25 (any registered one: inference-free, dense, splade, sidr-full, ...)."""
    model: str | None = None
    """Model of the neural retriever (default: its own default)."""
    language: str = "english"
    """Language of the documents for the BM25 part (bm25's ``language``: its stemmer and stopwords)."""
    k1: float = 1.5
    """The BM25 part's k1 (bm25's)."""
    b: float = 0.75
    """The BM25 part's b (bm25's)."""
    variant: str = "lucene"
    """The BM25 part's variant (bm25's: lucene, robertson, atire, bm25l, bm25+)."""
    delta: float = 0.5
    """The BM25 part's delta (bm25's, for BM25L and BM25+)."""
    text_fields: str | None = None
    """The fields the BM25 part reads and their weights (bm25's: 'title^2,text', BM25F)."""

    def bm25_options(self) -> dict:
        """The options of the BM25 part."""
        return {"language": self.language, "k1": self.k1, "b": self.b, "variant": self.variant, "delta": self.delta,
                "text_fields": self.text_fields}


class HybridDocuments(DocumentSide):
    """Each document into a BM25 index and into the neural retriever's index, under one directory."""

    Options = HybridDocumentOptions
    index_kind = "hybrid"
    index_class = CompositeIndex
    batch_size = 1024

    def __init__(self, sides: dict[str, tuple[str, DocumentSide]]):
        self.sides = sides  # part -> (retriever name, its document side)

    @classmethod
    def create(cls, options: HybridDocumentOptions):
        neural = retriever_class(options.neural)
        _check_fusable(neural)
        neural_fields = {f.name for f in fields(neural.documents.Options)}
        if options.model is not None and "model" not in neural_fields:
            raise SemiretError(f"retriever {options.neural!r} takes no model")
        neural.check_model(options.model)
        neural_options = neural.documents.Options(**({"model": options.model} if options.model else {}))
        bm25 = retriever_class("bm25")
        return cls({LEXICAL: (bm25.name, bm25.documents.create(bm25.documents.Options(**options.bm25_options()))),
                    NEURAL: (neural.name, neural.documents.create(neural_options))})

    @classmethod
    def from_index(cls, index: CompositeIndex):
        return cls({name: (part.meta["retriever"], retriever_class(part.meta["retriever"]).documents.from_index(part))
                    for name, part in index.parts.items()})

    @property
    def fields(self):
        """The fields its BM25 part reads (BM25F's ``text_fields``; None: the title and text)."""
        return self.sides[LEXICAL][1].fields

    def prepare(self, documents):
        for _, side in self.sides.values():
            side.prepare(documents)

    def check_documents(self, documents, adding: bool = False):
        for _, side in self.sides.values():
            side.check_documents(documents, adding)

    def encode(self, documents):
        return {name: side.encode(documents) for name, (_, side) in self.sides.items()}

    def index_config(self) -> dict:
        parts = {}
        for name, (retriever, side) in self.sides.items():
            parts[name] = {"index_class": side.index_class, "kind": side.index_kind, "retriever": retriever,
                           **side.index_config()}
            if retriever_class(retriever).queries.reads_stored_texts:
                parts[name]["store_texts"] = True  # its re-ranking embeds the candidates' texts from its own part
        return {"parts": parts}


@dataclass
class HybridQueryOptions:
    fusion: str | None = None
    """How the two parts' scores combine: 'bound' (each part's score divided by the query's score bound there,
    the largest score any document can get, so both lie in [0, 1]; then weighted and summed over every document,
    both parts' postings added in one pass: for parts that search postings, BM25 with inference-free, SPLADE,
    SiDR or NAIL's sparse index), 'score' (each ranking's scores min-max normalised over its top
    ``fusion_depth``, then weighted and summed; 'zscore' and 'dbsf' normalise them as OpenSearch's z-scores and
    Qdrant's distribution-based score fusion) or 'rrf' (reciprocal rank fusion). Default: 'bound' where both
    parts search postings (level with 'score' on climate-fever's training queries, at about half the time:
    docs/results.md, "`hybrid` in one pass"), else 'score' (it beat RRF there with all six neural
    parts tried: "The hybrid's fusion")."""
    weight: float = 0.5
    """Share of BM25 in the fused score, in [0, 1] (the neural retriever gets the rest)."""
    rrf_k: int = RRF_K
    """RRF's rank offset k: 1 / (k + rank)."""
    fusion_depth: int = 100
    """Documents taken from each ranking before fusing ('score' and 'rrf'), whatever ``k``: every page of a ranking is
    cut from the same fusion (OpenSearch's ``pagination_depth``; a deeper fusion for a later page normalised or ranked
    a longer list, and pages repeated and skipped hits). The hits found are at most those of both parts' best
    ``fusion_depth``: raise it to search deeper."""
    fuzzy: bool = False
    """The BM25 part matches misspelled query words to the index's (bm25's ``fuzzy``)."""
    prefix: bool = False
    """The BM25 part matches the words the query's last word begins, as it is typed (bm25's ``prefix``)."""
    synonyms: str | None = local_field(names=("none",))
    """A synonyms file instead of the index's own rules, or 'none' (bm25's ``synonyms``; the neural part's too where
    it takes them: inference-free)."""

    def __post_init__(self) -> None:
        if self.fusion is not None and self.fusion not in FUSIONS:
            raise SemiretError(f"fusion (--fusion) must be one of {', '.join(FUSIONS)}, not {self.fusion!r}")
        if not (math.isfinite(self.weight) and 0.0 <= self.weight <= 1.0):
            raise SemiretError(f"the BM25 weight must be between 0 and 1 (the neural retriever gets 1 - weight), "
                               f"got {self.weight}")
        if self.rrf_k < 0:
            raise SemiretError(f"rrf_k (--rrf-k) must be at least 0, got {self.rrf_k}")
        if self.fusion_depth < 1:
            raise SemiretError(f"fusion_depth (--fusion-depth) must be at least 1, got {self.fusion_depth}")


class PartsSynonyms:
    """A hybrid's synonym rules as each of its parts that takes them reads them (each from its own part of the
    index, which holds them all): checked, compiled and ready in every one; the BM25 part's answers stand for
    them."""

    def __init__(self, readers: dict):
        self.readers = readers  # part name -> its query side's QuerySynonyms

    def compile(self, lines: list[str], name: str = "synonyms"):
        compiled = {part: reader.compile(lines, name) for part, reader in self.readers.items()}
        return compiled[LEXICAL]

    def of(self, index):
        compiled = {part: reader.of(index.parts[part]) for part, reader in self.readers.items()}
        return compiled[LEXICAL]

    def ready(self, index) -> bool:
        return all(reader.ready(index.parts[part]) for part, reader in self.readers.items())


class HybridQueries(QuerySide):
    """Both parts' postings in one pass ('bound' fusion), or each part searched by its own retriever, then the
    rankings fused: one part after the other, as BM25 costs a tenth of a millisecond, less than handing a search
    to a thread (bench/hybrid_latency.py)."""

    Options = HybridQueryOptions

    def __init__(self, parts: dict[str, Retriever], options: HybridQueryOptions):
        self.parts, self.options = parts, options  # options checked when made (HybridQueryOptions.__post_init__)
        in_one_pass = all(part.query_side.sums_term_weights and isinstance(part.index, InvertedIndex)
                          for part in parts.values())  # BM25 with fuzzy too: its corrected query sums postings
        self.fusion = options.fusion or ("bound" if in_one_pass else "score")
        if self.fusion == "bound" and not in_one_pass:
            sparse = sorted(name for name, cls in RETRIEVERS.items() if cls.queries.searches_postings and name != "bm25")
            raise SemiretError(f"fusion 'bound' needs a neural part that searches postings ({', '.join(sparse)}); "
                               f"this hybrid's is {type(parts[NEURAL]).name!r}: use --fusion score or rrf")
        if self.fusion != "rrf" and options.rrf_k != HybridQueryOptions.rrf_k:
            raise SemiretError(f"rrf_k (--rrf-k) applies to fusion 'rrf' only; this hybrid fuses by {self.fusion!r}")
        self._rrf = np.empty(0)  # 1 / (rrf_k + rank) for ranks 1, 2, ...: made once for the deepest ranking seen
        self._said_shallow = False

    @property
    def completes_last_word(self) -> bool:
        """Whether a part reads a query's last word as still being typed (its BM25's ``prefix``)."""
        return any(getattr(part.query_side, "completes_last_word", False) for part in self.parts.values())

    @classmethod
    def open(cls, index: CompositeIndex, options: HybridQueryOptions, documents):
        # each part's retriever shares the hybrid's document side of that part (BM25's growing vocabulary)
        lexical = {"fuzzy": options.fuzzy, "prefix": options.prefix, "synonyms": options.synonyms}
        parts = {}
        for name, (retriever, side) in documents.sides.items():
            part = retriever_class(retriever)
            takes_synonyms = "synonyms" in {f.name for f in fields(part.queries.Options)}
            given = lexical if name == LEXICAL else {"synonyms": options.synonyms} if takes_synonyms else {}
            parts[name] = part.from_index(index.parts[name], document_side=side, **given)
            parts[name]._follows_commits = False  # the hybrid refreshes its parts, at one change (not one alone)
        return cls(parts, options)

    def synonym_target(self, index):
        """The composite index (its rules set in every part) and a reader of them for every part that takes them
        (a neural part of tokens weighted by IDF, inference-free, expands its queries by them too)."""
        readers = {}
        for name, part in self.parts.items():
            target = part.query_side.synonym_target(index.parts[name])
            if target is not None:
                readers[name] = target[1]
        return index, PartsSynonyms(readers)

    def encode_queries(self, texts):
        """Each query as both parts search it: ``{"lexical": ..., "neural": ...}``."""
        encoded = {name: part.encode_queries(texts) for name, part in self.parts.items()}
        return [{name: queries[i] for name, queries in encoded.items()} for i in range(len(texts))]

    def search(self, index, texts, k, n_threads):
        """The parts of ``index`` searched (the composite index given: a pinned or filtered view reaches every
        part), each by its own query side."""
        return self.search_parts(index, dict.fromkeys(self.parts, texts), k, n_threads)

    def search_parts(self, index, texts: dict[str, list[str]], k: int, n_threads: int) -> SearchHits:
        """:meth:`search`, each part with its own ``texts`` of the same queries (``{"lexical": [...], "neural":
        [...]}``: recommend's examples as each part reads documents)."""
        if self.fusion == "bound":
            return self._search_bounded(index, texts, k, n_threads)
        depth = self.fused_depth(k)
        lexical, neural = (self.parts[name].query_side.search(index.parts[name], texts[name], depth, n_threads)
                           for name in (LEXICAL, NEURAL))
        return self.fuse(lexical, neural, k)

    def fused_depth(self, k: int) -> int:
        """``fusion_depth`` (said once where ``k`` asks for more than each part's best that many may give)."""
        if k > self.options.fusion_depth and not self._said_shallow:
            self._said_shallow = True
            log.warning("hybrid: k = %d is past fusion_depth %d: the hits are those of both parts' best %d fused "
                        "(fusion_depth=%d, --fusion-depth, searches deeper)", k, self.options.fusion_depth,
                        self.options.fusion_depth, k)
        return self.options.fusion_depth

    def _search_bounded(self, index, texts: dict[str, list[str]], k: int, n_threads: int) -> SearchHits:
        """'bound' fusion: both parts' postings (of each one's ``texts``) in one pass; where their segments are not
        aligned (a crash between the parts' commits), each part's best ``fusion_depth`` divided by its bounds, then
        fused."""
        shares = {LEXICAL: self.options.weight, NEURAL: 1.0 - self.options.weight}
        queries = {name: self.parts[name].query_side.scored_queries(index.parts[name], texts[name])
                   for name in (LEXICAL, NEURAL)}
        hits = search_normalised_sum([(index.parts[name], queries[name], shares[name])
                                      for name in (LEXICAL, NEURAL)], k, n_threads)
        if hits is not None:
            return hits
        depth = self.fused_depth(k)
        lexical, neural = (index.parts[name].search(queries[name], k=depth, n_threads=n_threads)
                           for name in (LEXICAL, NEURAL))
        return self.fuse(lexical, neural, k, bounds=[index.parts[name].score_bounds(queries[name])
                                                     for name in (LEXICAL, NEURAL)])

    def fuse(self, lexical: SearchHits, neural: SearchHits, k: int,
             bounds: list[np.ndarray] | None = None) -> SearchHits:
        """Each document's weighted contributions summed over the two rankings, the best ``k`` (equal scores:
        the document met first, BM25's ranking before the neural one's). ``bounds`` (each part's score bound
        per query) are what 'bound' fusion divides by. Rankings that carry id hashes
        (:meth:`~semiret.types.SearchHits.id_keys`: every semiret index) are joined on them, and only the ``k``
        ids shown are decoded; others (Milvus) on their ids."""
        parts = zip((self.options.weight, 1.0 - self.options.weight), (lexical, neural), bounds or (None, None))
        weighted = [(weight, hits, bound) for weight, hits, bound in parts
                    if weight]  # a part weighted 0 adds no documents either
        out_ids, out_scores = [], []
        for query in range(len(lexical)):
            keys = [hits.id_keys(query) for _, hits, _ in weighted]
            if all(key is not None for key in keys):
                ids, scores = self._fuse_keys(weighted, keys, query, k)
            else:
                ids, scores = self._fuse_ids(weighted, query, k)
            out_ids.append(ids)
            out_scores.append(scores)
        return SearchHits(out_ids, out_scores)

    def _fuse_ids(self, weighted: list[tuple], query: int, k: int) -> tuple[list, list]:
        fused: dict[str, float] = {}
        for weight, hits, bound in weighted:
            contributions = self._contributions(hits.scores[query], bound, query).tolist()
            for doc_id, contribution in zip(hits.ids[query], contributions):
                fused[doc_id] = fused.get(doc_id, 0.0) + weight * contribution
        ranked = sorted(fused.items(), key=lambda item: -item[1])[:k]
        return [d for d, _ in ranked], [s for _, s in ranked]

    def _fuse_keys(self, weighted: list[tuple], keys: list[np.ndarray], query: int,
                   k: int) -> tuple[list, list]:
        """:meth:`_fuse_ids` on 64-bit id hashes (the same sums in the same order, so the same scores and ties;
        two ids of one corpus sharing a hash, about n^2 / 2^65 for n documents, would count as one)."""
        joined = np.concatenate(keys) if len(keys) > 1 else keys[0]
        contributions = np.concatenate([weight * self._contributions(hits.scores[query], bound, query)
                                        for weight, hits, bound in weighted])
        positions, scores = fuse_on_keys(joined, contributions, k)
        positions = positions.tolist()
        ids: list = [None] * len(positions)
        start = 0
        for (_, hits, _), part_keys in zip(weighted, keys):  # each part's shown ids decoded in one call
            end = start + len(part_keys)
            rows = [r for r, p in enumerate(positions) if start <= p < end]
            if rows:
                for r, doc_id in zip(rows, hits.ids_at(query, [positions[r] - start for r in rows])):
                    ids[r] = doc_id
            start = end
        return ids, scores.tolist()

    def _contributions(self, scores: list[float], bounds: np.ndarray | None, query: int) -> np.ndarray:
        """Each hit's share before weighting (float64, best first): ``1 / (rrf_k + rank)``, its score divided
        by the query's bound (``bounds`` given: 'bound' fusion), or its normalised score (min-max, z-score, DBSF)."""
        if bounds is not None:
            bound = bounds[query]
            return np.array(scores, np.float64) / bound if bound > 0 else np.zeros(len(scores))
        if self.fusion == "rrf":
            shares = self._rrf  # read once: another thread's search may replace it meanwhile
            if len(shares) < len(scores):
                shares = self._rrf = reciprocal_ranks(len(scores), self.options.rrf_k)
            return shares[: len(scores)]
        return SCORE_SHARES[self.fusion](scores)


@register_retriever
class HybridRetriever(Retriever):
    """BM25 and a neural retriever (``neural``, default ``inference-free``) over one composite index, their
    scores fused: divided by their bounds in one pass, or rankings fused by normalised scores or RRF."""

    name = "hybrid"
    documents = HybridDocuments
    queries = HybridQueries

    def _example_texts(self, index, examples):
        """Each example as each part reads documents (``{"lexical": ..., "neural": ...}``: BM25 its fields as
        weighted, ``text_fields``; the neural part the title and text its encoder embedded), and the ids a
        recommendation leaves out."""
        documents, excluded = self._example_documents(index, examples)
        return [{name: side.text(document) for name, (_, side) in self.document_side.sides.items()}
                for document in documents], excluded

    def _search_examples(self, texts, k, n_threads, filter):
        """Each part searched with its own texts of the examples, the rankings fused as a search's, among the
        documents that pass ``filter``."""
        per_part = {name: [example[name] for example in texts] for name in self.query_side.parts}
        return self.query_side.search_parts(self._reading(filter), per_part, k, n_threads)

    def _explained(self, query: str, doc_id: str, reading) -> Explanation:
        """How the document's fused score adds up ('bound' fusion: ``sum_p share_p x score_p / bound_p``): each
        part's terms (named ``lexical:TERM``, ``neural:TERM``) with their query weights scaled by the part's share
        over its bound for the query, every part read as a search restricted to ``reading`` reads it (fusions of
        rankings, score and rrf, have no such sum: :meth:`check_explainable` refuses them)."""
        shares = {LEXICAL: self.query_side.options.weight, NEURAL: 1.0 - self.query_side.options.weight}
        terms, found = [], False
        for name, part in self.query_side.parts.items():  # (self: a pinned view, every part from one commit)
            part = copy.copy(part)
            part.index = self.index.parts[name]
            try:
                explained = part._explained(query, doc_id, reading.parts[name])
            except UnknownDocumentError:  # in one part only (a crash between the parts' commits): it adds nothing
                continue
            found = True
            # the bound of the query as the part read it (a correction among the documents that pass: its own)
            bound = float(part.index.score_bounds(part.query_side.scored_queries(reading.parts[name], [query]))[0])
            scale = shares[name] / bound if bound > 0 else 0.0
            terms += [TermContribution(f"{name}:{t.term}", t.query_weight * scale, t.document_weight,
                                       t.contribution * scale) for t in explained.terms if scale]
        if not found:
            raise self._unknown(doc_id)
        terms.sort(key=lambda part: (-part.contribution, -part.query_weight, part.term))
        return Explanation(doc_id, float(sum(t.contribution for t in terms)), terms)

    def check_explainable(self) -> None:
        if self.query_side.fusion != "bound":
            sparse = self.query_side.parts[NEURAL]._sums_term_weights
            raise SemiretError(f"this hybrid fuses rankings ({self.query_side.fusion!r}), which no term adds up to: "
                               "explain its BM25 part (-r bm25 over its lexical folder)"
                               + (", or search it with --fusion bound" if sparse else ""))

    def analyze(self, text: str, side: str = "query") -> list[TermWeight]:
        """Each part's terms as that part reads ``text`` (named ``lexical:TERM``, ``neural:TERM``), heaviest first,
        each weighted as its part scores it alone (the two parts' scales differ), not scaled by the fusion; a dense
        part has none."""
        self._refresh()  # every part at one change (a part's own reads leave it to the hybrid)
        return self._terms_of_parts(lambda part: part.analyze(text, side), "analyze")

    def document_terms(self, doc_id: str) -> list[TermWeight]:
        """Each part's postings of the document (named as :meth:`analyze`'s terms)."""
        self._refresh()
        return self._terms_of_parts(lambda part: part.document_terms(doc_id), "read from a stored document", doc_id)

    def _terms_of_parts(self, terms_of, action: str, doc_id: str | None = None) -> list[TermWeight]:
        """``terms_of(part)`` of the parts that sum term weights, each term named after its part; a document in
        one part only (a crash between the parts' commits) is read from that one."""
        found, summing, held = [], False, False
        for name, part in self.query_side.parts.items():
            if not part._sums_term_weights:
                continue
            summing = True
            try:
                found += [TermWeight(f"{name}:{t.term}", t.weight, t.document_frequency) for t in terms_of(part)]
            except UnknownDocumentError:
                continue
            held = True
        if not summing:
            raise SemiretError(f"neither part of this hybrid sums term weights, so there are no terms to {action}")
        if doc_id is not None and not held:
            raise UnknownDocumentError(f"no document {doc_id!r} in {self.index.path}", doc_id)
        return heaviest_first(found)

    def _word_matches(self, query: str, doc_id: str, reading=None):
        """Highlights: a word matches as either part matched it (BM25's stems, the neural part's terms, or, for a
        dense part, English stems), each term known with its part's name (two vocabularies' ids are not one)."""
        matchers = [(name, part._word_matches(query, doc_id, None if reading is None else reading.parts[name]))
                    for name, part in self.query_side.parts.items()]

        def matches(words: list[str]) -> list[frozenset]:
            per_part = [[frozenset((name, term) for term in terms) for terms in matcher(words)]
                        for name, matcher in matchers]
            return [frozenset().union(*held) for held in zip(*per_part)]

        return matches

    @classmethod
    def around(cls, neural_index: str | Path, path: str | Path, *, overwrite: bool = False, language: str = "english",
               bm25: dict | None = None, **options) -> "HybridRetriever":
        """A hybrid index over an index a neural retriever already built: BM25 (its ``language``, and ``bm25``'s
        other options: ``k1``, ``b``, ``variant``, ``delta``, ``text_fields``) built from the texts it stores and the index itself
        copied in (its segments merged into one), so no document is encoded again (``semiret hybrid-index``; what
        ``semiret adapt`` does after building its index). ``options``: search options."""
        source = open_index(neural_index)
        built_by = source.meta.get("retriever")
        if isinstance(source, CompositeIndex) or built_by in (None, "bm25", cls.name):
            raise SemiretError(f"{neural_index} was not built by a neural retriever (it holds a {source.kind!r} "
                               f"index built by {built_by or 'an unknown retriever'}); hybrid needs one")
        _check_fusable(retriever_class(built_by))
        if not source.meta.get("store_texts"):
            raise SemiretError(f"{neural_index} stores no texts (built with --no-store-texts), which BM25 needs: "
                               "build the hybrid index from the corpus (semiret index -r hybrid)")
        resolved = Path(path).resolve()
        if resolved == source.path.resolve() or source.path.resolve() in resolved.parents:
            raise SemiretError(f"the hybrid index {path} would replace or lie inside {neural_index}, which it copies: "
                               "choose another directory")
        cls.search_options(options)  # bad options fail before any work
        languages.language(language)  # an unknown one fails before any work too
        taken = BM25_PARAMETER_NAMES + ("text_fields",)
        unknown = sorted(set(bm25 or {}) - set(taken))
        if unknown:
            raise SemiretError(f"bm25 takes {', '.join(taken)} (language is an argument of its own), not "
                               f"{', '.join(map(repr, unknown))}")
        lexical = HybridDocumentOptions(language=language, **(bm25 or {})).bm25_options()
        BM25Parameters(lexical["k1"], lexical["b"], lexical["variant"], lexical["delta"])  # so do bad parameters
        TextFields.parse(lexical["text_fields"])  # and fields
        with source.writing():  # no commit lands while the index is read and copied
            ids = source.live_ids()
            index = CompositeIndex.assemble(path, cls.documents.index_kind, {
                LEXICAL: lambda target: retriever_class("bm25").build((source.get_document(i) for i in ids),
                                                                      target, total=len(ids), buffer_mb=0,
                                                                      **lexical),
                NEURAL: lambda target: _copy_merged(source.path, target)},
                overwrite=overwrite, extra_meta={"retriever": cls.name, **{
                    key: source.meta[key] for key in DOCUMENT_READING if source.meta.get(key)}})
        return cls.from_index(index, **options)


def _check_fusable(neural: type[Retriever]) -> None:
    """Refuses what a hybrid cannot fuse with BM25: BM25 itself, a hybrid, and indexes of vectors the documents bring
    (searched by query vectors, which BM25 cannot read: fuse their searches with ``FusedSearch``, --fuse-with)."""
    if neural.documents is HybridDocuments or neural.name == "bm25":
        raise SemiretError(f"hybrid fuses BM25 with a neural retriever, not with {neural.name!r}")
    if neural.documents.takes_vectors:
        raise SemiretError(f"hybrid searches both parts with the query's text; {neural.name!r} indexes vectors the "
                           "documents bring, searched by query vectors: search it and a BM25 index and fuse them "
                           "(semiret search --fuse-with, FusedSearch)")


def _copy_merged(source: Path, target: Path) -> None:
    """A copy of an index, its segments merged into one without its deleted documents: the documents of BM25
    built from its live texts, in the same order and also as one segment (``buffer_mb=0``), so that a hybrid can
    search both parts in one pass."""
    copy_index_files(source, target)
    open_index(target).merge(buffer_mb=0)


@kernel
def fuse_on_keys(keys, contributions, k):
    """The best ``k`` documents of concatenated rankings: ``keys`` (uint64 id hashes) and their weighted
    ``contributions``; each distinct key's contributions summed in their order, ties to the key met first.
    Returns each winner's first position in ``keys`` and its sum, best first. Written by hand (numba) because
    numpy's unique, bincount and lexsort on 200 hits cost about 40 us of call overhead against 2 here."""
    order = np.argsort(keys, kind="mergesort")  # stable: a key's positions stay in ranking order
    best_first = np.empty(k, np.int64)
    best_score = np.empty(k, np.float64)
    kept = 0
    i = 0
    n = keys.shape[0]
    while i < n:
        first = order[i]
        total = 0.0
        j = i
        while j < n and keys[order[j]] == keys[first]:
            total += contributions[order[j]]
            j += 1
        i = j
        pos = kept  # insertion into the sorted best k: higher sum first, then the earlier first position
        while pos > 0 and (total > best_score[pos - 1] or (total == best_score[pos - 1] and first < best_first[pos - 1])):
            pos -= 1
        if pos >= k:
            continue
        for r in range(min(kept, k - 1), pos, -1):
            best_first[r], best_score[r] = best_first[r - 1], best_score[r - 1]
        best_first[pos], best_score[pos] = first, total
        kept = min(kept + 1, k)
    return best_first[:kept], best_score[:kept]
