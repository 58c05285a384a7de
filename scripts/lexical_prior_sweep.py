"""The lexical prior's weight, swept over a saved inference-free model without retraining.

``python scripts/lexical_prior_sweep.py --data vaswani --split test [--model inference-free-scifact]
[--weights 0,0.1,0.3,0.5,1 (default: 0 to 5)] [--stems] [--idf corpus]`` encodes the corpus once, then for each weight W
searches the split's queries (weighted as the ``inference-free`` retriever weights them) over the model's
document vectors (pruned at its recorded threshold) plus W x BM25 over the documents' own tokens
(:class:`~semiret.text.bm25.LexicalPrior`), and the prior alone; prints one JSON object of nDCG@10 and R@100
(:func:`~semiret.methods.inference_free.lexical_prior_sweep`).

``--record`` (a training or dev split only) also writes the chosen weight, the smallest within 0.001 nDCG@10 of
the best, into the model's ``inference-free.json``, as ``semiret train inference-free --choose-lexical-prior``
does after training (:func:`~semiret.methods.inference_free.choose_lexical_prior`).
"""

from __future__ import annotations

import argparse
import json

import torch

from semiret import progress
from semiret.data.paths import dataset
from semiret.methods.inference_free import LEXICAL_PRIOR_WEIGHTS, choose_lexical_prior, lexical_prior_sweep
from semiret.models.checkpoints import resolve_inference_free


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="scifact")
    parser.add_argument("--split", default="test")
    parser.add_argument("--model", default="inference-free-scifact")
    parser.add_argument("--weights", default=",".join(map(str, LEXICAL_PRIOR_WEIGHTS)))
    parser.add_argument("--stems", action="store_true", help="the prior credits stem variants")
    parser.add_argument("--idf", default="model", help="'model' (the table it was trained with) or 'corpus'")
    parser.add_argument("--record", action="store_true", help="write the chosen weight into the model")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    progress.set_enabled(False)
    model, data = resolve_inference_free(args.model), str(dataset(args.data))
    weights = [float(w) for w in args.weights.split(",")]
    if args.record:
        if args.idf != "model":
            parser.error("--record chooses the weight for the model's own query side: leave --idf out")
        rows = choose_lexical_prior(model, data, args.split, weights, args.stems)["lexical_prior_choice"]["rows"]
    else:
        rows = lexical_prior_sweep(model, data, args.split, weights, args.stems, args.idf, prior_alone=True)
    print(json.dumps({"data": args.data, "split": args.split, "model": args.model, "stems": args.stems,
                      "idf": args.idf, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
