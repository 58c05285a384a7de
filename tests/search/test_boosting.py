"""Scores boosted by metadata (``search(..., boost=...)``, ``search --boost``, the service's ``"boost"``): OpenSearch's
decay functions and field factors computed as it does, filters' weights, the product of several, negative scores
moved the same way, only the best ``candidates`` ranked again, and what is refused."""

from __future__ import annotations

import datetime
import json
import random
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from semiret.cli import app
from semiret.data import Document
from semiret.errors import SemiretError
from semiret.search import BM25Retriever
from semiret.search.boosting import Boost, boost_function
from semiret.serving import ServeSettings, create_app

from helpers import LocalClient, client_of, write_beir

# the same text in every document, so that BM25 ties them all and the boost alone orders them
DOCS = [Document(f"d{n}", "statins lower cholesterol", metadata=metadata) for n, metadata in enumerate([
    {"published": "2026-11-20", "citations": 3, "source": "web"},
    {"published": "2026-06-01", "citations": 300, "source": "pubmed"},
    {"published": "2025-01-01T12:00:00+02:00", "citations": [10, 40], "source": "pubmed"},
    {"citations": "many", "source": "web"},  # no date; not a number
    {"published": "2026-11-29", "source": "arxiv"},
])]
QUERY = "statins cholesterol"
NOW = "2026-11-30"


@pytest.fixture
def bm25(tmp_path):
    return BM25Retriever.build(DOCS, tmp_path / "bm25")


def ids(hits) -> list[str]:
    return [hit.id for hit in hits]


def factor(function, value, origin=None):
    """One function's factor for a stored value (a decay's at ``origin``)."""
    if hasattr(function, "_positions"):
        return function._factor(function._positions(value), function.origin if origin is None else origin)
    return function._factor(function._number(value))


@pytest.mark.parametrize("shape", ["gauss", "exp", "linear"])
def test_decays_are_opensearch_s(shape):
    function = boost_function({"decay": shape, "field": "x", "origin": 10, "scale": 4, "offset": 1, "midpoint": 0.25},
                              1)

    class decay:  # the function's factor of a value, at an origin
        _factor = staticmethod(lambda value, origin: factor(function, value, origin))
    assert decay._factor(10, 10) == 1.0 and decay._factor(11, 10) == 1.0 and decay._factor(9, 10) == 1.0  # offset
    assert decay._factor(15, 10) == pytest.approx(0.25) and decay._factor(5, 10) == pytest.approx(0.25)  # midpoint
    far = decay._factor(10 + 1 + 6, 10)  # distance 6 beyond the offset, by OpenSearch's formulas
    expected = {"gauss": math.exp(-36 / (2 * (-16 / (2 * math.log(0.25))))),
                "exp": math.exp(math.log(0.25) / 4 * 6),
                "linear": max(0.0, (4 / 0.75 - 6) / (4 / 0.75))}[shape]
    assert far == pytest.approx(expected)
    assert decay._factor([30, 11, "x"], 10) == 1.0  # a list: its nearest value
    assert decay._factor("soon", 10) == 1.0 and decay._factor(None, 10) == 1.0  # no number: left as it is
    assert decay._factor("15", 10) == pytest.approx(0.25)  # a number written as a string
    assert decay._factor(10 ** 400, 10) == 1.0  # an integer beyond any float: no number
    tiny = boost_function({"decay": shape, "field": "x", "origin": 0, "scale": 1e-300}, 1)
    assert factor(tiny, 1e10) == 0.0 and factor(tiny, 0) == 1.0  # overflows to a factor of 0, not an error


def test_dates_and_durations():
    day = boost_function({"decay": "exp", "field": "at", "origin": "2026-01-10", "scale": "2d"}, 1)
    assert factor(day, "2026-01-12") == pytest.approx(0.5)  # midpoint 0.5 by default
    assert factor(day, "2026-01-08T00:00:00Z") == pytest.approx(0.5)  # either side
    assert factor(day, "2026-01-12T02:00:00+02:00") == pytest.approx(0.5)  # instants, offsets read
    assert factor(day, 20260112) == 1.0 and factor(day, "2026-13-01") == 1.0  # no date
    hours = boost_function({"decay": "linear", "field": "at", "origin": datetime.date(2026, 1, 10), "scale": "36h",
                            "offset": "0.5d"}, 1)
    assert hours.scale == 36 * 3600 and hours.offset == 12 * 3600
    now = boost_function({"decay": "gauss", "field": "at", "origin": "now", "scale": "1w"}, 1)
    assert now.origin is None and now.dates


def test_field_factors():
    assert factor(boost_function({"field": "c", "modifier": "log1p", "factor": 2}, 1), 4.5) == pytest.approx(1.0)
    sqrt = boost_function({"field": "c", "modifier": "sqrt"}, 1)
    assert factor(sqrt, [16, 4, "x"]) == pytest.approx(2.0)  # a list: its smallest number, as OpenSearch reads it
    assert factor(sqrt, "16") == pytest.approx(4.0)  # a number written as a string
    assert factor(boost_function({"field": "c"}, 1), 3) == 3.0
    assert factor(boost_function({"field": "c"}, 1), True) == 1.0  # a boolean is not a number
    assert factor(boost_function({"field": "c"}, 1), 10 ** 400) == 1.0  # nor an integer beyond any float
    missing = boost_function({"field": "c", "modifier": "ln2p", "missing": 0}, 1)
    assert factor(missing, "many") == pytest.approx(math.log(2))
    for modifier, value in (("log", 0), ("reciprocal", 0), ("ln", -1), ("none", -2)):  # no finite factor >= 0
        assert factor(boost_function({"field": "c", "modifier": modifier}, 1), value) == 1.0
    largest = float(np.finfo(np.float32).max)
    assert factor(boost_function({"field": "c", "modifier": "square"}, 1), 1e200) == largest  # capped, not lost


def test_a_fresher_document_first(bm25):
    plain = bm25.search(QUERY, k=5)
    assert len({hit.score for hit in plain}) == 1
    fresh = bm25.search(QUERY, k=5, boost={"decay": "gauss", "field": "published", "origin": NOW, "scale": "30d"})
    # no date: left as it is (OpenSearch's decays give 1), then a day old, ten days, half a year, two years
    assert ids(fresh) == ["d3", "d4", "d0", "d1", "d2"]
    base = plain[0].score
    scores = {hit.id: hit.score for hit in fresh}
    assert scores["d3"] == pytest.approx(base)  # no date: left as it is
    assert scores["d4"] == pytest.approx(base * 0.5 ** (1 / 30) ** 2)
    assert scores["d2"] < scores["d1"] < base  # older, lower


def test_filters_multiply_with_fields(bm25):
    boost = [{"filter": {"source": "pubmed"}, "weight": 2}, {"field": "citations", "modifier": "log1p",
                                                            "missing": 0}]
    hits = {hit.id: hit.score for hit in bm25.search(QUERY, k=5, boost=boost)}
    base = bm25.search(QUERY, k=1)[0].score
    assert hits["d1"] == pytest.approx(base * 2 * math.log10(301))
    assert hits["d2"] == pytest.approx(base * 2 * math.log10(11))  # a list: its smallest
    assert hits["d3"] == pytest.approx(0.0)  # "many" reads as missing: log1p(0) = 0, as OpenSearch's
    assert ids(bm25.search(QUERY, k=2, boost=boost)) == ["d1", "d2"]
    buried = bm25.search(QUERY, k=5, boost={"filter": {"source": "web"}, "weight": 0})
    assert set(ids(buried)[-2:]) == {"d0", "d3"} and buried[-1].score == 0.0
    text = bm25.search(QUERY, k=1, boost={"filter": {"$text": "cholesterol"}, "weight": 3})
    assert text[0].score == pytest.approx(3 * base)  # every filter, $text included


def test_negative_scores_move_the_same_way():
    boost = Boost({"field": "f"})
    scores = {"a": 2.0, "b": 0.5, "c": -0.5}

    class Values:  # an index's field values, as field_values reads them of a Milvus-like index
        meta = {"analyzer": {}}

        def get_documents(self, doc_ids):
            return {doc_id: Document(doc_id, "x", metadata={"f": {"a": 0.5, "b": 2.0, "c": 2.0}[doc_id]})
                    for doc_id in doc_ids}

    ranked, boosted = boost.rescored(Values(), list(scores), list(scores.values()), 3)
    assert ranked == ["a", "b", "c"] and boosted == pytest.approx([1.0, 1.0, 0.0])  # ties: ranking order; -0.5 raised
    ranked, boosted = Boost({"field": "f", "factor": 0.25}).rescored(Values(), ["c"], [-0.5], 1)
    assert boosted == pytest.approx([-0.5 + 0.5 * (0.25 * 2 - 1)])  # a factor below 1 lowers a negative score too


def test_only_the_candidates_are_ranked_again(tmp_path):
    docs = [Document("strong", "statins statins cholesterol", metadata={"w": 1}),
            Document("weak", "statins and a long text about other things entirely, cholesterol", metadata={"w": 100})]
    bm25 = BM25Retriever.build(docs, tmp_path / "two")
    assert ids(bm25.search(QUERY, k=1, boost={"field": "w"}, candidates=1)) == ["strong"]  # weak not among them
    assert ids(bm25.search(QUERY, k=1, boost={"field": "w"})) == ["weak"]
    assert ids(bm25.search(QUERY, k=1, boost={"field": "w"}, filter={"w": 1})) == ["strong"]  # filters first
    floor = bm25.search(QUERY, k=1)[0].score * 2
    assert ids(bm25.search(QUERY, k=2, boost={"field": "w"}, score_threshold=floor)) == ["weak"]  # boosted scores


def test_several_segments_deletions_and_diversity(bm25):
    bm25.add([Document("new", "statins lower cholesterol", metadata={"source": "pubmed", "citations": 1000})])
    bm25.delete(["d1"])
    boost = [{"filter": {"source": "pubmed"}, "weight": 2}, {"field": "citations", "modifier": "log1p"}]
    assert ids(bm25.search(QUERY, k=2, boost=boost)) == ["new", "d2"]
    picked = bm25.search(QUERY, k=3, boost=boost, diversity=0.0)  # diversity 0: the boosted ranking
    assert ids(picked) == ids(bm25.search(QUERY, k=3, boost=boost))
    batch = bm25.search([QUERY, "nothing matches this"], k=2, boost=boost)
    assert batch.ids[0] == ["new", "d2"] and batch.ids[1] == []


def test_what_is_refused(bm25, tmp_path):
    for wrong, message in (([], "non-empty list"), ("x", "non-empty list"), ([3], "must be an object"),
                           ({"weight": 2}, "names no function"), ({"filter": {"a": 1}}, "needs a 'weight'"),
                           ({"filter": {}, "weight": 2}, "non-empty filter"),
                           ({"filter": {"a": 1}, "weight": -1}, "at least 0"),
                           ({"filter": {"a": 1}, "weight": 2, "boost": 3}, "unknown key 'boost'"),
                           ({"filter": {"a": {"near": 1}}, "weight": 2}, "near"),
                           ({"field": "", "factor": 2}, "'field'"), ({"field": "a", "modifier": "log3"}, "modifier"),
                           ({"field": "a", "factor": float("nan")}, "finite"),
                           ({"decay": "cubic", "field": "a", "origin": 0, "scale": 1}, "gauss, exp, linear"),
                           ({"decay": "exp", "field": "a", "scale": 1}, "needs 'origin'"),
                           ({"decay": "exp", "field": "a", "origin": "yesterday", "scale": "1d"}, "ISO 8601"),
                           ({"decay": "exp", "field": "a", "origin": NOW, "scale": 3}, "duration"),
                           ({"decay": "exp", "field": "a", "origin": NOW, "scale": "3y"}, "duration"),
                           ({"decay": "exp", "field": "a", "origin": 0, "scale": 0}, "above 0"),
                           ({"decay": "exp", "field": "a", "origin": 0, "scale": 1, "offset": -1}, "at least 0"),
                           ({"decay": "exp", "field": "a", "origin": 0, "scale": 1, "midpoint": 1}, "between 0 and 1"),
                           ({"decay": "exp", "field": "a", "origin": 0, "scale": 1, "midpoint": 0}, "above 0")):
        with pytest.raises(SemiretError, match=message):
            bm25.search(QUERY, boost=wrong)
    with pytest.raises(SemiretError, match="boost function 2"):  # which one is wrong
        bm25.search(QUERY, boost=[{"field": "a"}, {"field": 3}])
    with pytest.raises(SemiretError, match="at least k"):
        bm25.search(QUERY, k=5, boost={"field": "citations"}, candidates=3)
    with pytest.raises(SemiretError, match="diversified or boosted"):
        bm25.search(QUERY, candidates=10)
    bare = BM25Retriever.build(DOCS, tmp_path / "bare", store_texts=False)
    with pytest.raises(SemiretError, match="no metadata to boost by"):
        bare.search(QUERY, boost={"field": "citations"})


def test_the_command_line_and_eval(bm25, tmp_path):
    runner = CliRunner()
    index = str(bm25.index.path)
    fresh = {"decay": "gauss", "field": "published", "origin": NOW, "scale": "30d"}
    result = runner.invoke(app, ["search", "--index", index, QUERY, "-k", "2", "--json", "--boost", json.dumps(fresh),
                                 "--boost", json.dumps([{"filter": {"source": "arxiv"}, "weight": 0}])])
    assert result.exit_code == 0, result.output
    assert [h["id"] for h in json.loads(result.stdout)["hits"]] == ["d3", "d0"]  # undated, then d4 buried
    result = runner.invoke(app, ["search", "--index", index, QUERY, "--boost", "{decay: gauss}"])
    assert result.exit_code != 0 and "--boost" in result.output and "not JSON" in result.output
    result = runner.invoke(app, ["search", "--index", index, "--like", "d0", "--boost", json.dumps(fresh)])
    assert result.exit_code != 0 and "--boost" in result.output

    from semiret.evaluation.evaluate import evaluate

    data = write_beir(tmp_path / "data", docs=DOCS, queries={"q": QUERY}, qrels={"q": {"d0": 1}})
    plain = evaluate(data, "bm25", index=tmp_path / "index", depth=5, measures=["RR"])
    cited = {"filter": {"citations": 3}, "weight": 2}
    boosted = evaluate(data, "bm25", index=tmp_path / "index", depth=5, measures=["RR"], boost=cited)
    assert boosted["RR"] == 1.0 and plain["RR"] < 1.0 and boosted["options"] == {"boost": cited}
    with pytest.raises(SemiretError, match="unknown key"):
        evaluate(data, "bm25", index=tmp_path / "other", boost={"field": "a", "x": 1})
    assert not (tmp_path / "other").exists()


def test_the_service_and_its_client(bm25, tmp_path):
    settings = ServeSettings({"docs": str(bm25.index.path)}, write_process=False, max_k=50)
    fresh = {"decay": "gauss", "field": "published", "origin": NOW, "scale": "30d"}
    expected = ids(bm25.search(QUERY, k=3, boost=fresh))
    with LocalClient(create_app(settings)) as http:
        answer = http.post("/indexes/docs/search", json={"queries": [QUERY], "k": 3, "boost": fresh})
        assert answer.status_code == 200, answer.text
        assert [h["id"] for h in answer.json()["results"][0]] == expected
        paged = http.post("/indexes/docs/search", json={"queries": [QUERY], "k": 2, "offset": 1, "boost": [fresh]})
        assert [h["id"] for h in paged.json()["results"][0]] == expected[1:3]
        assert ids(client_of(http).search("docs", QUERY, k=3, boost=fresh, candidates=5)) == expected
        explained = http.post("/indexes/docs/search", json={"queries": [QUERY], "k": 3, "explain": True,
                                                            "boost": {"filter": {"source": "pubmed"}, "weight": 3}})
        rows = explained.json()["results"][0]
        assert [row["explanation"]["boost_factor"] for row in rows] == [3.0, 3.0, 1.0]
        assert rows[0]["score"] == pytest.approx(3 * rows[0]["explanation"]["score"])
        served = client_of(http).search("docs", QUERY, k=3, explain=True, boost={"filter": {"source": "pubmed"},
                                                                                "weight": 3})
        assert [hit.explanation.boost_factor for hit in served] == [3.0, 3.0, 1.0]  # the client's hits keep it
        assert served[0].score == pytest.approx(3 * served[0].explanation.score)
        grouped = http.post("/indexes/docs/search", json={"queries": [QUERY], "k": 2, "group_by": "source",
                                                          "boost": {"filter": {"source": "web"}, "weight": 2}})
        assert [row["group"] for row in grouped.json()["results"][0]] == ["web", "pubmed"]
        plain = http.post("/indexes/docs/search", json={"queries": [QUERY], "k": 1, "explain": True}).json()
        assert "boost_factor" not in plain["results"][0][0]["explanation"]
        for body, field in (({"boost": {"field": "a", "modifier": "log3"}}, "boost"),
                            ({"boost": [fresh, 3]}, "boost"),
                            ({"boost": fresh, "candidates": 51}, "candidates"),
                            ({"boost": fresh, "k": 3, "offset": 2, "candidates": 4}, "candidates"),
                            ({"boost": {"field": "a", "modifier": ["log"]}}, "boost"),
                            ({"boost": {"filter": {"a": 1}, "weight": 10 ** 400}}, "boost"),
                            ({"candidates": 10}, "candidates")):
            answer = http.post("/indexes/docs/search", json={"queries": [QUERY], **body})
            assert answer.status_code == 422, (body, answer.text)
            assert field in json.dumps(answer.json()["detail"])
    wide = ServeSettings({"docs": str(bm25.index.path)}, write_process=False, max_k=1000)
    with LocalClient(create_app(wide)) as http:  # more than 100 hits: k candidates by default, as in Python
        answer = http.post("/indexes/docs/search", json={"queries": [QUERY], "k": 150, "boost": fresh})
        assert answer.status_code == 200, answer.text
    bare = BM25Retriever.build(DOCS, tmp_path / "bare", store_texts=False)
    with LocalClient(create_app(ServeSettings({"bare": str(bare.index.path)}, write_process=False))) as http:
        answer = http.post("/indexes/bare/search", json={"queries": [QUERY], "boost": fresh})
        assert answer.status_code == 422 and "no metadata" in answer.text


def test_the_services_pages_and_groups_choose_from_pythons_candidates(tmp_path):
    """The service's default candidates are Python's for the page's k, whatever its offset: every page of a
    ranking chooses from the same hits (a page past them is refused, naming candidates, rather than taken from
    another ranking, repeating and skipping hits), and a grouped search has room for k full groups."""
    rng = random.Random(7)
    words = "statins cholesterol heart risk trial dose cohort diet".split()
    docs = [Document(f"d{n}", " ".join(rng.choices(words, k=rng.randint(2, 9))),
                     metadata={"citations": rng.randint(0, 500), "source": rng.choice(["web", "pubmed", "arxiv"])})
            for n in range(300)]
    bm25 = BM25Retriever.build(docs, tmp_path / "bm25")
    boost = {"field": "citations", "modifier": "log1p"}
    settings = ServeSettings({"docs": str(bm25.index.path)}, write_process=False, max_k=1000)
    with LocalClient(create_app(settings)) as http:
        def page(offset: int, **more) -> list[str]:
            answer = http.post("/indexes/docs/search", json={"queries": [QUERY], "k": 10, "offset": offset,
                                                             "boost": boost, **more})
            assert answer.status_code == 200, answer.text
            return [row["id"] for row in answer.json()["results"][0]]

        assert [d for offset in range(0, 100, 10) for d in page(offset)] == ids(bm25.search(QUERY, k=100,
                                                                                           boost=boost))
        deep = http.post("/indexes/docs/search", json={"queries": [QUERY], "k": 10, "offset": 95, "boost": boost})
        assert deep.status_code == 422 and "candidates" in deep.text
        paged = [d for offset in range(0, 150, 10) for d in page(offset, candidates=150)]
        assert paged == ids(bm25.search(QUERY, k=150, boost=boost, candidates=150)) and len(set(paged)) == 150
        grouped = {"queries": [QUERY], "k": 3, "group_by": "source", "group_size": 40, "boost": boost}
        over_http = [row["id"] for row in http.post("/indexes/docs/search", json=grouped).json()["results"][0]]
        assert over_http == ids(bm25.search(QUERY, k=3, group_by="source", group_size=40, boost=boost))
        assert len(over_http) > 100  # room for 3 groups of 40: more than the 100 candidates of an ungrouped search


def test_numbers_from_numpy_are_numbers(bm25):
    assert len(bm25.search(QUERY, k=np.int64(2), boost={"field": "citations", "factor": np.float32(2)})) == 2


def test_scores_stay_finite_and_a_factor_of_0_buries(tmp_path):
    docs = [Document("a", "statins lower cholesterol", metadata={"n": 1e200, "src": "x"}),
            Document("b", "statins lower cholesterol levels", metadata={"n": 1.0})]
    bm25 = BM25Retriever.build(docs, tmp_path / "huge")
    hits = bm25.search("statins", k=2, boost=[{"field": "n"}, {"field": "n"}])
    largest = float(np.finfo(np.float32).max)
    assert ids(hits) == ["a", "b"] and 1e37 < hits[0].score < largest  # the factor capped, not inf
    hits = bm25.search("statins", k=2, boost=[{"field": "n"}, {"field": "n"}, {"filter": {"src": "x"}, "weight": 0}])
    assert ids(hits) == ["b", "a"] and hits[1].score == 0.0  # 0 x inf is 0 here, not NaN
    result = CliRunner().invoke(app, ["search", "--index", str(bm25.index.path), "statins", "--json", "--boost",
                                      json.dumps([{"field": "n"}, {"field": "n"}])])
    assert result.exit_code == 0 and "Infinity" not in result.stdout and "NaN" not in result.stdout

    class Values:  # a dense retriever's negative scores: weight 0 still buries
        meta = {"analyzer": {}}

        def get_documents(self, doc_ids):
            return {d: Document(d, "x", metadata={"src": "spam" if d == "a" else "ok"}) for d in doc_ids}

    ranked, scores = Boost({"filter": {"src": "spam"}, "weight": 0}).rescored(Values(), ["a", "b", "c"],
                                                                              [-0.05, -0.2, -0.4], 3)
    assert ranked == ["b", "c", "a"] and scores[2] < scores[1] == -0.4  # below every other, scores still falling
    ranked, scores = Boost({"filter": {"src": "spam"}, "weight": 0}).rescored(Values(), ["a"], [-0.05], 1)
    assert ranked == ["a"] and scores == [-0.1]  # alone: nothing to go below


def test_bad_numbers_and_kinds_are_errors_not_crashes(bm25, tmp_path, caplog):
    for wrong, message in (({"field": "a", "modifier": ["log"]}, "modifier"),
                           ({"decay": {}, "field": "a", "origin": 0, "scale": 1}, "gauss, exp, linear"),
                           ({"filter": {"a": 1}, "weight": 10 ** 400}, "beyond any float"),
                           ({"decay": "exp", "field": "a", "origin": 10 ** 400, "scale": 1}, "beyond any float"),
                           ({"field": "a", "factor": "2"}, "finite number"),
                           ([{"field": f"f{n}"} for n in range(9)], "at most 8 fields")):
        with pytest.raises(SemiretError, match=message):
            bm25.search(QUERY, boost=wrong)
    assert Boost(Boost({"field": "a"})).functions == Boost({"field": "a"}).functions
    assert len(bm25.search(QUERY, k=2, boost=Boost({"field": "citations"}))) == 2
    with caplog.at_level("WARNING"):
        for _ in range(2):
            bm25.search(QUERY, boost={"decay": "exp", "field": "citations", "origin": "now", "scale": "1d"})
    said = [r.getMessage() for r in caplog.records if "changed nothing" in r.getMessage()]
    assert len(said) == 1 and "'citations'" in said[0] and "date" in said[0]  # numbers where dates are wanted; once
    from semiret.evaluation.evaluate import evaluate

    data = write_beir(tmp_path / "data", docs=DOCS, queries={"q": QUERY}, qrels={"q": {"d0": 1}})
    with pytest.raises(SemiretError, match="at least --depth"):
        evaluate(data, "bm25", index=tmp_path / "index", depth=5, candidates=3, boost={"field": "citations"})


def test_boosted_groups_and_passages(bm25, tmp_path):
    grouped = bm25.search(QUERY, k=2, boost={"filter": {"source": "web"}, "weight": 2}, group_by="source",
                          group_size=2)
    assert [h.group for h in grouped] == ["web", "web", "pubmed", "pubmed"]  # groups by their best boosted hit
    assert {h.id for h in grouped[:2]} == {"d0", "d3"}
    from semiret.data.chunking import Chunking

    long = [Document("old", "statins " * 30 + "cholesterol " * 30, metadata={"year": 2001}),
            Document("new", "statins " * 25 + "cholesterol " * 25 + "other words " * 10, metadata={"year": 2026})]
    passages = BM25Retriever.build(long, tmp_path / "passages", chunking=Chunking(20, 0))
    plain = passages.search(QUERY, k=2, group_by="parent")
    boosted = passages.search(QUERY, k=2, group_by="parent", boost={"filter": {"year": 2026}, "weight": 3})
    assert [h.group for h in boosted] == ["new", "old"] and [h.group for h in plain][0] == "old"
    from semiret.evaluation.evaluate import evaluate

    data = write_beir(tmp_path / "data", docs=long, queries={"q": QUERY}, qrels={"q": {"new": 1}})
    figures = evaluate(data, "bm25", index=tmp_path / "index", depth=2, measures=["RR"], chunk_words=20,
                       boost={"filter": {"year": 2026}, "weight": 3})
    assert figures["RR"] == 1.0
