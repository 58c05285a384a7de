"""Request and response bodies of the HTTP API (pydantic: a wrong field type is a 422 naming the field)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (BaseModel, ConfigDict, Discriminator, Field, ModelWrapValidatorHandler, Strict, StrictBool, Tag,
                      ValidationError, ValidationInfo, field_validator, model_validator)

from semiret.data.collection import document_id_problem, record_field_names, record_fields
from semiret.indexes.filters import field_path
from semiret.search import highlight as highlighting
from semiret.types import UNMATCHED_REASONS

HIT_FIELDS = ("title", "text", "metadata")
"""What a hit's stored document is read as (``with_text``: all of them; ``with_fields``: those named)."""
MAX_FRAGMENT_WORDS = 1000
MAX_FRAGMENTS = 100
UnmatchedReason = Literal[tuple(UNMATCHED_REASONS)]
Vector = Annotated[list[Annotated[float, Strict(), Field(allow_inf_nan=False)]], Field(min_length=1)]
"""A vector as JSON gives it: a list of at least one finite number (a string, true or NaN is a 422 naming its place)."""
TokenVectors = Annotated[list[Vector], Field(min_length=1)]
"""A document's or a query's token vectors as JSON gives them: a list of at least one vector, one a token (what an index
of the multivectors retriever holds; rows of one length, as :func:`~semiret.data.collection.document_vector` checks
them)."""
SparseVector = Annotated[dict[str, Annotated[float, Strict(), Field(allow_inf_nan=False)]], Field(min_length=1)]
"""A sparse vector as JSON gives it: an object ``{term: weight}`` of at least one term, each weight a finite number
(negative weights and odd terms are refused as :func:`~semiret.data.collection.sparse_vector` refuses them, a 422)."""


class DocumentIn(BaseModel):
    """A document to add, as in a BEIR ``corpus.jsonl`` line, or under any name ``semiret index`` reads from a
    corpus file (Pyserini's ``id``/``contents``, ``docid``, ``body``, ...; an integer id as its string), or those
    the index names (its ``id_field`` and ``text_field``, else BEIR's ``_id`` and ``text``, as
    :class:`~semiret.data.collection.CorpusFields` reads them); its other fields are kept in its metadata as the index's
    ``metadata_fields`` say, else left out (the answer's ``warnings`` names them)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    id: str = Field(alias="_id", min_length=1, description="Document id, unique within one request.")
    title: str = ""
    text: str = ""
    metadata: dict[str, Any] | None = Field(None, description="Stored with the document, never encoded: what a "
                                            "search's filter reads.")
    vector: Vector | TokenVectors | SparseVector | None = Field(
        None, description="The document's own embedding, made elsewhere: what an index of the vectors retriever (a "
        "list of numbers), of the multivectors retriever (token vectors: a list of lists of numbers, one a token) or "
        "of the sparse-vectors retriever (an object {term: weight}) holds of it (others ignore it); never stored "
        "with the text.")

    @field_validator("id")
    @classmethod
    def _usable_id(cls, value: str) -> str:
        problem = document_id_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @model_validator(mode="wrap")
    @classmethod
    def _field_names(cls, record: Any, handler: ModelWrapValidatorHandler, info: ValidationInfo) -> Any:
        """The corpus reader's field names (:func:`~semiret.data.collection.record_fields`), with the index's fields
        where the validation's context gives them (``{"fields": CorpusFields, "unread": [...]}``: the fields of the
        first record holding some that the index leaves out are added to ``unread``), so a document ``semiret add``
        reads is one the API takes alike; the fields' types are then checked here, each error naming its field as
        the record names it (``body``, read as the text of an index with ``--text-field body``; not ``text``)."""
        if not isinstance(record, dict):
            return handler(record)
        context = info.context or {}
        if "unread" in context and not context["unread"]:
            context["unread"].extend(context["fields"].unread(record))
        try:
            return handler(record_fields(record, context.get("fields")))
        except ValidationError as exc:
            named = record_field_names(record, context.get("fields"))
            errors = exc.errors()
            if not any(error["loc"] and error["loc"][0] in named for error in errors):
                raise
            raise ValidationError.from_exception_data(exc.title, [
                {**error, "loc": (named[error["loc"][0]], *error["loc"][1:])}  # type: ignore[typeddict-item]
                if error["loc"] and error["loc"][0] in named else error for error in errors]) from None


class UpsertRequest(BaseModel):
    """``PUT .../documents`` as JSON. The same endpoint takes ``application/x-ndjson``: one document per line."""

    model_config = ConfigDict(extra="forbid")

    documents: list[DocumentIn]


def _string_ids(ids: Any) -> Any:
    """Integer ids as their strings, as documents are upserted (``{"id": 17}`` is document "17")."""
    if isinstance(ids, list):
        return [str(i) if isinstance(i, int) and not isinstance(i, bool) else i for i in ids]
    return ids


MAX_TAG_CHARACTERS = 100
"""The longest highlight tag (``<em class="...">``): repeated around every matching word of every fragment of every
hit, 50,000 characters a tag made a 97 KB request's answer 477 MB."""


class HighlightOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    fragment_words: int = Field(highlighting.FRAGMENT_WORDS, ge=1, le=MAX_FRAGMENT_WORDS, strict=True,
                                description="Words per fragment.")
    fragments: int = Field(highlighting.FRAGMENTS, ge=1, le=MAX_FRAGMENTS, strict=True,
                           description="Fragments per hit at most.")
    tags: list[Annotated[str, Field(max_length=MAX_TAG_CHARACTERS)]] = Field(
        list(highlighting.TAGS), min_length=2, max_length=2,
        description="The strings before and after a matching word (each at most 100 characters: they are repeated "
                    "around every word shown).")
    encoder: str = Field("default", pattern="^(default|html)$",
                         description="html: the document's text escaped (<, >, &, quotes), the tags not, for a page "
                                     "to show the fragments as HTML (OpenSearch's encoder).")


MAX_CONTEXT = 20
"""The most passages on each side of a hit a search's ``context`` may ask for."""


class RerankOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    depth: int | None = Field(None, ge=1, strict=True, description="The best hits ranked again: at least k + offset "
                              "(pages of one ranking give the same depth), at most the server's --max-k (default "
                              "100, or --max-k if lower). A learned ranking (--ltr) ranks as deep as it was trained "
                              "(GET /indexes/{name}: rerank.depth), and takes no other depth.")


class SearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    vectors: list[Vector | TokenVectors | SparseVector] | None = Field(
        None, description="Query vectors instead of texts (one of the two; one a query), made elsewhere and searched "
        "as they are: an index of the vectors or the dense retriever, of the vectors' dimension; objects {term: "
        "weight}, an index of the sparse-vectors retriever; each query's token vectors (a list of lists of numbers), "
        "an index of the multivectors retriever.")
    queries: list[str] | None = Field(None, validate_default=True, description="Query texts; the answer has one "
                                      "list of hits per query.")
    k: int = Field(10, ge=1, strict=True, description="Hits per query (a JSON integer: true or \"3\" is a 422); "
                   "default 10, or the server's --max-k if lower.")
    offset: int = Field(0, ge=0, strict=True, description="Hits of each query to skip first, for the next page "
                        "of a ranking (OpenSearch's `from`): k hits from rank offset + 1 on.")
    with_text: bool = Field(False, description="Include each hit's stored title, text and metadata.")
    with_fields: list[str] | None = Field(None, min_length=1, description="Include only these of each hit's stored "
                                          "document (Qdrant's with_payload list, OpenSearch's _source): title, text, "
                                          "metadata, or a metadata field (metadata.year, metadata.venue.name).")
    filter: dict[str, Any] | None = Field(None, description="Only documents whose stored metadata matches: "
                                          "{\"field\": value}, {\"field\": [any, of]}, {\"field\": {\"gte\": 1, "
                                          "\"lt\": 9}}, {\"field\": {\"exists\": true}}; several fields: all; "
                                          "\"a.b\" a nested field; {\"$text\": \"words \\\"a phrase\\\"\"}: the "
                                          "stored title or text holds them; {\"$or\": [filter, ...]}, {\"$and\": "
                                          "[...]}, {\"$not\": filter} join filters.")
    operators: StrictBool = Field(False, description="Read a search box's operators in the queries: \"a phrase\" "
                                  "and +word a hit must hold, -word and -\"a phrase\" one must not (words as "
                                  "written, case-folded; Meilisearch's and Typesense's defaults).")
    group_by: str | None = Field(None, description="k groups of hits by this stored metadata field's value, groups "
                                 "by their best hit, each hit's group in `group` (Qdrant's search groups; `parent` "
                                 "over an index of passages: documents by their best passage).")
    group_size: int = Field(1, ge=1, strict=True, description="Hits per group (with group_by).")
    highlight: Annotated[Annotated[StrictBool, Tag("bool")] | Annotated[HighlightOptions, Tag("options")],
                         Discriminator(lambda value: "options" if isinstance(value, (dict, BaseModel)) else "bool")
                         ] = Field(False, description="Give each hit `highlights`: the passages of its "
                                               "stored text where the query's matches cluster, matching words "
                                               "between <em> and </em> (OpenSearch's highlight); an object sets "
                                               "how.")
    score_threshold: float | None = Field(None, strict=True, allow_inf_nan=False,
                                          description="No hit scoring below this (Qdrant's score_threshold, "
                                                      "OpenSearch's min_score): fewer than k hits rather than poor "
                                                      "ones.")
    explain: StrictBool = Field(False, description="Give each hit `explanation`: how its score adds up, term by "
                                "term, as POST .../explain answers (OpenSearch's explain; retrievers that sum term "
                                "weights; with vectors, an index of the sparse-vectors retriever).")
    context: int | None = Field(None, ge=0, le=MAX_CONTEXT, strict=True,
                                description="Give each hit `context`: its text with this many passages of its "
                                            "document on each side, joined without their overlaps, after the "
                                            "document's title (an index of passages; a whole document: its "
                                            "text), for a RAG prompt.")
    diversity: float | None = Field(None, ge=0, le=1, strict=True, allow_inf_nan=False,
                                    description="From 0 to 1: pick the k hits by maximal marginal relevance, trading "
                                                "relevance for hits unlike those above them (0: the plain ranking; "
                                                "Qdrant's mmr.diversity). Each hit keeps its own score, so scores "
                                                "need not fall down the list.")
    candidates: int | None = Field(None, ge=1, strict=True,
                                   description="With diversity or boost: the best hits to choose from (Qdrant's "
                                               "mmr.candidates_limit), at least k + offset; default 100 (or the "
                                               "server's --max-k if lower). Pages of one diversified or boosted "
                                               "ranking give the same candidates.")
    rerank: Annotated[Annotated[StrictBool, Tag("bool")] | Annotated[RerankOptions, Tag("options")],
                      Discriminator(lambda value: "options" if isinstance(value, (dict, BaseModel)) else "bool")
                      ] = Field(False, description="Rank the best hits again by the server's model (started with "
                                "--cross-encoder: the query and each hit's stored text read together; or --colbert: "
                                "late interaction of their token vectors; or --ltr: a learned ranking of their "
                                "first-stage and other indexes' scores, over an index of its first stage's retriever); "
                                "each hit then carries its score (OpenSearch's rerank processor). An object sets how "
                                "deep.")
    boost: list[dict[str, Any]] | dict[str, Any] | None = Field(
        None, description="Functions of the stored metadata that multiply the best hits' scores (the candidates), "
        "which are then ranked again (OpenSearch's function_score, Qdrant's score boosting): {\"decay\": \"gauss\" "
        "(or exp, linear), \"field\": \"published\", \"origin\": \"now\", \"scale\": \"30d\", \"offset\": "
        "\"1d\", \"midpoint\": 0.5} (fresher first), {\"field\": \"citations\", \"modifier\": \"log1p\", "
        "\"factor\": 1, \"missing\": 0}, {\"filter\": FILTER, \"weight\": 1.5}; a list: their product.")
    options: dict[str, Any] = Field(default_factory=dict,
                                    description="Search options of the index's retriever (e.g. two_phase, min_idf: "
                                                "see search_options of GET /indexes/{name}).")

    @field_validator("queries")
    @classmethod
    def _queries_or_vectors(cls, queries, info):
        """Query texts or vectors, one of the two (an error at ``queries``, where a client looks for it; ``vectors``
        is read first to tell, and is missing from ``info.data`` when it was wrong: its own error says so)."""
        if "vectors" in info.data and (queries is None) == (info.data["vectors"] is None):
            raise ValueError("give the queries as texts (queries) or as vectors (vectors): one of the two")
        return queries

    @model_validator(mode="after")
    def _vectors_have_no_words(self) -> "SearchRequest":
        if self.vectors is not None:
            words = [name for name in ("operators", "highlight", "rerank") if getattr(self, name)]
            if words:
                raise ValueError(f"query vectors have no words: {', '.join(words)} cannot read them")
        return self

    @property
    def searched(self) -> list:
        """What the search searches: the query texts, or the query vectors."""
        return self.queries if self.queries is not None else self.vectors

    @field_validator("with_fields")
    @classmethod
    def _document_fields(cls, fields):
        for name in fields or ():
            if name not in HIT_FIELDS and not (name.startswith("metadata.") and field_path(name[9:])):
                raise ValueError(f"{name!r} is no field of a stored document: {', '.join(HIT_FIELDS)}, or "
                                 "metadata.FIELD")
        return fields


class RecommendRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    positive: list[str] = Field(min_length=1, description="Ids of documents in the index to find documents like "
                                "(each searched with its own stored text).")
    negative: list[str] = Field(default_factory=list, description="Ids of documents to find documents unlike.")
    k: int = Field(10, ge=1, strict=True, description="Hits (a JSON integer); default 10, or the server's --max-k if "
                   "lower.")
    with_text: bool = Field(False, description="Include each hit's stored title, text and metadata.")
    filter: dict[str, Any] | None = Field(None, description="Only documents whose stored metadata matches (as a "
                                          "search's filter).")
    score_threshold: float | None = Field(None, strict=True, allow_inf_nan=False,
                                          description="No hit scoring below this (Qdrant's score_threshold, "
                                                      "OpenSearch's min_score): fewer than k hits rather than poor "
                                                      "ones.")
    options: dict[str, Any] = Field(default_factory=dict, description="Search options of the index's retriever.")


class TextOrVector(BaseModel):
    """A request that takes a query text (``query``) or a query vector (``vector``), not both."""

    @model_validator(mode="after")
    def _one_query(self):
        if self.query is not None and self.vector is not None:
            raise ValueError("give a query text or a query vector, not both")
        return self


class ExplainRequest(TextOrVector):
    model_config = ConfigDict(extra="forbid")

    query: str | None = Field(None, description="The query (a text; or give vector).")
    vector: SparseVector | None = Field(None, description="Or a sparse query vector, {term: weight}, as a search's "
                                        "\"vectors\" give it (an index of the sparse-vectors retriever).")
    id: str = Field(description="The document whose score to explain.")
    filter: dict[str, Any] | None = Field(None, description="The query read as a search with this filter reads it "
                                          "(as search's filter).")
    operators: bool = Field(False, description="The query read as a search with its operators reads it (as "
                                               "search's operators).")
    options: dict[str, Any] = Field(default_factory=dict, description="Search options of the index's retriever.")

    _numbered_id = field_validator("id", mode="before")(lambda value: _string_ids([value])[0])

    @model_validator(mode="after")
    def _text_or_vector(self) -> "ExplainRequest":
        """One query: a text or a sparse vector (not both: :class:`TextOrVector`), which has no words to operate."""
        if self.query is None and self.vector is None:
            raise ValueError("give the query as a text (query) or as a sparse vector (vector)")
        if self.vector is not None and self.operators:
            raise ValueError("a query vector has no words: operators cannot read it")
        return self

    @property
    def explained(self) -> "str | dict[str, float]":
        """The query explained: its text, or its sparse vector."""
        return self.query if self.vector is None else self.vector


class TermPart(BaseModel):
    term: str
    query_weight: float = Field(description="The term's weight in the query as the index scores it (BM25: count x "
                                "IDF).")
    document_weight: float = Field(description="Its value in the document's postings (0: the document lacks it).")
    contribution: float = Field(description="query_weight x document_weight.")


Warnings = Annotated[list[str] | None, Field(
    description="What the request did that is likely a mistake though not an error, where it did (absent otherwise; "
    "the server logs it too): a filter, facet or order on a field no document holds (a misspelling), or fields of the "
    "documents added that the index keeps none of (its metadata_fields).")]
"""The ``warnings`` of an answer: the same field wherever a request may draw one."""


class Explained(BaseModel):
    """How a document's score adds up: a hit's ``explanation``, and (:class:`ExplainResponse`) what explain
    answers."""

    id: str
    score: float = Field(description="The sum of the contributions: the score an exact search gives the document.")
    matched: bool = Field(description="Whether the search explained (its filter and operators) finds the document, "
                          "deep enough (OpenSearch's explain's matched).")
    unmatched: UnmatchedReason | None = Field(
        None, description="Why it does not: " + "; ".join(f"{key}: {what}" for key, what in UNMATCHED_REASONS.items()))
    terms: list[TermPart] = Field(description="The query's terms, the document's matches first, largest first.")
    boost_factor: float | None = Field(None, description="In a boosted search's hits: the product of the boost's "
                                       "factors, which moved `score` to the hit's score (s + |s| (F - 1)).")


class ExplainResponse(Explained):
    warnings: Warnings = None


class AnalyzeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str | None = Field(None, description="The text to analyze (or id).")
    id: str | None = Field(None, description="A stored document whose terms to read, as its postings hold them.")
    side: str = Field("query", pattern="^(query|document)$",
                      description="Read text as a query or as a document is indexed.")
    limit: int | None = Field(None, ge=0, strict=True, description="The heaviest N terms (default, or 0: all).")
    options: dict[str, Any] = Field(default_factory=dict, description="Search options of the index's retriever.")

    _numbered_id = field_validator("id", mode="before")(lambda value: _string_ids([value])[0])

    @model_validator(mode="after")
    def _text_or_id(self):
        if self.text is not None and self.id is not None:
            raise ValueError("give text or id, not both")
        if self.text is None and self.id is None:
            raise ValueError("give a text to analyze, or the id of a stored document")
        if self.id is not None and self.side != "query":
            raise ValueError("side reads a text; a stored document (id) is read as indexed already")
        return self


class SuggestRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(max_length=1000, description="The text typed so far; the word it ends with is completed "
                      "(the last 8 words before it count).")
    k: int = Field(5, ge=1, le=100, strict=True, description="Suggestions to give.")
    filter: dict[str, Any] | None = Field(None, description="Only from documents whose stored metadata matches (as "
                                          "search's filter).")


class SuggestionOut(BaseModel):
    text: str = Field(description="The text typed, its last word completed.")
    word: str = Field(description="The completed word, spelt as the documents write it.")
    count: int = Field(description="Documents holding it (beside the earlier words, where in_context).")
    in_context: bool = Field(description="Whether the count is among documents holding the earlier words typed "
                             "(those the index holds; true where there are none); false: a completion from all "
                             "documents, topping the list up.")


class SuggestResponse(BaseModel):
    suggestions: list[SuggestionOut] = Field(description="The most documents first.")
    warnings: Warnings = None


class TermWeightOut(BaseModel):
    term: str
    weight: float = Field(description="As the index scores it: a query's weight (BM25: count x IDF) or a "
                                      "document's value in the postings.")
    document_frequency: int = Field(description="Documents of the index holding the term (0: a word it has not "
                                                "seen).")


class AnalyzeResponse(BaseModel):
    terms: list[TermWeightOut] = Field(description="The heaviest first.")
    total: int = Field(description="How many terms in all (limit may show fewer).")


class Hit(BaseModel):
    id: str
    score: float
    title: str | None = Field(None, description="With with_text.")
    text: str | None = Field(None, description="With with_text.")
    metadata: dict[str, Any] | None = Field(None, description="With with_text, when the document has some.")
    group: Any = Field(None, description="With group_by: the value of the field the hit was grouped by.")
    highlights: list[str] | None = Field(None, description="With highlight: passages with the matching words marked "
                                         "(none when no word matches).")
    context: str | None = Field(None, description="With context: the hit's text with the passages around it.")
    explanation: Explained | None = Field(None, description="With explain: how the hit's score adds up.")


class SearchResponse(BaseModel):
    results: list[list[Hit]]
    took_ms: float | None = Field(None, description="Milliseconds the server spent on the search, from the "
                                  "request's validation to its results (OpenSearch's `took`, Qdrant's `time`).")
    warnings: Warnings = None


class SearchBatchRequest(BaseModel):
    """``POST .../search/batch``: several searches, each with settings of its own, answered in order."""

    model_config = ConfigDict(extra="forbid")

    searches: list[SearchRequest] = Field(min_length=1, description="The searches, each as the body of "
                                          "POST .../search.")


class SearchBatchResponse(BaseModel):
    searches: list[SearchResponse] = Field(description="Each search's answer, in the order asked.")
    took_ms: float | None = Field(None, description="Milliseconds the server spent on the whole batch.")


class DeleteRequest(BaseModel):
    """Ids to delete, or a filter on the documents' metadata (one of the two)."""

    model_config = ConfigDict(extra="forbid")

    ids: list[str] | None = Field(None, description="Ids to delete; unknown ones are skipped; an integer is read as "
                                                    "its string, as in an upsert.")
    filter: dict[str, Any] | None = Field(None, description="Delete the documents whose stored metadata matches "
                                          "(as a search's filter) instead.")

    @model_validator(mode="after")
    def _one_of_the_two(self) -> "DeleteRequest":
        if (self.ids is None) == (self.filter is None):
            raise ValueError("give ids or a filter (one of the two)")
        if self.filter == {}:
            raise ValueError("an empty filter would delete every document: give a condition")
        return self

    _numbered_ids = field_validator("ids", mode="before")(_string_ids)


class MetadataRequest(BaseModel):
    """New metadata for documents named by id or by a filter (one of the two), none of them encoded again."""

    model_config = ConfigDict(extra="forbid")

    metadata: dict[str, Any] = Field(description="Fields to set on each document (with overwrite: its whole "
                                     "metadata).")
    ids: list[str] | None = Field(None, description="The documents to update; unknown ids are skipped; in an index of "
                                  "passages a document's id updates all its passages.")
    filter: dict[str, Any] | None = Field(None, description="Update the documents whose stored metadata matches (as "
                                          "a search's filter; {} every document) instead.")
    overwrite: bool = Field(False, description="Replace each document's metadata instead of setting these fields "
                            "(Qdrant's overwrite_payload).")

    @model_validator(mode="after")
    def _one_of_the_two(self) -> "MetadataRequest":
        if (self.ids is None) == (self.filter is None):
            raise ValueError("give ids or a filter (one of the two)")
        return self

    _numbered_ids = field_validator("ids", mode="before")(_string_ids)


class WriteResponse(BaseModel):
    status: str = Field("acknowledged", description="Returned only once the change is durable (fsynced).")
    upserted: int | None = Field(None, description="Documents added or replaced: those sent.")
    deleted: int | None = Field(None, description="Documents deleted: the ids asked for that the index held (by a "
                                "filter, the documents whose passages, or selves, it deleted).")
    passages: int | None = Field(None, description="Where the index holds passages (chunk_words, --chunk-words): the "
                                 "passages the documents added were split into, or those deleted.")
    updated: int | None = None
    synonym_rules: int | None = Field(None, description="The synonym rules the index holds now.")
    warnings: Warnings = None


class CreateIndexRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    retriever: str = Field("bm25", description="The retriever that builds and searches the index (`semiret models` "
                           "and the README list them).")
    options: dict[str, Any] = Field(default_factory=dict, description="Options that shape the index (k1, b, model, "
                                    "...; a model among those `semiret models` lists as installed).")
    chunk_words: int | None = Field(None, ge=1, strict=True, description="Split documents into passages of this many "
                                    "words (as `--chunk-words`).")
    chunk_tokens: int | None = Field(None, ge=1, strict=True, description="Or passages of this many tokens of the "
                                     "index's model (as `--chunk-tokens`; not with chunk_words).")
    chunk_overlap: int = Field(0, ge=0, strict=True, description="Words (tokens) shared by consecutive passages.")
    chunk_sentences: bool = Field(False, strict=True, description="Passages of whole sentences, overlapping by whole "
                                  "sentences (as `--chunk-sentences`).")
    chunk_tokenizer: str | None = Field(None, description="With chunk_tokens: the tokenizer that counts them, a model "
                                        "this server has installed (`semiret models`; default: the index's model's).")
    metadata_fields: list[str] | None = Field(None, description="Fields of the documents added to keep in their "
                                              "metadata beside their metadata object, to filter on (\"*\": all but "
                                              "the id, text and title; as `--metadata-fields`); without them other "
                                              "fields are left out.")
    id_field: str | None = Field(None, description="The field of the documents added holding each one's id, in place "
                                 "of the first of _id, id, docid, ... (as `--id-field`).")
    text_field: str | None = Field(None, description="The field holding each one's text, in place of the first of "
                                   "text, contents, body, ... (as `--text-field`).")
    from_backup: str | None = Field(None, description="Restore instead: the name of a backup in the server's "
                                    "--backup-dir (as GET /indexes/{name}/backups lists it), copied as the new index "
                                    "with its documents, retriever and options (none of the fields above with it).")


class AliasRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    index: str = Field(description="The index the alias stands for from now on (an index's name, not an alias's).")


class AliasInfo(BaseModel):
    alias: str
    index: str = Field(description="The index the alias stands for.")
    previous: str | None = Field(None, description="The index it stood for before this request (a switch), if any.")


class AliasList(BaseModel):
    aliases: list[AliasInfo]


class IndexInfo(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    retriever: str
    kind: str
    documents: int
    deleted: int | None = None
    segments: int | None = None
    size_bytes: int | None = None
    """Deleted documents not yet merged away, segments and size: none for a Milvus collection (Milvus keeps them)."""
    search_options: list[str]
    aliases: list[str] | None = Field(None, description="The aliases that stand for this index, if any.")
    rerank: dict[str, Any] | None = Field(None, description="What a search's \"rerank\" ranks this index's hits by: "
                                          "{\"kind\": \"cross-encoder\" (or \"late-interaction\"), \"depth\"} (the "
                                          "default depth), or {\"kind\": \"learned-ranking\", \"depth\", "
                                          "\"first_stage\", \"features\"}; null where a search cannot ask (the server "
                                          "has no model, or none for this index).")


class IndexList(BaseModel):
    indexes: list[IndexInfo]


class ErrorDetail(BaseModel):
    """An error other than a validation error: what went wrong, in words."""

    detail: str


class StoredDocument(BaseModel):
    """A stored document (only ``_id`` when the index keeps no texts)."""

    model_config = ConfigDict(populate_by_name=True)

    id: str = Field(alias="_id")
    title: str | None = None
    text: str | None = None
    metadata: dict[str, Any] | None = None


class ScrollRequest(BaseModel):
    """A page of the documents in id order (Qdrant's scroll): start with no offset, then each answer's
    ``next_page_offset``, until it is null."""

    model_config = ConfigDict(extra="forbid")

    filter: dict[str, Any] | None = Field(None, description="Only documents whose stored metadata matches (as a "
                                          "search's filter).")
    limit: int = Field(10, ge=1, strict=True, description="Documents in the page, at most the server's --max-batch.")
    offset: str | None = Field(None, description="Where the page starts (included): a previous answer's "
                               "next_page_offset (an id in id order; with order_by, a token of that order).")
    with_text: bool = Field(True, description="Each document's stored title, text and metadata; false: ids only.")
    order_by: str | dict[str, Any] | None = Field(None, description="In a metadata field's order instead of the ids' "
                                                  "(Qdrant's order_by): \"published\", or {\"key\": \"published\", "
                                                  "\"direction\": \"desc\"}; numbers, then dates, then strings, "
                                                  "then booleans; documents without a value (or null) last. Offsets are then the tokens "
                                                  "pages return.")


class RetrieveRequest(BaseModel):
    """Documents by id, in one request (Qdrant's retrieve, OpenSearch's ``_mget``)."""

    model_config = ConfigDict(extra="forbid")

    ids: list[str] = Field(description="The ids to read (an integer is read as its string, as in an upsert).")

    _numbered_ids = field_validator("ids", mode="before")(_string_ids)


class RetrieveResponse(BaseModel):
    documents: list[StoredDocument] = Field(description="The stored documents of the ids the index holds, in the "
                                            "order asked (each once; only `_id` where the index keeps no texts).")
    missing: list[str] = Field(description="The ids asked for that the index does not hold.")


class ScrollResponse(BaseModel):
    documents: list[StoredDocument]
    next_page_offset: str | None = Field(description="The offset of the next page; null after the last.")
    warnings: Warnings = None


class CountRequest(TextOrVector):
    model_config = ConfigDict(extra="forbid")

    filter: dict[str, Any] | None = Field(None, description="Count only documents whose stored metadata matches "
                                          "(as a search's filter).")
    query: str | None = Field(None, description="Count only the documents this query's search matches (total hits: "
                              "those holding one of its terms, for retrievers that sum term weights; every one, for "
                              "a dense index).")
    vector: SparseVector | None = Field(None, description="Or a sparse query vector's matches, {term: weight} (an "
                                        "index of sparse vectors: the documents holding one of its terms).")


class CountResponse(BaseModel):
    count: int
    warnings: Warnings = None


class SynonymRules(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rules: list[str] = Field(description="Synonym rules, one a line, in Solr's format (as OpenSearch's synonym "
                             "filters read them): 'heart attack, myocardial infarction, mi' (equivalent phrases), "
                             "'colour, hue => color' (replaced); '#' starts a comment. Phrases are read with the "
                             "index's analyzer.")


class BackupInfo(BaseModel):
    name: str = Field(description="The backup's folder in the server's --backup-dir: an index directory that "
                                  "`semiret serve --index` serves as it is.")
    created: str = Field(description="When it was taken (UTC, ISO 8601).")
    documents: int


class BackupList(BaseModel):
    backups: list[BackupInfo] = Field(description="Oldest first.")


class FacetRequest(TextOrVector):
    model_config = ConfigDict(extra="forbid")

    field: str = Field(description="A stored metadata field (\"a.b\": nested).")
    filter: dict[str, Any] | None = Field(None, description="Count only documents whose stored metadata matches "
                                          "(as a search's filter).")
    limit: int = Field(10, ge=1, strict=True, description="Values returned, those the most documents hold.")
    ranges: list[dict[str, Any]] | None = Field(None, description="Count the documents with a value in each range "
                                                "instead ([{\"lt\": 2010}, {\"gte\": 2010, \"lt\": 2020}], as "
                                                "a filter's ranges), in the order given (OpenSearch's range "
                                                "aggregation); each answer's value is its range.")
    query: str | None = Field(None, description="Count among this query's best `depth` hits only (those passing the "
                              "filter): the facets of a search page.")
    vector: Vector | TokenVectors | SparseVector | None = Field(
        None, description="Or among a query vector's best hits (a dense index; an object {term: weight}: an index of "
        "sparse vectors; a list of lists, a query's token vectors: an index of the multivectors retriever).")
    depth: int = Field(100, ge=1, strict=True, description="With query or vector: the best hits counted among "
                       "(default 100, or the server's --max-k if lower).")
    operators: StrictBool = Field(False, description="With query: read its search box's operators, as a search does.")
    options: dict[str, Any] = Field(default_factory=dict, description="With query or vector: the search options it is "
                                    "searched with, as a search's (the facets of the page that search made).")


class FacetValue(BaseModel):
    value: Any
    count: int


class FacetResponse(BaseModel):
    values: list[FacetValue] = Field(description="Most documents first.")
    warnings: Warnings = None
