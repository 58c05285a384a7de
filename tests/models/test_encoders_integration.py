"""The packaged models on a SciFact sample: fast encoders equal the reference computations, and the
neural retrievers reach sensible quality (full-collection figures are in docs/results.md)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import naive_splade

from semiret.data import iter_corpus
from semiret.evaluation.evaluate import evaluate
from semiret.models.dense import DenseEncoder
from semiret.data.packaged import model_directory
from semiret.models.splade import SpladeEncoder

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def sample_texts(scifact_sample) -> list[str]:
    return [d.full_text for d, _ in zip(iter_corpus(scifact_sample), range(16))]


def test_splade_tiny_equals_naive_forward(sample_texts):
    vectors = SpladeEncoder.from_pretrained("splade-tiny").encode_document(sample_texts, show_progress=False)
    expected = naive_splade(model_directory("splade-tiny"), sample_texts, max_length=256)
    np.testing.assert_allclose(vectors.to_dense(), expected, atol=1e-4)


def test_minilm_equals_sentence_transformers(sample_texts):
    sentence_transformers = pytest.importorskip("sentence_transformers")
    reference = sentence_transformers.SentenceTransformer(str(model_directory("minilm")), device="cpu")
    expected = reference.encode(sample_texts, batch_size=32)
    exact = DenseEncoder.from_pretrained("minilm", precision="float32").encode_document(sample_texts,
                                                                                       show_progress=False)
    np.testing.assert_allclose(exact, expected, atol=1e-5)
    fast = DenseEncoder.from_pretrained("minilm", precision="bfloat16").encode_document(sample_texts,
                                                                                      show_progress=False)
    assert np.min(np.sum(fast * expected, axis=1)) > 0.995


def test_neural_retrievers_on_a_sample(scifact_sample, tmp_path):
    splade = evaluate(scifact_sample, "splade", index=tmp_path / "impact")
    inference_free = evaluate(scifact_sample, "inference-free", index=tmp_path / "impact")
    dense = evaluate(scifact_sample, "dense", index=tmp_path / "dense", ann="hnsw")
    assert inference_free["index_build_s"] is None  # the SPLADE document vectors, reused
    assert splade["nDCG@10"] > 0.7 and dense["nDCG@10"] > 0.7 and inference_free["nDCG@10"] > 0.65
    assert splade["documents"] == dense["documents"] == inference_free["documents"]
