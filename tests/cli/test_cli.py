"""The command line, through ``typer.testing.CliRunner`` on ``semiret.cli.app``.

Errors from semiret (bad data, bad index, bad options) exit with code 2 and a one-line message, no traceback.
"""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from semiret import cli, progress
from semiret.cli import app

from helpers import TINY_DOCS, tiny_tokenizer, write_jsonl

runner = CliRunner()


def invoke(*args: str, ok: bool = True):
    result = runner.invoke(app, [str(a) for a in args])
    if ok:
        assert result.exit_code == 0, result.output + repr(result.exception)
    return result


def json_lines(output: str) -> list[dict]:
    return [json.loads(line) for line in output.splitlines() if line.strip()]


@pytest.fixture
def index_dir(tmp_path, beir_dir):
    out = tmp_path / "idx"
    invoke("index", "--data", beir_dir, "--out", out)
    return out


def test_index_builds_and_describes(tmp_path, beir_dir):
    result = invoke("index", "--data", beir_dir, "--out", tmp_path / "idx", "--k1", "1.2", "--b", "0.5")
    described = json.loads(result.stdout)  # machine-readable output on standard output (| jq works)
    assert result.stderr == ""
    assert described["kind"] == "bm25" and described["documents"] == len(TINY_DOCS)
    meta = json.loads((tmp_path / "idx" / "meta.json").read_text())
    assert meta["bm25"] == {"k1": 1.2, "b": 0.5} and meta["retriever"] == "bm25"


def test_index_from_a_corpus_file_with_another_retriever(tmp_path, corpus_jsonl):
    invoke("index", "--data", corpus_jsonl, "--output", tmp_path / "bot", "-r", "bot", "--no-store-texts")
    meta = json.loads((tmp_path / "bot" / "meta.json").read_text())
    assert meta["kind"] == "binary" and meta["store_texts"] is False


def test_search_json(index_dir):
    result = invoke("search", "--index", index_dir, "-k", "2", "--json", "cats and dogs", "statins cancer")
    lines = json_lines(result.stdout)
    assert [line["query"] for line in lines] == ["cats and dogs", "statins cancer"]
    assert len(lines[0]["hits"]) == 2 and {h["id"] for h in lines[0]["hits"]} <= {"d1", "d2", "d5"}
    assert lines[1]["hits"][0]["id"] in {"d3", "d6"}
    assert lines[0]["hits"][0]["score"] >= lines[0]["hits"][1]["score"] > 0


def test_one_word_arguments_are_searched_alone_and_said_so(index_dir, caplog):
    """`search statins and cancer` unquoted is three queries (each argument is one, as the help says): a warning says
    so and how to quote it; arguments holding several words are queries as meant, said nothing of."""
    with caplog.at_level(logging.WARNING):
        lines = json_lines(invoke("search", "--index", index_dir, "--json", "statins", "cancer").stdout)
    assert [line["query"] for line in lines] == ["statins", "cancer"]
    assert "2 queries of one word each" in caplog.text and "'statins cancer'" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        invoke("search", "--index", index_dir, "--json", "cats and dogs", "statins")
    assert "queries of one word" not in caplog.text


def test_limit_is_k_spelled_out(index_dir):
    """``--limit`` (Qdrant's name for it) is ``-k``; not ``--top-k``, which builds SPLADE indexes' documents of their
    k heaviest terms (index, eval)."""
    short, long = (json_lines(invoke("search", "--index", index_dir, "--json", flag, "1", "cats").stdout)[0]["hits"]
                   for flag in ("-k", "--limit"))
    assert len(short) == 1 and short == long


def test_search_table_shows_texts(index_dir):
    result = invoke("search", "--index", index_dir, "mailman")
    assert "d5" in result.stdout and "mailman" in result.stdout
    plain, texts = ({hit["id"]: hit for hit in json_lines(invoke("search", "--index", index_dir, "--json", *flag,
                                                                "mailman").stdout)[0]["hits"]}
                    for flag in ((), ("--with-text",)))
    assert set(plain["d5"]) == {"id", "score"} and "mailman" in texts["d5"]["text"]
    assert set(texts["d5"]) >= {"title", "text"}  # apart, as the service answers with_text


def test_a_narrow_search_table_shortens_the_text_not_the_ids_or_scores(index_dir, monkeypatch):
    monkeypatch.setenv("COLUMNS", "36")
    # the CLI's console read COLUMNS when it was made (at import); a terminal 36 wide from the start is this one
    monkeypatch.setattr(cli, "stdout", Console())
    table = invoke("search", "--index", index_dir, "-k", "3", "cats dogs birds").stdout
    hits = json_lines(invoke("search", "--index", index_dir, "-k", "3", "--json", "cats dogs birds").stdout)[0]["hits"]
    assert all(hit["id"] in table and f"{hit['score']:.3f}" in table for hit in hits)
    assert max(map(len, table.splitlines())) <= 36 and "…" in table


def test_a_long_id_folds_in_a_search_table_and_keeps_its_rank_and_score(tmp_path, monkeypatch):
    """A file's path as its id, 70 characters at 80 columns, took every cell: the rank and score were gone."""
    long_id = "projects/2024-quarterly-planning/engineering/infrastructure-notes/minutes.md"
    write_jsonl(tmp_path / "docs.jsonl", [{"_id": long_id, "text": "statins reduce cholesterol"},
                                          {"_id": "short", "text": "statins and hearts"}])
    invoke("index", "--data", tmp_path / "docs.jsonl", "--out", tmp_path / "idx")
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setattr(cli, "stdout", Console())
    table = invoke("search", "--index", tmp_path / "idx", "statins").stdout
    rows = [line for line in table.splitlines() if line.startswith("│ ")]
    assert [row.split("│")[1].strip() for row in rows][:2] == ["1", "2"] and table.count("0.") >= 2
    assert long_id in "".join(row.split("│")[2].strip() for row in rows)  # folded onto two lines, whole
    assert max(map(len, table.splitlines())) <= 80


def test_a_file_of_queries_is_searched_into_a_trec_run(index_dir, tmp_path):
    from semiret.data import read_trec_run

    queries = tmp_path / "queries.tsv"
    queries.write_text("cats\tcats and dogs\nstatins\tstatins cancer\n")
    result = invoke("search", "--index", index_dir, "--queries", queries, "--run", tmp_path / "run.trec", "-k", "2")
    assert result.stdout == ""  # the run is the output
    run = read_trec_run(tmp_path / "run.trec")
    assert set(run) == {"cats", "statins"} and all(len(hits) == 2 for hits in run.values())
    lines = json_lines(invoke("search", "--index", index_dir, "--queries", queries, "--json", "-k", "2").stdout)
    assert [(line["query_id"], [h["id"] for h in line["hits"]]) for line in lines] == [
        (q, sorted(run[q], key=run[q].get, reverse=True)) for q in ("cats", "statins")]
    invoke("search", "--index", index_dir, "--run", tmp_path / "args.trec", "cats and dogs", "mailman")
    assert set(read_trec_run(tmp_path / "args.trec")) == {"1", "2"}
    refused = invoke("search", "--index", index_dir, "--queries", queries, "cats", ok=False)
    assert refused.exit_code == 2 and "one of the three" in refused.stderr


def test_search_without_known_words(index_dir):
    result = invoke("search", "--index", index_dir, "--json", "zyzzyva")
    assert json_lines(result.stdout) == [{"query": "zyzzyva", "hits": []}]


def test_add_delete_merge_info(tmp_path, index_dir):
    new = write_jsonl(tmp_path / "new.jsonl", [{"_id": "n1", "text": "a quokka in the garden"}])
    result = invoke("add", "--index", index_dir, new)
    assert "added 1 document; 7 live in 2 segments" in result.stderr
    hits = json_lines(invoke("search", "--index", index_dir, "--json", "quokka").stdout)[0]["hits"]
    assert [h["id"] for h in hits] == ["n1"]

    again = invoke("add", "--index", index_dir, new, ok=False)
    assert again.exit_code == 2 and "already in" in again.output and "--replace" in again.output
    assert "added or replaced 1 document; " in invoke("add", "--index", index_dir, new, "--replace").stderr

    result = invoke("delete", "--index", index_dir, "n1", "d1")
    assert "deleted 2 documents" in result.stderr
    assert json_lines(invoke("search", "--index", index_dir, "--json", "quokka").stdout)[0]["hits"] == []

    info = json.loads(invoke("info", index_dir).stdout)
    assert info["documents"] == 5 and info["deleted"] == 3 and info["segments"] == 3 and info["retriever"] == "bm25"
    merged = json.loads(invoke("merge", index_dir).stdout)
    assert merged["documents"] == 5 and merged["deleted"] == 0 and merged["segments"] == 1
    hits = json_lines(invoke("search", "--index", index_dir, "--json", "-k", "10", "cats").stdout)[0]["hits"]
    assert {h["id"] for h in hits} == {"d2"}


def test_a_dash_reads_the_corpus_from_standard_input(tmp_path):
    """``cat docs.jsonl | semiret index --data - ...``, ``... | semiret add - ...``: JSONL, TSV or CSV, gzipped or
    not."""
    import gzip

    jsonl = "".join(json.dumps({"_id": d.id, "text": d.text}) + "\n" for d in TINY_DOCS)
    built = runner.invoke(app, ["index", "--data", "-", "--out", str(tmp_path / "idx")], input=jsonl)
    assert built.exit_code == 0, built.output
    assert json.loads(built.stdout)["documents"] == len(TINY_DOCS)
    for name, given in (("t1", b"t1\ta quokka in the garden\n"),
                        ("g1", gzip.compress(b'{"_id": "g1", "text": "a gzipped quokka"}\n')),
                        ("g2", gzip.compress(b"g2\ta gzipped quokka in a table\n")),
                        ("c1", b'id,text\nc1,"a quokka, quoted"\n'),
                        ("c3", b'c3,"a quokka\tin a quoted field"\n'),
                        ("c2", gzip.compress(b"c2,a gzipped quokka in a spreadsheet\n"))):
        added = runner.invoke(app, ["add", "-", "--index", str(tmp_path / "idx")], input=given)
        assert added.exit_code == 0, added.output
        assert name in {h["id"] for h in json_lines(invoke("search", "--index", tmp_path / "idx", "--json",
                                                           "quokka").stdout)[0]["hits"]}
    bad = runner.invoke(app, ["add", "-", "--index", str(tmp_path / "idx")], input='{"_id": "x1", "text": "y"}\n{oops\n')
    assert bad.exit_code != 0 and "<stdin>:2:" in bad.output and "semiret-stdin" not in bad.output
    repeated = runner.invoke(app, ["add", "-", "--index", str(tmp_path / "idx")], input="r1\ta\nr1\tb\n")
    assert "<stdin>:2: duplicate document id 'r1' (first seen on line 1)" in repeated.output
    assert json.loads(invoke("info", tmp_path / "idx").stdout)["documents"] == len(TINY_DOCS) + 6


def test_warnings_about_standard_input_name_it(tmp_path, caplog):
    """A warning about what standard input held names ``<stdin>``, as its errors do, not the temporary file it was
    spooled to."""
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"_id": "a", "text": "hello"}\n')
    assert runner.invoke(app, ["index", "--data", str(corpus), "--out", str(tmp_path / "idx")]).exit_code == 0
    with caplog.at_level(logging.WARNING):
        added = runner.invoke(app, ["add", "-", "--index", str(tmp_path / "idx")], input="id\ttext\textra\n1\thi\tx\n")
    assert added.exit_code == 0, added.output
    assert "<stdin>: the field 'extra'" in caplog.text and "semiret-stdin" not in caplog.text


def test_eval_json_is_one_object(beir_dir, tmp_path):
    progress.set_enabled(True)  # progress bars must not leak into --json output
    result = invoke("eval", "--data", beir_dir, "--json", "--run", tmp_path / "run.trec")
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1
    figures = json.loads(lines[0])
    assert {"nDCG@10", "R@100", "MRR@10", "index_build_s", "index_size_mb", "latency_ms_median"} <= set(figures)
    assert figures["retriever"] == "bm25" and figures["queries"] == 3 and 0 < figures["nDCG@10"] <= 1
    assert (tmp_path / "run.trec").is_file() and figures["options"] == {}
    expanded = json.loads(invoke("eval", "--data", beir_dir, "--json", "--k1", "1.2", "--rm3", "--fb-docs", "2",
                                 "--index", tmp_path / "idx").stdout)
    assert expanded["options"] == {"k1": 1.2, "rm3": True, "fb_docs": 2}  # what shaped these figures
    again = json.loads(invoke("eval", "--data", beir_dir, "--json", "--k1", "1.5", "--index", tmp_path / "idx").stdout)
    assert again["options"] == {}  # the index was reused as built: k1 did not apply


def test_eval_compares_with_a_baseline_run(beir_dir, tmp_path):
    invoke("eval", "--data", beir_dir, "--json", "--run", tmp_path / "bm25.trec")
    figures = json.loads(invoke("eval", "--data", beir_dir, "-r", "bot", "--json",
                                "--baseline", tmp_path / "bm25.trec").stdout)
    assert figures["baseline_run"] == str(tmp_path / "bm25.trec")
    assert set(figures["vs_baseline"]) == {"nDCG@10", "R@100", "MRR@10"}
    table = invoke("eval", "--data", beir_dir, "-r", "bot", "--baseline", tmp_path / "bm25.trec").stdout
    assert "nDCG@10 vs baseline" in table and "p=" in table


def test_compare_gives_the_paired_figures_eval_gives_for_saved_runs(beir_dir, tmp_path):
    invoke("eval", "--data", beir_dir, "--json", "--run", tmp_path / "bm25.trec")
    evaluated = json.loads(invoke("eval", "--data", beir_dir, "-r", "bot", "--json", "--run", tmp_path / "bot.trec",
                                  "--baseline", tmp_path / "bm25.trec").stdout)
    compared = json.loads(invoke("compare", tmp_path / "bot.trec", "--baseline", tmp_path / "bm25.trec",
                                 "--data", beir_dir, "--json").stdout)
    assert compared["vs_baseline"] == evaluated["vs_baseline"] and compared["queries"] == 3
    same = json.loads(invoke("compare", tmp_path / "bot.trec", "--baseline", tmp_path / "bot.trec", "--data",
                             beir_dir, "--measure", "P@1", "--json").stdout)["vs_baseline"]
    assert set(same) == {"P@1"} and same["P@1"]["delta"] == 0 and same["P@1"]["p_value"] == 1.0
    assert "difference [95% CI] (p)" in invoke("compare", tmp_path / "bot.trec", "--baseline",
                                               tmp_path / "bm25.trec", "--data", beir_dir).stdout
    randomized = json.loads(invoke("compare", tmp_path / "bot.trec", "--baseline", tmp_path / "bm25.trec", "--data",
                                   beir_dir, "--test", "randomization", "--json").stdout)["vs_baseline"]["nDCG@10"]
    assert randomized["test"] == "randomization" and randomized["delta"] == compared["vs_baseline"]["nDCG@10"]["delta"]
    systems = json.loads(invoke("compare", "--system", f"bot={tmp_path / 'bot.trec'}", "--system",
                                f"both=  {tmp_path / 'bot.trec'},{tmp_path / 'bm25.trec'}", "--baseline",
                                tmp_path / "bm25.trec", "--data", beir_dir, "--json").stdout)
    assert list(systems["systems"]) == ["bot", "both"] and systems["correction"] == "holm"
    bot = systems["systems"]["bot"]
    assert bot["run"] == str(tmp_path / "bot.trec") and bot["measures"] == compared["measures"]
    assert {k: v for k, v in bot["vs_baseline"]["nDCG@10"].items() if k not in ("p_value_corrected", "correction",
                                                                              "significant")} == {
        k: v for k, v in compared["vs_baseline"]["nDCG@10"].items() if k != "significant"}
    assert systems["systems"]["both"]["run"] == [str(tmp_path / "bot.trec"), str(tmp_path / "bm25.trec")]
    table = invoke("compare", "--system", f"bot={tmp_path / 'bot.trec'}", "--system", f"bm25={tmp_path / 'bm25.trec'}",
                   "--data", beir_dir).stdout  # no baseline: each system's measures
    assert "bot" in table and "bm25" in table and "difference" not in table
    for flags, message in ((["--system", "bot"], "NAME=RUN"), (["--system", "a=x", "--system", "a=y"], "twice"),
                           ([str(tmp_path / "bot.trec"), "--system", f"a={tmp_path / 'bot.trec'}"], "not both"),
                           (["--system", f"a={tmp_path / 'bot.trec'}", "--per-query", str(tmp_path / "q.tsv")],
                            "--per-query"),
                           (["--system", f"a={tmp_path / 'bot.trec'}", "--correction", "fdr"], "unknown correction"),
                           ([], "give a TREC run")):
        refused = CliRunner().invoke(app, ["compare", *flags, "--data", str(beir_dir)])
        assert refused.exit_code != 0 and message in refused.output, (flags, refused.output)
    for command in (["eval", "--data", str(beir_dir)], ["compare", str(tmp_path / "bot.trec"), "--data", str(beir_dir)]):
        refused = CliRunner().invoke(app, [*command, "--test", "z"])
        assert refused.exit_code == 2 and "unknown significance test 'z'" in refused.output
        alone = CliRunner().invoke(app, [*command, "--test", "wilcoxon"])  # no baseline: nothing to test against
        assert alone.exit_code == 2 and "--test wilcoxon is a test against a baseline" in alone.output
    seeds = json.loads(invoke("compare", tmp_path / "bot.trec", tmp_path / "bm25.trec", "--baseline",
                              tmp_path / "bm25.trec", "--data", beir_dir, "--json").stdout)
    assert seeds["run"] == [str(tmp_path / "bot.trec"), str(tmp_path / "bm25.trec")]
    assert seeds["baseline_run"] == str(tmp_path / "bm25.trec")  # the run of bot and BM25 averaged, against BM25:
    halved = seeds["vs_baseline"]["nDCG@10"]["delta"]             # half bot's difference
    assert halved == pytest.approx(compared["vs_baseline"]["nDCG@10"]["delta"] / 2, abs=1e-5)


def test_compare_without_a_baseline_scores_a_run_and_writes_its_queries_measures(beir_dir, tmp_path):
    evaluated = json.loads(invoke("eval", "--data", beir_dir, "-r", "bot", "--json", "--run", tmp_path / "bot.trec").stdout)
    scored = json.loads(invoke("compare", tmp_path / "bot.trec", "--data", beir_dir, "--json", "--per-query",
                               tmp_path / "q.tsv").stdout)
    assert scored["vs_baseline"] is None and scored["baseline_run"] is None and scored["queries"] == 3  # keys kept
    assert scored["measures"] == {name: pytest.approx(evaluated[name], abs=1e-6) for name in ("nDCG@10", "R@100", "MRR@10")}
    rows = [line.split("\t") for line in (tmp_path / "q.tsv").read_text().splitlines()]
    assert len(rows) == 9 and {row[0] for row in rows} == {"nDCG@10", "R@100", "MRR@10"}
    ndcg = [float(value) for name, _, value in rows if name == "nDCG@10"]
    assert sum(ndcg) / 3 == pytest.approx(evaluated["nDCG@10"], abs=1e-5)
    assert "0." in invoke("compare", tmp_path / "bot.trec", "--data", beir_dir).stdout


def test_eval_and_compare_read_queries_and_judgements_from_files_of_their_own(beir_dir, tmp_path):
    """As Pyserini takes a corpus, topics and qrels apart: a TSV corpus with a header, TSV queries and TREC qrels
    give the figures the BEIR folder holding the same gives; a corpus file without them is told what to add."""
    from semiret.data import iter_corpus, read_qrels, read_queries

    corpus, topics, qrels = tmp_path / "docs.tsv", tmp_path / "topics.tsv", tmp_path / "judged.txt"
    corpus.write_text("docid\ttitle\ttext\n" + "".join(f"{d.id}\t{d.title}\t{d.text}\n" for d in iter_corpus(beir_dir)))
    topics.write_text("".join(f"{q}\t{text}\n" for q, text in read_queries(beir_dir).items()))
    qrels.write_text("".join(f"{q} 0 {d} {g}\n" for q, judged in read_qrels(beir_dir / "qrels" / "test.tsv").items()
                             for d, g in judged.items()))
    folder = json.loads(invoke("eval", "--data", beir_dir, "--json", "--run", tmp_path / "folder.trec").stdout)
    files = json.loads(invoke("eval", "--data", corpus, "--queries", topics, "--qrels", qrels, "--json",
                              "--run", tmp_path / "files.trec").stdout)
    assert (files["queries"], files["nDCG@10"], files["R@100"]) == (folder["queries"], folder["nDCG@10"], folder["R@100"])
    # judgements of a file of their own are no split's: the figures say which file, not the --split that chose nothing
    assert (folder["split"], files["split"], files["qrels"]) == ("test", None, str(qrels))
    labelled = " ".join(invoke("eval", "--data", corpus, "--queries", topics, "--qrels", qrels, "--split",
                               "train").stdout.split())
    assert "judged in judged.txt" in labelled and "train" not in labelled
    assert (tmp_path / "files.trec").read_text() == (tmp_path / "folder.trec").read_text()
    compared = json.loads(invoke("compare", tmp_path / "files.trec", "--baseline", tmp_path / "folder.trec", "--data",
                                 corpus, "--queries", topics, "--qrels", qrels, "--json").stdout)
    assert compared["queries"] == folder["queries"] and compared["vs_baseline"]["nDCG@10"]["delta"] == 0
    alone = invoke("eval", "--data", corpus, ok=False)
    assert alone.exit_code == 2 and "a corpus file, not a BEIR folder: give its queries and judgements too" in alone.output
    qrels.write_text("nobody 0 d1 1\n")
    unjudged = invoke("eval", "--data", beir_dir, "--qrels", qrels, ok=False)
    assert "judged.txt: judges no query that" in unjudged.output


def test_eval_table_and_measures(beir_dir):
    result = invoke("eval", "--data", beir_dir, "-r", "idf", "--measure", "P@1", "--measure", "MRR@10")
    assert "P@1" in result.stdout and "MRR@10" in result.stdout and "nDCG@10" not in result.stdout


# ---------------------------------------------------------------------------- errors
def test_an_index_holding_the_corpus_it_would_be_rebuilt_from_is_kept(index_dir, beir_dir):
    corpus = index_dir / "corpus.jsonl"
    corpus.write_bytes((beir_dir / "corpus.jsonl").read_bytes())
    before = invoke("search", "--index", index_dir, "--json", "cats").stdout
    result = invoke("index", "--data", corpus, "--out", index_dir, "--overwrite", ok=False)
    assert result.exit_code == 2 and "lies inside" in result.stderr and "move the corpus out first" in result.stderr
    assert corpus.is_file() and invoke("search", "--index", index_dir, "--json", "cats").stdout == before


@pytest.mark.parametrize("args,message", [
    (("search", "--index", "{tmp}", "x"), "is not a semiret index"),
    (("info", "{tmp}/missing"), "missing: no such index directory"),
    (("delete", "--index", "{idx}", "no-such-doc"), "cannot delete 'no-such-doc'"),
    (("index", "--data", "{beir}", "--out", "{idx}"), "already exists"),
    (("index", "--data", "{beir}", "--out", "{beir}", "--overwrite"), "is not a semiret index: choose another"),
    (("index", "--data", "{tmp}/nowhere", "--out", "{tmp}/x"), "/nowhere: no such file"),
    (("add", "--index", "{idx}", "nothere.jsonl"), "error: nothere.jsonl: no such file"),
    (("index", "--data", "{beir}", "--out", "{tmp}/x", "-r", "nope"), "unknown retriever 'nope'"),
    (("index", "--data", "{beir}", "--out", "{tmp}/x", "-r", "bot", "--k1", "1.2"), "do not apply to retriever 'bot'"),
    (("search", "--index", "{idx}", "-r", "idf", "x"), "is a 'bm25' index"),
    (("add", "--index", "{idx}", "{tmp}/bad.jsonl"), "bad.jsonl:2: invalid JSON: Expecting value at column 22"),
    (("eval", "--data", "{beir}", "--split", "dev"), "no qrels for split 'dev'"),
    (("eval", "--data", "{beir}", "--split", "empty"), "qrels/empty.tsv: judges no query that"),
    (("search", "--index", "{idx}", "-k", "0", "x"), "k must be at least 1"),
    (("search", "--index", "{idx}", "--threads", "0", "x"), "--threads) must be at least 1, got 0"),
    (("search", "--index", "{idx}", "--run", "{tmp}", "x"), "is a directory: give a file name for the TREC run"),
    (("eval", "--data", "{beir}", "--run", "{tmp}"), "is a directory: give a file name for the TREC run (--run)"),
    (("eval", "--data", "{beir}", "--depth", "0"), "the depth searched (--depth) must be at least 1, got 0"),
    (("train", "sidr", "--data", "{beir}", "--output", "{tmp}/bad.jsonl"), "is a file: give a folder for the run"),
    (("adapt", "--data", "{beir}", "--model", "sidr-scifact", "--output", "{tmp}/bad.jsonl"),
     "is a file: give a folder for the run"),
    (("index", "--data", "{beir}", "--out", "{tmp}/x", "--k1", "-1"), "BM25's k1 (--k1) must be a finite number"),
    (("index", "--data", "{beir}", "--out", "{tmp}/x", "--b", "2"), "BM25's b (--b) must be between 0 and 1, got 2.0"),
    (("search", "--index", "{idx}", "--idf", "corpus", "x"), "idf do not apply when searching with retriever 'bm25'"),
    # a traceback before (a grid's value, a negative length), or exit 0 doing the wrong thing
    (("tune", "--index", "{idx}", "--data", "{beir}", "--split", "test", "--grid", "k1=abc"), "BM25's k1 (--k1) must be a number, got 'abc'"),
    (("index", "--data", "{beir}", "--out", "{tmp}/x", "-r", "idf", "--max-length", "-5"),
     "max_length (--max-length) must be at least 2 tokens, got -5"),
    (("eval", "--data", "{beir}", "--run", "-", "--json"), "--run - and the figures would both write to standard output"),
    (("search", "--index", "{idx}", "--queries", "{tmp}/empty.tsv", "--run", "{tmp}/r.trec"), "empty.tsv: no queries"),
    (("search", "--index", "{idx}", "--queries", "{tmp}/plain.txt"), "(one query a line? Give each its id: id<TAB>text)"),
    (("fuse", "{tmp}/empty.tsv", "{tmp}/empty.tsv"), "empty.tsv is empty: it ranks no document for any query"),
    (("index", "--data", "{beir}", "--out", "{tmp}/bad.jsonl/x"), "bad.jsonl/x cannot be written: {tmp}/bad.jsonl is a "
                                                                     "file, not a directory"),
    (("cache-to-full", "--index", "{idx}", "--out", "{tmp}/full", "--cache", "{tmp}/nowhere"),
     "--cache {tmp}/nowhere: no such embedding cache"),
])
def test_errors_exit_2_with_a_message(tmp_path, beir_dir, index_dir, args, message):
    (tmp_path / "bad.jsonl").write_text('{"_id": "ok", "text": "fine"}\n{"_id": "x", "text": \n')
    (tmp_path / "empty.tsv").write_text("")
    (tmp_path / "plain.txt").write_text("what cats eat\nwhy dogs bark\n")
    message = message.format(tmp=tmp_path)
    (beir_dir / "qrels" / "empty.tsv").write_text("query-id\tcorpus-id\tscore\n")
    args = [a.format(tmp=tmp_path, idx=index_dir, beir=beir_dir) for a in args]
    result = invoke(*args, ok=False)
    assert result.exit_code == 2, result.output
    assert "error:" in result.stderr and message in result.stderr
    assert "Traceback" not in result.output
    assert result.stderr.count("\n") == 1  # one line, however long the paths


def test_a_delete_from_an_index_of_passages_counts_passages(tmp_path, beir_dir):
    invoke("index", "--data", beir_dir, "--out", tmp_path / "passages", "--chunk-words", "3")
    deleted = invoke("delete", "--index", tmp_path / "passages", "d5")
    assert "deleted 3 passages" in deleted.stderr, deleted.stderr  # one document ("documents" before)


def test_eval_takes_passages_of_sentences_and_tokens_and_checks_an_index_found_against_them(tmp_path, beir_dir,
                                                                                           monkeypatch):
    """As index does, eval cuts passages of whole sentences, counted in a named tokenizer's tokens, and ranks the
    documents by their best passage; an index found is searched only if it holds the passages asked for (the
    tokenizer compared where one is named, a relative path as the absolute one it names), else refused, naming both."""
    from semiret.text.wordpiece import tokenizer_fingerprint

    monkeypatch.chdir(tmp_path)
    tokenizer = tiny_tokenizer(tmp_path / "tok")
    flags = ["--chunk-tokens", "6", "--chunk-overlap", "2", "--chunk-sentences"]
    found = ["eval", "--data", beir_dir, "--index", tmp_path / "passages", "--json"]
    figures = json.loads(invoke(*found, *flags, "--chunk-tokenizer", tokenizer, "--run", tmp_path / "run.trec").stdout)
    assert figures["chunking"] == {"tokens": 6, "tokenizer": tokenizer, "tokenizer_fingerprint": tokenizer_fingerprint(
        tokenizer), "overlap": 2, "spaceless": True, "sentences": True}
    assert figures["documents"] > len(TINY_DOCS) and figures["index_build_s"] is not None
    ranked = {line.split()[2] for line in (tmp_path / "run.trec").read_text().splitlines()}
    assert ranked and ranked <= {d.id for d in TINY_DOCS}  # documents, not passages
    for same in (["--chunk-tokenizer", "tok/tokenizer.json"], []):  # no tokenizer named: the index's
        again = json.loads(invoke(*found, *flags, *same).stdout)
        assert again["index_build_s"] is None and again["chunking"] == figures["chunking"]
    held = f"holds passages of whole sentences up to 6 tokens (by {tokenizer}) overlapping by 2, not passages of"
    other = tiny_tokenizer(tmp_path / "other")
    for asked, message in (
            (["--chunk-tokens", "6", "--chunk-overlap", "2"], "6 tokens overlapping by 2: --rebuild it, or leave out "
                                                              "--chunk-tokens"),
            (["--chunk-words", "6", "--chunk-overlap", "2", "--chunk-sentences"], "whole sentences up to 6 words"),
            ([*flags, "--chunk-tokenizer", other], f"whole sentences up to 6 tokens (by {other}) overlapping by 2")):
        refused = invoke(*found, *asked, ok=False)
        assert refused.exit_code == 2 and f"{held} {message}" in refused.stderr, (asked, refused.output)
    mixed = invoke("eval", "--data", beir_dir, *flags, "--chunk-tokenizer", tokenizer, "--diversity", "0.5", ok=False)
    assert mixed.exit_code == 2 and "--diversity with --chunk-tokens" in mixed.stderr

def test_search_tables_show_texts_and_ids_as_they_are(tmp_path, index_dir):
    """Brackets in a query, an id or a text are shown, never read as rich markup (which raised on "[/]")."""
    (tmp_path / "odd.jsonl").write_text('{"_id": "[bold]b1", "text": "quokka [/b] island"}\n')
    invoke("add", "--index", index_dir, tmp_path / "odd.jsonl")
    shown = invoke("search", "--index", index_dir, "quokka [/]").stdout
    assert "quokka [/]" in shown and "[bold]b1" in shown and "quokka [/b] island" in shown


def test_trec_runs_go_to_standard_output_through_links_and_refuse_ids_with_spaces(tmp_path, index_dir):
    to_stdout = invoke("search", "--index", index_dir, "--run", "-", "cats").stdout
    assert to_stdout.startswith("1 Q0 ") and to_stdout.split("\n")[0].endswith(" bm25")
    assert all(line.startswith("1 Q0 ") for line in to_stdout.splitlines())  # the run alone: no table after it
    mixed = invoke("search", "--index", index_dir, "--run", "-", "--json", "cats", ok=False)
    assert mixed.exit_code == 2 and "--run - and --json would both write to standard output" in mixed.stderr
    target = tmp_path / "target.trec"
    target.write_text("old\n")
    (tmp_path / "link.trec").symlink_to(target)
    invoke("search", "--index", index_dir, "--run", tmp_path / "link.trec", "cats")
    assert (tmp_path / "link.trec").is_symlink() and target.read_text().startswith("1 Q0 ")
    (tmp_path / "spaced.jsonl").write_text('{"_id": "has space", "text": "wombats burrow"}\n')
    invoke("add", "--index", index_dir, tmp_path / "spaced.jsonl")
    refused = invoke("search", "--index", index_dir, "--run", tmp_path / "w.trec", "wombats", ok=False)
    assert refused.exit_code == 2 and "document id 'has space' holds whitespace" in refused.stderr
    assert not (tmp_path / "w.trec").exists()
    assert "has space" in invoke("search", "--index", index_dir, "--json", "wombats").stdout


def test_training_never_writes_into_the_packaged_models(beir_dir):
    from semiret.data.packaged import PACKAGED_CHECKPOINTS

    target = PACKAGED_CHECKPOINTS / "sidr-scifact" / "retrained"
    result = invoke("train", "sidr", "--data", beir_dir, "--output", target, ok=False)
    assert result.exit_code == 2 and "would write into" in result.stderr and not target.exists()


def test_failed_add_changes_nothing(tmp_path, index_dir):
    (tmp_path / "bad.jsonl").write_text('{"_id": "n1", "text": "quokka"}\n{"oops\n')
    invoke("add", "--index", index_dir, tmp_path / "bad.jsonl", ok=False)
    info = json.loads(invoke("info", index_dir).stdout)
    assert info["documents"] == len(TINY_DOCS) and info["segments"] == 1


def test_a_full_disk_is_one_line_and_leaves_the_index_as_it_was(tmp_path, index_dir, monkeypatch):
    """A full disk during an add printed a 59-line traceback (the index itself stayed intact)."""
    import errno

    from semiret.indexes import segments

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "seg-000001"))

    (tmp_path / "new.jsonl").write_text('{"_id": "n1", "text": "quokka"}\n')
    monkeypatch.setattr(segments.SegmentedIndex, "_append_segment", full)
    result = invoke("add", "--index", index_dir, tmp_path / "new.jsonl", ok=False)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.stderr.strip() == f"error: No space left on device: {tmp_path / 'seg-000001'}"
    monkeypatch.undo()
    assert json.loads(invoke("info", index_dir).stdout)["documents"] == len(TINY_DOCS)


def test_usage_errors_are_click_errors(index_dir):
    result = invoke("search", "--index", index_dir, ok=False)  # no query
    assert result.exit_code == 2 and "give queries as arguments, a file of them with --queries, or a file of" in result.stderr
    result = invoke("search", index_dir, ok=False)  # no --index
    assert result.exit_code == 2 and "Missing option" in result.output
    assert invoke("--help").stdout.count("search") >= 1


def test_demo_compares_systems_in_one_table_json_and_plot(tmp_path, beir_dir, monkeypatch):
    from semiret import demo

    asked = []
    monkeypatch.setattr(demo, "demo_systems", lambda *flags: asked.append(flags) or [
        ("BM25", "bm25", {}), ("bag-of-tokens overlap", "bot", {}), ("IDF (corpus)", "idf", {})])
    shown = invoke("demo", "--data", beir_dir, "--out", tmp_path / "cli-out", "--dense").stdout
    assert asked == [(False, True)]  # --dense reaches the list of systems
    assert "One query, explained (IDF (corpus))" in " ".join(shown.split())  # the last row that sums term weights
    example = demo.explain_example(Console(file=io.StringIO()), beir_dir, [
        ("BM25", "bm25", tmp_path / "cli-out" / "indexes" / f"{beir_dir.name}-bm25", {})])
    assert example["system"] == "BM25" and example["terms"] and example["hit"]
    assert sum(t["contribution"] for t in example["terms"]) > 0 and "**" in example["passage"]
    rows = demo.run_demo(str(beir_dir), tmp_path / "out")
    assert [r["system"] for r in rows] == ["BM25", "bag-of-tokens overlap", "IDF (corpus)"]
    assert rows[2]["index_build_s"] is None  # idf reuses the bag-of-tokens index built for bot
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert saved == rows and all(0 <= r["nDCG@10"] <= 1 for r in saved)
    assert all(r["flops"] > 0 for r in saved)  # the table's FLOPS column, for every inverted index
    assert (tmp_path / "out" / "quality_vs_latency.png").stat().st_size > 1000


def test_demo_assembles_its_hybrid_around_an_index_built_above(tmp_path, beir_dir, monkeypatch, tiny_bert):
    from semiret import demo

    model = {"model": str(tiny_bert)}
    monkeypatch.setattr(demo, "demo_systems", lambda *flags: [
        ("inference-free", "inference-free", model),
        ("hybrid: BM25 + inference-free", "hybrid", {**model, demo.AROUND: "inference-free"})])
    rows = demo.run_demo(str(beir_dir), tmp_path / "out")
    assert rows[1]["retriever"] == "hybrid" and 0 < rows[1]["nDCG@10"] <= 1
    assert rows[1]["index_build_s"] > 0  # BM25 built beside a copy of the inference-free index, nothing encoded again
    names = sorted(path.name for path in (tmp_path / "out" / "indexes").iterdir())
    assert names == [f"{beir_dir.name}-{kind}-{tiny_bert.name}" for kind in ("hybrid", "impact")]  # evaluated there
    hybrid = tmp_path / "out" / "indexes" / names[0]
    assert json.loads((hybrid / "neural" / "meta.json").read_text())["retriever"] == "inference-free"
    again = demo.run_demo(str(beir_dir), tmp_path / "out")
    assert again[1]["index_build_s"] is None and again[1]["nDCG@10"] == rows[1]["nDCG@10"]  # reused


def test_demo_lists_packaged_systems_only_when_installed(monkeypatch, tmp_path):
    from semiret import demo
    from semiret.data import packaged

    monkeypatch.setattr(packaged, "PACKAGED_CHECKPOINTS", tmp_path)
    names = [r for _, r, _ in demo.demo_systems(baselines=False)]
    assert "sidr-beta" not in names and "inference-free" not in names and "splade" not in names
    assert {"splade", "dense", "inference-free"} <= {r for _, r, _ in demo.demo_systems(baselines=True)}
    (tmp_path / "sidr-scifact").mkdir()
    names = [r for _, r, _ in demo.demo_systems(baselines=False)]
    assert {"sidr-beta", "sidr-beta-rerank", "sidr-full"} <= set(names) and "inference-free" not in names
    assert "dense" not in names
    (tmp_path / "hce-scifact").mkdir()
    assert ("dense", {"model": "hce-scifact"}) in [(r, o) for _, r, o in demo.demo_systems(dense=True)]
    assert "dense" not in [r for _, r, _ in demo.demo_systems()]  # the MiniLM-sized encoders only when asked


def test_a_build_ended_by_sigterm_leaves_no_staging_folder(tmp_path):
    """SIGTERM ends `semiret index` as Ctrl-C does: the index being written is removed, nothing half-built stays."""
    import signal
    import subprocess
    import sys
    import time

    from helpers import leftovers

    words = "cat dog bird fish statin cancer heart garden morning mail letter tumour mice risk".split()
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [
        {"_id": f"d{i}", "text": " ".join(words[(i * 7 + j) % len(words)] + str(j % 97) for j in range(60))}
        for i in range(60_000)])
    out = tmp_path / "idx"
    process = subprocess.Popen([sys.executable, "-c", "from semiret.cli import main; main()", "index", "--data",
                                str(corpus), "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not leftovers(tmp_path) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)  # until the staging folder exists
    assert process.poll() is None, "the build ended before it could be stopped"
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 128 + signal.SIGTERM
    assert leftovers(tmp_path) == [] and not out.exists()


def test_standard_output_carries_only_the_result(beir_dir, tmp_path):
    """Progress bars and messages go to standard error: `semiret index` and `eval --json` print nothing but JSON."""
    import subprocess
    import sys

    command = [sys.executable, "-c", "from semiret.cli import main; main()"]
    for arguments in (["index", "--data", str(beir_dir), "--out", str(tmp_path / "idx")],
                      ["eval", "--data", str(beir_dir), "--index", str(tmp_path / "idx"), "--json"]):
        done = subprocess.run(command + arguments, capture_output=True, text=True, check=True)
        assert done.stdout.startswith("{") and json.loads(done.stdout)


def test_compare_names_a_run_file_of_other_queries(beir_dir, tmp_path):
    invoke("eval", "--data", beir_dir, "--json", "--run", tmp_path / "bm25.trec")
    (tmp_path / "other.trec").write_text("zzz Q0 d1 1 1.0 x\n", encoding="utf-8")
    result = invoke("compare", tmp_path / "bm25.trec", tmp_path / "other.trec", "--baseline", tmp_path / "bm25.trec",
                    "--data", beir_dir, ok=False)
    assert result.exit_code == 2 and f"run {tmp_path / 'other.trec'} has none of the judged queries" in result.output
    result = invoke("compare", tmp_path / "bm25.trec", "--baseline", tmp_path / "bm25.trec", "--data", beir_dir,
                    "--measure", "bogus", ok=False)
    assert result.exit_code == 2 and "measure 'bogus'" in result.output


def test_compare_warns_of_a_run_of_some_of_the_judged_queries(beir_dir, tmp_path, caplog):
    """Queries a run lacks count as 0: compared as it is, but with a warning saying how many, not silently."""
    invoke("eval", "--data", beir_dir, "--json", "--run", tmp_path / "bm25.trec")
    lines = (tmp_path / "bm25.trec").read_text(encoding="utf-8").splitlines()
    first = lines[0].split()[0]
    (tmp_path / "some.trec").write_text("\n".join(l for l in lines if l.split()[0] == first) + "\n", encoding="utf-8")
    from semiret.data.collection import Collection

    judged = len(Collection(beir_dir).qrels("test"))
    assert judged > 1
    with caplog.at_level("WARNING"):
        result = invoke("compare", tmp_path / "some.trec", "--baseline", tmp_path / "bm25.trec", "--data", beir_dir,
                        "--json")
    assert json.loads(result.stdout)["queries"] == judged
    assert f"run {tmp_path / 'some.trec'} ranks documents for 1 of the {judged} judged queries" in caplog.text
    assert "bm25.trec ranks" not in caplog.text


def test_compare_scores_every_judged_query_from_the_judgements_and_runs_alone(beir_dir, tmp_path, caplog):
    """As trec_eval, ir_measures and ranx score a saved run: every query the judgements judge, with a text or none
    (compare reads no query), a query the run leaves out as 0 (trec_eval -c); no corpus needed: --qrels FILE without
    --data, or beside any --data."""
    from semiret.data import read_qrels, read_trec_run
    from semiret.evaluation.metrics import score_run

    invoke("eval", "--data", beir_dir, "--json", "--run", tmp_path / "bm25.trec")
    queries = beir_dir / "queries.jsonl"
    lines = queries.read_text(encoding="utf-8").splitlines()
    assert '"q3"' in lines[-1]
    queries.write_text("\n".join(lines[:-1]) + "\n", encoding="utf-8")  # q3 judged and ranked, its text gone
    qrels = beir_dir / "qrels" / "test.tsv"
    expected = {name: round(value, 6) for name, value in
                score_run(read_trec_run(tmp_path / "bm25.trec"), read_qrels(qrels)).items()}
    folder = json.loads(invoke("compare", tmp_path / "bm25.trec", "--data", beir_dir, "--json").stdout)
    assert folder["queries"] == 3 and folder["measures"] == expected
    assert (folder["split"], folder["qrels"]) == ("test", str(qrels))
    alone = json.loads(invoke("compare", tmp_path / "bm25.trec", "--qrels", qrels, "--json").stdout)
    assert alone["queries"] == 3 and alone["measures"] == expected and alone["split"] is None
    (tmp_path / "empty").mkdir()
    with caplog.at_level("WARNING"):
        apart = json.loads(invoke("compare", tmp_path / "bm25.trec", "--qrels", qrels, "--queries", queries, "--data",
                                  tmp_path / "empty", "--json").stdout)
    assert apart["measures"] == expected and "--queries is not read" in caplog.text
    systems = json.loads(invoke("compare", "--system", f"bm25={tmp_path / 'bm25.trec'}", "--qrels", qrels,
                                "--json").stdout)
    assert systems["queries"] == 3 and systems["systems"]["bm25"]["measures"] == expected
    refused = invoke("compare", tmp_path / "bm25.trec", ok=False)
    assert refused.exit_code == 2 and "give the judgements: --qrels FILE, or --data" in refused.output


def test_several_runs_as_arguments_are_averaged_as_seeds_with_a_warning(beir_dir, tmp_path, caplog):
    """`compare a.trec b.trec` averages them query by query (one system's seeds, as documented), saying so and how
    to compare two systems instead, in the warning and the table's title."""
    invoke("eval", "--data", beir_dir, "--json", "--run", tmp_path / "bm25.trec")
    invoke("eval", "--data", beir_dir, "-r", "bot", "--json", "--run", tmp_path / "bot.trec")
    with caplog.at_level("WARNING"):
        table = invoke("compare", tmp_path / "bm25.trec", tmp_path / "bot.trec", "--data", beir_dir).stdout
    assert (f"averaging 2 runs as seeds of one system ({tmp_path / 'bm25.trec'}, {tmp_path / 'bot.trec'}); give "
            "--system NAME=RUN for each system to compare them") in caplog.text
    assert "(2 seeds averaged)" in " ".join(table.split())
    caplog.clear()
    with caplog.at_level("WARNING"):
        invoke("compare", tmp_path / "bm25.trec", "--baseline", tmp_path / "bot.trec", "--data", beir_dir)
    assert "averaging" not in caplog.text


def test_commands_refuse_to_write_a_run_over_one_they_read(beir_dir, tmp_path, index_dir):
    """`fuse a b -o a` (or rerank, eval --run over its --baseline, compare --per-query over a run) would replace an
    input with the output: refused before any work, however the path is spelled, the input left as it was."""
    invoke("eval", "--data", beir_dir, "--json", "--run", tmp_path / "bm25.trec")
    invoke("eval", "--data", beir_dir, "-r", "bot", "--json", "--run", tmp_path / "bot.trec")
    run, other = tmp_path / "bm25.trec", tmp_path / "bot.trec"
    before = run.read_text(encoding="utf-8")
    (tmp_path / "link.trec").symlink_to(run)
    (tmp_path / "sub").mkdir()
    for command in (["fuse", run, other, "-o", run], ["fuse", run, other, "-o", tmp_path / "sub" / ".." / "bm25.trec"],
                    ["fuse", tmp_path / "link.trec", other, "-o", run],
                    ["rerank", run, "--index", index_dir, "--data", beir_dir, "-o", run],
                    ["eval", "--data", beir_dir, "-r", "bot", "--baseline", run, "--run", run],
                    ["compare", other, "--baseline", run, "--data", beir_dir, "--per-query", run],
                    ["search", "--index", index_dir, "--queries", run, "--run", run],
                    ["encode", run, "--model", "minilm", "-o", run]):  # (refused before a model is loaded)
        refused = invoke(*command, ok=False)
        assert refused.exit_code == 2 and "is also an input of this command" in refused.output, (command, refused.output)
        assert run.read_text(encoding="utf-8") == before
    invoke("fuse", run, other, "-o", tmp_path / "fused.trec")  # another file: written


def test_eval_json_names_the_model_of_an_index_it_reuses_and_warns_of_its_training_queries(beir_dir, tmp_path,
                                                                                           tiny_bert, caplog):
    """An index reused as built records no option (`options` is {}), so `model` and `model_fingerprint` say which
    model was evaluated (its meta.json's; null for BM25); a model whose training.json records the queries scored is
    warned of."""
    import shutil

    model = shutil.copytree(tiny_bert, tmp_path / "model")
    invoke("index", "--data", beir_dir, "--out", tmp_path / "dense", "-r", "dense", "--model", model)
    analyzer = json.loads((tmp_path / "dense" / "meta.json").read_text())["analyzer"]
    with caplog.at_level("WARNING"):
        figures = json.loads(invoke("eval", "--data", beir_dir, "--index", tmp_path / "dense", "--json").stdout)
    assert figures["options"] == {} and figures["retriever"] == "dense"
    assert figures["model"] == analyzer["model"] and Path(figures["model"]) == model.resolve()
    assert figures["model_fingerprint"] == analyzer["weights"] and len(analyzer["weights"]) == 16
    assert "trained on these queries" not in caplog.text
    bm25 = json.loads(invoke("eval", "--data", beir_dir, "--json").stdout)
    assert bm25["model"] is None and bm25["model_fingerprint"] is None  # the keys, always there
    for split, warned in (("test", True), ("train", False)):
        (model / "training.json").write_text(json.dumps({"config": {"data": str(beir_dir), "split": split}}))
        caplog.clear()
        with caplog.at_level("WARNING"):
            invoke("eval", "--data", beir_dir, "--index", tmp_path / "dense", "--json", "--split", "test")
        assert (f"{analyzer['model']} was trained on these queries ({beir_dir}, split 'test': its training.json)"
                in caplog.text) is warned, caplog.text


def test_index_and_add_cap_the_threads_a_model_encodes_with(beir_dir, tmp_path, tiny_bert, monkeypatch):
    import torch

    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        invoke("index", "--data", beir_dir, "--out", tmp_path / "idx", "-r", "dense", "--model", tiny_bert,
               "--threads", "1")
        assert torch.get_num_threads() == 1
        torch.set_num_threads(2)
        new = tmp_path / "new.jsonl"
        new.write_text('{"_id": "n1", "text": "a new text"}\n', encoding="utf-8")
        invoke("add", new, "--index", tmp_path / "idx", "--threads", "1")
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(previous)
    result = invoke("index", "--data", beir_dir, "--out", tmp_path / "other", "--threads", "0", ok=False)
    assert result.exit_code == 2 and "--threads must be at least 1, got 0" in result.output
    assert not (tmp_path / "other").exists()


def test_device_names_where_models_encode_and_a_missing_one_stops_before_any_index(beir_dir, tmp_path, tiny_bert,
                                                                                      monkeypatch):
    import torch

    from semiret.models.devices import ENCODING_DEVICE_VARIABLE

    monkeypatch.setenv(ENCODING_DEVICE_VARIABLE, "cpu")  # restored after the test: the commands set it
    invoke("index", "--data", beir_dir, "--out", tmp_path / "idx", "-r", "dense", "--model", tiny_bert,
           "--device", "cpu")
    result = invoke("search", "--index", tmp_path / "idx", "a query", "--device", "cpu", "--json")
    assert len(json.loads(result.stdout.splitlines()[0])["hits"]) > 0
    for device, message in (("gpu", "unknown device 'gpu'"), ("cuda:7", "device 'cuda:7' is not available")):
        if device.startswith("cuda") and torch.cuda.device_count() > 7:
            continue
        result = invoke("index", "--data", beir_dir, "--out", tmp_path / "other", "-r", "dense", "--model",
                        tiny_bert, "--device", device, ok=False)
        assert result.exit_code == 2 and message in result.output
        assert not (tmp_path / "other").exists()
    new = tmp_path / "new.jsonl"
    new.write_text('{"_id": "n1", "text": "a new text"}\n', encoding="utf-8")
    before = sorted(p.name for p in (tmp_path / "idx").rglob("*"))
    result = invoke("add", new, "--index", tmp_path / "idx", "--device", "gpu", ok=False)
    assert result.exit_code == 2 and sorted(p.name for p in (tmp_path / "idx").rglob("*")) == before


def test_serve_refuses_a_retriever_that_cannot_search_its_index_before_it_says_serving(index_dir, monkeypatch):
    import uvicorn

    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: pytest.fail("the server started"))
    result = invoke("serve", "--index", index_dir, "--retriever", "idx=bot", "--workers", "2", ok=False)
    assert result.exit_code == 2 and "is a 'bm25' index built for bm25; bot needs one of" in result.output
    assert "serving" not in result.output


def test_commands_whose_index_comes_first_take_it_as_index_too(tmp_path):
    """count, facet, export, backup, synonyms and info take the index as their first argument or as --index DIR,
    as search, add and the others do; neither, or both, is a clear error."""
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"_id": "a", "text": "statins heart", "metadata": {"s": "web"}}\n'
                      '{"_id": "b", "text": "cancer", "metadata": {"s": "x"}}\n')
    index = str(tmp_path / "i")
    assert runner.invoke(app, ["index", "--data", str(corpus), "--out", index, "--metadata-fields", "s"]).exit_code == 0
    for positional, named in ((["count", index], ["count", "--index", index]),
                              (["facet", index, "s"], ["facet", "--index", index, "s"]),
                              (["export", index], ["export", "--index", index]),
                              (["synonyms", index], ["synonyms", "--index", index]),
                              (["info", index], ["info", "--index", index])):
        first, second = runner.invoke(app, positional), runner.invoke(app, named)
        assert first.exit_code == 0 == second.exit_code, (named, second.output)
        assert first.stdout == second.stdout
    copied = runner.invoke(app, ["backup", "--index", index, str(tmp_path / "copy")])
    assert copied.exit_code == 0, copied.output
    assert runner.invoke(app, ["count", str(tmp_path / "copy")]).stdout.strip() == "2"
    for wrong in (["count"], ["count", index, "--index", index], ["facet", "--index", index], ["backup", index]):
        refused = runner.invoke(app, wrong)
        assert refused.exit_code == 2 and "each once (got" in refused.output, wrong


def test_add_reads_files_without_the_columns_an_index_records_and_refuses_rows_cut_short(tmp_path, caplog):
    """An index built with --metadata-fields refused every later TSV without a header row (an option the add was
    never given named in the error); a CSV row with no text cell was stored as an empty document; --force without
    --sync was accepted and did nothing."""
    (tmp_path / "c.csv").write_text("id,text,year\na,statins heart,2020\nb,cancer,2021\n")
    index = tmp_path / "i"
    invoke("index", "--data", tmp_path / "c.csv", "--out", index, "--metadata-fields", "year")
    (tmp_path / "plain.tsv").write_text("n1\tnew document about statins\n")
    with caplog.at_level(logging.WARNING):
        invoke("add", "--index", index, tmp_path / "plain.tsv")
    assert "no document has the field 'year'" in caplog.text  # read without it, warned
    assert json.loads(invoke("get", "--index", index, "n1").stdout)["text"] == "new document about statins"
    asked = invoke("add", "--index", index, tmp_path / "plain.tsv", "--metadata-fields", "year", ok=False)
    assert asked.exit_code == 2 and "first row names no id column" in asked.output  # asked for: still refused
    (tmp_path / "short.csv").write_text("id,title,text\n1,First,statins lower cholesterol\n2,Second\n3\n")
    cut = invoke("index", "--data", tmp_path / "short.csv", "--out", tmp_path / "short", ok=False)
    assert cut.exit_code == 2 and "short.csv:4: 1 of the 3 columns" in cut.output and "no text or title" in cut.output
    forced = invoke("add", "--index", index, tmp_path / "plain.tsv", "--replace", "--force", ok=False)
    assert forced.exit_code == 2 and "--force goes with --sync" in forced.output
    assert invoke("count", index).stdout.strip() == "3"


def test_get_shows_stored_documents_by_id(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"_id": "a", "text": "statins heart", "metadata": {"s": "web"}}\n'
                      '{"_id": "b", "title": "T", "text": "cancer"}\n')
    index = str(tmp_path / "i")
    assert runner.invoke(app, ["index", "--data", str(corpus), "--out", index, "--metadata-fields", "s"]).exit_code == 0
    shown = runner.invoke(app, ["get", "--index", index, "b", "a"])
    assert shown.exit_code == 0, shown.output
    assert [json.loads(line) for line in shown.stdout.splitlines()] == [
        {"_id": "b", "title": "T", "text": "cancer"},
        {"_id": "a", "title": "", "text": "statins heart", "metadata": {"s": "web"}}]  # as asked, as exported
    missing = runner.invoke(app, ["get", "--index", index, "a", "zz"])
    assert missing.exit_code != 0 and "no document 'zz'" in missing.output
    assert json.loads(missing.stdout.splitlines()[0])["_id"] == "a"  # the others shown first
    bare = str(tmp_path / "bare")
    assert runner.invoke(app, ["index", "--data", str(corpus), "--out", bare, "--no-store-texts"]).exit_code == 0
    refused = runner.invoke(app, ["get", "--index", bare, "a"])
    assert refused.exit_code != 0 and "keeps no stored documents" in refused.output


def test_vectors_brought_by_a_corpus_searched_and_evaluated_by_query_vectors(tmp_path):
    import numpy as np

    rng = np.random.default_rng(5)
    vectors = rng.normal(size=(12, 4))
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [{"_id": f"d{i}", "text": f"document {i}", "kind": i % 2,
                                                      "vector": v.tolist()} for i, v in enumerate(vectors)])
    queries = write_jsonl(tmp_path / "vectors.jsonl", [{"_id": f"q{i}", "vector": (vectors[i] * 2).tolist()}
                                                        for i in range(3)])
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(3)))
    invoke("index", "-r", "vectors", "--data", corpus, "--out", tmp_path / "v", "--metadata-fields", "kind",
           "--ann", "hnsw")
    lines = json_lines(invoke("search", "--index", tmp_path / "v", "--query-vectors", queries, "-k", "1",
                              "--json").stdout)
    assert [(line["query_id"], line["hits"][0]["id"]) for line in lines] == [("q0", "d0"), ("q1", "d1"), ("q2", "d2")]
    filtered = json_lines(invoke("search", "--index", tmp_path / "v", "--query-vectors", queries, "-k", "1",
                                 "--filter", "kind=1", "--json").stdout)
    assert filtered[0]["hits"][0]["id"] != "d0" and filtered[1]["hits"][0]["id"] == "d1"
    figures = json.loads(invoke("eval", "--data", corpus, "--query-vectors", queries, "--qrels", qrels, "-r",
                                "vectors", "--json").stdout)
    assert figures["retriever"] == "vectors" and figures["queries"] == 3 and figures["nDCG@10"] == pytest.approx(1.0)
    refused = invoke("search", "--index", tmp_path / "v", "a text", ok=False)
    assert refused.exit_code != 0 and "no model to embed query texts" in refused.output
    both = invoke("search", "--index", tmp_path / "v", "a text", "--query-vectors", queries, ok=False)
    assert "one of the three" in both.output
    (tmp_path / "bad.jsonl").write_text('{"_id": "q", "vector": [1, 2, 3, 4]}\n{"_id": "r", "vector": [1]}\n')
    bad = invoke("search", "--index", tmp_path / "v", "--query-vectors", tmp_path / "bad.jsonl", ok=False)
    assert "bad.jsonl:2" in bad.output and "1-dimensional" in bad.output
    invoke("export", tmp_path / "v", "-o", tmp_path / "exported.jsonl")  # the vectors go too: it indexes again
    exported = [json.loads(line) for line in (tmp_path / "exported.jsonl").read_text().splitlines()]
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    np.testing.assert_allclose([record["vector"] for record in exported], unit, rtol=1e-5)
    invoke("index", "-r", "vectors", "--data", tmp_path / "exported.jsonl", "--out", tmp_path / "again")


def test_index_and_add_read_the_id_and_text_fields_named_and_record_them(tmp_path):
    """A corpus whose text is under another key was refused with no way to name it: ``--id-field`` and
    ``--text-field`` name the fields, the index records them as it records ``--metadata-fields``, and a later ``add``
    reads them (or names of its own, for that file alone)."""
    from semiret.data import Document
    from semiret.search import open_retriever

    corpus = write_jsonl(tmp_path / "tickets.jsonl", [
        {"ticket": "T-1", "summary": "login fails on safari", "priority": "high"},
        {"ticket": "T-2", "summary": "password reset never arrives", "priority": "low"}])
    refused = invoke("index", "--data", corpus, "--out", tmp_path / "refused", ok=False)
    assert refused.exit_code != 0 and "missing id field" in refused.output and "--id-field" in refused.output
    index = tmp_path / "tickets"
    invoke("index", "--data", corpus, "--out", index, "--id-field", "ticket", "--text-field", "summary",
           "--metadata-fields", "priority")
    info = json.loads(invoke("info", index).output)
    assert (info["id_field"], info["text_field"], info["metadata_fields"]) == ("ticket", "summary", ["priority"])
    more = write_jsonl(tmp_path / "more.jsonl", [{"ticket": "T-3", "summary": "printer jam", "priority": "low"}])
    invoke("add", more, "--index", index)
    assert open_retriever(index).get_document("T-3") == Document("T-3", "printer jam")
    assert open_retriever(index).get_document("T-3").metadata == {"priority": "low"}
    (tmp_path / "other.csv").write_text("key,content,priority\nT-4,sync stalls,high\n", encoding="utf-8")
    invoke("add", tmp_path / "other.csv", "--index", index, "--id-field", "key", "--text-field", "content")
    assert open_retriever(index).get_document("T-4").metadata == {"priority": "high"}
    assert json.loads(invoke("info", index).output)["text_field"] == "summary"  # the record stays the build's
    hits = json_lines(invoke("search", "jam", "--index", index, "--json").output)
    assert [hit["id"] for hit in hits[0]["hits"]] == ["T-3"]


def test_add_reads_a_header_of_the_usual_columns_and_what_export_wrote_with_the_recorded_fields(tmp_path):
    """The review's reproductions: on an index read with ``--id-field``/``--text-field``, ``id<TAB>text`` above the
    documents added was stored as a document ``{"_id": "id"}``, and what ``export`` wrote of the index was refused
    (``missing id field 'doc_no'``). The header is one, and BEIR's names are read where the named ones are missing."""
    (tmp_path / "a.tsv").write_text("DocNo\tBody\nalpha\tfirst doc here\n", encoding="utf-8")
    (tmp_path / "b.tsv").write_text("id\ttext\nbeta\tsecond doc here\n", encoding="utf-8")
    invoke("index", "--data", tmp_path / "a.tsv", "--out", tmp_path / "tsvi", "--id-field", "DocNo", "--text-field",
           "Body")
    assert "added 1 document;" in invoke("add", tmp_path / "b.tsv", "--index", tmp_path / "tsvi").output
    exported = tmp_path / "exported.jsonl"
    invoke("export", tmp_path / "tsvi", "-o", exported)
    assert [record["_id"] for record in map(json.loads, exported.read_text().splitlines())] == ["alpha", "beta"]
    assert "added or replaced 2 documents" in invoke("add", exported, "--index", tmp_path / "tsvi", "--replace").output


def test_a_headerless_corpus_of_word_ids_is_indexed_and_synced_a_row_like_a_header_said_once(tmp_path, caplog):
    """``intro<TAB>Welcome to our site`` above ``page2<TAB>...`` (ids that are words) was refused by the header
    heuristic, by ``index`` and by ``add --sync`` of a corpus indexed before: ``index`` says it once, naming the file
    and line and the id the row was indexed under, and an add to the index (its record) says nothing."""
    slugs = tmp_path / "slug.tsv"
    slugs.write_text("intro\tWelcome to our site\npage2\tAbout the team and more words here\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        invoke("index", "--data", slugs, "--out", tmp_path / "sl")
    said = [record.getMessage() for record in caplog.records if "reads as column names" in record.getMessage()]
    assert len(said) == 1 and said[0].startswith(f"{slugs}:1: ") and "document of id 'intro'" in said[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        synced = invoke("add", slugs, "--index", tmp_path / "sl", "--sync")
    assert "0 added, 0 replaced, 2 unchanged, 0 deleted" in synced.output and "column names" not in caplog.text


def test_add_sync_says_the_fields_left_out_once_and_a_repeated_id_as_such(tmp_path):
    """``add --sync`` reads a file twice (its ids, then its documents): the fields it leaves out were said twice. And
    a repeated id in a headerless file added to an index built with ``--metadata-fields`` was said as those fields
    refused (the file read again, for the repeat's first line, without the index's record)."""
    corpus = write_jsonl(tmp_path / "s.jsonl", [{"_id": "a", "text": "cats purr", "lang": "en"},
                                                {"_id": "b", "text": "dogs bark", "lang": "en"}])
    invoke("index", "--data", corpus, "--out", tmp_path / "si")
    said = logging.Handler(logging.WARNING)  # where the command line's messages go (pytest's own skip its filters)
    said.messages = []
    said.emit = lambda record: said.messages.append(record.getMessage())
    logging.getLogger().addHandler(said)
    try:
        invoke("add", corpus, "--index", tmp_path / "si", "--sync")
    finally:
        logging.getLogger().removeHandler(said)
    assert sum("the field 'lang' of its documents is left out" in message for message in said.messages) == 1
    (tmp_path / "h.tsv").write_text("id\ttext\tyear\n1\tcats\t2020\n", encoding="utf-8")
    invoke("index", "--data", tmp_path / "h.tsv", "--out", tmp_path / "mf", "--metadata-fields", "year")
    (tmp_path / "dup.tsv").write_text("7\tdogs bark\n8\tbirds\n7\tdogs again\n", encoding="utf-8")
    repeated = invoke("add", tmp_path / "dup.tsv", "--index", tmp_path / "mf", ok=False)
    assert repeated.exit_code == 2 and "dup.tsv:3: duplicate document id '7' (first seen on line 1)" in repeated.output


def test_add_of_a_folder_blames_only_the_id_field_given(tmp_path):
    """``add FOLDER --metadata-fields x`` on an index recording an id field was refused for ``--id-field``, never
    given (any option given made every recorded field one asked for): a recorded id field does not apply to a folder
    of files, a given one is refused, alone named."""
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"doc_no": "d1", "body": "cats purr loudly"}])
    invoke("index", "--data", corpus, "--out", tmp_path / "idx", "--id-field", "doc_no", "--text-field", "body")
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "a.md").write_text("Alpha doc about cats.\n", encoding="utf-8")
    assert "added 1 document" in invoke("add", tmp_path / "folder", "--index", tmp_path / "idx", "--metadata-fields",
                                        "x").output
    for sync in ((), ("--sync", "--force")):
        refused = invoke("add", tmp_path / "folder", "--index", tmp_path / "idx", "--id-field", "doc_no", *sync,
                         ok=False)
        assert refused.exit_code == 2 and "its path the id: id_field (--id-field) names a field" in refused.output
