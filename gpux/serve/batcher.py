"""Runs a model's requests off the event loop on its instances, merging them along the batch dim when asked."""

from __future__ import annotations

import asyncio
import queue
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpux.arrays import Feeds, Named
from gpux.serve.errors import BadRequest
from gpux.serve.stats import ModelStats

RunFn = Callable[[Feeds], Named]


@dataclass
class Pending:
    feeds: Feeds
    rows: int
    key: tuple[Any, ...]
    future: asyncio.Future[Named]
    enqueued: float = field(default_factory=time.perf_counter)


class Worker:
    """One model version: `instances` runners (each run on its own thread); batching when max_batch > 1. Each
    request's queue time and each inference are counted in `stats`, on the event loop's thread (where everything
    else that counts runs: no locks, no lost counts)."""

    def __init__(self, runners: list[RunFn], max_batch: int = 0, delay_us: int = 0,
                 stats: ModelStats | None = None, inline_elements: int = 0) -> None:
        self.runners = runners
        # a single instance whose inference is shorter than a thread hop runs on the event loop's thread, for
        # feeds of at most `inline_elements` values (larger ones take longer: they run on a thread)
        self.inline_elements = inline_elements if len(runners) == 1 else 0
        self.inline = self.inline_elements > 0 and max_batch <= 1
        self.max_batch = max_batch
        self.delay = delay_us / 1e6
        self.stats = stats if stats is not None else ModelStats()
        self.pool = ThreadPoolExecutor(len(runners), thread_name_prefix="gpux-infer")
        self._idle: queue.SimpleQueue[RunFn] = queue.SimpleQueue()
        for r in runners:
            self._idle.put(r)
        self._queue: asyncio.Queue[Pending] | None = None
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def batching(self) -> bool:
        return self.max_batch > 1

    def start(self) -> None:
        """Start the batch loops (one per instance) on the running event loop."""
        if self.batching and not self._tasks:
            self._queue = asyncio.Queue()
            self._tasks = [asyncio.create_task(self._batch_loop(r)) for r in self.runners]

    @property
    def alive(self) -> bool:
        """False once a batch loop has ended (only a bug ends one): the model then answers nothing more."""
        return not any(t.done() for t in self._tasks)

    def runs_inline(self, feeds: Feeds) -> bool:
        """Whether `infer(feeds)` runs on the event loop's thread (small feeds of a fast model, no batching)."""
        return self.inline and sum(v.size for v in feeds.values()) <= self.inline_elements

    def infer_inline(self, feeds: Feeds) -> Named:
        """Run `feeds` here, on the caller's thread (what `infer` does for feeds that `runs_inline`)."""
        return self._run_one(feeds, time.perf_counter(), None)

    async def infer(self, feeds: Feeds) -> Named:
        if self.runs_inline(feeds):
            return self.infer_inline(feeds)
        loop = asyncio.get_running_loop()
        if not self.batching:
            return await loop.run_in_executor(self.pool, self._run_one, feeds, time.perf_counter(), loop)
        assert self._queue is not None, "Worker.start() was not called"
        pending = Pending(feeds, batch_rows(feeds), batch_key(feeds), loop.create_future())
        self._queue.put_nowait(pending)
        return await pending.future

    def _run_one(self, feeds: Feeds, enqueued: float, loop: asyncio.AbstractEventLoop | None) -> Named:
        """The outputs. The wait for an idle runner is counted, and the inference once it ran, on the event loop's
        thread (`loop`: from this thread, None: this is it) even when the caller gave up meanwhile."""
        runner = self._idle.get()
        started, seconds = time.perf_counter(), None
        try:
            out = runner(feeds)
            seconds = time.perf_counter() - started
            return out
        finally:
            self._idle.put(runner)
            if loop is None:
                self._count(started - enqueued, seconds, _rows(feeds))
            else:
                loop.call_soon_threadsafe(self._count, started - enqueued, seconds, _rows(feeds))

    def _count(self, waited: float, seconds: float | None, rows: int) -> None:
        self.stats.queue.add(waited)
        if seconds is not None:
            self.stats.executed(seconds, rows, 1)

    async def _batch_loop(self, runner: RunFn) -> None:
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        held: Pending | None = None
        while True:
            first = held or await self._queue.get()
            held = None
            batch, rows = [first], first.rows
            deadline = loop.time() + self.delay
            while rows < self.max_batch:
                item = await self._next(deadline)
                if item is None:
                    break
                if item.key != first.key or rows + item.rows > self.max_batch:
                    held = item
                    break
                batch.append(item)
                rows += item.rows
            batch = [p for p in batch if not p.future.done()]  # timed out while queued
            if batch:
                await self._run_batch(loop, runner, batch)

    async def _next(self, deadline: float) -> Pending | None:
        assert self._queue is not None
        if not self._queue.empty():
            return self._queue.get_nowait()
        timeout = deadline - asyncio.get_running_loop().time()
        if timeout <= 0:
            return None
        try:
            return await asyncio.wait_for(self._queue.get(), timeout)
        except TimeoutError:
            return None

    async def _run_batch(self, loop: asyncio.AbstractEventLoop, runner: RunFn, batch: list[Pending]) -> None:
        now = time.perf_counter()
        for p in batch:
            self.stats.queue.add(now - p.enqueued)
        try:  # nothing may end this loop: every waiting request gets its answer or the error
            feeds = batch[0].feeds if len(batch) == 1 else {
                k: np.concatenate([p.feeds[k] for p in batch]) for k in batch[0].feeds}
            small = sum(v.size for v in feeds.values()) <= self.inline_elements
            out, seconds = _timed(runner, feeds) if small else await loop.run_in_executor(self.pool, _timed, runner,
                                                                                         feeds)
            self.stats.executed(seconds, _rows(feeds), len(batch))
        except Exception as exc:  # handed to each waiting request, whose transport answers it (and logs a bug)
            for p in batch:
                if not p.future.done():
                    p.future.set_exception(exc)
            return
        start = 0
        for p in batch:
            stop = start + p.rows
            if not p.future.done():
                p.future.set_result(out if len(batch) == 1 else {k: v[start:stop] for k, v in out.items()})
            start = stop

    async def close(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        self.pool.shutdown(wait=True)


def batch_rows(feeds: Feeds) -> int:
    """The rows a request adds to a batch; a request whose inputs disagree on them is refused (a 400), as merged
    with others it would misalign every request in its batch."""
    rows = {name: int(v.shape[0]) for name, v in feeds.items() if v.ndim}
    if len(set(rows.values())) > 1:
        told = ", ".join(f"'{n}' {r}" for n, r in rows.items())
        raise BadRequest(f"inputs disagree on the batch (first) dim: {told}; a batched model takes the same "
                         "number of rows in every input")
    return next(iter(rows.values()), 1)


def batch_key(feeds: Feeds) -> tuple[Any, ...]:
    """Requests merge into one batch only when every input has the same non-batch shape and dtype."""
    return tuple((k, v.shape[1:], v.dtype.str) for k, v in feeds.items())


def _timed(runner: RunFn, feeds: Feeds) -> tuple[Named, float]:
    started = time.perf_counter()
    out = runner(feeds)
    return out, time.perf_counter() - started


def _rows(feeds: Feeds) -> int:
    """Samples in one inference: the first input's leading dim (1 for a scalar or no input)."""
    first = next(iter(feeds.values()), None)
    return int(first.shape[0]) if first is not None and first.ndim else 1
