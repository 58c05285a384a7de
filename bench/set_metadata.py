"""New metadata for documents already indexed: ``set_metadata`` (their stored postings or vectors re-added, no model
run) against its peer, adding the same documents again with the new metadata (``add(..., replace=True)``: every
one encoded again), in one run, per retriever.

``python bench/set_metadata.py [--docs 1000] [--updated 200] [--retrievers bm25,inference-free]`` prints one JSON
object: per retriever, the seconds each way (best of ``--rounds``, each round on a fresh copy of the index), their
ratio (``add_over_set_metadata``) and whether both leave the same scores for the updated documents (``same_scores``,
after a merge: until one, BM25's statistics count the replaced copies). The documents are SciFact's first ``--docs``.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from corpus import SCIFACT, emit, load_documents, machine

MODELS = {"inference-free": "inference-free-scifact", "dense": "minilm"}


def main() -> None:
    from semiret import progress
    from semiret.search import open_retriever, retriever_class

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
            options = {"model": MODELS[name]} if name in MODELS else {}
            base = Path(scratch) / f"{name}-base"
            retriever_class(name).build(documents, base, **options)
            times = {"set_metadata": [], "add": []}
            scores = {}
            for _ in range(args.rounds):
                for way in times:
                    copy = Path(scratch) / f"{name}-{way}"
                    shutil.rmtree(copy, ignore_errors=True)
                    shutil.copytree(base, copy)
                    retriever = open_retriever(copy)
                    started = time.perf_counter()
                    if way == "set_metadata":
                        retriever.set_metadata({"reviewed": True}, ids=[d.id for d in updated])
                    else:
                        retriever.add(updated, replace=True)
                    times[way].append(time.perf_counter() - started)
                    retriever.index.merge()
                    hits = retriever.search(query, k=len(documents), filter={"reviewed": True})
                    scores[way] = {hit.id: hit.score for hit in hits}
            best = {way: min(each) for way, each in times.items()}
            shared = sorted(set(scores["add"]) & set(scores["set_metadata"]))
            result["retrievers"][name] = {
                "set_metadata_s": round(best["set_metadata"], 4), "add_s": round(best["add"], 4),
                "add_over_set_metadata": round(best["add"] / best["set_metadata"], 2),
                "same_scores": set(scores["add"]) == set(scores["set_metadata"]) and bool(np.allclose(
                    [scores["add"][d] for d in shared], [scores["set_metadata"][d] for d in shared], atol=1e-4))}
    emit(result)


if __name__ == "__main__":
    main()
