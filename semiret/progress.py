"""Rich progress bars for anything that may take more than a second (quiet when disabled)."""

from __future__ import annotations

import threading
import time
from typing import Iterable, Iterator, TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

T = TypeVar("T")
ENABLED = True
CONSOLE = Console(stderr=True)
"""Bars draw on standard error, with the log messages: standard output carries only results (``--json``)."""


def set_enabled(enabled: bool) -> None:
    global ENABLED
    ENABLED = enabled


def report(message: str) -> None:
    """A line that stays where the bars were (a finished epoch's loss, say): printed to standard error whenever
    bars are shown, a terminal or not, so a run whose output goes to a file still records it."""
    if ENABLED:
        CONSOLE.print(message, markup=False, highlight=False, soft_wrap=True)


PLAIN_REPORT_SECONDS = 30.0
"""Where standard error is no terminal (a batch job, ``nohup``, a log file) a bar cannot redraw: a line saying how
far a long task is comes this often instead."""


_LIVE = threading.Lock()
"""Held while a bar is drawn: rich draws one live display at a time (rich 13 raises for a second, from a nested
task or another thread, such as two adds a server runs at once); a task that finds it taken goes without a bar."""


def _no_live_display() -> bool:
    """Standard error is neither a terminal nor a notebook (where a bar redraws): a file, a pipe, a batch job's log."""
    return not CONSOLE.is_terminal and not CONSOLE.is_jupyter


class _PlainProgress:
    """What a bar shows, as a line every :data:`PLAIN_REPORT_SECONDS` (and none for a task quicker than that)."""

    def __init__(self, description: str, total: float | None):
        self.description, self.total, self.done = description, total, 0.0
        self.started = self.last = time.monotonic()

    def advance(self, amount: float = 1, figures: str = "") -> None:
        self.done += amount
        now = time.monotonic()
        if now - self.last >= PLAIN_REPORT_SECONDS:
            self.last = now
            of = f"/{self.total:,.0f}" if self.total else ""
            report(f"{self.description}: {self.done:,.0f}{of} in {now - self.started:,.0f} s {figures}".rstrip())


def track(items: Iterable[T], description: str, total: float | None = None, advance=None) -> Iterator[T]:
    """Yield ``items`` with a progress bar (a line now and then where standard error is no terminal);
    ``advance(item)`` says how much each item counts (default 1)."""
    if not ENABLED:
        yield from items
        return
    if _no_live_display():
        plain = _PlainProgress(description, total)
        for item in items:
            yield item
            plain.advance(advance(item) if advance else 1)
        return
    if not _LIVE.acquire(blocking=False):
        yield from items
        return
    try:
        columns = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), TimeRemainingColumn()]
        with Progress(*columns, transient=True, console=CONSOLE) as progress:
            task = progress.add_task(description, total=total)
            for item in items:
                yield item
                progress.advance(task, advance(item) if advance else 1)
    finally:
        _LIVE.release()


class StepBar:
    """A progress bar whose description carries live figures (e.g. the training loss), advanced by the caller (by
    steps, or by what each step did: documents merged)."""

    def __init__(self, description: str, total: int):
        self.description = description
        self.total = total
        self._progress = None
        self._plain: _PlainProgress | None = None

    def __enter__(self) -> "StepBar":
        if ENABLED and _no_live_display():
            self._plain = _PlainProgress(self.description, self.total)
        elif ENABLED and _LIVE.acquire(blocking=False):
            self._progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), TimeRemainingColumn(), transient=True, console=CONSOLE)
            self._progress.__enter__()
            self._task = self._progress.add_task(self.description, total=self.total)
        return self

    def advance(self, figures: str = "", amount: float = 1) -> None:
        if self._plain is not None:
            self._plain.advance(amount, figures)
        if self._progress is not None:
            self._progress.update(self._task, advance=amount, description=f"{self.description} {figures}".rstrip())

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            try:
                self._progress.__exit__(*exc)
            finally:
                _LIVE.release()
