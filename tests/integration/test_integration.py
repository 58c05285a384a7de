"""Integration tests on the real shared data (SciFact, and the MS MARCO IDF table); a few seconds in all."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from semiret.cli import app
from semiret.data import Collection, iter_corpus
from semiret.evaluation import evaluate
from semiret.search import BagOfTokensRetriever, BM25Retriever, IDFRetriever
from semiret.text import WordAnalyzer

from helpers import MSMARCO_IDF, SCIFACT, SHARED_DATA, require_shared_data

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", autouse=True)
def _shared_data():
    require_shared_data()


def test_scifact_collection_reads():
    collection = Collection(SCIFACT)
    docs = list(collection.corpus())
    assert len(docs) == 5183 and len({d.id for d in docs}) == 5183
    assert collection.splits() == ["test", "train"]
    qrels = collection.qrels("test")
    assert len(qrels) == 300 and sum(len(v) for v in qrels.values()) == 339
    assert len(collection.queries("test")) == 300
    vaswani = Collection(SHARED_DATA / "vaswani")
    assert sum(1 for _ in vaswani.corpus()) == 11429 and len(vaswani.queries("test")) == 93


def test_bm25_scifact_eval_json_matches_the_reference(tmp_path):
    result = CliRunner().invoke(app, ["eval", "--data", str(SCIFACT), "--split", "test", "--retriever", "bm25",
                                      "--index", str(tmp_path / "idx"), "--json"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1
    figures = json.loads(lines[0])
    for key in ("nDCG@10", "R@100", "MRR@10", "index_build_s", "index_size_mb", "latency_ms_median"):
        assert isinstance(figures[key], float), key
    assert figures["nDCG@10"] == pytest.approx(0.686, abs=0.002)
    assert figures["R@100"] == pytest.approx(0.913, abs=0.005)
    assert figures["queries"] == 300 and figures["documents"] == 5183


def test_bm25_equals_bm25s_on_scifact_documents(tmp_path):
    import bm25s
    import Stemmer

    docs = list(itertools.islice(iter_corpus(SCIFACT), 400))
    ours = BM25Retriever.build(docs, tmp_path / "idx")
    reference = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    reference.index(bm25s.tokenize([d.full_text for d in docs], stopwords="en", stemmer=Stemmer.Stemmer("english"),
                                   show_progress=False), show_progress=False)
    queries = list(Collection(SCIFACT).queries("test").values())[:30]
    hits = ours.search(queries, k=10)
    analyzer = WordAnalyzer()
    for query, ids, scores in zip(queries, hits.ids, hits.scores):
        expected = reference.get_scores(analyzer(query))
        position = {d.id: i for i, d in enumerate(docs)}
        np.testing.assert_allclose(scores, np.sort(expected)[::-1][:len(scores)], rtol=1e-5)
        np.testing.assert_allclose([expected[position[i]] for i in ids], scores, rtol=1e-5)


def test_token_retrievers_on_a_scifact_sample(scifact_sample, tmp_path):
    bot = evaluate(scifact_sample, "bot", index=tmp_path / "bin")
    corpus_idf = evaluate(scifact_sample, "idf", index=tmp_path / "bin")
    msmarco_idf = evaluate(scifact_sample, "idf", index=tmp_path / "bin", idf=str(MSMARCO_IDF))
    bm25 = evaluate(scifact_sample, "bm25", index=tmp_path / "bm25")
    assert corpus_idf["index_build_s"] is None and msmarco_idf["index_build_s"] is None  # shared binary index
    for figures in (bot, corpus_idf, msmarco_idf, bm25):
        assert figures["queries"] == 40 and 0.3 < figures["nDCG@10"] <= 1
    # weighting tokens by IDF beats counting them, as in the full-SciFact results
    assert corpus_idf["nDCG@10"] > bot["nDCG@10"] and msmarco_idf["nDCG@10"] > bot["nDCG@10"]


def test_changes_on_scifact_then_merge_equal_a_fresh_build(scifact_sample, tmp_path):
    docs = list(iter_corpus(scifact_sample))
    first, second = docs[: len(docs) // 2], docs[len(docs) // 2:]
    index = BM25Retriever.build(first, tmp_path / "grown")
    index.add(second)
    gone = {d.id for d in docs[::7]}
    index.delete(sorted(gone))
    index.index.merge()
    fresh = BM25Retriever.build([d for d in docs if d.id not in gone], tmp_path / "fresh")
    queries = list(Collection(scifact_sample).queries().values())
    grown_hits, fresh_hits = index.search(queries, k=20), fresh.search(queries, k=20)
    for a, b in zip(grown_hits.scores, fresh_hits.scores):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    for ids in grown_hits.ids:
        assert not gone & set(ids)


def test_bot_and_idf_changes_on_scifact(scifact_sample, tmp_path):
    docs = list(iter_corpus(scifact_sample))
    bot = BagOfTokensRetriever.build(docs[:100], tmp_path / "bin")
    bot.add(docs[100:])
    query = docs[150].full_text[:200]
    assert bot.search([query], k=1).ids[0] == [docs[150].id]
    bot.delete([docs[150].id])
    idf = IDFRetriever.open(tmp_path / "bin", idf=MSMARCO_IDF)
    assert docs[150].id not in idf.search([query], k=50).ids[0]
