"""The encoding device: the CPU unless set, set for a block only, and named in the error when it is wrong."""

from __future__ import annotations

import os

import pytest
import torch

from semiret.errors import SemiretError
from semiret.models.devices import (ENCODING_DEVICE_VARIABLE, encoding_device, encoding_on, set_encoding_device,
                                    to_encoding_device)


def test_the_cpu_unless_set_and_a_block_restores_what_was_set(monkeypatch):
    monkeypatch.delenv(ENCODING_DEVICE_VARIABLE, raising=False)
    assert encoding_device() == torch.device("cpu")
    with encoding_on("cpu") as device:
        assert device == torch.device("cpu") and encoding_device() == device
    assert ENCODING_DEVICE_VARIABLE not in os.environ
    monkeypatch.setenv(ENCODING_DEVICE_VARIABLE, "auto")
    with encoding_on("cpu"):
        assert encoding_device() == torch.device("cpu")
    assert os.environ[ENCODING_DEVICE_VARIABLE] == "auto"
    model = torch.nn.Linear(2, 2)
    assert to_encoding_device(model) is model and model.weight.device.type == ("cuda" if torch.cuda.is_available()
                                                                                 else "cpu")


def test_a_wrong_device_is_refused_before_it_is_set_and_a_wrong_variable_is_named(monkeypatch):
    monkeypatch.setenv(ENCODING_DEVICE_VARIABLE, "cpu")
    with pytest.raises(SemiretError, match="unknown device 'npu'"):
        set_encoding_device("npu")
    assert encoding_device() == torch.device("cpu")
    with pytest.raises(SemiretError, match="unknown device"):
        with encoding_on("npu"):
            pass
    monkeypatch.setenv(ENCODING_DEVICE_VARIABLE, "npu")
    with pytest.raises(SemiretError, match=f"{ENCODING_DEVICE_VARIABLE}=npu: unknown device"):
        encoding_device()
