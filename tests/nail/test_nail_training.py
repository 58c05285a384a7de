"""NAIL training on tiny models: the loss is Eq. 3 (in-batch softmax over multi-hot token queries, summed, with
a temperature), pseudo pairs are half inverse cloze with the span removed and half cropping, hard negatives
come from BM25's pool, and ``semiret train nail`` runs both stages, resumes and saves an fp16 model the
retrievers open."""

from __future__ import annotations

import json
import random

import pytest
import torch
import torch.nn.functional as F
from helpers import TINY_DOCS, recording_loss

from semiret.data import Document
from semiret.errors import SemiretError
from semiret.methods.nail import NailTrainingConfig, bm25_pools, train_nail
from semiret.training.data import TrainingSet
from semiret.training.losses import multi_hot_softmax_loss
from semiret.training.miners import PooledNegatives
from semiret.training.pseudo_queries import generate_pseudo_pairs


def test_the_loss_is_the_papers_equation_3():
    torch.manual_seed(0)
    scores = torch.randn(4, 5)  # 4 passages over vocabulary ids 2, 3, 7, 9, 11
    columns = torch.tensor([2, 3, 7, 9, 11])
    queries = [torch.tensor([3, 9]), torch.tensor([2, 7, 11])]
    positives = torch.tensor([1, 3])
    expected = 0.0
    for tokens, positive in zip(queries, positives.tolist()):
        columns_of = [columns.tolist().index(t) for t in tokens.tolist()]
        s = scores[:, columns_of].sum(dim=1)
        expected += -s[positive] + torch.logsumexp(s, dim=0)
    assert multi_hot_softmax_loss(queries, scores, columns, positives).item() == pytest.approx(expected.item(), rel=1e-5)
    hot = multi_hot_softmax_loss(queries, scores, columns, positives, temperature=0.5)
    assert hot.item() == pytest.approx(F.cross_entropy(torch.stack(
        [scores[:, [1, 3]].sum(1), scores[:, [0, 2, 4]].sum(1)]) / 0.5, positives, reduction="sum").item(), rel=1e-5)


def test_pseudo_pairs_are_half_inverse_cloze_with_the_span_removed_half_crops():
    docs = [Document(f"d{i}", " ".join(f"w{i}x{j}" for j in range(40))) for i in range(10)]
    pairs = generate_pseudo_pairs(docs, per_document=2, seed=3)
    assert [p.kind for p in pairs].count("ict") == [p.kind for p in pairs].count("crop") == 10
    for pair in pairs:
        query, passage = pair.query.split(), pair.passage.split()
        if pair.kind == "ict":
            assert not set(query) & set(passage) and len(query) + len(passage) == 40
        else:
            assert len(passage) >= 20 and 4 <= len(query) <= 12
    assert generate_pseudo_pairs(docs, per_document=2, seed=3) == pairs


def test_hard_negatives_come_from_the_bm25_pool_and_never_are_positives(beir_dir):
    from semiret.data import Collection

    training_set = TrainingSet.from_collection(Collection(beir_dir), "test")
    pools = bm25_pools(training_set, depth=3)
    assert pools["q2"] and not set(pools["q2"]) & training_set.positives["q2"]
    sampler = PooledNegatives(pools, training_set.documents, training_set.positives, per_query=3)
    for drawn in sampler.sample(["q1", "q2", "q3"], random.Random(0)):
        assert len(drawn) == 3
    assert all(d.id not in training_set.positives["q2"] for d in sampler.sample(["q2"], random.Random(1))[0])


@pytest.mark.parametrize("changes, message", [
    ({"positions": 0}, "at least 1 decoder position"),
    ({"temperature": 0.0}, "temperature must be positive"),
    ({"hard_negatives": -1}, "hard_negatives"),
    ({"finetune_epochs": 0, "pretrain_corpora": ["none"]}, "nothing to train"),
    ({"encoder_learning_rate": 0.0}, r"encoder.learning.rate.* must be positive"),
    ({"score": "log-softmax"}, "residual document model adds logits"),
])
def test_bad_training_configurations_fail_before_any_work(changes, message, tmp_path):
    with pytest.raises(SemiretError, match=message):
        train_nail(NailTrainingConfig(output=str(tmp_path / "run"), base="no-such-model", **changes))


def test_train_nail_runs_both_stages_resumes_and_saves_a_model_the_retrievers_open(tiny_bert, beir_dir, tmp_path,
                                                                                   monkeypatch):
    from semiret.models.nail import NailModel
    from semiret.search import open_retriever
    from semiret.search.nail import BM25NailRetriever
    from semiret.training.contrastive import TokenSetContrastiveLoss

    config = dict(data=str(beir_dir), split="test", output=str(tmp_path / "run"), base=str(tiny_bert), positions=2,
                  decoder_layers=1, max_length=32, pretrain_epochs=1, pretrain_batch_size=4, finetune_epochs=2,
                  batch_size=2, hard_negatives=1, threads=1)
    first = recording_loss(monkeypatch, TokenSetContrastiveLoss)
    summary = train_nail(NailTrainingConfig(**config))
    monkeypatch.undo()
    assert [s["stage"] for s in summary["stages"]] == ["pretrain", "finetune"]
    assert len(first) == sum(s["steps_per_epoch"] * s["epochs"] for s in summary["stages"]) > 0
    assert len(summary["stages"][1]["loss_per_epoch"]) == 2
    model_dir = tmp_path / "run" / "model"
    marker = json.loads((model_dir / "nail.json").read_text())
    assert marker["config"]["positions"] == 2
    from semiret.search.catalog import _trained_on

    assert _trained_on(marker["training"]) == f"{beir_dir.name} (test)"  # (`semiret models` said nothing of it)
    from safetensors import safe_open

    with safe_open(str(model_dir / "nail-decoder.safetensors"), "pt") as saved:
        assert saved.get_tensor("position_embeddings").dtype == torch.float16
    before = NailModel.load(str(model_dir)).score_documents(["statins"])
    steps = recording_loss(monkeypatch, TokenSetContrastiveLoss)
    again = train_nail(NailTrainingConfig(**config))  # both stages are done: nothing is trained again
    assert steps == []
    assert again["stages"][0] == summary["stages"][0]
    assert again["stages"][1]["loss_per_epoch"] == summary["stages"][1]["loss_per_epoch"]
    assert NailModel.load(str(model_dir)).score_documents(["statins"]) == pytest.approx(before)
    BM25NailRetriever.build(TINY_DOCS, tmp_path / "index", model=str(model_dir))
    assert open_retriever(tmp_path / "index").search("statins cancer", k=2)


def test_a_finished_pre_training_serves_only_the_run_it_was_made_for(tiny_bert, beir_dir, tmp_path, monkeypatch):
    """A run stopped after its pre-training reuses that model only with the options it was trained with (another seed,
    batch size or shape is refused, as a resume of its checkpoint is); given more pre-training epochs it goes on from
    the checkpoint; --no-resume starts every stage again, even one stopped early."""
    import shutil

    from semiret.training.contrastive import TokenSetContrastiveLoss

    config = dict(data=str(beir_dir), split="test", output=str(tmp_path / "run"), base=str(tiny_bert), positions=2,
                  decoder_layers=1, max_length=32, pretrain_epochs=1, pretrain_batch_size=4, finetune_epochs=1,
                  batch_size=2, hard_negatives=1, threads=1)
    train_nail(NailTrainingConfig(**config))
    for stage in ("finetune", "model"):  # as a run killed between its stages leaves it
        shutil.rmtree(tmp_path / "run" / stage)
    for changes, message in (({"seed": 5}, "seed"), ({"pretrain_batch_size": 2}, "pretrain_batch_size"),
                             ({"positions": 3}, "another shape")):
        with pytest.raises(SemiretError, match=message):
            train_nail(NailTrainingConfig(**{**config, **changes}))
    steps = recording_loss(monkeypatch, TokenSetContrastiveLoss)
    longer = train_nail(NailTrainingConfig(**{**config, "pretrain_epochs": 2}))  # one more pre-training epoch
    pretrain_steps = longer["stages"][0]["steps_per_epoch"]
    assert len(steps) == pretrain_steps + longer["stages"][1]["steps_per_epoch"]
    assert len(longer["stages"][0]["loss_per_epoch"]) == 2
    monkeypatch.undo()
    (tmp_path / "run" / "finetune" / "checkpoint" / "stale").write_text("")
    fresh = train_nail(NailTrainingConfig(**{**config, "seed": 5}), resume=False)  # every stage again
    assert fresh["config"]["seed"] == 5 and len(fresh["stages"][0]["loss_per_epoch"]) == 1
    assert not (tmp_path / "run" / "finetune" / "checkpoint" / "stale").exists()
    for stage in ("finetune", "model"):
        shutil.rmtree(tmp_path / "run" / stage)
    other = train_nail(NailTrainingConfig(**{**config, "seed": 5, "batch_size": 1}))  # fine-tuning's own: served
    assert other["stages"][0] == fresh["stages"][0]


def test_a_finished_run_given_more_pre_training_fine_tunes_the_new_pre_trained_model(tiny_bert, beir_dir, tmp_path,
                                                                                  monkeypatch):
    """A finished run resumed with more pre-training epochs pre-trained on, then resumed its finished fine-tuning,
    made from the earlier pre-training: nothing was fine-tuned, and the model lacked the new pre-training. The
    fine-tuning starts again from the new pre-trained model."""
    from semiret.training.contrastive import TokenSetContrastiveLoss

    config = dict(data=str(beir_dir), split="test", output=str(tmp_path / "run"), base=str(tiny_bert), positions=2,
                  decoder_layers=1, max_length=32, pretrain_epochs=1, pretrain_batch_size=4, finetune_epochs=1,
                  batch_size=2, hard_negatives=1, threads=1)
    train_nail(NailTrainingConfig(**config))
    steps = recording_loss(monkeypatch, TokenSetContrastiveLoss)
    longer = train_nail(NailTrainingConfig(**{**config, "pretrain_epochs": 2}))
    pretrain, finetune = longer["stages"]
    assert len(steps) == pretrain["steps_per_epoch"] + finetune["steps_per_epoch"]  # the new epoch, then fine-tuning
    assert len(pretrain["loss_per_epoch"]) == 2 and len(finetune["loss_per_epoch"]) == 1


def test_teachers_add_an_in_batch_distillation_term_to_both_stages(tiny_bert, beir_dir, tmp_path):
    config = dict(data=str(beir_dir), split="test", output=str(tmp_path / "run"), base=str(tiny_bert), positions=2,
                  decoder_layers=1, max_length=32, pretrain_epochs=1, pretrain_batch_size=4, finetune_epochs=1,
                  batch_size=2, hard_negatives=1, threads=1, teachers=f"dense:{tiny_bert},bm25")
    summary = train_nail(NailTrainingConfig(**config))
    for stage in summary["stages"]:  # the pseudo pairs' passages and the qrels' documents are both scored
        terms = stage["terms_per_epoch"][0]
        assert terms["kl"] > 0 and terms["contrastive"] > 0
        assert stage["loss_per_epoch"][0] == pytest.approx(terms["contrastive"] + terms["kl"], rel=1e-3)
    with pytest.raises(SemiretError, match="unknown teacher"):
        train_nail(NailTrainingConfig(**{**config, "teachers": "bm26"}))


def test_the_train_command_takes_every_option_as_a_flag(monkeypatch):
    from typer.testing import CliRunner

    from semiret.methods import cli

    seen = []
    monkeypatch.setitem(cli.RECIPES, "nail", (NailTrainingConfig, lambda config, resume: seen.append(config)
                                              or {"config": {}}, "NAIL"))
    result = CliRunner().invoke(cli.train_app, ["nail", "--positions", "8", "--score", "logits", "--attention",
                                                "causal", "--hard-negatives", "7", "--temperature", "0.5",
                                                "--pretrain", "none", "--threads", "1", "--no-residual",
                                                "--encoder-learning-rate", "1e-4"])
    assert result.exit_code == 0, result.output
    assert seen == [NailTrainingConfig(positions=8, score="logits", attention="causal", hard_negatives=7,
                                       temperature=0.5, pretrain_corpora=["none"], threads=1, residual=False,
                                       encoder_learning_rate=1e-4)]
    assert not seen[0].model_config().residual
