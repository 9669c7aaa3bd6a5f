"""Work too large for the event loop: on a thread when it lets go of the GIL, in a process when it cannot.

Decompressing, building arrays, running ONNX Runtime and rendering JSON all let other threads run, so a thread of
the default executor keeps the event loop answering. `json.loads` does not: it holds the GIL from the first byte to
the last (1.6 s for 19 MB here), so a large JSON body is decoded in a worker process and its arrays come back."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from gpux.serve.errors import ServeError

T = TypeVar("T")
PROCESSES = 2  # at most; large JSON bodies beyond that wait their turn


async def on_thread(large: bool, fn: Callable[..., T], *args: object) -> T:
    """fn(*args) here when small, on a thread of the default executor when large. A caller cancelled meanwhile (a
    client that went away) waits for the thread to end before it goes on: what it lent the thread (a shared memory
    region's file, a buffer) must not be released under it."""
    if not large:
        return fn(*args)
    done = asyncio.get_running_loop().run_in_executor(None, fn, *args)
    try:
        return await asyncio.shield(done)
    except asyncio.CancelledError:
        await asyncio.wait([done])
        raise


class Offload:
    """The worker processes of one server, started on first use (spawned: forking a process with gRPC's and
    ONNX Runtime's threads is unsafe), stopped by close()."""

    def __init__(self) -> None:
        self._pool: Any = None

    async def in_process(self, fn: Callable[..., T], *args: object) -> T:
        """fn(*args) in a worker process: `fn` and its arguments travel by pickle, so do its result and errors."""
        from concurrent.futures.process import BrokenProcessPool

        if self._pool is None:
            self._pool = _start()
        try:
            return await asyncio.wrap_future(self._pool.submit(fn, *args))
        except BrokenProcessPool as exc:  # the worker died (killed for memory?): the next request starts a new one
            self.close()
            raise ServeError("the process decoding the request body died (out of memory?)") from exc

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None


def _start() -> Any:
    import multiprocessing
    import os
    from concurrent.futures import ProcessPoolExecutor

    workers = max(1, min(PROCESSES, (os.cpu_count() or 1) - 1))
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), initializer=_ignore_sigint)


def _ignore_sigint() -> None:
    """Ctrl-C reaches the whole process group: the server stops the workers, they need not stop themselves."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
