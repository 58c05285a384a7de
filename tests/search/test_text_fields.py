"""BM25 over weighted fields, BM25F (``text_fields="title^2,text,keywords"``, ``--text-fields``): the weights read and
refused, a field's words counting its weight's times in the counts and the length, metadata fields searched, the
fields kept by the index for documents added later and for RM3's feedback, the hybrid's BM25 part, the command line."""

from __future__ import annotations

import json
import logging

import pytest
from typer.testing import CliRunner

from semiret.cli import app
from semiret.data import Document
from semiret.errors import SemiretError
from semiret.search import BM25Retriever, open_retriever
from semiret.search.hybrid import HybridRetriever
from semiret.text.fields import TextFields

from helpers import write_jsonl

FILLER = [Document(f"f{i}", f"filler{i} word{i} number{i} padding{i}", f"heading{i}") for i in range(30)]
CORPUS = FILLER + [
    Document("statin", "lipid lowering therapy in older adults", "Statins and heart failure",
             {"keywords": ["cardiology", "lipids"], "year": 2020}),
    Document("trial", "statins were given to heart patients in a randomised trial", "A trial",
             {"keywords": "oncology"}),
    Document("garden", "roses and tulips", "Gardening"),
]


def title_repeated(document: Document, times: int) -> Document:
    """The document as plain BM25 reads ``title^times,text``: its title written ``times`` times before its text."""
    return Document(document.id, " ".join([document.title] * times + [document.text]))


@pytest.mark.parametrize("spec, weights", [
    ("title^2,text", (("title", 2), ("text", 1))),
    (" title ^ 3 , text^2 ,keywords", (("title", 3), ("text", 2), ("keywords", 1))),
    (["title^2.0", "text"], (("title", 2), ("text", 1))),
    ({"text": 1, "abstract": 4}, (("text", 1), ("abstract", 4))),
])
def test_fields_and_weights_are_read_in_every_form(spec, weights):
    fields = TextFields.parse(spec)
    assert fields.weights == weights
    assert TextFields.parse(str(fields)) == fields  # what an index records reads back alike
    assert TextFields.parse(None) is None


@pytest.mark.parametrize("spec, message", [
    ("title^1.5,text", "whole numbers of at least 1.*title\\^3,text\\^2"),
    ("title^101,text", "more than 100"),
    ("title^0,text", "'title' is 0"),
    ("title^-2", "cannot read|at least 1"),
    ("title^two", "must be a number"),
    ("title,title^2", "twice"),
    ("", "cannot read"),
    ([], "names no field"),
    ({"title": True}, "must be a number"),
    ({"title": float("nan")}, "must be a number"),
    (3, "a list of fields"),
])
def test_bad_fields_are_refused_with_the_option_named(spec, message):
    with pytest.raises(SemiretError, match=f"text_fields.*({message})"):
        TextFields.parse(spec)


def test_a_weighted_title_scores_as_the_title_written_that_many_times(tmp_path):
    """BM25F: a word in a field of weight w counts w times, the length counts each field times its weight, one
    IDF over the whole document; so the index equals plain BM25 over the title repeated (the same counts and
    lengths), score for score, and differs from the unweighted one."""
    weighted = BM25Retriever.build(CORPUS, tmp_path / "weighted", text_fields="title^3,text")
    by_hand = BM25Retriever.build([title_repeated(d, 3) for d in CORPUS], tmp_path / "hand")
    plain = BM25Retriever.build(CORPUS, tmp_path / "plain")
    for query in ("statins heart", "trial", "heart failure lipid", "gardening roses"):
        got, expected = weighted.search(query, k=5), by_hand.search(query, k=5)
        assert [h.id for h in got] == [h.id for h in expected]
        assert [h.score for h in got] == pytest.approx([h.score for h in expected], rel=1e-6)
    # "statins": in one document's title and in the other's text; unweighted the text's longer document loses less
    assert weighted.search("statins", k=2)[0].score / weighted.search("statins", k=2)[1].score > \
        plain.search("statins", k=2)[0].score / plain.search("statins", k=2)[1].score
    assert weighted.index.meta["analyzer"]["text_fields"] == {"title": 3, "text": 1}
    assert "text_fields" not in plain.index.meta["analyzer"]  # indexes without the option describe themselves as before


def test_metadata_fields_are_searched_and_weighted(tmp_path):
    retriever = BM25Retriever.build(CORPUS, tmp_path / "idx", text_fields="title,text,keywords^2")
    assert [h.id for h in retriever.search("cardiology", k=5)] == ["statin"]  # a list's words
    assert [h.id for h in retriever.search("oncology", k=5)] == ["trial"]  # a string's
    plain = BM25Retriever.build(CORPUS, tmp_path / "plain")
    assert plain.search("cardiology", k=5) == []  # metadata is not read without the option
    numbers = BM25Retriever.build(CORPUS, tmp_path / "numbers", text_fields="text,year")
    assert [h.id for h in numbers.search("2020", k=5)] == ["statin"]
    only_titles = BM25Retriever.build(CORPUS, tmp_path / "titles", text_fields="title")
    assert only_titles.search("roses", k=5) == [] and [h.id for h in only_titles.search("gardening")] == ["garden"]


def test_documents_added_later_are_read_with_the_recorded_fields_and_merge_exactly(tmp_path):
    """The fields are fixed when the index is made and read from it when it is opened again: a document added in
    another process is weighted alike, and merging segments (whose average length then changes) gives the scores
    of one build of every document."""
    BM25Retriever.build(CORPUS[:20], tmp_path / "idx", text_fields="title^2,text,keywords")
    reopened = open_retriever(tmp_path / "idx")
    reopened.add(CORPUS[20:])
    reopened.index.merge()
    whole = BM25Retriever.build(CORPUS, tmp_path / "whole", text_fields="title^2,text,keywords")
    for query in ("statins heart", "cardiology trial", "heading3 filler7"):
        got, expected = reopened.search(query, k=5), whole.search(query, k=5)
        assert [h.id for h in got] == [h.id for h in expected]
        assert [h.score for h in got] == pytest.approx([h.score for h in expected], rel=1e-5)


def test_a_metadata_value_that_is_no_text_is_refused_before_the_index_changes(tmp_path):
    retriever = BM25Retriever.build(CORPUS, tmp_path / "idx", text_fields="text,keywords")
    before = retriever.search("cardiology", k=5)
    with pytest.raises(SemiretError, match="document 'bad'.*'keywords'.*dict"):
        retriever.add([Document("fine", "another text"), Document("bad", "text", metadata={"keywords": {"a": 1}})])
    assert retriever.index.n_docs == len(CORPUS) and retriever.search("cardiology", k=5) == before
    assert "fine" not in retriever.index.live_ids()


def test_a_field_no_document_has_is_named_in_a_warning(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        BM25Retriever.build(CORPUS, tmp_path / "idx", text_fields="title,text,keywrods")
    assert "'keywrods'" in caplog.text and "misspelt" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        BM25Retriever.build(CORPUS, tmp_path / "ok", text_fields="title,text,keywords", overwrite=True)
    assert "keywords" not in caplog.text


def test_rm3_reads_its_feedback_documents_as_the_index_does(tmp_path):
    """A word only in the feedback document's keywords expands the query when the index reads the keywords."""
    corpus = FILLER + [Document("a", "car engine", metadata={"keywords": "automobile"}),
                       Document("b", "automobile repairs")]
    read = BM25Retriever.build(corpus, tmp_path / "read", text_fields="text,keywords").with_options(rm3=True, fb_docs=1)
    plain = BM25Retriever.build(corpus, tmp_path / "plain").with_options(rm3=True, fb_docs=1)
    assert [h.id for h in read.search("car", k=5)] == ["a", "b"]
    assert [h.id for h in plain.search("car", k=5)] == ["a"]


def test_the_hybrid_bm25_part_reads_the_fields(tmp_path):
    from semiret.search.retrievers import retriever_class

    hybrid = retriever_class("hybrid").build(CORPUS, tmp_path / "hybrid", neural="idf",
                                             text_fields="title^2,text,keywords")
    assert hybrid.index.parts["lexical"].meta["analyzer"]["text_fields"] == {"title": 2, "text": 1, "keywords": 1}
    assert "statin" in [h.id for h in hybrid.search("cardiology", k=3)]
    neural = retriever_class("idf").build(CORPUS, tmp_path / "idf")
    around = HybridRetriever.around(neural.index.path, tmp_path / "around", bm25={"text_fields": "title,keywords"})
    assert around.index.parts["lexical"].meta["analyzer"]["text_fields"] == {"title": 1, "keywords": 1}
    with pytest.raises(SemiretError, match="text_fields.*1.5"):
        HybridRetriever.around(neural.index.path, tmp_path / "bad", bm25={"text_fields": "title^1.5"})
    assert not (tmp_path / "bad").exists()


def test_the_command_line_keeps_the_corpus_fields_it_reads(tmp_path):
    """``--text-fields`` naming a field of the corpus's lines keeps it without --metadata-fields, for the build and
    for documents added later; ``semiret info`` shows the fields."""
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [
        {"_id": "a", "title": "Statins", "text": "heart failure study", "keywords": ["cardiology"]},
        {"_id": "b", "title": "Other", "text": "statins and lipids"}])
    runner = CliRunner()
    result = runner.invoke(app, ["index", "--data", str(corpus), "--out", str(tmp_path / "idx"),
                                 "--text-fields", "title^2,text,keywords"])
    assert result.exit_code == 0, result.output
    searched = runner.invoke(app, ["search", "cardiology", "--index", str(tmp_path / "idx"), "--json"])
    assert [h["id"] for h in json.loads(searched.output)["hits"]] == ["a"]
    more = write_jsonl(tmp_path / "more.jsonl", [{"_id": "c", "text": "unrelated", "keywords": "nephrology"}])
    assert runner.invoke(app, ["add", str(more), "--index", str(tmp_path / "idx")]).exit_code == 0
    searched = runner.invoke(app, ["search", "nephrology", "--index", str(tmp_path / "idx"), "--json"])
    assert [h["id"] for h in json.loads(searched.output)["hits"]] == ["c"]
    info = json.loads(runner.invoke(app, ["info", "--index", str(tmp_path / "idx")]).output)
    assert info["analyzer"]["text_fields"] == {"title": 2, "text": 1, "keywords": 1}
    bad = runner.invoke(app, ["index", "--data", str(corpus), "--out", str(tmp_path / "bad"),
                              "--text-fields", "title^0.5"])
    assert bad.exit_code != 0 and "--text-fields" in bad.output and not (tmp_path / "bad").exists()
    # a field the reader takes as the text (Pyserini's contents, an abstract and a body): said, not silently lost
    pyserini = write_jsonl(tmp_path / "pyserini.jsonl", [{"id": "a", "contents": "heart", "abstract": "lungs"}])
    taken = runner.invoke(app, ["index", "--data", str(pyserini), "--out", str(tmp_path / "taken"),
                                "--text-fields", "text,abstract"])
    assert taken.exit_code != 0 and "'abstract'" in taken.output and "write 'text'" in taken.output
    assert not (tmp_path / "taken").exists()


def test_a_server_makes_an_index_of_weighted_fields(tmp_path):
    from semiret.serving import ServeSettings, create_app

    from helpers import LocalClient

    key = {"X-API-Key": "key"}
    settings = ServeSettings({}, data_dir=str(tmp_path / "data"), api_key="key")
    with LocalClient(create_app(settings)) as client:
        made = client.put("/indexes/docs", json={"options": {"text_fields": "title^2,text,keywords"}}, headers=key)
        assert made.status_code == 201, made.text
        documents = [{"_id": "a", "title": "Statins", "text": "a study", "metadata": {"keywords": ["cardiology"]}},
                     {"_id": "b", "text": "statins and more statins"}]
        assert client.put("/indexes/docs/documents", json={"documents": documents}, headers=key).status_code == 200
        found = client.post("/indexes/docs/search", json={"queries": ["cardiology"]}).json()["results"][0]
        assert [hit["id"] for hit in found] == ["a"]
        refused = client.put("/indexes/other", json={"options": {"text_fields": "title^0.5"}}, headers=key)
        assert refused.status_code == 422 and "text_fields" in refused.text
        assert client.get("/indexes/other").status_code == 404


def test_setting_a_field_the_index_reads_counts_its_words_again(tmp_path):
    """set_metadata of a field the index reads as text encodes the documents again (their words change), through the
    retriever, the command line and a passages index; the index alone refuses it; other fields change as before."""
    retriever = BM25Retriever.build(CORPUS, tmp_path / "idx", text_fields="title,text,keywords")
    assert retriever.set_metadata({"keywords": "nephrology"}, ids=["statin"]) == 1
    assert retriever.search("cardiology", k=5) == [] and [h.id for h in retriever.search("nephrology")] == ["statin"]
    fresh = BM25Retriever.build([d if d.id != "statin" else Document(d.id, d.text, d.title, {
        **d.metadata, "keywords": "nephrology"}) for d in CORPUS], tmp_path / "fresh", text_fields="title,text,keywords")
    retriever.index.merge()
    assert [h.score for h in retriever.search("nephrology statins")] == pytest.approx(
        [h.score for h in fresh.search("nephrology statins")], rel=1e-5)
    assert retriever.set_metadata({"year": 1999}, ids=["statin"]) == 1  # a field not read: no words change
    assert retriever.get_document("statin").metadata["year"] == 1999
    from semiret.indexes.filters import set_metadata

    with pytest.raises(SemiretError, match="reads the field 'keywords' as text"):
        set_metadata(retriever.index, {"keywords": "x"}, ["statin"])
    result = CliRunner().invoke(app, ["set-metadata", "--index", str(tmp_path / "idx"), '{"keywords": "hepatology"}',
                                      "--id", "trial"])
    assert result.exit_code == 0, result.output
    assert [h.id for h in open_retriever(tmp_path / "idx").search("hepatology")] == ["trial"]
    passages = BM25Retriever.build(CORPUS, tmp_path / "passages", text_fields="text,keywords",
                                   chunking=__import__("semiret.data.chunking", fromlist=["Chunking"]).Chunking(3))
    passages.set_metadata({"keywords": "virology"}, ids=["statin"])
    assert passages.search("virology", k=10) != [] and passages.search("cardiology", k=10) == []


def test_fields_read_as_text_are_kept_by_add_and_eval_whatever_built_the_index(tmp_path):
    """`semiret add` to an index built in Python keeps a corpus line's field the index reads (no --metadata-fields
    recorded); `semiret eval --text-fields` keeps them in the collection's corpus."""
    BM25Retriever.build([Document("a", "x text", metadata={"keywords": "alpha"})], tmp_path / "idx",
                        text_fields="text,keywords")
    more = write_jsonl(tmp_path / "more.jsonl", [{"_id": "b", "text": "y", "keywords": "beta"}])
    runner = CliRunner()
    assert runner.invoke(app, ["add", str(more), "--index", str(tmp_path / "idx")]).exit_code == 0
    assert [h.id for h in open_retriever(tmp_path / "idx").search("beta")] == ["b"]
    from helpers import write_beir

    root = write_beir(tmp_path / "beir", docs=[Document("d1", "a study", metadata={"keywords": "walrus"}),
                                               Document("d2", "another study")],
                      queries={"q1": "walrus"}, qrels={"q1": {"d1": 1}})
    lines = [json.loads(line) for line in (root / "corpus.jsonl").read_text().splitlines()]
    write_jsonl(root / "corpus.jsonl", [{**{k: v for k, v in line.items() if k != "metadata"},
                                        **(line.get("metadata") or {})} for line in lines])  # keywords top-level
    figures = runner.invoke(app, ["eval", "--data", str(root), "-r", "bm25", "--text-fields", "text,keywords",
                                  "--json"])
    assert figures.exit_code == 0, figures.output
    assert json.loads(figures.output)["nDCG@10"] == 1.0


def test_a_dotted_field_reads_nested_metadata_as_filters_do(tmp_path):
    documents = [Document("a", "plain text", metadata={"source": {"name": "cardiology journal"}}),
                 Document("b", "other text", metadata={"source.name": "oncology digest"})]
    retriever = BM25Retriever.build(documents, tmp_path / "idx", text_fields="text,source.name")
    assert [h.id for h in retriever.search("cardiology")] == ["a"]  # a path into nested objects
    assert [h.id for h in retriever.search("oncology")] == ["b"]  # a key of that name first
    assert [h.id for h in retriever.search("journal", filter={"source.name": "cardiology journal"})] == ["a"]


def test_the_command_line_keeps_a_dotted_field_s_object_and_warns_only_of_what_is_missing(tmp_path, caplog):
    corpus = write_jsonl(tmp_path / "nested.jsonl", [
        {"_id": "n1", "text": "first", "metadata": {"source": {"name": "platypus journal"}, "keywords": "emu"}},
        {"_id": "n2", "text": "second", "source": {"name": "wombat weekly"}}])
    runner = CliRunner()
    with caplog.at_level(logging.WARNING):
        made = runner.invoke(app, ["index", "--data", str(corpus), "--out", str(tmp_path / "idx"),
                                   "--text-fields", "text,source.name,keywords"])
    assert made.exit_code == 0, made.output
    retriever = open_retriever(tmp_path / "idx")
    assert [h.id for h in retriever.search("wombat")] == ["n2"] and [h.id for h in retriever.search("platypus")] == ["n1"]
    assert "no document has" not in caplog.text  # the metadata object's fields are found, not warned of
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        runner.invoke(app, ["index", "--data", str(corpus), "--out", str(tmp_path / "other"),
                            "--text-fields", "text,nosuch"])
    assert "'nosuch'" in caplog.text


# ---------------------------------------------------------------- what else reads the fields: operators, $text,
# highlights, suggestions and recommend read what the index's BM25 reads, not the title and text alone

READ = FILLER + [
    Document("statin", "lipid lowering therapy", "Statins", {"keywords": ["Heart failure", "Cardiology"]}),
    Document("trial", "heart patients with failure in a trial", "A trial", {"keywords": "oncology"}),
    Document("garden", "roses and tulips", "Gardening"),
]


def test_operators_and_text_filters_read_the_fields_the_index_reads(tmp_path):
    """``+word``, ``"phrase"`` and ``-word`` hold in a metadata field the index reads (a phrase inside one value of
    a list, never across two); documents added or given new values later too; an index without text_fields as
    ever, and one reading no title finds no word of it."""
    read = BM25Retriever.build(READ, tmp_path / "read", text_fields="title^2,text,keywords")
    plain = BM25Retriever.build(READ, tmp_path / "plain")
    assert [h.id for h in read.search("therapy +cardiology", operators=True)] == ["statin"]
    assert plain.search("therapy +cardiology", operators=True) == []
    assert [h.id for h in read.search('heart "heart failure"', operators=True)] == ["statin"]
    assert plain.search('heart "heart failure"', operators=True) == []
    assert read.search('"failure cardiology"', operators=True) == []  # two values of the list
    assert [h.id for h in read.search("therapy heart -cardio*", operators=True)] == ["trial"]
    assert sorted(h.id for h in plain.search("therapy heart -cardio*", operators=True)) == ["statin", "trial"]
    assert [h.id for h in read.search("heart", filter={"$text": "oncology"})] == ["trial"]
    read.add([Document("new", "unrelated words", metadata={"keywords": "nephrology"})])
    assert [h.id for h in read.search("+nephrology", operators=True)] == ["new"]
    read.set_metadata({"keywords": "virology"}, ids=["trial"])
    assert [h.id for h in read.search("+virology", operators=True)] == ["trial"]
    assert read.search("+oncology", operators=True) == []
    untitled = BM25Retriever.build(READ, tmp_path / "untitled", text_fields="text,keywords")
    assert untitled.search("+gardening", operators=True) == []  # BM25 reads no title there, nor do operators
    assert [h.id for h in plain.search("+gardening", operators=True)] == ["garden"]


def test_highlights_mark_what_the_index_reads_a_metadata_field_s_fragments_named(tmp_path):
    read = BM25Retriever.build(READ, tmp_path / "read", text_fields="title^2,text,keywords")
    plain = BM25Retriever.build(READ, tmp_path / "plain")
    assert read.highlight("cardiology", "statin") == ["keywords: Heart failure; <em>Cardiology</em>"]
    assert plain.highlight("cardiology", "statin") == []
    # the title and text as an index without fields shows them, the field's fragment after them, ranked together
    assert read.highlight("statins heart lipid", "statin") == [
        "<em>Statins</em> <em>lipid</em> lowering therapy", "keywords: <em>Heart</em> failure; Cardiology"]
    assert read.highlight("statins heart lipid", "statin", fragments=1) == [
        "<em>Statins</em> <em>lipid</em> lowering therapy"]
    assert plain.highlight("statins lipid", "statin") == read.highlight("statins lipid", "statin")
    assert read.highlight("cardiology", "statin", tags=None) == [
        [("keywords: ", False), ("Heart", False), (" ", False), ("failure", False), ("; ", False),
         ("Cardiology", True)]]
    printed = CliRunner().invoke(app, ["search", "--index", str(tmp_path / "read"), "--highlight", "--json",
                                       "--operators", "+cardiology"])
    assert printed.exit_code == 0, printed.output
    hit = json.loads(printed.output)["hits"][0]
    assert hit["id"] == "statin" and hit["highlights"] == ["keywords: Heart failure; <em>Cardiology</em>"]


def test_suggestions_complete_words_of_the_fields_read_spelt_as_written(tmp_path):
    read = BM25Retriever.build(READ, tmp_path / "read", text_fields="title,text,keywords")
    plain = BM25Retriever.build(READ, tmp_path / "plain")
    assert [(s.word, s.count) for s in read.suggest("cardi")] == [("Cardiology", 1)]
    assert [s.word for s in read.suggest("heart fail")] == ["failure"]  # the trial's text and the keyword
    assert plain.suggest("cardi") == []


def test_recommend_searches_with_the_fields_the_index_reads(tmp_path):
    """An example whose only word shared with another document is in its keywords recommends it where the index
    reads them (the example's text as BM25 reads it), not otherwise."""
    corpus = FILLER + [Document("a", "car engine", metadata={"keywords": "automobile"}),
                       Document("b", "automobile repairs")]
    read = BM25Retriever.build(corpus, tmp_path / "read", text_fields="text,keywords")
    plain = BM25Retriever.build(corpus, tmp_path / "plain")
    assert [h.id for h in read.recommend(["a"])] == ["b"]
    assert plain.recommend(["a"]) == []
    assert read.document_side.text(corpus[-2]) == "car engine\nautomobile"


def test_the_hybrid_reads_its_bm25_part_s_fields_for_operators_highlights_and_recommend(tmp_path):
    from semiret.search.retrievers import retriever_class

    hybrid = retriever_class("hybrid").build(READ, tmp_path / "hybrid", neural="idf",
                                             text_fields="title,text,keywords")
    assert [h.id for h in hybrid.search("therapy +cardiology", operators=True)] == ["statin"]
    assert "keywords: Heart failure; <em>Cardiology</em>" in hybrid.highlight("cardiology", "statin")
    assert [s.word for s in hybrid.suggest("cardi")] == ["Cardiology"]
    lexical, neural = (hybrid.document_side.sides[part][1] for part in ("lexical", "neural"))
    assert lexical.text(READ[-3]) == "Statins\nlipid lowering therapy\nHeart failure\nCardiology"
    assert neural.text(READ[-3]) == READ[-3].full_text  # (what its encoder read: recommend's neural query)
    plain = retriever_class("hybrid").build(READ, tmp_path / "plain", neural="idf")
    assert plain.search("therapy +cardiology", operators=True) == []
    assert plain.document_side.sides["lexical"][1].text(READ[-3]) == READ[-3].full_text


@pytest.mark.parametrize("spec", [{"$text": "cardiology"}, {"$text": "statins"}, {"$text": '"heart failure"'},
                                  {"$text": "card*"}, {"$text": "gardening"}, {"$text": '"failure cardiology"'},
                                  {"$text": "heading3"}, {"$not": {"$text": "oncology"}},
                                  {"$or": [{"$text": "gardening"}, {"$text": "tulips"}]}])
def test_a_text_condition_read_one_document_at_a_time_passes_what_the_word_index_passes(tmp_path, spec):
    """``$text`` checked on each stored document (:meth:`MetadataFilter.matches`, what an index without masks,
    Milvus, applies: :func:`~semiret.indexes.filters.hit_metadata`'s stored metadata, a deeper search's
    post-filter, its counts and reads) passes the documents a segment's word index passes: over fields of a
    metadata field and the text weighted, no title, over the hybrid's BM25 part's fields, and over the title
    and text."""
    from semiret.indexes.filters import MetadataFilter, hit_metadata, text_condition_fields
    from semiret.search.retrievers import retriever_class

    class StoredOnly:
        """An index as one without masks reads it (Milvus's): its record and its stored documents."""

        def __init__(self, index):
            self.meta, self.get_documents = index.meta, index.get_documents

    fielded = BM25Retriever.build(READ, tmp_path / "fielded", text_fields="text^2,keywords")
    hybrid = retriever_class("hybrid").build(READ, tmp_path / "hybrid", neural="idf", text_fields="text^2,keywords")
    plain = BM25Retriever.build(READ, tmp_path / "plain")
    wanted = MetadataFilter(spec)
    for retriever in (fielded, hybrid, plain):
        masked = {d.id for d in retriever.index.iter_documents(wanted)}
        fields = text_condition_fields(retriever.index)
        assert {d.id for d in READ if wanted.matches(d.metadata, d, fields)} == masked, retriever.index.path
    stored = hit_metadata(StoredOnly(fielded.index), [d.id for d in READ]).passing(wanted)
    assert stored == {d.id for d in fielded.index.iter_documents(wanted)}
    if spec in ({"$text": "statins"}, {"$text": "gardening"}, {"$text": "heading3"}):  # words of titles only
        assert not stored and plain.count(spec) == 1
    if spec in ({"$text": "cardiology"}, {"$text": '"heart failure"'}, {"$text": "card*"}):  # of keywords only
        assert stored == {"statin"} and plain.count(spec) == 0


def test_a_hybrid_recommends_with_each_part_reading_the_examples_as_it_indexed_them(tmp_path):
    """Its BM25 part searches with an example's fields as weighted (its keywords here), its neural part with the
    title and text it encoded (not BM25's fields): the neural part alone recommends what the neural retriever
    alone does, and a document sharing only the example's keywords is found by BM25's part alone."""
    from semiret.search.retrievers import retriever_class

    corpus = FILLER + [Document("a", "car engine", "Motors", {"keywords": "automobile automobile"}),
                       Document("b", "automobile repairs"), Document("c", "motors for a car engine")]
    build = retriever_class("hybrid").build
    neural = build(corpus, tmp_path / "hybrid", neural="idf", text_fields="title^3,text,keywords", fusion="rrf",
                   weight=0.0)
    alone = retriever_class("idf").build(corpus, tmp_path / "idf")
    assert [h.id for h in neural.recommend(["a"])] == [h.id for h in alone.recommend(["a"])] == ["c"]
    lexical = open_retriever(tmp_path / "hybrid", weight=1.0)
    assert [h.id for h in lexical.recommend(["a"])] == ["c", "b"]
    assert [h.id for h in lexical.recommend(["a"], filter={"$text": "repairs"})] == ["b"]
    both = open_retriever(tmp_path / "hybrid", weight=0.5, fusion="bound")
    assert set(h.id for h in both.recommend(["a", "c"])) == {"b"}
