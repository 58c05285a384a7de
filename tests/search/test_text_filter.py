"""The full-text condition of filters (``{"$text": ...}``): every word, quoted phrases in order, case-folded exact
words over the stored title and text; searches filtered by it equal to the full ranking filtered afterwards, over
segments, deletions and negations; its word index built once per segment; the command line's and the service's."""

from __future__ import annotations

import json
import random
import re

import numpy as np
import pytest
from typer.testing import CliRunner

import semiret.indexes.filters as filters
from semiret.cli import app
from semiret.data import Document
from semiret.errors import SemiretError
from semiret.indexes.filters import MetadataFilter, TextCondition
from semiret.search import retriever_class
from semiret.serving import ServeSettings, create_app

from helpers import LocalClient, two_segment_bm25

WORDS = "statins heart failure cancer risk trial dose cohort blood pressure diet sleep BRCA1 Café".split()


def _corpus(n: int = 200, seed: int = 3) -> list[Document]:
    rng = random.Random(seed)
    return [Document("phrase", "statins in heart failure", title="Statins"),
            Document("apart", "heart and statins: failure", title="Statins")] + [Document(f"d{i}", " ".join(rng.choices(WORDS, k=rng.randint(3, 10))),
                     title=rng.choice(["", "heart", "Failure of statins"]), metadata={"even": i % 2 == 0})
            for i in range(n)]


@pytest.mark.parametrize("wanted, title, text, expected", [
    ("statins", None, "Statins lower risk", True),                     # case-folded
    ("statin", None, "statins lower risk", False),                      # exact words: no stemming
    ("statins risk", None, "risk of statins", True),                    # every word, in any order
    ("statins risk", None, "statins lower", False),
    ('"heart failure"', None, "heart failure trial", True),             # a phrase: consecutive words
    ('"heart failure"', None, "failure of the heart", False),
    ('"heart failure"', None, "heart, failure!", True),                 # punctuation between words is no word
    ('"heart failure"', "heart", "failure", False),                      # a phrase does not run from title to text
    ("heart failure", "heart", "failure", True),                        # words: title or text
    ("brca1", None, "BRCA1 carriers", True),
    ("café", None, "Cafe\u0301 au lait", True),                          # NFC: an accent written apart
    ('diet "blood pressure"', "Blood pressure", "a diet", True),
    ("stat*", None, "Statins lower risk", True),                         # a word ending in *: any word it begins
    ("stat*", None, "the state of it", True),
    ("stat*", None, "a stat", True),
    ("statins*", None, "a statin", False),
    ('stat* "heart failure"', "Heart failure", "statins", True),
    ("café*", None, "Cafe\u0301s", True),
])
def test_text_conditions(wanted, title, text, expected):
    document = Document("x", text, title=title or "")
    assert MetadataFilter({"$text": wanted}).matches(None, document) is expected


@pytest.mark.parametrize("wanted, message", [
    (["statins"], r"\$text takes a string of words"),
    ('"heart failure', "a quote opens a phrase that no quote closes"),
    (" ,.; ", "holds no word to match"),
    ('"heart fail*"', r"a \* ends a word outside quotes"),
    ("fo*o", r"a \* ends a word outside quotes"),
    ("*", r"a \* ends a word outside quotes"),
])
def test_bad_text_conditions_are_clear_errors(wanted, message):
    with pytest.raises(SemiretError, match=message):
        MetadataFilter({"$text": wanted})


def test_one_text_condition_written_two_ways_is_one_filter():
    assert MetadataFilter({"$text": 'Risk  statins "Heart failure" risk'}).key == \
        MetadataFilter({"$text": 'statins "heart failure" RISK'}).key
    assert TextCondition('"a b" c').phrases == [["a", "b"]] and TextCondition('"a" c').phrases == []
    assert MetadataFilter({"$text": "Stat* stat* x"}).key == MetadataFilter({"$text": "x stat*"}).key
    assert TextCondition("stat*").written == "stat*" and TextCondition("stat*").words == []


def test_the_command_line_reads_words_as_written():
    """--filter '$text=...' is not JSON: a quoted phrase stays a phrase, a number a word; repeated, all the words."""
    from semiret.cli import _filter

    assert _filter(['$text="heart failure"']) == {"$text": '"heart failure"'}
    assert _filter(["source = web", 'year= 2020']) == {"source": "web", "year": 2020}  # spaces around: a typo's
    assert _filter(['source="=web"']) == {"source": "=web"}
    for typo, message in (("year>=2020", 'a range goes in a JSON object: --filter \'{"year": {"gte": ...}}\''),
                          ("year<=2010", '{"year": {"lte": ...}}'), ("source==web", "with one =")):
        with pytest.raises(SemiretError, match=re.escape(message)):
            _filter([typo])
    assert _filter(["$text=2020", "$text=statins"]) == {"$text": "2020 statins"}
    assert _filter(["$text!=mouse", "$text!=rat"]) == {"$not": {"$or": [{"$text": "mouse"}, {"$text": "rat"}]}}
    assert MetadataFilter({"$text": '"Heart failure" "heart  FAILURE"'}).key == \
        MetadataFilter({"$text": '"heart failure"'}).key  # one phrase, written once


def test_a_text_condition_needs_the_document():
    with pytest.raises(SemiretError, match="reads the documents' stored texts"):
        MetadataFilter({"$text": "statins"}).matches({"even": True})


@pytest.fixture(scope="module")
def segmented(tmp_path_factory):
    """BM25 over two segments, some documents deleted."""
    return two_segment_bm25(_corpus(), tmp_path_factory.mktemp("text") / "bm25", 120, ("d3", "d130"))


@pytest.mark.parametrize("spec", [{"$text": "statins"}, {"$text": '"heart failure"'}, {"$text": "brca1 diet"},
                                  {"$text": "stat*"}, {"$text": 'bl* "heart failure"'}, {"$text": "zzz*"},
                                  {"$text": "failure", "even": True}, {"$not": {"$text": "statins"}},
                                  {"$or": [{"$text": '"blood pressure"'}, {"even": False}]},
                                  {"$text": "café"}, {"$text": "nowhere"}])
def test_a_text_filtered_search_is_the_full_ranking_filtered(segmented, spec):
    docs, retriever = segmented
    wanted = MetadataFilter(spec)
    queries = ["statins heart", "blood pressure diet", "sleep cohort trial dose"]
    everything = retriever.search(queries, k=len(docs))
    filtered = retriever.search(queries, k=5, filter=spec)
    for all_ids, all_scores, ids, scores in zip(everything.ids, everything.scores, filtered.ids, filtered.scores):
        expected = [(d, s) for d, s in zip(all_ids, all_scores) if wanted.matches(docs[d].metadata, docs[d])][:5]
        assert list(zip(ids, scores)) == expected
    assert retriever.count(spec) == sum(wanted.matches(d.metadata, d) for d in docs.values())
    if spec == {"$text": '"heart failure"'}:
        assert "phrase" in filtered.ids[0] and "apart" not in [h.id for h in retriever.search("statins", k=200,
                                                                                               filter=spec)]


@pytest.mark.parametrize("at_once", [filters.PHRASE_WORDS_AT_ONCE, 7])
def test_the_word_index_finds_the_phrases_a_document_holds_as_its_text_does(monkeypatch, at_once):
    """Phrases are found in the segment's word sequence (the documents are not read again): the same documents as
    each document's own text says, across fields, marks, hyphens, repeats, Chinese characters and three words."""
    rng = random.Random(5)
    pieces = ["heart", "failure", "Heart-failure", "heart  failure", "heart\u0301 failure", "failure heart", "of",
              "the", "心脏", "衰竭", "heart, failure", "x"]
    documents = [Document(f"d{i}", " ".join(rng.choices(pieces, k=rng.randint(0, 6))),
                          title=" ".join(rng.choices(pieces, k=rng.randint(0, 3)))) for i in range(400)]
    documents.append(Document("split", "failure of it", title="the heart"))  # "heart failure" across the fields
    documents.append(Document("marked", "心\u0301heart failure"))  # a mark after a Chinese character: one word
    index = filters.TextIndex(documents, len(documents), read=None)
    monkeypatch.setattr(filters, "PHRASE_WORDS_AT_ONCE", at_once)  # (7: the candidates' words read a few at a time)
    for wanted in ['"heart failure"', '"failure heart"', '"heart failure of"', '"of the"', '"心脏衰竭"', '"脏衰"',
                   '"heart heart"', '"x x"', '"failure of it"', '"heart nowhere"']:
        condition = TextCondition(wanted)
        everyone = np.ones(len(documents), bool)
        expected = np.array([condition.passes(None, d) for d in documents])
        assert (condition.mask(None, lambda: index, None) == expected).all(), wanted
        assert (index.holding_phrase(condition.phrases[0], everyone) == expected).all(), wanted
        some = np.arange(len(documents)) % 3 == 0
        assert (index.holding_phrase(condition.phrases[0], some) == (expected & some)).all(), wanted
        assert expected.any() or wanted == '"heart nowhere"', wanted  # (each phrase found somewhere)
    split, marked = TextCondition('"heart failure"').mask(None, lambda: index, None)[-2:]
    assert not split and TextCondition('"failure of it"').mask(None, lambda: index, None)[-2]
    assert not marked and not TextCondition('"heart failure"').passes(None, documents[-1])  # (its regex said yes)
    wordless = filters.TextIndex([Document("marks", " - , ."), Document("blank", "")], 2, read=None)  # (no pairs)
    assert not TextCondition('"heart failure" heart').mask(None, lambda: wordless, None).any()


def test_the_word_index_is_built_once_per_segment(tmp_path, monkeypatch):
    built = []
    original = filters.TextIndex.__init__
    monkeypatch.setattr(filters.TextIndex, "__init__", lambda self, *a: built.append(1) or original(self, *a))
    retriever = retriever_class("bot").build(_corpus(50), tmp_path / "index")  # (BM25 rewrites segments on adds)
    retriever.search("statins", k=3, filter={"$text": "heart"})
    retriever.search("statins", k=3, filter={"$text": "dose", "even": False})
    retriever.delete(["d1"])  # a new commit: the same segment, the same words
    retriever.search("statins", k=3, filter={"$not": {"$text": "sleep"}})
    assert len(built) == 1
    retriever.add([Document("new", "statins sleep")])
    assert [h.id for h in retriever.search("statins", k=3, filter={"$text": "sleep", "even": {"exists": False}})] \
        == ["new"]
    assert len(built) == 2  # the new segment's own


def test_any_retriever_filters_by_words(tmp_path):
    docs = _corpus(60) + [Document("p1", "statins after heart failure"), Document("p2", "heart failure, statins")]
    retriever = retriever_class("bot").build(docs, tmp_path / "bot")
    hits = [h.id for h in retriever.search("statins heart", k=60, filter={"$text": '"heart failure"'})]
    expected = {d.id for d in docs if MetadataFilter({"$text": '"heart failure"'}).matches(None, d)}
    assert hits and set(hits) <= expected


def test_the_command_line_and_the_service_filter_by_words(segmented, tmp_path):
    docs, retriever = segmented
    expected = [h.id for h in retriever.search("statins", k=4, filter={"$text": "BRCA1", "$not": {"$text": "diet"}})]
    result = CliRunner().invoke(app, ["search", "--index", str(retriever.index.path), "statins", "-k", "4", "--json",
                                      "--filter", "$text=BRCA1", "--filter", "$text!=diet"])
    assert result.exit_code == 0, result.output
    assert [h["id"] for h in json.loads(result.stdout.splitlines()[0])["hits"]] == expected and expected
    settings = ServeSettings({"docs": str(retriever.index.path)}, write_process=False)
    with LocalClient(create_app(settings)) as client:
        found = client.post("/indexes/docs/search", json={"queries": ["statins"], "k": 4,
                                                          "filter": {"$text": "BRCA1", "$not": {"$text": "diet"}}})
        assert found.status_code == 200 and [h["id"] for h in found.json()["results"][0]] == expected
        bad = client.post("/indexes/docs/search", json={"queries": ["statins"], "filter": {"$text": '"open'}})
        assert bad.status_code == 422 and "no quote closes" in bad.text


def test_a_phrase_is_found_in_a_text_as_its_words_would_be():
    """A segment's word index finds a phrase where a document's own words (:func:`plain_words`) hold it: random
    texts of words, marks, accents written apart, case, digits, Chinese and Japanese characters (each a word of its
    own, beside others without a space), soft hyphens and zero-width characters (inside a word, dropped), emoji and
    their variation selectors (no word)."""
    from semiret.text.analyzer import plain_words

    rng = random.Random(11)
    pieces = ["abc", "def", "ab", "x_y", "café", "cafe\u0301", "İstanbul", "istanbul", "12", "中", "文", "の", " ",
              ",", "-", ".", "\u0301", "ß", "Ab", "\n", "\u00ad", "\u200d", "\u200b", "❤\ufe0f", "👩"]
    documents = [Document(f"d{i}", "".join(rng.choice(pieces) for _ in range(rng.randint(1, 12))),
                          title="".join(rng.choice(pieces) for _ in range(rng.randint(0, 4)))) for i in range(600)]
    index = filters.TextIndex(documents, len(documents), read=None)
    everyone = np.ones(len(documents), bool)
    fields = [(plain_words(d.title), plain_words(d.text)) for d in documents]
    checked = 0
    for _, words in fields[:300]:
        if len(words) < 2:
            continue
        start = rng.randrange(len(words) - 1)
        phrase = words[start:start + rng.randint(2, 3)] if rng.random() < 0.7 else [
            rng.choice(["abc", "def", "12", "café", "istanbul"]) for _ in range(2)]
        expected = [any(filters._holds_phrase(field, phrase) for field in each) for each in fields]
        assert index.holding_phrase(phrase, everyone).tolist() == expected, phrase
        checked += sum(expected)
    assert checked > 300
