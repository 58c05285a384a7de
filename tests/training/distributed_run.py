"""What tests/training/test_distributed.py runs under ``torchrun`` (and, with ``WORLD_SIZE`` unset, in one
process): a toy contrastive step's gradients, then tiny SiDR and inference-free runs; the main process writes
the gradients and every step's loss to ``argv[1]`` as JSON. ``argv[2]``: a JSON object of the runs' inputs."""

from __future__ import annotations

import json
import sys

import torch

from semiret.training.distributed import average_gradients, encode_rows, is_main_process
from semiret.training.losses import symmetric_info_nce


def toy_gradients() -> dict[str, list]:
    """Gradients of one in-batch contrastive loss over a linear encoder: 5 queries, 7 passages (uneven shares)
    and one extra row (an empty share on the second process)."""
    torch.manual_seed(0)
    encoder = torch.nn.Linear(8, 4)
    queries, passages = torch.randn(5, 8), torch.randn(7, 8)
    q = encode_rows(lambda rows: encoder(queries[rows]), list(range(5)))
    p = encode_rows(lambda rows: encoder(passages[rows]), list(range(7)))
    extra = encode_rows(lambda rows: encoder(passages[rows]), [6])
    (symmetric_info_nce(q, p) + extra.sum()).backward()
    average_gradients(encoder.parameters())
    return {name: parameter.grad.tolist() for name, parameter in encoder.named_parameters()}


def recorded_losses(loss_class, train) -> list[float]:
    """Every step's loss of ``train()`` with ``loss_class``."""
    totals, original = [], loss_class.__call__

    def call(self, model, batch, step):
        output = original(self, model, batch, step)
        totals.append(output.total.item())
        return output

    loss_class.__call__ = call
    try:
        train()
    finally:
        loss_class.__call__ = original
    return totals


def main(output: str, inputs: dict) -> None:
    from semiret.methods.inference_free import InferenceFreeTrainingConfig, train_inference_free
    from semiret.methods.sidr import SiDRTrainingConfig, train_sidr
    from semiret.training.contrastive import SemiParametricLoss
    from semiret.training.distillation import DistillationLoss

    results = {"gradients": toy_gradients()}
    sidr = SiDRTrainingConfig(**inputs["sidr"])
    results["sidr"] = recorded_losses(SemiParametricLoss, lambda: train_sidr(sidr))
    inference_free = InferenceFreeTrainingConfig(**inputs["inference_free"])
    results["inference_free"] = recorded_losses(DistillationLoss, lambda: train_inference_free(inference_free))
    if is_main_process():
        with open(output, "w") as f:
            json.dump(results, f)


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]))
