"""Decoding workers: independent batches searched side by side, each on one intra-op thread.

A decoder step at the sizes this toolkit trains (a few hundred rows, d 128-512) is many small
operators. One search over all intra-op threads pays a thread-team barrier per operator; workers
of one thread each run side by side instead. Threads (`map_batches`) share one interpreter, and
every operator call hands the GIL over twice: on 2 cores two threads each decoding half of
test_2016_flickr took 1.2-1.5x as long as one of them alone. Forked processes
(`DecodePool`, Linux CPUs) have no such lock between them: two ran as fast as one alone.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING, Any, TypeVar

from nmt.errors import NmtError
from nmt.runtime import status_kb

if TYPE_CHECKING:
    import torch

MAX_AUTO_WORKERS = 4  # workers 0 on a CPU: one per intra-op thread, at most this many

T = TypeVar("T")
R = TypeVar("R")


def resolve_workers(requested: int, threads: int, on_cpu: bool) -> int:
    """`requested`, or for 0 one per thread (at most MAX_AUTO_WORKERS) on a CPU and 1 on a GPU
    (its kernels are queued on one stream). Torch-free: CTranslate2 exports use it too."""
    if requested < 0:
        raise NmtError(f"--workers must be 0 (auto) or more, got {requested}")
    if requested:
        return requested
    return min(threads, MAX_AUTO_WORKERS) if on_cpu else 1


def decode_workers(requested: int, device: torch.device | str, batches: int) -> int:
    """How many batches to decode at once (`resolve_workers` over this thread's intra-op
    threads), never more than there are batches."""
    import torch

    on_cpu = torch.device(device).type == "cpu"
    return max(1, min(resolve_workers(requested, torch.get_num_threads(), on_cpu), batches))


def map_batches(
    fn: Callable[[T], R], batches: Sequence[T], workers: int
) -> Iterator[tuple[int, R]]:
    """(i, fn(batches[i])) for every batch: in order on this thread, or as they finish on
    `workers` threads that split this thread's intra-op threads between them. Leaving the loop
    early (or an error in fn) cancels the batches not yet started."""
    if workers <= 1:
        for i, batch in enumerate(batches):
            yield i, fn(batch)
        return
    import torch

    threads = torch.get_num_threads()
    # Each pool thread sets its own OpenMP team size; MKL's is process-wide, so it is restored.
    pool = ThreadPoolExecutor(
        workers,
        "nmt-decode",
        initializer=torch.set_num_threads,
        initargs=(max(1, threads // workers),),
    )
    try:
        yield from _as_completed(lambda batch: pool.submit(fn, batch), batches)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        torch.set_num_threads(threads)


def _as_completed(
    submit: Callable[[Any], Future], items: Sequence[Any]
) -> Iterator[tuple[int, Any]]:
    """(i, result of items[i]) for every item submitted, as they finish; leaving early (or an
    error) cancels the ones not yet started. Threads and processes share it."""
    futures: dict[Future, int] = {}
    try:
        for i, item in enumerate(items):
            futures[submit(item)] = i
        for done in as_completed(futures):
            yield futures[done], done.result()
    finally:
        for f in futures:
            f.cancel()


# ---- forked worker processes ------------------------------------------------------------------


def processes_available(device: torch.device | str) -> bool:
    """Whether decoding workers can be forked processes: CPU decoding on Linux (CUDA does not
    survive a fork, and macOS frameworks are not fork-safe)."""
    import torch

    return torch.device(device).type == "cpu" and sys.platform == "linux"


WORKER_DIED = "a decoding worker process died (out of memory? try --workers 1)"


class DecodePool:
    """`workers` forked processes that run `target(job)`, each on `threads` intra-op threads.

    Each process is a copy of this one at the first `map` (copy-on-write: the model's weights
    are shared until written, and nothing writes them), so `target` and what it reaches must
    not change afterwards; jobs and results are pickled. The processes ignore SIGINT (the
    caller handles Ctrl-C and closes the pool) and live until `close` or interpreter exit.
    """

    def __init__(self, target: Callable[[Any], Any], workers: int, threads: int = 1) -> None:
        self.target, self.workers, self.threads = target, workers, threads
        self._executor: ProcessPoolExecutor | None = None
        self._baseline: dict[int, int] = {}

    def start(self) -> None:
        """Fork the processes now (they would be at the first `map`): before the caller starts
        threads of its own, whose locks a fork would copy in whatever state they are in."""
        if self._executor is not None:
            return
        executor = ProcessPoolExecutor(
            self.workers,
            multiprocessing.get_context("fork"),
            initializer=_start_worker,
            initargs=(self.target, self.threads),
        )
        self._executor = executor
        # Forking happens at the first submit; one no-op per process also records what each
        # held then (shared with this process), so `peak_extra_mb` counts only what it added.
        try:
            for f in [executor.submit(os.getpid) for _ in range(self.workers)]:
                f.result()
        except BrokenProcessPool as e:  # a process died being forked or set up
            self.close()
            raise NmtError(WORKER_DIED) from e
        self._baseline = {pid: status_kb(pid, "VmRSS") for pid in self.pids()}

    @property
    def started(self) -> bool:
        """Whether the processes are running (`start` was called and `close` not since)."""
        return self._executor is not None

    def pids(self) -> list[int]:
        """The worker processes' ids (empty before `start`)."""
        procs = getattr(self._executor, "_processes", None) or {}
        return sorted(procs)

    def map(self, jobs: Sequence[Any]) -> Iterator[tuple[int, Any]]:
        """(i, target(jobs[i])) for every job, as they finish. Leaving the loop early (or an
        error in a job) cancels the jobs not yet started."""
        self.start()
        assert self._executor is not None
        try:
            executor = self._executor
            yield from _as_completed(lambda job: executor.submit(_run_job, job), jobs)
        except BrokenProcessPool as e:
            self.close()
            raise NmtError(WORKER_DIED) from e
        except KeyboardInterrupt:
            self.close(now=True)  # Ctrl-C: do not wait for the batches being decoded
            raise

    def peak_extra_mb(self) -> int:
        """What the processes added at their peak, over what they shared with this one when
        forked (peak resident set less resident set at start, summed; Linux /proc)."""
        extra = sum(
            max(0, status_kb(pid, "VmHWM") - self._baseline.get(pid, 0)) for pid in self.pids()
        )
        return round(extra / 1024)

    def close(self, now: bool = False) -> None:
        """Stop the processes (jobs not yet started are dropped; `now`: running ones too)."""
        executor, self._executor = self._executor, None
        if executor is None:
            return
        if now:
            for process in list((getattr(executor, "_processes", None) or {}).values()):
                process.terminate()
        executor.shutdown(wait=True, cancel_futures=True)


# The job function a worker process runs: set once per process by `_start_worker`, when it is
# forked (so nothing is pickled for it), and read only there.
_WORKER_TARGET: list[Callable[[Any], Any]] = []


def _start_worker(target: Callable[[Any], Any], threads: int) -> None:
    """A worker process's set-up: its thread count, no Ctrl-C of its own, no warnings written
    to a stderr whose lock a fork may have copied while another thread held it."""
    import torch

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    warnings.simplefilter("ignore")
    torch.set_num_threads(threads)
    _WORKER_TARGET[:] = [target]


def _run_job(job: Any) -> Any:
    return _WORKER_TARGET[0](job)
