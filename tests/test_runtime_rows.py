"""Runtime facts asked of the runtime's rows, not written into the rooms that use them: how a runtime's error reads
as one line (`gpux.runtimes.MESSAGES`), and the precision an artifact computes at (`ArtifactKind.precision`). Real
errors of the real runtimes."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpux.errors import first_line
from gpux.plan.targets import Target
from gpux.quality.verify import execution_precision, short
from gpux.runtimes import ARTIFACT_KINDS, MESSAGES, resolve


def test_every_message_reader_resolves_and_the_last_reads_any() -> None:
    assert [callable(resolve(reader)) for _, reader in MESSAGES] == [True] * len(MESSAGES)
    assert MESSAGES[-1][0] == ""


def test_an_onnx_runtime_error_reads_as_its_status_message(tmp_path: Path) -> None:
    import onnxruntime as ort

    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(Exception) as caught:  # the runtime's own class, whichever it is
        ort.InferenceSession(str(bad), providers=["CPUExecutionProvider"])
    assert "[ONNXRuntimeError]" in str(caught.value)
    line = short(caught.value)
    assert line.startswith(f"{type(caught.value).__name__}: ") and "[ONNXRuntimeError]" not in line
    assert "Load model from" not in line and len(line) > len(type(caught.value).__name__) + 2


def test_an_openvino_error_reads_as_its_reason(tmp_path: Path) -> None:
    ov = pytest.importorskip("openvino")
    from gpux.runtimes.openvino import reason

    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(Exception) as caught:
        ov.Core().read_model(str(bad))
    assert str(caught.value).startswith("Exception from")
    assert short(caught.value) == first_line(caught.value, reason(caught.value))


@pytest.mark.parametrize(("kind", "precision", "options", "computes"), [
    ("openvino-ir", "bf16", {}, "bf16"),
    ("openvino-ir", "fp32", {"inference_precision": "f16"}, "fp16"),
    ("openvino-ir", "int8", {"inference_precision": "f16"}, "int8"),
    ("openvino-ir", "fp32", {}, "fp32"),
    ("float16", "fp16", {}, "fp16"),
])
def test_the_precision_computed_at_is_the_kinds_to_say(kind: str, precision: str, options: dict[str, str],
                                                         computes: str) -> None:
    target = Target(id=f"t-{kind}", kind=kind, provider="openvino", precision=precision, options=options)
    assert execution_precision(target) == computes
    assert (ARTIFACT_KINDS[kind].precision is None) == (kind != "openvino-ir")
