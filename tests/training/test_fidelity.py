"""Training computes what it computed before the trainer took loss objects: per-step losses of tiny runs of
both recipes (the session's ``tiny_bert``, the tiny collection), recorded with the previous code (the
``make_batches``/``step`` trainer, commit 15c7c9d) and checked to float tolerance.

SiDR runs keep one negative per query in the pool (``pool_size=1``): the previous miner drew from a pool with
one random stream for the whole run, the current one with each batch's seed, so only the draw from a longer
pool differs (by design: a resumed or distributed run must draw what an uninterrupted one draws)."""

from __future__ import annotations

import pytest
from helpers import MSMARCO_IDF, write_beir

SIDR = dict(epochs=2, batch_size=3, learning_rate=1e-3, top_k=30000, pool_size=1, retrieve_depth=4,
            query_max_length=16, document_max_length=32)
SIDR_REFERENCE = {
    "paper": ({}, [367.50555419921875, 160.70513916015625, 374.7765197753906, 368.5721740722656]),
    "code-shared": ({"loss_form": "code", "shared": True},
                    [183.75929260253906, 77.69317626953125, 152.2481689453125, 189.40931701660156]),
    "no-semi-parametric-in-batch": ({"semi_parametric": False, "negatives": "none"},
                                    [352.23828125, 118.564453125, 164.1901092529297, 294.3349609375]),
}

INFERENCE_FREE = dict(pseudo_queries_per_document=2, pretrain_queries_per_epoch=8, pretrain_epochs=1,
                      finetune_epochs=2, batch_size=2, candidates=3, mining_depth=4, flops_sample=64,
                      pretrain_max_length=24, finetune_max_length=32, finetune_flops_weight=0.5,
                      pretrain_flops_weight=0.1, choose_document_threshold=False)
INFERENCE_FREE_REFERENCE = {
    "three-teachers": ({}, [1.0872201919555664, 1.242960810661316, 1.238274097442627, 1.2178527116775513,
                            1.0986106395721436, 1.1250128746032715, 1.1646652221679688, 1.1956149339675903]),
    "in-batch": ({"pretrain_in_batch_negatives": True, "finetune_in_batch_negatives": True},
                 [1.7579129934310913, 1.2423697710037231, 1.5400487184524536, 1.21553373336792,
                  1.0984742641448975, 1.1231609582901, 1.5097569227218628, 1.1879918575286865]),
    "binary-bm25-plain-kl": ({"idf_aware": False, "normalize_teachers": False, "fit_student_scale": False,
                              "teachers": "bm25", "pretrain_corpora": []},
                             [0.4801136255264282, 1.267858624458313, 0.5378537774085999, 0.597865104675293]),
}


def _per_step(monkeypatch, loss_class) -> list[float]:
    totals = []
    original = loss_class.__call__

    def call(self, model, batch, step):
        output = original(self, model, batch, step)
        totals.append(output.total.item())
        return output

    monkeypatch.setattr(loss_class, "__call__", call)
    return totals


@pytest.fixture(autouse=True)
def bfloat16_paths(monkeypatch):
    """The references were recorded where the encoders took their bfloat16 paths: take them on every CPU."""
    monkeypatch.setenv("SEMIRET_BFLOAT16", "1")


@pytest.fixture(scope="module")
def collection(tmp_path_factory):
    return write_beir(tmp_path_factory.mktemp("fidelity") / "tiny", split="train")


@pytest.mark.parametrize("name", SIDR_REFERENCE)
def test_sidr_losses_are_those_of_the_previous_trainer(name, collection, tiny_bert, tmp_path, monkeypatch):
    from semiret.methods.sidr import SiDRTrainingConfig, train_sidr
    from semiret.training.contrastive import SemiParametricLoss

    options, expected = SIDR_REFERENCE[name]
    totals = _per_step(monkeypatch, SemiParametricLoss)
    train_sidr(SiDRTrainingConfig(**{**SIDR, "data": str(collection), "output": str(tmp_path), "base": str(tiny_bert),
                                     **options}))
    assert totals == pytest.approx(expected, rel=1e-4)


@pytest.mark.parametrize("name", INFERENCE_FREE_REFERENCE)
def test_inference_free_losses_are_those_of_the_previous_trainer(name, collection, tiny_bert, tmp_path, monkeypatch,
                                                                 tmp_path_factory):
    from semiret.methods.inference_free import (
        InferenceFreeTrainingConfig,
        train_inference_free,
    )
    from semiret.training.distillation import DistillationLoss

    options, expected = INFERENCE_FREE_REFERENCE[name]
    totals = _per_step(monkeypatch, DistillationLoss)
    train_inference_free(InferenceFreeTrainingConfig(**{
        **INFERENCE_FREE, "data": str(collection), "output": str(tmp_path), "base": str(tiny_bert),
        "idf": str(MSMARCO_IDF), "teachers": f"dense:{tiny_bert},sparse:{tiny_bert},bm25",
        "pretrain_corpora": [str(collection)], "teacher_cache": str(tmp_path_factory.getbasetemp() / "teachers"),
        **options}))
    assert totals == pytest.approx(expected, rel=1e-5)
