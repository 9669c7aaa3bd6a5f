"""The one table of tensor element types (gpux/formats.py) against the parties it speaks for: ONNX's TensorProto,
Triton's model config enum, numpy, gpux.yml's dtypes, and the server's wire tables derived from it."""

from __future__ import annotations

import typing

import numpy as np
import onnx
import pytest

from gpux.formats import ELEMENT_TYPES, ONNX_DTYPE_NAMES, ONNX_DTYPES


@pytest.mark.parametrize("t", ELEMENT_TYPES, ids=lambda t: t.name)
def test_each_element_type_is_spelled_as_each_party_spells_it(t: typing.Any) -> None:
    from tritonclient.grpc import model_config_pb2

    assert onnx.TensorProto.DataType.Name(t.onnx).lower() == t.onnx_name
    assert model_config_pb2.DataType.Value(t.triton) > 0
    if t.name == "bfloat16":  # numpy has no bfloat16: the protocol sends the top half of each float32
        assert np.dtype(t.wire) == np.float32
    elif t.name == "string":
        assert np.dtype(t.wire).kind == "O"
    else:
        assert np.dtype(t.wire) == np.dtype(t.name) and onnx.helper.tensor_dtype_to_np_dtype(t.onnx) == np.dtype(t.name)


def test_the_other_tables_are_derived_from_it() -> None:
    from gpux.config.schema import DType
    from gpux.deploy.triton import DATA_TYPES
    from gpux.serve.codec import DATATYPE, NUMPY

    names = [t.name for t in ELEMENT_TYPES]
    assert len(set(names)) == len(names) == len(ONNX_DTYPES) == len(DATA_TYPES) == len(DATATYPE) == len(NUMPY)
    assert set(typing.get_args(typing.get_args(DType)[0])) == set(names), "gpux.yml accepts every element type"
    assert ONNX_DTYPE_NAMES == {"float": "float32", "double": "float64"}
    assert list(NUMPY) == ["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16",
                           "FP32", "FP64", "BYTES", "BF16"], "the order 'unknown datatype' errors list them in"
    assert DATA_TYPES["string"] == "TYPE_STRING" and DATATYPE["string"] == "BYTES" and NUMPY["BF16"] == np.float32
