"""Micro-batching: requests that arrive within `max_wait_ms` of each other are decoded in one
`Translator.translate` call (grouped by decoding options, up to `max_batch_tokens` padded source
tokens), and the results are split back to their requests.

Up to `slots` batches decode at once (one per decoding worker process): a batch takes one free
slot, or several (split between them) when it is large, and the next batch is gathered as soon as
a slot is free, while the others still decode. With one slot, batches decode one after the other.

The event loop only queues jobs and awaits futures; decoding never runs on it. A job whose caller
went away (timeout, disconnect) is dropped before decoding and its result is never delivered.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

# A batch is split between free slots only where each gets at least this many lines: a small
# search step is mostly fixed costs (one worker, beam 5, d128: 1 sentence 26 ms, 8 sentences
# 76 ms), so small batches each on one worker, side by side, serve more than every batch split
# between the free ones (16 clients: 130-141 against 112 sentences/s; from 4 lines 109, 12: 105).
SPLIT_LINES = 8

# (items, options, keys, slots) -> one result per item; an item's key is its place in its
# request; slots: how many decoding workers the call may split its items between
Decode = Callable[[list[Any], Hashable, list[int], int], list[Any]]


@dataclass
class Job:
    """One request's lines (or other items: /score's pairs), options and the future its handler
    awaits."""

    lines: list[Any]
    options: Hashable  # a request's DecodeOptions, or what stands for /score's task
    lengths: list[int]  # source tokens per line (eos included): the padded-size estimate
    future: asyncio.Future[Any]
    arrived: float = field(default_factory=time.monotonic)

    @property
    def key(self) -> Hashable:
        """Jobs with equal keys (equal options) can share a decoder call."""
        return self.options

    @property
    def live(self) -> bool:
        """Someone still waits for this job's result."""
        return not self.future.done()


@dataclass
class BatchResult:
    """What a job's future resolves to: its results and how its batch was decoded."""

    results: list[Any]
    decode_ms: float
    batch_lines: int  # lines decoded in the same call (this job's included)
    batch_requests: int


class MicroBatcher:
    """Collects jobs for up to `max_wait_ms`, then decodes them group by group, up to `slots`
    batches at once."""

    def __init__(
        self, decode: Decode, max_batch_tokens: int, max_wait_ms: float, slots: int = 1
    ) -> None:
        self.decode, self.max_batch_tokens = decode, max_batch_tokens
        self.max_wait = max_wait_ms / 1000
        self.slots = max(1, slots)
        self.calls = 0  # decoder calls made (tests, /info)
        self._queue: asyncio.Queue[Job] = asyncio.Queue()
        self._held: Job | None = None  # taken from the queue but over the token budget
        self._executor = ThreadPoolExecutor(self.slots, thread_name_prefix="nmt-decode")
        self._task: asyncio.Task[None] | None = None
        self._free = self.slots  # slots no batch holds
        self._slot_freed: asyncio.Event | None = None
        self._decoding: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        """Start the collecting task on the running loop."""
        self._slot_freed = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Cancel the collector and the batches decoding (their requests fail), fail whatever
        still waits, and let the workers finish the batches they are on."""
        tasks = [t for t in [self._task, *self._decoding] if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        left = [self._queue.get_nowait() for _ in range(self._queue.qsize())]
        _fail(
            left + ([self._held] if self._held else []), RuntimeError("the server is shutting down")
        )
        self._executor.shutdown(wait=True)

    def pending(self) -> int:
        """Jobs queued and not yet taken into a batch."""
        return self._queue.qsize() + (self._held is not None)

    async def submit(self, lines: list[Any], options: Hashable, lengths: list[int]) -> Any:
        """Queue one request and wait for its `BatchResult` (cancel the await to drop it)."""
        job = Job(lines, options, lengths, asyncio.get_running_loop().create_future())
        self._queue.put_nowait(job)
        return await job.future

    # ---- the collector ------------------------------------------------------------------------

    async def _run(self) -> None:
        """Forever: once a slot is free, gather one batch and decode it on a free slot (on several
        when it has SPLIT_LINES lines for each)."""
        assert self._slot_freed is not None
        while True:
            while not self._free:
                self._slot_freed.clear()
                await self._slot_freed.wait()
            batch = await self._gather()
            lines = sum(len(job.lines) for job in batch)
            slots = max(1, min(self._free, lines // SPLIT_LINES))
            self._free -= slots
            task = asyncio.get_running_loop().create_task(self._decode_batch(batch, slots))
            self._decoding.add(task)
            task.add_done_callback(self._decoding.discard)

    async def _decode_batch(self, batch: list[Job], slots: int) -> None:
        """Decode a batch's option groups one after the other on `slots` slots, then free them."""
        try:
            groups: dict[Hashable, list[Job]] = {}
            for job in batch:
                groups.setdefault(job.key, []).append(job)
            for jobs in groups.values():
                await self._decode_group(jobs, slots)
        finally:
            self._free += slots
            assert self._slot_freed is not None
            self._slot_freed.set()

    async def _gather(self) -> list[Job]:
        """The first live job, then whatever arrives until it has waited `max_wait` or the
        padded token budget is full (the job that does not fit waits for the next batch)."""
        first = self._held or await self._next_live()
        self._held = None
        batch, rows, width = [first], len(first.lines), max(first.lengths, default=1)
        deadline = first.arrived + self.max_wait
        while True:
            timeout = deadline - time.monotonic()
            try:
                job = self._queue.get_nowait() if timeout <= 0 else None
            except asyncio.QueueEmpty:
                break
            if job is None:
                try:
                    job = await asyncio.wait_for(self._queue.get(), timeout)
                except TimeoutError:
                    break
            if not job.live:
                continue
            new_width = max(width, max(job.lengths, default=1))
            if (rows + len(job.lines)) * new_width > self.max_batch_tokens:
                self._held = job
                break
            batch.append(job)
            rows, width = rows + len(job.lines), new_width
        return batch

    async def _next_live(self) -> Job:
        """Wait for a job whose caller is still there."""
        while True:
            job = await self._queue.get()
            if job.live:
                return job

    async def _decode_group(self, jobs: list[Job], slots: int) -> None:
        """One decoder call for jobs with equal options, on a worker thread; results split."""
        jobs = [j for j in jobs if j.live]
        if not jobs:
            return
        lines = [line for j in jobs for line in j.lines]
        keys = [i for j in jobs for i in range(len(j.lines))]  # sampling draws by request line
        loop = asyncio.get_running_loop()
        start = time.perf_counter()
        self.calls += 1
        try:
            results = await loop.run_in_executor(
                self._executor, self.decode, lines, jobs[0].options, keys, slots
            )
        except asyncio.CancelledError:
            _fail(jobs, RuntimeError("the server is shutting down"))
            raise
        except Exception as e:  # noqa: BLE001 - delivered to each waiting request, not lost
            _fail(jobs, e)
            return
        ms = (time.perf_counter() - start) * 1000
        offset = 0
        for j in jobs:
            part = results[offset : offset + len(j.lines)]
            offset += len(j.lines)
            if j.live:
                j.future.set_result(BatchResult(part, ms, len(lines), len(jobs)))


def _fail(jobs: list[Job], error: BaseException) -> None:
    """Deliver an error to every job still waiting."""
    for j in jobs:
        if j.live:
            j.future.set_exception(error)
