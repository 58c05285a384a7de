"""Metadata-filtered BM25 search: semiret's ``search(filter=...)`` against bm25s's ``weight_mask`` and against
semiret's own unfiltered search, single-query latency at several selectivities, in one run.

``python bench/filtered_search.py [--data scifact] [--rounds 4]`` prints one JSON object. Each document gets a
synthetic metadata field ``bucket`` (its position modulo 100); a filter ``{"bucket": {"lt": s}}`` keeps s% of the
corpus. semiret hides the documents that fail the filter as it hides deleted ones (which documents pass is worked out
by a filter's first search, from the stored metadata, and kept per segment: ``semiret_first_search_ms``; a new filter
on a field read before uses the field's values kept: ``semiret_new_filter_same_field_ms``); bm25s is given a 0/1 mask
over the corpus computed once per filter beforehand (its users' way: the mask is theirs to build). Both tokenize each
query inside the timing. Every filtered semiret ranking is checked against its unfiltered ranking filtered afterwards
(``exact``; those of full-text filters for the first ``exact_text_queries``). Full-text filters (``$text``) are timed
too, against semiret's unfiltered search: the first one's search, which builds the segment's word index
(``semiret_text_first_search_ms``), then each query filtered by its own longest word and by its first two words as
a phrase.
"""

from __future__ import annotations

import itertools
import statistics
import time
from dataclasses import replace
from functools import partial

import numpy as np

from corpus import CACHE_ROOT, emit, latency_arguments, latency_queries, machine, timed_rounds

SELECTIVITIES = (50, 10, 1)
TEXT_CHECKED_QUERIES = 50
"""Queries whose full-text filtered rankings are checked (``exact_text_*``) against the unfiltered ranking filtered
afterwards: the check reads each document's words again for each query (all 300 of SciFact's took 4 minutes)."""


def main() -> None:
    import bm25s
    import Stemmer

    from semiret.search import BM25Retriever, open_retriever
    from semiret.indexes.filters import MetadataFilter

    parser = latency_arguments(__doc__.splitlines()[0])
    args = parser.parse_args()
    collection, _, _, texts = latency_queries(args.data, args.split)
    documents = [replace(d, metadata={"bucket": i % 100}) for i, d in enumerate(collection.corpus())]
    index = CACHE_ROOT / f"filtered-{collection.name}-bm25"
    if not (index / "meta.json").is_file():
        BM25Retriever.build(documents, index, overwrite=True)
    semiret_bm25 = open_retriever(index)

    stemmer = Stemmer.Stemmer("english")
    peer = bm25s.BM25(k1=1.5, b=0.75, backend="numba")
    peer.index(bm25s.tokenize([d.full_text for d in documents], stopwords="en", stemmer=stemmer,
                              show_progress=False), show_progress=False)
    peer_ids = np.array([d.id for d in documents])

    def peer_search(text: str, mask=None):
        tokens = bm25s.tokenize([text], stopwords="en", stemmer=stemmer, show_progress=False, return_ids=False)
        return peer.retrieve(tokens if tokens[0] else [[""]], corpus=peer_ids, k=10, show_progress=False,
                             n_threads=1, weight_mask=mask)

    systems = {"semiret": partial(semiret_bm25.search, k=10), "bm25s": peer_search}
    result = {"benchmark": "filtered_search", "machine": machine(), "data": collection.name,
              "documents": len(documents), "queries": len(texts), "selectivities_percent": list(SELECTIVITIES),
              "systems": {}}
    for share in SELECTIVITIES:
        spec = {"bucket": {"lt": share}}
        mask = np.array([d.metadata["bucket"] < share for d in documents], dtype=np.float32)
        systems[f"semiret-{share}%"] = partial(semiret_bm25.search, k=10, filter=spec)
        systems[f"bm25s-{share}%"] = partial(peer_search, mask=mask)
        wanted = MetadataFilter(spec)
        full = semiret_bm25.search(texts, k=len(documents))
        filtered = semiret_bm25.search(texts, k=10, filter=spec)
        result[f"exact_{share}%"] = all(
            ids == list(itertools.islice((d for d in every if wanted.matches({"bucket": int(d_bucket[d])})), 10))
            for ids, every, d_bucket in ((f, e, {d.id: d.metadata["bucket"] for d in documents})
                                         for f, e in zip(filtered.ids, full.ids)))
    for share in SELECTIVITIES:  # a filter's first search works out which documents pass (then kept per segment)
        fresh = open_retriever(index)
        started = time.perf_counter()
        fresh.search(texts[0], k=10, filter={"bucket": {"lt": share}})
        result[f"semiret_first_search_ms_{share}%"] = round((time.perf_counter() - started) * 1000, 2)
        started = time.perf_counter()  # another filter on the same field: its values are kept, no JSON read
        fresh.search(texts[0], k=10, filter={"bucket": {"gte": 100 - share}})
        result[f"semiret_new_filter_same_field_ms_{share}%"] = round((time.perf_counter() - started) * 1000, 2)
    # full-text filters ($text): the first builds the segment's word index; then each query is filtered by a word
    # of its own (its longest) and by its first two words as a phrase
    from semiret.text.analyzer import plain_words

    fresh = open_retriever(index)
    started = time.perf_counter()
    fresh.search(texts[0], k=10, filter={"$text": "cells"})
    result["semiret_text_first_search_ms"] = round((time.perf_counter() - started) * 1000, 2)
    words = {text: plain_words(text) or ["cells"] for text in texts}
    by_word = {text: {"$text": max(each, key=len)} for text, each in words.items()}
    by_phrase = {text: {"$text": '"' + " ".join(each[:2]) + '"'} for text, each in words.items()}
    systems["semiret-text-word"] = lambda text: semiret_bm25.search(text, k=10, filter=by_word[text])
    systems["semiret-text-phrase"] = lambda text: semiret_bm25.search(text, k=10, filter=by_phrase[text])
    stored = {d.id: d for d in documents}
    full = semiret_bm25.search(texts, k=len(documents))
    result["exact_text_queries"] = min(len(texts), TEXT_CHECKED_QUERIES)
    for label, specs in (("word", by_word), ("phrase", by_phrase)):
        result[f"exact_text_{label}"] = all(
            [h.id for h in semiret_bm25.search(text, k=10, filter=specs[text])]
            == list(itertools.islice((d for d in every if wanted.matches(None, stored[d])), 10))
            for text, every, wanted in ((text, every, MetadataFilter(specs[text]))
                                        for text, every in zip(texts[:TEXT_CHECKED_QUERIES], full.ids)))
    times = timed_rounds(systems, texts, rounds=args.rounds)
    for label, measured in times.items():
        result["systems"][label] = {"latency_ms_median": round(statistics.median(measured), 4),
                                    "latency_ms_mean": round(statistics.fmean(measured), 4)}
    median = {label: figures["latency_ms_median"] for label, figures in result["systems"].items()}
    for share in SELECTIVITIES:
        result[f"semiret_over_bm25s_{share}%"] = round(median[f"semiret-{share}%"] / median[f"bm25s-{share}%"], 3)
        result[f"semiret_filtered_over_unfiltered_{share}%"] = round(median[f"semiret-{share}%"] / median["semiret"], 3)
    for label in ("word", "phrase"):
        result[f"semiret_text_{label}_over_unfiltered"] = round(median[f"semiret-text-{label}"] / median["semiret"], 3)
    emit(result)


if __name__ == "__main__":
    main()
