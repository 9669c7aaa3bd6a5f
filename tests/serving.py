"""Test tooling for `gpux serve`: small projects (FP32, INT64, FP16, BOOL, two versions) and a server thread."""

from __future__ import annotations

import asyncio
import http.client
import json
import threading
from pathlib import Path
from typing import Any

from tests.conftest import make_mlp, make_two_inputs

MLP = """\
name: mlp
version: {version}
model: {{source: model.onnx}}
inputs: {{x: {{dtype: float32, shape: [batch, 8]}}}}
outputs: {{probs: {{dtype: float32, shape: [batch, 4], labels: [cat, dog, fox, owl]}}}}
runtime: {{backend: cpu}}
serve: {{http_port: 0, grpc_port: 0{serve}}}
"""
PLAIN = """\
name: {name}
version: 1
model: {{source: model.onnx}}
runtime: {{backend: cpu}}
"""


def make_fp16(path: Path) -> Path:
    """h float16 [batch, 4] -> y float16 [batch, 4] = h * 2 + 1."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    two = numpy_helper.from_array(np.array(2, dtype=np.float16), "two")
    one = numpy_helper.from_array(np.array(1, dtype=np.float16), "one")
    graph = helper.make_graph(
        [helper.make_node("Mul", ["h", "two"], ["m"]), helper.make_node("Add", ["m", "one"], ["y"])], "half",
        [helper.make_tensor_value_info("h", TensorProto.FLOAT16, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["batch", 4])], [two, one])
    onnx.save(helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def make_bool(path: Path) -> Path:
    """flags bool [3] -> inverted bool [3] (a static shape: not batchable)."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Not", ["flags"], ["inverted"])], "flip",
        [helper.make_tensor_value_info("flags", TensorProto.BOOL, [3])],
        [helper.make_tensor_value_info("inverted", TensorProto.BOOL, [3])])
    onnx.save(helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def make_echo(path: Path) -> Path:
    """words string [batch] -> same string [batch] (Identity): BYTES both ways."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["words"], ["same"])], "echo",
        [helper.make_tensor_value_info("words", TensorProto.STRING, ["batch"])],
        [helper.make_tensor_value_info("same", TensorProto.STRING, ["batch"])])
    onnx.save(helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def make_raises(path: Path) -> Path:
    """s string [1] -> y float [1]: 0 for any word but "boom", whose Cast to float fails at run time
    (ONNX Runtime's RUNTIME_EXCEPTION): a model whose session raises on one request and serves the others."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    then = helper.make_graph([helper.make_node("Cast", ["s"], ["a"], to=TensorProto.FLOAT)], "then", [],
                             [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1])])
    zero = numpy_helper.from_array(np.zeros(1, np.float32))
    orelse = helper.make_graph([helper.make_node("Constant", [], ["b"], value=zero)], "else", [],
                               [helper.make_tensor_value_info("b", TensorProto.FLOAT, [1])])
    graph = helper.make_graph(
        [helper.make_node("Equal", ["s", "boom"], ["eq"]), helper.make_node("Squeeze", ["eq"], ["cond"]),
         helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=orelse)], "raises",
        [helper.make_tensor_value_info("s", TensorProto.STRING, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        [numpy_helper.from_array(np.array(["boom"], dtype=object), "boom")])
    onnx.save(helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", 19)]), str(path))
    return path


MEAN = """\
name: mean
version: 1
model: {{source: model.onnx}}
inputs:
  x:
    dtype: float32
    shape: [batch, 3, 8, 8]
    preprocess: {{image: {{resize: {{shorter: 8}}, crop: 8, scale: 1/255}}}}
outputs: {{rgb: {{dtype: float32, shape: [batch, 3]}}}}
runtime: {{backend: cpu}}
serve: {{http_port: 0, grpc_port: 0{serve}}}
"""


def mean_project(root: Path, serve: str = "") -> Path:
    """An image model: a photo in (resized to 8x8), its mean R, G and B (0..1) out."""
    import onnx
    from onnx import TensorProto, helper

    root.mkdir(parents=True, exist_ok=True)
    graph = helper.make_graph([helper.make_node("ReduceMean", ["x"], ["rgb"], axes=[2, 3], keepdims=0)], "mean",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 8])],
                              [helper.make_tensor_value_info("rgb", TensorProto.FLOAT, ["batch", 3])])
    model = helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(root / "model.onnx"))
    (root / "gpux.yml").write_text(MEAN.format(serve=serve))
    return root


def mlp_project(root: Path, version: str, seed: int, serve: str = "") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    make_mlp(root / "model.onnx", seed=seed)
    (root / "gpux.yml").write_text(MLP.format(version=version, serve=serve))
    return root


def plain_project(root: Path, name: str, maker: Any) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    maker(root / "model.onnx")
    (root / "gpux.yml").write_text(PLAIN.format(name=name))
    return root


def projects(base: Path) -> list[Path]:
    """mlp 1.0.0 and 2.0.0 (different weights), two (INT64 + FP32), half (FP16), flip (BOOL), echo (BYTES)."""
    return [mlp_project(base / "mlp1", "1.0.0", 0), mlp_project(base / "mlp2", "2.0.0", 1),
            plain_project(base / "two", "two", make_two_inputs), plain_project(base / "half", "half", make_fp16),
            plain_project(base / "flip", "flip", make_bool), plain_project(base / "echo", "echo", make_echo)]


class ServerThread:
    """`gpux serve` in-process on its own event loop thread, on free loopback ports; always stopped on exit."""

    def __init__(self, paths: list[Path], api_key: str | None = None, provider: str | None = None,
                 opening: Any = None) -> None:
        """`opening`: what `gpux serve` read from its targets (gpux.serve.command's Opening: a workspace's models
        and pipeline), served beside `paths`."""
        self.paths, self.api_key, self.provider, self.opening = paths, api_key, provider, opening
        self.server: Any = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        from gpux.config.locate import open_project
        from gpux.serve.models import LoadRequest
        from gpux.serve.server import Server, ServeRequest

        o = self.opening
        load = LoadRequest(provider=self.provider, strict=self.provider is not None,
                           fixed=o.fixed if o else {}, pipelines=o.pipelines if o else {})
        projects = [open_project(str(p)) for p in self.paths] + (o.projects if o else [])
        self.server = Server(ServeRequest(projects=projects, host="127.0.0.1",
                                          http_port=0, grpc_port=0, api_key=self.api_key, load=load, drain_s=5))
        self.loop = asyncio.get_running_loop()
        await self.server.start()
        await self.server.wait_ready()
        self._ready.set()
        await self.server.stopping.wait()
        await self.server.stop()

    def __enter__(self) -> ServerThread:
        self._thread.start()
        self._ready.wait(180)
        if self._error is not None:
            raise self._error
        return self

    def __exit__(self, *exc: object) -> None:
        if self.server is not None and self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.server.stopping.set)
        self._thread.join(30)
        assert not self._thread.is_alive(), "server thread did not stop"

    @property
    def http(self) -> str:
        return f"127.0.0.1:{self.server.http_port}"

    @property
    def grpc(self) -> str:
        return f"127.0.0.1:{self.server.grpc_port}"


def post(address: str, path: str, body: bytes | str, headers: dict[str, str] | None = None,
         method: str = "POST") -> tuple[int, dict[str, str], bytes]:
    """A raw HTTP request (no client library), for bodies tritonclient would never send."""
    host, port = address.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request(method, path, body=body.encode() if isinstance(body, str) else body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def error_of(body: bytes) -> str:
    doc = json.loads(body)
    assert set(doc) == {"error"}, doc
    return str(doc["error"])
