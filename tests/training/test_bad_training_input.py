"""Bad training input fails before any compute with a message naming the option or file, and a run folder left
by another run or a damaged checkpoint is an error to act on, not a traceback or a silently mixed run."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from helpers import TINY_DOCS, leftovers, write_beir

from semiret.data import Document
from semiret.errors import SemiretError
from semiret.training.config import Schedule, TrainingConfig
from semiret.training.data import BatchSource, seeded
from semiret.training.losses import Loss, LossOutput
from semiret.training.trainer import STATE_FILE, Trainer, saved_history


@pytest.mark.parametrize("options, message", [
    ({"learning_rate": -1.0}, r"learning_rate \(--learning-rate\) must be positive, got -1.0"),
    ({"learning_rate": 0.0}, r"--learning-rate\) must be positive"),
    ({"learning_rate": float("nan")}, r"--learning-rate\) must be a finite number, got nan"),
    ({"warmup_epochs": float("nan")}, r"--warmup-epochs\) must be a finite number"),
    ({"warmup_epochs": -1.0}, r"--warmup-epochs\) must be non-negative"),
    ({"max_grad_norm": -1.0}, r"--max-grad-norm\) must be non-negative"),  # clipping by it flips gradients
    ({"max_grad_norm": float("inf")}, r"--max-grad-norm\) must be a finite number"),
    ({"threads": -2}, r"--threads\) must be at least 1"),
    ({"batch_size": 0}, r"--batch-size\) must be at least 1"),
])
def test_nonsense_numbers_name_their_option(options, message):
    from semiret.methods.sidr import SiDRTrainingConfig

    with pytest.raises(SemiretError, match=message):
        SiDRTrainingConfig(**options)


def test_recipes_with_their_own_post_init_check_numbers_too():
    from semiret.methods.gdr import GDRTrainingConfig
    from semiret.methods.hce import HCETrainingConfig
    from semiret.methods.inference_free import InferenceFreeTrainingConfig
    from semiret.methods.nail import NailTrainingConfig

    # each was accepted, then trained on (a FLOPS warm-up twice the run), looped or failed deep in the run
    for config, options, message in [
            (InferenceFreeTrainingConfig, {"flops_warmup_fraction": 2.0}, r"--flops-warmup-fraction\) must be a share"),
            (InferenceFreeTrainingConfig, {"mining_depth": 0}, r"--mining-depth\) must be at least 1, got 0"),
            (HCETrainingConfig, {"unsupervised_batch_size": 0}, r"--unsupervised-batch-size\) must be at least 1"),
            (HCETrainingConfig, {"kmeans_iterations": 0}, r"--kmeans-iterations\) must be at least 1"),
            (NailTrainingConfig, {"pretrain_pairs_per_epoch": 0}, r"--pretrain-pairs-per-epoch\) must be at least 1"),
            (GDRTrainingConfig, {"query_max_length": 1}, r"--query-max-length\) must be at least 2")]:
        with pytest.raises(SemiretError, match=message):
            config(**options)

    with pytest.raises(SemiretError, match=r"--finetune-learning-rate\) must be positive"):
        NailTrainingConfig(finetune_learning_rate=0.0)
    with pytest.raises(SemiretError, match=r"--temperature\) must be a finite number"):
        HCETrainingConfig(temperature=float("nan"))


def test_an_output_that_is_a_file_is_named(tmp_path):
    data = write_beir(tmp_path / "data", split="train")
    (tmp_path / "run").write_text("not a folder")
    for output in (tmp_path / "run", tmp_path / "run" / "inner"):
        with pytest.raises(SemiretError, match=r"run is a file, not a folder"):
            TrainingConfig(data=str(data), output=str(output)).resolved()


def test_a_run_never_writes_over_the_model_it_starts_from(tmp_path):
    """`train sidr --base runs/a/model --output runs/a` replaced its own base; a resume then averaged with the
    replacement. Refused before anything loads, for every recipe's starting models."""
    from typer.testing import CliRunner

    from semiret.cli import app

    data = write_beir(tmp_path / "data", split="train")
    (tmp_path / "a" / "model").mkdir(parents=True)
    for recipe, start in (("sidr", "--base"), ("gdr", "--document-encoder")):
        result = CliRunner().invoke(app, ["train", recipe, "--data", str(data), start, str(tmp_path / "a" / "model"),
                                          "--output", str(tmp_path / "a")])
        assert result.exit_code == 2 and "never overwrites a model's files" in result.output, result.output
    from semiret.data.packaged import check_run_output

    (tmp_path / "bases" / "start").mkdir(parents=True)
    check_run_output(tmp_path, (tmp_path / "bases" / "start",))  # held elsewhere in the output: not written over
    for start in (tmp_path / "a", tmp_path / "a" / "model" / "inner"):
        with pytest.raises(SemiretError, match="never overwrites"):
            check_run_output(tmp_path / "a", (start,))


# ------------------------------------------------------------------ checkpoints
class Numbers(BatchSource):
    def epoch(self, rng):
        order = list(range(8))
        rng.shuffle(order)
        return seeded([order[:4], order[4:]], rng)


class Regression(Loss):
    def __call__(self, model, batch, step):
        x = torch.tensor(batch.items, dtype=torch.float32)[:, None]
        return LossOutput(((model(x) - 3 * x) ** 2).mean())


def _trainer(output, width=1, epochs=2, **config):
    return Trainer(torch.nn.Linear(1, width, bias=False), Regression(), Numbers(), TrainingConfig(seed=1, **config),
                   Schedule(epochs, learning_rate=0.05), output)


def test_saving_a_checkpoint_again_replaces_it_and_leaves_nothing_behind(tmp_path):
    _trainer(tmp_path, epochs=2).train()
    assert json.loads((tmp_path / "checkpoint" / STATE_FILE).read_text())["epoch"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"] and leftovers(tmp_path) == []


@pytest.mark.parametrize("damage, error", [
    (lambda c: (c / "model.safetensors").write_bytes(b"\x00" * 10), "SafetensorError"),
    (lambda c: (c / "optimizer.pt").write_bytes(b"truncated"), "optimizer|pickle|zip|Unpickling"),
    (lambda c: (c / "optimizer.pt").unlink(), "FileNotFoundError"),
    (lambda c: (c / STATE_FILE).write_text('{"epoch": 1,'), "JSONDecodeError"),
    (lambda c: (c / STATE_FILE).write_text("[]"), "expected a JSON object"),
])
def test_a_damaged_checkpoint_is_an_error_that_says_what_to_do(tmp_path, damage, error):
    _trainer(tmp_path, epochs=1).train()
    damage(tmp_path / "checkpoint")
    with pytest.raises(SemiretError, match=rf"cannot resume from .*checkpoint.*({error}).*--no-resume"):
        _trainer(tmp_path).train()
    assert len(_trainer(tmp_path).train(resume=False)) == 2  # starting again works


def test_saved_history_of_a_damaged_checkpoint_is_an_error(tmp_path):
    _trainer(tmp_path, epochs=1).train()
    (tmp_path / "checkpoint" / STATE_FILE).write_text("{")
    with pytest.raises(SemiretError, match="cannot resume from"):
        saved_history(tmp_path)


def test_resuming_another_models_checkpoint_names_the_changed_options(tmp_path, caplog):
    _trainer(tmp_path, epochs=1, max_grad_norm=1.0).train()
    with pytest.raises(SemiretError, match=r"saved with other options: max_grad_norm: 1.0 -> 3.0\).*--no-resume"):
        _trainer(tmp_path, width=2, max_grad_norm=3.0).train()
    _trainer(tmp_path, max_grad_norm=3.0, threads=1).train()  # the same model: resumed, the change warned of
    assert "max_grad_norm: 1.0 -> 3.0" in caplog.text and "threads" not in caplog.text


def test_a_resume_refuses_options_it_could_not_take_up_and_no_resume_forgets_the_old_run(tmp_path, monkeypatch):
    """A seed (or a learning rate, batch size, data) other than the checkpoint's would not be used, the optimizer
    and random state being the checkpoint's, but recorded as if it were: refused. Starting again (resume=False)
    removes the old checkpoint first, so a new run stopped before its first one does not bring the old run back."""
    _trainer(tmp_path, epochs=1).train()
    trainer = Trainer(torch.nn.Linear(1, 1, bias=False), Regression(), Numbers(), TrainingConfig(seed=7),
                      Schedule(2, learning_rate=0.05), tmp_path)
    with pytest.raises(SemiretError, match=r"trained with other seed: 1 -> 7, which a resumed run cannot take up.*"
                                           r"--no-resume"):
        trainer.train()
    monkeypatch.setattr(Trainer, "save_checkpoint", lambda self: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):  # stopped at the end of its first epoch, before its checkpoint
        trainer.train(resume=False)
    assert not (tmp_path / "checkpoint").exists()


# ------------------------------------------------------------------ caches a run folder keeps
def test_a_new_sidr_run_in_an_old_run_folder_mines_from_its_own_corpus(tmp_path, tiny_bert):
    from semiret.methods.sidr import SiDRTrainingConfig, train_sidr
    from semiret.search import BagOfTokensRetriever

    config = dict(output=str(tmp_path / "run"), base=str(tiny_bert), epochs=1, batch_size=3, top_k=64, pool_size=2,
                  retrieve_depth=4, query_max_length=16, document_max_length=16, threads=1)
    train_sidr(SiDRTrainingConfig(data=str(write_beir(tmp_path / "small", split="train")), **config))
    more = TINY_DOCS + [Document(f"x{i}", f"filler document number {i}") for i in range(4)]
    train_sidr(SiDRTrainingConfig(data=str(write_beir(tmp_path / "more", docs=more, split="train")), **config),
               resume=False)
    assert BagOfTokensRetriever.open(tmp_path / "run" / "bot-index").index.describe()["documents"] == len(more)


def test_gdr_clusters_of_another_corpus_are_not_resumed_silently(tmp_path):
    from semiret.methods.gdr import GDRTrainingConfig, cluster_corpus

    config = GDRTrainingConfig(output=str(tmp_path), branching=2, leaf_size=2)
    vectors = np.random.default_rng(0).normal(size=(6, 4)).astype(np.float32)
    documents = [Document(f"d{i}", f"text {i}") for i in range(6)]
    cluster_corpus(config, vectors, documents, resume=False)
    assert cluster_corpus(config, vectors, documents, resume=True).document_ids[0] == "d0"
    with pytest.raises(SemiretError, match=r"clusters other documents \(6\).*\(5\).*--no-resume"):
        cluster_corpus(config, vectors[:5], [Document(f"e{i}", "x") for i in range(5)], resume=True)
    with pytest.raises(SemiretError, match=r"clusters other documents \(6\).*\(6\).*--no-resume"):  # same ids, new texts
        cluster_corpus(config, vectors, [Document(d.id, "another text") for d in documents], resume=True)
