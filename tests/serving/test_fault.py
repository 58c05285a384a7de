"""The fault test of issue 19: a real server process (``python -m semiret.cli serve``) is killed with SIGKILL in the
middle of a stream of adds, replaces and deletes, restarted, and every acknowledged write checked: present (the
acknowledged version, and searchable) or absent if deleted. A write still in flight at the kill may have
happened or not; after the restart its outcome is read and tracked from then on. Every fourth server runs two
worker processes (killed together)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import httpx
import numpy as np

from semiret.data import Document
from semiret.search import BM25Retriever
from semiret.serving.process import ServerProcess

KILLS = int(os.environ.get("SEMIRET_FAULT_KILLS", "4"))
"""Servers killed in one run: 4 (each way of killing once: after a first acknowledged write, anywhere, again after
one, a server of two workers) keep the suite under its 10 minutes on the 2-core machine (about 10 s a kill, each
server's start most of it: 12 took 135 s of the suite's 607 in the sixty-first session); ``SEMIRET_FAULT_KILLS=50``
for a longer hunt (22 ran in every session before the twenty-ninth, 12 until the sixty-first)."""
WRITERS = 2
KEY = "fault-key"


class Writer:
    """One client streaming writes on its own ids until the server dies; remembers what was acknowledged."""

    def __init__(self, number: int, seed: int):
        self.number = number
        self.rng = np.random.default_rng(seed)
        self.expected: dict[str, str | None] = {}  # id -> acknowledged text, None once deleted
        self.in_flight: set[str] = set()  # ids of the request the kill interrupted
        self.acknowledged = 0
        self.next_id = 0
        self.failures: list[str] = []

    def text(self, doc_id: str) -> str:
        """A new version of a document: its last word is unique to this version, so a search finds exactly it."""
        return f"common words v{self.rng.integers(1 << 40)}x{doc_id.replace('-', 'x')}"

    def run(self, client: httpx.Client) -> None:
        while True:
            live = [i for i, text in self.expected.items() if text is not None]
            choice = self.rng.random()
            if choice < 0.3 and live:
                ids = list(self.rng.choice(live, size=min(len(live), int(self.rng.integers(1, 3))), replace=False))
                request, change = ("POST", "/indexes/fault/documents/delete", {"ids": ids}), dict.fromkeys(ids)
            else:
                ids = [f"w{self.number}-{self.next_id + n}" for n in range(int(self.rng.integers(1, 4)))]
                self.next_id += len(ids)
                if choice < 0.5 and live:
                    ids[0] = str(self.rng.choice(live))  # a replace
                change = {doc_id: self.text(doc_id) for doc_id in ids}
                request = ("PUT", "/indexes/fault/documents",
                           {"documents": [{"_id": i, "text": t} for i, t in change.items()]})
            self.in_flight = set(change)
            try:
                answer = client.request(request[0], request[1], json=request[2])
            except httpx.TransportError:
                return  # killed: the request in flight may or may not have been applied
            if answer.status_code != 200:
                self.failures.append(answer.text)
                return
            self.expected.update(change)
            self.in_flight = set()
            self.acknowledged += 1

    def settle(self, client: httpx.Client) -> None:
        """After a restart: learn what became of the interrupted request."""
        for doc_id in self.in_flight:
            answer = client.get(f"/indexes/fault/documents/{doc_id}")
            self.expected[doc_id] = answer.json()["text"] if answer.status_code == 200 else None
        self.in_flight = set()


def check(client: httpx.Client, expected: dict[str, str | None]) -> None:
    """Every acknowledged write is there: each live document with its acknowledged text and found by the word only
    its version has; no deleted document found."""
    words = {doc_id: text.split()[-1] for doc_id, text in expected.items() if text is not None}
    results = client.post("/indexes/fault/search", json={"queries": list(words.values()), "k": 1, "with_text": True})
    for doc_id, hits in zip(words, results.json()["results"]):
        assert [(hit["id"], hit["text"]) for hit in hits] == [(doc_id, expected[doc_id])], doc_id
    for doc_id in (i for i, text in expected.items() if text is None):
        assert client.get(f"/indexes/fault/documents/{doc_id}").status_code == 404, doc_id


def test_no_acknowledged_write_is_lost_when_the_server_is_killed(tmp_path):
    BM25Retriever.build([Document("seed", "common words")], tmp_path / "fault")
    rng = np.random.default_rng(19)
    writers = [Writer(n, seed) for n, seed in enumerate(rng.integers(1 << 31, size=WRITERS))]
    indexes = {"fault": tmp_path / "fault"}
    started = time.monotonic()
    for kill in range(KILLS + 1):
        workers = 2 if kill % 4 == 3 else 1  # every fourth server: two worker processes sharing the index
        server = ServerProcess(indexes, api_key=KEY, workers=workers, extra_args=["--max-segments", "4"]).start()
        try:
            with httpx.Client(base_url=server.url, headers={"X-API-Key": KEY}, timeout=30) as client:
                for writer in writers:
                    writer.settle(client)
                check(client, {i: t for writer in writers for i, t in writer.expected.items()})
                if kill == KILLS:
                    break
                threads = [threading.Thread(target=writer.run, args=(client,)) for writer in writers]
                before = sum(writer.acknowledged for writer in writers)
                for thread in threads:
                    thread.start()
                if kill % 4 != 1:  # most rounds: the kill after the round's first acknowledged write, however slow
                    deadline = time.monotonic() + 30
                    while sum(writer.acknowledged for writer in writers) == before and time.monotonic() < deadline:
                        time.sleep(0.01)
                    assert sum(writer.acknowledged for writer in writers) > before, "no write acknowledged in 30 s"
                time.sleep(rng.uniform(0.0, 0.4))  # the kill lands wherever the writes are (maybe before any)
                server.kill()
                for thread in threads:
                    thread.join(30)
                assert not [failure for writer in writers for failure in writer.failures]
        finally:
            server.kill()
    acknowledged = sum(writer.acknowledged for writer in writers)
    print(f"\n{KILLS} kills, {acknowledged} acknowledged writes, {time.monotonic() - started:.1f} s")
    assert acknowledged >= sum(kill % 4 != 1 for kill in range(KILLS))  # the kills landed among writes


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux's /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _cpu_ticks(pid: int) -> int:
    """The CPU time a process has used, in clock ticks (Linux's /proc: user and system time)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def test_the_writer_process_exits_when_the_server_is_killed_alone(tmp_path):
    """SIGKILL to the serving process only (not its group): the writer process it started does not live on."""
    import os
    import signal

    BM25Retriever.build([Document("seed", "common words")], tmp_path / "alone")
    server = ServerProcess({"alone": tmp_path / "alone"}, api_key=KEY).start()
    try:
        children = _children(server.process.pid)
        assert children, "the server started no writer process"
        os.kill(server.process.pid, signal.SIGKILL)
        server.process.wait()
        deadline = time.monotonic() + 15
        while any(Path(f"/proc/{pid}").exists() for pid in children) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in children if Path(f"/proc/{pid}").exists()]
    finally:
        server.kill()


def test_a_stop_while_writing_answers_the_write_and_ends_cleanly(tmp_path):
    """Ctrl-C reaches the whole process group, the writer process too: the write under way finishes and is answered
    (the writer died of KeyboardInterrupt: a 500, the write lost), and the server stops. SIGTERM ends the server by
    that signal, as a service manager expects of a clean stop (the exit status was 143: a failure to systemd)."""
    import signal

    BM25Retriever.build([Document("seed", "common words")], tmp_path / "stopped")
    rng = np.random.default_rng(0)
    documents = [{"_id": f"n{i}", "text": " ".join(f"w{w}" for w in rng.integers(0, 5000, 200))} for i in range(4000)]
    answers = []
    server = ServerProcess({"stopped": tmp_path / "stopped"}, api_key=KEY).start()
    try:
        with httpx.Client(base_url=server.url, headers={"X-API-Key": KEY}, timeout=300) as client:
            writing = threading.Thread(target=lambda: answers.append(
                client.put("/indexes/stopped/documents", json={"documents": documents})))
            [writer] = [pid for pid in _children(server.process.pid)  # (not multiprocessing's resource tracker)
                        if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()]
            working_from = _cpu_ticks(writer)
            writing.start()
            while _cpu_ticks(writer) < working_from + 20 and writing.is_alive():  # the writer at work on it
                time.sleep(0.01)
            assert not answers, "the write was answered before the writer process was seen at work"
            os.killpg(server.process.pid, signal.SIGINT)
            writing.join()
        server.process.wait(60)
        assert answers[0].status_code == 200 and answers[0].json()["upserted"] == 4000, answers[0].text
        assert BM25Retriever.open(tmp_path / "stopped").index.n_docs == 4001
    finally:
        server.kill()
    with ServerProcess({"stopped": tmp_path / "stopped"}, api_key=KEY) as server:
        os.kill(server.process.pid, signal.SIGTERM)
        assert server.process.wait(60) == -signal.SIGTERM
