"""Writes in a process of their own, so that searches never wait on them for the interpreter.

A write is Python-heavy (tokenizing, encoding a batch with a small model whose every operator returns to the
interpreter, building and committing a segment): run in the serving process, it holds the GIL for long
stretches, and every search answered meanwhile waits for it (on the 2-core reference machine a search's p99
under a mixed load was 13-15x its idle p50, against 4.5x with searches alone). The writer process opens the same
index directories and does the writes; the serving process only refreshes its snapshot once a write is
committed (:meth:`ServedIndex.refresh`), so an acknowledged write is visible to the next search as before. The
index's own file lock keeps writers serialised across processes, as it does for ``--workers N``.

The process is started fresh (``spawn``: forking a process whose tokenizer and torch thread pools have run can
deadlock the child) and runs at a lower priority (:data:`WRITER_NICENESS`) with half the cores for torch. Both
processes freeze what start-up allocated out of the garbage collector's reach (``gc.freeze``): a full
collection over the half million objects a served model and FastAPI leave took 216 ms, a pause every request
in flight would wait for. If the server is killed (even by SIGKILL, which closes nothing in order), the writer
notices that its parent is gone within :data:`PARENT_CHECK_SECONDS` and exits; a write it was committing either
lands whole or not at all (the index's commit is atomic), and was not acknowledged.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import sys
import threading
import time
from concurrent.futures import Future, ProcessPoolExecutor

WRITER_NICENESS = 10
"""The writer process's ``nice`` increment: when the cores are busy the scheduler serves searches first (a write
takes a little longer to be acknowledged; with idle cores nothing changes)."""

PARENT_CHECK_SECONDS = 1.0
"""How often the writer checks that the serving process that started it is still its parent."""

_INDEXES: dict = {}
"""The writer process's own :class:`~semiret.serving.served.ServedIndex` per index name."""


def _exit_with_parent(parent: int) -> None:
    """Exit once the process that started this one has died (this one is then adopted by another)."""
    while os.getppid() == parent:
        time.sleep(PARENT_CHECK_SECONDS)
    os._exit(0)


def _open_indexes(specs: dict[str, tuple[str, str | None]], max_segments: int, threads: int) -> None:
    from semiret.serving.served import ServedIndex

    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True, name="parent-watch").start()
    os.nice(WRITER_NICENESS)
    for name, (path, retriever) in specs.items():
        index = ServedIndex(name, path, max_segments, retriever)
        index.warm_up(searches=False, writes=True)
        _INDEXES[name] = index
    if "torch" in sys.modules:  # a neural document side was loaded (BM25 alone never imports torch)
        sys.modules["torch"].set_num_threads(threads)
    gc.freeze()


def _write(name: str, method: str, args: tuple):
    return getattr(_INDEXES[name], method)(*args)


class WriterProcess:
    """One process doing every write of the served indexes, one at a time, in the order they arrive."""

    def __init__(self, specs: dict[str, tuple[str, str | None]], max_segments: int, threads: int | None = None):
        threads = threads or max(1, (os.cpu_count() or 2) // 2)  # leave cores to the searches
        self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        # a task rather than the pool's initializer: an error opening an index comes back with its message
        self._opened: Future = self._pool.submit(_open_indexes, specs, max_segments, threads)

    def wait_until_open(self) -> None:
        """Return once the writer has opened every index (raise what opening one raised)."""
        self._opened.result()

    @property
    def pid(self) -> int:
        """The writer process's id."""
        return self._pool.submit(os.getpid).result()

    def write(self, name: str, method: str, *args):
        """``ServedIndex.<method>(*args)`` of index ``name`` in the writer process; its result once committed."""
        return self._pool.submit(_write, name, method, args).result()

    def close(self) -> None:
        self._pool.shutdown(wait=True)
