"""New metadata for documents already indexed: ``set_metadata`` (their stored postings or vectors re-added, no model
run) against its peer, adding the same documents again with the new metadata (``add(..., replace=True)``: every
one encoded again), in one run, per retriever.

``python bench/set_metadata.py [--docs 1000] [--updated 200] [--retrievers bm25,inference-free]`` prints one JSON
object: per retriever, the seconds each way (best of ``--rounds``, each round on a fresh copy of the index, the model
loaded before the timing), their ratio (``add_over_set_metadata``) and whether both leave the same scores for every
updated document (``same_scores``: each one's exact score, ``explain``, for its own first words and for a shared
query, after a merge: until one, BM25's statistics count the replaced copies); both ways must leave every updated
document with the new field. The documents are SciFact's first ``--docs``; retrievers that sum term weights (those
``explain`` takes).
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

from corpus import SCIFACT, emit, load_documents, machine, model_options, timed_on_copies


def main() -> None:
    from semiret import progress
    from semiret.search import retriever_class

    progress.set_enabled(False)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--updated", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--retrievers", default="bm25,inference-free")
    args = parser.parse_args()
    documents = load_documents(SCIFACT, args.docs)
    updated = [replace(d, metadata={**(d.metadata or {}), "reviewed": True}) for d in documents[:args.updated]]
    query = "statins and cancer risk"
    result = {"benchmark": "set_metadata", "machine": machine(), "documents": len(documents),
              "updated": len(updated), "retrievers": {}}
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.retrievers.split(","):
            options = model_options(name)
            base = Path(scratch) / f"{name}-base"
            retriever_class(name).build(documents, base, **options)
            scores = {}

            def checked(way, retriever):
                retriever.index.merge()
                if retriever.count({"reviewed": True}) != len(updated):
                    raise SystemExit(f"{name}, {way}: {retriever.count({'reviewed': True})} documents reviewed, "
                                     f"not {len(updated)}")
                # every updated document's exact score for its own first words and for one shared query
                scores[way] = [retriever.explain(each, d.id).score for d in updated
                               for each in (" ".join(d.text.split()[:8]), query)]

            best = timed_on_copies(base, Path(scratch), {
                "set_metadata": lambda retriever: retriever.set_metadata({"reviewed": True},
                                                                         ids=[d.id for d in updated]),
                "add": lambda retriever: retriever.add(updated, replace=True)}, args.rounds, checked)
            result["retrievers"][name] = {
                "set_metadata_s": round(best["set_metadata"], 4), "add_s": round(best["add"], 4),
                "add_over_set_metadata": round(best["add"] / best["set_metadata"], 2),
                "scores_compared": len(scores["add"]),
                "same_scores": bool(np.allclose(scores["add"], scores["set_metadata"], atol=1e-4))}
    emit(result)


if __name__ == "__main__":
    main()
