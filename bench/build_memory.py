"""Peak memory and time of ``semiret index`` (BM25) held whole against written in parts (``--buffer-mb``).

``python bench/build_memory.py [--docs 600000] [--buffers 0,256,128,64] [--quick]`` prints one JSON object: for
each buffer (0: the corpus held whole, one segment, the peer), the command's wall time, its peak resident memory
(the command's ``ru_maxrss``, and its resident memory not backed by a file, read in a process of its own:
:data:`PEAK_OF`), the segments written, the ratios against the whole build, the median latency of a
BM25 query over the result (one thread: what more segments cost a search); and how every build's
BM25 top 100 for the corpus's first queries compares with the whole build's: the queries whose top 100 holds the
same documents, those in the same order with the same scores, and the largest relative score difference (the parts
are renormalised by the whole corpus's average length; a query's terms add up in another order in each segment,
its bounds' order, so scores may differ by float32 rounding and near-ties swap). ``--adds``: also ``semiret add``
of the whole corpus to an index of one document, held whole and with a 256 MB buffer (one commit either way).
``--merges``: also ``semiret merge`` of a copy of the build with the smallest buffer (several segments), every tenth
document deleted, into one segment held whole (0: the peer, what every merge did before), with 256 and 128 MB
buffers, and with the buffer the index was built with (the default), each with its segments and how its top 100s
compare with the merge into one; and the default merge of a copy with nothing deleted (a merge leaves segments that
filled its buffer as they are), and of one with only its first document deleted (the segment holding it is
rewritten alone). The
corpus is the benchmark's Zipf corpus (``corpus.py``; ``--quick``: 100,000 documents). The target: memory that
stops growing with the corpus.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from corpus import CACHE_ROOT, emit, ensure_corpus, load_queries, machine

QUICK_DOCS = 100_000
ADD_BUFFER = 256.0
MERGE_DELETED_EVERY = 10
CHECKED_QUERIES = 200
LATENCY_QUERIES = 1000


PEAK_OF = """
import os, subprocess, sys, time
child = subprocess.Popen(sys.argv[2:])
anonymous = 0
while True:
    pid, status, usage = os.wait4(child.pid, os.WNOHANG)
    if pid:
        break
    try:  # resident memory not backed by a file, sampled: the part that reading mapped files does not add
        with open(f"/proc/{child.pid}/status") as lines:
            anonymous = max([anonymous] + [int(line.split()[1]) for line in lines if line.startswith("RssAnon:")])
    except OSError:
        pass
    time.sleep(0.02)
with open(sys.argv[1], "w") as out:
    out.write(f"{usage.ru_maxrss} {anonymous}")
sys.exit(os.waitstatus_to_exitcode(status))
"""
"""A small process that runs the command and writes its peak memory (``ru_maxrss``, and the largest resident memory
not backed by a file it saw, sampled every 20 ms: pages of memory-mapped index files read count in the first, are
dropped first when memory runs short, and grow with what a merge reads). Linux keeps a process's peak across exec,
and a child spawned (vfork) from this benchmark, which holds indexes, would start with the benchmark's own peak:
measured so, every build after the first read hundreds of MB too high."""


def measured(command: list[str]) -> tuple[dict, bytes]:
    """Run a command in a grandchild process: its wall time and peak memory, and its output."""
    with tempfile.NamedTemporaryFile("r", suffix=".peak") as peak:
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", PEAK_OF, peak.name, *command], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL)
        seconds = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed ({done.returncode})")
        peak_kb, anonymous_kb = map(int, peak.read().split())
    return {"seconds": round(seconds, 2), "peak_mb": round(peak_kb / 1024, 1),
            "peak_anonymous_mb": round(anonymous_kb / 1024, 1)}, done.stdout


def described(figures: dict, output: bytes) -> dict:
    """The figures with the segments and documents of the index the command printed."""
    facts = json.loads(output[output.index(b"{"):])
    return {**figures, "segments": facts["segments"], "documents": facts["documents"]}


def timed_build(corpus: Path, out: Path, buffer_mb: float) -> dict:
    """``semiret index`` in a child process: its wall time, peak memory and segments."""
    return described(*measured([sys.executable, "-m", "semiret.cli", "index", "--data", str(corpus), "--out",
                                str(out), "--overwrite", "--buffer-mb", str(buffer_mb)]))


def timed_add(corpus: Path, out: Path, buffer_mb: float) -> dict:
    """``semiret add`` of the whole corpus to an index of one other document, in a child process."""
    seed = out.with_suffix(".seed.jsonl")
    seed.write_text(json.dumps({"_id": "seed-document", "text": "a document before the add"}) + "\n")
    subprocess.run([sys.executable, "-m", "semiret.cli", "index", "--data", str(seed), "--out", str(out),
                    "--overwrite"], check=True, capture_output=True)
    return measured([sys.executable, "-m", "semiret.cli", "add", str(corpus), "--index", str(out), "--buffer-mb",
                     str(buffer_mb)])[0]


def timed_merge(source: Path, out: Path, buffer_mb: float | None, deleted: slice | None = None) -> dict:
    """``semiret merge`` of a copy of ``source`` (None: the buffer it was built with), the ``deleted`` slice of its
    documents deleted first (None: none), in a child process."""
    from semiret.indexes import open_index

    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(source, out)
    if deleted is not None:
        copy = open_index(out)
        copy.delete(copy.live_ids()[deleted])
    command = [sys.executable, "-m", "semiret.cli", "merge", "--index", str(out)]
    return described(*measured(command + ([] if buffer_mb is None else ["--buffer-mb", str(buffer_mb)])))


def compared(entry: dict, hits, reference) -> None:
    """How a result's top 100s compare with the whole build's, added to its entry."""
    entry["queries"] = len(hits.ids)
    entry["same_top100_documents"] = sum(set(a) == set(b) for a, b in zip(hits.ids, reference.ids))
    entry["same_top100_ranking_and_scores"] = sum(a == b and x == y for a, b, x, y in
                                                  zip(hits.ids, reference.ids, hits.scores, reference.scores))
    entry["max_relative_score_difference"] = max(
        (abs(x - y) / abs(y) for a, b in zip(hits.scores, reference.scores) for x, y in zip(a, b) if y), default=0.0)


def against_whole(entries: dict, entry: dict) -> None:
    """The entry's memory and time as ratios to the one held whole (key "0"), once that one is measured."""
    whole = entries.get("0")
    if whole:
        entry["memory_ratio_to_whole"] = round(entry["peak_mb"] / whole["peak_mb"], 3)
        entry["anonymous_memory_ratio_to_whole"] = round(entry["peak_anonymous_mb"] / whole["peak_anonymous_mb"], 3)
        entry["time_ratio_to_whole"] = round(entry["seconds"] / whole["seconds"], 3)


def search_latency(retriever, queries: list[str]) -> float:
    """Median milliseconds of one BM25 query (k = 10) over the built index: what its segments cost a search."""
    for query in queries[:20]:
        retriever.search(query, k=10)
    times = []
    for query in queries:
        start = time.perf_counter()
        retriever.search(query, k=10)
        times.append((time.perf_counter() - start) * 1000)
    return round(statistics.median(times), 4)


def main() -> None:
    from semiret.search import open_retriever

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=600_000)
    parser.add_argument("--buffers", default="0,256,128,64", help="MB, comma-separated; 0 (the whole) comes first")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--adds", action="store_true", help="also `semiret add` the corpus whole and in parts")
    parser.add_argument("--merges", action="store_true", help="also `semiret merge` the build in most parts, whole "
                                                              "and in parts")
    args = parser.parse_args()
    n_docs = QUICK_DOCS if args.quick else args.docs
    directory, _ = ensure_corpus(n_docs)
    buffers = [0.0] + [float(b) for b in args.buffers.split(",") if float(b) != 0]
    latency_queries = load_queries(directory)[:LATENCY_QUERIES]
    queries = latency_queries[:CHECKED_QUERIES]
    result = {"benchmark": "build_memory", "machine": machine(), "docs": n_docs,
              "corpus_mb": round((directory / "corpus.jsonl").stat().st_size / 2**20, 1), "builds": {}}
    reference = None
    for buffer_mb in buffers:
        out = CACHE_ROOT / f"build-memory-{n_docs}-{buffer_mb:g}"
        entry = timed_build(directory / "corpus.jsonl", out, buffer_mb)
        retriever = open_retriever(out)
        hits = retriever.search(queries, k=100)
        reference = reference or hits
        entry["search_ms_median"] = search_latency(retriever, latency_queries)
        compared(entry, hits, reference)
        against_whole(result["builds"], entry)
        result["builds"][f"{buffer_mb:g}"] = entry
    if args.adds:
        result["adds"] = {}
        for buffer_mb in (0.0, ADD_BUFFER):
            entry = timed_add(directory / "corpus.jsonl", CACHE_ROOT / f"add-memory-{n_docs}-{buffer_mb:g}", buffer_mb)
            against_whole(result["adds"], entry)
            result["adds"][f"{buffer_mb:g}"] = entry
    if args.merges:
        smallest = min(buffers[1:], default=0.0)
        result["merges"] = {"of": f"the build with a {smallest:g} MB buffer, every {MERGE_DELETED_EVERY}th document "
                                  "deleted (top 100s compared with the merge into one segment)"}
        source, merged_whole = CACHE_ROOT / f"build-memory-{n_docs}-{smallest:g}", None
        for buffer_mb, name in ((0.0, "0"), (ADD_BUFFER, f"{ADD_BUFFER:g}"), (128.0, "128"), (None, "as built")):
            out = CACHE_ROOT / f"merge-memory-{n_docs}-{name.replace(' ', '-')}"
            entry = timed_merge(source, out, buffer_mb, slice(None, None, MERGE_DELETED_EVERY))
            hits = open_retriever(out).search(queries, k=100)
            merged_whole = merged_whole or hits
            compared(entry, hits, merged_whole)
            against_whole(result["merges"], entry)
            result["merges"][name] = entry
            shutil.rmtree(out, ignore_errors=True)
        out = CACHE_ROOT / f"merge-memory-{n_docs}-untouched"
        entry = timed_merge(source, out, None)  # nothing deleted: each segment but the last filled the buffer
        compared(entry, open_retriever(out).search(queries, k=100), reference)
        result["merges"]["as built, nothing deleted (top 100s compared with the whole build)"] = entry
        entry = timed_merge(source, out, None, slice(0, 1))  # only the segment holding it is rewritten
        compared(entry, open_retriever(out).search(queries, k=100), reference)
        result["merges"]["as built, the first document deleted (top 100s compared with the whole build)"] = entry
        shutil.rmtree(out, ignore_errors=True)
    emit(result)


if __name__ == "__main__":
    main()
