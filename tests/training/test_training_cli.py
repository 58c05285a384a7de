"""``semiret train <method>``, generated from the recipes' configuration dataclasses: the flags the README and
docs/results.md use keep their names and meanings, and every field is a flag."""

from __future__ import annotations

import re
from dataclasses import fields

import pytest
from typer.testing import CliRunner

from semiret.methods import cli
from semiret.methods.inference_free import InferenceFreeTrainingConfig
from semiret.methods.sidr import SiDRTrainingConfig


@pytest.fixture
def calls(monkeypatch):
    """The (config, resume) each command trains with, instead of training."""
    seen = []
    for name, (config_class, _, help_text) in cli.RECIPES.items():
        monkeypatch.setitem(cli.RECIPES, name, (config_class, lambda config, resume: seen.append((config, resume))
                                                or {"config": {}}, help_text))
    return seen


def _run(*args):
    result = CliRunner().invoke(cli.train_app, list(args))
    assert result.exit_code == 0, result.output
    return result


def test_sidr_flags(calls):
    _run("sidr", "--data", "scifact", "--output", "runs/x", "--no-semi-parametric", "--negatives", "none",
         "--loss-form", "code", "--threads", "2", "--seed", "7", "--epochs", "3", "--no-resume")
    config, resume = calls[-1]
    assert config == SiDRTrainingConfig(data="scifact", output="runs/x", semi_parametric=False, negatives="none",
                                        loss_form="code", threads=2, seed=7, epochs=3)
    assert resume is False
    _run("sidr")
    assert calls[-1] == (SiDRTrainingConfig(), True)  # every default is the dataclass's


def test_the_run_folder_answers_to_out_and_o_as_an_index_does(calls):
    """``semiret index --out`` and ``train --output`` differed; every command now takes all three spellings."""
    for flag in ("--out", "-o"):
        _run("sidr", flag, "runs/y")
        assert calls[-1][0].output == "runs/y"


def test_optional_numbers_with_a_default_take_none_on_the_command_line(calls):
    """``--encoder-learning-rate`` said "none: the stage's rate" in its help, and the command line refused none."""
    from semiret.methods.nail import NailTrainingConfig

    _run("nail", "--encoder-learning-rate", "none", "--pretrain-pairs-per-epoch", "None")
    config = calls[-1][0]
    assert config.encoder_learning_rate is None and config.pretrain_pairs_per_epoch is None
    _run("nail", "--encoder-learning-rate", "1e-4")
    assert calls[-1][0].encoder_learning_rate == 1e-4
    assert calls[-1][0].pretrain_pairs_per_epoch == NailTrainingConfig.pretrain_pairs_per_epoch == 2048
    result = CliRunner().invoke(cli.train_app, ["nail", "--encoder-learning-rate", "fast"])
    assert result.exit_code == 2 and "--encoder-learning-rate" in result.output


def test_inference_free_flags(calls):
    _run("inference-free", "--data", "scifact", "--pretrain", "none", "--teacher-cache", "runs/t", "--idf",
         "corpus:vaswani", "--no-idf-aware", "--no-normalize-teachers", "--no-fit-student-scale",
         "--pretrain-in-batch-negatives", "--finetune-epochs", "0", "--no-document-threshold", "--threads", "2",
         "--resume")
    config, resume = calls[-1]
    assert config == InferenceFreeTrainingConfig(
        data="scifact", pretrain_corpora=["none"], teacher_cache="runs/t", idf="corpus:vaswani", idf_aware=False,
        normalize_teachers=False, fit_student_scale=False, pretrain_in_batch_negatives=True, finetune_epochs=0,
        choose_document_threshold=False, threads=2)
    assert resume is True and config.pretraining() == []
    _run("inference-free", "--data", "scifact", "--pretrain", "vaswani", "--pretrain", "scifact")
    assert calls[-1][0].pretraining() == ["vaswani", "scifact"]
    _run("inference-free", "--data", "scifact")
    assert calls[-1][0].pretrain_corpora is None and calls[-1][0].pretraining() == ["scifact"]  # default: --data
    assert calls[-1][0].choose_document_threshold is True


@pytest.mark.parametrize("command, config", [("sidr", SiDRTrainingConfig),
                                             ("inference-free", InferenceFreeTrainingConfig)])
def test_every_field_is_a_flag_and_the_documented_flags_exist(command, config):
    from semiret.cli import app

    help_text = CliRunner().invoke(app, ["train", command, "--help"], env={"COLUMNS": "400"}).stdout
    flags = set(re.findall(r"--[a-z0-9-]+", help_text))
    for field in fields(config):
        flag = field.metadata.get("flag", "--" + field.name.replace("_", "-")).split("/")[0]
        assert flag in flags, flag
    documented = {
        "sidr": ["--data", "--output", "--no-semi-parametric", "--negatives", "--loss-form", "--threads", "--seed",
                 "--resume", "--no-resume"],
        "inference-free": ["--data", "--output", "--pretrain", "--document-threshold", "--no-document-threshold",
                           "--teacher-cache", "--idf", "--no-idf-aware", "--no-normalize-teachers",
                           "--no-fit-student-scale", "--fit-student-scale", "--pretrain-in-batch-negatives",
                           "--finetune-epochs", "--finetune-flops-weight", "--finetune-learning-rate",
                           "--pretrain-queries-per-epoch", "--split", "--threads", "--seed", "--resume", "--no-resume"],
    }[command]
    assert set(documented) <= flags, set(documented) - flags


def test_one_summary_line_under_torchrun(monkeypatch, beir_dir, tmp_path):
    """Only the main process prints the run's summary (under torchrun every rank runs the command)."""
    import semiret.training.distributed as distributed

    config_class, _, help_text = cli.RECIPES["sidr"]
    monkeypatch.setitem(cli.RECIPES, "sidr", (config_class, lambda config, resume: {"model": "m"}, help_text))
    for main, printed in ((True, '{"model": "m"}'), (False, "")):
        monkeypatch.setattr(distributed, "is_main_process", lambda main=main: main)
        result = CliRunner().invoke(cli.train_app, ["sidr", "--data", str(beir_dir), "--output", str(tmp_path / "run")])
        assert result.exit_code == 0, result.output
        assert result.stdout.strip() == printed


def test_a_finished_run_gets_a_model_card_but_a_readme_the_user_wrote_is_kept(monkeypatch, beir_dir, tmp_path):
    from semiret.models.checkpoints import SIDR

    def saving(config, resume):  # what a recipe leaves: <output>/model, marked, with its training record
        model = tmp_path / "run" / "model"
        model.mkdir(parents=True, exist_ok=True)
        SIDR.write_marker(model, training={"config": {"data": config.data, "split": "train", "base": "splade-tiny"}})
        return {"model": str(model)}

    config_class, _, help_text = cli.RECIPES["sidr"]
    monkeypatch.setitem(cli.RECIPES, "sidr", (config_class, saving, help_text))
    readme = tmp_path / "run" / "model" / "README.md"
    _run("sidr", "--data", str(beir_dir), "--output", str(tmp_path / "run"))
    assert readme.read_text().startswith("---\nlibrary_name: semiret\n") and "-r sidr-full" in readme.read_text()
    readme.write_text("# My SiDR\n")
    _run("sidr", "--data", str(beir_dir), "--output", str(tmp_path / "run"))
    assert readme.read_text() == "# My SiDR\n"


def test_an_adapted_model_gets_a_model_card(monkeypatch, beir_dir, tmp_path):
    """``semiret adapt`` writes the card of the model it keeps, as ``semiret train`` does; an estimate writes none."""
    from semiret.cli import app
    from semiret.methods import adapt
    from semiret.models.checkpoints import SIDR

    def adapting(config, confirm):  # what adapt leaves: <output>/model, marked, and its report naming it
        if not confirm(1.0):
            return {"estimate_seconds": 1.0}
        model = tmp_path / "adapted" / "model"
        model.mkdir(parents=True, exist_ok=True)
        SIDR.write_marker(model, training={"config": {"data": config.data, "base": "sidr-scifact"}})
        return {"model": str(model)}

    monkeypatch.setattr(adapt, "adapt", adapting)
    arguments = ["adapt", "--data", str(beir_dir), "--model", "sidr-scifact", "--output", str(tmp_path / "adapted")]
    estimated = CliRunner().invoke(app, [*arguments, "--estimate-only"])
    assert estimated.exit_code == 0, estimated.output
    assert not (tmp_path / "adapted").exists()
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 0, result.output
    card = (tmp_path / "adapted" / "model" / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: semiret\n") and "-r sidr-full" in card


def test_an_interrupted_run_says_how_to_resume(monkeypatch, beir_dir, tmp_path, caplog):
    def interrupted(config, resume):
        raise KeyboardInterrupt

    config_class, _, help_text = cli.RECIPES["sidr"]
    monkeypatch.setitem(cli.RECIPES, "sidr", (config_class, interrupted, help_text))
    result = CliRunner().invoke(cli.train_app, ["sidr", "--data", str(beir_dir), "--output", str(tmp_path / "run")])
    assert result.exit_code != 0 and "interrupted: " in caplog.text and "the same command resumes from it" in caplog.text
