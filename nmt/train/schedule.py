"""Learning-rate schedules and the run's budget: how far along it is, how long is left, which
limit stopped it (the stop codes), and when patience runs out.

The linear and cosine schedules decay over the share of the budget used, in steps or time,
so the budget and the schedule live together.
"""

from __future__ import annotations

import contextlib
import enum
import math
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from nmt.config import COOLDOWN_SCHEDULES


class Stop(enum.IntEnum):
    """Why a run stops; processes agree on the largest. SIGINT/SIGTERM are also exit codes."""

    NONE = 0
    STEPS = 1
    EPOCHS = 2
    TIME = 3
    EARLY = 4
    SIGINT = 130
    SIGTERM = 143


STOP_REASONS: dict[int, str] = {
    Stop.STEPS: "max_steps reached",
    Stop.EPOCHS: "max_epochs reached",
    Stop.TIME: "max_time reached",
    Stop.EARLY: "early stopping",
    Stop.SIGINT: "interrupted (SIGINT)",
    Stop.SIGTERM: "terminated (SIGTERM)",
}


def lr_at(
    schedule: str,
    step: int,
    lr: float,
    warmup: int,
    min_lr: float = 0.0,
    progress: float | None = None,
    cooldown: float = 0.0,
    cooldown_end: float = 1.0,
) -> float:
    """Learning rate for update number `step` (1-based).

    inverse_sqrt: linear warmup to `lr`, then lr * sqrt(warmup / step).
    cosine / linear: linear warmup, then decay to `min_lr` as `progress` (0..1 share of the
    budget in steps or time) goes to 1; without a known budget they stay at `lr`.
    constant: warmup then `lr`.
    `cooldown` (inverse_sqrt, constant): over that last share of the budget the rate falls
    linearly to `min_lr`, so a run cut by its budget ends annealed instead of mid-descent.
    `cooldown_end` moves that end earlier: a run out of patience cools down from where it is.
    """
    step = max(step, 1)
    warm = min(1.0, step / warmup) if warmup > 0 else 1.0
    if schedule in COOLDOWN_SCHEDULES:
        if schedule == "constant":
            rate = lr * warm
        elif warmup <= 0:
            rate = lr / math.sqrt(step)
        else:
            rate = lr * min(step / warmup, math.sqrt(warmup / step))
        return _cooled(rate, min_lr, progress, cooldown, cooldown_end)
    if progress is None:
        return lr * warm
    p = min(max(progress, 0.0), 1.0)
    if schedule == "cosine":
        decay = 0.5 * (1.0 + math.cos(math.pi * p))
    elif schedule == "linear":
        decay = 1.0 - p
    else:
        raise ValueError(f"unknown schedule {schedule!r}")
    return min(lr * warm, min_lr + (lr - min_lr) * decay)


def _cooled(
    rate: float, min_lr: float, progress: float | None, cooldown: float, end: float = 1.0
) -> float:
    """`rate` scaled down linearly to `min_lr` over the `cooldown` share of the budget before
    `end` (the budget's end unless patience ran out)."""
    if cooldown <= 0 or progress is None or progress <= end - cooldown:
        return rate
    left = (end - min(progress, end)) / cooldown
    return min(rate, min_lr + (rate - min_lr) * left)


@dataclass
class Budget:
    """A run's limits and clock: the LR decays over the share used, the ETA is what is left."""

    max_steps: int = 0  # 0: unbounded
    max_epochs: int = 0  # 0: unbounded
    max_time: float | None = None  # seconds; None: unbounded
    accumulate: int = 1  # batches per update
    start: float = field(default_factory=time.monotonic)  # when the run (resumes included) began
    steps_per_epoch: int = 0  # updates per epoch, known once the first epoch is batched

    def elapsed(self) -> float:
        """Seconds since the run started, resumed runs included."""
        return time.monotonic() - self.start

    def progress(self, step: int, ahead: float = 0.0) -> float | None:
        """Share of the budget used (steps or time, whichever is further), `ahead` seconds from
        now; None if unbounded."""
        parts = []
        if self.max_steps > 0:
            parts.append(step / self.max_steps)
        if self.max_time:
            parts.append((self.elapsed() + ahead) / self.max_time)
        return max(parts) if parts else None

    def spent(self, step: int, room: float = 0.0) -> Stop:
        """Stop.STEPS or Stop.TIME when that budget is spent (`room`: seconds to keep), else 0."""
        if self.max_steps > 0 and step >= self.max_steps:
            return Stop.STEPS
        if self.max_time and self.elapsed() + room >= self.max_time:
            return Stop.TIME
        return Stop.NONE

    def eta(self, step: int, epoch: int, position: int) -> float | None:
        """Seconds left by the nearest budget (steps, epochs or time)."""
        if step == 0:
            return None
        elapsed = self.elapsed()
        per_step = elapsed / step
        etas = []
        if self.max_steps > 0:
            etas.append((self.max_steps - step) * per_step)
        if self.max_time:
            etas.append(self.max_time - elapsed)
        if self.max_epochs > 0 and self.steps_per_epoch:
            done = (epoch - 1) * self.steps_per_epoch + position / max(1, self.accumulate)
            etas.append((self.max_epochs * self.steps_per_epoch - done) * per_step)
        return max(0.0, min(etas)) if etas else None

    def fraction(self, step: int, epoch: int, position: int) -> float:
        """Share done for a progress bar: the budget's, else the epochs', else 0."""
        frac = self.progress(step)
        if frac is None and self.max_epochs > 0 and self.steps_per_epoch:
            frac = epoch - 1 + position / max(1, self.steps_per_epoch * self.accumulate)
            frac /= self.max_epochs
        return min(frac or 0.0, 1.0)


def out_of_patience(
    budget: Budget, step: int, patience: int, cooldown: float
) -> tuple[Stop, float | None, str]:
    """A run out of patience stops now, or first anneals over its `cooldown` share of the budget
    (a plateaued run still gains from the anneal; cut before it, it would not have one). Returns
    the stop code, where a cooldown ends, and the line that says which."""
    progress = budget.progress(step)
    if cooldown > 0 and progress is not None:
        end = min(1.0, progress + cooldown)
        return (
            Stop.NONE,
            end,
            f"{patience} validations without improvement: cooling down until {end:.0%} of the "
            "budget, then stopping",
        )
    return Stop.EARLY, None, f"early stopping: {patience} validations without improvement"


@dataclass
class SaveClock:
    """When to save the trainer state between validations: every N steps and every T seconds."""

    every_steps: int = 0  # 0: off
    every_seconds: float | None = None  # None or 0: off
    last: float = field(default_factory=time.monotonic)  # when the state was last saved

    def due(self, step: int) -> bool:
        """Whether step `step` (just finished) should be followed by a save."""
        if self.every_steps > 0 and step % self.every_steps == 0:
            return True
        return bool(self.every_seconds) and time.monotonic() - self.last >= (
            self.every_seconds or 0
        )

    def saved(self) -> None:
        """A save just happened (at an interval, a validation or the end): restart the clock."""
        self.last = time.monotonic()


@contextlib.contextmanager
def stop_signals(request: Callable[[Stop], None], stopping: Callable[[], bool]) -> Iterator[None]:
    """SIGINT/SIGTERM call `request(code)` so a run stops after its current step; a second SIGINT
    while `stopping()` is immediate (KeyboardInterrupt). Outside the main thread: no handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        if stopping() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        request(Stop.SIGINT if signum == signal.SIGINT else Stop.SIGTERM)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
