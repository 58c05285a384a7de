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
lands whole or not at all (the index's commit is atomic), and was not acknowledged. If the writer dies (killed,
out of memory), the next write or readiness check starts another, and a write it was doing is done again once:
adds replace by id and deletes skip missing ids, so a write that had landed lands the same.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import sys
import threading
import time
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

WRITER_NICENESS = 10
"""The writer process's ``nice`` increment: when the cores are busy the scheduler serves searches first (a write
takes a little longer to be acknowledged; with idle cores nothing changes)."""

PARENT_CHECK_SECONDS = 1.0
"""How often the writer checks that the serving process that started it is still its parent."""

READY_PROBE_SECONDS = 1.0
"""How long a readiness check waits for the writer to answer; one busy with a long write counts as running."""

_INDEXES: dict = {}
"""The writer process's own :class:`~semiret.serving.served.ServedIndex` per index name."""
_MAX_SEGMENTS: list[int] = []
"""The served indexes' ``max_segments``, for those opened after start-up."""


def _exit_with_parent(parent: int) -> None:
    """Exit once the process that started this one has died (this one is then adopted by another)."""
    while os.getppid() == parent:
        time.sleep(PARENT_CHECK_SECONDS)
    os._exit(0)


def _open_indexes(specs: dict[str, tuple[str, str | None]], max_segments: int, threads: int) -> None:
    # Ctrl-C and a stop of the whole process group reach this process too: the write under way finishes and is
    # answered, and the server ends this process when it closes (it died of KeyboardInterrupt: a 500 for that write)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True, name="parent-watch").start()
    os.nice(WRITER_NICENESS)
    _MAX_SEGMENTS[:] = [max_segments]
    for name, spec in specs.items():
        if os.path.exists(spec[0]):  # one deleted over HTTP since the server started is not opened again
            _open(name, spec)
    if "torch" in sys.modules:  # a neural document side was loaded (BM25 alone never imports torch)
        sys.modules["torch"].set_num_threads(threads)
    gc.freeze()


def _open(name: str, spec: tuple[str, str | None]):
    from semiret.serving.served import ServedIndex

    index = ServedIndex(name, spec[0], _MAX_SEGMENTS[0], spec[1])
    index.warm_up(searches=False, writes=True)
    _INDEXES[name] = index
    return index


def _write(name: str, spec: tuple[str, str | None], method: str, args: tuple):
    """``method(*args)`` of the index ``name`` (at ``spec``: path and retriever), opened first where this process
    has not opened it (one created over HTTP since the start) or has another index open under that name (deleted
    and created again)."""
    for other in [n for n, opened in _INDEXES.items() if n != name and not opened.path.exists()]:
        del _INDEXES[other]  # deleted (over HTTP): its files are freed once nothing here maps them
    index = _INDEXES.get(name)
    if index is None or index.replaced():
        index = _open(name, spec)
    return getattr(index, method)(*args)


class WriterUnavailable(Exception):
    """The writer process died and another could not take its place (the server answers 503)."""


class WriterProcess:
    """One process doing every write of the served indexes, one at a time, in the order they arrive; started
    again if it dies."""

    def __init__(self, specs: dict[str, tuple[str, str | None]], max_segments: int, threads: int | None = None):
        self._arguments = (specs, max_segments, threads or max(1, (os.cpu_count() or 2) // 2))  # cores for searches
        self._restarting = threading.Lock()
        self._start()

    def _start(self) -> None:
        self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        # a task rather than the pool's initializer: an error opening an index comes back with its message
        self._opened: Future = self._pool.submit(_open_indexes, *self._arguments)

    def _restart(self, dead: ProcessPoolExecutor) -> None:
        """A new writer in place of the one of ``dead`` (once, whichever thread notices first), open."""
        with self._restarting:
            if self._pool is dead:
                dead.shutdown(wait=False, cancel_futures=True)
                self._start()
        try:
            self.wait_until_open()
        except Exception as exc:
            raise WriterUnavailable(f"the writer process died and the one started in its place could not open "
                                    f"the indexes: {exc or type(exc).__name__}") from None

    def _ready_pool(self) -> ProcessPoolExecutor:
        """The pool of a writer that opened every index: another one if this one died or failed to."""
        pool, opened = self._pool, self._opened
        try:
            opened.result()
        except Exception:
            self._restart(pool)
            return self._pool
        return pool

    def wait_until_open(self) -> None:
        """Return once the writer has opened every index (raise what opening one raised)."""
        self._opened.result()

    def ensure_running(self) -> None:
        """Start another writer if this one died (what a readiness check asks); raise
        :class:`WriterUnavailable` if that fails."""
        pool = self._ready_pool()
        try:
            pool.submit(int).result(timeout=READY_PROBE_SECONDS)
        except BrokenProcessPool:
            self._restart(pool)
        except TimeoutError:
            pass  # queued behind a write in progress: the writer is alive

    @property
    def pid(self) -> int:
        """The writer process's id."""
        return self._pool.submit(os.getpid).result()

    def write(self, name: str, spec: tuple[str, str | None], method: str, *args, on_redo=None):
        """``ServedIndex.<method>(*args)`` of index ``name`` (``spec``: its path and retriever, for a writer that
        has not opened it yet) in the writer process; its result once committed. Done again once in a new writer if
        the process dies (:class:`WriterUnavailable` if it dies again); the process may have died after committing,
        so the second result is ``on_redo(result)`` where given (a delete finds gone what the first did delete)."""
        pool = self._ready_pool()
        try:
            return pool.submit(_write, name, spec, method, args).result()
        except BrokenProcessPool:
            self._restart(pool)
        try:
            result = self._pool.submit(_write, name, spec, method, args).result()
            return on_redo(result) if on_redo is not None else result
        except BrokenProcessPool:
            raise WriterUnavailable(f"the writer process died twice doing this write ({method.strip('_')} on index "
                                    f"{name!r}); it is started again at the next write") from None

    def close(self) -> None:
        self._pool.shutdown(wait=True)
