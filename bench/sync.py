"""An index brought in step with its corpus after a few edits: ``Retriever.sync`` (the stored documents compared,
only the new and changed ones encoded) against its peer, every document added again (``add(..., replace=True)``,
each one encoded) and the vanished ones deleted, in one run, per retriever.

``python bench/sync.py [--docs 1000] [--changed 10] [--retrievers bm25,inference-free]`` prints one JSON object: per
retriever, the seconds each way (best of ``--rounds``, each round on a fresh copy of the index, the model loaded
before the timing), their ratio (``replace_over_sync``), and whether both leave the same documents with the same
scores (``same_result``: the live ids, the stored documents and each changed or added document's exact score for its
own first words, ``explain``, after a merge). The corpus is SciFact's first ``--docs`` documents, then ``--changed``
of them with a new text, as many deleted and as many new ones (SciFact's next documents).
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

from corpus import SCIFACT, emit, load_documents, machine, timed_on_copies

MODELS = {"inference-free": "inference-free-scifact", "splade": "splade-tiny"}


def main() -> None:
    from semiret import progress
    from semiret.search import retriever_class

    progress.set_enabled(False)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--changed", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--retrievers", default="bm25,inference-free")
    args = parser.parse_args()
    n, c = args.docs, args.changed
    read = load_documents(SCIFACT, n + c)
    documents, fresh = read[:n], read[n:]
    edited = [replace(d, text=d.text + " (revised)") for d in documents[:c]]
    corpus = edited + documents[c:n - c] + fresh  # c changed, c deleted (the last ones), c new
    touched = edited + fresh
    result = {"benchmark": "sync", "machine": machine(), "documents": n, "changed": c, "deleted": c, "added": c,
              "retrievers": {}}
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.retrievers.split(","):
            options = {"model": MODELS[name]} if name in MODELS else {}
            base = Path(scratch) / f"{name}-base"
            retriever_class(name).build(documents, base, **options)
            outcome = {}

            def recorded(way, retriever):
                retriever.index.merge()
                outcome[way] = (sorted(retriever.index.live_ids()),
                                [retriever.get_document(d.id).to_record() for d in corpus],
                                [retriever.explain(" ".join(d.text.split()[:8]), d.id).score for d in touched])

            def replaced(retriever):
                retriever.add(corpus, replace=True)
                retriever.delete([d.id for d in documents[n - c:]])

            best = timed_on_copies(base, Path(scratch), {"sync": lambda retriever: retriever.sync(corpus),
                                                         "replace": replaced}, args.rounds, recorded)
            same = (outcome["sync"][:2] == outcome["replace"][:2]
                    and bool(np.allclose(outcome["sync"][2], outcome["replace"][2], atol=1e-4)))
            result["retrievers"][name] = {
                "sync_s": round(best["sync"], 4), "replace_s": round(best["replace"], 4),
                "replace_over_sync": round(best["replace"] / best["sync"], 2), "same_result": same}
    emit(result)


if __name__ == "__main__":
    main()
