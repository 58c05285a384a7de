"""A search box's operators (``search(..., operators=True)``, ``--operators``, the API's ``operators``): how query
texts are read; searches with them equal to the ranking of the words they score, filtered by what they require and
exclude, over segments and deletions, in mixed batches; the command line's, the service's and the client's."""

from __future__ import annotations

import json
import random

import pytest
from typer.testing import CliRunner

from semiret.cli import app
from semiret.data import Document
from semiret.errors import SemiretError
from semiret.indexes.filters import MetadataFilter
from semiret.search import retriever_class
from semiret.search.operators import parse_operators, scored_text
from semiret.serving import ServeSettings, create_app

from helpers import LocalClient, client_of, two_segment_bm25

WORDS = "statins heart failure cancer risk trial dose cohort mouse model blood pressure COVID-19".split()


@pytest.mark.parametrize("text, scored, required, excluded", [
    ("statins heart", "statins heart", (), ()),                                    # no operator: as written
    ('statins "heart failure"', "statins heart failure", ('"heart failure"',), ()),  # a phrase is required
    ("+Statins risk", "Statins risk", ("statins",), ()),                           # case-folded, as $text matches
    ("+stat* risk", "stat risk", ("stat*",), ()),                                  # a word it begins
    ("statins -mouse", "statins", (), ("mouse",)),
    ('statins -"Animal model"', "statins", (), ('"animal model"',)),
    ("COVID-19 e-mail", "COVID-19 e-mail", (), ()),                                 # signs only at a word's start
    ("statins -COVID-19", "statins", (), ('"covid 19"',)),                          # a word of several: a phrase
    ("marche +l'hom* -e-mai*", "marche l'hom", ("l hom*",), ("e mai*",)),          # and begun: each word, the last begun
    ("heart - failure +", "heart - failure +", (), ()),                            # a sign before no word: a dash
    ('"heart failure', '"heart failure', (), ()),                                  # no quote closes: as written
    ('"" "!!" statins', "statins", (), ()),                                        # phrases without words: nothing
    ("+risk +risk -dose -dose", "risk risk", ("risk",), ("dose",)),                # each condition once
    ("-statins", "", (), ("statins",)),
    ("“heart failure” \u2212mouse «blood pressure»", "heart failure blood pressure",  # a phone's quotes, a minus
     ('"heart failure"', '"blood pressure"'), ("mouse",)),
])
def test_query_texts_are_read_for_their_operators(text, scored, required, excluded):
    parsed = parse_operators(text)
    assert (parsed.text, parsed.required, parsed.excluded) == (scored, required, excluded)
    assert scored_text(text, True) == scored and scored_text(text, False) == text


def test_a_prefix_search_completes_only_a_word_the_query_ends_in(tmp_path):
    """Scored as its words alone, "heart -mouse" ended in "heart": a prefix search (BM25's ``prefix``, search as you
    type) took it for a word still being typed and found heartburn first, a document without "heart"."""
    from semiret.search import BM25Retriever

    retriever = BM25Retriever.build([Document("burn", "heartburn after meals"), Document("heart", "heart disease"),
                                     Document("mouse", "heart of a mouse")], tmp_path / "bm25").with_options(prefix=True)
    assert [h.id for h in retriever.search("heart -mouse", operators=True)] == ["heart"]
    assert [h.id for h in retriever.search('meals "heart disease"', operators=True)] == ["heart"]
    assert "burn" in [h.id for h in retriever.search("heart", operators=True)]  # still being typed: completed
    assert scored_text("heart -mouse", True, retriever.query_side) == "heart "  # what highlights read too
    assert scored_text("heart -mouse", True) == "heart" == parse_operators("heart -mouse").text  # no prefix: no space


def test_the_conditions_join_the_searchs_own_filter():
    parsed = parse_operators('+risk -mouse "heart failure"')
    assert parsed.filter(None) == {"$and": [{"$text": 'risk "heart failure"'}, {"$not": {"$text": "mouse"}}]}
    assert parsed.filter({"year": 2020}) == {"$and": [{"year": 2020}, {"$text": 'risk "heart failure"'},
                                                      {"$not": {"$text": "mouse"}}]}
    assert parse_operators("plain").filter({"year": 2020}) == {"year": 2020}
    assert parse_operators("plain").filter(None) is None


def _corpus(n: int = 160, seed: int = 5) -> list[Document]:
    rng = random.Random(seed)
    return [Document(f"d{i}", " ".join(rng.choices(WORDS, k=rng.randint(3, 9))), metadata={"even": i % 2 == 0})
            for i in range(n)]


@pytest.fixture(scope="module")
def segmented(tmp_path_factory):
    """BM25 over two segments, some documents deleted."""
    return two_segment_bm25(_corpus(), tmp_path_factory.mktemp("operators") / "bm25", 100, ("d4", "d120"))


QUERIES = ['statins "heart failure"', "risk -mouse", "+cohort trial dose -cancer", 'blood -"blood pressure"',
           "statins -COVID-19", "+stat* risk", "heart failure", "-statins", "trial +zzz"]


@pytest.mark.parametrize("given", [None, {"even": True}])
def test_a_search_with_operators_is_the_ranking_of_its_words_filtered(segmented, given):
    docs, retriever = segmented
    found = retriever.search(QUERIES, k=5, operators=True, filter=given)  # one batch, queries of several filters
    for query, ids, scores in zip(QUERIES, found.ids, found.scores):
        parsed = parse_operators(query)
        spec = parsed.filter(given)
        passes = MetadataFilter(spec).matches if spec else lambda *_: True
        everything = retriever.search(parsed.text, k=len(docs)) if parsed.text else []
        expected = [(h.id, h.score) for h in everything if passes(docs[h.id].metadata, docs[h.id])][:5]
        if parsed.required and parsed.text:  # then the documents that hold what it requires and score nothing
            scored = {d for d, _ in expected}
            expected += [(d, 0.0) for d in retriever.index.sorted_ids() if d not in scored and passes(
                docs[d].metadata, docs[d]) and not any(h.id == d for h in everything)][:5 - len(expected)]
        assert list(zip(ids, scores)) == expected, query
        alone = retriever.search(query, k=5, operators=True, filter=given)  # the same searched alone
        assert [(h.id, h.score) for h in alone] == expected
    assert not found.ids[QUERIES.index("-statins")] and not found.ids[QUERIES.index("trial +zzz")]
    assert all(found.ids[:3]) and found.lookup is not None and found[0][0].text  # hits read their documents
    excluded = found.ids[QUERIES.index("risk -mouse")]
    assert excluded and all("mouse" not in docs[d].text for d in excluded)
    assert [h.id for h in retriever.search("risk mouse", k=5)] != excluded  # the operator changed the ranking


def test_a_required_word_s_documents_are_hits_where_its_words_score_nothing(segmented):
    """``+stat*`` scored "stat", which no document holds: the documents holding a word it begins were left out
    (OpenSearch finds them all, as a required clause's matches); so were those of a required word BM25's analyzer
    drops. They follow the scored hits at 0, in id order; not past a positive score threshold."""
    docs, retriever = segmented
    live = retriever.index.sorted_ids()
    begun = [d for d in live if any(w.startswith("stat") for w in docs[d].text.lower().split())]
    assert begun and not retriever.search("stat", k=len(docs))  # "stat" itself scores nothing
    found = retriever.search("+stat*", k=len(docs), operators=True)
    assert [h.id for h in found] == begun and {h.score for h in found} == {0.0}
    mixed = retriever.search(["+stat* risk", "+stat*"], k=len(docs), operators=True)
    assert sorted(mixed.ids[0]) == begun and mixed.ids[1] == begun
    scores = mixed.scores[0]
    assert scores == sorted(scores, reverse=True) and scores[0] > 0 and scores[-1] == 0.0
    assert not retriever.search("+stat*", k=5, operators=True, score_threshold=0.1)
    assert [h.id for h in retriever.search("+stat*", k=3, operators=True)] == begun[:3]


def test_operators_go_with_grouping_boosts_and_thresholds(segmented):
    docs, retriever = segmented
    grouped = retriever.search(["risk -mouse", "-risk"], k=2, group_by="even", operators=True)
    assert [sorted(map(str, g)) for g in grouped.groups] == [["False", "True"], []]
    assert all("mouse" not in docs[d].text for d in grouped.ids[0])
    boosted = retriever.search("risk -mouse", k=5, operators=True, boost={"filter": {"even": True}, "weight": 3})
    assert boosted and all("mouse" not in docs[h.id].text for h in boosted)
    assert docs[boosted[0].id].metadata["even"]
    threshold = boosted[2].score
    assert all(h.score >= threshold for h in retriever.search("risk -mouse", k=5, operators=True, score_threshold=
                                                               threshold, boost={"filter": {"even": True},
                                                                                 "weight": 3}))


def test_queries_left_with_no_word_still_have_their_options_checked(segmented):
    _, retriever = segmented
    assert retriever.search(["-statins", "-risk"], k=3, operators=True).ids == [[], []]
    with pytest.raises(SemiretError, match="candidates"):
        retriever.search("-statins", k=3, operators=True, candidates=5)
    with pytest.raises(SemiretError, match="no quote closes"):
        retriever.search("-statins", k=3, operators=True, filter={"$text": '"open'})


def test_the_command_line_the_service_and_the_client_read_operators(segmented, tmp_path):
    docs, retriever = segmented
    query = "risk +cohort -mouse"
    expected = [h.id for h in retriever.search(query, k=4, operators=True)]
    assert expected and expected != [h.id for h in retriever.search(query, k=4)]
    result = CliRunner().invoke(app, ["search", "--index", str(retriever.index.path), query, "-k", "4", "--json",
                                      "--operators", "--highlight"])
    assert result.exit_code == 0, result.output
    line = json.loads(result.stdout.splitlines()[0])
    assert [h["id"] for h in line["hits"]] == expected
    marked = " ".join(passage for hit in line["hits"] for passage in hit["highlights"])
    assert "<em>cohort</em>" in marked and "mouse" not in marked  # highlights read the words scored
    leading = CliRunner().invoke(app, ["search", "--index", str(retriever.index.path), "-k", "4", "--json",
                                       "--operators", "--", "-mouse risk +cohort"])  # a leading -word after --
    assert [h["id"] for h in json.loads(leading.stdout.splitlines()[0])["hits"]] == expected
    plain = CliRunner().invoke(app, ["search", "--index", str(retriever.index.path), query, "-k", "4", "--json"])
    assert [h["id"] for h in json.loads(plain.stdout.splitlines()[0])["hits"]] != expected
    settings = ServeSettings({"docs": str(retriever.index.path)}, write_process=False)
    with LocalClient(create_app(settings)) as http:
        found = http.post("/indexes/docs/search", json={"queries": [query, "heart"], "k": 4, "operators": True,
                                                        "explain": True})
        assert found.status_code == 200, found.text
        hits = found.json()["results"][0]
        assert [h["id"] for h in hits] == expected
        assert {t["term"] for h in hits for t in h["explanation"]["terms"]} <= {"risk", "cohort"}
        assert [h["id"] for h in found.json()["results"][1]] == [h.id for h in retriever.search("heart", k=4)]
        paged = http.post("/indexes/docs/search", json={"queries": [query], "k": 2, "offset": 2, "operators": True})
        assert [h["id"] for h in paged.json()["results"][0]] == expected[2:4]
        bad = http.post("/indexes/docs/search", json={"queries": [query], "operators": "yes"})
        assert bad.status_code == 422 and "operators" in bad.text
        client = client_of(http)
        assert [h.id for h in client.search("docs", query, k=4, operators=True)] == expected


def test_a_retriever_that_scores_every_document_adds_none_at_0(tmp_path, monkeypatch, tiny_bert):
    """Only where a document no query term reaches scores 0 (retrievers summing term weights) are the unscored
    holders of a requirement added: a dense search's scores may be negative, and its documents below a threshold
    came back at 0 above the hits they ranked under."""
    docs = _corpus(40)
    dense = retriever_class("dense").build(docs, tmp_path / "dense", model=str(tiny_bert))
    side = type(dense.query_side)
    encode = side.encode_queries
    monkeypatch.setattr(side, "encode_queries", lambda self, texts: -encode(self, texts))  # every score below 0
    plain = dense.search("stat risk", k=40, filter={"$text": "stat*"})  # what "+stat* risk" scores
    assert len(plain) > 2 and all(h.score < 0 for h in plain)
    threshold = plain[len(plain) // 2].score
    for given in (None, threshold):
        found = dense.search("+stat* risk", k=40, operators=True, score_threshold=given)
        expected = dense.search("stat risk", k=40, filter={"$text": "stat*"}, score_threshold=given)
        assert [(h.id, h.score) for h in found] == [(h.id, h.score) for h in expected], given
