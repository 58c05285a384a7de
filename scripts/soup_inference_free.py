"""A uniform soup (Wortsman et al. 2022) of inference-free models fine-tuned from one start: the mean of their
document encoders' weights and of their query-weight tables.

``python scripts/soup_inference_free.py MODEL MODEL [...] --out DIR [--threshold-data scifact] [--threshold-split
train] [--lexical-prior-from inference-free-scifact]``

The soup is saved in DIR (float16, as training saves). ``--threshold-data``: its document-weight threshold is then
chosen on that collection's split as training chooses it (never a test split); ``--lexical-prior-from``: then the
lexical prior another model records (the packaged model's, chosen on climate-fever's training queries) is recorded
in it, as it was added to the packaged model after training. Averaging is only meaningful between models trained
from the same start, so every model must start from the same ``base`` (checked in their training records).
"""

from __future__ import annotations

import argparse
import json

from semiret.errors import SemiretError


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--out", required=True)
    parser.add_argument("--threshold-data", default=None, help="collection whose split chooses the threshold")
    parser.add_argument("--threshold-split", default="train")
    parser.add_argument("--lexical-prior-from", default=None, help="a model whose recorded lexical prior is copied")
    args = parser.parse_args()
    if len(args.models) < 2:
        raise SemiretError("a soup needs at least two models")

    from semiret.data.paths import dataset
    from semiret.files import atomic_write_json
    from semiret.methods.inference_free import choose_document_threshold
    from semiret.models.base import average_weights
    from semiret.models.checkpoints import INFERENCE_FREE
    from semiret.models.inference_free import InferenceFreeModel

    bases = {INFERENCE_FREE.read(m)[1].get("training", {}).get("config", {}).get("base") for m in args.models}
    if len(bases) != 1:
        raise SemiretError(f"the models start from different bases ({', '.join(map(str, bases))}): no soup of those")
    soup = InferenceFreeModel.load(args.models[0]).float()
    for count, name in enumerate(args.models[1:], start=2):  # a running mean: the k-th model weighs 1/k
        average_weights(soup, InferenceFreeModel.load(name).float(), 1.0 / count)  # encoder and query table alike
    out = soup.save(args.out, training={"soup_of": args.models, "base": bases.pop()})
    if args.threshold_data:
        chosen = choose_document_threshold(str(out), str(dataset(args.threshold_data)), args.threshold_split)
        print(json.dumps({"document_threshold": chosen["document_threshold"]}))
    if args.lexical_prior_from:
        prior = INFERENCE_FREE.read(args.lexical_prior_from)[1].get("lexical_prior")
        if not prior:
            raise SemiretError(f"{args.lexical_prior_from} records no lexical prior")
        _, meta = INFERENCE_FREE.read(str(out))
        atomic_write_json(out / INFERENCE_FREE.marker, {**meta, "lexical_prior": prior,
                                                        "lexical_prior_from": args.lexical_prior_from})
    print(json.dumps({"soup": str(out), "models": len(args.models)}))


if __name__ == "__main__":
    main()
