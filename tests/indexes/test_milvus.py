"""The Milvus backend against an embedded Milvus Lite (its C++ engine): the same top-10 as semiret's own index on
SciFact documents, writes visible to the next search, bad vectors refused with the collection unchanged."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
from typer.testing import CliRunner

from semiret import options as option_tools
from semiret.cli import app
from semiret.data import Collection, Document, iter_corpus
from semiret.errors import IndexFormatError, SemiretError
from semiret.indexes.milvus import BUILDING_PREFIX, ID_FIELD as ID_FIELD_NAME, MilvusBackend, aside_name
from semiret.search import BagOfTokensRetriever, BM25Retriever, DenseRetriever, InferenceFreeRetriever, open_retriever
from semiret.types import Embeddings, Postings, SparseQuery

from helpers import MSMARCO_IDF, TINY_DOCS, write_jsonl

pytest.importorskip("milvus_lite", reason="the Milvus tests need milvus-lite (pip install 'semiret[milvus]')")

_names = (f"c{i}" for i in itertools.count())


@pytest.fixture(scope="module")
def backend(tmp_path_factory) -> MilvusBackend:
    """One Milvus Lite database for the module (starting one takes about a second)."""
    return MilvusBackend(str(tmp_path_factory.mktemp("milvus") / "milvus.db"))


def assert_same_top_k(ours, theirs, k: int = 10):
    """Rank by rank the same scores; the same ids except for the order of equal scores and which of the documents
    tied at the k-th score made the cut."""
    for own_ids, own_scores, milvus_ids, milvus_scores in zip(ours.ids, ours.scores, theirs.ids, theirs.scores):
        assert len(own_ids) == len(milvus_ids) <= k
        np.testing.assert_allclose(milvus_scores, own_scores, rtol=1e-5, atol=1e-6)
        own = dict(zip(own_ids, own_scores))
        for doc_id, score in zip(milvus_ids, milvus_scores):
            assert doc_id in own or np.isclose(score, own_scores[-1], rtol=1e-5), (doc_id, score)


def built_both_ways(cls, documents, path, name, backend, **options):
    """``cls`` over semiret's own index and over a Milvus collection of the same documents, encoded once (the
    slow part)."""
    build_options, search_options = cls.split_options(options)
    side = cls.documents.create(option_tools.build(cls.documents.Options, build_options))
    batch = side.encode(documents)
    kind, config, meta = cls.documents.index_kind, side.index_config(), {"retriever": cls.name}
    ours = cls.documents.index_class.build(path, kind, [batch], **config, extra_meta=meta)
    theirs = backend.build(name, kind, [batch], **config, extra_meta=meta)
    return cls.from_index(ours, side, **search_options), cls.from_index(theirs, side, **search_options)


@pytest.mark.integration  # reads the SciFact sample (scifact_sample)
@pytest.mark.parametrize("cls, options", [
    (InferenceFreeRetriever, {"top_k": 100, "idf": str(MSMARCO_IDF), "min_idf": 0.0}),
    (DenseRetriever, {}),
], ids=["inference-free", "dense"])
def test_top_10_equals_our_index_on_scifact(scifact_sample, tmp_path, tiny_bert, backend, cls, options):
    documents = list(iter_corpus(scifact_sample))
    name = f"scifact_{cls.documents.index_kind}"
    ours, theirs = built_both_ways(cls, documents, tmp_path / "index", name, backend, model=str(tiny_bert), **options)
    assert theirs.index.n_docs == ours.index.n_docs == len(documents)
    queries = list(Collection(scifact_sample).queries().values())
    assert_same_top_k(ours.search(queries, k=10), theirs.search(queries, k=10))
    reopened = open_retriever(name, backend=backend, **{k: v for k, v in options.items() if k != "top_k"})
    assert reopened.name == cls.name  # the retriever (and model) the collection records
    assert_same_top_k(ours.search(queries[:5], k=10), reopened.search(queries[:5], k=10))


def test_adds_replacements_and_deletes_are_visible_to_the_next_search(backend):
    name = next(_names)
    retriever = BagOfTokensRetriever.build(TINY_DOCS, name, backend=backend)
    assert retriever.search("cats and dogs", k=1)[0].id == "d2"
    assert retriever.add([Document("d7", "cats and dogs and more cats and dogs")]) == 1
    assert retriever.search("cats and dogs", k=1)[0].id == "d7"
    assert retriever.search("cats and dogs", k=1)[0].text == "cats and dogs and more cats and dogs"

    with pytest.raises(SemiretError, match="'d7' is already in"):
        retriever.add([Document("d7", "penguins")])
    assert retriever.search("penguins", k=3) == []
    retriever.add([Document("d7", "penguins on the ice")], replace=True)  # an upsert: one row per id
    assert retriever.search("penguins", k=3)[0].id == "d7"
    assert retriever.search("cats and dogs", k=1)[0].id == "d2"
    assert retriever.index.n_docs == len(TINY_DOCS) + 1

    with pytest.raises(SemiretError, match="cannot delete 'nope'"):
        retriever.delete(["d7", "nope"])
    assert "d7" in retriever.index  # nothing deleted
    assert retriever.delete(["d7", "d2"]) == 2
    assert {h.id for h in retriever.search("cats dogs penguins", k=10)}.isdisjoint({"d2", "d7"})
    assert retriever.index.n_docs == len(TINY_DOCS) - 1


def test_a_collection_syncs_with_its_corpus(backend):
    retriever = BagOfTokensRetriever.build(TINY_DOCS, next(_names), backend=backend)
    corpus = [d for d in TINY_DOCS if d.id != "d4"] + [Document("d9", "walruses on the ice")]
    corpus[0] = Document(corpus[0].id, "a walrus text now", corpus[0].title)
    counts = retriever.sync(corpus)
    assert (counts.added, counts.replaced, counts.unchanged, counts.deleted) == (1, 1, len(TINY_DOCS) - 2, 1)
    assert sorted(retriever.index.sorted_ids()) == sorted(d.id for d in corpus)
    assert {h.id for h in retriever.search("walrus walruses", k=3)} == {corpus[0].id, "d9"}


def _postings(ids, terms, values) -> Postings:
    offsets = np.cumsum([0] + [len(t) for t in terms])
    return Postings(ids, offsets.astype(np.int64), np.array(sum(terms, []), np.int32),
                    np.array(sum(values, []), np.float32), np.array([len(t) for t in terms], np.int32))


def test_bad_sparse_vectors_are_refused_and_the_collection_is_unchanged(backend):
    name = next(_names)
    good = _postings(["a", "b"], [[1, 5], [5]], [[0.5, 1.0], [2.0]])
    index = backend.build(name, "impact", [good], analyzer={"type": "test"}, vocab_size=10)
    before = index.search(_queries([[5]]), k=5)
    bad_batches = [
        ("finite and non-negative", _postings(["c", "d"], [[1], [2]], [[0.5], [-1.0]])),
        ("finite and non-negative", _postings(["c"], [[1]], [[float("nan")]])),
        ("outside the vocabulary", _postings(["c", "d"], [[1], [10]], [[0.5], [1.0]])),
        ("duplicate document id", _postings(["c", "c"], [[1], [2]], [[0.5], [1.0]])),
        ("longer than", _postings(["x" * 600], [[1]], [[0.5]])),
    ]
    for message, batch in bad_batches:
        with pytest.raises(SemiretError, match=message):
            index.add(batch, replace=True)
    assert index.n_docs == 2 and "c" not in index
    after = index.search(_queries([[5]]), k=5)
    assert (after.ids, after.scores) == (before.ids, before.scores)
    with pytest.raises(SemiretError, match="finite and non-negative"):
        index.search(_queries([[5]], [[-1.0]]), k=5)


def _queries(terms, weights=None) -> list[SparseQuery]:
    weights = weights or [[1.0] * len(t) for t in terms]
    return [SparseQuery(np.array(t, np.int32), np.array(w, np.float32)) for t, w in zip(terms, weights)]


def test_bad_dense_vectors_are_refused_and_the_collection_is_unchanged(backend):
    name = next(_names)
    index = backend.build(name, "dense", [Embeddings(["a", "b"], np.eye(2, 4, dtype=np.float32))],
                          analyzer={"type": "test"}, dim=4)
    for message, vectors in {"dimension 4": np.ones((1, 3), np.float32),
                             "finite": np.array([[1, np.nan, 0, 0]], np.float32)}.items():
        with pytest.raises(SemiretError, match=message):
            index.add(Embeddings(["c"], vectors))
    with pytest.raises(SemiretError, match="sparse|dense"):
        index.add(_postings(["c"], [[1]], [[1.0]]))
    assert index.n_docs == 2 and "c" not in index
    hits = index.search(np.array([[1, 0, 0, 0], [0, 0, 0, 0]], np.float32), k=5)
    assert hits.ids == [["a", "b"], []]  # an all-zero query (an empty text) finds nothing
    np.testing.assert_allclose(hits.scores[0], [1.0, 0.0])


def test_collections_describe_themselves_and_refuse_what_milvus_cannot_hold(backend, tiny_bert):
    name = next(_names)
    BagOfTokensRetriever.build(TINY_DOCS, name, backend=backend)
    meta = backend.open(name).meta
    assert (meta["format"], meta["kind"], meta["retriever"], meta["vocab_size"]) == ("semiret.milvus", "binary", "bot", 30522)
    with pytest.raises(IndexFormatError, match="already exists"):
        BagOfTokensRetriever.build(TINY_DOCS, name, backend=backend)
    with pytest.raises(SemiretError, match="corpus IDF"):
        open_retriever(name, "idf", backend=backend).search("cats")
    with pytest.raises(SemiretError, match="'bm25' index cannot live in Milvus"):
        BM25Retriever.build(TINY_DOCS, next(_names), backend=backend)
    with pytest.raises(SemiretError, match="no Milvus equivalent"):
        DenseRetriever.build(TINY_DOCS, next(_names), backend=backend, model=str(tiny_bert), ann="tree")
    with pytest.raises(SemiretError, match="two-phase"):
        open_retriever(name, "idf", backend=backend, idf=str(MSMARCO_IDF), two_phase="on").search("cats")
    with pytest.raises(IndexFormatError, match="no collection"):
        open_retriever("missing", backend=backend)
    with pytest.raises(SemiretError, match="expected milvus:URI"):
        open_retriever(name, backend="milvus")


def test_cli_index_search_add_delete_eval(tmp_path, beir_dir, backend):
    spec = f"milvus:{backend.uri}"
    runner = CliRunner()

    def run(*args):
        result = runner.invoke(app, [*args, "--backend", spec])
        assert result.exit_code == 0, result.output
        return result.stdout

    name = next(_names)
    run("index", "--data", str(beir_dir), "--out", name, "-r", "bot")
    assert '"id": "d2"' in run("search", "--index", name, "--json", "-k", "1", "cats and dogs")
    run("add", str(write_jsonl(tmp_path / "more.jsonl", [{"_id": "d9", "text": "cats and dogs"}])), "--index", name)
    assert '"id": "d9"' in run("search", "--index", name, "--json", "-k", "1", "cats and dogs")
    run("delete", "d9", "--index", name)
    assert '"id": "d2"' in run("search", "--index", name, "--json", "-k", "1", "cats and dogs")
    assert '"documents": 6' in run("info", name)
    assert '"nDCG@10"' in run("eval", "--data", str(beir_dir), "-r", "idf", "--idf", str(MSMARCO_IDF), "--json")
    assert [c for c in backend.client.list_collections() if c.startswith("semiret_eval_")] == []  # dropped


def test_the_service_serves_a_collection(backend):
    from helpers import LocalClient

    from semiret.serving import ServeSettings, create_app

    name = next(_names)
    BagOfTokensRetriever.build(TINY_DOCS, name, backend=backend)
    settings = ServeSettings({"tiny": name}, backend=f"milvus:{backend.uri}", api_key="key")
    client, write = LocalClient(create_app(settings)), {"X-API-Key": "key"}

    def top(query: str) -> str:
        response = client.post("/indexes/tiny/search", json={"queries": [query], "k": 1})
        assert response.status_code == 200, response.text
        return response.json()["results"][0][0]["id"]

    assert client.get("/indexes/tiny").json()["kind"] == "binary"
    assert top("cats and dogs") == "d2"
    response = client.put("/indexes/tiny/documents", headers=write,
                          json={"documents": [{"_id": "d7", "title": "", "text": "cats and dogs"}]})
    assert response.status_code == 200, response.text
    assert top("cats and dogs") == "d7"
    assert client.get("/indexes/tiny/documents/d7").json()["text"] == "cats and dogs"
    assert client.post("/indexes/tiny/documents/delete", headers=write, json={"ids": ["d7"]}).status_code == 200
    assert top("cats and dogs") == "d2"


def test_metadata_filters_search_deeper_in_a_collection(backend, tmp_path):
    """Milvus cannot hide documents from a search: a filtered search reads deeper until k hits pass, and finds
    what semiret's own index finds by hiding the others."""
    docs = [Document(f"d{i}", "cats " * (1 + i % 7) + "and dogs", metadata={"pet": "cat" if i % 9 == 0 else "dog"})
            for i in range(300)]
    collection = BagOfTokensRetriever.build(docs, next(_names), backend=backend)
    own = BagOfTokensRetriever.build(docs, tmp_path / "own")
    found = collection.search(["cats", "dogs"], k=5, filter={"pet": "cat"})
    expected = own.search(["cats", "dogs"], k=5, filter={"pet": "cat"})
    assert found.scores == expected.scores and all(len(ids) == 5 for ids in found.ids)
    assert all(collection.index.get_document(d).metadata == {"pet": "cat"} for ids in found.ids for d in ids)
    words = {"$text": "dogs", "$not": {"pet": "dog"}}  # a full-text condition reads the stored texts there too
    assert collection.search(["cats"], k=5, filter=words).scores == own.search(["cats"], k=5, filter=words).scores
    assert collection.count(words) == own.count(words) == 34


def test_a_text_condition_reads_the_fields_the_collection_records(backend, tmp_path):
    """A collection whose analyzer records text fields (BM25F's, written here by hand: Milvus holds no BM25) tests
    ``$text`` on each stored document as semiret's own index of that record tests it by its segments' word
    index: the metadata field read, the title not; in counts, reads, searches read deeper, boosts and deletes."""
    docs = [Document(f"d{i}", "cats " * (1 + i % 5) + "and dogs", title="Felines" if i % 2 else "",
                     metadata={"keywords": ["Pet care", "whiskers"] if i % 3 == 0 else "kennel"}) for i in range(60)]
    cls = BagOfTokensRetriever
    side = cls.documents.create(option_tools.build(cls.documents.Options, {}))
    batch, config, meta = side.encode(docs), side.index_config(), {"retriever": cls.name}
    config["analyzer"] = {**config["analyzer"], "text_fields": {"text": 2, "keywords": 1}}
    own = cls.from_index(cls.documents.index_class.build(tmp_path / "own", cls.documents.index_kind, [batch],
                                                         **config, extra_meta=meta), side)
    collection = cls.from_index(backend.build(next(_names), cls.documents.index_kind, [batch], **config,
                                              extra_meta=meta), side)
    for spec in ({"$text": "whiskers"}, {"$text": '"pet care" cats'}, {"$text": '"care whiskers"'},
                 {"$text": "felines"}, {"$not": {"$text": "kennel"}}):
        assert collection.count(spec) == own.count(spec), spec
        assert sorted(d.id for d in collection.iter_documents(spec)) == sorted(d.id for d in own.iter_documents(spec))
        assert collection.search(["cats", "dogs"], k=5, filter=spec).scores == \
            own.search(["cats", "dogs"], k=5, filter=spec).scores, spec
        boost = {"filter": spec, "weight": 3}  # (every document scores 1 for "cats": 3 where the filter passes)
        assert [h.score for h in collection.search("cats", k=60, boost=boost)] == \
            [h.score for h in own.search("cats", k=60, boost=boost)], spec
    assert (own.count({"$text": "whiskers"}), own.count({"$text": "felines"})) == (20, 0)
    assert collection.delete_where({"$text": "whiskers"}) == 20 and collection.count() == 40

def test_a_collection_refuses_more_hits_than_milvus_returns(backend):
    collection = BagOfTokensRetriever.build(TINY_DOCS, next(_names), backend=backend)
    with pytest.raises(SemiretError, match="returns at most 16,384 hits a query, not k = 20,000"):
        collection.search("cats", k=20_000)


def test_a_collection_deletes_by_filter(backend):
    collection = BagOfTokensRetriever.build([Document("a", "cats", metadata={"pet": "cat"}),
                                             Document("b", "dogs", metadata={"pet": "dog"}), Document("c", "cats")],
                                            next(_names), backend=backend)
    assert collection.delete_where({"pet": "cat"}) == 1 and collection.delete_where({"pet": "cat"}) == 0
    assert sorted(d.id for d in collection.iter_documents()) == ["b", "c"]


def _random_metadata(rng) -> dict:
    """Values of every JSON type a filter meets: numbers written as integers and as floats, strings (accented and
    CJK too), booleans, null, lists of those, objects, missing fields."""
    scalars = [2020, 2020.0, 2021, 7.5, -3, "pub", "web", "2020", "café", "東京", True, False, None, 0, 1]
    metadata = {}
    for field in ("year", "source", "tags", "flag", "nested", "a/b"):  # (Milvus reads "a/b" as a path)
        draw = rng.random()
        if draw < 0.2:
            continue
        if field == "nested" and draw < 0.6:
            metadata[field] = {"name": rng.choice(scalars)} if draw < 0.4 else [{"name": rng.choice(scalars)}]
        elif draw < 0.55:
            metadata[field] = [rng.choice(scalars) for _ in range(rng.randint(0, 3))]
        else:
            metadata[field] = rng.choice(scalars)
    return metadata


def _random_filter(rng, depth: int = 0) -> dict:
    fields = ["year", "source", "tags", "flag", "a/b", "nested.name", "nested"]
    values = [2020, 2020.0, 2021, 7.5, -3, "pub", "web", "2020", "café", "東京", True, False, None, 0, 1,
              2**70]  # (no infinity: filters refuse one, no document holds one)
    draw = rng.random()
    if depth < 2 and draw < 0.15:
        return {"$or": [_random_filter(rng, depth + 1) for _ in range(rng.randint(1, 3))]}
    if depth < 2 and draw < 0.25:
        return {"$and": [_random_filter(rng, depth + 1) for _ in range(2)]}
    if depth < 2 and draw < 0.32:
        return {"$not": _random_filter(rng, depth + 1), rng.choice(fields[:4]): rng.choice(values)}
    field = rng.choice(fields)
    if draw < 0.40:
        return {field: {"exists": rng.random() < 0.5}}
    if draw < 0.48:
        return {field: {"gte": 2020}}
    if draw < 0.70:
        return {field: rng.sample(values, rng.randint(1, 3))}
    return {field: rng.choice(values)}


def test_filters_pushed_down_narrow_milvus_to_a_superset_and_stay_exact(backend, tmp_path):
    """What Milvus is asked to test of a filter (semiret.indexes.milvus.milvus_expression) never loses a document
    the filter passes, whatever JSON types the metadata mixes (checked against MetadataFilter.matches on 300
    random filters), and counts, reads and searches through it equal semiret's own index's."""
    import random

    from semiret.indexes.filters import MetadataFilter
    from semiret.indexes.milvus import milvus_expression

    rng = random.Random(7)
    docs = [Document(f"d{i}", "cats " * (1 + i % 5) + "dogs", metadata=_random_metadata(rng)) for i in range(150)]
    collection = BagOfTokensRetriever.build(docs, next(_names), backend=backend)
    own = BagOfTokensRetriever.build(docs, tmp_path / "own")
    pushed = 0
    for _ in range(300):
        spec = _random_filter(rng)
        wanted = MetadataFilter(spec)
        expected = {d.id for d in docs if wanted.matches(d.metadata, d)}
        expression = milvus_expression(wanted.spec)
        if expression:
            pushed += 1
            rows = backend.client.query(collection.index.name, filter=expression, output_fields=[ID_FIELD_NAME])
            narrowed = {row[ID_FIELD_NAME] for row in rows}
            assert expected <= narrowed, (spec, expression, sorted(expected - narrowed))
        assert collection.count(spec) == own.count(spec) == len(expected), spec
    assert pushed > 120  # most of the random filters had a part Milvus tests
    spec = {"source": ["pub", "café"], "$not": {"flag": True}}
    found, expected = collection.search(["cats", "dogs"], k=7, filter=spec), own.search(["cats", "dogs"], k=7, filter=spec)
    assert found.scores == expected.scores and all(len(ids) == 7 for ids in found.ids)


def test_a_pushed_down_filter_finds_matches_beyond_milvuss_deepest_search(backend, monkeypatch):
    """A filter Milvus tests narrows its search, so the matching documents are found however far down the
    unfiltered ranking they are (here below the 40 hits a search may return: Milvus's 16,384 made small)."""
    from semiret.indexes.filters import MetadataFilter
    from semiret.indexes.milvus import MilvusIndex

    docs = [Document(f"d{i}", "cats " * (2 if i < 100 else 1) + "dogs", metadata={"pet": "cat" if i >= 100 else "dog"})
            for i in range(110)]
    collection = BagOfTokensRetriever.build(docs, next(_names), backend=backend)
    monkeypatch.setattr(MilvusIndex, "max_top_k", 40)
    found = collection.search("cats", k=5, filter={"pet": "cat"})
    assert len(found) == 5 and all(int(hit.id[1:]) >= 100 for hit in found)
    assert collection.index.narrowed(MetadataFilter({"pet": "cat"})).n_docs == 10
    old = MilvusIndex(collection.index.backend, collection.index.name, {**collection.index.meta, "metadata_field": False})
    assert old.narrowed(MetadataFilter({"pet": "cat"})) is old  # a collection made before the field: read through


def test_an_id_filter_is_pushed_down_as_the_primary_key_with_or_without_stored_texts(backend, tmp_path,
                                                                                      monkeypatch):
    """``$id`` is pushed down as the primary key's membership (a collection without stored texts found nothing: its
    hits were tested on stored documents it has not), so Milvus returns exactly those ids' best k in one search,
    with their unfiltered scores, however far down the unfiltered ranking (Milvus's 16,384 made 10 here), no stored
    document read; beside a metadata condition under $and and $or, as semiret's own index finds; counted, scrolled
    and deleted by it too."""
    from semiret.indexes.filters import MetadataFilter
    from semiret.indexes.milvus import MilvusIndex, milvus_expression
    from semiret.search import VectorsRetriever

    rng = np.random.default_rng(5)
    docs = [Document(f"v{i}", f"text {i}", metadata={"pet": "cat" if i % 3 == 0 else "dog"}, vector=rng.normal(size=6))
            for i in range(40)]
    query = rng.normal(size=6)
    own = VectorsRetriever.build(docs, tmp_path / "own")
    stored = VectorsRetriever.build(docs, next(_names), backend=backend)
    bare = VectorsRetriever.build(docs, next(_names), backend=backend, store_texts=False)
    unfiltered = {hit.id: hit.score for hit in bare.search(query, k=40)}
    ids = list(unfiltered)[-5:]  # the last 5 of the unfiltered ranking: beyond Milvus's deepest search below
    searches, reads = [], []
    monkeypatch.setattr(MilvusIndex, "max_top_k", 10)
    spied_search, spied_read = MilvusIndex.search, MilvusIndex.get_documents
    monkeypatch.setattr(MilvusIndex, "search", lambda self, *a, **kw: searches.append(self.where) or spied_search(
        self, *a, **kw))
    monkeypatch.setattr(MilvusIndex, "get_documents", lambda self, *a: reads.append(a) or spied_read(self, *a))
    for collection in (stored, bare):
        searches.clear(), reads.clear()
        found = collection.search(query[None], k=5, filter={"$id": [*ids, "absent"]})  # (ids, scores: no lookup)
        assert sorted(found.ids[0]) == sorted(ids) and not reads
        assert found.scores[0] == pytest.approx([unfiltered[doc_id] for doc_id in found.ids[0]], rel=1e-6)
        assert len(searches) == 1 and searches[0].startswith("id in [")  # no deeper search
        assert collection.count({"$id": [*ids, "absent"]}) == 5
        assert collection.scroll(filter={"$id": ids}, limit=10).ids == sorted(ids)
    assert bare.search(query, k=5, filter={"$id": ids, "$or": [{"$id": "v7"}]}) == [] and searches[-1].count(
        "id in [") == 2
    monkeypatch.undo()  # (what Milvus cannot test, a $not, is read no deeper than its deepest search)
    for spec in ({"$and": [{"$id": ids + ["v0", "v3"]}, {"pet": "cat"}]}, {"$or": [{"$id": ids}, {"pet": "cat"}]},
                 {"$or": [{"$id": ids}, {"$not": {"pet": "dog"}}]}, {"$id": ["v0", "v1", "v2", "v3"],
                                                                     "$not": {"pet": "dog"}}):
        expected = own.search(query, k=8, filter=spec)
        found = stored.search(query, k=8, filter=spec)
        assert [hit.id for hit in found] == [hit.id for hit in expected], spec
        assert [hit.score for hit in found] == pytest.approx([hit.score for hit in expected], rel=1e-6)
        assert stored.count(spec) == own.count(spec), spec
    pushed = MetadataFilter({"$or": [{"$id": ["v1"]}, {"pet": "cat"}], "$id": ["v2"]}).spec
    assert milvus_expression(pushed).count("id in ['") == 2 and "metadata" in milvus_expression(pushed)
    assert milvus_expression(pushed, metadata=False) == "id in ['v2']"  # (an $or only when all its parts push)
    assert stored.delete_where({"$id": ids[:2]}) == bare.delete_where({"$id": [*ids[:2], "absent"]}) == 2
    assert stored.count() == bare.count() == 38 and bare.count({"$id": ids}) == 3


def test_ids_an_id_filter_cannot_write_are_left_out_or_left_to_semiret(backend):
    """Ids holding ' or \\ (no collection holds them) are left out of what Milvus is asked; others are
    single-quoted as pymilvus's lookups write them, so one holding " (an earlier semiret's) is found; one holding a
    control character is not pushed down, the ids tested on the hits instead."""
    from semiret.indexes.filters import MetadataFilter
    from semiret.indexes.milvus import VECTOR_FIELD, milvus_expression
    from semiret.search import VectorsRetriever

    rng = np.random.default_rng(6)
    odd = ["a b", "é東", "x/y", "😀", "v1"]
    name = next(_names)
    collection = VectorsRetriever.build([Document(i, "text", vector=rng.normal(size=6)) for i in odd], name,
                                        backend=backend, store_texts=False)
    backend.client.upsert(name, [{ID_FIELD_NAME: 'zz"q', VECTOR_FIELD: rng.normal(size=6).tolist()}])

    def expression(ids):
        return milvus_expression(MetadataFilter({"$id": ids}).spec)

    assert expression([*odd, 'zz"q', "it's", "b\\c", "x" * 600]) == \
        "id in ['a b', 'v1', 'x/y', 'zz\"q', 'é東', '😀']"
    assert expression(["it's"]) == "id in ['']" and expression(["a\tb", "v1"]) == ""
    query = rng.normal(size=6)
    for ids, expected in (([*odd, 'zz"q', "it's", "b\\c"], [*odd, 'zz"q']), (["it's"], []), (["a\tb", "v1"], ["v1"])):
        assert sorted(hit.id for hit in collection.search(query, k=10, filter={"$id": ids})) == sorted(expected), ids
        assert collection.count({"$id": ids}) == len(expected), ids


def test_ties_are_ranked_by_id_so_pages_are_slices_of_one_ranking(backend):
    """Bag-of-tokens scores tie constantly, and Milvus orders equal scores, and chooses which make the cut,
    differently for each limit: hits are ranked by (score, id), the tie group at the cut searched to its end."""
    documents = [Document(f"t{i:02d}", "protein kinase" if i % 2 else "kinase cells") for i in range(40)]
    name = next(_names)
    collection = BagOfTokensRetriever.build(documents, name, backend=backend)
    whole = [hit.id for hit in collection.search("protein kinase", k=40)]
    assert whole[:20] == [f"t{i:02d}" for i in range(1, 40, 2)]  # the tied best, in id order
    pages = [hit.id for offset in range(0, 30, 3) for hit in collection.search("protein kinase", k=offset + 3)[offset:]]
    assert pages == whole[:30]


def test_overwrite_replaces_only_semiret_s_own_collections_of_any_shape(backend, tiny_bert):
    from pymilvus import DataType

    client = backend.client
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("pk", DataType.INT64, is_primary=True)
    schema.add_field("v", DataType.FLOAT_VECTOR, dim=4)
    index = client.prepare_index_params()
    index.add_index("v", index_type="FLAT", metric_type="IP")
    client.create_collection("someone_elses", schema=schema, index_params=index)
    with pytest.raises(IndexFormatError, match="not made by semiret"):
        BagOfTokensRetriever.build(TINY_DOCS, "someone_elses", backend=backend, overwrite=True)
    assert client.has_collection("someone_elses")
    name = next(_names)
    BagOfTokensRetriever.build(TINY_DOCS, name, backend=backend)  # rebuilt in one process with other fields:
    BagOfTokensRetriever.build(TINY_DOCS, name, backend=backend, overwrite=True, store_texts=False)
    DenseRetriever.build(TINY_DOCS, name, backend=backend, overwrite=True, model=str(tiny_bert))
    assert open_retriever(name, backend=backend).search("cats", k=1)
    from semiret.search import HybridRetriever

    with pytest.raises(SemiretError, match="'hybrid' index cannot live in Milvus"):  # said, not a TypeError
        HybridRetriever.build(TINY_DOCS, next(_names), backend=backend, neural="idf")


def test_an_overwrite_that_fails_leaves_the_old_collection_as_it_was(backend):
    """The replacement is built aside and takes the name only once complete: a build refused midway used to
    leave no collection at all."""
    name = next(_names)
    old = BagOfTokensRetriever.build([Document("old", "cats", metadata={"pet": "cat"})], name, backend=backend)
    batches = [_postings(["a", "b"], [[1], [2]], [[1.0], [1.0]]), _postings(["a"], [[3]], [[1.0]])]
    with pytest.raises(SemiretError, match="duplicate document id 'a'"):
        backend.build(name, "impact", batches, analyzer={"type": "test"}, vocab_size=10, overwrite=True)
    assert old.search("cats", k=1, filter={"pet": "cat"})[0].id == "old"
    assert backend.asides(name) == []


def test_an_overwrite_carries_every_field_into_the_name(backend, monkeypatch):
    """On Milvus Lite (no rename) the complete collection is copied under the name: vectors, texts, metadata;
    on a server it is renamed (a recorded rename stands in for the server here)."""
    name = next(_names)
    BagOfTokensRetriever.build(TINY_DOCS, name, backend=backend)
    documents = [Document(f"n{i}", "protein kinase " * (i + 1), metadata={"year": 2000 + i}) for i in range(3)]
    lite = BagOfTokensRetriever.build(documents, name, backend=backend, overwrite=True)
    assert lite.index.name == name and lite.index.n_docs == 3 and backend.asides(name) == []
    reopened = open_retriever(name, backend=backend)
    assert [hit.id for hit in reopened.search("kinase", k=3, filter={"year": 2001})] == ["n1"]
    assert reopened.index.get_document("n2").text == documents[2].text
    renamed = []

    def rename_collection(old_name, new_name):  # a server's one step, in two (the stand-in's documents: 1)
        renamed.append((old_name, new_name))
        BagOfTokensRetriever.build(documents[:1], new_name, backend=backend)  # refused had the old one stayed
        backend.drop(old_name)

    monkeypatch.setattr("semiret.indexes.milvus.is_lite_file", lambda uri: False)
    monkeypatch.setattr(backend.client, "rename_collection", rename_collection)
    server = BagOfTokensRetriever.build(documents, name, backend=backend, overwrite=True)
    assert len(renamed) == 1 and renamed[0][0].startswith(f"{BUILDING_PREFIX}{name}_") and renamed[0][1] == name
    assert server.index.name == name
    assert open_retriever(name, backend=backend).index.n_docs == 1 and backend.asides(name) == []
    build = "0" * 12
    assert aside_name("x" * 250, build) != aside_name("x" * 249, build) and len(aside_name("x" * 250, build)) <= 255


def test_an_overwrite_stopped_midway_is_said_by_open_and_finished_by_the_next_build(backend, monkeypatch):
    """A Lite copy that failed after its first page left a collection that opened as complete, and one stopped
    after the old collection was dropped left only "no collection"; a semiret collection of the aside's name that no
    overwrite made was dropped as remains."""
    from semiret.indexes import milvus

    name = next(_names)
    BagOfTokensRetriever.build(TINY_DOCS, name, backend=backend)
    monkeypatch.setattr(milvus, "ROWS_PER_REQUEST", 2)
    client, upsert, calls = backend.client, backend.client.upsert, []

    def failing_copy(collection, rows, **kwargs):  # the copy's second page fails (a full disk)
        calls.append(collection)
        if collection == name and calls.count(name) == 2:
            raise OSError("disk full")
        return upsert(collection, rows, **kwargs)

    documents = [Document(f"n{i}", "protein kinase") for i in range(5)]
    monkeypatch.setattr(client, "upsert", failing_copy)
    with pytest.raises(OSError):
        BagOfTokensRetriever.build(documents, name, backend=backend, overwrite=True)
    with pytest.raises(IndexFormatError, match=f"incomplete.*whole in '{BUILDING_PREFIX}{name}_"):
        backend.open(name)
    monkeypatch.setattr(client, "upsert", upsert)
    with pytest.raises(SemiretError, match="duplicate"):  # an overwrite that fails keeps the stopped one's copy
        backend.build(name, "impact", [_postings(["a", "a"], [[1], [2]], [[1.0], [1.0]])], analyzer={"type": "test"},
                      vocab_size=10, overwrite=True)
    with pytest.raises(IndexFormatError, match="incomplete"):  # (it dropped it first, and the part opened as whole)
        backend.open(name)
    assert BagOfTokensRetriever.build(documents, name, backend=backend, overwrite=True).index.n_docs == 5
    assert backend.open(name).n_docs == 5 and backend.asides(name) == []

    create = MilvusBackend._create_collection

    def stopped_before_the_copy(self, collection, *args):  # a process killed after the old collection was dropped
        if collection == name:
            raise OSError("stopped")
        return create(self, collection, *args)

    monkeypatch.setattr(MilvusBackend, "_create_collection", stopped_before_the_copy)
    with pytest.raises(OSError):
        BagOfTokensRetriever.build(documents[:3], name, backend=backend, overwrite=True)
    with pytest.raises(IndexFormatError, match=f"stopped after dropping.*in '{BUILDING_PREFIX}{name}_"):
        backend.open(name)
    monkeypatch.undo()
    assert BagOfTokensRetriever.build(documents[:2], name, backend=backend).index.n_docs == 2  # no overwrite needed
    assert backend.asides(name) == []

    other = next(_names)
    BagOfTokensRetriever.build(TINY_DOCS, other, backend=backend)
    users = f"{BUILDING_PREFIX}{other}_mine"
    BagOfTokensRetriever.build(TINY_DOCS[:2], users, backend=backend)  # a user's, by an aside's name: not remains
    assert BagOfTokensRetriever.build(documents, other, backend=backend, overwrite=True).index.n_docs == 5
    assert backend.open(users).n_docs == 2 and backend.asides(other) == []


def test_overwrites_at_once_build_apart_and_only_stopped_ones_are_dropped(backend):
    """Two overwrites of one name wrote into one collection aside, and each dropped the other's as remains: each
    now builds its own, and a build drops only what builds that stopped left (this machine's ended processes, this
    process's builds no longer running, older semiret's), never a running build's or another machine's."""
    import os
    import socket
    import subprocess
    import sys

    from semiret.indexes import milvus

    name = next(_names)
    BagOfTokensRetriever.build(TINY_DOCS, name, backend=backend)
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    here = socket.gethostname()
    builders = {"running elsewhere": {"host": here, "pid": os.getppid(), "build": "a1"},
                "ended": {"host": here, "pid": int(ended.stdout), "build": "a2"},
                "running here": {"host": here, "pid": os.getpid(), "build": "a3"},
                "finished here": {"host": here, "pid": os.getpid(), "build": "a4"},
                "another machine": {"host": here + "-other", "pid": 1, "build": "a5"},
                "older semiret": None}
    for what, builder in builders.items():
        aside = aside_name(name, (builder or {"build": "a6"})["build"])
        backend.build(aside, "impact", [_postings(["x"], [[1]], [[1.0]])], analyzer={"type": "test"}, vocab_size=10,
                      extra_meta={"building_for": name, **({"builder": builder} if builder else {})})
    milvus._BUILDS_RUNNING.add("a3")
    try:
        BagOfTokensRetriever.build(TINY_DOCS[:3], name, backend=backend, overwrite=True)
    finally:
        milvus._BUILDS_RUNNING.discard("a3")
    left = {builder["build"] for _, builder in backend.asides(name)}
    assert left == {"a1", "a3", "a5"}
    assert backend.open(name).n_docs == 3


def test_a_milvus_lite_file_belongs_to_one_process(tmp_path):
    """milvus-lite's own lock is removed by a second process it refuses; semiret's is kept until its holder ends."""
    import subprocess
    import sys

    database = tmp_path / "lite.db"
    opened = MilvusBackend(str(database))
    BagOfTokensRetriever.build(TINY_DOCS, "docs", backend=opened)
    other = [sys.executable, "-c", "import sys; from semiret.search import open_retriever; "
             f"open_retriever('docs', backend='milvus:{database}').search('cats')"]
    for _ in range(2):  # refused every time, not only the first
        refused = subprocess.run(other, capture_output=True, text=True)
        assert refused.returncode != 0 and "open in another process" in refused.stderr, refused.stderr
    served = CliRunner().invoke(app, ["serve", "--index", "docs", "--backend", f"milvus:{database}", "--workers", "2"])
    assert served.exit_code != 0 and "one process serves" in served.output


def test_ids_milvus_cannot_look_up_are_refused_before_anything_is_written(backend):
    """pymilvus writes ids into its lookups unescaped: an id holding ' failed its write half-way (1,001 of 1,500
    documents written), one holding \\ was written and could then never be read, deleted or paged past."""
    name = next(_names)
    retriever = BagOfTokensRetriever.build(TINY_DOCS, name, backend=backend)
    for odd in ("it's", "b\\c", 'zz"q'):
        batch = [Document(f"n{i}", "cats and dogs") for i in range(1500)] + [Document(odd, "cats")]
        refused = re.escape(f"document id {odd!r} cannot go into Milvus collection {name!r}")
        with pytest.raises(SemiretError, match=refused):
            retriever.add(batch)
        assert retriever.index.n_docs == len(TINY_DOCS)
        with pytest.raises(SemiretError, match="cannot go into Milvus"):
            BagOfTokensRetriever.build([Document(odd, "cats")], next(_names), backend=backend)
    assert retriever.delete(["it's"], missing_ok=True) == 0 and retriever.get_documents(["b\\c"]) == {}
    with pytest.raises(SemiretError, match="cannot delete \"it's\": no such document"):
        retriever.delete(["it's"])
    # a document of such an id an earlier semiret wrote is read and deleted still (single quotes hold a ")
    from semiret.indexes.milvus import DOCUMENT_FIELD, METADATA_FIELD, VECTOR_FIELD

    old = Document('zz"q', "cats")
    backend.client.upsert(name, [{ID_FIELD_NAME: old.id, VECTOR_FIELD: {2000: 1.0}, DOCUMENT_FIELD: old.to_json(),
                                  METADATA_FIELD: {}}])
    assert retriever.get_documents([old.id]) == {old.id: old}
    assert retriever.delete([old.id]) == 1 and retriever.index.n_docs == len(TINY_DOCS)


def test_a_replace_refused_for_its_length_deletes_nothing_of_a_document_s_passages(backend):
    """Over passages, a replace deleted the document's old passages, then the new version was refused for its
    length: the document was gone."""
    retriever = BagOfTokensRetriever.build([Document("A", " ".join(f"w{i}" for i in range(30)))], next(_names),
                                           backend=backend, chunking=10)
    before = sorted(retriever.index.sorted_ids())
    with pytest.raises(SemiretError, match="longer than the 65535 bytes"):
        retriever.add([Document("A", "short new text", metadata={"blob": "x" * 70_000})], replace=True)
    assert sorted(retriever.index.sorted_ids()) == before == ["A#0", "A#1", "A#2"]


def test_a_collection_milvus_refuses_to_make_is_not_left_behind_nor_a_lite_file_a_search_names(backend, tiny_bert,
                                                                                              tmp_path):
    """Milvus Lite refuses HNSW: the collection it had made stayed, so the next build found it "already exists" and
    opening it gave an empty HNSW collection. A search naming a Lite file that is not there made it (and its
    folders)."""
    name = next(_names)
    with pytest.raises(SemiretError, match="HNSW"):
        DenseRetriever.build(TINY_DOCS, name, backend=backend, model=str(tiny_bert), ann="hnsw")
    assert not backend.exists(name)
    DenseRetriever.build(TINY_DOCS, name, backend=backend, model=str(tiny_bert))  # not "already exists"
    typo = tmp_path / "typo" / "m.db"
    with pytest.raises(IndexFormatError, match=f"no collection 'docs': there is no Milvus Lite file {typo}"):
        open_retriever("docs", backend=f"milvus:{typo}")
    assert not (tmp_path / "typo").exists()


def test_eval_says_which_build_options_an_existing_collection_ignores(beir_dir, backend, tiny_bert, tmp_path, caplog):
    """Over a local index eval warns that build options apply only when it builds; over a collection it said
    nothing and searched the collection's own model."""
    import shutil

    from semiret.evaluation.evaluate import evaluate

    name = next(_names)
    DenseRetriever.build(Collection(beir_dir).corpus(), name, backend=backend, model=str(tiny_bert))
    other = shutil.copytree(tiny_bert, tmp_path / "other-model")
    with caplog.at_level("WARNING"):
        evaluate(str(beir_dir), "dense", index=name, backend=backend, model=str(other))
    assert f"{name} exists and is searched as it was built: model=" in caplog.text


def test_two_threads_overwriting_one_lite_collection_do_not_mix_their_copies(backend, monkeypatch):
    """On Milvus Lite the complete collection aside is copied under the name a page at a time; a second thread's
    overwrite dropped and made the name again during the first's copy, whose later pages went into it (both said
    they succeeded). The copies now take turns: the name holds one build's documents, the last to finish."""
    import threading

    from semiret.indexes import milvus

    name = next(_names)
    BagOfTokensRetriever.build(TINY_DOCS, name, backend=backend)
    monkeypatch.setattr(milvus, "ROWS_PER_REQUEST", 2)
    client, upsert, second_done = backend.client, backend.client.upsert, threading.Event()
    first_copy = []

    def pausing_upsert(collection, rows, **kwargs):  # the first build pauses after its copy's first page
        done = upsert(collection, rows, **kwargs)
        if collection == name and threading.current_thread().name == "first" and not first_copy:
            first_copy.append(True)
            second_done.wait(3)  # the second finishes meanwhile, unless it waits for this copy
        return done

    monkeypatch.setattr(client, "upsert", pausing_upsert)
    ids = [f"n{i}" for i in range(5)]
    errors = []

    def overwrite(word: str, then: threading.Event | None = None):
        try:
            BagOfTokensRetriever.build([Document(i, f"{word} {i}") for i in ids], name, backend=backend,
                                       overwrite=True)
        except Exception as exc:  # noqa: BLE001 (said by the assertion below)
            errors.append(exc)
        if then is not None:
            then.set()

    first = threading.Thread(target=overwrite, args=("alpha",), name="first")
    first.start()
    while not first_copy and first.is_alive():
        threading.Event().wait(0.01)
    second = threading.Thread(target=overwrite, args=("bravo", second_done), name="second")
    second.start()
    first.join()
    second.join()
    assert not errors
    words = {backend.open(name).get_document(i).text.split()[0] for i in ids}
    assert len(words) == 1 and backend.asides(name) == []


def test_a_collection_of_vectors_brought_by_documents(backend, tmp_path):
    from semiret.search import VectorsRetriever

    rng = np.random.default_rng(4)
    documents = [Document(f"v{i}", f"text {i}", vector=rng.normal(size=6)) for i in range(12)]
    name = next(_names)
    collection = VectorsRetriever.build(documents, name, backend=backend)
    local = VectorsRetriever.build(documents, tmp_path / "local")
    assert [h.id for h in collection.search(documents[3].vector, k=3)] == [h.id for h in local.search(
        documents[3].vector, k=3)]
    np.testing.assert_allclose(collection.index.get_vector("v3"), local.index.get_vector("v3"), rtol=1e-6)
    assert collection.index.get_vector("missing") is None
    assert [h.id for h in collection.recommend(["v3"], k=2)] == [h.id for h in local.recommend(["v3"], k=2)]
    assert collection.sync(documents).unchanged == len(documents)  # the vectors read back: nothing rewritten


def test_vector_prf_over_a_collection_refuses_a_filter_milvus_tests_in_part(backend):
    """Milvus searches narrowed by the part of a filter it tests: vector PRF's feedback documents would not all pass
    the rest, so PRF with a filter is refused there; without one it searches as over semiret's own index."""
    from semiret.search import VectorsRetriever, open_retriever

    rng = np.random.default_rng(0)
    docs = [Document(f"d{i}", "x", metadata={"n": i}, vector=rng.normal(size=8)) for i in range(60)]
    name = next(_names)
    VectorsRetriever.build(docs, name, backend=backend)
    collection = open_retriever(name, backend=backend, prf_depth=3)
    query = rng.normal(size=8)
    with pytest.raises(SemiretError, match="vector PRF .* with a filter over a Milvus collection"):
        collection.search(query, k=5, filter={"n": {"gte": 30}})
    own = VectorsRetriever.build(docs, None, prf_depth=3)
    assert [h.id for h in collection.search(query, k=5)] == [h.id for h in own.search(query, k=5)]
