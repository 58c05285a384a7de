"""The packaged ``hce-scifact`` (HCE-J on SciFact, averaged half with the MiniLM it started from) on a SciFact
sample: it loads by name as a dense encoder and ranks the judged documents well."""

from __future__ import annotations

import pytest

from semiret.evaluation.evaluate import evaluate

pytestmark = pytest.mark.integration


def test_the_packaged_hce_model_on_a_sample(scifact_sample, tmp_path):
    figures = evaluate(scifact_sample, "dense", index=tmp_path / "hce", model="hce-scifact")
    assert figures["nDCG@10"] > 0.75 and figures["R@100"] > 0.95
