"""`gpux package`: the Dockerfile per provider, the build context, its errors, and a cpu image on a real engine."""

from __future__ import annotations

import contextlib
import io
import json
import shlex
import ssl
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpux.config.load import load_config
from gpux.deploy.docker import EngineUnavailable, run_image
from gpux.deploy.image import (
    CUDA_BASE,
    IMAGES,
    choose_provider,
    pin_requirements,
    plan_image,
)
from gpux.deploy.wheel import write_wheel
from gpux.errors import UsageError
from tests.conftest import MLP_YML, gpux, make_mlp, write
from tests.docker_engine import CannotRunEngine, Engine, running_engine

ORT_VERSIONS: dict[str, str | None] = {"onnxruntime": "onnxruntime 1.31.1", "onnx": "1.23.2"}
ORT: dict[str, Any] = {"step": "optimize", "versions": ORT_VERSIONS, "device": {}}
OV: dict[str, Any] = {"step": "openvino-ir", "device": {"cpu": "Example CPU", "machine": "x86_64"},
      "versions": {"openvino": "2026.4.1", "nncf": "3.4.0", "onnxruntime": "onnxruntime 1.31.1"}}
# The tests' images pip-install from the package index this machine reaches, through its trust store.
HOST_CA = next(p for p in (ssl.get_default_verify_paths().cafile, "/etc/ssl/certs/ca-certificates.crt")
               if p and Path(p).is_file())
BLOCK_DOCKER = """
import sys, importlib.abc
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "docker":
            raise ImportError("blocked: " + name)
sys.meta_path.insert(0, Block())
from gpux.cli.main import main
try:
    main(sys.argv[1:])
finally:
    print("DOCKER_LOADED=" + str("docker" in sys.modules), file=sys.stderr)
"""


def _project(root: Path, yml: str = MLP_YML.format(name="pkg-mlp")) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    make_mlp(root / "model.onnx")
    (root / "gpux.yml").write_text(yml)
    return root


def _plan(project_dir: Path, provider: str, parts: list[dict[str, Any]], **kw: Any) -> Any:
    plan = plan_image(load_config(project_dir / "gpux.yml"), provider, parts, **kw)
    plan.artifacts = [project_dir / ".gpux" / "pkg-mlp" / "onnx-fp32-basic-0123456789ab"]
    return plan


# -- the Dockerfile per provider ---------------------------------------------------------------------------------
def test_cpu_image_pins_the_runtime_its_artifacts_were_keyed_with(mlp_project: Path) -> None:
    plan = _plan(mlp_project, "cpu", [ORT])
    text = plan.dockerfile()
    assert plan.reuse and plan.requirements == ["onnxruntime==1.31.1", "onnx==1.23.2"]
    assert "FROM python:3.11-slim\n" in text
    assert "onnxruntime==1.31.1 onnx==1.23.2" in text and "/tmp/gpux-wheels/gpux_ml-" in text
    assert "COPY model/ /model/\n" in text and "COPY store/ /var/lib/gpux/store/\n" in text
    assert "ENV GPUX_PROVIDER=cpu GPUX_STORE=/var/lib/gpux/store GPUX_HOME=/var/lib/gpux/home\n" in text
    assert "RUN gpux build /model --provider cpu --strict\n" in text
    assert text.rstrip().endswith('ENTRYPOINT ["gpux", "run", "/model"]')
    assert "apt-get" not in text and "--gpus" not in plan.run_line()
    assert 'io.gpux.gpus="none"' in text
    assert "python3 -m venv --system-site-packages /opt/gpux" in text


def test_openvino_image_reuses_artifacts_keyed_to_this_cpu_with_a_note(mlp_project: Path) -> None:
    plan = _plan(mlp_project, "openvino", [OV])
    text = plan.dockerfile()
    assert plan.reuse
    assert plan.requirements == ["openvino==2026.4.1", "nncf==3.4.0", "onnxruntime==1.31.1"]
    assert "RUN gpux build /model --provider openvino --strict" in text and "COPY store/" in text
    assert any("Example CPU" in n and "rebuilds" in n for n in plan.notes)


@pytest.mark.parametrize("provider", ["cuda", "tensorrt"])
def test_nvidia_images_request_gpus_and_build_their_own_artifacts(mlp_project: Path, provider: str) -> None:
    plan = _plan(mlp_project, provider, [ORT])
    text = plan.dockerfile()
    assert f"FROM {CUDA_BASE}\n" in text
    assert "apt-get install -y --no-install-recommends python3 python3-venv" in text
    assert "onnxruntime-gpu" in plan.requirements and "onnx==1.23.2" in plan.requirements
    assert not any(r.startswith("onnxruntime==") for r in plan.requirements)
    assert ("tensorrt" in plan.requirements) == (provider == "tensorrt")
    # the host artifacts name onnxruntime, the image runs onnxruntime-gpu: their keys cannot match there
    assert not plan.reuse and "COPY store/" not in text
    assert any("onnxruntime-gpu" in n for n in plan.notes)
    assert "RUN GPUX_PROBE_DEVICES=0 gpux build /model --provider cuda --strict" in text
    assert f"ENV GPUX_PROVIDER={provider} " in text and 'io.gpux.gpus="all"' in text
    assert plan.run_line().startswith("docker run --rm --gpus all ")
    assert IMAGES[provider].gpus


def test_rocm_needs_a_base_image_and_passes_its_devices(mlp_project: Path) -> None:
    with pytest.raises(UsageError, match="need a base image"):
        _plan(mlp_project, "rocm", [ORT])
    plan = _plan(mlp_project, "rocm", [ORT], base_image="example/onnxruntime-rocm:1")
    assert "FROM example/onnxruntime-rocm:1" in plan.dockerfile()
    assert "--device /dev/kfd --device /dev/dri" in plan.run_line()


def test_base_image_and_packages_from_gpux_yml_and_the_command_line(tmp_path: Path) -> None:
    yml = MLP_YML.format(name="pkg-mlp") + ("package:\n  base_image: example/python:3.12\n"
                                            "  packages: [pillow, 'onnx==1.23.2']\n  system_packages: [libgomp1]\n")
    root = _project(tmp_path, yml)
    plan = _plan(root, "cpu", [ORT])
    text = plan.dockerfile()
    assert "FROM example/python:3.12\n" in text and plan.reuse
    assert plan.requirements == ["onnxruntime==1.31.1", "pillow", "onnx==1.23.2"]
    assert "apt-get install -y --no-install-recommends libgomp1" in text
    assert "FROM other/base:1\n" in _plan(root, "cpu", [ORT], base_image="other/base:1").dockerfile()


def test_pins_follow_the_cache_key_versions() -> None:
    reqs, misses = pin_requirements(["onnxruntime"], ORT_VERSIONS, always=["onnx>=1.16"])
    assert reqs == ["onnxruntime==1.31.1", "onnx==1.23.2"] and misses == []
    reqs, misses = pin_requirements(["onnxruntime-gpu"], ORT_VERSIONS, always=["onnx>=1.16"])
    assert reqs == ["onnxruntime-gpu", "onnx==1.23.2"]
    assert misses == ["the artifacts were built with onnxruntime 1.31.1; the image has onnxruntime-gpu"]
    _, misses = pin_requirements(["openvino", "nncf"], {"openvino": "2026.4.1", "nncf": None})
    assert misses == ["nncf is not installed here but the image installs it"]
    _, misses = pin_requirements(["onnxruntime>=1.20"], ORT_VERSIONS, always=["onnx"])
    assert misses and "onnxruntime>=1.20" in misses[0]


def test_provider_choice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _project(tmp_path, MLP_YML.format(name="pkg-mlp").replace("backend: cpu", "backend: auto"))
    project = load_config(root / "gpux.yml")
    assert choose_provider(project, None) == "cpu"  # auto means the portable image
    monkeypatch.setenv("GPUX_PROVIDER", "openvino")
    assert choose_provider(project, None) == "openvino"
    assert choose_provider(project, "cuda") == "cuda"
    monkeypatch.delenv("GPUX_PROVIDER")
    only_ov = _project(tmp_path / "ov", MLP_YML.format(name="ov").replace("backend: cpu", "supported: [openvino]"))
    assert choose_provider(load_config(only_ov / "gpux.yml"), None) == "openvino"
    for bad, msg in (("coreml", "macOS only"), ("directml", "Windows"), ("cpu,cuda", "one provider")):
        with pytest.raises(UsageError, match=msg):
            choose_provider(project, bad)


# -- the build context (no engine) -------------------------------------------------------------------------------
def test_a_ca_bundle_is_taken_only_when_asked_and_must_exist(mlp_project: Path, tmp_path: Path) -> None:
    pem = mlp_project / "corp-ca.pem"
    pem.write_text(Path(HOST_CA).read_text())
    yml = mlp_project / "gpux.yml"
    yml.write_text(yml.read_text() + "package:\n  ca_bundle: corp-ca.pem\n")
    r = gpux("package", str(mlp_project), "--dockerfile-only", str(tmp_path / "ctx"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "ctx" / "gpux-ca.crt").read_text() == pem.read_text()
    r = gpux("package", str(mlp_project), "--dockerfile-only", str(tmp_path / "ctx2"), "--ca-bundle", "nope.pem")
    assert r.returncode == 2 and "--ca-bundle: nope.pem is not a file" in r.stderr


def test_dockerfile_only_writes_a_complete_context(mlp_project: Path, tmp_path: Path) -> None:
    out = tmp_path / "ctx"
    r = gpux("package", str(mlp_project), "--provider", "cpu", "--dockerfile-only", str(out), "--json",
             "--ca-bundle", HOST_CA, env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["tag"] == "gpux/tiny-mlp:1.0.0-cpu" and doc["reuse_artifacts"] and doc["context"] == str(out)
    assert doc["build"].startswith("docker build --network host -t gpux/tiny-mlp:1.0.0-cpu ")
    [art] = doc["artifacts"]
    assert (out / "store" / "tiny-mlp" / art / "manifest.json").is_file()
    assert (out / "store" / "tiny-mlp" / art / "model.onnx").is_file()
    assert (out / "model" / "model.onnx").read_bytes() == (mlp_project / "model.onnx").read_bytes()
    assert (out / "model" / "gpux.yml").read_text() == (mlp_project / "gpux.yml").read_text()
    assert load_config(out / "model" / "gpux.yml").name == "tiny-mlp"
    assert (out / "gpux-ca.crt").is_file() and "COPY gpux-ca.crt /etc/gpux/ca.crt" in (out / "Dockerfile").read_text()
    # written again into the same folder: replaced, not refused; without --ca-bundle no CA goes in
    assert gpux("package", str(mlp_project), "--dockerfile-only", str(out)).returncode == 0
    assert not (out / "gpux-ca.crt").exists() and "ca.crt" not in (out / "Dockerfile").read_text()
    (out / "notes.txt").write_text("mine")
    r = gpux("package", str(mlp_project), "--dockerfile-only", str(out))
    assert r.returncode == 2 and "holds files gpux did not write" in r.stderr


def test_source_outside_the_project_is_packaged_beside_gpux_yml(tmp_path: Path) -> None:
    (tmp_path / "shared").mkdir()
    make_mlp(tmp_path / "shared" / "weights.onnx")
    write(tmp_path / "proj" / "labels.txt", "cat\ndog\nfox\nowl\n")
    yml = MLP_YML.format(name="moved").replace("source: model.onnx", "source: ../shared/weights.onnx") \
        .replace("labels: [cat, dog, fox, owl]", "labels: labels.txt")
    (tmp_path / "proj" / "gpux.yml").write_text("# a comment\n" + yml)
    out = tmp_path / "ctx"
    r = gpux("package", str(tmp_path / "proj"), "--dockerfile-only", str(out))
    assert r.returncode == 0, r.stderr
    assert (out / "model" / "weights.onnx").is_file() and (out / "model" / "labels.txt").is_file()
    packaged = load_config(out / "model" / "gpux.yml")
    assert packaged.config.model.source == "weights.onnx"
    assert packaged.source == (out / "model" / "weights.onnx").resolve()


def test_the_gpux_wheel_installs_offline(tmp_path: Path) -> None:
    wheel = write_wheel(tmp_path / "wheels")
    assert write_wheel(tmp_path / "again").read_bytes() == wheel.read_bytes()  # same bytes: same image layer
    names = zipfile.ZipFile(wheel).namelist()
    assert "gpux/cli/main.py" in names and "gpux/deploy/package.py" in names
    assert not any("__pycache__" in n for n in names)
    target = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target",
                        str(target), str(wheel)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, str(target / "bin" / "gpux"), "--version"], capture_output=True,
                       text=True, env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert r.returncode == 0 and "gpux" in r.stdout, r.stderr


# -- errors without an engine ------------------------------------------------------------------------------------
def test_missing_docker_package_fails_fast_with_the_install_hint(mlp_project: Path) -> None:
    r = subprocess.run([sys.executable, "-c", BLOCK_DOCKER, "package", str(mlp_project), "--provider", "cpu"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 4, r.stderr
    assert "docker is not installed" in r.stderr and "pip install 'gpux-ml[docker]'" in r.stderr
    assert not (mlp_project / ".gpux").exists()  # failed before building anything


def test_package_help_and_dockerfile_only_do_not_import_docker(mlp_project: Path, tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-c", BLOCK_DOCKER, "package", "--help"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and "--dockerfile-only" in r.stdout and "DOCKER_LOADED=False" in r.stderr
    r = subprocess.run([sys.executable, "-c", BLOCK_DOCKER, "package", str(mlp_project), "--dockerfile-only",
                        str(tmp_path / "ctx")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_no_engine_names_the_socket_it_tried(mlp_project: Path, tmp_path: Path) -> None:
    sock = tmp_path / "no-engine" / "docker.sock"
    r = gpux("package", str(mlp_project), "--provider", "cpu", env={"DOCKER_HOST": f"unix://{sock}"})
    assert r.returncode == 4
    [line] = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert f"no Docker engine answers at unix://{sock}" in line and "DOCKER_HOST" in line


def test_refused_provider_is_a_usage_error(mlp_project: Path) -> None:
    r = gpux("package", str(mlp_project), "--provider", "coreml", "--dockerfile-only", str(mlp_project / "ctx"))
    assert r.returncode == 2 and "cannot package coreml: Core ML runs on macOS only" in r.stderr


def _say(request: pytest.FixtureRequest, line: str) -> None:
    """Print past pytest's capture: setup and packaging times belong in the test log, also under -q."""
    capman = request.config.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled() if capman else contextlib.nullcontext():
        print(f"\n{line}", flush=True)


# -- a real engine -----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    """dockerd for this module only (installed with apt if missing), with a local Python base image."""
    with contextlib.ExitStack() as stack:
        try:
            started = stack.enter_context(running_engine())
        except CannotRunEngine as exc:
            pytest.skip(f"this machine cannot run a Docker engine: {exc}")
        _say(request, started.summary())
        yield started


@pytest.mark.docker
def test_cpu_image_runs_the_model_like_the_host(engine: Engine, tmp_path: Path,
                                                request: pytest.FixtureRequest) -> None:
    project = _project(tmp_path / "proj")
    feeds = json.dumps({"x": [[0.1 * i - 0.3 for i in range(8)], [0.5] * 8]})
    host = gpux("run", str(project), "--provider", "cpu", "--input", feeds, "--json")
    assert host.returncode == 0, host.stderr
    tag = "gpux-test/pkg-mlp:cpu"
    started = time.perf_counter()
    r = gpux("package", str(project), "--provider", "cpu", "--tag", tag, "--base-image", engine.base_image,
             "--ca-bundle", HOST_CA,
             "--run", shlex.join(["--input", feeds, "--json"]), "--json", env=engine.env, timeout=600)
    seconds = time.perf_counter() - started
    assert r.returncode == 0, r.stderr[-4000:]
    doc = json.loads(r.stdout)
    assert doc["tag"] == tag and doc["reuse_artifacts"] and doc["image_id"].startswith("sha256:")
    # the image's own `gpux build` found the packaged artifacts: their cache keys match inside the image
    assert "Step" in r.stderr and "onnx-fp32-basic: cached" in r.stderr
    run = doc["run_result"]
    assert run["exit_code"] == 0, run["stderr"]
    inside, outside = json.loads(run["stdout"]), json.loads(host.stdout)
    assert inside["provider"] == "cpu" and inside["runs_on"] == "CPUExecutionProvider"
    assert inside["outputs"]["probs"]["shape"] == outside["outputs"]["probs"]["shape"] == [2, 4]
    import numpy as np

    np.testing.assert_allclose(inside["outputs"]["probs"]["data"], outside["outputs"]["probs"]["data"],
                               rtol=1e-6, atol=1e-7)
    client = engine.client()
    try:
        rebuilt = run_image(client, tag, ["build", "/model", "--json"], entrypoint=["gpux"])
        assert rebuilt.exit_code == 0, rebuilt.stderr
        assert [t["cached"] for t in json.loads(rebuilt.stdout)["targets"]] == [True]
        bench = run_image(client, tag, ["--benchmark", "--runs", "20", "--duration", "0.1", "--json"])
        assert bench.exit_code == 0, bench.stderr
        json.loads(bench.stdout)
    finally:
        client.close()
    _say(request, f"gpux package (cpu image, pip install from PyPI) built and ran it in {seconds:.1f}s")


@pytest.mark.docker
def test_failing_build_step_is_named_with_its_last_log_lines(engine: Engine, mlp_project: Path) -> None:
    client = engine.client()
    try:
        dockerfile = f"FROM {engine.base_image}\nRUN rm -f /usr/bin/python3*\n"
        client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag="gpux-test/no-python:1", rm=True,
                            network_mode="none")
    finally:
        client.close()
    r = gpux("package", str(mlp_project), "--provider", "cpu", "--tag", "gpux-test/broken:1", "--base-image",
             "gpux-test/no-python:1", env=engine.env, timeout=300)
    assert r.returncode == 1, r.stderr
    errors = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and "image build failed at Step" in errors[0] and "RUN python3 -c" in errors[0]
    assert "python3: not found" in r.stderr.split(errors[0], 1)[1]


@pytest.mark.docker
def test_missing_base_image_with_no_registry_is_unavailable(engine: Engine, mlp_project: Path) -> None:
    missing = "127.0.0.1:9/gpux-missing:1"  # a registry address on this machine where nothing listens
    r = gpux("package", str(mlp_project), "--provider", "cpu", "--base-image", missing, env=engine.env)
    assert r.returncode == 4, r.stderr
    assert f"base image {missing} is not on the engine at {engine.host} and pulling it failed" in r.stderr


@pytest.mark.docker
def test_gpu_request_on_an_engine_without_gpu_runtime(engine: Engine) -> None:
    client = engine.client()
    try:
        with pytest.raises(EngineUnavailable, match="has no GPU runtime"):
            run_image(client, engine.base_image, ["true"], gpus=True)
        assert run_image(client, engine.base_image, ["true"]).exit_code == 0
    finally:
        client.close()


def test_base_image_per_provider_wins_over_the_global_one(tmp_path: Path) -> None:
    make_mlp(tmp_path / "model.onnx")
    write(tmp_path / "gpux.yml", MLP_YML.format(name="bases") +
          "package:\n  base_image: mine/any:1\n  base_images: {cuda: mine/cuda:12}\n")
    project = load_config(tmp_path)
    assert plan_image(project, "cuda", []).base_image == "mine/cuda:12"
    assert plan_image(project, "cpu", []).base_image == "mine/any:1"


def test_a_context_folder_that_cannot_be_made_is_one_line(mlp_project: Path, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder", encoding="utf-8")
    r = gpux("package", str(mlp_project), "--dockerfile-only", str(tmp_path / "file" / "ctx"))
    assert r.returncode == 2 and "cannot create the folder" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert "pass an empty or new folder" in r.stderr
