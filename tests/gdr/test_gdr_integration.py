"""The packaged ``gdr-scifact`` on a SciFact sample: it loads from its delta against the packaged MiniLM, uses
its recorded beta, and finds the judged documents while scoring a fraction of the corpus."""

from __future__ import annotations

import pytest

from semiret.evaluation.evaluate import evaluate
from semiret.search import GDRRetriever

pytestmark = pytest.mark.integration


def test_the_packaged_gdr_model_on_a_sample(scifact_sample, tmp_path):
    figures = evaluate(scifact_sample, "gdr", index=tmp_path / "gdr", model="gdr-scifact")
    assert figures["R@100"] > 0.9 and figures["nDCG@10"] > 0.6
    assert figures["documents_scored_fraction"] < 0.6  # the decoded clusters' share of a 341-document sample
    retriever = GDRRetriever.open(tmp_path / "gdr")
    assert retriever.query_side.options.beta == 1000.0
    assert retriever.query_side.model.encoder.name.endswith("query-encoder")  # E_Q: its delta over MiniLM
