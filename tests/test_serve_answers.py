"""Files in, answers out over `gpux serve`: real photos sent as BYTES by the real tritonclient HTTP and gRPC clients
to the trained MobileNetV2 example (on cpu and openvino) give the answers `gpux run NAME photo --json` and
`session.predict(path)` give; raw tensors still give logits; bad files are 400 / INVALID_ARGUMENT, never a 500."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import gpux

from .conftest import gpux as gpux_cli
from .serving import ServerThread, error_of, post
from .trained import imagenet_crops, mobilenet_v2_example, package_file, prebuilt, yolov8_detector_example

httpclient = pytest.importorskip("tritonclient.http")
grpcclient = pytest.importorskip("tritonclient.grpc")
from tritonclient.utils import InferenceServerException  # noqa: E402

pytestmark = pytest.mark.slow  # each server builds and opens the trained model
PHOTOS = ("chelsea.png", "coffee.png")
CATS = range(281, 286)


def photo(name: str) -> Path:
    return package_file("skimage", "data", name)


@pytest.fixture(scope="module")
def mobilenet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The mobilenet_v2 example as committed, with the model and crops its make_model.py writes, but cpu at fp32 (the
    example's cpu int8 fails verification); built for cpu and openvino once per session (the builds are other
    modules' subject)."""
    folder = prebuilt(mobilenet_v2_example(tmp_path_factory.mktemp("mobilenet_v2")), "openvino")
    yml = folder / "gpux.yml"
    yml.write_text(yml.read_text().replace("cpu: {precision: int8, quantization: static, per_channel: true, "
                                           "calibration: crops.npz}", "cpu: {precision: fp32}"))
    return prebuilt(folder, "cpu")


@pytest.fixture(scope="module", params=["cpu", "openvino"])
def served(request: pytest.FixtureRequest, mobilenet: Path) -> Iterator[tuple[ServerThread, str, dict[str, Any]]]:
    """The example served on one provider, and the answers `gpux run --json` and `session.predict` give there."""
    provider = request.param
    with ServerThread([mobilenet], provider=provider) as server:
        assert server.server.repo.find("mobilenet-v2").provider == provider
        r = gpux_cli("run", str(mobilenet), *(str(photo(p)) for p in PHOTOS), "-p", provider, "--strict", "--json")
        assert r.returncode == 0, r.stderr
        cli = {Path(line["file"]).name: line["answers"]["logits"] for line in map(json.loads, r.stdout.splitlines())}
        with gpux.load(mobilenet, provider=provider, strict=True) as session:
            api = {p: session.predict(str(photo(p)))["logits"] for p in PHOTOS}
        assert cli == api and cli["chelsea.png"][0]["index"] in CATS
        yield server, provider, cli


def files(*names: str) -> np.ndarray:
    return np.array([photo(n).read_bytes() for n in names], dtype=object)


def answers(array: np.ndarray) -> list[Any]:
    return [json.loads(x) for x in array.reshape(-1)]


def close(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    """The same classes in the same order; scores as a batch of one gives them, to float rounding of a batch."""
    assert [(a["label"], a["index"]) for a in got] == [(a["label"], a["index"]) for a in want]
    np.testing.assert_allclose([a["score"] for a in got], [a["score"] for a in want], rtol=1e-4, atol=1e-6)


def http_input(array: np.ndarray, binary: bool = True, name: str = "x") -> Any:
    tensor = httpclient.InferInput(name, list(array.shape), "BYTES" if array.dtype == object else "FP32")
    tensor.set_data_from_numpy(array, binary_data=binary)
    return tensor


def grpc_input(array: np.ndarray, name: str = "x") -> Any:
    tensor = grpcclient.InferInput(name, list(array.shape), "BYTES" if array.dtype == object else "FP32")
    tensor.set_data_from_numpy(array)
    return tensor


def test_metadata_lists_the_file_input_and_answers_as_bytes(served: Any) -> None:
    server, provider, _ = served
    meta = httpclient.InferenceServerClient(server.http).get_model_metadata("mobilenet-v2")
    assert meta["platform"] == f"gpux_{provider}"
    assert meta["inputs"] == [{"name": "x", "datatype": "BYTES", "shape": [-1], "parameters": {
        "content_type": "image", "tensor_datatype": "FP32", "tensor_shape": [-1, 3, 224, 224]}}]
    assert meta["outputs"] == [{"name": "logits", "datatype": "BYTES", "shape": [-1], "parameters": {
        "content_type": "json", "tensor_datatype": "FP32", "tensor_shape": [-1, 1000]}}]
    grpc_meta = grpcclient.InferenceServerClient(server.grpc).get_model_metadata("mobilenet-v2")
    assert [(t.name, t.datatype, list(t.shape)) for t in grpc_meta.inputs] == [("x", "BYTES", [-1])]
    assert [(t.name, t.datatype, list(t.shape)) for t in grpc_meta.outputs] == [("logits", "BYTES", [-1])]
    from gpux.serve.proto import inference_pb2 as pb  # our copy of the messages reads the parameters extension

    ours = pb.ModelMetadataResponse.FromString(grpc_meta.SerializeToString())
    params = ours.inputs[0].parameters
    assert params["content_type"].string_param == "image" and params["tensor_datatype"].string_param == "FP32"
    assert json.loads(params["tensor_shape"].string_param) == [-1, 3, 224, 224]


def test_http_photos_get_the_answers_of_gpux_run_and_predict(served: Any) -> None:
    server, _, want = served
    client = httpclient.InferenceServerClient(server.http)
    one = client.infer("mobilenet-v2", [http_input(files("chelsea.png"))])  # the binary extension (default)
    assert one.get_output("logits")["datatype"] == "BYTES" and one.get_output("logits")["shape"] == [1]
    assert answers(one.as_numpy("logits")) == [want["chelsea.png"]]  # a batch of one: exactly the same
    both = client.infer("mobilenet-v2", [http_input(files(*PHOTOS))])
    for got, name in zip(answers(both.as_numpy("logits")), PHOTOS, strict=True):
        close(got, want[name])
    # JSON without the binary extension: each file's base64 as a string; answers back as JSON strings
    b64 = np.array([base64.b64encode(photo(n).read_bytes()) for n in PHOTOS], dtype=object)
    text = client.infer("mobilenet-v2", [http_input(b64, binary=False)],
                        outputs=[httpclient.InferRequestedOutput("logits", binary_data=False)])
    assert "data" in text.get_output("logits")
    for got, name in zip(answers(text.as_numpy("logits")), PHOTOS, strict=True):
        close(got, want[name])


def test_grpc_photos_get_the_answers_of_gpux_run_and_predict(served: Any) -> None:
    server, _, want = served
    client = grpcclient.InferenceServerClient(server.grpc)
    one = client.infer("mobilenet-v2", [grpc_input(files("coffee.png"))])  # raw_input_contents, length-prefixed
    assert answers(one.as_numpy("logits")) == [want["coffee.png"]]
    both = client.infer("mobilenet-v2", [grpc_input(files(*PHOTOS).reshape(2, 1))])  # [batch, 1]: answers alike
    assert both.as_numpy("logits").shape == (2, 1)
    for got, name in zip(answers(both.as_numpy("logits")), PHOTOS, strict=True):
        close(got, want[name])


def test_tensors_still_give_logits_and_the_answers_parameter_switches(served: Any, mobilenet: Path) -> None:
    server, provider, want = served
    crop = imagenet_crops(per_photo=1)[1:2]  # the example's own chelsea crop, [1, 3, 224, 224] FP32
    with gpux.load(mobilenet, provider=provider, strict=True) as session:
        logits = session.run({"x": crop})["logits"]
    http = httpclient.InferenceServerClient(server.http)
    raw = http.infer("mobilenet-v2", [http_input(crop)])
    assert raw.as_numpy("logits").dtype == np.float32 and raw.as_numpy("logits").shape == (1, 1000)
    np.testing.assert_allclose(raw.as_numpy("logits"), logits, rtol=1e-5, atol=1e-5)
    answered = http.infer("mobilenet-v2", [http_input(crop)], parameters={"answers": True})  # a tensor, answered
    (row,) = answers(answered.as_numpy("logits"))
    assert row[0]["index"] in CATS and len(row) == 5
    grpc = grpcclient.InferenceServerClient(server.grpc)
    tensors = grpc.infer("mobilenet-v2", [grpc_input(files(*PHOTOS))], parameters={"answers": False})
    assert tensors.as_numpy("logits").shape == (2, 1000) and tensors.as_numpy("logits").dtype == np.float32
    assert int(tensors.as_numpy("logits")[0].argmax()) == want["chelsea.png"][0]["index"]
    classified = http.infer("mobilenet-v2", [http_input(files("chelsea.png"))],
                            outputs=[httpclient.InferRequestedOutput("logits", class_count=2)])
    assert classified.as_numpy("logits")[0, 0].decode().split(":")[1] == str(want["chelsea.png"][0]["index"])


def bad_files() -> dict[str, bytes]:
    data = photo("chelsea.png").read_bytes()
    from PIL import Image

    jpeg = io.BytesIO()
    Image.open(photo("chelsea.png")).convert("RGB").save(jpeg, "JPEG")
    return {"text": b"name,score\ncat,1\n", "truncated png": data[:len(data) // 3], "empty": b"",
            "truncated jpeg": jpeg.getvalue()[:2000], "noise": np.random.default_rng(0).bytes(5000),
            "png header only": data[:64]}


@pytest.mark.parametrize("served", ["cpu"], indirect=True)  # the files never reach a provider
def test_bad_files_are_400_and_invalid_argument_naming_the_element(served: Any) -> None:
    server, _, _ = served
    http = httpclient.InferenceServerClient(server.http)
    grpc = grpcclient.InferenceServerClient(server.grpc)
    good = photo("coffee.png").read_bytes()
    for kind, bad in bad_files().items():
        sent = np.array([good, bad], dtype=object)
        with pytest.raises(InferenceServerException) as rest:
            http.infer("mobilenet-v2", [http_input(sent)])
        assert rest.value.status() == "400", (kind, rest.value)
        assert "input 'x' element 1: " in rest.value.message(), (kind, rest.value.message())
        with pytest.raises(InferenceServerException) as rpc:
            grpc.infer("mobilenet-v2", [grpc_input(sent)])
        assert rpc.value.status() == "StatusCode.INVALID_ARGUMENT", (kind, rpc.value)
        assert "input 'x' element 1: " in rpc.value.message(), kind
    body = {"inputs": [{"name": "x", "datatype": "BYTES", "shape": [1], "data": ["not base64!"]}]}
    status, _, reply = post(server.http, "/v2/models/mobilenet-v2/infer", json.dumps(body))
    assert status == 400 and "input 'x' element 0: a JSON string of a file is the file in base64" in error_of(reply)
    body["parameters"] = {"answers": "yes"}
    status, _, reply = post(server.http, "/v2/models/mobilenet-v2/infer", json.dumps(body))
    assert status == 400 and "parameters.answers must be true or false" in error_of(reply)
    wrong = {"inputs": [{"name": "x", "datatype": "INT32", "shape": [1], "data": [1]}]}
    status, _, reply = post(server.http, "/v2/models/mobilenet-v2/infer", json.dumps(wrong))
    assert status == 400 and "expects FP32 (or BYTES: encoded files, one per element)" in error_of(reply)
    empty = {"inputs": [{"name": "x", "datatype": "BYTES", "shape": [0], "data": []}]}
    status, _, reply = post(server.http, "/v2/models/mobilenet-v2/infer", json.dumps(empty))
    assert status == 400 and "holds no files" in error_of(reply)


@pytest.mark.parametrize("served", ["cpu"], indirect=True)  # the server's loop, whatever the provider
def test_decoding_runs_off_the_event_loop(served: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 5000 x 5000 PNG is decoded and resized on a worker thread (one with no running event loop), and health
    checks are answered while it is."""
    from PIL import Image

    from gpux.answers.steps import Steps

    server, _, _ = served
    ramp = np.add.outer(np.arange(5000) % 256, np.arange(5000) % 256).astype(np.uint8)
    big = io.BytesIO()
    Image.fromarray(np.stack([ramp, ramp.T, ramp // 2], -1)).save(big, "PNG", compress_level=1)
    feeds, on_loop = Steps.feeds, []

    def watched(self: Steps, item: Any, name: str) -> Any:
        try:
            asyncio.get_running_loop()
            on_loop.append(True)
        except RuntimeError:
            on_loop.append(False)
        return feeds(self, item, name)

    monkeypatch.setattr(Steps, "feeds", watched)
    took: list[float] = []

    def send() -> None:
        started = time.perf_counter()
        httpclient.InferenceServerClient(server.http).infer(
            "mobilenet-v2", [http_input(np.array([big.getvalue()], dtype=object))])
        took.append(time.perf_counter() - started)

    sender = threading.Thread(target=send)
    sender.start()
    answered = 0
    while sender.is_alive():
        assert post(server.http, "/v2/health/live", "", method="GET")[0] == 200
        answered += 1
    sender.join()
    assert on_loop == [False], "the file was decoded on the event loop's thread"
    assert took and answered >= 3, (took, answered)


def test_files_of_concurrent_requests_run_as_one_batch(mobilenet: Path, tmp_path: Path) -> None:
    folder = tmp_path / "batched"
    folder.mkdir()
    for name in ("model.onnx", "crops.npz", "imagenet_labels.txt"):
        (folder / name).symlink_to(mobilenet / name)
    shutil.copytree(mobilenet / ".gpux", folder / ".gpux")  # serve: is not the build's: its artifacts are these
    text = (mobilenet / "gpux.yml").read_text() + "serve: {max_batch_size: 8, max_queue_delay_us: 500000}\n"
    (folder / "gpux.yml").write_text(text)
    sent = ("chelsea.png", "coffee.png", "astronaut.png", "rocket.jpg")
    with gpux.load(folder, provider="openvino", strict=True) as session:
        want = [session.predict(str(photo(p)))["logits"] for p in sent]
    got: dict[int, Any] = {}
    with ServerThread([folder], provider="openvino") as server:
        def send(i: int) -> None:
            result = httpclient.InferenceServerClient(server.http).infer("mobilenet-v2", [http_input(files(sent[i]))])
            got[i] = answers(result.as_numpy("logits"))[0]

        senders = [threading.Thread(target=send, args=(i,)) for i in range(len(sent))]
        for t in senders:
            t.start()
        for t in senders:
            t.join()
        metrics = post(server.http, "/metrics", "", method="GET")[2].decode()
    for i in range(len(sent)):
        close(got[i], want[i])
    count = next(float(x.split()[-1]) for x in metrics.splitlines() if x.startswith("gpux_batch_size_count"))
    assert count < len(sent), metrics  # four requests, fewer inferences


@pytest.fixture(scope="module")
def detector(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prebuilt(yolov8_detector_example(tmp_path_factory.mktemp("yolov8_detector")), "cpu")  # once a session


def test_a_detector_of_batch_one_answers_each_photo_with_boxes(detector: Path) -> None:
    """[1, 3, 320, 320] takes no batch: two files run as two inferences; boxes in each photo's own pixels."""
    sent = ("astronaut.png", "chelsea.png")
    with gpux.load(detector, provider="cpu", strict=True) as session:
        want = [session.predict(str(photo(p)))["output0"] for p in sent]
    with ServerThread([detector], provider="cpu") as server:
        client = httpclient.InferenceServerClient(server.http)
        result = client.infer("yolov8-detector", [http_input(files(*sent), name="images")])
    got = answers(result.as_numpy("output0"))
    assert got == want and any(a["label"] == "FACE_FEMALE" for a in got[0])
