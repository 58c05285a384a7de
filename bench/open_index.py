"""Opening an index and answering its first search: what a process pays each time it opens one (the server after
each write it refreshes onto, a command run, a test).

``python bench/open_index.py [--docs N] [--repeat R]`` prints one JSON object: for a ``bm25`` index (the peer: it reads
no tokenizer file) and the ``bot`` and ``idf`` indexes (WordPiece vocabularies), the median milliseconds of ``R``
opens and first searches in one process, after a first, and each one's ratio to ``bm25``'s.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from corpus import emit, machine

from semiret import progress
from semiret.data import Document
from semiret.search.retrievers import open_retriever, retriever_class

KINDS = ("bm25", "bot", "idf")
QUERY = "number 7"
"""A word of every document and one of a fifth of them (found by every kind, IDF weighting included)."""


def open_and_search_ms(path: Path, repeat: int) -> float:
    open_retriever(path).search([QUERY], k=1)  # kernels compiled, files in the page cache
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        open_retriever(path).search([QUERY], k=1)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    progress.set_enabled(False)
    documents = [Document(f"d{i}", f"common words number {i}") for i in range(args.docs)]
    figures = {}
    with tempfile.TemporaryDirectory(prefix="semiret-open-") as work:
        for kind in KINDS:
            retriever_class(kind).build(documents, Path(work) / kind)
            figures[kind] = {"open_and_first_search_ms": round(open_and_search_ms(Path(work) / kind, args.repeat), 2)}
    for kind in KINDS:
        figures[kind]["ratio_to_bm25"] = round(figures[kind]["open_and_first_search_ms"]
                                               / figures["bm25"]["open_and_first_search_ms"], 2)
    emit({"benchmark": "open_index", "docs": args.docs, "repeat": args.repeat, "indexes": figures,
          "machine": machine()})


if __name__ == "__main__":
    main()
