"""Synonym rules (``Retriever.set_synonyms``, ``semiret synonyms``, the service's ``/synonyms``, the ``synonyms``
search option): Solr's format, read with the index's analyzer, expanding BM25 queries (and a hybrid's BM25 part)
with each phrase weighted as its synonyms are; set without encoding a document again, seen by the next search."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from semiret.cli import app
from semiret.data import Document
from semiret.errors import SemiretError
from semiret.indexes import open_index
from semiret.search import BM25Retriever, open_retriever
from semiret.text.synonyms import SynonymMap, parse_synonyms

DOCS = [
    Document("mi-long", "Myocardial infarction in older patients."),
    Document("mi-short", "Exercise after MI improves outcomes."),
    Document("attack", "Heart attack survivors and their families."),
    Document("color", "The color of the evening sky."),
    Document("colour", "Colour perception in birds."),
    Document("garden", "Morning birds sing in the garden."),
    Document("statin", "Statins lower cholesterol in adults."),
]
RULES = ["# cardiology", "heart attack, myocardial infarction, mi", "colour => color"]


@pytest.fixture
def bm25(tmp_path):
    return BM25Retriever.build(DOCS, tmp_path / "bm25")


def ids(hits) -> set[str]:
    return {hit.id for hit in hits}


# ---------------------------------------------------------------------------------------------- the format
def test_rules_parse_as_solr_writes_them():
    rules = parse_synonyms(["# a comment", "", "  a, b c ", "x, y => z", "one\\, two, three", "p => q\\=r",
                            "c#, csharp  # a # further on is a character"])
    assert [(r.line, r.inputs, r.outputs, r.explicit) for r in rules] == [
        (3, ("a", "b c"), ("a", "b c"), False), (4, ("x", "y"), ("z",), True),
        (5, ("one, two", "three"), ("one, two", "three"), False), (6, ("p",), ("q=r",), True),
        (7, ("c#", "csharp  # a # further on is a character"), ("c#", "csharp  # a # further on is a character"),
         False)]


def test_files_with_a_byte_order_mark_and_windows_line_ends_read_as_written(tmp_path):
    from semiret.text.synonyms import read_synonyms

    path = tmp_path / "rules.txt"
    path.write_bytes("\ufeff# exported\r\nsky, heaven\r\n".encode("utf-8"))
    assert read_synonyms(path) == ["# exported", "sky, heaven"]
    assert read_synonyms(["\ufeffsky, heaven"]) == ["sky, heaven"]
    with pytest.raises(SemiretError, match="rules, line 2: 'a, b\\\\nc, d' holds a line break"):
        read_synonyms(["sky, heaven", "a, b\nc, d"], "rules")
    with pytest.raises(SemiretError, match="no such synonyms file \\(rules themselves are given as a list"):
        read_synonyms("sky, heaven")


def test_a_rule_of_many_phrases_takes_room_for_its_phrases_not_their_pairs():
    from semiret.text.synonyms import MAX_PHRASES

    phrases = [f"p{i}" for i in range(MAX_PHRASES)]
    synonyms = SynonymMap(parse_synonyms([", ".join(phrases)] * 50), str.split)
    assert len(synonyms) == MAX_PHRASES and len(synonyms._entries["p0",].groups) == 50
    assert synonyms.matches(["p7"])[0].alternatives == [(p,) for p in phrases if p != "p7"]
    with pytest.raises(SemiretError, match=f"line 1: more than {MAX_PHRASES:,} phrases in one rule"):
        parse_synonyms([", ".join(phrases + ["one more"])])


@pytest.mark.parametrize("line, message", [
    ("alone", "line 2: 'alone' names one phrase"),
    ("a, , b", "line 2: 'a, , b' has an empty phrase"),
    ("a => b => c", "line 2: 'a => b => c' holds '=>' more than once"),
    ("a =>", "line 2: 'a =>' has an empty phrase"),
])
def test_a_malformed_line_is_named(line, message):
    with pytest.raises(SemiretError, match=f"my.txt, {message}"):
        parse_synonyms(["a, b", line], "my.txt")


def test_matches_take_the_longest_phrase_left_to_right_and_merge_rules():
    rules = parse_synonyms(["new york, nyc", "new, fresh", "york => yorkshire", "nyc => big apple", "run, run"])
    synonyms = SynonymMap(rules, str.split)
    assert len(synonyms) == 5  # new york, nyc, new, fresh, york; "run, run": nothing to add
    found = synonyms.matches("new york new york".split())
    assert [(m.start, m.end) for m in found] == [(0, 2), (2, 4)]
    assert found[0].keeps_original and found[0].alternatives == [("nyc",)]
    nyc = synonyms.matches(["nyc"])[0]  # an equivalence keeps it, the explicit rule adds its output
    assert nyc.keeps_original and nyc.alternatives == [("new", "york"), ("big", "apple")]
    york = synonyms.matches(["york"])[0]
    assert not york.keeps_original and york.alternatives == [("yorkshire",)]
    kept = SynonymMap(parse_synonyms(["a => a, b"]), str.split).matches(["a"])[0]
    assert kept.keeps_original and kept.alternatives == [("b",)]


def test_a_phrase_of_stopwords_is_an_error_naming_its_line(bm25):
    with pytest.raises(SemiretError, match="synonyms, line 2: 'the of' leaves no word once analyzed"):
        bm25.set_synonyms(["sky, heaven", "the of, air"])
    assert bm25.synonyms() == []


# ---------------------------------------------------------------------------------------------- searching
def test_a_query_finds_documents_holding_its_synonyms(bm25):
    assert ids(bm25.search("heart attacks", k=10)) == {"attack"}
    assert bm25.set_synonyms(RULES) == 2
    assert ids(bm25.search("heart attacks", k=10)) == {"attack", "mi-long", "mi-short"}  # stems: "attacks"
    assert ids(bm25.search("MI", k=10)) == {"attack", "mi-long", "mi-short"}
    assert ids(bm25.with_options(synonyms="none").search("heart attacks", k=10)) == {"attack"}
    assert bm25.search("garden birds", k=10)[0].id == "garden"  # words no rule holds: as ever


def test_the_words_typed_weigh_as_ever_and_a_synonym_at_most_as_much(tmp_path):
    docs = DOCS + [Document(f"sky-{i}", "Heart of the sky, a blue heaven.") for i in range(6)]
    bm25 = BM25Retriever.build(docs, tmp_path / "bm25")
    bm25.set_synonyms(RULES + ["statins, lipitor, cholesterol, sky"])
    index = bm25.index
    idf = {term: float(index.idf()[index.vocab.index(term)]) for term in
           ("heart", "attack", "myocardi", "infarct", "mi", "statin", "cholesterol", "sky")}
    weights = {t.term: t.weight for t in bm25.analyze("heart attack")}  # query weight times IDF
    typed = idf["heart"] + idf["attack"]  # "heart" is common here: the typed phrase weighs less than its synonym
    assert weights["heart"] == pytest.approx(idf["heart"]) and weights["attack"] == pytest.approx(idf["attack"])
    assert idf["myocardi"] + idf["infarct"] > typed
    assert weights["myocardi"] + weights["infarct"] == pytest.approx(typed, rel=1e-5)  # scaled down to the typed
    assert weights["mi"] == pytest.approx(min(idf["mi"], typed), rel=1e-5)
    # one-word phrases: the typed word as ever, a rarer synonym lowered to its IDF, a commoner one at its own
    weights = {t.term: t.weight for t in bm25.analyze("statins")}
    assert set(weights) == {"statin", "cholesterol", "sky"}  # "lipitor": no document, left out
    assert idf["cholesterol"] == idf["statin"] > idf["sky"]
    assert weights == pytest.approx({"statin": idf["statin"], "cholesterol": idf["statin"], "sky": idf["sky"]})
    hits = bm25.search("heart attack", k=3)
    assert bm25.explain("heart attack", hits[0].id).score == pytest.approx(hits[0].score, rel=1e-5)


def test_a_common_synonym_never_lowers_a_rare_phrase_typed(tmp_path):
    docs = [Document("both", "Myocardial infarction treated with aspirin."),
            Document("aspirin", "Aspirin for headaches."), Document("phrase", "Myocardial infarction outcomes."),
            *(Document(f"filler-{i}", f"MI scores of batch {i}.") for i in range(30))]
    bm25 = BM25Retriever.build(docs, tmp_path / "bm25")
    plain = [hit.id for hit in bm25.search("myocardial infarction aspirin", k=3)]
    bm25.set_synonyms(["myocardial infarction, mi"])
    assert [hit.id for hit in bm25.search("myocardial infarction aspirin", k=3)][:2] == plain[:2] == ["both", "phrase"]


def test_an_explicit_rule_replaces_the_words_typed(bm25):
    bm25.set_synonyms(RULES)
    assert ids(bm25.search("colour", k=10)) == {"color"}  # "colour" => "color": the word typed is not searched
    assert ids(bm25.with_options(synonyms="none").search("colour", k=10)) == {"colour"}


def test_highlights_mark_the_synonyms_matched(bm25):
    bm25.set_synonyms(RULES)
    assert bm25.highlight("heart attack", "mi-long") == ["<em>Myocardial</em> <em>infarction</em> in older patients."]


def test_a_file_given_to_a_search_stands_in_for_the_index_rules(bm25, tmp_path):
    rules = tmp_path / "rules.txt"
    rules.write_text("cholesterol, lipids\n", encoding="utf-8")
    bm25.set_synonyms(RULES)
    other = bm25.with_options(synonyms=str(rules))
    assert ids(other.search("lipids", k=10)) == {"statin"}
    assert ids(other.search("heart attack", k=10)) == {"attack"}  # the index's rules are not read
    with pytest.raises(SemiretError, match="no such synonyms file"):
        bm25.with_options(synonyms=str(tmp_path / "missing.txt"))


def test_fuzzy_corrects_words_no_rule_matched(bm25):
    bm25.set_synonyms(RULES)
    fuzzy = bm25.with_options(fuzzy=True)
    assert ids(fuzzy.search("MI cholesterl", k=10)) == {"attack", "mi-long", "mi-short", "statin"}


# ---------------------------------------------------------------------------------------------- storage
def test_rules_are_committed_with_the_index_and_seen_by_other_readers(bm25, tmp_path):
    reader = open_retriever(tmp_path / "bm25")
    assert ids(reader.search("mi", k=10)) == {"mi-short"}
    before = bm25.index.snapshot.stamp
    bm25.set_synonyms(RULES)
    assert bm25.index.snapshot.stamp != before  # one commit
    reader.index.refresh()
    assert ids(reader.search("mi", k=10)) == {"attack", "mi-long", "mi-short"}
    assert open_retriever(tmp_path / "bm25").synonyms() == RULES
    assert open_index(tmp_path / "bm25").describe()["synonym_rules"] == 2
    backup = open_retriever(bm25.backup(tmp_path / "copy"))
    assert backup.synonyms() == RULES
    bm25.set_synonyms(None)
    reader.index.refresh()
    assert ids(reader.search("mi", k=10)) == {"mi-short"} and reader.synonyms() == []


def test_only_the_rule_file_of_the_last_commit_stays(bm25, tmp_path):
    for number in range(4):
        bm25.set_synonyms([f"sky, heaven{number}"])
    stamp = bm25.index.snapshot.stamp
    bm25.set_synonyms(["sky, heaven3"])  # the rules set already: no commit
    assert bm25.index.snapshot.stamp == stamp
    assert [path.name for path in (tmp_path / "bm25").glob("synonyms-*")] == [bm25.index.synonyms_file]


def test_a_reader_keeps_its_snapshot_rules_while_writers_replace_them(bm25, tmp_path):
    bm25.set_synonyms(["sky, heaven"])
    reader = open_retriever(tmp_path / "bm25")
    pinned = reader.pinned()
    bm25.set_synonyms(["sky, azure"])
    bm25.set_synonyms(["sky, cerulean"])
    assert ids(pinned.search("heaven", k=5)) == {"color"}  # its commit's rules, whose file is gone
    reader.index.refresh()
    assert ids(reader.search("heaven", k=5)) == set() and reader.synonyms() == ["sky, cerulean"]


def test_a_reader_of_a_commit_whose_rules_went_meanwhile_reads_the_newer_commit(bm25, tmp_path, monkeypatch):
    from semiret.indexes import segments

    bm25.set_synonyms(["sky, heaven"])
    reader = open_retriever(tmp_path / "bm25")
    read = segments._read_synonyms
    replaced = []

    def slow_read(path, meta, known):  # another process replaces the rules between this reader's two reads
        if not replaced:
            replaced.append(True)
            bm25.set_synonyms(["sky, cerulean"])
        return read(path, meta, known)

    bm25.set_synonyms(["sky, azure"])
    monkeypatch.setattr(segments, "_read_synonyms", slow_read)
    reader.index.refresh()
    assert reader.synonyms() == ["sky, cerulean"] and ids(reader.search("cerulean", k=5)) == {"color"}


def test_rules_that_add_nothing_are_said(bm25, caplog):
    with caplog.at_level("WARNING"):
        assert bm25.set_synonyms(["run, running, runs", "sky, heaven"]) == 2
    assert "synonyms: the rule of line 1 adds nothing once the index's analyzer reads them" in caplog.text


def test_bad_rules_leave_the_index_as_it_was(bm25):
    bm25.set_synonyms(RULES)
    stamp = bm25.index.snapshot.stamp
    with pytest.raises(SemiretError, match="line 1"):
        bm25.set_synonyms(["a => b => c"])
    assert bm25.index.snapshot.stamp == stamp and bm25.synonyms() == RULES


def test_retrievers_that_read_no_words_refuse_rules():
    from semiret.search import BagOfTokensRetriever

    overlap = BagOfTokensRetriever.build(DOCS)
    with pytest.raises(SemiretError, match="reads no words to expand by synonyms \\(bm25, hybrid, idf, "
                                           "inference-free do\\)"):
        overlap.set_synonyms(RULES)


def test_queries_of_tokens_weighted_by_idf_take_synonyms_too(tmp_path, tiny_bert):
    from semiret.search import IDFRetriever, InferenceFreeRetriever

    idf = IDFRetriever.build(DOCS, tmp_path / "idf")
    tokens = idf.query_side.vocabulary
    assert "mi-long" not in ids(idf.search("heart attack", k=3))
    idf.set_synonyms(RULES)
    assert open_retriever(tmp_path / "idf").synonyms() == RULES
    assert ids(idf.search("heart attack", k=3)) == {"attack", "mi-long", "mi-short"}
    weights = {t.term: t.weight for t in idf.analyze("heart attack")}
    typed = weights[tokens.token(tokens.encode("heart")[0])] + weights[tokens.token(tokens.encode("attack")[0])]
    synonym = [tokens.token(t) for t in tokens.encode("myocardial infarction")]  # my ##oca ##rdial in ##far ##ction
    assert "in" not in weights  # below min_idf, as if typed
    assert sum(weights.get(t, 0) for t in synonym) <= typed * (1 + 1e-5)  # at most as heavy as the words typed
    assert ids(idf.search("colour", k=5)) == {"color"}
    assert "mi-long" not in ids(idf.with_options(synonyms="none").search("heart attack", k=3))
    neural = InferenceFreeRetriever.build(DOCS, tmp_path / "neural", model=str(tiny_bert))
    assert neural.set_synonyms(["sky, heaven"]) == 1 and neural.synonyms() == ["sky, heaven"]


def test_a_hybrid_keeps_its_rules_in_its_bm25_part(tmp_path, tiny_bert):
    from semiret.search import HybridRetriever

    hybrid = HybridRetriever.build(DOCS, tmp_path / "hybrid", model=str(tiny_bert))
    assert "mi-long" not in ids(hybrid.search("heart attack", k=3))
    neural = hybrid.query_side.parts["neural"]
    vocabulary = neural.query_side.vocabulary
    synonym = set(vocabulary.encode("myocardial")) - set(vocabulary.encode("heart attack"))
    assert not synonym & set(neural.encode_query("heart attack").terms.tolist())
    hybrid.set_synonyms(RULES)
    assert open_retriever(tmp_path / "hybrid" / "lexical").synonyms() == RULES
    assert open_index(tmp_path / "hybrid" / "neural").synonym_lines() == RULES  # each part reads its own
    assert "mi-long" in ids(hybrid.search("heart attack", k=3))
    assert synonym <= set(neural.encode_query("heart attack").terms.tolist())  # the neural part reads them too
    plain = hybrid.with_options(synonyms="none")
    assert "mi-long" not in ids(plain.search("heart attack", k=3))
    assert not synonym & set(plain.query_side.parts["neural"].encode_query("heart attack").terms.tolist())
    with pytest.raises(SemiretError, match="line 1"):  # checked as both parts read queries
        hybrid.set_synonyms(["the, a"])


# ---------------------------------------------------------------------------------------------- the CLI
def test_the_cli_sets_shows_and_clears_rules(bm25, tmp_path):
    runner = CliRunner()
    rules = tmp_path / "rules.txt"
    rules.write_text("\n".join(RULES) + "\n", encoding="utf-8")
    index = str(tmp_path / "bm25")
    result = runner.invoke(app, ["synonyms", index, "--set", str(rules)])
    assert result.exit_code == 0, result.output
    assert runner.invoke(app, ["synonyms", index]).stdout.splitlines() == RULES
    found = runner.invoke(app, ["search", "--index", index, "mi", "--json"])
    assert {hit["id"] for hit in json.loads(found.stdout)["hits"]} == {"attack", "mi-long", "mi-short"}
    plain = runner.invoke(app, ["search", "--index", index, "mi", "--json", "--synonyms", "none"])
    assert {hit["id"] for hit in json.loads(plain.stdout)["hits"]} == {"mi-short"}
    bad = tmp_path / "bad.txt"
    bad.write_text("sky, heaven\nlonely\n", encoding="utf-8")
    refused = runner.invoke(app, ["synonyms", index, "--set", str(bad)])
    assert refused.exit_code != 0 and f"{bad}, line 2" in refused.output
    empty = runner.invoke(app, ["synonyms", index, "--set", "-"], input="# nothing\n")
    assert empty.exit_code != 0 and "standard input holds no rule (--clear removes them)" in empty.output
    assert runner.invoke(app, ["synonyms", index]).stdout.splitlines() == RULES
    assert runner.invoke(app, ["synonyms", index, "--clear"]).exit_code == 0
    assert runner.invoke(app, ["synonyms", index]).stdout == ""


def test_eval_takes_a_synonyms_file(tmp_path):
    runner = CliRunner()
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": d.id, "text": d.text}) + "\n" for d in DOCS), encoding="utf-8")
    (tmp_path / "queries.tsv").write_text("q1\theart attack\n", encoding="utf-8")
    (tmp_path / "qrels.tsv").write_text("q1\t0\tmi-long\t1\n", encoding="utf-8")
    rules = tmp_path / "rules.txt"
    rules.write_text("heart attack, myocardial infarction\n", encoding="utf-8")
    figures = {}
    for name, extra in (("plain", []), ("synonyms", ["--synonyms", str(rules)])):
        result = runner.invoke(app, ["eval", "--data", str(corpus), "--queries", str(tmp_path / "queries.tsv"),
                                     "--qrels", str(tmp_path / "qrels.tsv"), "--json", *extra])
        assert result.exit_code == 0, result.output
        figures[name] = json.loads(result.stdout.splitlines()[-1])
    assert figures["plain"]["nDCG@10"] == 0 and figures["synonyms"]["nDCG@10"] > 0
    assert figures["synonyms"]["options"]["synonyms"] == str(rules)
    assert figures["plain"]["synonym_rules"] is None and figures["synonyms"]["synonym_rules"] == 1
    index = tmp_path / "index"  # an index's own rules are said too
    BM25Retriever.build(DOCS, index).set_synonyms(RULES)
    result = runner.invoke(app, ["eval", "--data", str(corpus), "--queries", str(tmp_path / "queries.tsv"),
                                 "--qrels", str(tmp_path / "qrels.tsv"), "--index", str(index), "--json"])
    assert json.loads(result.stdout.splitlines()[-1])["synonym_rules"] == 2


# ---------------------------------------------------------------------------------------------- abbreviations
def test_abbreviations_a_corpus_defines_are_found_both_ways():
    from semiret.text.acronyms import mine_abbreviations

    texts = ["Acute myocardial infarction (MI) is common. MI kills.", "After an MI (myocardial infarction), rest.",
             "Computed tomography (CT) scans.", "The cat (CAT) sat; a cat is a cat.", "The NIH (NIH) said so.",
             "We studied (p < 0.05) effects.", "Mice (n = 12) were used."]
    assert mine_abbreviations(texts) == [("MI", "myocardial infarction", 2), ("CT", "computed tomography", 1)]
    assert mine_abbreviations(texts, min_count=2) == [("MI", "myocardial infarction", 2)]


def test_abbreviation_rules_are_proposed_for_review(tmp_path):
    docs = [Document("a", "Heart failure (HF) and chronic kidney disease (CKD) were common."),
            Document("b", "Patients with HF were older. We (WE) agree."),
            Document("c", "Reprogramming with OSKM (Oct4, Sox2, Klf4 and Myc) factors.")]
    bm25 = BM25Retriever.build(docs, tmp_path / "bm25")
    proposed = bm25.abbreviation_synonyms()
    # "we" is a stopword: its rule would be refused, so it is not proposed; commas of a long form are escaped
    assert proposed == ["# defined 1 time", "ckd, chronic kidney disease", "hf, heart failure",
                        "oskm, oct4\\, sox2\\, klf4 and myc"]
    assert bm25.set_synonyms(proposed) == 3 and bm25.synonyms() == proposed
    assert ids(bm25.search("HF", k=5)) == {"a", "b"}
    result = CliRunner().invoke(app, ["synonyms", str(tmp_path / "bm25"), "--abbreviations", "--min-count", "1"])
    assert result.exit_code == 0 and result.stdout.splitlines()[1:] == proposed
    assert ": 3; review" in result.stdout.splitlines()[0]  # rules counted, not the lines saying how often


# ---------------------------------------------------------------------------------------------- a second review's cases
def test_token_rules_match_whole_words_only(tmp_path):
    from semiret.search import IDFRetriever

    idf = IDFRetriever.build([Document("auto", "The automobile industry."), Document("carc", "Carcinoma of the lung."),
                              Document("cat", "A catheter was placed."),
                              *(Document(f"other-{i}", f"Gardens and birds {i}.") for i in range(6))], tmp_path / "idf")
    idf.set_synonyms(["car => automobile", "cat, feline"])
    assert ids(idf.search("carcinoma", k=5)) == {"carc"}  # "car ##cino ##ma": not the word "car"
    assert ids(idf.search("car", k=5)) == {"auto"}
    assert ids(idf.search("catheter", k=5)) == {"cat"}


def test_a_term_typed_and_in_a_synonym_weighs_what_it_weighs_typed(bm25):
    bm25.set_synonyms(["heart attack, heart failure"])
    weights = {t.term: t.weight for t in bm25.analyze("heart attack")}
    heart = float(bm25.index.idf()[bm25.index.vocab.index("heart")])
    assert weights["heart"] == pytest.approx(heart, rel=1e-5)


def test_a_typed_word_of_no_weight_caps_its_synonym_at_what_the_phrase_weighs(tmp_path):
    docs = [Document("attack", "Heart attack survivors."), Document("mi", "Myocardial infarction outcomes."),
            *(Document(f"heart-{i}", f"Heart health {i}.") for i in range(6))]
    bm25 = BM25Retriever.build(docs, tmp_path / "bm25", variant="robertson")
    bm25.set_synonyms(["heart attack, myocardial infarction"])
    scores = {hit.id: hit.score for hit in bm25.search("heart attack", k=10)}
    assert scores["mi"] <= scores["attack"] * (1 + 1e-5)  # "heart" is in most documents: robertson's IDF <= 0


def test_a_replacement_no_document_holds_leaves_the_tokens_typed(tmp_path):
    from semiret.search import IDFRetriever

    idf = IDFRetriever.build(DOCS, tmp_path / "idf")
    idf.set_synonyms(["colour => kolour"])
    assert ids(idf.search("colour", k=5)) == {"colour"}


def test_two_phase_search_of_an_expanded_query_is_exact(tmp_path):
    from semiret.search import IDFRetriever

    docs = [Document("attack", "Heart attack survivors."), Document("mi", "Myocardial infarction outcomes."),
            *(Document(f"h{i}", f"Heart health {i}.") for i in range(8)),
            *(Document(f"other-{i}", f"Gardens and birds {i}.") for i in range(40))]
    idf = IDFRetriever.build(docs, tmp_path / "idf")
    idf.set_synonyms(["heart attack, myocardial infarction"])
    assert "mi" in ids(idf.with_options(two_phase="0.4,always").search("heart attack", k=3))


def test_token_queries_read_the_rules_of_their_snapshot(tmp_path):
    from semiret.search import IDFRetriever

    writer = IDFRetriever.build(DOCS, tmp_path / "idf")
    writer.set_synonyms(["heart attack, myocardial infarction"])
    reader = open_retriever(tmp_path / "idf")
    pinned = reader.pinned()
    writer.set_synonyms(None)
    reader.index.refresh()
    assert "mi-long" in ids(pinned.search("heart attack", k=5))  # the commit it was pinned at
    assert "mi-long" not in ids(reader.search("heart attack", k=5))


def test_query_sides_that_read_queries_alike_share_compiled_rules(tmp_path):
    from semiret.search import IDFRetriever

    idf = IDFRetriever.build(DOCS, tmp_path / "idf")
    idf.set_synonyms(RULES)
    variant = idf.with_options(min_idf=0.5)
    idf.search("heart attack", k=1)
    assert variant.query_side.synonym_rules.ready(variant.index)  # compiled once, for both


def test_a_retriever_sent_to_another_process_keeps_its_rules_file(bm25, tmp_path, monkeypatch):
    import pickle

    (tmp_path / "rules.txt").write_text("mi, myocardial infarction\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    sent = pickle.dumps(bm25.with_options(synonyms="rules.txt"))  # a path relative to this working directory
    monkeypatch.chdir(tmp_path / "bm25")  # the other process's working directory
    assert ids(pickle.loads(sent).search("mi", k=5)) == {"mi-long", "mi-short"}
