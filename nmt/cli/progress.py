"""The CLI's progress bars and notes on stderr (stdout stays data): one bar per preprocessing
step, or one over the lines a command translates or scores."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID


class Bars:
    """Rich bars on stderr, entered into `stack` on first use so an early error prints only itself."""

    def __init__(self, stack: contextlib.ExitStack, label: str, transient: bool = False) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.stack = stack
        self.progress: Progress = Progress(
            TextColumn(label),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=transient,
        )
        self.tasks: dict[str, TaskID] = {}

    def task(self, name: str, total: int | None) -> TaskID:
        """The bar called `name`, shown (with the display) the first time it is asked for."""
        if not self.tasks:
            self.stack.enter_context(self.progress)
        if name not in self.tasks:
            self.tasks[name] = self.progress.add_task(name, total=total)
        return self.tasks[name]


def step_progress(stack: contextlib.ExitStack) -> Callable[[str, int, int | None], None]:
    """One bar per named step (preprocess); returns `report(step, done, total)`."""
    bars = Bars(stack, "{task.description:<24}")

    def report(step: str, done: int, total: int | None) -> None:
        bars.progress.update(bars.task(step, total), completed=done, total=total)

    return report


def count_progress(
    stack: contextlib.ExitStack, total: int, what: str = "translating"
) -> Callable[[int], None]:
    """A `translating` (or `what`) bar over a known line count, shown at once; returns `advance(n)`."""
    bars = Bars(stack, "{task.description}")
    task = bars.task(what, total)
    return lambda n: bars.progress.advance(task, n)


def batch_progress(stack: contextlib.ExitStack) -> Callable[[int, int], None]:
    """A transient `translating` bar started on the first batch; returns `advance(n, total)`."""
    bars = Bars(stack, "{task.description}", transient=True)
    return lambda n, total: bars.progress.advance(bars.task("translating", total), n)


def note_to_stderr(message: str) -> None:
    """An informative line on stderr (translations and scores go to stdout); the commands call
    it only without --quiet."""
    sys.stderr.write(f"note: {message}\n")
    sys.stderr.flush()
