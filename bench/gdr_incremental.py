"""GDR's Table 6 protocol: a GDR model trained on part of a corpus (``semiret train gdr --held-out-fraction F``)
indexes the documents it was trained on; the held-out ones are then added with the ``gdr`` retriever's add path
(each joins the leaf with the nearest mean E_D vector; the prefix tree and the decoder stay as trained), and the
test queries are compared in two groups: "old" (all relevant documents among the trained ones) and "new" (a
relevant document among the added ones). Flat dense search with the model's E_D over the same documents is the
reference. The protocol is the one HCE's benchmark uses (``bench/incremental.py``).

``python bench/gdr_incremental.py --run runs/gdr-heldout-scifact [--threads 1] [--index DIR]`` prints one JSON
object: per system, nDCG@10 / R@10 / R@100 of both groups before adding, after adding, and of the old group after
deleting the added documents again, plus ``new_over_old_R@100`` after adding (the issue's target: >= 0.9).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from corpus import emit, machine
from incremental import dense, protocol


def main() -> None:
    from semiret.data.collection import Collection
    from semiret.search.gdr import GDRRetriever

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, help="run folder of semiret train gdr --held-out-fraction F")
    parser.add_argument("--data", default=None, help="the collection (default: the one the run trained on)")
    parser.add_argument("--split", default="test")
    parser.add_argument("--beams", type=int, default=None)
    parser.add_argument("--beta", type=float, default=None)
    parser.add_argument("--length-penalty", type=float, default=None)
    parser.add_argument("--reference", default=None, help="flat dense model (default: the run's E_D)")
    parser.add_argument("--index", default=None, help="keep GDR's index here (default: a temporary one)")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)

    run = Path(args.run)
    summary = json.loads((run / "summary.json").read_text())
    config = summary["config"]
    held_out_ids = set(json.loads((run / "held-out.json").read_text()))
    collection = Collection(args.data or config["data"])
    corpus = list(collection.corpus())
    kept = [d for d in corpus if d.id not in held_out_ids]
    held_out = [d for d in corpus if d.id in held_out_ids]
    if len(held_out) != len(held_out_ids) or len(kept) != summary["documents"]:
        raise SystemExit(f"{run} was not trained on {collection.root}: {len(kept)} kept documents (the run "
                         f"trained on {summary['documents']}), {len(held_out)} of {len(held_out_ids)} held out")
    queries, qrels = collection.queries(args.split), collection.qrels(args.split)
    search = {k: v for k, v in {"beams": args.beams, "beta": args.beta,
                                "length_penalty": args.length_penalty}.items() if v is not None}
    opened = []

    def gdr(documents):
        retriever = GDRRetriever.build(documents, args.index, overwrite=args.index is not None,
                                       model=str(run / "model"), **search)
        opened.append(retriever)
        return retriever

    started = time.perf_counter()
    result = {"run": str(run), "data": str(collection.root), "split": args.split,
              "documents": len(corpus), "held_out": len(held_out), "search_options": search}
    result["gdr"] = protocol(gdr, kept, held_out, queries, qrels)
    result["gdr"]["cost"] = opened[0].query_side.cost_figures()  # over all the searches above
    reference = args.reference or config.get("document_encoder") or config["base"]
    result[f"dense-{reference}"] = protocol(dense(reference), kept, held_out, queries, qrels)
    for name in ("gdr", f"dense-{reference}"):
        after = result[name]["after_adding"]
        if after["old"].get("R@100") and "R@100" in after["new"]:
            result[name]["new_over_old_R@100"] = round(after["new"]["R@100"] / after["old"]["R@100"], 4)
    result["seconds"] = round(time.perf_counter() - started, 1)
    result["machine"] = machine()
    emit(result)


if __name__ == "__main__":
    main()
