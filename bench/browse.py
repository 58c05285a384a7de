"""Reading documents back from a BM25 index: counting by filter, paging in id order (scroll) and reading every stored
document (what ``semiret export`` writes), against a plain read of the same documents from a JSONL corpus file, in
one run.

``python bench/browse.py [--docs 100000] [--page 100]`` prints one JSON object. Documents are the synthetic corpus
of :mod:`corpus` with a ``bucket`` metadata field (position modulo 100): ``{"bucket": {"lt": 10}}`` passes 10%.
Figures: ``count`` (all documents; a filter's first count, which reads the field, and a second), the first page of
a scroll (the sorted ids made and kept for the commit) and the pages after it, and documents read per second:
semiret's ``iter_documents`` (each document's stored JSON record parsed) against the peer, ``json.loads`` of each
line of the corpus file (the least a reader of the same records does).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from corpus import CACHE_ROOT, emit, machine, synthetic_texts


def main() -> None:
    from semiret import progress
    from semiret.data import Document
    from semiret.search import BM25Retriever, open_retriever

    progress.set_enabled(False)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--page", type=int, default=100)
    parser.add_argument("--pages", type=int, default=200)
    args = parser.parse_args()
    texts = synthetic_texts(args.docs, seed=42)
    documents = [Document(f"doc{i}", text, metadata={"bucket": i % 100}) for i, text in enumerate(texts)]
    index = CACHE_ROOT / f"browse-{args.docs}-bm25"
    corpus = CACHE_ROOT / f"browse-{args.docs}.jsonl"
    if not (index / "meta.json").is_file():
        BM25Retriever.build(documents, index, overwrite=True)
    if not corpus.is_file():
        with open(corpus, "w", encoding="utf-8") as out:
            out.writelines(json.dumps(d.to_record()) + "\n" for d in documents)

    def timed(fn) -> tuple[float, object]:
        started = time.perf_counter()
        value = fn()
        return (time.perf_counter() - started) * 1000, value

    retriever = open_retriever(index)
    tenth = {"bucket": {"lt": 10}}
    count_ms, counted = timed(retriever.count)
    first_filtered_count_ms, counted_tenth = timed(lambda: retriever.count(tenth))
    filtered_count_ms, _ = timed(lambda: retriever.count(tenth))
    first_page_ms, page = timed(lambda: retriever.scroll(limit=args.page))
    page_ms = []
    for _ in range(args.pages):
        if page.next_offset is None:
            break
        elapsed, page = timed(lambda: retriever.scroll(limit=args.page, offset=page.next_offset))
        page_ms.append(elapsed)

    def read_all() -> int:
        return sum(1 for _ in retriever.iter_documents())

    def read_corpus_file() -> int:
        with open(corpus, encoding="utf-8") as lines:
            return sum(1 for line in lines if json.loads(line))

    semiret_ms, read = timed(read_all)
    peer_ms, peer_read = timed(read_corpus_file)
    assert read == peer_read == counted == args.docs and counted_tenth == args.docs // 10
    emit({"benchmark": "browse", "machine": machine(), "documents": args.docs, "page": args.page,
          "count_ms": round(count_ms, 3), "filtered_count_first_ms": round(first_filtered_count_ms, 1),
          "filtered_count_ms": round(filtered_count_ms, 3), "scroll_first_page_ms": round(first_page_ms, 1),
          "scroll_next_page_median_ms": round(statistics.median(page_ms), 3), "pages_timed": len(page_ms),
          "semiret_documents_per_s": round(read / semiret_ms * 1000),
          "peer_json_lines_per_s": round(peer_read / peer_ms * 1000),
          "ratio_semiret_over_peer_time": round(semiret_ms / peer_ms, 2)})


if __name__ == "__main__":
    main()
