"""What a commit costs a serving process: refreshing to it, and the first search on it against later ones.

``python bench/commit_refresh.py [--adds 300] [--quick]`` prints one JSON object.

A BM25 index of SciFact's corpus is written into ``--workdir``; a writer adds one document at a time under the
server's merge policy (``semiret serve``'s default ``max_segments``, :class:`~semiret.serving.served.ServedIndex`),
and after each commit a reader handle (the serving process's) refreshes, then searches a SciFact test query
twice. Reported per step, p50/p90 in ms: ``refresh``, ``first_search`` (the first on the new snapshot, which
pays for what the commit changed) and ``later_search`` (the peer, same query and snapshot);
``first_over_later`` is their ratio of medians. In ``semiret serve`` this is the time a commit takes from the
searches around it (docs/results.md, the service's load benchmark).
"""

from __future__ import annotations

import shutil
import statistics
import time
from dataclasses import fields

from corpus import common_arguments, emit, latency_queries, machine


def percentiles(values: list[float]) -> dict:
    ordered = sorted(values)
    return {"p50": round(statistics.median(ordered), 4), "p90": round(ordered[int(0.9 * (len(ordered) - 1))], 4)}


def main() -> None:
    parser = common_arguments(__doc__.splitlines()[0])
    parser.add_argument("--adds", type=int, default=300, help="documents added, one commit each")
    args = parser.parse_args()
    adds = 40 if args.quick else args.adds

    from semiret.data.collection import Document
    from semiret.search import BM25Retriever
    from semiret.search.retrievers import open_retriever
    from semiret.serving.served import ServedIndex
    from semiret.serving.settings import ServeSettings

    collection, _, _, queries = latency_queries("scifact", "test")
    documents = list(collection.corpus())
    path = args.workdir / "commit-refresh-bm25"
    BM25Retriever.build(documents, path, overwrite=True)
    max_segments = next(f.default for f in fields(ServeSettings) if f.name == "max_segments")
    writer, reader = ServedIndex("writer", path, max_segments), open_retriever(path)
    reader.search(queries[:5], k=10)
    times = {"refresh": [], "first_search": [], "later_search": []}
    segments = []
    for step in range(adds):
        source = documents[step % len(documents)]
        writer.retriever.add([Document(f"added-{step}", f"addedword{step} {source.text}", source.title)], replace=True)
        writer._merge_small_segments()
        query = [queries[step % len(queries)]]
        for label, action in (("refresh", reader.index.refresh), ("first_search", lambda: reader.search(query, k=10)),
                              ("later_search", lambda: reader.search(query, k=10))):
            start = time.perf_counter()
            action()
            times[label].append((time.perf_counter() - start) * 1000)
        segments.append(len(reader.index.segments))
    shutil.rmtree(path, ignore_errors=True)
    result = {"machine": machine(), "documents": len(documents), "adds": adds, "max_segments": max_segments,
              "mean_segments": round(statistics.mean(segments), 2),
              **{label: percentiles(values) for label, values in times.items()}}
    result["first_over_later"] = round(result["first_search"]["p50"] / result["later_search"]["p50"], 3)
    emit(result)


if __name__ == "__main__":
    main()
