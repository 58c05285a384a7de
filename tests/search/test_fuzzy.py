"""BM25's fuzzy queries (``bm25 --fuzzy``, ``with_options(fuzzy=True)``): query words no document holds match the
index's words within OpenSearch's AUTO edits, the fewest edits found, weighted as Lucene's fuzzy query weighs them
(similarity, one blended IDF); words the index holds are searched as ever."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from semiret.cli import app
from semiret.data import Document
from semiret.errors import SemiretError
from semiret.search import BM25Retriever
from semiret.search.lexical import fuzzy_edits

DOCS = [
    Document("cancer-1", "Statins and the risk of colorectal cancer."),
    Document("cancer-2", "Cancer screening in rural clinics."),
    Document("answer", "An answer to the question of manners."),
    Document("garden", "Morning birds sing in the garden."),
    Document("stat3", "STAT3 signalling in liver cells."),
]


@pytest.fixture
def bm25(tmp_path):
    return BM25Retriever.build(DOCS, tmp_path / "bm25")


def test_auto_edits():
    assert [fuzzy_edits(word) for word in ("an", "cat", "canser", "diabetis")] == [0, 1, 2, 2]


def test_a_misspelled_word_finds_the_word_it_meant(bm25):
    fuzzy = bm25.with_options(fuzzy=True)
    assert not {h.id for h in bm25.search("canser", k=5)}  # no document holds "canser"
    found = fuzzy.search("canser", k=5)
    assert {h.id for h in found} == {"cancer-1", "cancer-2"}  # one edit; not "answer" and "manner" at two
    weights = {t.term: t.weight for t in fuzzy.analyze("canser")}
    assert set(weights) == {"cancer", "canser"} and weights["canser"] == 0.0
    index = bm25.index
    cancer = index.vocab.index("cancer")
    # Lucene's weight: similarity 1 - 1/6, one neighbour (its own IDF as the blended one), times the IDF at search
    assert weights["cancer"] == pytest.approx((1 - 1 / 6) * float(index.idf()[cancer]), rel=1e-5)
    explained = fuzzy.explain("canser", "cancer-2")
    assert explained.score == pytest.approx(found[[h.id for h in found].index("cancer-2")].score, rel=1e-5)
    assert fuzzy.highlight("canser", "cancer-2") == ["<em>Cancer</em> screening in rural clinics."]  # as meant
    assert bm25.highlight("canser", "cancer-2") == []
    assert fuzzy.search("stains and canser", k=1)[0].id == "cancer-1"  # statins (its stem): one edit from "stain"


def test_words_the_index_holds_are_searched_as_ever(bm25):
    fuzzy = bm25.with_options(fuzzy=True)
    for query in ("statins colorectal cancer", "garden birds", "zzzz"):
        plain, corrected = bm25.search(query, k=5), fuzzy.search(query, k=5)
        assert [(h.id, h.score) for h in plain] == [(h.id, h.score) for h in corrected]


def test_neighbours_share_the_commonest_idf(tmp_path):
    retriever = BM25Retriever.build(DOCS + [Document("stats", "Stata and stata and stat tables."),
                                            Document("stain", "A stain on the slide.")], tmp_path / "b")
    weights = {t.term: t.weight for t in retriever.with_options(fuzzy=True).analyze("statn")}
    one_edit = {term: weight for term, weight in weights.items() if term in ("stat3", "stain", "statin", "stata")}
    assert len(one_edit) == 4 and np.ptp(list(one_edit.values())) < 1e-6  # blended: rare or common, one weight
    assert 0 < weights["stat"] < one_edit["statin"]  # 1 - 1/4 against 1 - 1/5
    few = {t.term for t in retriever.with_options(fuzzy=True, max_expansions=2).analyze("statn") if t.weight}
    assert len(few) == 2


def test_the_neighbours_kept_are_bounded(bm25, monkeypatch):
    from semiret.search import lexical

    monkeypatch.setattr(lexical, "NEIGHBOURS_KEPT", 2)
    fuzzy = bm25.with_options(fuzzy=True)
    for word in ("canser", "gardn", "birdz", "clinis"):
        fuzzy.search(word, k=1)
    assert list(fuzzy.query_side._near) == ["birdz", "clini"]  # the most recently searched (stems)


def test_words_added_later_are_neighbours_at_once(bm25):
    fuzzy = bm25.with_options(fuzzy=True)
    assert not fuzzy.search("zebrafsh", k=3)
    bm25.add([Document("fish", "Zebrafish embryos.")])
    assert [h.id for h in fuzzy.search("zebrafsh", k=3)] == ["fish"]


def test_bad_options_and_the_command_line(bm25):
    with pytest.raises(SemiretError, match="max_expansions"):
        bm25.with_options(fuzzy=True, max_expansions=0)
    runner = CliRunner()
    result = runner.invoke(app, ["search", "--index", str(bm25.index.path), "canser", "--fuzzy", "--json"])
    assert result.exit_code == 0, result.output
    assert {h["id"] for h in json.loads(result.stdout)["hits"]} == {"cancer-1", "cancer-2"}


def test_the_service_takes_it_as_an_option(bm25):
    from helpers import LocalClient
    from semiret.serving import ServeSettings, create_app

    with LocalClient(create_app(ServeSettings({"docs": str(bm25.index.path)}, write_process=False))) as http:
        answer = http.post("/indexes/docs/search", json={"queries": ["canser"], "options": {"fuzzy": True}})
        assert answer.status_code == 200, answer.text
        assert {h["id"] for h in answer.json()["results"][0]} == {"cancer-1", "cancer-2"}


def test_a_hybrid_corrects_its_bm25_part(tmp_path, tiny_bert):
    from semiret.search import retriever_class

    hybrid = retriever_class("hybrid").build(DOCS, tmp_path / "hybrid", neural="splade", model=str(tiny_bert))
    plain = hybrid.with_options(weight=1.0)  # BM25's share alone: what the correction changes
    fuzzy = hybrid.with_options(weight=1.0, fuzzy=True)
    assert fuzzy.query_side.fusion == "bound"  # still both parts' postings in one pass
    assert not plain.search("canser", k=5)
    found = fuzzy.search("canser", k=5)
    assert {h.id for h in found} == {"cancer-1", "cancer-2"}
    assert fuzzy.explain("canser", found[0].id).score == pytest.approx(found[0].score, rel=1e-5)  # bounds as searched
    scored = hybrid.with_options(weight=1.0, fuzzy=True, fusion="score")
    assert {h.id for h in scored.search("canser", k=5)} == {"cancer-1", "cancer-2"}


def test_a_word_only_deleted_documents_hold_is_corrected_and_completed(tmp_path):
    """Document frequencies count deleted documents until a merge; whether a word is in the documents must not:
    a typo deleted or replaced is corrected at once (not only after a merge), and no longer completes a prefix."""
    docs = [Document("a", "cancer risk with statins"), Document("b", "lung cancer screening"),
            Document("typo", "a canser typo here")]
    retriever = BM25Retriever.build(docs, tmp_path / "bm25")
    fuzzy, prefix = retriever.with_options(fuzzy=True), retriever.with_options(prefix=True)
    assert [h.id for h in fuzzy.search("canser", k=5)] == ["typo"]  # a document holds it: searched as typed
    assert {h.id for h in prefix.search("cans", k=5)} == {"typo"}
    retriever.delete(["typo"])
    assert [t.document_frequency for t in retriever.analyze("canser")] == [1]  # counted until a merge
    assert {h.id for h in fuzzy.search("canser", k=5)} == {"a", "b"}
    assert {h.id for h in prefix.search("cans", k=5)} == {"a", "b"}  # "cans": only cancer now, through its stem
    assert {t.term for t in fuzzy.explain("canser", "a").terms} >= {"cancer"}
    retriever.add([Document("b", "a canser typo fixed")], replace=True)  # the typo back, in a live document
    assert [h.id for h in fuzzy.search("canser", k=5)] == ["b"]
    retriever.add([Document("b", "lung cancer screening")], replace=True)  # and fixed in place again
    assert {h.id for h in fuzzy.search("canser", k=5)} == {"a", "b"}
    retriever.add([Document("c", "canser in the lung")])
    assert [h.id for h in fuzzy.search("canser", k=5)] == ["c"]
    hidden = fuzzy.search("canser", k=5, filter={"$not": {"$text": "lung"}})  # only a document the filter hides
    assert [h.id for h in hidden] == ["a"]                                     # holds it: corrected in its view
    explained = fuzzy.explain("canser", "a", filter={"$not": {"$text": "lung"}})  # the query as that search read it
    assert explained.score == pytest.approx(hidden[0].score) and "cancer" in {t.term for t in explained.terms}
