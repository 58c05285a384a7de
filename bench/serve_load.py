"""Load benchmark of ``semiret serve``: concurrent clients doing mixed search/add/delete over loopback against
a BM25 and an inference-free index of SciFact, then a check that no acknowledged write was lost.

``python bench/serve_load.py [--clients 8] [--duration 600] [--rate 10] [--workers 1]`` prints one JSON object:
per index, the idle search latency (one client, nothing else running; also paced at one load client's rate, a
diagnostic: ``idle_paced``, ``search_p99_over_paced_idle_p50``), then under load the QPS and p50/p99
latency of each operation (for searches also the server's own ``took_ms``), ``search_p99_over_idle_p50`` (the
target: at most 5), and over the whole run the
errors, documents lost (an acknowledged add not there at the end, or an acknowledged delete still there) and
adds not found by the search that followed them; all three must be 0 (exit status 1 otherwise).

Each client is a process of its own and sends ``--rate`` requests per second (exponential gaps, so arrivals are random; a client waits for
each answer, so a slow server lowers the rate it gets rather than queueing without end). An operation is a
search (a SciFact test query, k=10) with probability ``--mix`` search, an add of one new document (a SciFact
text with a word of its own in front, on a copy of the indexes), or a delete of one of the client's own
added documents. After every add the client searches for the new document's first words and expects it in
the top 10 (timed as ``check``, apart from the other searches: a 30-word query costs more than a test query). The base indexes are built once into ``--workdir`` and copied for each run (the copy is removed
at the end).
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import multiprocessing
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from corpus import CACHE_ROOT, SCIFACT, emit, load_documents, load_queries, machine

KEY = "bench-key"
OPERATIONS = ("search", "add", "delete", "check")
"""``check``: the search for a just-added document's first 30 words."""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3) if ordered else None


@contextmanager
def run_directory(path: Path):
    """Remove the run's copies of the indexes when it ends."""
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def base_indexes(workdir: Path, docs: int | None, model: str) -> dict[str, Path]:
    """BM25 and inference-free indexes of SciFact (its first ``docs`` documents), built once."""
    from semiret.search import BM25Retriever, InferenceFreeRetriever

    documents = None
    suffix = f"-{docs}" if docs else ""
    slug = "".join(c if c.isalnum() else "-" for c in model)[-40:]
    wanted = {"bm25": (workdir / f"scifact{suffix}-bm25", BM25Retriever, {}),
              "inference-free": (workdir / f"scifact{suffix}-if-{slug}", InferenceFreeRetriever, {"model": model})}
    for path, retriever, options in wanted.values():
        if not (path / "meta.json").is_file():
            documents = documents or load_documents(SCIFACT, docs)
            retriever.build(documents, path, overwrite=True, **options)
    return {name: path for name, (path, _, _) in wanted.items()}


class Client:
    """One client: its own process, connection, schedule and documents (processes, not threads: clients of a
    service are separate programs, and threads of one would wait on each other's GIL and count it as latency)."""

    def __init__(self, number: int, url: str, indexes: list[str], queries: list[str], texts: list[str], args, stop_at: float):
        self.url = url
        self.http = None
        self.number, self.indexes, self.queries, self.texts, self.args = number, indexes, queries, texts, args
        self.stop_at = stop_at
        self.rng = random.Random(number)
        self.latencies: dict[tuple[str, str], list[float]] = defaultdict(list)
        self.server_times: dict[tuple[str, str], list[float]] = defaultdict(list)  # searches' own ``took_ms``
        self.errors: list[str] = []
        self.added: dict[str, dict[str, str]] = {name: {} for name in indexes}  # index -> id -> acknowledged text
        self.deleted: dict[str, set[str]] = {name: set() for name in indexes}
        self.not_visible = 0
        self.sequence = 0

    def request(self, operation: str, index: str, method: str, path: str, body: dict) -> dict | None:
        started = time.perf_counter()
        try:
            answer = self.http.request(method, path, json=body)
        except Exception as exc:  # noqa: BLE001 (any failure is an error to report)
            self.errors.append(f"{operation} {index}: {type(exc).__name__}: {exc}")
            return None
        self.latencies[(index, operation)].append((time.perf_counter() - started) * 1000)
        if answer.status_code != 200:
            self.errors.append(f"{operation} {index}: {answer.status_code} {answer.text[:200]}")
            return None
        body = answer.json()
        if "took_ms" in body:
            self.server_times[(index, operation)].append(body["took_ms"])
        return body

    def run(self) -> "Client":
        """Send requests until the stop time; returns itself without its connection (to pickle back)."""
        import httpx

        with httpx.Client(base_url=self.url, headers={"X-API-Key": KEY}, timeout=60) as self.http:
            self._send_until_stop()
        self.http = None
        return self

    def _send_until_stop(self) -> None:
        mix = self.args.mix
        next_at = time.monotonic()
        while time.monotonic() < self.stop_at:
            if self.args.rate > 0:
                next_at = max(next_at + self.rng.expovariate(self.args.rate), time.monotonic() - 1.0)
                time.sleep(max(0.0, next_at - time.monotonic()))
            index = self.rng.choice(self.indexes)
            draw = self.rng.random()
            live = [i for i in self.added[index] if i not in self.deleted[index]]
            if draw < mix[0] or (draw >= mix[0] + mix[1] and not live):
                self.request("search", index, "POST", f"/indexes/{index}/search",
                             {"queries": [self.rng.choice(self.queries)], "k": 10})
            elif draw < mix[0] + mix[1]:
                self.add(index)
            else:
                doc_id = self.rng.choice(live)
                if self.request("delete", index, "POST", f"/indexes/{index}/documents/delete", {"ids": [doc_id]}):
                    self.deleted[index].add(doc_id)

    def add(self, index: str) -> None:
        self.sequence += 1
        doc_id = f"load-{self.number}-{self.sequence}"
        text = f"loadword{self.number}x{self.sequence} {self.rng.choice(self.texts)}"
        if self.request("add", index, "PUT", f"/indexes/{index}/documents", {"documents": [{"_id": doc_id, "text": text}]}):
            self.added[index][doc_id] = text
            found = self.request("check", index, "POST", f"/indexes/{index}/search",
                                 {"queries": [" ".join(text.split()[:30])], "k": 10})
            if found is not None and doc_id not in [hit["id"] for hit in found["results"][0]]:
                self.not_visible += 1


def idle_latencies(url: str, index: str, queries: list[str], count: int, rate: float = 0.0) -> list[float]:
    """Single-query searches by one client, nothing else running (after a warm-up): one after the other, or
    paced like a load client (``rate`` per second, exponential gaps), so that the machine idles between them."""
    import httpx

    rng = random.Random(-1)
    with httpx.Client(base_url=url, timeout=60) as http:
        times = []
        for n, query in enumerate((queries * (count // len(queries) + 2))[: count + 20]):
            if rate > 0:
                time.sleep(rng.expovariate(rate))
            started = time.perf_counter()
            http.post(f"/indexes/{index}/search", json={"queries": [query], "k": 10}).raise_for_status()
            if n >= 20:
                times.append((time.perf_counter() - started) * 1000)
        return times


def lost_documents(url: str, clients: list[Client]) -> int:
    """Acknowledged adds missing (or with another text) and acknowledged deletes still there, at the end."""
    import httpx

    lost = 0
    with httpx.Client(base_url=url, timeout=60) as http:
        for client in clients:
            for index, added in client.added.items():
                for doc_id, text in added.items():
                    answer = http.get(f"/indexes/{index}/documents/{doc_id}")
                    if doc_id in client.deleted[index]:
                        lost += answer.status_code != 404
                    else:
                        lost += answer.status_code != 200 or answer.json()["text"] != text
    return lost


def main() -> None:
    from semiret import progress
    from semiret.serving.process import ServerProcess

    progress.set_enabled(False)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of load")
    parser.add_argument("--rate", type=float, default=10.0, help="requests per second per client (0: back to back)")
    parser.add_argument("--mix", default="0.9,0.05,0.05", help="shares of search, add, delete")
    parser.add_argument("--workers", type=int, default=1, help="server worker processes")
    parser.add_argument("--max-segments", type=int, default=8, help="the server's --max-segments")
    parser.add_argument("--idle-queries", type=int, default=1000, help="searches timed before the load, per index")
    parser.add_argument("--paced-idle-queries", type=int, default=300,
                        help="searches timed before the load at one client's --rate, per index (0: none)")
    parser.add_argument("--docs", type=int, default=None, help="index only the first N SciFact documents")
    parser.add_argument("--model", default="inference-free-scifact", help="the inference-free index's model")
    parser.add_argument("--indexes", default="bm25,inference-free", help="which of the two indexes to serve")
    parser.add_argument("--workdir", type=Path, default=CACHE_ROOT / "serve-load",
                        help="where the base indexes are built once, and copied for each run")
    args = parser.parse_args()
    args.mix = [float(x) for x in args.mix.split(",")]
    if len(args.mix) != 3 or abs(sum(args.mix) - 1.0) > 1e-6:
        parser.error("--mix takes three shares (search, add, delete) that sum to 1")

    started = time.perf_counter()
    bases = base_indexes(args.workdir / "base", args.docs, args.model)
    run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=args.workdir))  # the run changes copies of the indexes
    served = {}
    for name in args.indexes.split(","):
        served[name] = run_dir / name
        shutil.copytree(bases[name], served[name])
    queries = load_queries(SCIFACT, "test")
    texts = [d.full_text[:2000] for d in load_documents(SCIFACT, 2000)]
    setup_s = time.perf_counter() - started

    with ServerProcess(served, api_key=KEY, workers=args.workers,
                       extra_args=["--max-segments", str(args.max_segments)]) as server, run_directory(run_dir):
        import httpx

        before = {name: httpx.get(f"{server.url}/indexes/{name}").json() for name in served}
        idle = {name: idle_latencies(server.url, name, queries, args.idle_queries) for name in served}
        paced = {name: idle_latencies(server.url, name, queries, args.paced_idle_queries, args.rate)
                 for name in served if args.paced_idle_queries and args.rate > 0}
        stop_at = time.monotonic() + args.duration
        clients = [Client(n, server.url, list(served), queries, texts, args, stop_at) for n in range(args.clients)]
        load_started = time.perf_counter()
        with ProcessPoolExecutor(args.clients, mp_context=multiprocessing.get_context("fork")) as pool:
            clients = list(pool.map(Client.run, clients))
        load_s = time.perf_counter() - load_started
        lost = lost_documents(server.url, clients)
        after = {name: httpx.get(f"{server.url}/indexes/{name}").json() for name in served}

    errors = [e for client in clients for e in client.errors]
    per_index = {}
    total_requests = 0
    for name in served:
        load = {}
        for operation in OPERATIONS:
            times = [t for client in clients for t in client.latencies.get((name, operation), [])]
            total_requests += len(times)
            load[operation] = {"count": len(times), "qps": round(len(times) / load_s, 2),
                               "p50_ms": percentile(times, 0.5), "p99_ms": percentile(times, 0.99)}
            took = [t for client in clients for t in client.server_times.get((name, operation), [])]
            if took:
                load[operation].update(server_p50_ms=percentile(took, 0.5), server_p99_ms=percentile(took, 0.99))
        idle_p50 = percentile(idle[name], 0.5)
        ratio = round(load["search"]["p99_ms"] / idle_p50, 2) if load["search"]["count"] else None
        per_index[name] = {
            "documents_before": before[name]["documents"], "documents_after": after[name]["documents"],
            "segments_after": after[name]["segments"],
            "idle": {"searches": len(idle[name]), "search_p50_ms": idle_p50, "search_p99_ms": percentile(idle[name], 0.99)},
            "load": load, "search_p99_over_idle_p50": ratio, "target_met": ratio is not None and ratio <= 5.0,
        }
        if name in paced:  # a diagnostic beside the target: the same arrivals as a load client, without the load
            paced_p50 = percentile(paced[name], 0.5)
            per_index[name]["idle_paced"] = {"searches": len(paced[name]), "rate_per_s": args.rate,
                                             "search_p50_ms": paced_p50, "search_p99_ms": percentile(paced[name], 0.99)}
            per_index[name]["search_p99_over_paced_idle_p50"] = (
                round(load["search"]["p99_ms"] / paced_p50, 2) if load["search"]["count"] else None)
    result = {
        "benchmark": "serve_load", "command": " ".join(["python", *sys.argv]),
        "clients": args.clients, "duration_s": round(load_s, 1), "rate_per_client": args.rate, "mix": args.mix,
        "workers": args.workers, "max_segments": args.max_segments, "setup_s": round(setup_s, 1),
        "indexes": per_index, "total_requests": total_requests, "total_qps": round(total_requests / load_s, 2),
        "errors": len(errors), "error_examples": errors[:5], "lost_documents": lost,
        "not_visible_after_add": sum(client.not_visible for client in clients), "machine": machine(),
    }
    emit(result)
    if errors or lost or result["not_visible_after_add"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
