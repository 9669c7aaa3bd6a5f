"""Shared fixtures: tiny ONNX models generated with onnx.helper, projects in tmp folders, a CLI runner."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from gpux.deploy.ray_launch import SERVE_WAITS

ROOT = Path(__file__).resolve().parents[1]

# Ray reads these once, when it is first imported: whichever test imports it first decides for the whole run. Every
# Ray here keeps to loopback (its node IP is 127.0.0.1, not this machine's outward address) and sends no usage stats.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# The clusters the tests start (ray.cluster_utils, a local ray.init) inherit what a Ray that `gpux deploy ray` starts
# is given: time for Serve's HTTP proxy to start and answer its health checks on a starved machine.
for _name, _value in SERVE_WAITS.items():
    os.environ.setdefault(_name, _value)


def make_mlp(path: Path, features: int = 8, hidden: int = 16, classes: int = 4, seed: int = 0) -> Path:
    """x float32 [batch, features] -> probs float32 [batch, classes]."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    w1 = numpy_helper.from_array((rng.standard_normal((features, hidden)) * 0.5).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(hidden).astype(np.float32) * 0.1, "b1")
    w2 = numpy_helper.from_array((rng.standard_normal((hidden, classes)) * 0.5).astype(np.float32), "w2")
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"]),
        helper.make_node("Add", ["h0", "b1"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h2"]),
        helper.make_node("MatMul", ["h2", "w2"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", features])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", classes])],
        [w1, b1, w2],
    )
    model = helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path))
    return path


def make_two_inputs(path: Path) -> Path:
    """ids int64 [batch, seq] + scale float32 [batch, 1] -> out float32 [batch, 4]."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    emb = numpy_helper.from_array(np.arange(40, dtype=np.float32).reshape(10, 4) / 10, "emb")
    nodes = [
        helper.make_node("Gather", ["emb", "ids"], ["g"]),
        helper.make_node("ReduceMean", ["g"], ["m"], axes=[1], keepdims=0),
        helper.make_node("Mul", ["m", "scale"], ["out"]),
    ]
    graph = helper.make_graph(
        nodes, "two",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"]),
         helper.make_tensor_value_info("scale", TensorProto.FLOAT, ["batch", 1])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", 4])],
        [emb],
    )
    model = helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path))
    return path


MLP_YML = """\
name: {name}
version: 1.0.0
model:
  source: model.onnx
inputs:
  x: {{dtype: float32, shape: [batch, 8]}}
outputs:
  probs: {{dtype: float32, shape: [batch, 4], labels: [cat, dog, fox, owl]}}
runtime:
  backend: cpu
"""


@pytest.fixture
def mlp_project(tmp_path: Path) -> Path:
    make_mlp(tmp_path / "model.onnx")
    (tmp_path / "gpux.yml").write_text(MLP_YML.format(name="tiny-mlp"))
    return tmp_path


WORKSPACE_EXAMPLE = ROOT / "examples" / "detect_classify"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """The detect_classify example copied (configs only) with its two models generated."""
    import shutil

    sys.path.insert(0, str(WORKSPACE_EXAMPLE))
    try:
        import make_models
    finally:
        sys.path.remove(str(WORKSPACE_EXAMPLE))
    out = tmp_path / "detect_classify"
    for rel in ("gpux.workspace.yml", "detector/gpux.yml", "classifier/gpux.yml"):
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(WORKSPACE_EXAMPLE / rel, out / rel)
    make_models.main(out)
    return out


@pytest.fixture(scope="session", autouse=True)
def built_once(tmp_path_factory: pytest.TempPathFactory) -> None:
    """What the examples' make_model.py export for the tests is made once per session, here (tests/trained.py)."""
    from tests import trained

    if os.environ.get("PYTEST_XDIST_WORKER"):  # the run's workers share one folder (their base temps' parent)
        trained.BUILT = tmp_path_factory.getbasetemp().parent / "built-once"
        trained.BUILT.mkdir(exist_ok=True)
    else:
        trained.BUILT = tmp_path_factory.mktemp("built-once")


@pytest.fixture(autouse=True)
def isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the name index and env overrides out of the user's machine."""
    monkeypatch.setenv("GPUX_HOME", str(tmp_path_factory.mktemp("home")))
    for var in ("GPUX_PROVIDER", "GPUX_STORE", "GPUX_DEBUG"):
        monkeypatch.delenv(var, raising=False)


def gpux(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
         timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a subprocess (the timeout guards against a hang, not a speed: a busy machine is slow)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "gpux", *args], cwd=cwd, env=full_env, text=True,
                          capture_output=True, timeout=timeout)


def rewrite_in_place(path: Path, data: bytes) -> None:
    """Overwrite `path` with `data` of the same size in place (the same inode) and set its mtime back, as `touch -r`,
    `cp -p` or a fixed build timestamp leave a retrained model of the same architecture: only the ctime tells."""
    before = path.stat()
    assert len(data) == before.st_size, "the rewrite must keep the size"
    with path.open("r+b") as f:
        f.write(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


# `make test-fast` (pytest -m fast): modules whose tests run in process in seconds, the rule checks among them; run
# before every commit. A module joins when all of it runs in a few seconds on a quiet machine (its slow tests, if
# any, stay out); everything else runs in `make test`.
FAST = frozenset({
    "test_bench", "test_config", "test_contracts", "test_element_types", "test_lazy_imports", "test_layers",
    "test_legacy", "test_options", "test_providers", "test_read_once", "test_registry", "test_run_hot_path",
    "test_runtime_contract", "test_schema", "test_serve_access", "test_serve_batching", "test_serve_codec",
    "test_serve_grpc", "test_serve_stream", "test_shapes", "test_state", "test_toy_provider",
})


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """With `-m fast` alone, the other test modules are not even imported (collecting them all takes longer than
    running the fast ones)."""
    if config.option.markexpr == "fast" and collection_path.name.startswith("test_") \
            and collection_path.suffix == ".py" and collection_path.stem not in FAST:
        return True
    return None


# `make test` runs on three pytest-xdist workers (`-n 3`), scheduled by module (pytest_xdist_make_scheduler below):
# each module is one unit of work (its module fixtures built once), and modules that share a machine-wide resource
# are one unit together (one Ray cluster, one Docker daemon at a time).
SHARED = {"test_deploy_ray": "ray", "test_ray_batch": "ray", "test_package": "docker", "test_serve_package": "docker"}
# The longest units go out first (a unit started last on one worker is what the other waits for), as a whole run's
# `--durations` ranked them.
FIRST = ("test_answers_outputs", "ray", "docker", "test_tune_mixed", "test_serve_answers", "test_serve_kserve_sdk",
         "test_tune", "test_readme", "test_torch_runtime", "test_answers", "test_answer_agreement")


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0].rsplit("/", 1)[-1].removesuffix(".py")


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its module's name, or the SHARED group it is in."""
    module = module_of(nodeid)
    return SHARED.get(module, module)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's scope scheduling with unit_of as the scope (its own `--dist loadgroup` cannot rename node ids on
    pytest 9)."""
    from xdist.scheduler import LoadScopeScheduling

    class ByUnit(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    return ByUnit(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests of the FAST modules `fast` (not those marked slow or docker); the longest units first (each
    module's tests keep their order)."""
    for item in items:
        if module_of(item.nodeid) in FAST and not any(item.get_closest_marker(m) for m in ("slow", "docker")):
            item.add_marker(pytest.mark.fast)
    rank = {unit: i for i, unit in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(unit_of(item.nodeid), len(FIRST)))


REQUIRE_ENV = "GPUX_REQUIRE_PROVIDERS"


def pytest_runtest_setup(item: pytest.Item) -> None:
    """`@pytest.mark.hardware("cuda")` (`"torch:cuda"`: PyTorch's own device): skip with the probe's reason where
    the provider is not usable here, fail instead when GPUX_REQUIRE_PROVIDERS names it (a machine that should
    have it)."""
    for mark in item.iter_markers("hardware"):
        from gpux.providers import probe, probe_torch

        provider = mark.args[0]
        avail = probe_torch(provider[6:]) if provider.startswith("torch:") else probe(provider)
        if avail.ok:
            continue
        required = {p.strip() for p in os.environ.get(REQUIRE_ENV, "").split(",") if p.strip()}
        message = f"{provider} not usable here: {avail.status}: {avail.reason}"
        if provider in required or "all" in required:
            pytest.fail(f"{message} ({REQUIRE_ENV} requires it)", pytrace=False)
        pytest.skip(message)
