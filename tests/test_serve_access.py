"""The access log's writer: lines handed over on the event loop, written by a thread, none lost when it closes."""

from __future__ import annotations

import io
import json
import logging
import time

import pytest

from gpux.serve import access


def test_every_line_is_written_by_the_time_the_writer_closes() -> None:
    stream = io.StringIO()
    with access.writing(stream, True) as log:
        started = time.perf_counter()
        for i in range(2000):
            log.line(started, protocol="http", path=f"/v2/models/m/infer?{i}", status=200)
    lines = [json.loads(x) for x in stream.getvalue().splitlines()]
    assert [x["path"] for x in lines] == [f"/v2/models/m/infer?{i}" for i in range(2000)]
    assert all(x["status"] == 200 and x["ms"] >= 0 and x["ts"] > 0 for x in lines)
    assert not access.LOG.handlers and access.LOG.propagate  # nothing left behind


def test_off_writes_nothing_and_without_a_writer_lines_are_log_records(caplog: pytest.LogCaptureFixture) -> None:
    stream = io.StringIO()
    with access.writing(stream, False) as log:
        assert not log.on()
        log.line(time.perf_counter(), protocol="grpc", status=200)
    assert stream.getvalue() == ""
    caplog.set_level(logging.INFO, logger="gpux.serve.access")
    access.AccessLog().line(time.perf_counter(), protocol="grpc", method="ModelInfer", status=400)
    [record] = [r for r in caplog.records if r.name == "gpux.serve.access"]
    assert json.loads(record.getMessage())["status"] == 400  # JSON text for any handler


class Flaky(io.StringIO):
    """A stream whose first write fails (a full disk), then works."""

    failed = False

    def write(self, text: str) -> int:
        if not self.failed:
            self.failed = True
            raise OSError(28, "No space left on device")
        return super().write(text)


def test_a_failed_write_loses_that_batch_only(caplog: pytest.LogCaptureFixture) -> None:
    stream = Flaky()
    with access.writing(stream, True) as log:
        log.line(time.perf_counter(), path="/lost", status=200)
        time.sleep(access.FLUSH_S * 4)  # the first batch meets the full disk
        assert log.writer is not None and log.writer.thread.is_alive()
        log.line(time.perf_counter(), path="/kept", status=200)
    assert [json.loads(x)["path"] for x in stream.getvalue().splitlines()] == ["/kept"]
    assert any("access log: cannot write" in r.getMessage() for r in caplog.records)
