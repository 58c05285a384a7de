"""Synthetic benchmark corpora, plus the helpers every benchmark shares.

``python bench/corpus.py [--docs N] [--quick] [--out DIR]`` writes (or reuses) a BEIR-style
``corpus.jsonl`` of N documents and a ``queries.jsonl`` of 1,000 queries and prints one JSON object.

Words are the real English whole-word tokens of the bert-base-uncased vocabulary (no ``##``,
alphabetic ASCII, at least two letters, ids >= 999: 21,719 words), ranked by vocabulary id, which
in BERT's vocabulary follows corpus frequency ("the", "of", "and", ...). Word ranks are drawn from
a Zipf law with exponent 1.1 over that list; document lengths are lognormal with mean about 60
words (like MS MARCO passages), clipped to [5, 400]. Queries hold 2-6 words from the same law.
Everything is vectorized with numpy and seeded, so a given N always gives the same files.
Generated data lives in a cache directory (default ``/tmp/semiret-bench/zipf-<N>/``), never in git.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

DEFAULT_DOCS = 1_000_000
QUICK_DOCS = 20_000
QUICK_SCIFACT_DOCS = 500
"""SciFact documents a ``--quick`` run of a benchmark that encodes them with a neural model reads (a smoke run:
its quality figures are not the collection's)."""
CACHE_ROOT = Path(os.environ.get("SEMIRET_BENCH_CACHE", "/tmp/semiret-bench"))
SCIFACT = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "scifact"
PACKAGED_MODELS = {"inference-free": "inference-free-scifact", "splade": "splade-tiny"}
"""The model a benchmark builds each neural retriever with (offline: packaged or shipped in a PyPI package)."""


def model_key(model: str | None) -> str:
    """A short key of a model for cache names: its name or resolved path, and where it is a folder the names, sizes
    and times of its files (a model retrained into the same folder, ``runs/X/model`` as every run names it, gets
    another key: its cached index or vectors are not reused)."""
    if model is None:
        return "default"
    path = Path(model)
    parts = [str(path.resolve()) if path.exists() else model]
    if path.is_dir():
        parts += [f"{f.relative_to(path)}:{f.stat().st_size}:{f.stat().st_mtime_ns}"
                  for f in sorted(path.rglob("*")) if f.is_file()]
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()[:12]


def model_options(retriever: str) -> dict:
    """Build options naming :data:`PACKAGED_MODELS`' model for ``retriever`` (none for the others)."""
    return {"model": PACKAGED_MODELS[retriever]} if retriever in PACKAGED_MODELS else {}
ZIPF_EXPONENT = 1.1
MEAN_WORDS = 60.0
LENGTH_SIGMA = 0.6
MIN_WORDS, MAX_WORDS = 5, 400
N_QUERIES = 1000
QUERY_WORDS = (2, 6)
SEED = 20240611
CHUNK_DOCS = 100_000


def english_words(tokenizer: str = "bert-base-uncased") -> list[str]:
    """Whole-word English tokens of a WordPiece vocabulary, most frequent first (by id)."""
    from semiret.text.wordpiece import WordPieceVocabulary

    vocab = WordPieceVocabulary(tokenizer).token_ids()
    words = [(i, t) for t, i in vocab.items()
             if i >= 999 and not t.startswith("##") and t.isascii() and t.isalpha() and len(t) >= 2]
    return [t for _, t in sorted(words)]


class ZipfSampler:
    """Word ids by inverse-CDF sampling of a (finite) Zipf law."""

    def __init__(self, n_words: int, exponent: float = ZIPF_EXPONENT):
        weights = np.arange(1, n_words + 1, dtype=np.float64) ** -exponent
        self.cdf = np.cumsum(weights / weights.sum())
        self.cdf[-1] = 1.0

    def __call__(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return np.searchsorted(self.cdf, rng.random(size), side="right").astype(np.int32)


def document_lengths(rng: np.random.Generator, n: int) -> np.ndarray:
    mu = np.log(MEAN_WORDS) - LENGTH_SIGMA ** 2 / 2  # lognormal mean = exp(mu + sigma^2 / 2)
    return np.clip(np.rint(rng.lognormal(mu, LENGTH_SIGMA, n)), MIN_WORDS, MAX_WORDS).astype(np.int64)


def _texts(words: list[str], ids: np.ndarray, lengths: np.ndarray) -> list[str]:
    """Join word ids into one text per document, by byte gathers instead of per-word Python."""
    blob = np.frombuffer("".join(w + " " for w in words).encode("ascii"), np.uint8)
    word_len = np.array([len(w) + 1 for w in words], np.int64)  # with its trailing space
    word_start = np.zeros(len(words), np.int64)
    np.cumsum(word_len[:-1], out=word_start[1:])
    lens = word_len[ids]
    out_start = np.zeros(len(ids), np.int64)
    np.cumsum(lens[:-1], out=out_start[1:])
    gather = np.arange(int(lens.sum()), dtype=np.int64) + np.repeat(word_start[ids] - out_start, lens)
    chars = blob[gather]
    ends = np.cumsum(lens)[np.cumsum(lengths) - 1] - 1  # the space after each document's last word
    chars[ends] = ord("\n")
    return chars.tobytes().decode("ascii").split("\n")[: len(lengths)]


def generate(n_docs: int, directory: Path, seed: int = SEED) -> dict:
    """Write ``corpus.jsonl`` and ``queries.jsonl`` into ``directory`` (atomically renamed)."""
    started = time.perf_counter()
    words = english_words()
    sample = ZipfSampler(len(words))
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".corpus.jsonl.tmp-{os.getpid()}"
    total_words = 0
    with open(tmp, "w", encoding="ascii") as handle:
        for lo in range(0, n_docs, CHUNK_DOCS):
            hi = min(lo + CHUNK_DOCS, n_docs)
            lengths = document_lengths(rng, hi - lo)
            texts = _texts(words, sample(rng, int(lengths.sum())), lengths)
            total_words += int(lengths.sum())
            handle.write("".join(f'{{"_id": "d{lo + i}", "title": "", "text": "{t}"}}\n'
                                 for i, t in enumerate(texts)))
    qrng = np.random.default_rng(seed + 1)
    q_lengths = qrng.integers(QUERY_WORDS[0], QUERY_WORDS[1] + 1, N_QUERIES)
    queries = _texts(words, sample(qrng, int(q_lengths.sum())), q_lengths)
    qtmp = directory / f".queries.jsonl.tmp-{os.getpid()}"
    with open(qtmp, "w", encoding="ascii") as handle:
        handle.writelines(json.dumps({"_id": f"q{i}", "text": t}) + "\n" for i, t in enumerate(queries))
    os.replace(qtmp, directory / "queries.jsonl")
    os.replace(tmp, directory / "corpus.jsonl")  # last: its presence means the directory is complete
    return {"docs": n_docs, "words": total_words, "mean_words": total_words / max(n_docs, 1),
            "vocabulary": len(words), "generate_s": round(time.perf_counter() - started, 2)}


def synthetic_texts(n: int, seed: int) -> list[str]:
    """``n`` more texts from the same distributions, in memory (documents to add to an index)."""
    words = english_words()
    rng = np.random.default_rng(seed)
    lengths = document_lengths(rng, n)
    return _texts(words, ZipfSampler(len(words))(rng, int(lengths.sum())), lengths)


def corpus_directory(n_docs: int, root: Path = CACHE_ROOT) -> Path:
    return Path(root) / f"zipf-{n_docs}"


def ensure_corpus(n_docs: int, root: Path = CACHE_ROOT) -> tuple[Path, dict]:
    """The cached corpus directory for ``n_docs`` documents, generated first if missing."""
    directory = corpus_directory(n_docs, root)
    if (directory / "corpus.jsonl").is_file() and (directory / "queries.jsonl").is_file():
        return directory, {"docs": n_docs, "cached": True}
    return directory, {**generate(n_docs, directory), "cached": False}


# ---------------------------------------------------------------------- shared benchmark helpers
def load_documents(directory: Path, limit: int | None = None):
    """All documents of a BEIR corpus in memory (benchmarks time indexing, not JSON parsing)."""
    from semiret.data.collection import iter_corpus

    docs = []
    for doc in iter_corpus(Path(directory) / "corpus.jsonl"):
        docs.append(doc)
        if limit is not None and len(docs) >= limit:
            break
    return docs


def load_queries(directory: Path, split: str | None = None) -> list[str]:
    """Query texts; with ``split``, only those judged in ``qrels/<split>.tsv`` (BEIR test queries)."""
    from semiret.data.collection import read_qrels, read_queries

    queries = read_queries(Path(directory) / "queries.jsonl")
    if split:
        judged = read_qrels(Path(directory) / "qrels" / f"{split}.tsv")
        return [text for qid, text in queries.items() if qid in judged]
    return list(queries.values())


def bench_corpora(args) -> list[tuple[str, Path, str | None]]:
    """(name, directory, qrels split) of the corpora a benchmark runs on: SciFact, then Zipf-N."""
    if args.docs is not None:
        n_docs = args.docs  # 0 means SciFact only
    else:
        n_docs = QUICK_DOCS if args.quick else DEFAULT_DOCS
    corpora = []
    if not args.no_scifact:
        corpora.append(("scifact", SCIFACT, "test"))
    if n_docs > 0:
        corpora.append((f"zipf-{n_docs}", ensure_corpus(n_docs)[0], None))
    return corpora


def common_arguments(description: str) -> argparse.ArgumentParser:
    from semiret import progress

    progress.set_enabled(False)  # no progress bars: stdout carries one JSON object, and bars cost time
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--docs", type=int, default=None,
                        help=f"synthetic corpus size (default {DEFAULT_DOCS:,}; {QUICK_DOCS:,} with --quick; 0: none)")
    parser.add_argument("--quick", action="store_true", help="small corpus and fewer repetitions (smoke run)")
    parser.add_argument("--no-scifact", action="store_true", help="skip SciFact")
    parser.add_argument("--workdir", type=Path, default=CACHE_ROOT / "indexes", help="where indexes are written")
    return parser


def latency_arguments(description: str) -> argparse.ArgumentParser:
    """The single-query latency benchmarks' parser: ``--data``, ``--split`` and ``--rounds`` (progress bars off:
    stdout carries one JSON object)."""
    from semiret import progress

    progress.set_enabled(False)
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--data", default="scifact")
    parser.add_argument("--split", default="test")
    parser.add_argument("--rounds", type=int, default=4)
    return parser


def latency_queries(data: str, split: str):
    """(collection, qrels, query ids, query texts) of ``data``'s ``split``, with torch on one thread: the
    single-thread latency benchmarks' common start."""
    import torch

    from semiret.data.collection import Collection
    from semiret.data.paths import dataset

    torch.set_num_threads(1)
    collection = Collection(dataset(data))
    qrels, queries = collection.qrels(split), collection.queries(split)
    return collection, qrels, list(queries), list(queries.values())


def machine() -> dict:
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
            "date": time.strftime("%Y-%m-%d %H:%M"), "load_avg_1m": round(load[0], 2) if load else None}


def best_of(fn, repeat: int) -> tuple[float, object]:
    """Smallest wall time of ``repeat`` calls (and the last result): the least disturbed run."""
    best, result = float("inf"), None
    for _ in range(max(repeat, 1)):
        t = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t)
    return best, result


def timed_rounds(systems: dict, items: list, rounds: int = 4, warm_up: int = 5) -> dict[str, list[float]]:
    """Milliseconds of ``system(item)`` for every system, item and round, for single-query latency.

    A round runs each system over all items in turn, the order of the systems rotating between rounds, so
    load changes hit all of them alike. Interleaving systems item by item would not be fair: the second of
    two systems searching the same index for the same query finds the first one's postings in the CPU cache.
    """
    for system in systems.values():
        for item in items[:warm_up]:  # numba, page cache, tokenizers
            system(item)
    times = {label: [] for label in systems}
    labels = list(systems)
    for round_ in range(rounds):
        for label in labels[round_ % len(labels):] + labels[: round_ % len(labels)]:
            system = systems[label]
            for item in items:
                start = time.perf_counter()
                system(item)
                times[label].append((time.perf_counter() - start) * 1000)
    return times


def timed_on_copies(base: Path, scratch: Path, ways: dict, rounds: int, after=None) -> dict[str, float]:
    """The best wall time of each of ``ways`` (``{name: change(retriever)}``) over ``rounds``, each run on a fresh
    copy of the index ``base`` (made under ``scratch``), opened, its model loaded before the timing (encoding is
    timed, not loading); ``after(name, retriever)`` is called after each run, untimed (a check)."""
    import shutil

    from semiret.search import open_retriever

    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(rounds):
        for name, change in ways.items():
            copy = scratch / f"{base.name}-{name}"
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(base, copy)
            retriever = open_retriever(copy)
            if hasattr(retriever.document_side, "encoder"):
                retriever.document_side.encoder  # loaded now
            started = time.perf_counter()
            change(retriever)
            times[name].append(time.perf_counter() - started)
            if after is not None:
                after(name, retriever)
    return {name: min(each) for name, each in times.items()}


def emit(result: dict) -> None:
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=None, help="directory (default: the cache directory)")
    args = parser.parse_args()
    n_docs = args.docs or (QUICK_DOCS if args.quick else DEFAULT_DOCS)
    if args.out is not None:
        info = generate(n_docs, args.out)
        directory = args.out
    else:
        directory, info = ensure_corpus(n_docs)
    emit({"benchmark": "corpus", "path": str(directory / "corpus.jsonl"),
          "queries": str(directory / "queries.jsonl"), **info, "machine": machine()})


if __name__ == "__main__":
    main()
