"""Tensor codec edge cases no client here sends: BF16, BYTES framing, datatypes of outputs."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from gpux.serve import codec
from gpux.serve.errors import BadRequest


def test_bf16_is_the_upper_half_of_fp32() -> None:
    values = np.array([1.0, -2.5, 3.140625], dtype=np.float32)
    raw = (values.view(np.uint32) >> 16).astype("<u2").tobytes()
    np.testing.assert_array_equal(codec.from_bytes("b", "BF16", (3,), raw), values)


def test_bytes_framing_errors() -> None:
    good = struct.pack("<I", 2) + b"hi" + struct.pack("<I", 0)
    assert list(codec.from_bytes("s", "BYTES", (2,), good)) == [b"hi", b""]
    with pytest.raises(BadRequest, match="runs past the data"):
        codec.from_bytes("s", "BYTES", (1,), struct.pack("<I", 9) + b"hi")
    with pytest.raises(BadRequest, match="length prefix"):
        codec.from_bytes("s", "BYTES", (2,), good + b"\x01")
    with pytest.raises(BadRequest, match="needs 3 BYTES elements but 2"):
        codec.from_bytes("s", "BYTES", (3,), good)
    assert codec.to_bytes(np.array(["hi", ""], dtype=object)) == good


@pytest.mark.parametrize(("dtype", "datatype"), [("float32", "FP32"), ("float16", "FP16"), ("int64", "INT64"),
                                                 ("uint8", "UINT8"), ("bool", "BOOL"), ("float64", "FP64")])
def test_output_datatypes_round_trip(dtype: str, datatype: str) -> None:
    array = np.arange(6).reshape(2, 3).astype(dtype)
    assert codec.datatype_of(array) == datatype
    np.testing.assert_array_equal(codec.from_bytes("o", datatype, (2, 3), codec.to_bytes(array)), array)
    np.testing.assert_array_equal(codec.from_json("o", datatype, (2, 3), codec.to_json(array)), array)


@pytest.mark.parametrize("size", [4, codec.JSON_SLICE * 2 + 3], ids=["one-slice", "sliced"])
def test_json_text_is_json_with_non_finite_values_as_strings(size: int) -> None:
    import json

    values = np.arange(size, dtype=np.float32)
    values[[0, 1, -1]] = [np.nan, np.inf, -np.inf]

    def strict(token: str) -> None:
        raise AssertionError(f"bare {token}")

    data = json.loads(b"[" + codec.json_text(values) + b"]", parse_constant=strict)
    assert data[:2] == ["NaN", "Infinity"] and data[-1] == "-Infinity" and data[2:-1] == list(range(2, size - 1))
    np.testing.assert_array_equal(np.array(data, dtype=np.float32), values)  # as tritonclient's as_numpy reads it


def test_a_header_read_once_still_reads_and_checks_each_body() -> None:
    import json

    from gpux.serve import body

    limits = body.Limits(max_body_bytes=2**20, max_tensor_elements=2**20)
    head = json.dumps({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32",
                                   "parameters": {"binary_data_size": 16}}]}).encode()
    split = str(len(head)).encode()
    a = np.arange(4, dtype=np.float32)
    first, _ = body.parse_infer("m", "", head + a.tobytes(), split, limits)
    second, _ = body.parse_infer("m", "", head + (a + 1).tobytes(), split, limits)
    assert (head, limits) in body.PLANS  # the second request reused the first one's reading
    np.testing.assert_array_equal(first.inputs[0].array, a.reshape(1, 4))
    np.testing.assert_array_equal(second.inputs[0].array, (a + 1).reshape(1, 4))
    with pytest.raises(BadRequest, match="only 8 bytes of binary data remain"):
        body.parse_infer("m", "", head + a.tobytes()[:8], split, limits)
    with pytest.raises(BadRequest, match="2 bytes of binary data follow"):
        body.parse_infer("m", "", head + a.tobytes() + b"xx", split, limits)


def test_a_reply_header_written_once_is_reused_only_for_the_same_names_dtypes_and_shapes() -> None:
    import json

    from gpux.serve import body
    from gpux.serve.protocol import InferRequest, InferResult

    model = type("M", (), {"name": "m", "version": "1"})()
    request = InferRequest(model="m")

    def reply(array: np.ndarray) -> tuple[dict[str, object], bytes]:
        out = body.render_infer(InferResult(model, [("y", array)]), request, {"": True})  # type: ignore[arg-type]
        assert out.header_length is not None
        return json.loads(out.body[:out.header_length]), out.body[out.header_length:]

    (h1, b1), (h2, b2) = reply(np.zeros((1, 3), np.float32)), reply(np.ones((1, 3), np.float32))
    assert h1 == h2 and b1 != b2 and b2 == np.ones(3, np.float32).tobytes()
    h3, b3 = reply(np.ones((2, 2), np.float64))
    assert h3["outputs"] == [{"name": "y", "datatype": "FP64", "shape": [2, 2],  # type: ignore[index]
                              "parameters": {"binary_data_size": 32}}] and len(b3) == 32


def test_a_long_id_is_answered_but_its_reply_header_not_kept() -> None:
    from gpux.serve import body
    from gpux.serve.protocol import InferRequest, InferResult

    model = type("M", (), {"name": "m", "version": "1"})()
    request = InferRequest(model="m", id="i" * 10_000)
    out = body.render_infer(InferResult(model, [("y", np.zeros(2, np.float32))]), request,  # type: ignore[arg-type]
                            {"": True})
    assert out.header_length is not None and out.header_length > 10_000
    assert not any(k[2] == request.id for k in body.HEADS)


def test_json_read_again_where_orjson_differs() -> None:
    from gpux.serve import body
    from gpux.serve.protocol import InferResult

    limits = body.Limits(max_body_bytes=2**20, max_tensor_elements=2**20)
    # an id holding a lone surrogate (json reads it, orjson does not): answered, escaped
    text = b'{"id":"\\ud800","inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1.0]}]}'
    request, binary = body.parse_infer("m", "", text, None, limits)
    model = type("M", (), {"name": "m", "version": "1"})()
    out = body.render_infer(InferResult(model, [("y", np.ones(1, np.float32))]), request, binary)  # type: ignore[arg-type]
    assert b'"id":"\\ud800"' in out.body
    # below int64 with 19 digits: orjson reads a float, json the integer (and so its message)
    text = b'{"inputs":[{"name":"x","shape":[1],"datatype":"INT64","data":[-9223372036854775809]}]}'
    with pytest.raises(BadRequest, match="data cannot be read as INT64"):
        body.parse_infer("m", "", text, None, limits)
