"""Boosted BM25 search (``search(..., boost=...)``): single-query latency of each kind of boost function against the
same search unboosted, at k = 10 and at the depth a boost reads (its 100 candidates), in one run.

``python bench/boost_latency.py [--data scifact] [--rounds 4]`` prints one JSON object. Each document gets synthetic
metadata: ``published`` (an ISO date spread over six years), ``citations`` (0-499) and ``source`` (one of three
values). Systems: ``plain`` (k = 10), ``plain@100`` (the candidates alone), ``decay`` (a Gaussian decay on
``published``), ``field`` (``log1p`` of ``citations``), ``filter`` (``source`` weighted 1.5) and ``all`` (the three
multiplied). ``boost_over_depth``: each boosted system's median over ``plain@100``'s, what the boost itself adds
(reading the candidates' metadata and sorting them again). ``exact``: every boosted ranking equals the unboosted
top 100 boosted by hand from the documents' metadata.
"""

from __future__ import annotations

import datetime
import math
import statistics
from dataclasses import replace
from functools import partial

from corpus import CACHE_ROOT, emit, latency_arguments, latency_queries, machine, timed_rounds

SOURCES = ("pubmed", "web", "arxiv")
DECAY = {"decay": "gauss", "field": "published", "origin": "2026-01-01", "scale": "180d", "offset": "7d"}
FIELD = {"field": "citations", "modifier": "log1p", "missing": 0}
FILTER = {"filter": {"source": "pubmed"}, "weight": 1.5}


def metadata(position: int) -> dict:
    day = datetime.date(2020, 1, 1) + datetime.timedelta(days=position * 37 % 2190)
    return {"published": day.isoformat(), "citations": position * 7 % 500, "source": SOURCES[position % 3]}


def by_hand(metadata_of: dict, ids: list[str], scores: list[float]) -> list[str]:
    """The ``all`` boost computed from the formulas, for the check."""
    origin = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc).timestamp()
    boosted = []
    for doc_id, score in zip(ids, scores):
        meta = metadata_of[doc_id]
        moment = datetime.datetime.fromisoformat(meta["published"]).replace(tzinfo=datetime.timezone.utc).timestamp()
        distance = max(0.0, abs(moment - origin) - 7 * 86400)
        factor = math.exp(math.log(0.5) * (distance / (180 * 86400)) ** 2)
        factor *= math.log10(1 + meta["citations"]) * (1.5 if meta["source"] == "pubmed" else 1.0)
        boosted.append(score + abs(score) * (factor - 1))
    order = sorted(range(len(ids)), key=lambda i: -boosted[i])  # stable: ties keep the ranking's order
    return [ids[i] for i in order[:10]]


def main() -> None:
    from semiret.search import BM25Retriever, open_retriever

    parser = latency_arguments(__doc__.splitlines()[0])
    args = parser.parse_args()
    collection, _, _, texts = latency_queries(args.data, args.split)
    documents = [replace(d, metadata=metadata(i)) for i, d in enumerate(collection.corpus())]
    index = CACHE_ROOT / f"boost-{collection.name}-bm25"
    if not (index / "meta.json").is_file():
        BM25Retriever.build(documents, index, overwrite=True)
    bm25 = open_retriever(index)
    systems = {"plain": partial(bm25.search, k=10), "plain@100": partial(bm25.search, k=100),
               "decay": partial(bm25.search, k=10, boost=DECAY), "field": partial(bm25.search, k=10, boost=FIELD),
               "filter": partial(bm25.search, k=10, boost=FILTER),
               "all": partial(bm25.search, k=10, boost=[DECAY, FIELD, FILTER])}
    metadata_of = {d.id: d.metadata for d in documents}
    deep = bm25.search(texts, k=100)
    boosted = bm25.search(texts, k=10, boost=[DECAY, FIELD, FILTER])
    exact = all(found == by_hand(metadata_of, ids, scores)
                for found, ids, scores in zip(boosted.ids, deep.ids, deep.scores))
    times = timed_rounds(systems, texts, rounds=args.rounds)
    medians = {label: statistics.median(each) for label, each in times.items()}
    emit({"benchmark": "boost_latency", "machine": machine(), "data": collection.name, "documents": len(documents),
          "queries": len(texts), "rounds": args.rounds, "exact": exact,
          "median_ms": {label: round(value, 4) for label, value in medians.items()},
          "boost_over_depth": {label: round(medians[label] / medians["plain@100"], 3)
                               for label in ("decay", "field", "filter", "all")},
          "boost_over_plain": {label: round(medians[label] / medians["plain"], 3)
                               for label in ("decay", "field", "filter", "all")}})


if __name__ == "__main__":
    main()
