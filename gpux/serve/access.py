"""The access log: one JSON line per answered request on logger `gpux.serve.access`. The event loop only keeps
the record; `gpux serve` formats and writes what came every FLUSH_S from a thread, one write per batch (a line
formatted and written on the loop cost ~45 µs a request; a thread woken per line, more). A server logs through the
`AccessLog` it is handed (`writing` gives the one `gpux serve` writes)."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

import orjson

LOG = logging.getLogger("gpux.serve.access")
FLUSH_S = 0.05
KEPT = 100_000  # lines waiting for the writer, at most


class Line(dict[str, Any]):
    """An access line's fields; its text (what a handler writes) is their JSON, made when it is written."""

    def __str__(self) -> str:
        try:
            return orjson.dumps(self).decode()
        except orjson.JSONEncodeError:  # a path with a lone surrogate
            return json.dumps(self, separators=(",", ":"))


class AccessLog:
    """Where one server logs its answered requests: straight to the writer `gpux serve` opened (`writing`), without
    a LogRecord; without one, to logger `gpux.serve.access` at INFO."""

    def __init__(self, writer: Batched | None = None) -> None:
        self.writer = writer

    def on(self) -> bool:
        """Whether answered requests are logged (callers skip gathering a line's fields when not)."""
        return self.writer is not None or LOG.isEnabledFor(logging.INFO)

    def line(self, started: float, **fields: object) -> None:
        """Log one answered request (`started`: its perf_counter at arrival) when the access log is on."""
        if not self.on():
            return
        entry = Line(ts=round(time.time(), 3), **fields, ms=round((time.perf_counter() - started) * 1000, 3))
        if self.writer is not None:
            self.writer.kept.append(entry)
        else:
            LOG.info(entry)


class Batched(logging.Handler):
    """Keeps each record (or Line); a thread writes those kept every FLUSH_S, and the rest when closed."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        # at most KEPT lines wait (a stream that cannot take them drops the oldest: memory stays bounded)
        self.stream, self.kept = stream, deque[logging.LogRecord | Line](maxlen=KEPT)
        self.failed = False
        self.closing = threading.Event()
        self.thread = threading.Thread(target=self._run, name="gpux-access-log", daemon=True)
        self.thread.start()

    def emit(self, record: logging.LogRecord) -> None:
        self.kept.append(record)

    def _run(self) -> None:
        while not self.closing.wait(FLUSH_S):
            self._write()
        self._write()

    def _write(self) -> None:
        lines = []
        while self.kept:
            item = self.kept.popleft()
            lines.append(str(item) if isinstance(item, Line) else self.format(item))
        if not lines:
            return
        try:
            self.stream.write("\n".join(lines) + "\n")
            self.stream.flush()
        except Exception as exc:  # a full disk or a closed pipe: these lines are lost, the server goes on
            if not self.failed:
                self.failed = True
                logging.getLogger("gpux.serve").error("access log: cannot write (%s); lines are dropped until it "
                                                      "can", exc)
        else:
            self.failed = False

    def close(self) -> None:
        self.closing.set()
        self.thread.join()
        super().close()


@contextmanager
def writing(stream: TextIO, on: bool) -> Iterator[AccessLog]:
    """While open, the access log it gives writes its lines to `stream` from a thread (every line written by the time
    it closes); none when not `on`."""
    level = LOG.level
    LOG.setLevel(logging.INFO if on else logging.WARNING)
    if not on:
        try:
            yield AccessLog()
        finally:
            LOG.setLevel(level)
        return
    handler = Batched(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    LOG.addHandler(handler)
    LOG.propagate = False
    try:
        yield AccessLog(handler)
    finally:
        LOG.removeHandler(handler)
        LOG.propagate = True
        LOG.setLevel(level)
        handler.close()
