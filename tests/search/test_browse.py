"""Reading an index's documents back: counting them (by filter), iterating them, paging through them in id order
(Qdrant's scroll), `semiret count` and `semiret export`, the service's scroll, count and search offset."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from semiret.cli import app
from semiret.data import Document
from semiret.data.collection import iter_corpus
from semiret.errors import SemiretError
from semiret.indexes.segments import SegmentedIndex
from semiret.search import BM25Retriever, HybridRetriever, open_retriever
from semiret.serving import ServeSettings, create_app

from helpers import LocalClient, write_jsonl


def _corpus(n: int = 40) -> list[Document]:
    return [Document(f"d{i:03d}", f"statins heart risk trial {i} " + "dose " * (i % 5), title=f"t{i}",
                     metadata={"year": 2000 + i % 4, "source": ["pubmed", "web"][i % 2]} if i % 10 else None)
            for i in range(n)]


@pytest.fixture
def indexed(tmp_path):
    return BM25Retriever.build(_corpus(), tmp_path / "index")


def _scrolled(retriever, spec=None, limit=7) -> list[str]:
    """Every page's ids, page after page, checking that pages neither overlap nor skip."""
    ids, offset = [], None
    while True:
        page = retriever.scroll(spec, limit=limit, offset=offset)
        assert len(page.ids) <= limit and page.ids == [d.id for d in page.documents]
        ids += page.ids
        offset = page.next_offset
        if offset is None:
            return ids
        assert len(page.ids) == limit and offset > page.ids[-1]


def test_count_iterate_and_scroll_agree_with_the_documents(indexed):
    corpus = _corpus()
    web = [d for d in corpus if d.metadata and d.metadata["source"] == "web"]
    assert indexed.count() == 40 and indexed.count({}) == 40
    assert indexed.count({"source": "web"}) == len(web) == 20
    assert indexed.count({"year": {"gte": 2002}, "source": "pubmed"}) == sum(
        1 for d in corpus if d.metadata and d.metadata["year"] >= 2002 and d.metadata["source"] == "pubmed")
    assert list(indexed.iter_documents({"source": "web"})) == web  # texts, titles and metadata as given
    assert list(indexed.iter_documents()) == corpus
    assert _scrolled(indexed) == sorted(d.id for d in corpus)
    assert _scrolled(indexed, {"source": "web"}, limit=5) == sorted(d.id for d in web)
    page = indexed.scroll({"source": "web"}, limit=3, offset="d012")  # an offset need not be a matching id
    assert page.ids == ["d013", "d015", "d017"] and page.next_offset == "d019"
    assert indexed.scroll(offset="zzz").ids == [] and indexed.scroll(offset="zzz").next_offset is None
    assert indexed.scroll(limit=2, offset=7).ids == indexed.scroll(limit=2, offset="7").ids  # an id as a corpus reads it
    with pytest.raises(SemiretError, match="offset is a document id"):
        indexed.scroll(offset=["d001"])


def test_documents_are_fetched_by_id(indexed, tmp_path):
    corpus = {d.id: d for d in _corpus()}
    assert indexed.get_document("d001") == corpus["d001"] and indexed.get_document("nope") is None
    assert indexed.get_documents(["d002", "nope", "d003"]) == {"d002": corpus["d002"], "d003": corpus["d003"]}
    indexed.add([Document("7", "seven")])
    assert indexed.get_document(7).text == "seven" and list(indexed.get_documents([7])) == ["7"]
    with pytest.raises(SemiretError, match="a list of ids"):
        indexed.get_documents("d001")
    hybrid = HybridRetriever.build(_corpus(5), tmp_path / "hybrid", neural="bot")
    assert hybrid.get_documents(["d004"]) == {"d004": corpus["d004"]}


def test_deleted_and_added_documents_are_counted_and_paged_at_once(indexed):
    assert indexed.count({"source": "web"}) == 20
    indexed.delete(["d001", "d003"])
    indexed.add([Document("d500", "statins", metadata={"source": "web"})])
    assert indexed.count({"source": "web"}) == 19 and indexed.count() == 39
    ids = _scrolled(indexed, {"source": "web"}, limit=4)
    assert "d001" not in ids and "d500" in ids and len(ids) == 19
    first = indexed.scroll(limit=5)
    indexed.delete([first.next_offset])  # the next page's first document goes between two pages
    second = indexed.scroll(limit=5, offset=first.next_offset)
    assert second.ids[0] > first.ids[-1] and first.next_offset not in second.ids
    indexed.index.merge()
    assert indexed.count() == 38 and _scrolled(indexed) == sorted(indexed.index.live_ids())


def test_an_index_without_stored_documents_counts_and_pages_ids_only(tmp_path):
    retriever = BM25Retriever.build(_corpus(12), tmp_path / "index", store_texts=False)
    assert retriever.count() == 12
    page = retriever.scroll(limit=5)
    assert page.ids == [f"d{i:03d}" for i in range(5)] and page.documents is None

    with pytest.raises(SemiretError, match="no metadata or words to count by"):
        retriever.count({"source": "web"})
    with pytest.raises(SemiretError, match="nothing to read back"):
        list(retriever.iter_documents())
    with pytest.raises(SemiretError, match="limit must be a positive integer"):
        retriever.scroll(limit=0)


def test_a_view_hiding_documents_pages_its_own_ids(indexed):
    from semiret.indexes.filters import MetadataFilter

    assert len(indexed.index.sorted_ids()) == 40  # kept for the commit
    view = indexed.index.restricted(MetadataFilter({"source": "web"}))
    assert view.sorted_ids() == sorted(d.id for d in _corpus() if d.metadata and d.metadata["source"] == "web")
    assert len(indexed.index.sorted_ids()) == 40


def test_a_hybrid_index_reads_its_documents_from_its_first_part(tmp_path):
    hybrid = HybridRetriever.build(_corpus(), tmp_path / "hybrid", neural="bot")
    assert hybrid.count({"source": "web"}) == 20
    assert [d.id for d in hybrid.iter_documents({"year": 2001})] == [
        d.id for d in _corpus() if d.metadata and d.metadata["year"] == 2001]
    assert _scrolled(hybrid, {"source": "pubmed"}) == sorted(
        d.id for d in _corpus() if d.metadata and d.metadata["source"] == "pubmed")


def test_count_and_export_commands(indexed, tmp_path):
    runner = CliRunner()
    counted = runner.invoke(app, ["count", str(indexed.index.path), "--filter", "source=web"])
    assert counted.exit_code == 0 and counted.stdout.strip() == "20"
    out = tmp_path / "web.jsonl"
    exported = runner.invoke(app, ["export", str(indexed.index.path), "--filter", '{"year": {"lt": 2002}}', "-o",
                                   str(out)])
    assert exported.exit_code == 0, exported.output
    wanted = [d for d in _corpus() if d.metadata and d.metadata["year"] < 2002]
    assert list(iter_corpus(out)) == wanted  # a corpus file `semiret index` reads back, metadata and all
    everything = runner.invoke(app, ["export", str(indexed.index.path)])
    lines = [json.loads(line) for line in everything.stdout.splitlines()]
    assert [line["_id"] for line in lines] == [d.id for d in _corpus()] and lines[1]["metadata"]["year"] == 2001
    rebuilt = runner.invoke(app, ["index", "--data", str(out), "--out", str(tmp_path / "copy"), "-r", "bm25"])
    assert rebuilt.exit_code == 0 and open_retriever(tmp_path / "copy").count({"year": 2001}) == 10


def test_export_copies_the_records_as_stored_without_parsing_them(indexed, tmp_path, monkeypatch):
    hybrid = HybridRetriever.build(_corpus(), tmp_path / "hybrid", neural="idf")
    stored = [line for segment in indexed.index.segments for line in segment.texts.iter_at(np.arange(segment.n_docs))]

    def parsed(*args, **kwargs):
        raise AssertionError("export parsed a stored document")

    monkeypatch.setattr(Document, "from_record", parsed)
    for index in (indexed.index.path, hybrid.index.path):
        exported = CliRunner().invoke(app, ["export", str(index), "--filter", "source=web"])
        assert exported.exit_code == 0, exported.output
        assert exported.stdout.splitlines() == [line for line in stored if '"web"' in line]
    monkeypatch.undo()
    assert [Document.from_record(json.loads(line)) for line in stored] == _corpus()


def test_export_refuses_before_writing_and_never_leaves_half_a_file(indexed, tmp_path, monkeypatch):
    runner = CliRunner()
    out = tmp_path / "kept.jsonl"
    write_jsonl(out, [{"_id": "old", "text": "kept"}])
    assert runner.invoke(app, ["export", str(indexed.index.path), "-o", str(tmp_path)]).exit_code == 2
    bare = BM25Retriever.build(_corpus(5), tmp_path / "bare", store_texts=False)
    refused = runner.invoke(app, ["export", str(bare.index.path), "-o", str(out)])
    assert refused.exit_code == 2 and "nothing to read back" in refused.output

    records = SegmentedIndex.iter_records

    def failing(self, wanted=None):  # the disk fills after the first document
        yield next(records(self, wanted))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(SegmentedIndex, "iter_records", failing)
    failed = runner.invoke(app, ["export", str(indexed.index.path), "-o", str(out)])
    assert failed.exit_code == 1 and [d.id for d in iter_corpus(out)] == ["old"]
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".kept")]


def test_the_service_scrolls_counts_and_pages_searches(tmp_path):
    BM25Retriever.build(_corpus(), tmp_path / "index")
    settings = ServeSettings({"docs": str(tmp_path / "index")}, api_key="key", write_process=False, max_batch=8,
                             max_k=20)
    with LocalClient(create_app(settings)) as client:
        count = client.post("/indexes/docs/documents/count", json={"filter": {"source": "web"}})
        assert count.status_code == 200 and count.json() == {"count": 20}
        assert client.post("/indexes/docs/documents/count", json={}).json() == {"count": 40}
        ids, offset = [], None
        while True:
            page = client.post("/indexes/docs/documents/scroll", json={"filter": {"source": "web"}, "limit": 8,
                                                                        **({"offset": offset} if offset else {})})
            assert page.status_code == 200, page.text
            ids += [d["_id"] for d in page.json()["documents"]]
            offset = page.json()["next_page_offset"]
            if offset is None:
                break
        assert ids == sorted(d.id for d in _corpus() if d.metadata and d.metadata["source"] == "web")
        first = client.post("/indexes/docs/documents/scroll", json={"limit": 2}).json()["documents"]
        assert first == [{"_id": "d000", "title": "t0", "text": _corpus()[0].text},
                         {"_id": "d001", "title": "t1", "text": _corpus()[1].text,
                          "metadata": {"year": 2001, "source": "web"}}]
        bare = client.post("/indexes/docs/documents/scroll", json={"limit": 2, "with_text": False}).json()
        assert bare == {"documents": [{"_id": "d000"}, {"_id": "d001"}], "next_page_offset": "d002"}
        too_many = client.post("/indexes/docs/documents/scroll", json={"limit": 9})
        assert too_many.status_code == 422 and too_many.json()["detail"][0]["loc"] == ["body", "limit"]
        bad = client.post("/indexes/docs/documents/count", json={"filter": {"year": {"after": 1}}})
        assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "filter"]

        def ranking(**body):
            found = client.post("/indexes/docs/search", json={"queries": ["statins dose"], **body})
            assert found.status_code == 200, found.text
            return [hit["id"] for hit in found.json()["results"][0]]

        whole = ranking(k=12)
        assert ranking(k=5) + ranking(k=5, offset=5) + ranking(k=2, offset=10) == whole
        assert ranking(k=5, offset=3, filter={"source": "web"}) == ranking(k=8, filter={"source": "web"})[3:]
        past = client.post("/indexes/docs/search", json={"queries": ["statins"], "k": 10, "offset": 11})
        assert past.status_code == 422 and past.json()["detail"][0]["loc"] == ["body", "offset"]


def test_a_milvus_collection_counts_exports_and_scrolls(tmp_path):
    pytest.importorskip("milvus_lite", reason="needs milvus-lite (pip install 'semiret[milvus]')")
    from semiret.indexes.milvus import MilvusBackend
    from semiret.search import BagOfTokensRetriever

    backend = MilvusBackend(str(tmp_path / "milvus.db"))
    collection = BagOfTokensRetriever.build(_corpus(), "browse", backend=backend)
    web = [d for d in _corpus() if d.metadata and d.metadata["source"] == "web"]
    assert collection.count() == 40 and collection.count({"source": "web"}) == 20
    assert sorted(collection.iter_documents({"source": "web"}), key=lambda d: d.id) == web
    assert _scrolled(collection, {"source": "web"}, limit=5) == [d.id for d in web]
    assert _scrolled(collection, limit=16) == sorted(d.id for d in _corpus())
    own_index = BagOfTokensRetriever.build(_corpus(), tmp_path / "facets")
    assert collection.facet("year", {"source": "web"}) == own_index.facet("year", {"source": "web"})
    own = BagOfTokensRetriever.build(_corpus(), tmp_path / "own")
    for spec in (None, {"year": 2001}):
        grouped, expected = (r.search(["statins dose", "trial 7"], k=2, group_by="source", filter=spec)
                             for r in (collection, own))
        assert grouped.groups == expected.groups and grouped.scores == expected.scores


def _facet_by_hand(documents, field, keep=lambda metadata: True):
    counts: dict = {}
    for document in documents:
        metadata = document.metadata or {}
        if field in metadata and keep(metadata):
            value = metadata[field]
            for each in value if isinstance(value, list) else [value]:
                counts[each] = counts.get(each, 0) + 1
    return counts


def test_facets_count_the_values_documents_hold(tmp_path):
    documents = [Document(f"d{i}", "statins", metadata={"source": ["pubmed", "web", "arxiv"][i % 3] if i % 4 else "web",
                                                         "tags": ["x", "y", "z"][: i % 3 + 1], "flag": None if i % 5 == 0 else i % 2})
                 for i in range(40)]
    retriever = BM25Retriever.build(documents, tmp_path / "index")
    for field in ("source", "tags", "flag"):
        expected = _facet_by_hand(documents, field)
        found = retriever.facet(field, limit=10)
        assert dict(found) == expected and [c for _, c in found] == sorted(expected.values(), reverse=True)
    assert retriever.facet("source", limit=1) == [("web", max(_facet_by_hand(documents, "source").values()))]
    web = {"source": "web"}
    assert dict(retriever.facet("tags", web)) == _facet_by_hand(documents, "tags", lambda m: m["source"] == "web")
    retriever.delete(["d0", "d1"])
    assert dict(retriever.facet("source")) == _facet_by_hand(documents[2:], "source")
    hybrid = HybridRetriever.build(documents, tmp_path / "hybrid", neural="bot")
    assert dict(hybrid.facet("tags", web)) == _facet_by_hand(documents, "tags", lambda m: m["source"] == "web")
    with pytest.raises(SemiretError, match="limit must be a positive integer"):
        retriever.facet("source", limit=0)
    lines = CliRunner().invoke(app, ["facet", str(tmp_path / "index"), "source", "--limit", "2"]).stdout.splitlines()
    assert [json.loads(line) for line in lines] == [{"value": v, "count": c} for v, c in retriever.facet("source", limit=2)]
    settings = ServeSettings({"docs": str(tmp_path / "index")}, write_process=False)
    with LocalClient(create_app(settings)) as client:
        answer = client.post("/indexes/docs/facet", json={"field": "tags", "filter": web})
        assert answer.status_code == 200 and answer.json()["values"] == [
            {"value": v, "count": c} for v, c in retriever.facet("tags", web)]
        bad = client.post("/indexes/docs/facet", json={"field": "a..b"})
        assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "field"]


def test_range_facets_count_the_documents_with_a_value_in_each_range(tmp_path):
    """OpenSearch's range aggregation: how many documents have a value in each range (a document of several values
    once per range), dates as instants, numbers with numbers, joined to a filter; the command line, the service and
    its client; ranges that are no ranges refused, naming them."""
    from helpers import client_of

    documents = [Document(f"d{i}", "statins", metadata={"year": [2000 + i, 2030] if i % 7 == 0 else 2000 + i,
                                                         "published": f"20{10 + i % 15:02d}-0{1 + i % 9}-15T12:00:00Z",
                                                         "source": ["pubmed", "web"][i % 2]})
                 for i in range(30)]
    retriever = BM25Retriever.build(documents, tmp_path / "index")
    retriever.delete(["d3"])
    live = [d for d in documents if d.id != "d3"]
    ranges = [{"lt": 2010}, {"gte": 2010, "lt": 2020}, {"gte": 2020}, {"gt": 2100}]

    def by_hand(low, high, wanted=lambda m: True) -> int:
        values = lambda m: m["year"] if isinstance(m["year"], list) else [m["year"]]  # noqa: E731
        return sum(wanted(d.metadata) and any(low <= v < high for v in values(d.metadata)) for d in live)

    expected = [by_hand(0, 2010), by_hand(2010, 2020), by_hand(2020, 10 ** 6), 0]
    assert retriever.facet("year", ranges=ranges) == list(zip(ranges, expected))
    assert sum(expected[:3]) > len(live)  # documents of two values count in two ranges, once each
    web = {"source": "web"}
    assert [c for _, c in retriever.facet("year", web, ranges=ranges)] == [
        by_hand(0, 2010, lambda m: m["source"] == "web"), by_hand(2010, 2020, lambda m: m["source"] == "web"),
        by_hand(2020, 10 ** 6, lambda m: m["source"] == "web"), 0]
    dates = retriever.facet("published", ranges=[{"lt": "2018-01-01"}, {"gte": "2018-01-01T01:00:00+01:00"}])
    assert [c for _, c in dates] == [sum(d.metadata["published"] < "2018" for d in live),
                                     sum(d.metadata["published"] >= "2018" for d in live)]
    for wrong, message in (([], "ranges is a list of 1 to"), ([{"exists": True}], "range 0: a range object"),
                           ([{"gte": 1}, {"around": 3}], "a range takes gt, gte"), ([{"gte": 1, "lt": "x"}], "all "
                           "numbers or all strings"), ([2010], "range 0")):
        with pytest.raises(SemiretError, match=message):
            retriever.facet("year", ranges=wrong)
    lines = CliRunner().invoke(app, ["facet", str(tmp_path / "index"), "year", "--range", '{"lt": 2010}',
                                     "--range", '{"gte": 2010, "lt": 2020}']).stdout.splitlines()
    assert [json.loads(line) for line in lines] == [{"value": r, "count": c} for r, c in zip(ranges[:2], expected)]
    settings = ServeSettings({"docs": str(tmp_path / "index")}, write_process=False)
    with LocalClient(create_app(settings)) as http:
        answer = http.post("/indexes/docs/facet", json={"field": "year", "ranges": ranges, "filter": web})
        assert answer.status_code == 200 and answer.json()["values"] == [
            {"value": r, "count": c} for r, c in retriever.facet("year", web, ranges=ranges)]
        bad = http.post("/indexes/docs/facet", json={"field": "year", "ranges": [{"exists": True}]})
        assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "ranges"]
        assert client_of(http).facet("docs", "year", ranges=ranges) == retriever.facet("year", ranges=ranges)


def test_a_spreadsheet_s_columns_become_metadata_to_filter_on(tmp_path):
    table = tmp_path / "papers.csv"
    table.write_text("id,title,abstract,year,venue\n"
                     + "".join(f'p{i},Paper {i},"statins, heart risk and trial {i}",{2018 + i % 3},'
                               f'{["Nature", "BMJ"][i % 2]}\n' for i in range(12)), encoding="utf-8")
    runner = CliRunner()
    built = runner.invoke(app, ["index", "--data", str(table), "--out", str(tmp_path / "idx"),
                                "--metadata-fields", "year,venue"])
    assert built.exit_code == 0, built.output
    counted = runner.invoke(app, ["count", str(tmp_path / "idx"), "--filter", "year=2019", "--filter", "venue=BMJ"])
    assert counted.exit_code == 0 and counted.stdout.strip() == "2"  # p1 and p7
    added = tmp_path / "more.csv"
    added.write_text("id,abstract,year\nq1,statins again,2019\n", encoding="utf-8")
    assert runner.invoke(app, ["add", str(added), "--index", str(tmp_path / "idx"), "--metadata-fields", "*"]).exit_code == 0
    assert open_retriever(tmp_path / "idx").count({"year": 2019}) == 5


def test_a_filter_on_an_index_without_metadata_says_so_once(tmp_path, caplog):
    import logging

    bare = BM25Retriever.build([Document(f"d{i}", f"statins {i}") for i in range(5)], tmp_path / "bare")
    with caplog.at_level(logging.WARNING):
        assert bare.search("statins", k=3, filter={"year": 2001}) == []
        assert bare.count({"year": 2001}) == 0
        assert bare.search("statins", k=3, filter={"$text": "statins"})  # words, not metadata: nothing to say
    said = [r.getMessage() for r in caplog.records if "no document holds metadata" in r.getMessage()]
    assert len(said) == 1 and "a filter on year matches none" in said[0] and "--metadata-fields" in said[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        BM25Retriever.build(_corpus(), tmp_path / "with").search("statins", k=3, filter={"year": 2001})
    assert "no document holds metadata" not in caplog.text


def test_facets_of_a_querys_hits(tmp_path):
    from collections import Counter

    from semiret.search import VectorsRetriever

    documents = [Document(f"d{n}", f"{'statins' if n % 3 else 'sleep'} study number {n}",
                          metadata={"year": 2000 + n % 4, "kind": "trial" if n % 2 else "review"}) for n in range(30)]
    retriever = BM25Retriever.build(documents, tmp_path / "idx")
    hits = retriever.search("statins", k=8, filter={"kind": "trial"})
    expected = Counter(retriever.get_document(h.id).metadata["year"] for h in hits)
    counted = retriever.facet("year", {"kind": "trial"}, query="statins", depth=8)
    assert dict(counted) == dict(expected) and sum(c for _, c in counted) == 8
    assert retriever.facet("year", query="no such words here") == []
    assert retriever.facet("year", ranges=[{"lt": 2002}], query="statins", depth=5) == [({"lt": 2002}, sum(
        1 for h in retriever.search("statins", k=5) if retriever.get_document(h.id).metadata["year"] < 2002))]
    with pytest.raises(SemiretError, match="one query"):
        retriever.facet("year", query=["statins", "sleep"])
    with pytest.raises(SemiretError, match="depth"):
        retriever.facet("year", query="statins", depth=0)
    cli = CliRunner().invoke(app, ["facet", str(tmp_path / "idx"), "year", "--query", "statins", "--depth", "8",
                                   "--filter", "kind=trial"])
    assert cli.exit_code == 0, cli.output
    assert [(line["value"], line["count"]) for line in map(json.loads, cli.stdout.splitlines())] == counted
    # the query searched with the search options given, as `search` searches it: "statns" found only by --fuzzy
    fuzzy = CliRunner().invoke(app, ["facet", str(tmp_path / "idx"), "year", "--query", "statns", "--depth", "8",
                                     "--fuzzy"])
    assert fuzzy.exit_code == 0, fuzzy.output
    assert [(line["value"], line["count"]) for line in map(json.loads, fuzzy.stdout.splitlines())] == \
        retriever.with_options(fuzzy=True).facet("year", query="statns", depth=8) != []
    assert CliRunner().invoke(app, ["facet", str(tmp_path / "idx"), "year", "--query", "statns"]).stdout == ""
    alone = CliRunner().invoke(app, ["facet", str(tmp_path / "idx"), "year", "--fuzzy"])
    assert alone.exit_code != 0 and "give --query" in alone.output
    vectors = VectorsRetriever.build([Document(d.id, d.text, metadata=d.metadata, vector=[n % 2, 1 + n % 3])
                                      for n, d in enumerate(documents)], tmp_path / "vectors")
    by_vector = Counter(vectors.get_document(h.id).metadata["kind"] for h in vectors.search([1.0, 1.0], k=6))
    assert dict(vectors.facet("kind", query=[1.0, 1.0], depth=6)) == dict(by_vector)
    with LocalClient(create_app(ServeSettings({"idx": str(tmp_path / "idx"), "vectors": str(tmp_path / "vectors")},
                                              write_process=False))) as client:
        served = client.post("/indexes/idx/facet", json={"field": "year", "query": "statins", "depth": 8,
                                                         "filter": {"kind": "trial"}})
        assert [(v["value"], v["count"]) for v in served.json()["values"]] == counted
        served = client.post("/indexes/vectors/facet", json={"field": "kind", "vector": [1.0, 1.0], "depth": 6})
        assert {v["value"]: v["count"] for v in served.json()["values"]} == dict(by_vector)
        refused = client.post("/indexes/idx/facet", json={"field": "year", "vector": [1.0, 1.0]})
        assert refused.status_code == 422 and refused.json()["detail"][0]["loc"] == ["body", "vector"]


def test_a_querys_total_hits(tmp_path, tiny_docs):
    from semiret.search import IDFRetriever

    documents = [Document(d.id, d.text, d.title, {"n": n}) for n, d in enumerate(tiny_docs)]
    bm25 = BM25Retriever.build(documents, tmp_path / "bm25")
    for query in ("cats", "cats dogs", "statins heart", "no such words"):
        scored = [h for h in bm25.search(query, k=len(documents)) if h.score > 0]
        assert bm25.count(query=query) == len(scored)
        kept = [h for h in bm25.search(query, k=len(documents), filter={"n": [0, 1, 2]}) if h.score > 0]
        assert bm25.count({"n": [0, 1, 2]}, query) == len(kept)
    bm25.delete([h.id for h in bm25.search("cats", k=1)])
    assert bm25.count(query="cats") == len([h for h in bm25.search("cats", k=len(documents)) if h.score > 0])
    idf = IDFRetriever.build(documents, tmp_path / "idf")
    assert idf.count(query="cats and dogs") == len(idf.search("cats and dogs", k=len(documents)))
    from semiret.search import VectorsRetriever

    vectors = VectorsRetriever.build([Document(d.id, d.text, vector=[1.0, n]) for n, d in enumerate(documents)],
                                     tmp_path / "vectors")
    with pytest.raises(SemiretError, match="no model to embed query texts"):
        vectors.count(query="cats")
    hybrid = HybridRetriever.build(documents, tmp_path / "hybrid", neural="idf")
    with pytest.raises(SemiretError, match="ranks otherwise"):
        hybrid.count(query="cats")
    cli = CliRunner().invoke(app, ["count", str(tmp_path / "bm25"), "--query", "statins heart", "--filter", "n=2"])
    assert cli.exit_code == 0 and int(cli.stdout) == bm25.count({"n": 2}, "statins heart")
    with LocalClient(create_app(ServeSettings({"bm25": str(tmp_path / "bm25")}, write_process=False))) as client:
        served = client.post("/indexes/bm25/documents/count", json={"query": "statins heart", "filter": {"n": [0, 2]}})
        assert served.json()["count"] == bm25.count({"n": [0, 2]}, "statins heart")


def test_a_server_of_a_lower_max_k_still_counts_facets(tmp_path, tiny_docs):
    documents = [Document(d.id, d.text, metadata={"kind": n % 2}) for n, d in enumerate(tiny_docs)]
    BM25Retriever.build(documents, tmp_path / "idx")
    settings = ServeSettings({"idx": str(tmp_path / "idx")}, write_process=False, max_k=50, max_hits=50)
    with LocalClient(create_app(settings)) as client:
        assert client.post("/indexes/idx/facet", json={"field": "kind"}).status_code == 200
        assert client.post("/indexes/idx/facet", json={"field": "kind", "query": "cats"}).status_code == 200
        assert client.post("/indexes/idx/facet", json={"field": "kind", "query": "cats", "depth": 51}).status_code == 422


def test_facets_of_a_page_searched_with_options_and_operators(tmp_path):
    from collections import Counter

    documents = [Document(f"d{n}", f"{'statins heart' if n % 2 else 'statins'} note {n}", metadata={"kind": n % 3})
                 for n in range(24)]
    BM25Retriever.build(documents, tmp_path / "idx")
    plain, rm3 = open_retriever(tmp_path / "idx"), open_retriever(tmp_path / "idx", rm3=True, fb_docs=2)
    for retriever, options in ((plain, {}), (rm3, {"rm3": True, "fb_docs": 2})):
        page = retriever.search("statins -heart", k=6, operators=True)
        expected = Counter(retriever.get_document(h.id).metadata["kind"] for h in page)
        assert dict(retriever.facet("kind", query="statins -heart", depth=6, operators=True)) == dict(expected)
        with LocalClient(create_app(ServeSettings({"idx": str(tmp_path / "idx")}, write_process=False))) as client:
            served = client.post("/indexes/idx/facet", json={"field": "kind", "query": "statins -heart", "depth": 6,
                                                             "operators": True, "options": options})
            assert {v["value"]: v["count"] for v in served.json()["values"]} == dict(expected)
