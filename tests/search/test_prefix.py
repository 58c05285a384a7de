"""Search as you type (``bm25 --prefix``, ``with_options(prefix=True)``): the query's last word, while the query ends
inside it, also matches the index's words it begins, the commonest ``max_expansions``, weighted with one blended IDF;
every other word is searched as ever."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from semiret.cli import app
from semiret.data import Document
from semiret.search import BM25Retriever

DOCS = [
    Document("therapy", "Statin therapy lowers cholesterol."),
    Document("therapeutic", "Therapeutic effects of statins in adults."),
    Document("theory", "A theory of everything, and of adults."),
    Document("studies", "Studies of the evening sky."),
    Document("garden", "Gardens and birds."),
]


@pytest.fixture
def bm25(tmp_path):
    return BM25Retriever.build(DOCS, tmp_path / "bm25")


def ids(hits) -> set[str]:
    return {hit.id for hit in hits}


def test_the_last_word_typed_matches_the_words_it_begins(bm25):
    typing = bm25.with_options(prefix=True)
    assert ids(bm25.search("gard", k=5)) == set()
    assert ids(typing.search("gard", k=5)) == {"garden"}
    assert ids(typing.search("statin thera", k=5)) == {"therapy", "therapeutic"}
    assert ids(typing.search("thera adults", k=5)) == {"therapeutic", "theory"}  # only the last word is a prefix
    assert ids(typing.search("gard ", k=5)) == set() and ids(typing.search("gard.", k=5)) == set()  # a word ended
    assert typing.highlight("statin thera", "therapeutic") == ["<em>Therapeutic</em> effects of <em>statins</em> in adults."]


def test_the_words_begun_weigh_one_term_shared_by_their_documents(bm25):
    typing = bm25.with_options(prefix=True)
    index = bm25.index
    idf = {term: float(index.idf()[index.vocab.index(term)]) for term in ("therapi", "therapeut", "theori")}
    weights = {t.term: t.weight for t in typing.analyze("the")}  # a stopword typed whole is a prefix too
    assert set(weights) == {"therapi", "therapeut", "theori"}
    # together one term of the commonest one's IDF, each by its share of their documents (one each here)
    assert weights == pytest.approx({term: min(idf.values()) / 3 for term in weights})
    assert len(typing.with_options(prefix=True, max_expansions=2).analyze("the")) == 2
    found = typing.search("statin thera", k=1)[0]
    assert typing.explain("statin thera", found.id).score == pytest.approx(found.score, rel=1e-5)


def test_a_whole_word_typed_is_searched_as_ever(bm25):
    typing = bm25.with_options(prefix=True)
    for query in ("statin therapy", "garden birds", "evening sky"):
        assert [(h.id, h.score) for h in bm25.search(query + " ", k=5)] == [
            (h.id, h.score) for h in typing.search(query + " ", k=5)]
    plain = {hit.id: hit.score for hit in bm25.search("statin therapy", k=5)}
    typed = {hit.id: hit.score for hit in typing.search("statin therapy", k=5)}
    assert typed["therapy"] >= plain["therapy"]  # the word whole, and what else "therapy" begins


def test_words_added_later_are_begun_too(bm25):
    typing = bm25.with_options(prefix=True)
    assert ids(typing.search("zebr", k=5)) == set()
    bm25.add([Document("zebra", "Zebras graze.")])
    assert ids(typing.search("zebr", k=5)) == {"zebra"}


def test_the_cli_and_a_hybrid_take_prefix(bm25, tmp_path, tiny_bert):
    from semiret.search import HybridRetriever

    runner = CliRunner()
    found = runner.invoke(app, ["search", "--index", str(tmp_path / "bm25"), "gard", "--prefix", "--json"])
    assert found.exit_code == 0, found.output
    assert [hit["id"] for hit in json.loads(found.stdout)["hits"]] == ["garden"]
    hybrid = HybridRetriever.build(DOCS, tmp_path / "hybrid", model=str(tiny_bert))
    assert "garden" in ids(hybrid.with_options(prefix=True).search("gard", k=2))


# ---------------------------------------------------------------------------------------------- a review's cases
def test_typing_on_past_a_words_stem_keeps_finding_it(tmp_path):
    english = BM25Retriever.build([Document("g", "The generation of electricity."), Document("s", "Studying birds."),
                                   Document("o", "Other things.")], tmp_path / "en").with_options(prefix=True)
    for typed in ("gen", "generat", "generati", "generatio", "generation"):
        assert ids(english.search(typed, k=5)) == {"g"}, typed
    for typed in ("stud", "study", "studyi", "studyin", "studying"):
        assert ids(english.search(typed, k=5)) == {"s"}, typed
    german = BM25Retriever.build([Document("e", "Die Entwicklung der Stadt."), Document("o", "Andere Dinge.")],
                                 tmp_path / "de", language="german").with_options(prefix=True)
    assert ids(german.search("Entwicklun", k=5)) == {"e"}


def test_a_document_of_many_words_begun_never_outscores_the_query_s_other_words(tmp_path):
    docs = [Document("statin", "Statin use and therapy."),
            Document("list", "Theory thermal thickness thinking thrombosis thyroid thunder thistle."),
            *(Document(f"other-{i}", f"Gardens and birds {i}.") for i in range(6))]
    typing = BM25Retriever.build(docs, tmp_path / "bm25").with_options(prefix=True)
    assert typing.search("statin th", k=1)[0].id == "statin"


def test_the_word_being_typed_is_the_one_the_query_ends_in(tmp_path):
    docs = [Document("vitamin", "Vitamin B12 and vitaminosis."), Document("bees", "Bees and birds."),
            Document("type", "Typescript typesetting."), Document("cafe", "La cafétéria."),
            *(Document(f"other-{i}", f"Gardens and flowers {i}.") for i in range(6))]
    typing = BM25Retriever.build(docs, tmp_path / "bm25").with_options(prefix=True)
    assert {t.term for t in typing.analyze("vitamin b")} >= {"vitamin", "bee"}  # "b" is begun, not "vitamin"
    assert "vitaminosi" not in {t.term for t in typing.analyze("vitamin b")}
    assert "typescript" not in {t.term for t in typing.analyze("diabetes type 2")}
    assert ids(typing.search("cafe\u0301", k=5)) == {"cafe"}  # written decomposed, read composed


def test_the_word_being_typed_is_no_misspelling_yet(tmp_path):
    docs = [Document("garden", "Gardens of roses."), Document("card", "A card game."),
            *(Document(f"other-{i}", f"Birds and trees {i}.") for i in range(6))]
    typing = BM25Retriever.build(docs, tmp_path / "bm25").with_options(prefix=True, fuzzy=True)
    assert ids(typing.search("gard", k=5)) == {"garden"}
    assert ids(typing.search("gardn ros", k=5)) == {"garden"}  # an earlier word is corrected still


def test_a_word_a_synonym_rule_replaces_stays_replaced(tmp_path):
    docs = [Document("colour", "Colour of the sky."), Document("color", "The color red."),
            *(Document(f"other-{i}", f"Birds and trees {i}.") for i in range(6))]
    bm25 = BM25Retriever.build(docs, tmp_path / "bm25")
    bm25.set_synonyms(["colour => color"])
    assert ids(bm25.with_options(prefix=True).search("colour", k=5)) == {"color"}


def test_a_retriever_sent_elsewhere_opens_the_files_it_was_given(bm25, tmp_path, monkeypatch):
    import pickle

    (tmp_path / "rules.txt").write_text("gardens, flowerbeds\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    given = bm25.with_options(synonyms="rules.txt")
    monkeypatch.chdir(tmp_path / "bm25")  # the working directory changes before it is sent
    assert ids(pickle.loads(pickle.dumps(given)).search("flowerbeds", k=5)) == {"garden"}


# ---------------------------------------------------------------------------------------------- a second review's cases
def test_typing_letter_by_letter_keeps_the_document_meant(tmp_path):
    docs = [Document("metformin", "Metformin lowers glucose."), Document("met", "The trial met its endpoint."),
            Document("met-2", "Patients who met the criteria."), Document("align", "Sequence alignment tools."),
            *(Document(f"other-{i}", f"Birds and trees {i}.") for i in range(6))]
    typing = BM25Retriever.build(docs, tmp_path / "bm25").with_options(prefix=True)
    for typed in ("metf", "metfo", "metformi"):
        assert typing.search(typed, k=1)[0].id == "metformin", typed  # not "met", the stem of "metful"
    for end in range(3, len("alignment") + 1):
        assert typing.search("alignment"[:end], k=1)[0].id == "align", "alignment"[:end]


def test_a_german_word_with_an_umlaut_is_found_while_typed(tmp_path):
    docs = [Document("m", "Möglichkeiten der Behandlung."), Document("u", "Überlegungen zur Stadt."),
            *(Document(f"o-{i}", f"Andere Dinge {i}.") for i in range(6))]
    typing = BM25Retriever.build(docs, tmp_path / "bm25", language="german").with_options(prefix=True)
    for typed in ("Mög", "Mögl", "Möglichk"):
        assert ids(typing.search(typed, k=5)) == {"m"}, typed
    assert ids(typing.search("Über", k=5)) == {"u"}


def test_words_begun_count_where_idf_can_be_zero(tmp_path):
    docs = [*(Document(f"cells-{i}", f"Cells divide {i}.") for i in range(7)),
            Document("cellular", "Cellular cellulose.")]
    typing = BM25Retriever.build(docs, tmp_path / "bm25", variant="robertson").with_options(prefix=True)
    assert "cellular" in ids(typing.search("cel", k=10))


def test_a_word_that_begins_none_is_corrected_by_fuzzy(tmp_path):
    docs = [Document("metformin", "Metformin lowers glucose."), *(Document(f"o-{i}", f"Birds {i}.") for i in range(6))]
    typing = BM25Retriever.build(docs, tmp_path / "bm25").with_options(prefix=True, fuzzy=True)
    assert ids(typing.search("metfromin", k=5)) == {"metformin"}


def test_a_possessive_is_no_word_being_typed(bm25):
    typing = bm25.with_options(prefix=True)
    assert [(h.id, h.score) for h in typing.search("gardens' birds's", k=5)] == [
        (h.id, h.score) for h in bm25.search("gardens' birds's", k=5)]


def test_only_files_written_as_paths_are_made_absolute(tmp_path, monkeypatch):
    from semiret.options import with_local_paths_absolute
    from semiret.search.lexical import IDFOptions, WordQueryOptions

    monkeypatch.chdir(tmp_path)
    (tmp_path / "rules.txt").write_text("a, b\n", encoding="utf-8")
    (tmp_path / "msmarco").mkdir()  # a folder named as a table's name
    (tmp_path / "models" / "mine").mkdir(parents=True)
    given = {"synonyms": "rules.txt", "idf": "msmarco", "fuzzy": True}
    assert with_local_paths_absolute([WordQueryOptions, IDFOptions], given) == {
        "synonyms": str(tmp_path / "rules.txt"), "idf": "msmarco", "fuzzy": True}
    from pathlib import Path

    assert with_local_paths_absolute([IDFOptions], {"idf": Path("models/mine")}) == {"idf": str(tmp_path / "models/mine")}
    assert with_local_paths_absolute([IDFOptions], {"idf": "x" * 5000}) == {"idf": "x" * 5000}
