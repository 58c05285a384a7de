"""``--device``: what each name means here, clear errors before any compute for devices this machine lacks,
no mixed precision off CUDA, and the flags every ``semiret train`` command has."""

from __future__ import annotations

import pytest
import torch

from semiret.errors import SemiretError
from semiret.models.devices import resolve_device
from semiret.training.config import Schedule, TrainingConfig
from semiret.training.devices import MixedPrecision
from semiret.training.distributed import encode_rows


def test_auto_is_cuda_when_present_else_the_cpu():
    expected = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    assert resolve_device("auto") == expected
    assert resolve_device("cpu") == torch.device("cpu")


@pytest.mark.parametrize("name, message", [("tpu", "unknown device"), ("gpu", "unknown device"),
                                           ("cuda:99", "not available"), ("mps:0", "not available")])
def test_unknown_or_missing_devices_are_errors(name, message):
    if name == "mps:0" and torch.backends.mps.is_available():
        pytest.skip("this machine has MPS")
    with pytest.raises(SemiretError, match=message):
        resolve_device(name)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_without_a_gpu_fails_when_the_trainer_is_made(tmp_path):
    from semiret.training.trainer import Trainer

    with pytest.raises(SemiretError, match="sees no CUDA GPU"):
        Trainer(torch.nn.Linear(1, 1), None, [None], TrainingConfig(device="cuda"), Schedule(1, 0.1), tmp_path)


def test_no_mixed_precision_on_the_cpu():
    precision = MixedPrecision(torch.device("cpu"))
    assert precision.dtype is None and precision.scaler is None and precision.state_dict() == {}


def test_encoding_in_one_process_is_the_encoder_call_itself():
    encoded = torch.ones(2, 3)
    assert encode_rows(lambda items: encoded, ["a", "b"]) is encoded


def test_every_train_command_has_the_device_flags():
    from typer.testing import CliRunner

    from semiret.cli import app
    from semiret.methods.cli import RECIPES

    for name in RECIPES:
        help_text = CliRunner().invoke(app, ["train", name, "--help"], env={"COLUMNS": "400"}).stdout
        assert "--device" in help_text and "--no-mixed-precision" in help_text, name


def test_neural_teachers_encode_on_the_device_they_are_given(tiny_bert):
    from semiret.training.teachers import make_teacher

    # "meta" stands in for a GPU: a device this CPU machine can place modules on
    assert make_teacher("dense", str(tiny_bert), device="meta").encoder.device.type == "meta"
    assert make_teacher("dense", str(tiny_bert)).encoder.device.type == "cpu"
    assert make_teacher("sparse", str(tiny_bert), device="meta").encoder.device.type == "meta"  # off the CPU path
    assert make_teacher("sparse", str(tiny_bert)).encoder.device.type == "cpu"
    assert make_teacher("bm25", "bm25", device="meta").encode_documents(["a b", "b c"]).shape[0] == 2  # scipy
