"""Documents like some of the index's (``Retriever.recommend``, ``semiret search --like``, ``POST .../recommend``):
one example's own ranking, several fused by reciprocal rank with negatives subtracted, the examples left out,
filters, indexes of passages, and bad examples."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from semiret.cli import app
from semiret.data import Document
from semiret.data.chunking import Chunking
from semiret.errors import SemiretError, UnknownDocumentError
from semiret.search import BM25Retriever, open_retriever, retriever_class
from semiret.serving import ServeSettings, create_app

from helpers import LocalClient, TINY_DOCS

CORPUS = TINY_DOCS + [
    Document("d7", "Cats and mice: a garden story of chases.", metadata={"kind": "story"}),
    Document("d8", "Mailman dogs bark letters morning.", metadata={"kind": "news"}),
    Document("d9", "Heart disease, statins and cancer risk in a cohort.", metadata={"kind": "news"}),
]


@pytest.fixture
def bm25(tmp_path):
    return BM25Retriever.build(CORPUS, tmp_path / "bm25")


def _rrf(rankings: list[list[str]], signs: list[float]) -> dict[str, float]:
    fused: dict[str, float] = {}
    for ranking, sign in zip(rankings, signs):
        for rank, doc_id in enumerate(ranking, 1):
            fused[doc_id] = fused.get(doc_id, 0.0) + sign / (60 + rank)
    return fused


def test_one_example_is_its_own_text_searched_without_itself(bm25):
    text = bm25.get_document("d1").full_text
    expected = [(h.id, h.score) for h in bm25.search(text, k=6) if h.id != "d1"][:5]
    hits = bm25.recommend(["d1"], k=5)
    assert [(h.id, h.score) for h in hits] == expected and "d1" not in [h.id for h in hits]
    assert isinstance(hits[0].score, float) and hits[0].text  # a hit reads its document as a search's does


def test_several_examples_are_fused_by_rank_and_negatives_push_down(bm25):
    rankings = [[h.id for h in bm25.search(bm25.get_document(d).full_text, k=100)] for d in ("d1", "d3", "d5")]
    fused = _rrf(rankings, [1.0, 1.0])
    expected = sorted(((d, s) for d, s in fused.items() if d not in ("d1", "d3")), key=lambda x: (-x[1], x[0]))
    hits = bm25.recommend(["d1", "d3"], k=4)
    assert [h.id for h in hits] == [d for d, _ in expected[:4]]
    assert [h.score for h in hits] == pytest.approx([s for _, s in expected[:4]])
    with_negative = _rrf(rankings, [1.0, 1.0, -1.0])
    kept = sorted(((d, s) for d, s in with_negative.items() if s > 0 and d not in ("d1", "d3", "d5")),
                  key=lambda x: (-x[1], x[0]))
    unlike = bm25.recommend(["d1", "d3"], ["d5"], k=10)
    assert [h.id for h in unlike] == [d for d, _ in kept]
    assert "d8" in [h.id for h in hits + bm25.recommend(["d5"], k=10)] and "d8" not in [h.id for h in unlike]


def test_recommendations_pass_the_filter(bm25):
    hits = bm25.recommend(["d3"], k=10, filter={"kind": "news"})
    assert {h.id for h in hits} <= {"d8", "d9"} and "d9" in [h.id for h in hits]
    assert "d6" in [h.id for h in bm25.recommend(["d3"], k=10)]  # what the filter keeps out


def test_an_index_of_passages_recommends_from_whole_documents(tmp_path):
    long = Document("long", " ".join(["statins heart cancer risk cohort"] * 6), "Long")
    retriever = BM25Retriever.build(CORPUS + [long], tmp_path / "passages", chunking=Chunking(words=12, overlap=2))
    assert retriever.get_document("long") == long  # only its passages are stored: joined again
    hits = retriever.recommend(["long"], k=10)
    assert hits and not any(h.id.startswith("long#") for h in hits)
    assert hits[0].id in ("d3", "d9")
    assert not any(h.id.startswith("long#") for h in retriever.recommend(["d9"], ["long"], k=10))


def test_bad_examples_are_clear_errors(tmp_path, bm25):
    with pytest.raises(UnknownDocumentError, match="no document 'nope'"):
        bm25.recommend(["d1"], ["nope"])
    with pytest.raises(SemiretError, match="at least one positive"):
        bm25.recommend([])
    with pytest.raises(SemiretError, match="positive takes a list of ids"):
        bm25.recommend("d1")
    with pytest.raises(SemiretError, match="k must be at least 1"):
        bm25.recommend(["d1"], k=0)
    bare = BM25Retriever.build(CORPUS, tmp_path / "bare", store_texts=False)
    with pytest.raises(SemiretError, match="no stored documents"):
        bare.recommend(["d1"])


def test_recommend_with_a_retriever_over_tokens(tmp_path):
    retriever = retriever_class("idf").build(CORPUS, tmp_path / "idf")
    hits = retriever.recommend(["d6"], k=3)
    assert len(hits) == 3 and "d6" not in [h.id for h in hits]


def test_search_like_from_the_command_line(tmp_path, bm25):
    runner = CliRunner()
    found = runner.invoke(app, ["search", "--index", str(bm25.index.path), "--like", "d1", "--like", "d3",
                                "--unlike", "d5", "-k", "3", "--json"])
    assert found.exit_code == 0, found.output
    line = json.loads(found.output.splitlines()[0])
    assert line["like"] == ["d1", "d3"] and line["unlike"] == ["d5"]
    assert [hit["id"] for hit in line["hits"]] == [h.id for h in bm25.recommend(["d1", "d3"], ["d5"], k=3)]
    table = runner.invoke(app, ["search", "--index", str(bm25.index.path), "--like", "d1"])
    assert table.exit_code == 0 and "like d1" in table.output
    for arguments, message in [(["cats", "--like", "d1"], "--like searches with the documents"),
                               (["--unlike", "d1"], "--unlike goes with --like"),
                               (["--like", "nope"], "no document 'nope'")]:
        refused = runner.invoke(app, ["search", "--index", str(bm25.index.path), *arguments])
        assert refused.exit_code != 0 and message in refused.output, refused.output


def test_recommend_over_http(bm25):
    client = LocalClient(create_app(ServeSettings({"tiny": str(bm25.index.path)}, write_process=False,
                                                 api_key="key", max_batch=3, max_k=20)))
    answer = client.post("/indexes/tiny/recommend", json={"positive": ["d1", "d3"], "negative": ["d5"], "k": 3,
                                                          "with_text": True})
    assert answer.status_code == 200, answer.text
    [hits] = answer.json()["results"]
    direct = open_retriever(bm25.index.path).recommend(["d1", "d3"], ["d5"], k=3)
    assert [h["id"] for h in hits] == [h.id for h in direct] and hits[0]["text"] == direct[0].text
    filtered = client.post("/indexes/tiny/recommend", json={"positive": ["d3"], "filter": {"kind": "news"}})
    assert {h["id"] for h in filtered.json()["results"][0]} <= {"d8", "d9"}
    missing = client.post("/indexes/tiny/recommend", json={"positive": ["nope"]})
    assert missing.json() == {"detail": "no document 'nope' in index 'tiny' to recommend from"}  # no server path
    assert client.post("/indexes/tiny/explain", json={"query": "cats", "id": "nope"}).json() == {
        "detail": "no document 'nope' in index 'tiny'"}
    assert client.post("/indexes/tiny/recommend", json={"positive": []}).status_code == 422
    assert client.post("/indexes/tiny/recommend", json={"positive": ["d1"], "k": 21}).status_code == 422
    assert client.post("/indexes/tiny/recommend", json={"positive": ["d1", "d2"],
                                                        "negative": ["d3", "d4"]}).status_code == 413
    bad_option = client.post("/indexes/tiny/recommend", json={"positive": ["d1"], "options": {"rm3": "yes"}})
    assert bad_option.status_code == 422 and bad_option.json()["detail"][0]["loc"] == ["body", "options", "rm3"]


def test_a_score_threshold_drops_the_hits_below_it(bm25, tmp_path):
    hits = bm25.search("cats dogs garden", k=6)
    cut = hits[2].score
    kept = bm25.search("cats dogs garden", k=6, score_threshold=cut)
    assert [h.id for h in kept] == [h.id for h in hits if h.score >= cut] and len(kept) < len(hits)
    assert bm25.search(["cats"], k=5, score_threshold=1e9).ids == [[]]
    grouped = bm25.search("cats dogs garden", k=6, group_by="kind", score_threshold=cut)
    assert all(h.score >= cut for h in grouped)
    like = bm25.recommend(["d1"], k=5)
    assert [h.id for h in bm25.recommend(["d1"], k=5, score_threshold=like[1].score)] == [h.id for h in like[:2]]
    for bad in (float("nan"), float("inf"), "1", True, np.float32("nan")):
        with pytest.raises(SemiretError, match="score_threshold must be a finite number"):
            bm25.search("cats", score_threshold=bad)
    read_off = np.float32(cut)  # a threshold read off numpy scores (it was refused as no finite number)
    assert [h.id for h in bm25.search("cats dogs garden", k=6, score_threshold=read_off)] == [h.id for h in kept]
    runner = CliRunner()
    found = runner.invoke(app, ["search", "--index", str(bm25.index.path), "--json", "--score-threshold", str(cut),
                                "cats dogs garden"])
    assert [h["id"] for h in json.loads(found.output)["hits"]] == [h.id for h in kept]
    client = LocalClient(create_app(ServeSettings({"tiny": str(bm25.index.path)}, write_process=False)))
    served = client.post("/indexes/tiny/search", json={"queries": ["cats dogs garden"], "k": 6,
                                                       "score_threshold": cut})
    assert [h["id"] for h in served.json()["results"][0]] == [h.id for h in kept]
    assert client.post("/indexes/tiny/search", json={"queries": ["cats"], "score_threshold": "1"}).status_code == 422
    liked = client.post("/indexes/tiny/recommend", json={"positive": ["d1"], "score_threshold": like[1].score})
    assert [h["id"] for h in liked.json()["results"][0]] == [h.id for h in like[:2]]
