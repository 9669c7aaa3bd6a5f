"""A file the decoders cannot read is the client's (400 / INVALID_ARGUMENT); a bug met while decoding one is the
server's: a 500 (gRPC INTERNAL) with its traceback in the server's log, and serving goes on."""

from __future__ import annotations

import base64
import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from tests.serving import ServerThread, error_of, mean_project, post

BUG = "planted decoding bug"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    with ServerThread([mean_project(tmp_path_factory.mktemp("decoding") / "mean")]) as s:
        yield s


def png() -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(np.full((16, 16, 3), 200, np.uint8)).save(out, "PNG")
    return out.getvalue()


def infer(server: ServerThread, *files: bytes) -> tuple[int, bytes]:
    data = [base64.b64encode(f).decode() for f in files]
    body = {"inputs": [{"name": "x", "datatype": "BYTES", "shape": [len(data)], "data": data}]}
    status, _, reply = post(server.http, "/v2/models/mean/infer", json.dumps(body))
    return status, reply


@pytest.fixture
def log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """The server's log as its logger writes it (another test's `gpux serve` may have stopped it propagating)."""
    logger = logging.getLogger("gpux.serve")
    logger.addHandler(caplog.handler)
    caplog.handler.setLevel(logging.DEBUG)
    try:
        yield caplog
    finally:
        logger.removeHandler(caplog.handler)


def test_a_good_and_a_bad_image(server: ServerThread) -> None:
    status, reply = infer(server, png())
    assert status == 200, reply
    good = png()
    for bad in (good[:len(good) // 2], b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4, b"not an image at all"):
        status, reply = infer(server, good, bad)
        assert status == 400, reply
        assert "input 'x' element 1: " in error_of(reply)


def test_a_decoding_bug_is_a_logged_500(server: ServerThread, log: pytest.LogCaptureFixture,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import gpux.answers.steps

    def planted(*_: Any) -> Any:
        raise TypeError(BUG)

    monkeypatch.setattr(gpux.answers.steps, "image_tensor", planted)
    status, reply = infer(server, png())
    assert status == 500, reply
    assert "internal error" in error_of(reply) and BUG in error_of(reply)
    logged = "\n".join(r.getMessage() + "\n" + (log.handler.format(r) if r.exc_info else "") for r in log.records)
    assert "Traceback" in logged and f"TypeError: {BUG}" in logged and "planted" in logged, logged
    grpcclient = pytest.importorskip("tritonclient.grpc")
    from tritonclient.utils import InferenceServerException

    sent = grpcclient.InferInput("x", [1], "BYTES")
    sent.set_data_from_numpy(np.array([png()], dtype=object))
    with pytest.raises(InferenceServerException) as rpc:
        grpcclient.InferenceServerClient(server.grpc).infer("mean", [sent])
    assert rpc.value.status() == "StatusCode.INTERNAL" and BUG in rpc.value.message()
    monkeypatch.undo()
    assert infer(server, png())[0] == 200  # serving goes on


def test_a_mistaken_file_is_never_logged_as_a_bug(server: ServerThread, log: pytest.LogCaptureFixture) -> None:
    assert infer(server, b"GIF89a" + bytes(40))[0] == 400
    assert not [r for r in log.records if r.exc_info], [r.getMessage() for r in log.records]


def test_pillows_errors_are_declared_once_pillow_is_imported() -> None:
    from PIL import Image

    from gpux.serve.steps import decoding_errors

    assert {OSError, UnicodeDecodeError, Image.DecompressionBombError} <= set(decoding_errors())
