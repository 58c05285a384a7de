"""A search box's operators (``search(..., operators=True)``): single-query BM25 latency of queries that require a
phrase, require a word or exclude one, against the same words searched plainly, in one run.

``python bench/operators_latency.py [--data scifact] [--rounds 4]`` prints one JSON object. From each test query:
``phrase`` quotes its first two words (a filter of its own per query, so none is reused from the filters kept),
``required`` puts ``+`` before its longest word (a filter per query too), ``excluded`` appends ``-mice`` (one filter
for every query: worked out once, then kept). ``plain`` searches each query's scored words unfiltered.
``over_plain``: each system's median over ``plain``'s. ``same_as_filtered``: every hit list equals the scored words
searched with the query's filter given by hand (``search(words, filter=...)``).
"""

from __future__ import annotations

import statistics
from functools import partial

from corpus import CACHE_ROOT, emit, latency_arguments, latency_queries, machine, timed_rounds


def with_phrase(text: str) -> str:
    words = text.split()
    return f'"{words[0]} {words[1]}" {" ".join(words[2:])}' if len(words) > 2 else text


def with_required(text: str) -> str:
    words = text.split()
    longest = max(range(len(words)), key=lambda n: len(words[n]))
    return " ".join(("+" if n == longest else "") + word for n, word in enumerate(words))


def main() -> None:
    from semiret.search import BM25Retriever, open_retriever
    from semiret.search.operators import parse_operators

    args = latency_arguments(__doc__.splitlines()[0]).parse_args()
    collection, _, _, texts = latency_queries(args.data, args.split)
    index = CACHE_ROOT / f"operators-{collection.name}-bm25"
    if not (index / "meta.json").is_file():
        BM25Retriever.build(collection.corpus(), index, overwrite=True)
    bm25 = open_retriever(index)
    variants = {"phrase": [with_phrase(t) for t in texts], "required": [with_required(t) for t in texts],
                "excluded": [f"{t} -mice" for t in texts]}
    same = all([(h.id, h.score) for h in bm25.search(query, k=10, operators=True)]
               == [(h.id, h.score) for h in bm25.search(parse_operators(query).text, k=10,
                                                        filter=parse_operators(query).filter(None))]
               for queries in variants.values() for query in queries)
    searched = {"plain": texts, **variants}
    def system(label: str, position: int):
        return bm25.search(searched[label][position], k=10, operators=label != "plain")

    # each system's own text of the query at a position, the systems in rotating rounds over the same positions
    times = timed_rounds({label: partial(system, label) for label in searched}, list(range(len(texts))),
                         rounds=args.rounds)
    medians = {label: statistics.median(each) for label, each in times.items()}
    emit({"benchmark": "operators_latency", "machine": machine(), "data": collection.name,
          "queries": len(texts), "rounds": args.rounds, "same_as_filtered": same,
          "median_ms": {label: round(value, 4) for label, value in medians.items()},
          "over_plain": {label: round(medians[label] / medians["plain"], 3) for label in variants}})


if __name__ == "__main__":
    main()
