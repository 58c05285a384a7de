"""Training pairs written as a BEIR collection that the collection readers, and so training and eval, read."""

import json

import pytest
from typer.testing import CliRunner

from semiret.cli import app
from semiret.data.collection import Collection
from semiret.data.pairs import read_pairs, write_pairs_collection
from semiret.errors import DataFormatError, SemiretError


def test_pairs_become_queries_documents_and_judgements(tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("\n".join(json.dumps(r) for r in [
        {"anchor": "what lowers cholesterol", "positive": "Statins lower cholesterol.",
         "negative_1": "Aspirin thins blood.", "negative_2": "Sleep helps memory."},
        {"anchor": "what lowers cholesterol", "positive": "Diet lowers cholesterol too."},  # the query again
        {"anchor": "does aspirin help the heart", "positive": "Aspirin thins blood."},  # a negative above
        {"query": "sleep", "positives": ["Sleep helps memory.", "Naps help."], "negatives": ["Statins lower cholesterol."]},
    ]) + "\n")
    counts = write_pairs_collection(pairs, tmp_path / "beir")
    assert counts == {"pairs": 4, "queries": 3, "documents": 5, "judgements": 5}
    collection = Collection(tmp_path / "beir")
    documents = {d.text: d.id for d in collection.corpus()}
    queries = collection.queries("train")
    qrels = collection.qrels("train")
    by_text = {text: query_id for query_id, text in queries.items()}
    assert set(qrels[by_text["what lowers cholesterol"]]) == {documents["Statins lower cholesterol."],
                                                             documents["Diet lowers cholesterol too."]}
    assert set(qrels[by_text["does aspirin help the heart"]]) == {documents["Aspirin thins blood."]}
    assert set(qrels[by_text["sleep"]]) == {documents["Sleep helps memory."], documents["Naps help."]}
    assert all(grade == 1 for judged in qrels.values() for grade in judged.values())


def test_a_table_with_or_without_a_header(tmp_path):
    named = tmp_path / "pairs.tsv"
    named.write_text("Query\tPositive\tNegative\nq one\tp one\tn one\nq two\tp two\t\n")
    assert [(q, p, n) for _, q, p, n in read_pairs(named)] == [("q one", ["p one"], ["n one"]), ("q two", ["p two"], [])]
    plain = tmp_path / "pairs.csv"
    plain.write_text("q one,p one,n one,n two\nq two,p two,,\nq three,p three\n")
    assert [(q, p, n) for _, q, p, n in read_pairs(plain)] == [("q one", ["p one"], ["n one", "n two"]),
                                                               ("q two", ["p two"], []), ("q three", ["p three"], [])]
    ragged = tmp_path / "ragged.tsv"  # no header: each line as many negatives as it holds
    ragged.write_text("q1\tpos1\nq2\tpos2\tneg2\n")
    assert [(q, p, n) for _, q, p, n in read_pairs(ragged)] == [("q1", ["pos1"], []), ("q2", ["pos2"], ["neg2"])]


def test_labelled_pairs_keep_the_matching_ones_and_graded_ones_are_refused(tmp_path):
    pairs = tmp_path / "quora.jsonl"
    pairs.write_text("".join(json.dumps(r) + "\n" for r in [
        {"sentence1": "How do I learn Python?", "sentence2": "What is the best way to learn Python?", "label": 1},
        {"sentence1": "How do I learn Python?", "sentence2": "How tall is Mount Everest?", "label": 0},
        {"sentence1": "Is tea healthy?", "sentence2": "What is the capital of France?", "label": "0"}]))
    assert write_pairs_collection(pairs, tmp_path / "beir") == {"pairs": 3, "queries": 1, "documents": 3,
                                                                "judgements": 1}
    collection = Collection(tmp_path / "beir")
    assert list(collection.queries("train").values()) == ["How do I learn Python?"]
    assert [d.text for d in collection.corpus()][1:] == ["How tall is Mount Everest?", "What is the capital of France?"]
    sts = tmp_path / "sts.csv"
    sts.write_text("sentence1,sentence2,score\nA man plays,A man is playing,4.8\n")
    with pytest.raises(DataFormatError, match="'score' column grades"):
        write_pairs_collection(sts, tmp_path / "sts")
    pairs.write_text(json.dumps({"sentence1": "a", "sentence2": "b", "label": 0}) + "\n")
    with pytest.raises(SemiretError, match="every label is 0"):
        write_pairs_collection(pairs, tmp_path / "none")
    pairs.write_text(json.dumps({"sentence1": "a", "sentence2": "b", "label": "yes"}) + "\n")
    with pytest.raises(DataFormatError, match="'label' must be a number"):
        write_pairs_collection(pairs, tmp_path / "none")


def test_bad_pairs_are_refused_naming_the_line_and_nothing_is_written(tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    for line, message in (({"anchor": "q"}, "no positive column"), ({"anchor": "q", "positive": ""}, "is empty"),
                          ({"anchor": "q", "positive": 3}, "must be a text"), ({"text": "q", "positive": "p"},
                                                                               "no query column")):
        pairs.write_text(json.dumps({"anchor": "fine", "positive": "fine"}) + "\n" + json.dumps(line) + "\n")
        with pytest.raises(DataFormatError, match=rf"pairs.jsonl:2: .*{message}"):
            write_pairs_collection(pairs, tmp_path / "beir")
        assert not (tmp_path / "beir").exists()
    pairs.write_text(json.dumps({"anchor": "q", "positive": "p"}) + "\n")
    write_pairs_collection(pairs, tmp_path / "beir")
    with pytest.raises(SemiretError, match="exists"):
        write_pairs_collection(pairs, tmp_path / "beir")
    with pytest.raises(SemiretError, match="split"):
        write_pairs_collection(pairs, tmp_path / "other", split="../x")


def test_the_command_writes_a_collection_eval_reads(tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"query": f"about {animal}", "positive": f"{animal} live here"}) + "\n"
                             for animal in ("cats", "dogs", "birds", "fish", "horses")))
    runner = CliRunner()
    result = runner.invoke(app, ["import-pairs", str(pairs), "-o", str(tmp_path / "beir"), "--split", "test"])
    assert result.exit_code == 0, result.output
    assert "5 pairs: 5 queries, 5 documents, 5 judgements" in result.output
    figures = runner.invoke(app, ["eval", "--data", str(tmp_path / "beir"), "--json"])
    assert figures.exit_code == 0, figures.output
    assert json.loads(figures.stdout)["nDCG@10"] == pytest.approx(1.0)


def test_mined_negatives_are_hits_that_are_not_positives_and_import_back(tmp_path, beir_dir):
    from semiret.search import BM25Retriever
    from semiret.training.miners import mined_tuples

    collection = Collection(beir_dir)
    queries, qrels = collection.queries("test"), collection.qrels("test")
    index = BM25Retriever.build(collection.corpus(), tmp_path / "bm25")
    tuples = list(mined_tuples(index, queries, qrels, negatives=2, skip_top=1, depth=5))
    assert tuples and {t["query_id"] for t in tuples} <= set(qrels)
    for record in tuples:
        ranked = [h.id for h in index.search(record["query"], k=5)][1:]
        positives = {d for d, grade in qrels[record["query_id"]].items() if grade > 0}
        assert record["negative_ids"] == [d for d in ranked if d not in positives][:2]
        assert record["positive"] == index.get_document(record["positive_id"]).full_text
        assert [record[f"negative_{n}"] for n in range(1, len(record["negative_ids"]) + 1)] == [
            index.get_document(d).full_text for d in record["negative_ids"]]
    drawn = [list(mined_tuples(index, queries, qrels, negatives=1, depth=5, sampling="random", seed=3))
             for _ in range(2)]
    assert drawn[0] == drawn[1]  # seeded
    for options, message in (({"sampling": "best"}, "sampling"), ({"skip_top": 5}, "leaves no hit"),
                             ({"negatives": 0}, "negatives must be")):
        with pytest.raises(SemiretError, match=message):
            list(mined_tuples(index, queries, qrels, **{"depth": 5, **options}))
    out = tmp_path / "tuples.jsonl"
    result = CliRunner().invoke(app, ["mine-negatives", "--data", str(beir_dir), "--split", "test", "--index",
                                      str(tmp_path / "bm25"), "--negatives", "2", "--skip-top", "1", "--depth", "5",
                                      "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert [json.loads(line) for line in out.read_text().splitlines()] == tuples
    counts = write_pairs_collection(out, tmp_path / "again")
    assert counts["pairs"] == len(tuples) and counts["judgements"] == len(tuples)


def test_pairs_left_out_or_without_negatives_are_said(tmp_path, beir_dir, caplog):
    from semiret.search import BM25Retriever
    from semiret.training.miners import mined_tuples

    collection = Collection(beir_dir)
    queries, qrels = collection.queries("test"), collection.qrels("test")
    judged = {d for judgements in qrels.values() for d, grade in judgements.items() if grade > 0}
    kept = [d for d in collection.corpus() if d.id != sorted(judged)[0]]  # one positive not indexed
    index = BM25Retriever.build(kept, tmp_path / "part")
    with caplog.at_level("WARNING"):
        tuples = list(mined_tuples(index, queries, qrels, negatives=2, depth=1))
    assert "judged pairs left out" in caplog.text
    assert any(not t["negative_ids"] for t in tuples)  # a positive as the only hit of depth 1
    assert "without a negative" in caplog.text


def test_negatives_mined_over_passages_are_other_documents_whole(tmp_path, beir_dir):
    from semiret.search import BM25Retriever
    from semiret.training.miners import mined_tuples

    collection = Collection(beir_dir)
    queries, qrels = collection.queries("test"), collection.qrels("test")
    passages = BM25Retriever.build(collection.corpus(), tmp_path / "passages", chunking=3)
    documents = {d.id: d for d in collection.corpus()}
    tuples = list(mined_tuples(passages, queries, qrels, negatives=3, depth=10))
    assert any(record["negative_ids"] for record in tuples)
    for record in tuples:
        positives = {d for d, grade in qrels[record["query_id"]].items() if grade > 0}
        assert not set(record["negative_ids"]) & positives and set(record["negative_ids"]) <= set(documents)
        assert len(set(record["negative_ids"])) == len(record["negative_ids"])
        assert [record[f"negative_{n}"] for n in range(1, len(record["negative_ids"]) + 1)] == [
            documents[d].full_text for d in record["negative_ids"]]
