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
