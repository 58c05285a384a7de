"""A hit's context (``Retriever.context``, ``search --context``, the service's ``"context"``): in an index of
passages, the passage and its neighbours joined without their overlaps; a whole document's own text; what is
refused."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from semiret.cli import app
from semiret.data import Document
from semiret.errors import SemiretError, UnknownDocumentError
from semiret.search import BM25Retriever
from semiret.serving import ServeSettings, create_app

from helpers import LocalClient, client_of

WORDS = [f"w{n}" for n in range(20)]  # a document of 20 words: passages of 6 overlapping by 2 start every 4
LONG = Document("long", " ".join(WORDS), title="Title")
SHORT = Document("short", "a short note about w7", title="Note")


@pytest.fixture
def passages(tmp_path):
    return BM25Retriever.build([LONG, SHORT], tmp_path / "passages", chunking={"words": 6, "overlap": 2})


def test_a_passage_with_its_neighbours(passages):
    # passage 2 holds w8..w13; passage 1 w4..w9, passage 3 w12..w17
    assert passages.get_document("long#2").text == " ".join(WORDS[8:14])
    assert passages.context("long#2") == "Title " + " ".join(WORDS[4:18])
    assert passages.context("long#2", window=0) == "Title " + " ".join(WORDS[8:14])
    assert passages.context("long#0", window=1) == "Title " + " ".join(WORDS[0:10])  # none before the first
    assert passages.context("long#4", window=9) == "Title " + " ".join(WORDS)  # as far as the document goes
    assert passages.context("short", window=3) == "Note a short note about w7"  # its document's only passage
    passages.delete(["long#1"])
    assert passages.context("long#2") == "Title " + " ".join(WORDS[8:18])  # a deleted neighbour is left out
    with pytest.raises(UnknownDocumentError, match="long#1"):
        passages.context("long#1")
    for wrong in (-1, 1.5, True):
        with pytest.raises(SemiretError, match="whole number"):
            passages.context("long#2", window=wrong)


def test_ids_that_only_look_like_passages_are_not_neighbours(tmp_path):
    words = " ".join(WORDS[:14])  # three passages: q#0, q#1, q#2
    retriever = BM25Retriever.build([Document("q", words, "TQ"), Document("q#3", "other doc", "Other")],
                                    tmp_path / "q", chunking={"words": 6, "overlap": 2})
    assert retriever.context("q#2", window=1) == "TQ " + " ".join(WORDS[4:14])
    retriever.delete(["q#0"])
    retriever.add([Document("q#0", "intruder words here", "Intruder")])  # a document of its own now
    assert retriever.context("q#1", window=1) == "TQ " + " ".join(WORDS[4:14])


def test_a_whole_document_is_its_own_context(tmp_path):
    whole = BM25Retriever.build([LONG], tmp_path / "whole")
    assert whole.context("long", window=2) == LONG.full_text
    bare = BM25Retriever.build([LONG], tmp_path / "bare", store_texts=False)
    with pytest.raises(SemiretError, match="no stored documents"):
        bare.context("long")


def test_the_command_line_and_the_service(passages):
    runner = CliRunner()
    index = str(passages.index.path)
    result = runner.invoke(app, ["search", "--index", index, "w11", "-k", "1", "--context", "1", "--json"])
    assert result.exit_code == 0, result.output
    hit = json.loads(result.stdout)["hits"][0]
    assert hit["context"] == passages.context(hit["id"], 1)
    result = runner.invoke(app, ["search", "--index", index, "w11", "--context", "1"])
    assert result.exit_code != 0 and "give --json too" in result.output
    assert "at least 0" not in result.output and "got 1" not in result.output  # (only what is wrong is said)
    result = runner.invoke(app, ["search", "--index", index, "w11", "--context", "-1", "--json"])
    assert result.exit_code != 0 and "at least 0 (got -1)" in result.output and "give --json" not in result.output
    with LocalClient(create_app(ServeSettings({"p": index}, write_process=False))) as http:
        answer = http.post("/indexes/p/search", json={"queries": ["w11"], "k": 2, "context": 1})
        assert answer.status_code == 200, answer.text
        rows = answer.json()["results"][0]
        assert rows and all(row["context"] == passages.context(row["id"], 1) for row in rows)
        plain = http.post("/indexes/p/search", json={"queries": ["w11"], "k": 2}).json()["results"][0]
        assert all("context" not in row for row in plain)
        for wrong in (-1, 21, "1", True):
            assert http.post("/indexes/p/search", json={"queries": ["w11"], "context": wrong}).status_code == 422
        served = client_of(http).search("p", "w11", k=1, context=1)
        assert served[0].context == passages.context(served[0].id, 1)
