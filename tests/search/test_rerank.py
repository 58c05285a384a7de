"""A cross-encoder's second stage over any retriever (``search(rerank=Reranking(...))``, ``--cross-encoder``): the
best hits ranked again by the model's score of the query and each hit's stored text, read together; what a
cross-encoder folder must be; the command line and ``semiret eval``."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from semiret.cli import app
from semiret.errors import SemiretError
from semiret.search import BM25Retriever
from semiret.search.rerank import Reranking

from helpers import MAX_POSITIONS, TINY_DOCS, TOKENIZER_SOURCE, write_beir

QUERIES = ["cats and dogs chase", "statins cancer risk", "morning garden birds"]


@pytest.fixture(scope="module", params=[1, 2])
def cross_encoder(request, tmp_path_factory):
    """A 2-layer, 32-wide BERT with a sequence classification head of 1 label (a score) or 2 (not relevant,
    relevant), saved with its tokenizer."""
    from transformers import BertConfig, BertForSequenceClassification

    from semiret.models.loading import load_tokenizer

    torch.manual_seed(request.param)
    model = BertForSequenceClassification(BertConfig(
        vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=MAX_POSITIONS, num_labels=request.param))
    directory = tmp_path_factory.mktemp(f"cross-encoder-{request.param}")
    model.save_pretrained(directory)
    load_tokenizer(TOKENIZER_SOURCE).save_pretrained(directory)
    return directory


def _scores(folder, query: str, texts: list[str]) -> np.ndarray:
    """The model's score of each (query, text) pair, one pair at a time: the textbook computation."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    scores = []
    with torch.no_grad():
        for text in texts:
            logits = model(**tokenizer(query, text, truncation=True, max_length=MAX_POSITIONS,
                                       return_tensors="pt")).logits[0]
            scores.append(float(logits[0]) if len(logits) == 1 else float(torch.log_softmax(logits, -1)[1]))
    return np.array(scores, np.float32)


def test_the_best_hits_are_ranked_again_by_the_cross_encoder(tmp_path, cross_encoder):
    retriever = BM25Retriever.build(TINY_DOCS, tmp_path / "bm25")
    by_id = {d.id: d for d in TINY_DOCS}
    rerank = Reranking(str(cross_encoder), depth=4, batch_size=3)
    for query, hits in zip(QUERIES, retriever.search(QUERIES, k=2, rerank=rerank)):
        first = [hit.id for hit in retriever.search(query, k=4)]
        expected = _scores(cross_encoder, query, [by_id[d].full_text for d in first])
        order = sorted(range(len(first)), key=lambda j: (-expected[j], j))[:2]
        assert [hit.id for hit in hits] == [first[j] for j in order], query
        np.testing.assert_allclose([hit.score for hit in hits], expected[order], rtol=1e-4, atol=1e-5)
        assert hits[0].document.text == by_id[hits[0].id].text  # the hits read their documents
    deep = retriever.search("cats", k=6, rerank=rerank)  # k beyond the depth: k hits are ranked again
    assert len(deep) == len(retriever.search("cats", k=6))
    filtered = retriever.search("cats mice", k=5, rerank=rerank, filter={"$id": ["d1", "d6"]}, operators=True)
    assert {hit.id for hit in filtered} <= {"d1", "d6"}
    top = retriever.search("cats mice", k=5, rerank=rerank)
    assert [hit.id for hit in retriever.search("cats mice", k=5, rerank=rerank, score_threshold=top[1].score)] == [
        hit.id for hit in top[:2]]  # the threshold reads the cross-encoder's scores


def test_what_a_re_ranked_search_refuses(tmp_path, cross_encoder, tiny_bert):
    retriever = BM25Retriever.build(TINY_DOCS, tmp_path / "bm25")
    rerank = Reranking(str(cross_encoder), depth=4)
    for other in ({"group_by": "kind"}, {"diversity": 0.5}, {"boost": {"field": "year"}}):
        with pytest.raises(SemiretError, match="re-ranked search .* is not also grouped, diversified or boosted, nor given candidates"):
            retriever.search("cats", rerank=rerank, **other)
    with pytest.raises(SemiretError, match="group_size .* give group_by"):
        retriever.search("cats", rerank=rerank, group_size=2)
    with pytest.raises(SemiretError, match="rerank is a semiret.search.rerank.Reranking"):
        retriever.search("cats", rerank=str(cross_encoder))
    bare = BM25Retriever.build(TINY_DOCS, tmp_path / "bare", store_texts=False)
    with pytest.raises(SemiretError, match="keeps no stored documents .* no text to re-rank by"):
        bare.search("cats", rerank=rerank)
    with pytest.raises(SemiretError, match="is no cross-encoder: its configuration names BertForMaskedLM"):
        Reranking(str(tiny_bert))  # a masked LM's head would be random, scores meaningless
    for bad in ({"depth": 0}, {"batch_size": 0}, {"depth": 1.5}):
        with pytest.raises(SemiretError, match="must be a whole number, at least 1"):
            Reranking(str(cross_encoder), **bad)


def test_the_command_line_and_eval_rank_again(tmp_path, cross_encoder):
    beir = write_beir(tmp_path / "tiny")
    BM25Retriever.build(TINY_DOCS, tmp_path / "bm25")
    runner = CliRunner()
    printed = runner.invoke(app, ["search", "--index", str(tmp_path / "bm25"), "--json", "-k", "3",
                                  "--cross-encoder", str(cross_encoder), "--cross-encoder-depth", "5", QUERIES[0]])
    assert printed.exit_code == 0, printed.output
    expected = BM25Retriever.open(tmp_path / "bm25").search(QUERIES[0], k=3, rerank=Reranking(str(cross_encoder), 5))
    assert [hit["id"] for hit in json.loads(printed.output.splitlines()[0])["hits"]] == [hit.id for hit in expected]
    alone = runner.invoke(app, ["search", "--index", str(tmp_path / "bm25"), "--cross-encoder-depth", "5", "cats"])
    assert alone.exit_code != 0 and "goes with --cross-encoder or --colbert" in alone.output
    none = runner.invoke(app, ["search", "--index", str(tmp_path / "bm25"), "--cross-encoder", str(cross_encoder),
                               "--cross-encoder-depth", "0", "cats"])
    assert none.exit_code != 0 and "depth must be a whole number, at least 1, got 0" in none.output
    passages = runner.invoke(app, ["eval", "--data", str(beir), "--index", str(tmp_path / "passages"),
                                   "--chunk-words", "4", "--cross-encoder", str(cross_encoder)])
    assert passages.exit_code != 0 and "--cross-encoder/--colbert/--ltr with --chunk-words" in passages.output
    assert not (tmp_path / "passages").exists()  # refused before any index is built
    evaluated = runner.invoke(app, ["eval", "--data", str(beir), "--index", str(tmp_path / "bm25"), "--json",
                                    "--cross-encoder", str(cross_encoder)])
    assert evaluated.exit_code == 0, evaluated.output
    figures = json.loads(evaluated.output)
    assert figures["options"]["rerank"] == {"model": str(cross_encoder), "depth": 100}
    assert 0 <= figures["nDCG@10"] <= 1


def test_the_service_ranks_again_with_its_own_cross_encoder(tmp_path, cross_encoder):
    """A search asks for ``"rerank"``; the model is the server's (``--cross-encoder``), never a client's."""
    from semiret.serving import ServeSettings, create_app

    from helpers import LocalClient, client_of

    retriever = BM25Retriever.build(TINY_DOCS, tmp_path / "bm25")
    expected = retriever.search(QUERIES, k=3, rerank=Reranking(str(cross_encoder), depth=4))
    served = ServeSettings({"tiny": str(tmp_path / "bm25")}, write_process=False, cross_encoder=str(cross_encoder))
    with LocalClient(create_app(served)) as http:
        answer = http.post("/indexes/tiny/search", json={"queries": QUERIES, "k": 3, "rerank": {"depth": 4}})
        assert answer.status_code == 200, answer.text
        assert [[hit["id"] for hit in hits] for hits in answer.json()["results"]] == expected.ids
        found = client_of(http).search("tiny", QUERIES[0], k=3, rerank=4)
        assert [hit.id for hit in found] == expected.ids[0]
        assert [hit.score for hit in found] == pytest.approx(expected.scores[0], rel=1e-5)
        page = http.post("/indexes/tiny/search", json={"queries": [QUERIES[0]], "k": 2, "offset": 1,
                                                       "rerank": {"depth": 4}}).json()["results"][0]
        assert [hit["id"] for hit in page] == expected.ids[0][1:3]  # pages of one re-ranked ranking
        for body, problem in (({"k": 5, "rerank": {"depth": 4}}, "k + offset (5) is more than the 4 hits"),
                              ({"rerank": True, "group_by": "kind"}, "not also grouped, diversified or boosted"),
                              ({"rerank": {"depth": 5000}}, "at most 1000 (--max-k)"),
                              ({"rerank": True, "explain": True}, "leave out explain"),
                              ({"rerank": {"model": "other"}}, "Extra inputs are not permitted")):
            refused = http.post("/indexes/tiny/search", json={"queries": ["cats"], **body})
            assert refused.status_code == 422 and problem in refused.text, body
    with LocalClient(create_app(ServeSettings({"tiny": str(tmp_path / "bm25")}, write_process=False))) as http:
        refused = http.post("/indexes/tiny/search", json={"queries": ["cats"], "rerank": True})
        assert refused.status_code == 422 and "start it with --cross-encoder MODEL" in refused.text
    low = ServeSettings({"tiny": str(tmp_path / "bm25")}, write_process=False, cross_encoder=str(cross_encoder),
                        max_k=50, max_hits=50)
    with LocalClient(create_app(low)) as http:  # a depth left out: 100, or --max-k where lower, as with true
        for rerank in (True, {}):
            assert http.post("/indexes/tiny/search", json={"queries": ["cats"], "rerank": rerank}).status_code == 200
        many = http.post("/indexes/tiny/search", json={"queries": ["cats", "dogs"], "k": 1, "rerank": True})
        assert many.status_code == 413  # 2 queries x 50 pairs read over --max-hits 50


def test_another_system_s_run_is_ranked_again(tmp_path, cross_encoder, caplog):
    """`semiret rerank RUN --index I` (PyTerrier's run >> retriever): each query's best documents of the run scored by
    the index's retriever, those it does not score after them at 0, those the index lacks left out and said; or
    ranked by a cross-encoder over the same candidates."""
    from semiret.data.trec import read_trec_run, write_trec_run
    from semiret.search.rerank import rerank_run

    retriever = BM25Retriever.build(TINY_DOCS, tmp_path / "bm25")
    queries = {"q1": "cats chase", "q2": "morning letters"}
    run = {"q1": {"d4": 9.0, "d2": 8.0, "zz": 7.0, "d1": 6.0, "d3": 5.0}, "q2": {"d3": 2.0, "d5": 1.0}}
    with caplog.at_level("WARNING"):
        again = rerank_run(retriever, run, queries, depth=4)
    bm25 = {hit.id: hit.score for hit in retriever.search("cats chase", k=6)}
    assert list(again["q1"]) == ["d1", "d2", "d4"] and again["q1"]["d4"] == 0.0  # d4 holds neither word
    assert again["q1"]["d1"] == pytest.approx(bm25["d1"]) and "d3" not in again["q1"]  # d3: below the depth of 4
    assert "1 of the run's documents are not in" in caplog.text  # zz
    assert list(rerank_run(retriever, run, queries, depth=4, k=1)["q1"]) == ["d1"]
    by_id = {d.id: d for d in TINY_DOCS}
    crossed = rerank_run(retriever, run, queries, depth=4, rerank=Reranking(str(cross_encoder)))
    expected = _scores(cross_encoder, "cats chase", [by_id[d].full_text for d in ("d4", "d2", "d1")])
    assert crossed["q1"] == pytest.approx(dict(zip(("d4", "d2", "d1"), expected.tolist())), rel=1e-4)
    with pytest.raises(SemiretError, match="ranks 1 queries the queries given lack \\(q2\\)"):
        rerank_run(retriever, run, {"q1": "cats"})

    write_trec_run(run, tmp_path / "first.trec")
    (tmp_path / "queries.tsv").write_text("".join(f"{q}\t{t}\n" for q, t in queries.items()))
    runner = CliRunner()
    done = runner.invoke(app, ["rerank", str(tmp_path / "first.trec"), "--index", str(tmp_path / "bm25"), "--queries",
                               str(tmp_path / "queries.tsv"), "--depth", "4", "-o", str(tmp_path / "again.trec")])
    assert done.exit_code == 0, done.output
    written = read_trec_run(tmp_path / "again.trec")
    assert written.keys() == again.keys() and all(written[q] == pytest.approx(again[q]) for q in again)
    neither = runner.invoke(app, ["rerank", str(tmp_path / "first.trec"), "--index", str(tmp_path / "bm25")])
    assert neither.exit_code != 0 and "give the run's queries" in neither.output
