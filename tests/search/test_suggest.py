"""Suggestions as one types (``Retriever.suggest``, ``semiret suggest``, ``POST /indexes/{name}/suggest``): the words of
the stored documents the last word typed begins, the most documents first, counted beside the earlier words typed
(among all documents where none holds them), filters and deletions respected, and what gives none."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from semiret.cli import app
from semiret.data import Document
from semiret.errors import SemiretError
from semiret.search import BM25Retriever
from semiret.serving import ServeSettings, create_app

from helpers import LocalClient, client_of

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
    # spelt as the documents write them ("Statin" in a title, "State" at a sentence's start)
    assert words(found) == [("statins", 2), ("State", 1), ("Statin", 1), ("Statistical", 1), ("statistics", 1)]
    assert found[0].text == "Statins" and found[0].in_context  # the letters typed kept; no earlier words
    assert words(bm25.suggest("stat", k=2)) == [("statins", 2), ("State", 1)]  # ties by the word
    assert bm25.suggest("stat", k=2)[1].text == "state"
    assert bm25.suggest("statin", k=1)[0].word == "statins"  # a whole word is a prefix of longer ones too


def test_the_earlier_words_count(bm25):
    found = bm25.suggest("heart f", k=1)
    assert words(found) == [("failure", 2)] and found[0].in_context and found[0].text == "heart failure"
    assert words(bm25.suggest("heart r")) == [("rate", 1), ("rhythm", 1)]
    elsewhere = bm25.suggest("cholesterol stati", k=1)  # only document 3 holds cholesterol beside a stati... word
    assert words(elsewhere) == [("statins", 1)] and elsewhere[0].in_context
    topped = bm25.suggest("trials stati", k=3)  # only document 5 holds "trials": statistical, then the others
    assert words(topped) == [("Statistical", 1), ("statins", 2), ("Statin", 1)]
    assert [each.in_context for each in topped] == [True, False, False]
    unknown = bm25.suggest("mice stat")  # no document holds "mice": left out of the context, not all of it
    assert words(unknown)[0] == ("statins", 2) and not unknown[0].in_context and unknown[0].text == "mice statins"
    partly = bm25.suggest("mice heart f", k=1)  # "mice" dropped, "heart" kept
    assert words(partly) == [("failure", 2)] and partly[0].in_context


def test_filters_deletions_and_new_documents(bm25):
    assert words(bm25.suggest("stat", k=10, filter={"source": "b"})) == [("Statistical", 1), ("statistics", 1)]
    bm25.delete(["5"])
    bm25.add([Document("6", "Statistical power.", metadata={"source": "c"})])
    assert ("Statistical", 1) in words(bm25.suggest("stat", k=10))  # 5 gone, 6 there: one document
    assert words(bm25.suggest("stat", k=10, filter={"source": "c"})) == [("Statistical", 1)]


def test_passages_count_documents(tmp_path):
    from semiret.data.chunking import Chunking

    docs = [Document("long", "heart failure " * 12 + "statins " * 12, "Cells"),
            Document("short", "cells and statins", metadata={"source": "x"})]
    passages = BM25Retriever.build(docs, tmp_path / "passages", chunking=Chunking(8, 0))
    assert words(passages.suggest("cel")) == [("Cells", 2)]  # two documents, however many passages repeat the title
    assert words(passages.suggest("heart sta")) == [("statins", 1)]  # "heart" and "statins" in other passages


def test_what_others_write(tmp_path):
    docs = [Document("1", "Die Straße ist lang. Straße und Strassenbahn."), Document("2", "維生素B12 und 東京タワー")]
    bm25 = BM25Retriever.build(docs, tmp_path / "other")
    assert [s.text for s in bm25.suggest("Straß", k=2)] == ["Straße", "Strassenbahn"]
    assert [s.text for s in bm25.suggest("維生素B1")] == ["維生素B12"]  # after a Han character, its own word
    assert [s.text for s in bm25.suggest("東京タワ")] == ["東京タワー"]


def test_what_gives_none(bm25, tmp_path):
    assert bm25.suggest("heart ") == [] and bm25.suggest("") == [] and bm25.suggest("heart,") == []
    assert bm25.suggest("it's") == [] and bm25.suggest("e.g") == []  # joined to the word before
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
        {"text": "heart failure", "word": "failure", "count": 2, "in_context": True},
        {"text": "heart for", "word": "for", "count": 1, "in_context": False}]}  # topped up from every document
    table = CliRunner().invoke(app, ["suggest", "stat", "--index", str(bm25.index.path), "--filter", "source=a"])
    assert table.exit_code == 0 and "statins" in table.output and "statistical" not in table.output
    settings = ServeSettings({"docs": str(bm25.index.path)}, write_process=False)
    with LocalClient(create_app(settings)) as http:
        answer = http.post("/indexes/docs/suggest", json={"text": "stat", "k": 2})
        assert answer.status_code == 200 and [s["word"] for s in answer.json()["suggestions"]] == ["statins", "State"]
        assert [s.word for s in client_of(http).suggest("docs", "heart r", filter={"source": "b"})] == [
            "rate", "rhythm"]
        for body in ({"text": "stat", "k": 0}, {"k": 2}, {"text": "stat", "filter": {"a": {"near": 1}}},
                     {"text": "stat", "other": 1}, {"text": "the " * 300 + "stat"}):
            assert http.post("/indexes/docs/suggest", json=body).status_code == 422, body


def test_a_completion_is_spelt_as_the_live_documents_write_it(tmp_path):
    """The spelling was read from the first holders, deleted ones too, and kept: ``ZEBRAFISH`` after the only
    document writing it so was deleted."""
    retriever = BM25Retriever.build([Document("a", "ZEBRAFISH ZEBRAFISH model"), Document("b", "the zebrafish heart")],
                                    tmp_path / "idx")
    assert retriever.suggest("zeb")[0].word == "ZEBRAFISH"
    retriever.delete(["a"])
    assert retriever.suggest("zeb")[0].word == "zebrafish"
    retriever.add([Document("c", "Zebrafish larvae")])
    retriever.delete(["b"])
    assert retriever.suggest("zeb")[0].word == "Zebrafish"  # the newest segment's live holder
