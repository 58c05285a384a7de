"""Suggestions as one types (``Retriever.suggest``, ``semiret suggest``, ``POST /indexes/{name}/suggest``): the words of
the stored documents the last word typed begins, the most documents first, counted beside the earlier words typed
(among all documents where none holds them), filters and deletions respected, and what gives none."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from semiret.cli import app
from semiret.data import Document
from semiret.errors import SemiretError
from semiret.search import BM25Retriever
from semiret.serving import ServeSettings, create_app

from helpers import client_of

DOCS = [
    Document("1", "Heart failure and statins.", "Statin therapy", metadata={"source": "a"}),
    Document("2", "Heart failure in the elderly; statistics of heart failure.", metadata={"source": "b"}),
    Document("3", "State of the art: statins lower cholesterol.", metadata={"source": "a"}),
    Document("4", "Heart rate and heart rhythm.", metadata={"source": "b"}),
    Document("5", "Statistical methods for trials.", metadata={"source": "b"}),
]


@pytest.fixture
def bm25(tmp_path):
    return BM25Retriever.build(DOCS, tmp_path / "bm25")


def words(found) -> list[tuple[str, int]]:
    return [(each.word, each.count) for each in found]


def test_the_commonest_completions_first(bm25):
    found = bm25.suggest("Stat", k=10)
    assert words(found) == [("statins", 2), ("state", 1), ("statin", 1), ("statistical", 1), ("statistics", 1)]
    assert found[0].text == "statins" and not found[0].in_context  # the words as the documents hold them
    assert words(bm25.suggest("stat", k=2)) == [("statins", 2), ("state", 1)]  # ties by the word
    assert bm25.suggest("statin", k=1)[0].word == "statins"  # a whole word is a prefix of longer ones too


def test_the_earlier_words_count(bm25):
    found = bm25.suggest("heart f")
    assert words(found) == [("failure", 2)] and found[0].in_context and found[0].text == "heart failure"
    assert words(bm25.suggest("heart r")) == [("rate", 1), ("rhythm", 1)]
    elsewhere = bm25.suggest("cholesterol stati")  # no document holds cholesterol with a stati... word but 3
    assert words(elsewhere) == [("statins", 1)] and elsewhere[0].in_context
    alone = bm25.suggest("trials stati")  # only document 5 holds "trials": statistical, in context
    assert words(alone) == [("statistical", 1)]
    fallback = bm25.suggest("mice stat")  # no document holds "mice": counted over every document
    assert words(fallback)[0] == ("statins", 2) and not fallback[0].in_context
    assert fallback[0].text == "mice statins"


def test_filters_deletions_and_new_documents(bm25):
    assert words(bm25.suggest("stat", k=10, filter={"source": "b"})) == [("statistical", 1), ("statistics", 1)]
    bm25.delete(["5"])
    bm25.add([Document("6", "Statistical power.", metadata={"source": "c"})])
    assert ("statistical", 1) in words(bm25.suggest("stat", k=10))  # 5 gone, 6 there: one document
    assert words(bm25.suggest("stat", k=10, filter={"source": "c"})) == [("statistical", 1)]


def test_what_gives_none(bm25, tmp_path):
    assert bm25.suggest("heart ") == [] and bm25.suggest("") == [] and bm25.suggest("heart,") == []
    assert bm25.suggest("zzz") == []
    with pytest.raises(SemiretError, match="k"):
        bm25.suggest("stat", k=0)
    with pytest.raises(SemiretError, match="string"):
        bm25.suggest(["stat"])
    bare = BM25Retriever.build(DOCS, tmp_path / "bare", store_texts=False)
    with pytest.raises(SemiretError, match="no words to suggest"):
        bare.suggest("stat")


def test_the_command_line_and_the_service(bm25):
    result = CliRunner().invoke(app, ["suggest", "heart f", "--index", str(bm25.index.path), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"suggestions": [
        {"text": "heart failure", "word": "failure", "count": 2, "in_context": True}]}
    table = CliRunner().invoke(app, ["suggest", "stat", "--index", str(bm25.index.path), "--filter", "source=a"])
    assert table.exit_code == 0 and "statins" in table.output and "statistical" not in table.output
    settings = ServeSettings({"docs": str(bm25.index.path)}, write_process=False)
    with TestClient(create_app(settings)) as http:
        answer = http.post("/indexes/docs/suggest", json={"text": "stat", "k": 2})
        assert answer.status_code == 200 and [s["word"] for s in answer.json()["suggestions"]] == ["statins", "state"]
        assert [s.word for s in client_of(http).suggest("docs", "heart r", filter={"source": "b"})] == [
            "rate", "rhythm"]
        for body in ({"text": "stat", "k": 0}, {"k": 2}, {"text": "stat", "filter": {"a": {"near": 1}}},
                     {"text": "stat", "other": 1}):
            assert http.post("/indexes/docs/suggest", json=body).status_code == 422, body
