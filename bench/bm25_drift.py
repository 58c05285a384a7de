"""BM25 after adds that move the average document length: rankings against a fresh build of the same documents.

``python bench/bm25_drift.py [--short 300] [--long 50]`` prints one JSON object.

A BM25 index of SciFact's ``--short`` shortest documents is written into ``--workdir``, then its ``--long``
longest are added (the average length nearly doubles); the first 300 test-and-train queries are searched there and
in a fresh build of the same documents (the peer), and ``top10_differ`` counts the queries whose top 10 differs.
Each segment's ``avgdl`` (the average length its weights are normalised by) is reported beside the fresh build's.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from corpus import CACHE_ROOT, emit, machine


def main() -> None:
    from semiret import progress

    progress.set_enabled(False)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=CACHE_ROOT / "indexes", help="where indexes are written")
    parser.add_argument("--data", default="scifact", help="BEIR collection (a folder or a name under shared/data)")
    parser.add_argument("--short", type=int, default=300, help="shortest documents indexed first")
    parser.add_argument("--long", type=int, default=50, help="longest documents added afterwards")
    args = parser.parse_args()

    from semiret.data.collection import Collection
    from semiret.data.paths import dataset
    from semiret.search import BM25Retriever

    collection = Collection(dataset(args.data))
    documents = sorted(collection.corpus(), key=lambda d: len(d.full_text))
    short, long = documents[: args.short], documents[-args.long:]
    queries = list(collection.queries().values())[:300]
    grown_path, fresh_path = args.workdir / "drift-grown", args.workdir / "drift-fresh"
    grown = BM25Retriever.build(short, grown_path, overwrite=True)
    first_write = grown.index.segments[0].avgdl
    grown.add(long)
    fresh = BM25Retriever.build(short + long, fresh_path, overwrite=True)
    after, expected = grown.search(queries, k=10), fresh.search(queries, k=10)
    emit({"benchmark": "bm25_drift", "machine": machine(), "documents": [len(short), len(long)],
          "queries": len(queries), "avgdl_first_write": round(first_write, 2),
          "avgdl_per_segment": [round(s.avgdl, 2) for s in grown.index.segments],
          "avgdl_fresh_build": round(fresh.index.segments[0].avgdl, 2),
          "top10_differ": sum(a != b for a, b in zip(after.ids, expected.ids))})
    for path in (grown_path, fresh_path):
        shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    main()
