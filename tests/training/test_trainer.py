"""The trainer: a loss object's named terms on the progress bar and averaged per epoch into the run's JSON,
divergence and empty sources, checkpoints of an older trainer, and resuming (a toy model, then both recipes)
to exactly what an uninterrupted run computes."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from helpers import MSMARCO_IDF, Crash, checkpointed_weights, recording_loss, write_beir

from semiret.errors import SemiretError
from semiret.training import trainer as trainer_module
from semiret.training.config import Schedule, TrainingConfig
from semiret.training.data import BatchSource, seeded
from semiret.training.losses import Loss, LossOutput
from semiret.training.trainer import STATE_FILE, Trainer, epoch_summary


class Numbers(BatchSource):
    """Batches of ``size`` numbers out of ``count``, shuffled."""

    def __init__(self, count: int = 12, size: int = 4):
        self.count, self.size = count, size

    def epoch(self, rng):
        order = list(range(self.count))
        rng.shuffle(order)
        return seeded([order[i: i + self.size] for i in range(0, self.count, self.size)], rng)


class Regression(Loss):
    """Fit ``w * x`` to ``3 x`` (plus noise drawn from the batch's seed); terms: the error and the step."""

    def __call__(self, model, batch, step):
        x = torch.tensor(batch.items, dtype=torch.float32)
        noise = torch.tensor([batch.random().gauss(0, 0.1) for _ in batch.items])
        error = ((model(x[:, None]).squeeze(1) - 3 * x - noise) ** 2).mean()
        return LossOutput(error, {"error": error.item(), "step": float(step)})


def _trainer(tmp_path, epochs=3, loss=None, batches=None):
    torch.manual_seed(0)
    model = torch.nn.Linear(1, 1, bias=False)
    return Trainer(model, loss or Regression(), Numbers() if batches is None else batches, TrainingConfig(seed=7),
                   Schedule(epochs, learning_rate=0.05, warmup_epochs=0.5), tmp_path)


def test_terms_are_shown_and_averaged_per_epoch_into_the_state(tmp_path, monkeypatch):
    shown = []
    monkeypatch.setattr(trainer_module.StepBar, "advance", lambda self, figures="": shown.append(figures))
    history = _trainer(tmp_path).train()
    assert len(shown) == 9 and all("error" in s and " step " in s for s in shown)
    assert [h.terms["step"] for h in history] == [1.0, 4.0, 7.0]  # the mean of steps 0-2, 3-5, 6-8
    assert history[-1].terms["error"] < history[0].terms["error"]
    state = json.loads((tmp_path / "checkpoint" / STATE_FILE).read_text())
    assert [h["terms"]["step"] for h in state["history"]] == [1.0, 4.0, 7.0]
    summary = epoch_summary(history)
    assert summary["terms_per_epoch"][1] == {"error": round(history[1].terms["error"], 4), "step": 4.0}
    assert summary["loss_per_epoch"] == [round(h.mean_loss, 4) for h in history]


def test_a_long_task_says_how_far_it_is_where_output_goes_to_a_file(monkeypatch, capsys):
    """No terminal, no bar to redraw: a line every PLAIN_REPORT_SECONDS says how far a task is (none for a quick one)."""
    from semiret import progress

    progress.set_enabled(True)
    assert not progress.CONSOLE.is_terminal  # pytest captures standard error
    assert list(progress.track(range(5), "quick", total=5)) == list(range(5))
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(progress, "PLAIN_REPORT_SECONDS", 0.0)
    assert list(progress.track(range(3), "indexing (bm25)", total=300, advance=lambda item: 100)) == [0, 1, 2]
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3 and lines[-1].startswith("indexing (bm25): 300/300 in ")
    with progress.StepBar("epoch 1/1", 2) as bar:
        bar.advance("loss 0.5")
    assert capsys.readouterr().err.strip().endswith("s loss 0.5")


def test_each_finished_epoch_is_reported_where_output_goes_to_a_file(tmp_path, capsys):
    """The epoch's loss was logged at INFO, below what the command line shows, and the bars vanish when done: a
    run whose output went to a file had no per-epoch loss."""
    from semiret import progress

    progress.set_enabled(True)
    history = _trainer(tmp_path, epochs=2).train(after_epoch=lambda epoch: {"dev nDCG@10": 0.5 + epoch / 10})
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("epoch ")]
    assert len(lines) == 2 and lines[1].startswith(f"epoch 2/2: loss {history[1].mean_loss:.4f}, error ")
    assert "dev nDCG@10 0.7" in lines[1] and lines[1].endswith(" s)")


def test_a_resumed_run_ends_where_an_uninterrupted_one_does(tmp_path):
    whole = _trainer(tmp_path / "whole")
    whole.train()

    class CrashingAt(Regression):
        def __call__(self, model, batch, step):
            if step == 7:
                raise Crash
            return super().__call__(model, batch, step)

    class Recording(Regression):
        def __call__(self, model, batch, step):
            steps.append(step)
            return super().__call__(model, batch, step)

    with pytest.raises(Crash):
        _trainer(tmp_path / "resumed", loss=CrashingAt()).train()
    steps = []
    resumed = _trainer(tmp_path / "resumed", loss=Recording())
    resumed.train()
    assert steps == [6, 7, 8]  # the third epoch alone: the first two come from the checkpoint
    assert [asdict_without_time(h) for h in resumed.history] == [asdict_without_time(h) for h in whole.history]
    assert torch.equal(resumed.model.weight, whole.model.weight)


def test_a_resume_with_another_learning_rate_warmup_or_epoch_length_is_refused(tmp_path, caplog):
    """The Python API's resume, as the recipes': what the checkpoint's optimizer and schedule were made with (the
    schedule's learning rate and warm-up, the batches an epoch has) cannot change; the number of epochs can."""
    first = _trainer(tmp_path, epochs=1)
    first.train()
    torch.manual_seed(0)
    for schedule, batches, named in [(Schedule(3, learning_rate=0.5, warmup_epochs=0.5), Numbers(), "learning_rate"),
                                     (Schedule(3, learning_rate=0.05, warmup_epochs=2), Numbers(), "warmup_epochs"),
                                     (Schedule(3, learning_rate=0.05, warmup_epochs=0.5), Numbers(size=2),
                                      "steps_per_epoch: 3 -> 6")]:
        other = Trainer(torch.nn.Linear(1, 1, bias=False), Regression(), batches, TrainingConfig(seed=7), schedule,
                        tmp_path)
        with pytest.raises(SemiretError, match=f"other .*{named}"):
            other.train()
    longer = _trainer(tmp_path, epochs=2)
    longer.train()
    assert [h.epoch for h in longer.history] == [1, 2]


def asdict_without_time(entry):
    return (entry.epoch, entry.steps, entry.mean_loss, entry.terms)


def test_checkpoints_of_the_previous_trainer_resume(tmp_path):
    """Its history entries had ``extra`` and no ``terms``."""
    _trainer(tmp_path, epochs=2).train()
    state_file = tmp_path / "checkpoint" / STATE_FILE
    state = json.loads(state_file.read_text())
    for entry in state["history"]:
        del entry["terms"]
        entry["extra"] = {}
    state_file.write_text(json.dumps(state))
    more = _trainer(tmp_path, epochs=3)
    assert more.resume() and more.start_epoch == 2 and more.history[0].terms == {}
    assert len(more.train()) == 3


def test_divergence_and_empty_sources_are_errors(tmp_path):
    class Infinite(Loss):
        def __call__(self, model, batch, step):
            return LossOutput(model(torch.ones(1, 1)).sum() * float("inf"))

    with pytest.raises(SemiretError, match="diverged"):
        _trainer(tmp_path / "a", loss=Infinite()).train()
    with pytest.raises(SemiretError, match="no batches"):
        _trainer(tmp_path / "b", batches=Numbers(count=0))


# ------------------------------------------------------------------ the recipes, interrupted and resumed
def test_sidr_resumes_to_the_uninterrupted_run(tmp_path, tiny_bert, monkeypatch):
    """Retrieved negatives are drawn with each batch's seed, so a resumed run draws the same ones."""
    from semiret.methods.sidr import SiDRTrainingConfig, train_sidr
    from semiret.training.contrastive import SemiParametricLoss

    root = write_beir(tmp_path / "tiny", split="train")
    config = dict(data=str(root), base=str(tiny_bert), epochs=2, batch_size=3, learning_rate=1e-3, top_k=30000,
                  pool_size=3, retrieve_depth=5, query_max_length=16, document_max_length=32)
    whole = recording_loss(monkeypatch, SemiParametricLoss)
    train_sidr(SiDRTrainingConfig(output=str(tmp_path / "whole"), **config))
    monkeypatch.undo()
    recording_loss(monkeypatch, SemiParametricLoss, crash_at=3)
    with pytest.raises(Crash):
        train_sidr(SiDRTrainingConfig(output=str(tmp_path / "resumed"), **config))
    monkeypatch.undo()
    resumed = recording_loss(monkeypatch, SemiParametricLoss)
    train_sidr(SiDRTrainingConfig(output=str(tmp_path / "resumed"), **config))
    assert len(whole) == 4 and len(resumed) == 2  # steps 2-3: the second epoch again
    assert resumed == pytest.approx(whole[2:], rel=1e-4)
    difference = np.abs(checkpointed_weights(tmp_path / "resumed") - checkpointed_weights(tmp_path / "whole"))
    # the same to float noise, which Adam can raise to a step of the learning rate where gradients are ~0
    assert difference.mean() < 1e-7 and difference.max() < 2 * config["learning_rate"]


def test_inference_free_resumes_to_the_uninterrupted_run(tmp_path, tiny_bert, monkeypatch):
    """Interrupted in the second fine-tuning epoch: pre-training is loaded, fine-tuning resumes."""
    from semiret.methods.inference_free import (
        InferenceFreeTrainingConfig,
        train_inference_free,
    )
    from semiret.training.distillation import DistillationLoss

    root = write_beir(tmp_path / "tiny", split="train")
    config = dict(data=str(root), base=str(tiny_bert), idf=str(MSMARCO_IDF), teachers=f"sparse:{tiny_bert},bm25",
                  pseudo_queries_per_document=2, pretrain_queries_per_epoch=8, pretrain_epochs=1, finetune_epochs=2,
                  batch_size=2, candidates=3, mining_depth=4, flops_sample=64, pretrain_max_length=24,
                  finetune_max_length=32, finetune_flops_weight=0.5, choose_document_threshold=False,
                  teacher_cache=str(tmp_path / "teachers"))
    whole = recording_loss(monkeypatch, DistillationLoss)
    uninterrupted = train_inference_free(InferenceFreeTrainingConfig(output=str(tmp_path / "whole"), **config))
    monkeypatch.undo()
    recording_loss(monkeypatch, DistillationLoss, crash_at=7)  # pre-training: 4 steps; fine-tuning: 2 epochs of 2
    with pytest.raises(Crash):
        train_inference_free(InferenceFreeTrainingConfig(output=str(tmp_path / "resumed"), **config))
    monkeypatch.undo()
    resumed = recording_loss(monkeypatch, DistillationLoss)
    again = train_inference_free(InferenceFreeTrainingConfig(output=str(tmp_path / "resumed"), **config))
    assert len(whole) == 8 and len(resumed) == 2
    assert resumed == pytest.approx(whole[-2:], rel=1e-5)
    for done, reference in zip(again["stages"], uninterrupted["stages"]):
        assert done["loss_per_epoch"] == reference["loss_per_epoch"]
        for terms, expected in zip(done["terms_per_epoch"], reference["terms_per_epoch"], strict=True):
            assert terms == pytest.approx(expected, rel=1e-4)
    assert set(again["stages"][-1]["terms_per_epoch"][0]) == {"kl", "flops", "nnz", "student_scale",
                                                              "documents_per_query"}


# ------------------------------------------------------------------ learning rates per group, epoch hooks
class TwoParts(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.main = torch.nn.Linear(1, 1, bias=False)
        self.side = torch.nn.Linear(1, 1, bias=False)

    def forward(self, x):
        return self.main(x) + self.side(x)


def test_parameters_named_by_a_prefix_train_at_their_own_rate(tmp_path):
    torch.manual_seed(0)
    model = TwoParts()
    side_before = model.side.weight.detach().clone()
    trainer = Trainer(model, Regression(), Numbers(), TrainingConfig(seed=7), Schedule(2, 0.05, 0.5), tmp_path,
                      learning_rates={"side.": 0.0})
    assert [g["lr"] for g in trainer.optimizer.param_groups] == [0.05, 0.0]
    trainer.train()
    assert torch.equal(model.side.weight, side_before) and model.main.weight.item() != pytest.approx(0.0)


def test_the_epoch_hook_is_recorded_and_not_run_again_on_resume(tmp_path):
    from semiret.training.trainer import saved_history

    calls = []

    def hook(epoch):
        calls.append(epoch)
        return {"dev": epoch / 10}

    _trainer(tmp_path, epochs=2).train(after_epoch=hook)
    assert calls == [1, 2] and [h.notes for h in saved_history(tmp_path)] == [{"dev": 0.1}, {"dev": 0.2}]
    more = _trainer(tmp_path, epochs=3)
    history = more.train(after_epoch=hook)
    assert calls == [1, 2, 3] and history[0].notes == {"dev": 0.1}
    assert saved_history(tmp_path / "nothing") == []


def test_forgetting_a_parameters_optimizer_state(tmp_path):
    trainer = _trainer(tmp_path, epochs=1)
    trainer.train()
    (weight,) = trainer.model.parameters()
    assert weight in trainer.optimizer.state
    trainer.forget_optimizer_state([weight])
    assert weight not in trainer.optimizer.state


def test_the_summary_reports_the_runs_peak_gpu_memory_only_where_there_was_one():
    from semiret.training.trainer import EpochLog, epoch_summary

    cpu_run = [EpochLog(1, 3, 1.0, 2.0), EpochLog(2, 3, 0.5, 2.0)]
    assert "gpu_peak_gb" not in epoch_summary(cpu_run)
    gpu_run = [EpochLog(1, 3, 1.0, 2.0, gpu_peak_gb=10.123), EpochLog(2, 3, 0.5, 2.0, gpu_peak_gb=12.5)]
    assert epoch_summary(gpu_run)["gpu_peak_gb"] == 12.5
    assert EpochLog.from_json({"epoch": 1, "steps": 3, "mean_loss": 1.0, "seconds": 2.0}).gpu_peak_gb is None


def test_the_readme_python_training_path_fine_tunes_an_encoder_and_indexes_with_it(tmp_path, tiny_bert, caplog):
    """README, "Training from Python": an encoder, the in-batch loss object, pairs of a collection, the trainer;
    the loss falls, the saved model indexes; a second train() of the finished run trains nothing and says so."""
    from semiret.data import Collection
    from semiret.models.encoders import load_encoder
    from semiret.search import DenseRetriever
    from semiret.training.contrastive import InBatchContrastiveLoss
    from semiret.training.data import PairBatches, TrainingSet

    collection = Collection(write_beir(tmp_path / "c", split="train"))
    encoder = load_encoder(str(tiny_bert), "dense")
    pairs = TrainingSet.from_collection(collection, "train")

    def trainer():
        return Trainer(encoder, InBatchContrastiveLoss(), PairBatches(pairs, batch_size=3),
                       TrainingConfig(seed=1, threads=1), Schedule(epochs=4, learning_rate=1e-3, warmup_epochs=0),
                       tmp_path / "run")

    torch.set_num_threads(2)
    history = trainer().train()
    assert torch.get_num_threads() == 2  # the run's one thread was its own, not its caller's afterwards
    assert len(history) == 4 and history[-1].mean_loss < history[0].mean_loss
    assert set(history[0].terms) == {"query_to_passage", "passage_to_query"}
    encoder.save(tmp_path / "run" / "model", fp16=True)
    retriever = DenseRetriever.build(collection.corpus(), tmp_path / "index", model=str(tmp_path / "run" / "model"))
    assert retriever.search(pairs.pairs[0].query, k=3)
    with caplog.at_level("WARNING"):
        again = trainer().train()
    assert [h.mean_loss for h in again] == [h.mean_loss for h in history]
    assert "has trained all its 4 epochs: nothing is trained again" in caplog.text


def test_one_bar_at_a_time_where_a_terminal_draws_them(monkeypatch):
    """rich draws one live display at a time (rich 13 raised for a second): a task nested in another, or in another
    thread while one is drawn (two adds a server runs at once), goes without a bar instead of failing."""
    import io
    import threading

    from rich.console import Console

    from semiret import progress

    progress.set_enabled(True)
    monkeypatch.setattr(progress, "CONSOLE", Console(file=io.StringIO(), force_terminal=True))
    assert not progress._no_live_display()
    inner = [list(progress.track(range(3), "inner")) for _ in progress.track(range(2), "outer")]
    assert inner == [[0, 1, 2]] * 2
    started, results = threading.Event(), {}

    def slow():
        for item in progress.track(range(3), "first"):
            started.set()
            threading.Event().wait(0.05)
            results.setdefault("first", []).append(item)

    thread = threading.Thread(target=slow)
    thread.start()
    started.wait(5)
    results["second"] = list(progress.track(range(4), "second"))
    with progress.StepBar("epoch 1/1", 1) as bar:
        bar.advance("loss 0.5")
    thread.join()
    assert results == {"first": [0, 1, 2], "second": [0, 1, 2, 3]}
    assert progress._LIVE.acquire(blocking=False)  # every bar let go of it
    progress._LIVE.release()


def test_a_resume_compares_data_folders_by_where_they_are_and_keeps_every_batch_size(tmp_path, monkeypatch):
    """``small`` run from its parent folder and ``/path/to/small`` are one data folder, not a change refused; every
    stage's batch size (``*batch_size``) and a pre-training's corpora are as fixed as the batch size."""
    from semiret.training.trainer import _changes, _fixed

    (tmp_path / "small").mkdir()
    monkeypatch.chdir(tmp_path)
    assert _changes({"data": "small", "pretrain_corpora": ["small"]},
                    {"data": str(tmp_path / "small"), "pretrain_corpora": [str(tmp_path / "small")]}) == {}
    assert _changes({"data": "small"}, {"data": str(tmp_path / "other")}) == {"data": ("small",
                                                                                        str(tmp_path / "other"))}
    assert all(map(_fixed, ("batch_size", "unsupervised_batch_size", "pretrain_batch_size", "pretrain_corpora",
                            "pretrain_learning_rate", "seed")))
    assert not any(map(_fixed, ("temperature", "epochs", "threads")))
