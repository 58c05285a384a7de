"""Searches filtered on the documents' stored metadata: the filter's conditions, filtered searches equal to the full
ranking filtered afterwards (however deep the matches lie), metadata kept through add, merge and corpus files, and
the command line's and the service's filters."""

from __future__ import annotations

import datetime
import functools
import json
import random
import sys
import threading

import numpy as np
import pytest
from typer.testing import CliRunner

from semiret.cli import app
from semiret.data import Document
from semiret.data.collection import iter_corpus
from semiret.errors import DataFormatError, SemiretError
from semiret.search import BM25Retriever, HybridRetriever, open_retriever
from semiret.indexes.filters import MetadataFilter, check_filter_size
from semiret.serving import ServeSettings, create_app

from helpers import LocalClient, TINY_DOCS, write_jsonl

WORDS = "statins heart cancer risk trial dose cohort blood pressure diet sleep".split()


def _corpus(n: int = 300, seed: int = 7) -> list[Document]:
    rng = random.Random(seed)
    return [Document(f"doc{i}", " ".join(rng.choices(WORDS, k=rng.randint(3, 12))),
                     metadata={"year": 2000 + i % 25, "source": ["pubmed", "arxiv", "web"][i % 3],
                               "tags": rng.sample(["a", "b", "c", "d"], 2), "venue": {"name": f"v{i % 4}"}})
            for i in range(n)]


@pytest.mark.parametrize("spec, metadata, expected", [
    ({"source": "pubmed"}, {"source": "pubmed"}, True),
    ({"source": "pubmed"}, {"source": "arxiv"}, False),
    ({"source": ["arxiv", "pubmed"]}, {"source": "pubmed"}, True),
    ({"tags": "b"}, {"tags": ["a", "b"]}, True),                   # a list field: any element
    ({"tags": ["c", "d"]}, {"tags": ["a", "b"]}, False),
    ({"year": 2020}, {"year": 2020}, True),
    ({"year": 2020}, {"year": "2020"}, False),                     # typed, as JSON
    ({"year": 2020}, {"year": 2020.0}, True),
    ({"year": {"gte": 2019, "lt": 2021}}, {"year": 2020}, True),
    ({"year": {"gte": 2019, "lt": 2021}}, {"year": 2021}, False),
    ({"year": {"gt": 2019}}, {"year": "2020"}, False),             # a string against numeric bounds
    ({"date": {"gte": "2020-01-01"}}, {"date": "2020-03-04"}, True),
    ({"venue.name": "v1"}, {"venue": {"name": "v1"}}, True),        # nested
    ({"venue.name": "v1"}, {"venue": "v1"}, False),
    ({"source": "pubmed", "year": 2020}, {"source": "pubmed", "year": 2019}, False),  # all fields
    ({"source": "pubmed"}, {}, False),                              # missing field
    ({"source": "pubmed"}, None, False),                            # no metadata
    ({"source": ("arxiv", "pubmed")}, {"source": "pubmed"}, True),  # a tuple or a set: any of them, as a list
    ({"source": {"arxiv", "pubmed"}}, {"source": "pubmed"}, True),
    ({"tweet": 1234567890123456789}, {"tweet": 1234567890123456788}, False),  # large integers exactly
    ({"year": np.int64(2020)}, {"year": 2020}, True),               # numpy numbers as Python's
    ({"authors.name": "x"}, {"authors": [{"name": "y"}, {"name": "x"}]}, True),  # across an array of objects
    ({"authors.name": "z"}, {"authors": [{"name": "y"}, {"name": "x"}]}, False),
    ({"authors.tags": "b"}, {"authors": [{"tags": ["a"]}, {"tags": ["b"]}]}, True),
    ({"x": None}, {"x": None}, True),                              # null matches null; a missing field, nothing
    ({"x": None}, {}, False),
    ({"doi": {"exists": True}}, {"doi": None}, True),              # null is a value: the field exists
    ({"doi": {"exists": True}}, {"year": 2020}, False),
    ({"doi": {"exists": False}}, None, True),
    ({"authors.name": {"exists": True}}, {"authors": [{"id": 1}]}, False),
    ({"$not": {"source": "web"}}, {"source": "pubmed"}, True),
    ({"$not": {"source": "web"}}, {"source": "web"}, False),
    ({"$not": {"source": "web"}}, {}, True),                        # no such field: passes the negation
    ({"$not": {"tags": "b"}}, {"tags": ["a", "b"]}, False),          # a list holding it
    ({"$or": [{"source": "web"}, {"year": {"gte": 2020}}]}, {"source": "pubmed", "year": 2021}, True),
    ({"$or": [{"source": "web"}, {"year": {"gte": 2020}}]}, {"source": "pubmed", "year": 2019}, False),
    ({"$and": [{"source": "web"}, {"year": 2020}]}, {"source": "web", "year": 2020}, True),
    ({"$and": [{"source": "web"}, {"year": 2020}]}, {"source": "web", "year": 2021}, False),
    ({"year": 2020, "$not": {"source": "web"}}, {"source": "web", "year": 2020}, False),  # beside fields: AND
    ({"$not": {"$or": [{"a": 1}, {"b": 2}]}}, {"a": 3, "b": 2}, False),
    ({"$not": {"$not": {"a": 1}}}, {"a": 1}, True),
    # ISO dates and times compare as instants, whatever their offsets (none: UTC), as Qdrant's datetime ranges
    ({"m": {"lt": "2026-11-30T12:19:30+01:00"}}, {"m": "2026-11-30T11:20:00Z"}, False),
    ({"m": {"lt": "2026-11-30T12:19:30+01:00"}}, {"m": "2026-11-30T11:19:00Z"}, True),
    ({"m": {"gte": "2026-11-30 12:19:30"}}, {"m": "2026-11-30T12:19:35Z"}, True),
    ({"m": {"gte": "2026-11-30 12:19:30"}}, {"m": "2026-11-30T13:19:35+02:00"}, False),
    ({"m": {"gte": "2026-11-30"}}, {"m": "2026-11-30T00:00:00-05:00"}, True),
    ({"m": {"gte": datetime.date(2026, 11, 30)}}, {"m": "2026-11-29T23:00:00-02:00"}, True),
    ({"m": {"gte": datetime.datetime(2026, 11, 30, 13, tzinfo=datetime.timezone.utc)}}, {"m": "2026-11-30"}, False),
    ({"m": {"gte": "2026-01-01"}}, {"m": "not a date"}, False),     # no date: outside a range of dates
    ({"code": {"gte": "20200101"}}, {"code": "3"}, True),           # no dash: a code, compared as a string
])
def test_conditions(spec, metadata, expected):
    assert MetadataFilter(spec).matches(metadata) is expected


@pytest.mark.parametrize("spec, message", [
    ({}, "non-empty JSON object"),
    ("source=pubmed", "non-empty JSON object"),
    ({"year": {"from": 2019}}, "a range takes gt, gte, lt, lte, got from"),
    ({"year": {"gte": 2019, "lt": "2021"}}, "all numbers or all strings"),
    ({"source": []}, "a non-empty list"),
    ({"source": [["a"]]}, "a non-empty list"),
    ({"a..b": 1}, "names joined by dots"),
    ({"when": object()}, "is no single value"),
    ({"$nor": [{"a": 1}]}, r"the keys starting with \$ are \$and, \$or, \$not"),
    ({"$or": []}, r"\$or takes a non-empty list of filter objects"),
    ({"$or": {"a": 1}}, r"\$or takes a non-empty list"),
    ({"$not": {}}, r"\$not's filter is a non-empty JSON object"),
    ({"$and": [{"a": 1}, "b=2"]}, r"each filter of \$and is a non-empty JSON object"),
    ({"$not": {"year": {"from": 1}}}, "a range takes gt, gte, lt, lte"),   # checked however deep
    ({"doi": {"exists": "yes"}}, "exists takes true or false, alone"),
    ({"doi": {"exists": True, "gte": 1}}, "exists takes true or false, alone"),
    (functools.reduce(lambda inner, _: {"$not": inner}, range(40), {"a": 1}), "nests at most 32 levels"),
    # a bound that reads as no instant beside dates, or one written as a date, compared the range as strings
    ({"t": {"gte": "2026-02-01", "lte": "2026-02-29"}}, "the range's bound lte '2026-02-29' is no ISO 8601 date"),
    ({"t": {"gte": "2026-02-01", "lt": "2026-03"}}, "bound lt '2026-03' is no ISO 8601 date"),
    ({"t": {"gte": "2026-02-01T00:00:00 UTC"}}, "bound gte '2026-02-01T00:00:00 UTC' is no ISO 8601 date"),
    ({"score": float("nan")}, "nan is no number a document holds"),  # matched nothing, silently
    ({"score": {"lt": float("inf")}}, "inf is no number a document holds"),
])
def test_bad_filters_are_clear_errors(spec, message):
    with pytest.raises(SemiretError, match=message):
        MetadataFilter(spec)


@pytest.mark.parametrize("spec, message", [
    ({"$or": [{"a": i} for i in range(1025)]}, "at most 1,024 conditions and operators"),
    ({"id": list(range(65_537))}, "lists hold at most 65,536 values"),
    ({"$text": "word " * 820}, "a string of a filter holds at most 4,096 characters, got one of 4,100"),
    ({"x" * 4097: 1}, "a string of a filter holds at most 4,096 characters"),  # a field's name too
])
def test_a_filter_larger_than_a_server_takes_is_refused_before_it_is_parsed(spec, message):
    """What a server asks of its clients' filters (parsed where a request arrives, a client's took seconds); the
    Python API and the command line take any (the passages of 66,000 documents looked up by their parents)."""
    with pytest.raises(SemiretError, match=message):
        check_filter_size(spec)
    assert MetadataFilter(spec).spec
    check_filter_size({"$or": [{"a": i} for i in range(1023)]})
    check_filter_size({"id": list(range(65_536))})
    check_filter_size({"$text": "word " * 818 + "words"})


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    docs = _corpus()
    path = tmp_path_factory.mktemp("filters") / "bm25"
    return docs, BM25Retriever.build(docs, path)


@pytest.mark.parametrize("spec", [{"source": "pubmed"}, {"year": {"gte": 2020}}, {"tags": ["a", "d"]},
                                  {"venue.name": "v3", "source": "web"}, {"year": 2024, "source": "arxiv"},
                                  {"$not": {"source": "pubmed"}, "year": {"lt": 2010}},
                                  {"$or": [{"tags": "a"}, {"venue.name": "v1"}], "$not": {"tags": "b"}},
                                  {"$and": [{"$not": {"year": {"lt": 2020}}}, {"$or": [{"source": "web"},
                                                                                       {"missing": None}]}]},
                                  {"missing": {"exists": False}, "venue": {"exists": True}, "year": 2001}])
def test_filtered_search_is_the_full_ranking_filtered(indexed, spec):
    docs, retriever = indexed
    metadata = {d.id: d.metadata for d in docs}
    wanted = MetadataFilter(spec)
    queries = ["statins heart", "blood pressure diet", "sleep cohort trial dose"]
    everything = retriever.search(queries, k=len(docs))
    filtered = retriever.search(queries, k=5, filter=spec)
    for all_ids, all_scores, ids, scores in zip(everything.ids, everything.scores, filtered.ids, filtered.scores):
        expected = [(d, s) for d, s in zip(all_ids, all_scores) if wanted.matches(metadata[d])][:5]
        assert list(zip(ids, scores)) == expected
        assert len(ids) == min(5, len(expected))


def test_a_match_deep_in_the_ranking_is_found(tmp_path):
    """One matching document ranked last of 400: the search deepens past its first 100 until it is reached."""
    docs = [Document(f"d{i}", "statins " * (400 - i) + "heart", metadata={"rare": i == 399}) for i in range(400)]
    retriever = BM25Retriever.build(docs, tmp_path / "index")
    assert retriever.search("statins", k=400)[-1].id == "d399"
    hits = retriever.search("statins", k=3, filter={"rare": True})
    assert [h.id for h in hits] == ["d399"]
    assert hits[0].metadata == {"rare": True}


def test_metadata_survives_add_merge_and_hybrid_indexes(tmp_path):
    docs = _corpus(60)
    retriever = BM25Retriever.build(docs[:40], tmp_path / "bm25")
    retriever.add(docs[40:])
    retriever.index.merge()
    merged = open_retriever(tmp_path / "bm25")
    assert merged.index.get_document("doc45").metadata == docs[45].metadata
    hybrid = HybridRetriever.build(docs, tmp_path / "hybrid", neural="bot")
    for searcher in (merged, hybrid):
        hits = searcher.search("statins heart", k=3, filter={"source": "web"})
        assert hits and all(h.metadata["source"] == "web" for h in hits)


def test_an_index_without_stored_documents_cannot_filter(tmp_path):
    retriever = BM25Retriever.build(_corpus(20), tmp_path / "index", store_texts=False)
    with pytest.raises(SemiretError, match="keeps no stored documents .* no metadata or words to filter on"):
        retriever.search("statins", filter={"source": "web"})


def test_corpus_files_carry_metadata(tmp_path):
    path = write_jsonl(tmp_path / "corpus.jsonl", [
        {"_id": "1", "text": "statins", "metadata": {"source": "pubmed"}},
        {"_id": "2", "text": "heart", "metadata": {}},
        {"_id": "3", "text": "cancer", "url": "ignored"}])
    documents = list(iter_corpus(path))
    assert [d.metadata for d in documents] == [{"source": "pubmed"}, None, None]
    assert documents[0].to_record()["metadata"] == {"source": "pubmed"} and "metadata" not in documents[1].to_record()
    write_jsonl(tmp_path / "bad.jsonl", [{"_id": "1", "text": "statins", "metadata": "pubmed"}])
    with pytest.raises(DataFormatError, match=r"bad.jsonl:1: field 'metadata' must be an object"):
        list(iter_corpus(tmp_path / "bad.jsonl"))
    with pytest.raises(SemiretError, match="a document's metadata must be an object"):
        Document("1", "text", metadata=["pubmed"])


def test_search_command_filters(indexed, tmp_path):
    docs, retriever = indexed
    runner = CliRunner()

    def hits(*flags):
        result = runner.invoke(app, ["search", "--index", str(retriever.index.path), "statins heart", "-k", "4",
                                     "--json", "--with-text", *flags])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout.splitlines()[0])["hits"]

    expected = retriever.search("statins heart", k=4, filter={"source": ["web", "arxiv"], "year": {"gte": 2010}})
    for flags in (["--filter", "source=web", "--filter", "source=arxiv", "--filter", 'year={"gte": 2010}'],
                  ["--filter", '{"source": ["web", "arxiv"], "year": {"gte": 2010}}']):
        found = hits(*flags)
        assert [h["id"] for h in found] == [h.id for h in expected]
        assert all(h["metadata"]["source"] in ("web", "arxiv") and h["metadata"]["year"] >= 2010 for h in found)
    bad = runner.invoke(app, ["search", "--index", str(retriever.index.path), "statins", "--filter", "source"])
    assert bad.exit_code == 2 and "write FIELD=VALUE" in bad.output
    combined = runner.invoke(app, ["search", "--index", str(retriever.index.path), "statins", "--filter",
                                   '$not={"source": "web"}'])
    assert combined.exit_code == 2 and "$and, $or and $not go in one JSON object" in combined.output
    # FIELD!=VALUE: none of the values (one field twice), and none of the fields (several)
    unlike = retriever.search("statins heart", k=4, filter={"$not": {"$or": [{"source": ["web", "arxiv"]},
                                                                             {"year": 2001}]}, "tags": "a"})
    found = hits("--filter", "source!=web", "--filter", "source!=arxiv", "--filter", "year!=2001",
                 "--filter", "tags=a")
    assert [h["id"] for h in found] == [h.id for h in unlike] and len(found) == 4
    assert all(h["metadata"]["source"] == "pubmed" and h["metadata"]["year"] != 2001 for h in found)


def test_filter_flags_read_values_as_corpus_cells_do_and_a_range_given_twice_is_said(tmp_path):
    """A TSV cell ``NaN`` is stored as the text; ``--filter score=NaN`` read it as no number and matched nothing
    (``score!=NaN`` everything). A range given in two flags was refused as "a value, a non-empty list ...";
    codes written like dates (``1000-00``) still compare as strings."""
    corpus = tmp_path / "t.tsv"
    corpus.write_text("id\ttext\tscore\tcode\n1\tcats\tNaN\t1e999\n2\tdogs\t3\t1500-20\n"
                      "3\tbirds\tInfinity\t007\n")
    runner = CliRunner()
    index = str(tmp_path / "idx")
    assert runner.invoke(app, ["index", "--data", str(corpus), "--out", index, "--metadata-fields",
                               "score,code"]).exit_code == 0

    def count(*flags):
        result = runner.invoke(app, ["count", index, *[part for flag in flags for part in ("--filter", flag)]])
        assert result.exit_code == 0, result.output
        return int(result.stdout)

    assert [count("score=NaN"), count("score=Infinity"), count("code=1e999"), count("score!=NaN")] == [1, 1, 1, 2]
    assert count('code={"gte": "1000-00", "lt": "2000-00"}') == 2  # 1500-20 and 1e999, as strings
    twice = runner.invoke(app, ["count", index, "--filter", 'score={"gte": 2}', "--filter", 'score={"lt": 4}'])
    assert twice.exit_code == 2 and "score is given twice, once as a range; a range's bounds go in one object" \
        in twice.output


def test_the_service_stores_metadata_and_filters(tmp_path):
    BM25Retriever.build(_corpus(30), tmp_path / "index")
    settings = ServeSettings({"docs": str(tmp_path / "index")}, api_key="key", write_process=False)
    with LocalClient(create_app(settings)) as client:
        added = client.put("/indexes/docs/documents", headers={"X-API-Key": "key"}, json={"documents": [
            {"_id": "new", "text": "statins heart statins", "metadata": {"source": "preprint"}}]})
        assert added.status_code == 200, added.text
        assert client.get("/indexes/docs/documents/new").json()["metadata"] == {"source": "preprint"}
        found = client.post("/indexes/docs/search", json={"queries": ["statins"], "filter": {"source": "preprint"},
                                                          "with_text": True}).json()["results"][0]
        assert [(h["id"], h["metadata"]) for h in found] == [("new", {"source": "preprint"})]
        wrong = client.post("/indexes/docs/search", json={"queries": ["statins"], "filter": {"year": {"after": 1}}})
        assert wrong.status_code == 422 and wrong.json()["detail"][0]["loc"] == ["body", "filter"]
        unknown = client.post("/indexes/docs/search", json={"queries": ["statins"], "filter": {"$nor": [{"a": 1}]}})
        assert unknown.status_code == 422 and "$and, $or, $not" in unknown.text
        others = client.post("/indexes/docs/search", json={"queries": ["statins"], "k": 50, "with_text": True,
                                                           "filter": {"$not": {"source": "preprint"}}})
        assert others.status_code == 200 and {h["id"] for h in others.json()["results"][0]} == {
            h.id for h in BM25Retriever.open(tmp_path / "index").search("statins", k=50)} - {"new"}
        not_object = client.put("/indexes/docs/documents", headers={"X-API-Key": "key"}, json={"documents": [
            {"_id": "x", "text": "statins", "metadata": "preprint"}]})
        assert not_object.status_code == 422
        assert client.get("/indexes/docs/documents/x").status_code == 404


EXHAUSTIVE = [("bm25", {}), ("bot", {}), ("idf", {"min_idf": 0}), ("inference-free", {"model": "active_bert", "min_idf": 0}),
              ("splade", {"model": "active_bert"}), ("dense", {"model": "tiny_bert"}),
              ("nail-sparse", {"model": "tiny_nail"}), ("nail-exh", {"model": "tiny_nail"}),
              ("hybrid", {"neural": "bot"})]
APPROXIMATE = [("dense", {"model": "tiny_bert", "ann": "hnsw"}), ("dense", {"model": "tiny_bert", "ann": "tree"}),
               ("bm25+nail", {"model": "tiny_nail"}),
               ("inference-free", {"model": "active_bert", "two_phase": "on", "min_idf": 0}),
               ("hybrid", {"neural": "dense", "model": "tiny_bert"})]  # min-max fusion: over the filtered candidates


@pytest.fixture(scope="module")
def active_bert(tiny_bert, tmp_path_factory):
    """``tiny_bert`` with a positive vocabulary bias: its SPLADE vectors hold many tokens, queries' among them."""
    import torch
    from transformers import BertForMaskedLM

    model = BertForMaskedLM.from_pretrained(tiny_bert)
    with torch.no_grad():
        model.cls.predictions.bias.fill_(0.05)
    path = tmp_path_factory.mktemp("active-bert")
    model.save_pretrained(path)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (tiny_bert / name).is_file():
            (path / name).write_bytes((tiny_bert / name).read_bytes())
    return path


def _build(name, options, request, path):
    from semiret.search import retriever_class

    options = {key: str(request.getfixturevalue(value)) if value in ("tiny_bert", "active_bert", "tiny_nail") else value
               for key, value in options.items()}
    return retriever_class(name).build(_corpus(80), path, **options)


SPECS = [{"source": "web"}, {"year": {"lt": 2003}}]  # a third of the documents; 3 of them, in the ranking's tail


@pytest.mark.parametrize("name, options", EXHAUSTIVE, ids=[f"{n}-{'-'.join(map(str, o.values()))}"
                                                           for n, o in EXHAUSTIVE])
def test_every_exhaustive_retriever_ranks_the_matching_documents_as_unfiltered(name, options, request, tmp_path):
    retriever = _build(name, options, request, tmp_path / "index")
    metadata = {d.id: d.metadata for d in _corpus(80)}
    queries = ["statins heart risk", "sleep diet"]
    everything = retriever.search(queries, k=80)
    assert max(len(ids) for ids in everything.ids) >= 8, everything.ids  # enough to filter
    for spec in SPECS:
        wanted = MetadataFilter(spec)
        filtered = retriever.search(queries, k=6, filter=spec)
        for all_ids, all_scores, ids, scores in zip(everything.ids, everything.scores, filtered.ids, filtered.scores):
            expected = [(d, s) for d, s in zip(all_ids, all_scores) if wanted.matches(metadata[d])][:6]
            assert scores == pytest.approx([s for _, s in expected], rel=1e-5)  # the best matching scores
            unfiltered = dict(zip(all_ids, all_scores))  # each hit a matching document, scored as unfiltered
            assert all(wanted.matches(metadata[d]) and unfiltered[d] == pytest.approx(s, rel=1e-5)
                       for d, s in zip(ids, scores))  # (equal scores may come in another order)


@pytest.mark.parametrize("name, options", APPROXIMATE, ids=[f"{n}-{'-'.join(map(str, o.values()))}"
                                                            for n, o in APPROXIMATE])
def test_approximate_retrievers_find_only_matching_documents(name, options, request, tmp_path):
    retriever = _build(name, options, request, tmp_path / "index")
    for spec in SPECS:
        wanted = MetadataFilter(spec)
        hits = retriever.search("statins heart risk", k=6, filter=spec)
        assert hits and all(wanted.matches(hit.metadata) for hit in hits)
        if name == "dense":  # an ANN structure searched wider until k live documents are found
            assert len(hits) == 6


def test_a_narrow_filter_widens_ivf_and_the_tree_until_k_are_found(tiny_bert, tmp_path):
    from semiret.search import DenseRetriever

    docs = [Document(f"d{i}", f"document number {i} about {WORDS[i % len(WORDS)]}", metadata={"rare": i % 97 == 0})
            for i in range(600)]  # 7 documents pass, spread over the clusters
    for ann in ("ivf", "tree"):
        retriever = DenseRetriever.build(docs, tmp_path / ann, model=str(tiny_bert), ann=ann,
                                         **({"nprobe": 1} if ann == "ivf" else {"beam": 1}))
        exact = DenseRetriever.build(docs, tmp_path / f"{ann}-exact", model=str(tiny_bert))
        hits = retriever.search("statins heart", k=5, filter={"rare": True})
        assert [h.id for h in hits] == [h.id for h in exact.search("statins heart", k=5, filter={"rare": True})]


def test_gdr_finds_only_matching_documents(tiny_gdr, tmp_path):
    from semiret.search import GDRRetriever

    docs = [Document(d.id, d.text, d.title, {"even": i % 2 == 0}) for i, d in enumerate(TINY_DOCS)]
    retriever = GDRRetriever.build(docs, tmp_path / "index", model=str(tiny_gdr), beams=3)
    unfiltered = retriever.search("cats and dogs", k=6)
    hits = retriever.search("cats and dogs", k=6, filter={"even": True})
    assert [h.id for h in hits] == [h.id for h in unfiltered if h.metadata["even"]]


def test_a_filter_is_worked_out_once_per_segment(tmp_path, monkeypatch):
    """A filter seen before costs nothing to work out; a new one on a field read before parses no JSON."""
    import json as json_module
    import types

    import semiret.indexes.segments as segments

    retriever = BM25Retriever.build(_corpus(40), tmp_path / "index")
    parsed, masks = [], []
    monkeypatch.setattr(segments, "json", types.SimpleNamespace(
        **{name: getattr(json_module, name) for name in ("dumps", "dump", "load")},
        loads=lambda text: parsed.append(1) or json_module.loads(text)))
    original = MetadataFilter.mask
    monkeypatch.setattr(MetadataFilter, "mask", lambda self, *read: masks.append(1) or original(self, *read))
    spec = {"source": "arxiv", "year": {"gt": 2011}}
    first = retriever.search("statins", k=3, filter=spec)
    assert len(masks) == 1 and len(parsed) == 40  # both fields read in one pass over the documents
    assert retriever.search("statins", k=3, filter=dict(reversed(spec.items()))) == first  # the same filter
    assert len(masks) == 1
    retriever.search("statins", k=3, filter={"source": "web", "year": 2003})  # new, on the same fields
    assert len(masks) == 2 and len(parsed) == 40
    wide = {f"f{n}": n for n in range(9)}  # more fields than a segment keeps columns of
    retriever.search("statins", k=3, filter=wide)
    read = len(parsed)
    for _ in range(3):  # the same filter again on the same commit: its mask kept, its fields not checked again
        retriever.search("statins", k=3, filter=wide)
    assert len(parsed) == read

def test_equalities_joined_by_or_are_one_any_of_list():
    """An $or of one field's values is written (and cached, and tested per distinct value) as its any-of list; the
    order of an $or's or $and's filters does not make another filter."""
    joined = MetadataFilter({"$or": [{"doi": "b"}, {"doi": ["a", "c"]}, {"year": {"gt": 1}}, {"doi": "a"}]})
    assert joined.spec == {"$or": [{"doi": ["a", "b", "c"]}, {"year": {"gt": 1}}]}
    assert MetadataFilter({"$and": [{"x": 1}, {"y": 2}]}).key == MetadataFilter({"$and": [{"y": 2}, {"x": 1}]}).key
    assert joined.matches({"doi": "c"}) and joined.matches({"year": 2}) and not joined.matches({"doi": "d"})


def test_one_filter_written_two_ways_is_one_filter(indexed):
    _, retriever = indexed
    as_tuple = retriever.search("statins", k=5, filter={"source": ("web", "arxiv")})
    assert as_tuple == retriever.search("statins", k=5, filter={"source": ["arxiv", "web"]})
    assert {h.metadata["source"] for h in as_tuple} <= {"web", "arxiv"} and as_tuple


def test_an_empty_filter_is_every_document(indexed):
    _, retriever = indexed
    assert retriever.search("statins heart", k=5, filter={}) == retriever.search("statins heart", k=5)


def test_metadata_that_is_not_json_is_refused_before_anything_is_written(tmp_path):
    import datetime

    with pytest.raises(SemiretError, match=r"document 1 \('b'\): its metadata cannot be stored"):
        BM25Retriever.build([Document("a", "x"), Document("b", "y", metadata={"day": datetime.date(2026, 1, 1)})],
                            tmp_path / "index")
    assert not (tmp_path / "index").exists()


def test_threads_searching_with_more_filters_than_a_segment_keeps(tmp_path):
    """Each segment keeps the masks of its 32 latest filters, under a lock; threads evicting one another's get
    right results (the race it closes, a lookup then an eviction, shows about once in 12,000 searches unlocked)."""
    docs = [Document(f"d{i}", "apple banana", metadata={"y": i % 50}) for i in range(50)]
    retriever = BM25Retriever.build(docs, tmp_path / "index")
    failures = []

    def search(offset: int) -> None:
        try:
            for n in range(400):
                y = (n * 7 + offset) % 40
                assert [h.metadata["y"] for h in retriever.search("apple", k=3, filter={"y": y})] == [y]
        except Exception as exc:  # noqa: BLE001 - reported below, whatever it is
            failures.append(exc)

    threads = [threading.Thread(target=search, args=(offset,)) for offset in range(4)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch often: a race between a lookup and an eviction shows
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert not failures


def test_a_hybrid_part_restricted_against_an_older_commit_caches_nothing_stale(tmp_path):
    """A hybrid's second part hides what its first part's view hides; where that view is older than the part (a
    commit between the two), the part's new documents are judged by id for that search only."""
    from semiret.indexes.filters import MetadataFilter as Filter

    docs = _corpus(30)
    retriever = HybridRetriever.build(docs, tmp_path / "hybrid", neural="bot")
    writer = open_retriever(tmp_path / "hybrid")
    wanted = Filter({"source": "web"})
    older = retriever.index.first.restricted(wanted)  # the first part's view, then a commit
    writer.add([Document("new", "statins heart statins heart", metadata={"source": "web"})])
    retriever.index.refresh()
    neural = retriever.index.parts["neural"].restricted(wanted, like=older)
    assert "new" not in neural.live_ids() and len(neural.live_ids()) == len(older.live_ids())  # as the older view
    hits = retriever.search("statins heart", k=3, filter={"source": "web"})
    assert hits[0].id == "new"  # the next search sees it in both parts


def test_delete_where_deletes_the_matching_documents_in_every_part(tmp_path):
    docs = _corpus(60)
    web = {d.id for d in docs if d.metadata["source"] == "web"}
    for retriever in (BM25Retriever.build(docs[:40], tmp_path / "bm25"),
                      HybridRetriever.build(docs[:40], tmp_path / "hybrid", neural="bot")):
        retriever.add(docs[40:])  # two segments
        assert retriever.delete_where({"source": "web"}) == len(web)
        assert retriever.delete_where({"source": "web"}) == 0
        reopened = open_retriever(retriever.index.path)
        assert not set(reopened.index.live_ids()) & web and len(reopened.index.live_ids()) == 60 - len(web)
        hits = reopened.search("statins heart risk sleep", k=60)
        assert hits and not {h.id for h in hits} & web
    hybrid = open_retriever(tmp_path / "hybrid")
    assert all(not {d for d in part.index.live_ids()} & web for part in hybrid.query_side.parts.values())


def test_delete_where_refuses_what_it_cannot_do(tmp_path):
    retriever = BM25Retriever.build(_corpus(10), tmp_path / "index", store_texts=False)
    with pytest.raises(SemiretError, match="no metadata or words to delete by"):
        retriever.delete_where({"source": "web"})
    with pytest.raises(SemiretError, match="empty filter would delete every document"):
        BM25Retriever.build(_corpus(10), tmp_path / "other").delete_where({})


def test_delete_command_and_endpoint_take_a_filter(tmp_path):
    BM25Retriever.build(_corpus(30), tmp_path / "cli")
    runner = CliRunner()
    deleted = runner.invoke(app, ["delete", "--index", str(tmp_path / "cli"), "--filter", "source=web"])
    assert deleted.exit_code == 0 and "deleted 10 documents" in deleted.output
    neither = runner.invoke(app, ["delete", "--index", str(tmp_path / "cli")])
    assert neither.exit_code == 2 and "one of the two" in neither.output
    for write_process in (False, True):  # the write in the server's threads, or in its writer process
        served = tmp_path / f"served-{write_process}"
        BM25Retriever.build(_corpus(30), served)
        settings = ServeSettings({"docs": str(served)}, api_key="key", write_process=write_process)
        with LocalClient(create_app(settings)) as client:
            write = {"X-API-Key": "key"}
            answer = client.post("/indexes/docs/documents/delete", headers=write, json={"filter": {"source": "arxiv"}})
            assert answer.json() == {"status": "acknowledged", "deleted": 10}
            assert client.get("/indexes/docs").json()["documents"] == 20
            both = client.post("/indexes/docs/documents/delete", headers=write, json={"ids": ["doc1"],
                                                                                     "filter": {"source": "web"}})
            assert both.status_code == 422 and client.get("/indexes/docs").json()["documents"] == 20


def test_a_delete_matching_nothing_commits_nothing(tmp_path):
    retriever = BM25Retriever.build(_corpus(10), tmp_path / "index")
    before = (tmp_path / "index" / "meta.json").stat().st_mtime_ns
    assert retriever.delete_where({"source": "nowhere"}) == 0
    assert (tmp_path / "index" / "meta.json").stat().st_mtime_ns == before


def test_a_delete_request_names_ids_or_a_filter(tmp_path):
    BM25Retriever.build(_corpus(10), tmp_path / "index")
    settings = ServeSettings({"docs": str(tmp_path / "index")}, api_key="key", write_process=False)
    with LocalClient(create_app(settings)) as client:
        for body in ({"ids": ["doc1"], "filter": {}}, {"filter": {}}, {}):
            refused = client.post("/indexes/docs/documents/delete", headers={"X-API-Key": "key"}, json=body)
            assert refused.status_code == 422, body
        assert client.get("/indexes/docs").json()["documents"] == 10


def test_negations_pass_the_documents_of_a_segment_without_metadata(tmp_path):
    """A segment none of whose documents has metadata: a negation or a missing-field test passes all of them."""
    retriever = BM25Retriever.build([Document(f"d{i}", f"statins {i}") for i in range(5)], tmp_path / "index")
    retriever.add([Document("m", "statins heart", metadata={"source": "web"})])
    assert len(retriever.index.segments) == 2
    everything = {h.id for h in retriever.search("statins", k=10)}
    assert {h.id for h in retriever.search("statins", k=10, filter={"$not": {"source": "web"}})} == everything - {"m"}
    assert {h.id for h in retriever.search("statins", k=10, filter={"source": {"exists": False}})} == everything - {"m"}
    assert [h.id for h in retriever.search("statins", k=10, filter={"source": {"exists": True}})] == ["m"]
    assert retriever.count({"$or": [{"source": "web"}, {"source": {"exists": False}}]}) == 6


def test_a_field_no_document_holds_or_a_value_of_another_kind_is_said_once(tmp_path, caplog):
    """A misspelled field, or a value of another kind than the field's ("2020" for 2020), matches nothing: a
    warning says why, once per index and message, for filters (not inside a $not, which may well name what no
    document holds yet), facets and orders; fields held with values of the kind compared say nothing."""
    docs = [Document(f"d{i}", "statins and the heart", metadata={"year": 2000 + i, "source": ["web", None][i % 2],
                                                                 "tags": ["a", 1]}) for i in range(6)]
    bm25 = BM25Retriever.build(docs, tmp_path / "bm25")

    def said(call) -> list[str]:
        caplog.clear()
        with caplog.at_level("WARNING"):
            call()
        return [r.getMessage() for r in caplog.records]

    quiet = [{"year": 2001}, {"year": {"gte": 2001}}, {"source": None}, {"tags": 1}, {"tags": "a"},
             {"year": {"exists": False}}, {"nowhere": {"exists": False}}, {"$text": "heart"},
             {"$not": {"archived": True}}, {"$not": {"retracted": {"exists": True}}}]  # what none holds yet
    for spec in quiet:
        assert said(lambda: bm25.search("statins", filter=spec)) == [], spec
    for spec, field, words in (({"sorce": "web"}, "sorce", "no document holds the field 'sorce' that a filter"),
                               ({"year": "2001"}, "year", "no document holds a string in 'year'"),
                               ({"source": True}, "source", "no document holds a boolean in 'source'")):
        messages = said(lambda: bm25.search("statins", filter=spec))
        assert len(messages) == 1 and words in messages[0] and "said once" in messages[0], (spec, messages)
        assert said(lambda: bm25.count(spec)) == []  # once per index and message
        assert bm25.search("statins", filter=spec) == [] or "$not" in spec
    assert said(lambda: bm25.search("statins", filter={"year": {"gte": "2001"}})) == []  # the same message: said
    assert "the field 'sorce' that a facet counts" in said(lambda: bm25.facet("sorce"))[0]
    assert "the field 'yeer' that the order follows" in said(lambda: bm25.scroll(order_by="yeer"))[0]
    assert said(lambda: bm25.scroll(order_by="year")) == [] and said(lambda: bm25.facet("source")) == []


def test_documents_chosen_by_id_are_searched_counted_and_deleted(indexed, tmp_path):
    """A search among chosen documents, or a run's candidates scored again, had no condition to name them: ``$id``
    (Qdrant's has_id, OpenSearch's ids query) keeps the documents of those ids, alone or beside other conditions,
    in every reading of a filter (search, count, delete, the command line, the service, an index that keeps no
    stored documents, documents added and deleted since)."""
    docs, retriever = indexed
    chosen = [f"doc{i}" for i in range(0, 300, 7)] + ["nope"]
    queries = ["statins heart", "blood pressure diet"]
    everything = retriever.search(queries, k=len(docs))
    for spec, keep in (({"$id": chosen}, lambda d: d in chosen),
                       ({"$id": chosen, "source": "web"}, lambda d: d in chosen and d.startswith("doc")
                        and int(d[3:]) % 3 == 2),
                       ({"$or": [{"$id": "doc1"}, {"year": 2003}]}, lambda d: d == "doc1" or int(d[3:]) % 25 == 3),
                       ({"$not": {"$id": chosen}}, lambda d: d not in chosen)):
        filtered = retriever.search(queries, k=10, filter=spec)
        for all_ids, all_scores, ids, scores in zip(everything.ids, everything.scores, filtered.ids, filtered.scores):
            assert list(zip(ids, scores)) == [(d, s) for d, s in zip(all_ids, all_scores) if keep(d)][:10], spec
    assert retriever.count({"$id": chosen}) == len(chosen) - 1
    assert MetadataFilter({"$id": [7, "doc7", "doc7"]}).spec == {"$id": ["7", "doc7"]}  # each once, as strings
    for bad in ({"$id": []}, {"$id": [1.5]}, {"$id": {"doc1": True}}, {"$id": True}):
        with pytest.raises(SemiretError, match=r"\$id takes a document id or a non-empty list of them"):
            MetadataFilter(bad)

    bare = BM25Retriever.build(docs[:30], tmp_path / "bare", store_texts=False)  # no stored metadata: ids still
    bare.add([Document("late", "statins heart late")])
    bare.delete(["doc3"])
    assert {hit.id for hit in bare.search("statins heart", k=30, filter={"$id": ["doc3", "doc5", "late"]})} <= {
        "doc5", "late"} and "late" in {hit.id for hit in bare.search("statins", filter={"$id": "late"})}
    runner = CliRunner()
    for flags, expected in ((["--filter", "$id=doc5", "--filter", "$id=late"], {"doc5", "late"}),
                            (["--filter", '$id=["doc5", "doc3"]'], {"doc5"})):
        printed = runner.invoke(app, ["search", "--index", str(tmp_path / "bare"), "--json", "-k", "30", *flags,
                                      "statins heart late"])
        assert printed.exit_code == 0, printed.output
        assert {hit["id"] for hit in json.loads(printed.output.splitlines()[0])["hits"]} <= expected
    with LocalClient(create_app(ServeSettings({"bare": str(tmp_path / "bare")}, api_key="k",
                                              write_process=False))) as http:
        counted = http.post("/indexes/bare/documents/count", json={"filter": {"$id": ["doc5", "doc6", "nope"]}})
        assert counted.status_code == 200 and counted.json() == {"count": 2}
        deleted = http.post("/indexes/bare/documents/delete", headers={"X-API-Key": "k"},
                            json={"filter": {"$id": ["doc5", "doc6"]}})
        assert deleted.status_code == 200 and deleted.json()["deleted"] == 2
    assert BM25Retriever.open(tmp_path / "bare").count() == 28
