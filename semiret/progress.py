"""Rich progress bars for anything that may take more than a second (quiet when disabled)."""

from __future__ import annotations

from typing import Iterable, Iterator, TypeVar

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

T = TypeVar("T")
ENABLED = True


def set_enabled(enabled: bool) -> None:
    global ENABLED
    ENABLED = enabled


def track(items: Iterable[T], description: str, total: float | None = None, advance=None) -> Iterator[T]:
    """Yield ``items`` with a progress bar; ``advance(item)`` says how much each item counts (default 1)."""
    if not ENABLED:
        yield from items
        return
    columns = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TimeRemainingColumn()]
    with Progress(*columns, transient=True) as progress:
        task = progress.add_task(description, total=total)
        for item in items:
            yield item
            progress.advance(task, advance(item) if advance else 1)
