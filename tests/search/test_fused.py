"""Separately built indexes searched together, their rankings fused at query time: as `semiret fuse` fuses their
saved runs."""

import json

import pytest
from typer.testing import CliRunner

from semiret.cli import app
from semiret.data.collection import Collection
from semiret.data.trec import Run, read_trec_run
from semiret.errors import SemiretError
from semiret.evaluation.evaluate import evaluate
from semiret.evaluation.fusion import fuse_runs
from semiret.evaluation.metrics import parse_measures, score_run
from semiret.search import BM25Retriever, DenseRetriever, IDFRetriever
from semiret.search.fused import FusedSearch

from helpers import TINY_DOCS, TINY_QUERIES


def _run(hits, query_ids) -> Run:
    return {q: dict(zip(ids, scores)) for q, ids, scores in zip(query_ids, hits.ids, hits.scores)}


@pytest.mark.parametrize("method", ["rrf", "score", "zscore", "dbsf"])
def test_a_fused_search_is_the_fusion_of_its_parts_runs(tmp_path, tiny_bert, method):
    parts = [BM25Retriever.build(TINY_DOCS, tmp_path / "bm25"),
             DenseRetriever.build(TINY_DOCS, tmp_path / "dense", model=str(tiny_bert), store_texts=False)]
    fused = FusedSearch(parts, method=method, weights=[0.7, 0.3], depth=5)
    query_ids, texts = list(TINY_QUERIES), list(TINY_QUERIES.values())
    hits = fused.search(texts, k=4)
    expected = fuse_runs([_run(part.search(texts, k=5), query_ids) for part in parts], method, [0.7, 0.3], k=4)
    assert _run(hits, query_ids) == {q: pytest.approx(ranking) for q, ranking in expected.items()}
    assert [list(ranking) for ranking in expected.values()] == hits.ids  # in the fused order
    one = fused.search(texts[0], k=2)
    assert [h.id for h in one] == hits.ids[0][:2] and one[0].text == next(
        d for d in TINY_DOCS if d.id == one[0].id).full_text  # read from the part that stores texts


def test_filters_apply_to_every_part_and_thresholds_to_the_fused_scores(tmp_path):
    documents = [type(d)(d.id, d.text, d.title, {"n": number}) for number, d in enumerate(TINY_DOCS)]
    parts = [BM25Retriever.build(documents, tmp_path / "bm25"), IDFRetriever.build(documents, tmp_path / "idf")]
    fused = FusedSearch(parts)
    kept = {d.id for d in documents if d.metadata["n"] % 2 == 0}
    hits = fused.search("cats and dogs", k=10, filter={"n": [n for n in range(len(documents)) if n % 2 == 0]})
    assert hits and {h.id for h in hits} <= kept
    strong = fused.search("cats and dogs", k=10, score_threshold=1.5 / 61)
    assert all(h.score >= 1.5 / 61 for h in strong) and len(strong) < len(fused.search("cats and dogs", k=10))


def test_bad_fusions_are_refused(tmp_path):
    bm25 = BM25Retriever.build(TINY_DOCS, tmp_path / "bm25")
    for parts, options, message in (([bm25], {}, "two rankings or more"),
                                     ([bm25, bm25], {"method": "max"}, "one of rrf, score, zscore, dbsf"),
                                     ([bm25, bm25], {"weights": [1.0]}, "1 weights for 2 rankings"),
                                     ([bm25, bm25], {"depth": 0}, "depth .* must be at least 1, got 0"),
                                     ([bm25, "bm25"], {}, "got BM25Retriever, str")):
        with pytest.raises(SemiretError, match=message):
            FusedSearch(parts, **options)
    with pytest.raises(SemiretError, match="k must be at least 1"):
        FusedSearch([bm25, bm25]).search("cats", k=0)


def test_the_search_command_fuses_indexes(tmp_path):
    bm25 = BM25Retriever.build(TINY_DOCS, tmp_path / "bm25")
    idf = IDFRetriever.build(TINY_DOCS, tmp_path / "idf")
    result = CliRunner().invoke(app, ["search", "--index", str(tmp_path / "bm25"), "--fuse-with", str(tmp_path / "idf"),
                                      "--fuse-method", "score", "--fuse-weight", "2", "--fuse-weight", "1", "-k", "3",
                                      "--json", "cats and dogs"])
    assert result.exit_code == 0, result.output
    hits = json.loads(result.stdout)["hits"]
    expected = FusedSearch([bm25, idf], "score", [2, 1]).search("cats and dogs", k=3)
    assert [(h["id"], h["score"]) for h in hits] == [(h.id, pytest.approx(h.score)) for h in expected]
    refused = CliRunner().invoke(app, ["search", "--index", str(tmp_path / "bm25"), "--fuse-with", str(tmp_path / "idf"),
                                       "--group-by", "x", "cats"])
    assert refused.exit_code != 0 and "--group-by does not apply" in refused.output


def test_eval_scores_a_fused_search_as_the_fusion_of_the_parts_runs(tmp_path, beir_dir):
    collection = Collection(beir_dir)
    BM25Retriever.build(collection.corpus(), tmp_path / "bm25")
    IDFRetriever.build(collection.corpus(), tmp_path / "idf")
    for part in ("bm25", "idf"):
        evaluate(beir_dir, index=tmp_path / part, run_path=tmp_path / f"{part}.run")
    expected = fuse_runs([read_trec_run(tmp_path / f"{part}.run") for part in ("bm25", "idf")], "zscore", [1, 2],
                         k=100)
    figures = evaluate(beir_dir, index=tmp_path / "bm25", fuse_with=[tmp_path / "idf"], fuse_method="zscore",
                       fuse_weights=[1, 2], run_path=tmp_path / "fused.run")
    qrels = collection.qrels("test")
    assert figures["nDCG@10"] == pytest.approx(score_run(expected, qrels, parse_measures(["nDCG@10"]))["nDCG@10"])
    assert read_trec_run(tmp_path / "fused.run") == {q: pytest.approx(r) for q, r in expected.items()}
    assert figures["options"]["fuse_method"] == "zscore" and figures["options"]["fuse_with"] == [str(tmp_path / "idf")]
    assert figures["flops"] is None  # the first index's own cost is not the fused search's
    result = CliRunner().invoke(app, ["eval", "--data", str(beir_dir), "--index", str(tmp_path / "bm25"), "--fuse-with",
                                      str(tmp_path / "idf"), "--fuse-method", "zscore", "--fuse-weight", "1",
                                      "--fuse-weight", "2", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["nDCG@10"] == pytest.approx(figures["nDCG@10"])
    with pytest.raises(SemiretError, match="2 weights for 3 rankings"):
        evaluate(beir_dir, index=tmp_path / "bm25", fuse_with=[tmp_path / "idf", tmp_path / "idf"], fuse_weights=[1, 2])
    with pytest.raises(SemiretError, match="--diversity does not apply"):
        evaluate(beir_dir, index=tmp_path / "bm25", fuse_with=[tmp_path / "idf"], diversity=0.5)


def test_an_index_of_passages_takes_part_with_its_documents(tmp_path, beir_dir):
    collection = Collection(beir_dir)
    passages = BM25Retriever.build(collection.corpus(), tmp_path / "passages", chunking=3)
    whole = BM25Retriever.build(collection.corpus(), tmp_path / "whole")
    query = "cats and dogs"
    fused = FusedSearch([passages, whole], depth=10).search(query, k=10)
    documents = {d.id for d in collection.corpus()}
    assert fused and {h.id for h in fused} <= documents
    by_best_passage = [h.group for h in passages.search(query, k=10, group_by="parent")]
    expected = fuse_runs([{"q": {d: -n for n, d in enumerate(by_best_passage)}},
                          {"q": {h.id: h.score for h in whole.search(query, k=10)}}], k=10)
    assert [h.id for h in fused] == list(expected["q"])
    assert fused[0].text == whole.get_document(fused[0].id).full_text
    figures = evaluate(beir_dir, index=tmp_path / "passages", fuse_with=[tmp_path / "whole"])
    assert figures["nDCG@10"] > 0 and figures["chunking"] is not None
    with pytest.raises(SemiretError, match="fused search takes query texts"):
        FusedSearch([passages, whole]).search([0.1, 0.2])


def test_eval_refuses_query_vectors_a_retriever_cannot_search_before_building(tmp_path, beir_dir):
    vectors = tmp_path / "vectors.jsonl"
    vectors.write_text(json.dumps({"_id": "q1", "vector": [0.1, 0.2]}) + "\n")
    with pytest.raises(SemiretError, match="--query-vectors searches a dense index .*; bm25 searches query texts"):
        evaluate(beir_dir, query_vectors_file=vectors, index=tmp_path / "never")
    assert not (tmp_path / "never").exists()
    BM25Retriever.build(Collection(beir_dir).corpus(), tmp_path / "bm25")
    with pytest.raises(SemiretError, match="--query-vectors does not apply"):
        evaluate(beir_dir, index=tmp_path / "bm25", fuse_with=[tmp_path / "bm25"], query_vectors_file=vectors,
                 retriever="vectors")


def test_fusion_settings_without_indexes_to_fuse_are_refused(tmp_path, beir_dir):
    BM25Retriever.build(Collection(beir_dir).corpus(), tmp_path / "bm25")
    for flags in (["--fuse-method", "zscore"], ["--fuse-weight", "2"], ["--fuse-depth", "50"]):
        for command in (["search", "--index", str(tmp_path / "bm25"), "cats"],
                        ["eval", "--data", str(beir_dir), "--index", str(tmp_path / "bm25")]):
            result = CliRunner().invoke(app, [*command, *flags])
            assert result.exit_code != 0 and "give the indexes to fuse with --fuse-with" in result.output
