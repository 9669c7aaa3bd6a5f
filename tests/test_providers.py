"""The provider registry: order, exact EP strings, probes that never raise, third-party registration."""

from __future__ import annotations

from importlib import metadata

import pytest

from gpux import providers
from gpux.providers import BUILTIN_ROWS, Availability, Provider, probe

PLUGIN = Provider(name="npu-x", runtime="onnxruntime", ep="NpuXExecutionProvider", extra="npu-x", platforms=("linux",),
                  hardware="NPU-X card")


def test_registry_order_and_exact_ep_strings() -> None:
    assert list(BUILTIN_ROWS) == ["tensorrt", "cuda", "rocm", "coreml", "mps", "directml", "openvino", "cpu"]
    assert {n: p.ep for n, p in BUILTIN_ROWS.items()} == {
        "tensorrt": "TensorrtExecutionProvider", "cuda": "CUDAExecutionProvider",
        "rocm": "MIGraphXExecutionProvider", "coreml": "CoreMLExecutionProvider",
        "mps": None, "directml": "DmlExecutionProvider", "openvino": "OpenVINOExecutionProvider",
        "cpu": "CPUExecutionProvider"}


@pytest.mark.parametrize("name", list(BUILTIN_ROWS))
def test_probe_answers_with_a_status_and_a_fix(name: str) -> None:
    a = probe(name)
    assert a.status in ("ok", "not installed", "import failed", "no device")
    assert a.reason
    if not a.ok:
        assert a.fix, f"{name}: a failed probe names a fix"


def test_probe_never_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom() -> str:
        raise RuntimeError("driver exploded")
    broken = Provider(name="cuda", runtime="onnxruntime", ep="CUDAExecutionProvider", extra="cuda",
                      platforms=("linux",), device_problem=boom, hardware="GPU", in_every_build=True)
    monkeypatch.setitem(BUILTIN_ROWS, "cuda", broken)
    probe.cache_clear()
    try:
        a = probe("cuda")
    finally:
        probe.cache_clear()
    assert isinstance(a, Availability) and a.status == "import failed" and "driver exploded" in a.reason


def test_third_party_providers_register_through_entry_points(monkeypatch: pytest.MonkeyPatch) -> None:
    ep = metadata.EntryPoint("npu-x", "tests.test_providers:PLUGIN", providers.ENTRY_POINT_GROUP)
    monkeypatch.setattr(metadata, "entry_points",
                        lambda group: [ep] if group == providers.ENTRY_POINT_GROUP else [])
    providers._plugins.cache_clear()
    probe.cache_clear()
    try:
        assert providers.plugin_providers() == {"npu-x": PLUGIN}
        a = probe("npu-x")
        assert a.provider == "npu-x" and a.status == "not installed" and "NpuXExecutionProvider" in a.reason
    finally:
        providers._plugins.cache_clear()
        probe.cache_clear()


def test_each_row_and_onnx_runtime_name_the_same_execution_providers() -> None:
    from gpux.runtimes.onnxruntime_options import EP_CHOICES, ort_ep_name

    for name, row in BUILTIN_ROWS.items():
        if row.ep is None:  # no ONNX Runtime EP runs it (mps)
            continue
        assert ort_ep_name(name) == row.ep, name  # the EP its default options open
        assert set(row.also_accepted) <= {row.ep, *EP_CHOICES.values()}, name


def test_a_plugin_row_is_selectable_like_a_built_in_one(monkeypatch: pytest.MonkeyPatch, mlp_project) -> None:
    from gpux.config.load import load_config
    from gpux.plan.select import select

    ep = metadata.EntryPoint("npu-x", "tests.test_providers:PLUGIN", providers.ENTRY_POINT_GROUP)
    monkeypatch.setattr(metadata, "entry_points",
                        lambda group: [ep] if group == providers.ENTRY_POINT_GROUP else [])
    providers._plugins.cache_clear()
    try:
        chain = select(load_config(mlp_project / "gpux.yml"), "npu-x").chain
    finally:
        providers._plugins.cache_clear()
    assert chain == ("npu-x", "cpu")  # its fallback, then cpu, like any explicit request


def test_a_plugin_that_does_not_load_is_said_where_its_name_is_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpux.errors import UsageError
    from gpux.plan.select import parse_request

    ep = metadata.EntryPoint("npu-y", "gpux_npu_y_missing:ROW", providers.ENTRY_POINT_GROUP)
    monkeypatch.setattr(metadata, "entry_points",
                        lambda group: [ep] if group == providers.ENTRY_POINT_GROUP else [])
    providers._plugins.cache_clear()
    try:
        assert providers.plugin_providers() == {}
        assert "ModuleNotFoundError" in providers.broken_plugin("npu-y") and providers.broken_plugin("cpu") == ""
        with pytest.raises(UsageError, match="unknown provider 'npu-y'; its plugin is installed but does not load: "
                                             "gpux_npu_y_missing:ROW: ModuleNotFoundError"):
            parse_request("npu-y", "--provider")
    finally:
        providers._plugins.cache_clear()
