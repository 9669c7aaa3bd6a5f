"""Earlier-format gpux.yml files load as v1 with located deprecation warnings, or fail saying what to write."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from gpux.config import migrate as legacy
from gpux.config.load import Project, load_config
from gpux.errors import ConfigError
from tests.conftest import gpux, make_two_inputs, write

# The quick-start file of the earlier gpux: inputs as a mapping with `type:`, runtime.gpu.
QUICK_START = """\
name: sentiment-analysis
version: 1.0.0

model:
  source: ./model.onnx
  format: onnx

inputs:
  text:
    type: string
    max_length: 512
    required: true

outputs:
  sentiment:
    type: float32
    shape: [1, 2]
    labels: [negative, positive]

runtime:
  gpu:
    memory: 2GB
    backend: auto
"""

# Every block the earlier configuration reference documents: list inputs/outputs, serving, preprocessing.
FULL = """\
name: classifier
description: digits
model:
  source: model.onnx
  version: 2.10
inputs:
  - name: pixels
    type: float32
    shape: [1, 64]
    required: true
    description: flattened 8x8 image
outputs:
  - name: probs
    type: float32
    shape: [1, 10]
    labels: [zero, one, two, three, four, five, six, seven, eight, nine]
runtime:
  gpu:
    backend: cuda
    memory: 4GB
  timeout: 30
  batch_size: 8
  enable_profiling: false
serving:
  port: 8080
  host: 0.0.0.0
  batch_size: 1
  timeout: 5
  max_workers: 4
preprocessing:
  resize: [8, 8]
  normalize: imagenet
metadata:
  author: someone
"""


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "model.onnx").write_bytes(b"placeholder")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def load(text: str) -> Project:
    Path("gpux.yml").write_text(text)
    return load_config("gpux.yml")


def errors(text: str) -> list[str]:
    Path("gpux.yml").write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config("gpux.yml")
    return caught.value.lines()


def test_quick_start_file_loads_mapped_to_v1(folder: Path) -> None:
    project = load(QUICK_START)
    cfg = project.config
    assert cfg.runtime.backend == ("auto",)
    assert cfg.providers.cuda.memory == 2_000_000_000
    assert cfg.inputs is not None and cfg.inputs["text"].dtype == "string"
    assert cfg.outputs is not None and cfg.outputs["sentiment"].shape == (1, 2)
    assert cfg.outputs["sentiment"].labels == ["negative", "positive"]
    assert list(project.warnings) == [
        "gpux.yml:10:5 inputs.text.type: deprecated: write dtype: string instead of type:",
        "gpux.yml:11:5 inputs.text.max_length: ignored: gpux.yml v1 declares tensors; give the length in shape: "
        "instead (e.g. [batch, 512]), then remove it",
        "gpux.yml:12:5 inputs.text.required: ignored: every model input is required; remove it",
        "gpux.yml:16:5 outputs.sentiment.type: deprecated: write dtype: float32 instead of type:",
        "gpux.yml:22:5 runtime.gpu.memory: deprecated: write providers.cuda.memory: 2GB instead",
        "gpux.yml:23:5 runtime.gpu.backend: deprecated: write runtime.backend: auto instead",
    ]


def test_every_documented_block_loads_or_is_dropped_with_a_note(folder: Path) -> None:
    project = load(FULL)
    cfg = project.config
    assert cfg.version == "2.10"  # model.version moved up, as written (not the float 2.1)
    assert cfg.runtime.backend == ("cuda",)
    assert cfg.providers.cuda.memory == 4_000_000_000
    assert cfg.benchmark.batch == 8
    assert cfg.inputs is not None and list(cfg.inputs) == ["pixels"]
    assert cfg.inputs["pixels"].shape == (1, 64) and cfg.inputs["pixels"].description == "flattened 8x8 image"
    assert cfg.outputs is not None and cfg.outputs["probs"].labels is not None
    assert len(cfg.outputs["probs"].labels) == 10
    assert list(project.warnings) == [
        "gpux.yml:5:3 model.version: deprecated: write version: 2.10 at the top level instead",
        "gpux.yml:6:1 inputs: deprecated list form: write inputs as a mapping of name -> spec, e.g. "
        "pixels: {dtype: float32, shape: [1, 64]}",
        "gpux.yml:8:5 inputs.0.type: deprecated: write dtype: float32 instead of type:",
        "gpux.yml:10:5 inputs.0.required: ignored: every model input is required; remove it",
        "gpux.yml:12:1 outputs: deprecated list form: write outputs as a mapping of name -> spec, e.g. "
        "probs: {dtype: float32, shape: [1, 10]}",
        "gpux.yml:14:5 outputs.0.type: deprecated: write dtype: float32 instead of type:",
        "gpux.yml:19:5 runtime.gpu.backend: deprecated: write runtime.backend: cuda instead",
        "gpux.yml:20:5 runtime.gpu.memory: deprecated: write providers.cuda.memory: 4GB instead",
        "gpux.yml:21:3 runtime.timeout: ignored: gpux.yml v1 has no timeout; remove it",
        "gpux.yml:22:3 runtime.batch_size: deprecated: write benchmark.batch: 8 instead",
        "gpux.yml:23:3 runtime.enable_profiling: ignored: gpux.yml v1 has no enable_profiling; use "
        "`gpux run --benchmark`, then remove it",
        "gpux.yml:24:1 serving: ignored: gpux.yml v1 configures `gpux serve` in a serve: block (host, http_port, "
        "grpc_port, max_batch_size; docs/serve.md); move the settings there, then remove it",
        "gpux.yml:30:1 preprocessing: ignored: gpux.yml v1 declares image pre-processing per input "
        "(inputs.NAME.preprocess; docs/answers.md); move the settings there, then remove it",
        "gpux.yml:33:1 metadata: ignored: gpux.yml v1 has no metadata block; say what the model is in "
        "description:, then remove it",
    ]


# runtime.gpu as the earlier provider guide writes it for each platform
@pytest.mark.parametrize(("backend", "memory", "field", "limit"), [
    ("cuda", "4GB", "cuda", 4_000_000_000),
    ("tensorrt", "4GB", "cuda", 4_000_000_000),  # the CUDA arena TensorRT's unsupported nodes run in
    ("auto", "512MiB", "cuda", 512 * 2**20),
    ("rocm", "4GB", "rocm", 4_000_000_000),
    ("coreml", "2GB", None, None),
    ("openvino", "2GB", None, None),
    ("directml", "2GB", None, None),
])
def test_runtime_gpu_per_platform(folder: Path, backend: str, memory: str, field: str | None,
                                  limit: int | None) -> None:
    project = load(f"name: m\nmodel: {{source: model.onnx}}\nruntime:\n  gpu:\n    backend: {backend}\n"
                   f"    memory: {memory}\n")
    assert project.config.runtime.backend == (backend,)
    assert project.warnings[0] == f"gpux.yml:5:5 runtime.gpu.backend: deprecated: write runtime.backend: " \
                                  f"{backend} instead"
    if field is None:
        assert project.config.providers.cuda.memory is None
        assert project.warnings[1] == f"gpux.yml:6:5 runtime.gpu.memory: ignored: gpux.yml v1 has no memory " \
                                      f"limit for {backend}; remove it"
    else:
        assert getattr(project.config.providers, field).memory == limit
        assert project.warnings[1] == f"gpux.yml:6:5 runtime.gpu.memory: deprecated: write " \
                                      f"providers.{field}.memory: {memory} instead"


def test_moved_settings_join_existing_v1_blocks(folder: Path) -> None:
    cfg = load("name: m\nmodel: {source: model.onnx}\nruntime:\n  gpu: {memory: 1GB}\n  batch_size: 4\n"
               "providers:\n  cuda: {device_id: 1}\nbenchmark: {runs: 5}\n").config
    assert (cfg.providers.cuda.device_id, cfg.providers.cuda.memory) == (1, 1_000_000_000)
    assert (cfg.benchmark.runs, cfg.benchmark.batch) == (5, 4)
    assert cfg.runtime.backend == ("auto",)


@pytest.mark.parametrize(("text", "expected"), [
    pytest.param("runtime:\n  gpu:\n    backend: cuda\n    memroy: 4GB\n",
                 ["gpux.yml:6:5 runtime.gpu.memroy: unknown field (did you mean 'memory'?) in the earlier "
                  "runtime.gpu block (it takes backend and memory)"], id="unknown-key-in-gpu"),
    pytest.param("runtime:\n  gpu: {backend: cuda, device: 0, vram: 8GB}\n",
                 ["gpux.yml:4:24 runtime.gpu.device: unknown field in the earlier runtime.gpu block (it takes "
                  "backend and memory)",
                  "gpux.yml:4:35 runtime.gpu.vram: unknown field in the earlier runtime.gpu block (it takes "
                  "backend and memory)"], id="several-unknown-keys-in-gpu"),
    pytest.param("runtime:\n  gpu: cuda\n",
                 ["gpux.yml:4:3 runtime.gpu: an earlier-format block that is not a mapping; write runtime.backend: "
                  "cuda (and providers.cuda.memory: SIZE for a memory limit) instead"], id="gpu-a-string"),
    pytest.param("runtime:\n  gpu: {backend: cdua}\n",
                 ["gpux.yml:4:18 runtime.gpu.backend: unknown provider 'cdua' (did you mean 'cuda'?); expected one "
                  "of tensorrt, cuda, rocm, coreml, mps, directml, openvino, cpu, auto"], id="gpu-backend-unknown"),
    pytest.param("runtime:\n  gpu: {memory: lots}\n",
                 ["gpux.yml:4:17 runtime.gpu.memory: expected a size such as 4GB, 512MiB or a number of bytes, "
                  "got 'lots'"], id="gpu-memory-bad"),
    pytest.param("runtime:\n  backend: cpu\n  gpu: {backend: cuda}\n",
                 ["gpux.yml:5:9 runtime.gpu.backend: runtime.backend is also given; remove this earlier-format "
                  "setting"], id="backend-given-twice"),
    pytest.param("runtime:\n  gpu: {memory: 4GB}\nproviders:\n  cuda: {memory: 2GB}\n",
                 ["gpux.yml:4:9 runtime.gpu.memory: providers.cuda.memory is also given; remove this "
                  "earlier-format setting"], id="memory-given-twice"),
    pytest.param("runtime:\n  batch_size: 8\nbenchmark: {batch: 4}\n",
                 ["gpux.yml:4:3 runtime.batch_size: benchmark.batch is also given; remove this earlier-format "
                  "setting"], id="batch-given-twice"),
    pytest.param("inputs:\n  - name: x\n    type: flaot32\n    shape: [1, -1]\n",
                 ["gpux.yml:5:11 inputs.0.type: unknown dtype 'flaot32' (did you mean 'float32'?); expected one of "
                  "float32, float16, bfloat16, float64, int8, int16, int32, int64, uint8, uint16, uint32, uint64, "
                  "bool, string",
                  "gpux.yml:6:16 inputs.0.shape.1: dim 1 is -1: static dims are >= 1; name a dynamic dim instead "
                  "(e.g. batch)"], id="list-entry-problems-located-in-the-list"),
    pytest.param("inputs:\n  - name: x\n    type: float32\n  - name: x\n    type: int64\n  - type: int64\n",
                 ["gpux.yml:6:5 inputs.1.name: input 'x' is listed twice",
                  "gpux.yml:8:5 inputs.2: an entry of the earlier list form needs name:"], id="list-names"),
    pytest.param("inputs:\n  x: {type: float32, dtype: float32}\n",
                 ["gpux.yml:4:7 inputs.x.type: give dtype: only (type: is its earlier name)"], id="type-and-dtype"),
])
def test_earlier_format_that_cannot_be_mapped_is_rejected(folder: Path, text: str, expected: list[str]) -> None:
    assert errors("name: m\nmodel: {source: model.onnx}\n" + text) == expected


def test_v1_files_pass_through_untouched() -> None:
    data = {"name": "m", "model": {"source": "model.onnx"}, "inputs": {"x": {"dtype": "float32"}},
            "runtime": {"backend": "cpu"}, "providers": {"cuda": {"memory": "1GB"}}}
    before = copy.deepcopy(data)
    moved = legacy.migrate(data)
    assert moved.data == before and data == before
    assert (moved.notes, moved.errors, moved.aliases) == ([], [], {})


def test_migrate_leaves_its_input_alone() -> None:
    data = {"name": "m", "inputs": [{"name": "x", "type": "float32"}], "runtime": {"gpu": {"memory": "1GB"}}}
    before = copy.deepcopy(data)
    legacy.migrate(data)
    assert data == before


def test_model_check_locates_mismatches_in_the_list_form(tmp_path: Path) -> None:
    from gpux.model.io import load_checked

    make_two_inputs(tmp_path / "model.onnx")
    write(tmp_path / "gpux.yml", """\
        name: two
        model: {source: model.onnx}
        inputs:
          - name: ids
            type: int32
            shape: [batch, seq]
          - {name: scale, type: float32, shape: [batch, 1]}
        """)
    with pytest.raises(ConfigError) as caught:
        load_checked(load_config(tmp_path / "gpux.yml"), tmp_path / ".gpux")
    assert [str(p).removeprefix(f"{tmp_path}/") for p in caught.value.problems] == [
        "gpux.yml:5:11 inputs.0.type: declared int32 but the model has int64"]


def test_cli_validate_prints_the_warnings_and_exits_0(tmp_path: Path) -> None:
    (tmp_path / "model.onnx").write_bytes(b"placeholder")
    (tmp_path / "gpux.yml").write_text(QUICK_START)
    r = gpux("validate", "--no-model", "gpux.yml", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["ok: gpux.yml", "1 valid, 0 invalid"]
    warnings = [line for line in r.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 6
    assert warnings[-1] == "warning: gpux.yml:23:5 runtime.gpu.backend: deprecated: write runtime.backend: auto " \
                           "instead"
    r = gpux("validate", "--no-model", "--format", "github", "gpux.yml", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "::warning file=gpux.yml,line=22,col=5::runtime.gpu.memory: deprecated: write providers.cuda.memory: " \
           "2GB instead" in r.stdout.splitlines()
