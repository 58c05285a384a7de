"""Adding and deleting 1,000 documents costs time proportional to the 1,000, not to the index.

``python bench/add_scaling.py [--docs N] [--quick]`` prints one JSON object.

For each index kind (``bm25``, ``bot``) and each size (10k, 100k and 1M documents by default: the
first documents of the synthetic Zipf corpus, built with stored texts as ``semiret index`` does),
the index is opened from disk as a user would, then, ``--rounds`` times: 1,000 new documents are
added (encoding included), a search for a word found only in one of them must return it at once,
and 1,000 existing documents are deleted, after which a search must no longer return one of them.
``ratio`` is the 1M add (and delete) time over the 10k one: flat scaling gives about 1.
"""

from __future__ import annotations

import shutil
import statistics
import string
import time

import numpy as np

from corpus import DEFAULT_DOCS, QUICK_DOCS, common_arguments, emit, ensure_corpus, load_documents, machine, \
    synthetic_texts

CHANGE = 1000
ROUNDS = 3


def marker_words(n: int, seed: int) -> list[str]:
    """Distinct made-up words (random letters): in no generated document, and split into ``##``
    word pieces by WordPiece (generated documents hold whole-word tokens only)."""
    rng = np.random.default_rng(seed)
    letters = np.array(list(string.ascii_lowercase))
    words: set[str] = set()
    while len(words) < n:
        words.add("q" + "".join(letters[rng.integers(0, 26, 9)]))
    return sorted(words)


def new_documents(round_no: int, size: int):
    from semiret.data.collection import Document

    texts = synthetic_texts(CHANGE, seed=1000 + round_no)
    markers = marker_words(CHANGE, seed=2000 + round_no)
    docs = [Document(f"new-{size}-{round_no}-{i}", f"{t} {m}") for i, (t, m) in enumerate(zip(texts, markers))]
    return docs, markers


def run_index(kind: str, docs, size: int, workdir, rounds: int) -> dict:
    from semiret.search import BagOfTokensRetriever, BM25Retriever

    cls = {"bm25": BM25Retriever, "bot": BagOfTokensRetriever}[kind]
    path = workdir / f"scaling-{kind}-{size}"
    t = time.perf_counter()
    cls.build(docs[:size], path, overwrite=True)
    build_s = time.perf_counter() - t
    t = time.perf_counter()
    retriever = cls.open(path)
    open_s = time.perf_counter() - t
    retriever.search(["warm up the search kernel"], k=10)

    rng = np.random.default_rng(size)
    victims = rng.permutation(size)[: CHANGE * rounds].reshape(rounds, CHANGE)
    add_s, delete_s, first_search_s = [], [], []
    for r in range(rounds):
        added, markers = new_documents(r, size)
        t = time.perf_counter()
        retriever.add(added)
        add_s.append(time.perf_counter() - t)
        probe = int(rng.integers(CHANGE))
        t = time.perf_counter()
        hits = retriever.search([markers[probe]], k=10)
        first_search_s.append(time.perf_counter() - t)
        assert added[probe].id in hits.ids[0], f"{kind}/{size}: added document not found at once: {hits.ids[0]}"

        ids = [docs[i].id for i in victims[r]]
        t = time.perf_counter()
        retriever.delete(ids)
        delete_s.append(time.perf_counter() - t)
        gone = docs[int(victims[r][0])]
        hits = retriever.search([gone.full_text], k=10)
        assert gone.id not in hits.ids[0], f"{kind}/{size}: deleted document still found"
        assert gone.id not in retriever.index

    reopened = cls.open(path)  # the changes are on disk, not only in this process
    assert reopened.index.n_docs == size, (reopened.index.n_docs, size)
    shutil.rmtree(path, ignore_errors=True)
    return {
        "documents": size, "build_s": round(build_s, 2), "open_s": round(open_s, 4),
        "add_1000_s": round(statistics.median(add_s), 4), "add_1000_runs_s": [round(x, 4) for x in add_s],
        "delete_1000_s": round(statistics.median(delete_s), 4),
        "delete_1000_runs_s": [round(x, 4) for x in delete_s],
        "first_search_after_add_s": round(statistics.median(first_search_s), 4),
        "added_found_at_once": True, "deleted_gone_at_once": True,
    }


def main() -> None:
    parser = common_arguments(__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=str, default=None,
                        help="comma-separated index sizes (default 10000,100000,1000000; 5000,20000 with --quick)")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="adds and deletes of 1,000 per index (median reported)")
    args = parser.parse_args()
    if args.sizes:
        sizes = [int(s) for s in args.sizes.split(",")]
    elif args.quick:
        sizes = [5000, QUICK_DOCS]
    else:
        sizes = [10_000, 100_000, args.docs or DEFAULT_DOCS]
    args.workdir.mkdir(parents=True, exist_ok=True)
    directory, _ = ensure_corpus(max(max(sizes), args.docs or 0))
    docs = load_documents(directory, limit=max(sizes))
    results, ratio = {}, {}
    for kind in ("bm25", "bot"):
        results[kind] = [run_index(kind, docs, size, args.workdir, args.rounds) for size in sizes]
        small, large = results[kind][0], results[kind][-1]
        ratio[kind] = {"add": round(large["add_1000_s"] / small["add_1000_s"], 3),
                       "delete": round(large["delete_1000_s"] / small["delete_1000_s"], 3)}
    emit({
        "benchmark": "add_scaling",
        "description": f"seconds to add / delete {CHANGE:,} documents to indexes of growing size (opened from disk)",
        "ratio": ratio,
        "ratio_means": f"time at {sizes[-1]:,} documents / time at {sizes[0]:,} (flat: about 1; "
                       f"proportional to the index: {sizes[-1] // sizes[0]})",
        "indexes": results,
        "machine": machine(),
    })


if __name__ == "__main__":
    main()
