"""Run in the KServe SDK's own venv (tests/kserve_env.py), not gpux's: the KServe SDK's REST (Open Inference
Protocol v2) and gRPC clients against one `gpux serve`, printing one JSON document of what they answered.

    python tests/kserve_client.py HOST:HTTP_PORT HOST:GRPC_PORT

Models (tests/triton_models.py): `simple_fp32` (FP32 INPUT0, INPUT1 [-1, 16] -> OUTPUT0 sum, OUTPUT1 difference)
and `simple_string` (the same over numbers written as BYTES)."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import grpc as grpc_errors
import httpx
import numpy as np
from kserve import InferenceGRPCClient, InferenceRESTClient, InferInput, InferRequest, RESTConfig
from kserve.protocol.grpc import grpc_predict_v2_pb2 as pb
from kserve.protocol.rest.v2_datamodels import ModelMetadataResponse

A = np.arange(16, dtype=np.float32).reshape(1, 16) / 4
B = np.full((1, 16), 0.5, dtype=np.float32)
TEXT0 = np.array([[str(i).encode() for i in range(16)]], dtype=np.object_)
TEXT1 = np.array([[b"1"] * 16], dtype=np.object_)


def requests(binary: bool) -> dict[str, InferRequest]:
    """An FP32 request to simple_fp32 and a BYTES one to simple_string, built as the SDK builds them: tensors as
    raw bytes (REST's binary extension, gRPC's raw_input_contents) or as typed values (JSON `data`, gRPC
    `contents`)."""
    fp32 = [InferInput("INPUT0", [1, 16], "FP32"), InferInput("INPUT1", [1, 16], "FP32")]
    fp32[0].set_data_from_numpy(A, binary)
    fp32[1].set_data_from_numpy(B, binary)
    text = [InferInput("INPUT0", [1, 16], "BYTES"), InferInput("INPUT1", [1, 16], "BYTES")]
    text[0].set_data_from_numpy(TEXT0, binary)
    text[1].set_data_from_numpy(TEXT1, binary)
    return {"fp32": InferRequest("simple_fp32", fp32), "bytes": InferRequest("simple_string", text)}


def outputs(response: Any) -> dict[str, Any]:
    """Each output by name: datatype, shape and values (BYTES decoded to text)."""
    found = {}
    for out in response.outputs:
        data = out.as_numpy()
        values = [v.decode() if isinstance(v, bytes) else v for v in data.flatten().tolist()]
        found[out.name] = {"datatype": out.datatype, "shape": list(data.shape), "data": values}
    return found


async def rest(http: str) -> dict[str, Any]:
    base = f"http://{http}"
    client = InferenceRESTClient(RESTConfig(protocol="v2", retries=0, timeout=30))
    try:
        async with httpx.AsyncClient() as plain:  # the SDK's REST client has no metadata call: read it, check it
            meta = ModelMetadataResponse.model_validate((await plain.get(f"{base}/v2/models/simple_fp32")).json())
        doc = {"live": await client.is_server_live(base), "ready": await client.is_server_ready(base),
               "model_ready": await client.is_model_ready(base, "simple_fp32"),
               "unknown_ready": await client.is_model_ready(base, "no_such_model"),
               "metadata": meta.model_dump()}
        try:  # the SDK raises with the server's own `error` text when the body is JSON
            await client.infer(base, requests(True)["fp32"], model_name="no_such_model")
        except httpx.HTTPStatusError as exc:
            doc["unknown_infer"] = {"status": exc.response.status_code, "message": str(exc)}
        for binary in (True, False):
            for kind, request in requests(binary).items():
                found = await client.infer(base, request, model_name=request.model_name)
                doc[f"{kind}_{'binary' if binary else 'typed'}"] = outputs(found)
        return doc
    finally:
        await client.close()


async def grpc(address: str) -> dict[str, Any]:
    client = InferenceGRPCClient(address, timeout=30)
    try:
        meta = await client._client_stub.ModelMetadata(pb.ModelMetadataRequest(name="simple_fp32"), timeout=30)
        doc = {"live": await client.is_server_live(), "ready": await client.is_server_ready(),
               "model_ready": await client.is_model_ready("simple_fp32"),
               "metadata": {"name": meta.name, "versions": list(meta.versions), "platform": meta.platform,
                            "inputs": [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)}
                                       for t in meta.inputs]}}
        unknown = requests(True)["fp32"]
        unknown.model_name = "no_such_model"
        try:
            await client.infer(unknown)
        except grpc_errors.RpcError as exc:
            doc["unknown_infer"] = {"status": exc.code().name, "message": exc.details()}
        for binary in (True, False):
            for kind, request in requests(binary).items():
                doc[f"{kind}_{'binary' if binary else 'typed'}"] = outputs(await client.infer(request))
        return doc
    finally:
        await client.close()


async def main(http: str, address: str) -> None:
    sent = {"fp32": {"INPUT0": A.tolist(), "INPUT1": B.tolist()},
            "bytes": {"INPUT0": TEXT0.astype(str).tolist(), "INPUT1": TEXT1.astype(str).tolist()}}
    print(json.dumps({"sent": sent, "rest": await rest(http), "grpc": await grpc(address)}))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:3]))
