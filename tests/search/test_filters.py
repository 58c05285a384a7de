"""Searches filtered on the documents' stored metadata: the filter's conditions, filtered searches equal to the full
ranking filtered afterwards (however deep the matches lie), metadata kept through add, merge and corpus files, and
the command line's and the service's filters."""

from __future__ import annotations

import json
import random

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from semiret.cli import app
from semiret.data import Document
from semiret.data.collection import iter_corpus
from semiret.errors import DataFormatError, SemiretError
from semiret.search import BM25Retriever, HybridRetriever, open_retriever
from semiret.search.filters import MetadataFilter
from semiret.serving import ServeSettings, create_app

from helpers import write_jsonl

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
])
def test_bad_filters_are_clear_errors(spec, message):
    with pytest.raises(SemiretError, match=message):
        MetadataFilter(spec)


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    docs = _corpus()
    path = tmp_path_factory.mktemp("filters") / "bm25"
    return docs, BM25Retriever.build(docs, path)


@pytest.mark.parametrize("spec", [{"source": "pubmed"}, {"year": {"gte": 2020}}, {"tags": ["a", "d"]},
                                  {"venue.name": "v3", "source": "web"}, {"year": 2024, "source": "arxiv"}])
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
    with pytest.raises(SemiretError, match="keeps no stored documents .* no metadata to filter on"):
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


def test_the_service_stores_metadata_and_filters(tmp_path):
    BM25Retriever.build(_corpus(30), tmp_path / "index")
    settings = ServeSettings({"docs": str(tmp_path / "index")}, api_key="key", write_process=False)
    with TestClient(create_app(settings)) as client:
        added = client.put("/indexes/docs/documents", headers={"X-API-Key": "key"}, json={"documents": [
            {"_id": "new", "text": "statins heart statins", "metadata": {"source": "preprint"}}]})
        assert added.status_code == 200, added.text
        assert client.get("/indexes/docs/documents/new").json()["metadata"] == {"source": "preprint"}
        found = client.post("/indexes/docs/search", json={"queries": ["statins"], "filter": {"source": "preprint"},
                                                          "with_text": True}).json()["results"][0]
        assert [(h["id"], h["metadata"]) for h in found] == [("new", {"source": "preprint"})]
        wrong = client.post("/indexes/docs/search", json={"queries": ["statins"], "filter": {"year": {"after": 1}}})
        assert wrong.status_code == 422 and wrong.json()["detail"][0]["loc"] == ["body", "filter"]
        not_object = client.put("/indexes/docs/documents", headers={"X-API-Key": "key"}, json={"documents": [
            {"_id": "x", "text": "statins", "metadata": "preprint"}]})
        assert not_object.status_code == 422
        assert client.get("/indexes/docs/documents/x").status_code == 404
