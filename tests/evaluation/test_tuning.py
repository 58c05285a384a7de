"""Search options chosen on judged queries (``semiret tune``, ``semiret.evaluation.tuning``): every setting of a
grid scored as ``eval`` scores it, best first beside the retriever as opened, cross-validation that scores each fold
with a setting chosen without it, and what is refused."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from semiret.cli import app
from semiret.data import Document
from semiret.errors import SemiretError
from semiret.evaluation.metrics import score_run
from semiret.evaluation.tuning import MAX_SETTINGS, Setting, cross_validated, grid_search, settings_of
from semiret.search import retriever_class

from helpers import TINY_DOCS, TINY_QRELS, TINY_QUERIES, leftovers


@pytest.fixture
def idf(tmp_path):
    return retriever_class("idf").build(TINY_DOCS, tmp_path / "idf")


def test_the_grid_s_settings():
    assert settings_of({"a": [1, 2], "b": ["x", "y", "z"]}) == [
        {"a": 1, "b": "x"}, {"a": 1, "b": "y"}, {"a": 1, "b": "z"}, {"a": 2, "b": "x"}, {"a": 2, "b": "y"},
        {"a": 2, "b": "z"}]
    for wrong, message in (({}, "options to tune"), ({"a": []}, "non-empty list"), ({"a": 3}, "non-empty list"),
                           ({"a": list(range(MAX_SETTINGS)), "b": [1, 2]}, "settings")):
        with pytest.raises(SemiretError, match=message):
            settings_of(wrong)


def test_each_setting_scores_as_its_own_search(idf):
    settings = grid_search(idf, TINY_QUERIES, TINY_QRELS, {"min_idf": [0.0, 0.5, 5.0]}, "nDCG@10", depth=10)
    assert [s.score for s in settings] == sorted((s.score for s in settings), reverse=True)
    assert sum(not s.options for s in settings) == 1 and len(settings) == 4  # the retriever as opened, and three
    for setting in settings:
        variant = idf.with_options(**setting.options)
        run = variant.search(list(TINY_QUERIES.values()), k=10).as_run(list(TINY_QUERIES))
        assert setting.score == pytest.approx(score_run(run, TINY_QRELS, ["nDCG@10"])["nDCG@10"])
        assert len(setting.per_query) == len(TINY_QRELS) and setting.per_query.mean() == pytest.approx(setting.score)
    assert next(s for s in settings if s.options == {"min_idf": 5.0}).score < settings[0].score  # every token dropped
    with pytest.raises(SemiretError, match="min_idf"):
        grid_search(idf, TINY_QUERIES, TINY_QRELS, {"min_idf": [0.0, "high"]})  # bad values before any search
    with pytest.raises(SemiretError, match="fuzzy"):
        grid_search(idf, TINY_QUERIES, TINY_QRELS, {"fuzzy": [True]})  # an option of another retriever
    with pytest.raises(SemiretError, match="judged"):
        grid_search(idf, {"x": "cats"}, TINY_QRELS, {"min_idf": [0.0]})


def test_cross_validation_scores_each_fold_by_a_setting_chosen_without_it():
    # query values: "good" is better on queries 0-5, "other" on 6-7; as opened worst everywhere
    good = np.array([1.0, 1, 1, 1, 1, 1, 0, 0])
    other = np.array([0.0, 0, 0, 0, 0, 0, 1, 1])
    opened = np.full(8, 0.1)
    settings = [Setting({"x": 1}, good.mean(), good), Setting({"x": 2}, other.mean(), other), Setting({}, 0.1, opened)]
    tuned = cross_validated(settings, 2, seed=3)
    assert tuned["chosen"] == [{"x": 1}, {"x": 1}]  # on any half, "good" wins
    assert tuned["score"] == pytest.approx(good.mean())
    assert tuned["vs_as_opened"]["delta"] == pytest.approx(good.mean() - 0.1)
    assert tuned["vs_as_opened"]["better"] == 6 and tuned["vs_as_opened"]["worse"] == 2
    leave_one_out = cross_validated(settings, 8)
    assert leave_one_out["score"] == pytest.approx(good.mean()) and len(leave_one_out["chosen"]) == 8
    assert cross_validated(settings, 2, seed=3) == tuned  # seeded folds
    for wrong in (1, 9, 2.5, True):
        with pytest.raises(SemiretError, match="folds"):
            cross_validated(settings, wrong)


def test_the_command_line(idf, tmp_path):
    from helpers import write_beir

    data = write_beir(tmp_path / "data", split="train")
    runner = CliRunner()
    result = runner.invoke(app, ["tune", "--index", str(idf.index.path), "--data", str(data), "--grid",
                                 "min-idf=0,0.5,5", "--folds", "3", "--json"])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.stdout)
    assert figures["retriever"] == "idf" and figures["split"] == "train" and figures["queries"] == 3
    assert {json.dumps(s["options"]) for s in figures["settings"]} == {
        "{}", '{"min_idf": 0}', '{"min_idf": 0.5}', '{"min_idf": 5}'}
    assert figures["best"] == figures["settings"][0]["options"]
    assert figures["cross_validated"]["folds"] == 3 and len(figures["cross_validated"]["chosen"]) == 3
    table = runner.invoke(app, ["tune", "--index", str(idf.index.path), "--data", str(data), "--grid",
                                'min_idf=[0, 5]'])
    assert table.exit_code == 0 and "--min-idf 5" in table.output and "(as opened)" in table.output
    folded = runner.invoke(app, ["tune", "--index", str(idf.index.path), "--data", str(data), "--grid",
                                 "min_idf=0,5", "--folds", "3"])
    assert "cross-validated over 3 folds" in folded.stdout  # the figure to expect: output, not a message
    for flags, message in ((["--grid", "min_idf"], "NAME=V1,V2"), (["--grid", "a=1", "--grid", "a=2"], "twice"),
                           (["--grid", "min_idf=[0,"], "not a JSON list"), (["--grid", "k1=1.2"], "k1"),
                           (["--grid", "min_idf=0", "--folds", "9"], "folds"),
                           (["--grid", "min_idf=0", "--depth", "0"], "depth"),
                           (["--grid", "min_idf=0,0.5,0"], "lists 0.0 twice"), (["--grid", "min_idf=1,1.0"], "twice"),
                           (["--grid", "min_idf=0", "--measure", "nDCG@10", "--measure", "P@5"], "one measure")):
        refused = runner.invoke(app, ["tune", "--index", str(idf.index.path), "--data", str(data), *flags])
        assert refused.exit_code != 0 and message in refused.output, (flags, refused.output)


def test_tuning_on_test_queries_is_warned_of(idf, tmp_path, caplog):
    """`tune --split test` chose settings on the queries a user then reports, unsaid; with --folds each fold's
    figure is of queries not chosen on, so no warning."""
    from helpers import write_beir

    data = write_beir(tmp_path / "data", split="test")
    runner = CliRunner()
    for flags, warned in ((["--split", "test"], True), (["--split", "test", "--folds", "3"], False),
                          (["--qrels", str(data / "qrels" / "test.tsv")], True)):
        caplog.clear()
        result = runner.invoke(app, ["tune", "--index", str(idf.index.path), "--data", str(data), "--grid",
                                     "min_idf=0,5", *flags])
        assert result.exit_code == 0, result.output
        assert ("tuning on the test split" in caplog.text) is warned


def test_settings_are_shown_as_flags_to_paste_back(tmp_path):
    from semiret.cli import _as_flag
    from semiret.search import BM25Retriever

    from helpers import TINY_DOCS

    shown = [_as_flag(option) for option in {"rm3": True, "fuzzy": False, "fb_terms": 10, "fusion": "rrf",
                                             "weight": 0.25}.items()]
    assert shown == ["--rm3", "--no-fuzzy", "--fb-terms 10", "--fusion rrf", "--weight 0.25"]
    BM25Retriever.build(TINY_DOCS, tmp_path / "bm25")
    pasted = CliRunner().invoke(app, ["search", "--index", str(tmp_path / "bm25"), "statins", "--json",
                                      *" ".join(shown[:3]).split()])
    assert pasted.exit_code == 0, pasted.output
    assert len(pasted.stdout.splitlines()) == 1  # one query searched: no flag's value read as a second one


def test_passages_options_kept_ties_and_what_changes_nothing(idf, tmp_path, caplog):
    from semiret.data.chunking import Chunking
    from semiret.evaluation.evaluate import evaluate
    from helpers import write_beir

    passages = retriever_class("bm25").build(TINY_DOCS, tmp_path / "passages", chunking=Chunking(4, 0))
    (setting,) = [s for s in grid_search(passages, TINY_QUERIES, TINY_QRELS, {"rm3": [True]}, depth=10)
                  if not s.options]
    data = write_beir(tmp_path / "data")
    assert setting.score == pytest.approx(evaluate(data, "bm25", index=tmp_path / "passages", depth=10,
                                                   measures=["nDCG@10"])["nDCG@10"])  # documents by best passage
    assert setting.score > 0.5
    dropped = idf.with_options(min_idf=50.0)  # every token dropped: the options it was opened with are kept
    kept = grid_search(dropped, TINY_QUERIES, TINY_QRELS, {"two_phase": ["off", "on"]}, depth=10)
    assert all(s.score == 0.0 for s in kept)
    with pytest.raises(SemiretError, match="not a search option"):
        grid_search(idf, TINY_QUERIES, TINY_QRELS, {"k1": [None]})  # a build option, even as null
    with caplog.at_level("WARNING"):
        grid_search(idf, TINY_QUERIES, TINY_QRELS, {"two_phase": ["off"]}, depth=10)
    assert any("no setting changed" in r.getMessage() for r in caplog.records)
    # ties on the folds chosen on are broken by the grid's order, never by the held-out queries
    base = np.full(10, 0.5)
    better = base.copy()
    better[np.random.default_rng(0).permutation(10)[0]] = 1.0  # better on one query only
    settings = sorted([Setting({}, base.mean(), base, 0), Setting({"x": 1}, better.mean(), better, 1)],
                      key=lambda s: -s.score)
    tuned = cross_validated(settings, 10)
    assert tuned["score"] == pytest.approx(0.5) and tuned["vs_as_opened"]["delta"] == 0.0


def _files(directory) -> dict:
    return {str(path.relative_to(directory)): path.read_bytes() for path in sorted(directory.rglob("*"))
            if path.is_file() and path.name != "write.lock"}


def test_bm25_parameters_are_tuned_on_copies_weighed_again(tmp_path, monkeypatch):
    """k1 and b (Anserini's sweeps) over a BM25 index and a hybrid's BM25 part: each setting scores as an index built
    with them would, searched with the grid's search options; the index itself is left as it was, its copies
    removed."""
    import tempfile

    from semiret.search import BM25Retriever, HybridRetriever

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    bm25 = BM25Retriever.build(TINY_DOCS, tmp_path / "bm25")
    files = _files(tmp_path / "bm25")
    texts = list(TINY_QUERIES.values())
    settings = grid_search(bm25, TINY_QUERIES, TINY_QRELS, {"k1": [0.3, 3.0], "rm3": [False, True], "b": [0.0, 1.0]},
                           depth=10)
    assert len(settings) == 9
    for setting in settings:
        options = dict(setting.options)
        search_options = {name: options.pop(name) for name in ("rm3",) if name in options}
        built = BM25Retriever.build(TINY_DOCS, **options).with_options(**search_options)
        expected = score_run(built.search(texts, k=10).as_run(list(TINY_QUERIES)), TINY_QRELS, ["nDCG@10"])
        assert setting.score == pytest.approx(expected["nDCG@10"]), setting.options
    assert _files(tmp_path / "bm25") == files and not list(scratch.glob("semiret-tune-*"))
    with pytest.raises(SemiretError, match="between 0 and 1"):
        grid_search(bm25, TINY_QUERIES, TINY_QRELS, {"k1": [1.0], "b": [0.5, 2.0]})  # before any search
    hybrid = HybridRetriever.build(TINY_DOCS, tmp_path / "hybrid", neural="idf")
    fused = grid_search(hybrid, TINY_QUERIES, TINY_QRELS, {"k1": [0.3], "weight": [0.2, 0.8]}, depth=10)
    for setting in fused[1:] if not fused[0].options else fused:
        if setting.options:
            built = HybridRetriever.build(TINY_DOCS, neural="idf", k1=0.3, weight=setting.options["weight"])
            run = built.search(texts, k=10).as_run(list(TINY_QUERIES))
            assert setting.score == pytest.approx(score_run(run, TINY_QRELS, ["nDCG@10"])["nDCG@10"])
    assert not list(scratch.glob("semiret-tune-*"))
    with pytest.raises(SemiretError, match="BM25's parameters k1, b"):
        grid_search(bm25, TINY_QUERIES, TINY_QRELS, {"k3": [1.0]})  # the message names what can be tuned


def test_set_bm25_applies_what_a_tuning_chose(tmp_path):
    from semiret.search import BM25Retriever, HybridRetriever, open_retriever

    BM25Retriever.build(TINY_DOCS, tmp_path / "bm25")
    runner = CliRunner()
    shown = runner.invoke(app, ["set-bm25", str(tmp_path / "bm25")])
    assert shown.exit_code == 0 and json.loads(shown.stdout) == {"k1": 1.5, "b": 0.75}
    changed = runner.invoke(app, ["set-bm25", "--index", str(tmp_path / "bm25"), "--k1", "0.9", "--b", "0.4"])
    assert changed.exit_code == 0 and json.loads(changed.stdout) == {"k1": 0.9, "b": 0.4}
    fresh = BM25Retriever.build(TINY_DOCS, k1=0.9, b=0.4)
    ours = open_retriever(tmp_path / "bm25").search("statins cancer risk", k=5)
    assert [(h.id, h.score) for h in ours] == [(h.id, h.score) for h in fresh.search("statins cancer risk", k=5)]
    again = runner.invoke(app, ["set-bm25", str(tmp_path / "bm25"), "--k1", "0.9"])
    assert again.exit_code == 0 and "nothing written" in again.output
    HybridRetriever.build(TINY_DOCS, tmp_path / "hybrid", neural="idf")
    part = runner.invoke(app, ["set-bm25", str(tmp_path / "hybrid"), "--variant", "bm25+"])
    assert part.exit_code == 0 and json.loads(part.stdout) == {"k1": 1.5, "b": 0.75, "variant": "bm25+",
                                                                 "delta": 0.5}
    retriever_class("idf").build(TINY_DOCS, tmp_path / "idf")
    for flags, message in (([str(tmp_path / "idf"), "--k1", "1"], "only a BM25 index"),
                           ([str(tmp_path / "idf")], "only a BM25 index"),  # shown: said, not a TypeError
                           ([str(tmp_path / "bm25"), "--b", "3"], "between 0 and 1")):
        refused = runner.invoke(app, ["set-bm25", *flags])
        assert refused.exit_code != 0 and message in refused.output, refused.output


def test_a_system_s_empty_run_path_is_named(tmp_path):
    refused = CliRunner().invoke(app, ["compare", "--system", "a=x.trec,", "--data", str(tmp_path)])
    assert refused.exit_code != 0 and "empty run path" in refused.output


ORGANS = ("heart", "lungs", "kidney", "liver")
TITLED = [document for n, organ in enumerate(ORGANS) for document in (
    Document(f"r{n}", f"notes from a patient study number {n}", organ.capitalize(), {"keywords": [organ, "clinic"]}),
    Document(f"x{n}", f"{organ} {organ} {organ} seen in a patient", f"Notes {n}"))]
"""Each organ in one document's title (the relevant one) and three times in another's text: the title's weight
decides which ranks first."""
TITLED_QUERIES = {f"q{n}": organ for n, organ in enumerate(ORGANS)}
TITLED_QRELS = {f"q{n}": {f"r{n}": 1} for n in range(len(ORGANS))}


def _per_query(retriever, depth=10) -> np.ndarray:
    run = retriever.search(list(TITLED_QUERIES.values()), k=depth).as_run(list(TITLED_QUERIES))
    return np.array([score_run(run, {q: TITLED_QRELS[q]}, ["nDCG@10"])["nDCG@10"] for q in TITLED_QRELS])


def test_text_fields_are_tuned_on_copies_encoded_again_from_the_stored_documents(tmp_path):
    """BM25F's field weights over a BM25 index (of several segments, one document deleted) and a hybrid's BM25 part:
    each setting scores as an index built with those fields from the live documents would (search options and k1
    combined), the index itself left as it was and its copies removed."""
    from semiret.evaluation.tuning import with_text_fields
    from semiret.search import BM25Retriever, HybridRetriever, open_retriever
    from semiret.text.fields import TextFields

    bm25 = BM25Retriever.build(TITLED[:4], tmp_path / "bm25", text_fields="title,text", metadata_fields=["keywords"])
    bm25.add(TITLED[4:] + [Document("gone", "heart heart heart heart", "Heart")])
    bm25.delete(["gone"])
    assert len(bm25.index.segments) == 2
    files = _files(tmp_path / "bm25")
    grid = {"text_fields": ["title,text", "title^5,text", "title^5,text,keywords^2"], "k1": [0.6, 1.2]}
    settings = grid_search(bm25, TITLED_QUERIES, TITLED_QRELS, grid, depth=10)
    assert len(settings) == 7 and settings[0].options["text_fields"] != "title,text"
    for setting in settings:
        built = BM25Retriever.build(TITLED, **setting.options) if setting.options else bm25
        np.testing.assert_allclose(setting.per_query, _per_query(built), err_msg=str(setting.options))
    assert len({tuple(s.per_query) for s in settings}) > 1  # the fields change the rankings
    assert _files(tmp_path / "bm25") == files and not leftovers(tmp_path)
    assert not [p for p in tmp_path.iterdir() if "semiret-tune" in p.name]
    bm25.index.set_synonyms(["heart, cardiac"])  # a copy keeps the index's synonyms
    with_text_fields(bm25.index, TextFields.parse("title^5,text"), tmp_path / "copy")
    synonyms = BM25Retriever.build(TITLED, text_fields="title^5,text")
    synonyms.index.set_synonyms(["heart, cardiac"])
    assert [(h.id, h.score) for h in open_retriever(tmp_path / "copy").search("cardiac", k=5)] == [
        (h.id, h.score) for h in synonyms.search("cardiac", k=5)] != []
    hybrid = HybridRetriever.build(TITLED, tmp_path / "hybrid", neural="idf", weight=0.9)
    fused = grid_search(hybrid, TITLED_QUERIES, TITLED_QRELS, {"text_fields": ["title^5,text", "text"]}, depth=10)
    for setting in fused:
        built = HybridRetriever.build(TITLED, neural="idf", weight=0.9, **setting.options)
        np.testing.assert_allclose(setting.per_query, _per_query(built), err_msg=str(setting.options))
    assert not [p for p in tmp_path.iterdir() if "semiret-tune" in p.name]


def test_text_fields_tuning_refuses_what_it_cannot_encode_again(tmp_path, idf):
    from semiret.search import BM25Retriever

    bm25 = BM25Retriever.build(TITLED, tmp_path / "bm25")
    unstored = BM25Retriever.build(TITLED, tmp_path / "unstored", store_texts=False)
    for retriever, values, message in (
            (unstored, ["title^2,text"], "keeps no stored documents"),
            (bm25, ["title,text", "title^3,text,abstract"], "no document stored in .* holds 'abstract'"),
            (bm25, ["title,text", "title^1,text"], "lists the fields title,text twice"),
            (bm25, ["title^0.5,text"], "whole numbers"),
            (bm25, [None], "a string like"), (bm25, [{"title": 2, "text": 1}], "a string like"),
            (idf, ["title^2,text"], "not a search option")):
        with pytest.raises(SemiretError, match=message):
            grid_search(retriever, TITLED_QUERIES, TITLED_QRELS, {"text_fields": values}, depth=10)
    assert not [p for p in tmp_path.iterdir() if "semiret-tune" in p.name]


def test_text_fields_on_the_command_line(tmp_path):
    from semiret.search import BM25Retriever

    from helpers import write_beir

    data = write_beir(tmp_path / "data", TITLED, TITLED_QUERIES, TITLED_QRELS, split="train")
    BM25Retriever.build(TITLED, tmp_path / "bm25", text_fields="title,text")
    runner = CliRunner()
    result = runner.invoke(app, ["tune", "--index", str(tmp_path / "bm25"), "--data", str(data), "--grid",
                                 "text_fields=title,text;title^4,text", "--grid", "k1=1.2", "--folds", "2", "--json"])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.stdout)
    assert [s["options"] for s in figures["settings"]][0] == {"text_fields": "title^4,text", "k1": 1.2}
    assert sorted(json.dumps(s["options"]) for s in figures["settings"]) == sorted([
        "{}", '{"text_fields": "title,text", "k1": 1.2}', '{"text_fields": "title^4,text", "k1": 1.2}'])
    assert figures["settings"][0]["score"] > figures["as_opened"] and len(figures["cross_validated"]["chosen"]) == 2
    table = runner.invoke(app, ["tune", "--index", str(tmp_path / "bm25"), "--data", str(data), "--grid",
                                "text_fields=title^4,text;"])
    assert table.exit_code == 0 and "--text-fields title^4,text" in table.stdout, table.output
    refused = runner.invoke(app, ["tune", "--index", str(tmp_path / "bm25"), "--data", str(data), "--grid",
                                  "text_fields=title,text;title^1,text"])
    assert refused.exit_code != 0 and "twice" in refused.output
