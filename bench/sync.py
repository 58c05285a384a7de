"""An index brought in step with its corpus after a few edits: ``Retriever.sync`` (the stored documents compared,
only the new and changed ones encoded) against its peer, every document added again (``add(..., replace=True)``,
each one encoded) and the vanished ones deleted, in one run, per retriever.

``python bench/sync.py [--docs 1000] [--changed 10] [--retrievers bm25,inference-free] [--pdfs 0]`` prints one JSON
object: per
retriever, the seconds each way (best of ``--rounds``, each round on a fresh copy of the index, the model loaded
before the timing), their ratio (``replace_over_sync``), and whether both leave the same documents with the same
scores (``same_result``: the live ids, the stored documents and each changed or added document's exact score for its
own first words, ``explain``, after a merge). The corpus is SciFact's first ``--docs`` documents, then ``--changed``
of them with a new text, as many deleted and as many new ones (SciFact's next documents).

``--pdfs N`` also times a folder of N three-page PDFs of SciFact's texts (written once, with matplotlib, under the
cache directory), nothing changed: ``sync_folder`` (files whose bytes hash as stored not parsed) against the same
sync parsing every file (``sync(iter_corpus(folder))``), a BM25 index, best of ``--rounds`` (``folder_sync_s``,
``folder_read_all_s``).
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

from corpus import CACHE_ROOT, SCIFACT, emit, load_documents, machine, model_options, timed_on_copies


def main() -> None:
    from semiret import progress
    from semiret.search import retriever_class

    progress.set_enabled(False)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--changed", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--retrievers", default="bm25,inference-free")
    parser.add_argument("--pdfs", type=int, default=0)
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
            options = model_options(name)
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
        if args.pdfs:
            from semiret.data import iter_corpus

            folder = _pdf_folder(args.pdfs)
            base = Path(scratch) / "folder-base"
            retriever_class("bm25").build(iter_corpus(folder), base)
            best = timed_on_copies(base, Path(scratch), {
                "folder_sync": lambda retriever: retriever.sync_folder(folder),
                "read_all": lambda retriever: retriever.sync(iter_corpus(folder))}, args.rounds)
            result["pdf_folder"] = {"pdfs": args.pdfs, "folder_sync_s": round(best["folder_sync"], 4),
                                    "folder_read_all_s": round(best["read_all"], 4),
                                    "read_all_over_folder_sync": round(best["read_all"] / best["folder_sync"], 1)}
    emit(result)


def _pdf_folder(n: int) -> Path:
    """A folder of ``n`` three-page PDFs of SciFact's texts, written once under the cache directory."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.backends.backend_pdf import PdfPages

    folder = CACHE_ROOT / f"pdfs-{n}"
    if len(list(folder.glob("*.pdf"))) == n:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    documents = load_documents(SCIFACT, 3 * n)
    for i in range(n):
        path = folder / f"paper-{i:05d}.pdf"
        with matplotlib.rc_context({"pdf.fonttype": 42}), PdfPages(path) as pdf:
            for document in documents[3 * i: 3 * i + 3]:
                figure = plt.figure(figsize=(8.5, 11))
                words = document.text.split()
                for line in range(0, min(len(words), 600), 12):
                    figure.text(0.05, 0.97 - line / 12 * 0.018, " ".join(words[line: line + 12]), fontsize=8,
                                parse_math=False)
                pdf.savefig(figure)
                plt.close(figure)
    return folder


if __name__ == "__main__":
    main()
