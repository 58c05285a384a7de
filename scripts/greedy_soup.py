"""A greedy soup (Wortsman et al. 2022) of dense encoders fine-tuned from one start by the HCE recipe, chosen on its
dev split only (the training claims ``semiret train hce`` holds out: same data, fraction and dev seed).

``python scripts/greedy_soup.py MODEL [MODEL ...] --out DIR [--data scifact] [--dev-fraction 0.1] [--dev-seed 12345]
[--device cuda]``
scores each model on the dev split, then, best first, keeps each one whose uniform average with those kept does
not lower the dev nDCG@10; the soup is saved in DIR (float16, as ``scripts/average_dense.py`` saves) and the steps
are printed as JSON lines. Every model must start from the same encoder (averaging weights of unrelated models is
meaningless).
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--data", default="scifact")
    parser.add_argument("--dev-fraction", type=float, default=0.1)
    parser.add_argument("--dev-seed", type=int, default=12345)
    parser.add_argument("--max-length", type=int, default=256, help="document tokens when scoring the dev split")
    parser.add_argument("--device", default="cpu", help="where the models encode the dev split (cpu, cuda)")
    args = parser.parse_args()

    from semiret.data.collection import Collection
    from semiret.data.paths import dataset
    from semiret.methods.hce import CoTraining, Corpus, HCETrainingConfig, TrainingSet, split_dev
    from semiret.models.encoders import average_with_base, load_encoder

    collection = Collection(dataset(args.data))
    _, qrels = split_dev(TrainingSet.from_collection(collection, "train"), args.dev_fraction, args.dev_seed)
    queries = collection.queries()
    scorer = CoTraining(HCETrainingConfig(data=str(args.data), output=str(args.out)), Corpus(list(collection.corpus())),
                        {q: queries[q] for q in qrels}, qrels)

    def dev(model: str | Path) -> float:
        encoder = load_encoder(str(model), "dense", max_length=args.max_length).to(args.device)
        return round(scorer.dev_metric(encoder, scorer.embed(encoder)), 4)

    ranked = sorted(((dev(model), model) for model in args.models), reverse=True)
    for score, model in ranked:
        print(json.dumps({"model": model, "dev_nDCG@10": score}), flush=True)
    work = args.out.with_name(args.out.name + ".candidates")
    best, soup, kept = ranked[0][0], ranked[0][1], [ranked[0][1]]
    for step, (_, model) in enumerate(ranked[1:], 1):
        candidate = work / str(step)
        average_with_base(soup, model, 1.0 / (len(kept) + 1), candidate)  # the uniform average with one more
        score = dev(candidate)
        print(json.dumps({"added": model, "dev_nDCG@10": score, "kept": score >= best}), flush=True)
        if score >= best:
            best, soup, kept = score, str(candidate), kept + [model]
    if args.out.exists():
        shutil.rmtree(args.out)
    if soup == ranked[0][1]:
        average_with_base(soup, soup, 0.0, args.out)  # the best model alone, saved as the others would be
    else:
        shutil.copytree(soup, args.out)
    shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({"soup": str(args.out), "ingredients": kept, "dev_nDCG@10": best}), flush=True)


if __name__ == "__main__":
    main()
