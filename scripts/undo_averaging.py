"""The fine-tuned model inside a WiSE-FT-averaged one: a saved model recorded as ``(1 - s) * trained + s * start``
gives back ``trained = (saved - s * start) / (1 - s)``, with ``s`` and the start read from what it recorded.

``python scripts/undo_averaging.py MODEL OUT`` for a dense encoder trained with ``--average-with-base`` (the packaged
``hce-scifact``) or a SiDR model (the packaged ``sidr-scifact``); OUT is written in float32. The packaged models are
averaged half with their start to keep out-of-domain quality; the trained halves are stronger in domain, which makes
them teachers for distillation (docs/results.md, "Teachers with their averaging undone").
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from semiret.errors import SemiretError
from semiret.methods.sidr import starting_sidr_model
from semiret.models.base import undo_averaging
from semiret.models.checkpoints import SIDR


def undo_sidr(model: str, out: str) -> None:
    from semiret.models.sidr import SiDRModel

    _, meta = SIDR.read(model)
    training = meta.get("training") or {}
    share, config = training.get("averaged_with_base"), training.get("config", {})
    if not share:
        raise SemiretError(f"{model} records no averaging with its start")
    start = starting_sidr_model(config["base"], config["shared"], config["head"], config["top_k"],
                                config["query_max_length"], config["document_max_length"])
    trained = undo_averaging(SiDRModel.load(model).float(), start.float(), share)
    trained.save(out, training={"averaging_undone": share, "model": model}, fp16=False)


def undo_dense(model: str, out: str) -> None:
    from semiret.data.packaged import PACKAGED_CHECKPOINTS
    from semiret.models.encoders import load_encoder

    directory = Path(model) if Path(model).exists() else PACKAGED_CHECKPOINTS / model
    summary_file = directory / "training.json"
    if not summary_file.is_file():
        raise SemiretError(f"{model} has no training.json saying what it was averaged with")
    encoder = load_encoder(str(directory), "dense")
    summary = json.loads(summary_file.read_text())
    share = summary.get("averaged_with_base")
    if not share:
        raise SemiretError(f"{model} records no averaging with its start")
    start = load_encoder(summary["config"]["base"], "dense", max_length=encoder.max_length)
    undo_averaging(encoder, start, share).save(out, fp16=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("out")
    args = parser.parse_args()
    (undo_sidr if SIDR.directory(args.model) is not None else undo_dense)(args.model, args.out)
    print(args.out)


if __name__ == "__main__":
    main()
