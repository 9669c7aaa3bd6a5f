"""gpux.yml problems: every one reported at once, one line each, as FILE:LINE:COL field.path: message."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import pytest

from gpux.config.load import load_config
from gpux.errors import ConfigError, ExitCode
from tests.conftest import gpux

BASE = "name: m\nmodel: {source: model.onnx}\n"
PROVIDERS = "tensorrt, cuda, rocm, coreml, mps, directml, openvino, cpu"
DTYPES = "float32, float16, bfloat16, float64, int8, int16, int32, int64, uint8, uint16, uint32, uint64, bool, string"
V1_KEYS = "schema_version, name, version, description, model, inputs, outputs, shapes, runtime, providers, verify, " \
          "benchmark, package, serve, deploy"

# (id, gpux.yml text, every line the loader reports, in order)
INVALID: list[tuple[str, str, list[str]]] = [
    # YAML itself
    ("yaml-syntax", "name: [m\nmodel: {source: model.onnx}\n",
     ["gpux.yml:2:6: YAML syntax: expected ',' or ']', but got ':' (parsing a flow sequence started at line 1)"]),
    ("tab-indent", "name: m\nmodel:\n\tsource: model.onnx\n",
     ["gpux.yml:3:1: YAML syntax: tab character; indent with spaces"]),
    ("bad-indentation", "name: m\nmodel:\n  source: model.onnx\n format: onnx\n",
     ["gpux.yml:4:2: YAML syntax: this key is indented unlike the keys above it (parsing a block mapping started "
      "at line 1)"]),
    ("unclosed-brace", "name: m\nmodel: {source: model.onnx\n",
     ["gpux.yml:3:1: YAML syntax: expected ',' or '}', but got the end of the file (parsing a flow mapping started "
      "at line 2)"]),
    ("unquoted-special-character", "name: @m\nmodel: {source: model.onnx}\n",
     ["gpux.yml:1:7: YAML syntax: '@' cannot start a plain value; quote the value"]),
    ("python-tag", "name: !!python/object:os.system m\nmodel: {source: model.onnx}\n",
     ["gpux.yml:1:7: YAML: tag !!python/object:os.system is not allowed (gpux.yml is loaded safely: plain "
      "mappings, lists, strings and numbers only)"]),
    ("python-apply-tag", "name: m\nmodel: !!python/object/apply:os.system [echo hi]\n",
     ["gpux.yml:2:8: YAML: tag !!python/object/apply:os.system is not allowed (gpux.yml is loaded safely: plain "
      "mappings, lists, strings and numbers only)"]),
    ("custom-tag", BASE + "description: !include readme.md\n",
     ["gpux.yml:3:14: YAML: tag !include is not allowed (gpux.yml is loaded safely: plain mappings, lists, "
      "strings and numbers only)"]),
    ("two-documents", BASE + "---\nname: n\n",
     ["gpux.yml:3:1: YAML syntax: a second document ('---'); a gpux.yml holds one"]),
    ("duplicate-key", BASE + "name: n\nrutime: {}\n",
     ["gpux.yml:3:1 name: duplicate key (first at line 1); remove one",
      "gpux.yml:4:1 rutime: unknown field (did you mean 'runtime'?)"]),
    ("top-level-list", "- name: m\n  model: {source: model.onnx}\n",
     ["gpux.yml:1:1: expected a mapping of keys (name:, model:, ...), got a list"]),
    ("top-level-scalar", "resnet50\n",
     ["gpux.yml:1:1: expected a mapping of keys (name:, model:, ...), got 'resnet50'"]),
    ("empty-file", "",
     ["gpux.yml:1:1: no settings in this file; a gpux.yml needs at least name: and model: {source: ...}"]),
    ("comments-only", "# name: m\n# model: {source: model.onnx}\n",
     ["gpux.yml:1:1: no settings in this file; a gpux.yml needs at least name: and model: {source: ...}"]),
    # name, version, schema_version
    ("missing-name", "# a model\nmodel: {source: model.onnx}\n",
     ["gpux.yml:2:1 name: required field is missing: model name used by `gpux run NAME`"]),
    ("bad-name-chars", "name: my model\nmodel: {source: model.onnx}\n",
     ["gpux.yml:1:7 name: use letters, digits, '.', '_' or '-', starting with a letter or digit, got 'my model'"]),
    ("name-a-number", "name: 42\nmodel: {source: model.onnx}\n",
     ["gpux.yml:1:7 name: expected a string, got 42; quote it: '42'"]),
    ("name-empty", "name:\nmodel: {source: model.onnx}\n",
     ["gpux.yml:1:6 name: expected a string, got an empty value"]),
    ("schema-version-2", "schema_version: 2\n" + BASE,
     ["gpux.yml:1:17 schema_version: this gpux reads schema_version 1, got 2; a newer gpux may read this file"]),
    ("schema-version-string", "schema_version: '1'\n" + BASE,
     ["gpux.yml:1:17 schema_version: write schema_version: 1 (a number, not a string)"]),
    # model
    ("missing-source", "name: m\nmodel: {format: onnx}\n",
     ["gpux.yml:2:1 model.source: required field is missing: model file, relative to gpux.yml (ONNX, with "
      "external data beside it), or a hub id hf://ORG/NAME[@REVISION][/PATH] (docs/hub.md)"]),
    ("model-a-string", "name: m\nmodel: model.onnx\n",
     ["gpux.yml:2:8 model: expected a mapping such as {source: model.onnx}, got 'model.onnx'"]),
    ("model-format", "name: m\nmodel: {source: model.onnx, format: tflite}\n",
     ["gpux.yml:2:37 model.format: unknown format 'tflite'; expected one of onnx, torchscript, torch_export"]),
    # unknown keys and providers
    ("unknown-top-level-did-you-mean", "naem: m\nmodel: {source: model.onnx}\n",
     ["gpux.yml:1:1 naem: unknown field (did you mean 'name'?)"]),
    ("unknown-top-level-listing", BASE + "listen_port: 80\n",
     [f"gpux.yml:3:1 listen_port: unknown field; expected one of {V1_KEYS}"]),
    ("unknown-nested-key", BASE + "providers:\n  tensorrt:\n    precison: fp16\n",
     ["gpux.yml:5:5 providers.tensorrt.precison: unknown field (did you mean 'precision'?)"]),
    ("unknown-provider-block", BASE + "providers:\n  cdua: {memory: 4GB}\n",
     [f"gpux.yml:4:3 providers.cdua: unknown provider (did you mean 'cuda'?); expected one of {PROVIDERS}"]),
    # runtime
    ("unknown-backend", BASE + "runtime:\n  backend: tensorrtt\n",
     [f"gpux.yml:4:12 runtime.backend: unknown provider 'tensorrtt' (did you mean 'tensorrt'?); expected one of "
      f"{PROVIDERS}, auto"]),
    ("backend-wrong-case", BASE + "runtime:\n  backend: CUDA\n",
     [f"gpux.yml:4:12 runtime.backend: unknown provider 'CUDA' (did you mean 'cuda'?); expected one of "
      f"{PROVIDERS}, auto"]),
    ("backend-list-unknown", BASE + "runtime:\n  backend: [tensorrt, cuda, cpux]\n",
     [f"gpux.yml:4:29 runtime.backend.2: unknown provider 'cpux' (did you mean 'cpu'?); expected one of "
      f"{PROVIDERS}"]),
    ("backend-list-duplicate", BASE + "runtime:\n  backend:\n    - cuda\n    - cpu\n    - cuda\n",
     ["gpux.yml:7:7 runtime.backend.2: 'cuda' is listed twice"]),
    ("backend-list-auto", BASE + "runtime:\n  backend: [auto, cpu]\n",
     ["gpux.yml:4:13 runtime.backend.0: 'auto' stands alone (backend: auto); a list names providers to try "
      "in order"]),
    ("backend-empty-list", BASE + "runtime:\n  backend: []\n",
     ["gpux.yml:4:12 runtime.backend: expected 'auto', a provider name, or a non-empty list of provider names, "
      "got []"]),
    ("supported-unknown", BASE + "runtime:\n  supported: [cuda, opnvino]\n",
     [f"gpux.yml:4:21 runtime.supported.1: unknown provider 'opnvino' (did you mean 'openvino'?); expected one "
      f"of {PROVIDERS}"]),
    ("backend-not-supported", BASE + "runtime:\n  backend: [cuda, cpu]\n  supported: [cpu, openvino]\n",
     ["gpux.yml:4:13 runtime.backend.0: cuda is not in runtime.supported (cpu, openvino); add it there or leave "
      "it out of backend"]),
    ("backend-string-not-supported", BASE + "runtime:\n  backend: rocm\n  supported: [cpu]\n",
     ["gpux.yml:4:12 runtime.backend: rocm is not in runtime.supported (cpu); add it there or leave it out of "
      "backend"]),
    ("fallback-not-bool", BASE + "runtime:\n  fallback: maybe\n",
     ["gpux.yml:4:13 runtime.fallback: expected true or false, got 'maybe'"]),
    ("threads-negative", BASE + "runtime:\n  threads: {intra_op: -1}\n",
     ["gpux.yml:4:23 runtime.threads.intra_op: must be >= 0, got -1"]),
    ("threads-fraction", BASE + "runtime:\n  threads: {inter_op: 1.5}\n",
     ["gpux.yml:4:23 runtime.threads.inter_op: expected a whole number, got 1.5"]),
    ("runtime-a-string", BASE + "runtime: cuda\n",
     ["gpux.yml:3:10 runtime: expected a mapping, got 'cuda'"]),
    # inputs and outputs
    ("bad-dtype", BASE + "inputs:\n  x: {dtype: flaot32, shape: [1, 8]}\n",
     [f"gpux.yml:4:14 inputs.x.dtype: unknown dtype 'flaot32' (did you mean 'float32'?); expected one of {DTYPES}"]),
    ("dtype-other-tools-name", BASE + "inputs:\n  x: {dtype: fp16}\n",
     [f"gpux.yml:4:14 inputs.x.dtype: unknown dtype 'fp16' (did you mean 'float16'?); expected one of {DTYPES}"]),
    ("missing-dtype", BASE + "inputs:\n  x:\n    shape: [1, 8]\n",
     ["gpux.yml:4:3 inputs.x.dtype: required field is missing: element type, e.g. float32, int64"]),
    ("shape-not-a-list", BASE + "inputs:\n  x: {dtype: float32, shape: abc}\n",
     ["gpux.yml:4:30 inputs.x.shape: expected a list of ints or names, got 'abc'"]),
    ("shape-negative-dim", BASE + "inputs:\n  x:\n    dtype: float32\n    shape: [1, -8]\n",
     ["gpux.yml:6:16 inputs.x.shape.1: dim 1 is -8: static dims are >= 1; name a dynamic dim instead (e.g. "
      "batch)"]),
    ("shape-zero-dim", BASE + "inputs:\n  x:\n    dtype: float32\n    shape: [0, 8]\n",
     ["gpux.yml:6:13 inputs.x.shape.0: dim 0 is 0: static dims are >= 1; name a dynamic dim instead (e.g. "
      "batch)"]),
    ("shape-float-dim", BASE + "inputs:\n  x:\n    dtype: float32\n    shape: [batch, 8.5]\n",
     ["gpux.yml:6:20 inputs.x.shape.1: dim 1: expected an int >= 1 or a name such as batch, got 8.5"]),
    ("shape-bad-dim-name", BASE + "inputs:\n  x: {dtype: float32, shape: [batch-size, 8]}\n",
     ["gpux.yml:4:31 inputs.x.shape.0: dim 0: expected an int >= 1 or a name such as batch, got 'batch-size'"]),
    ("labels-wrong-type", BASE + "outputs:\n  y: {dtype: float32, labels: 5}\n",
     ["gpux.yml:4:31 outputs.y.labels: expected a list or a string, got 5"]),
    ("labels-item-not-a-string", BASE + "outputs:\n  y: {dtype: float32, labels: [cat, 7]}\n",
     ["gpux.yml:4:37 outputs.y.labels.1: expected a string, got 7; quote it: '7'"]),
    ("labels-file-missing", BASE + "outputs:\n  y:\n    dtype: float32\n    labels: classes.txt\n",
     ["gpux.yml:6:13 outputs.y.labels: labels file not found: classes.txt"]),
    ("range-one-number", BASE + "inputs:\n  ids: {dtype: int64, range: [1000]}\n",
     ["gpux.yml:4:30 inputs.ids.range: expected [low, high] (two numbers), got [1000]"]),
    ("range-reversed", BASE + "inputs:\n  ids: {dtype: int64, range: [10, 0]}\n",
     ["gpux.yml:4:30 inputs.ids.range: expected low < high, got [10, 0]"]),
    ("input-name-a-number", BASE + "inputs:\n  0: {dtype: float32}\n",
     ["gpux.yml:4:3 inputs.0: expected a string, got 0; quote it: '0'"]),
    ("inputs-list-of-names", BASE + "inputs: [x, y]\n",
     ["gpux.yml:3:9 inputs: expected a mapping of name -> {dtype, shape}, got ['x', 'y']"]),
    ("input-spec-a-string", BASE + "inputs:\n  x: float32\n",
     ["gpux.yml:4:6 inputs.x: expected a mapping such as {dtype: float32, shape: [batch, 3]}, got 'float32'"]),
    # verify, benchmark
    ("verify-tolerance-negative", BASE + "verify:\n  atol: -0.001\n",
     ["gpux.yml:4:9 verify.atol: must be >= 0.0, got -0.001"]),
    ("verify-data-missing", BASE + "verify: {data: samples.npz}\n",
     ["gpux.yml:3:16 verify.data: file not found: samples.npz"]),
    ("benchmark-runs-zero", BASE + "benchmark:\n  runs: 0\n",
     ["gpux.yml:4:9 benchmark.runs: must be >= 1, got 0"]),
    ("benchmark-shape-not-int", BASE + "benchmark:\n  shapes: {seq: long}\n",
     ["gpux.yml:4:17 benchmark.shapes.seq: expected an integer, got 'long'"]),
    # provider options
    ("openvino-device", BASE + "providers:\n  openvino: {device: TPU}\n",
     ["gpux.yml:4:22 providers.openvino.device: expected an OpenVINO device: CPU, GPU, GPU.0, NPU, AUTO, or a "
      "priority list such as AUTO:GPU,CPU (also HETERO:... and MULTI:...), got 'TPU'"]),
    ("openvino-hint", BASE + "providers:\n  openvino: {hint: fast}\n",
     ["gpux.yml:4:20 providers.openvino.hint: unknown hint 'fast'; expected one of latency, throughput, "
      "cumulative_throughput"]),
    ("openvino-streams", BASE + "providers:\n  openvino: {hint: throughput, streams: many}\n",
     ["gpux.yml:4:41 providers.openvino.streams: expected an integer or 'auto', got 'many'"]),
    ("openvino-layout", BASE + "providers:\n  openvino:\n    layout: {x: nchw}\n",
     ["gpux.yml:5:17 providers.openvino.layout.x: expected layout letters N, C, D, H, W, T or ? (e.g. NCHW), "
      "got 'nchw'"]),
    ("cpu-quantization-without-int8", BASE + "providers:\n  cpu:\n    precision: fp32\n    quantization: static\n",
     ["gpux.yml:6:5 providers.cpu: quantization is only valid with precision: int8"]),
    ("tensorrt-profile-order",
     BASE + "providers:\n  tensorrt:\n    profiles:\n      batch: {min: 8, opt: 4, max: 16}\n",
     ["gpux.yml:6:15 providers.tensorrt.profiles.batch: expected min <= opt <= max, got 8, 4, 16"]),
    ("shape-range-order", BASE + "shapes:\n  batch: {min: 4, opt: 2, max: 8}\n",
     ["gpux.yml:4:11 shapes.batch: expected min <= opt <= max, got 4, 2, 8"]),
    ("tensorrt-profile-name", BASE + "providers:\n  tensorrt:\n    profiles:\n      2d: {min: 1, opt: 1, max: 1}\n",
     ["gpux.yml:6:7 providers.tensorrt.profiles.2d: expected a dimension name: letters, digits and '_', not "
      "starting with a digit, got '2d'"]),
    ("cuda-memory-lots", BASE + "providers:\n  cuda:\n    memory: lots\n",
     ["gpux.yml:5:13 providers.cuda.memory: expected a size such as 4GB, 512MiB or a number of bytes, got 'lots'"]),
    ("cuda-graph-without-binding", BASE + "providers:\n  cuda: {io_binding: false, cuda_graph: true}\n",
     ["gpux.yml:4:29 providers.cuda: cuda_graph requires io_binding: true (CUDA graphs replay on bound buffers)"]),
    ("provider-block-empty", BASE + "providers:\n  cuda:\n",
     ["gpux.yml:4:8 providers.cuda: expected a mapping, got an empty value"]),
    # several problems in one file: all of them, ordered by line
    ("several-problems",
     "naem: m\nmodel: {source: model.onnx}\nruntime:\n  backend: cdua\nbenchmark:\n  runs: 0\n"
     "inputs:\n  x: {dtype: flaot32}\n",
     ["gpux.yml:1:1 naem: unknown field (did you mean 'name'?)",
      f"gpux.yml:4:12 runtime.backend: unknown provider 'cdua' (did you mean 'cuda'?); expected one of "
      f"{PROVIDERS}, auto",
      "gpux.yml:6:9 benchmark.runs: must be >= 1, got 0",
      f"gpux.yml:8:14 inputs.x.dtype: unknown dtype 'flaot32' (did you mean 'float32'?); expected one of {DTYPES}"]),
]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with a placeholder model file (loading never parses it), as the working directory."""
    (tmp_path / "model.onnx").write_bytes(b"placeholder")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def problems(text: str) -> list[str]:
    Path("gpux.yml").write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config("gpux.yml")
    return caught.value.lines()


@pytest.mark.parametrize(("text", "expected"), [pytest.param(t, e, id=i) for i, t, e in INVALID])
def test_invalid_config_reports_each_problem_on_its_line(project: Path, text: str, expected: list[str]) -> None:
    assert problems(text) == expected


def test_the_table_is_broad() -> None:
    assert len(INVALID) >= 30
    assert len({i for i, _, _ in INVALID}) == len(INVALID)


@pytest.mark.parametrize(("text", "_"), [pytest.param(t, e, id=i) for i, t, e in INVALID])
def test_messages_are_one_line_in_gpux_words(project: Path, text: str, _: list[str]) -> None:
    for line in problems(text):
        assert "\n" not in line
        assert "Input should be" not in line and "instance of" not in line, line  # pydantic's own wording
        assert "constrained-" not in line and "literal[" not in line and "[key]" not in line, line  # union tags


def test_model_file_not_found(project: Path) -> None:
    lines = problems("name: m\nmodel:\n  source: models/nope.onnx\n")
    assert lines == [f"gpux.yml:3:11 model.source: file not found: models/nope.onnx (looked for "
                     f"{project / 'models' / 'nope.onnx'}; paths are relative to gpux.yml)"]


def test_model_source_that_is_a_folder(project: Path) -> None:
    (project / "models").mkdir()
    assert problems("name: m\nmodel: {source: models}\n") == [
        f"gpux.yml:2:17 model.source: expected a model file, got a folder: {project / 'models'}"]


def test_missing_model_is_a_warning_when_not_required(project: Path) -> None:
    Path("gpux.yml").write_text("name: m\nmodel: {source: later.onnx}\n")
    loaded = load_config("gpux.yml", require_model=False)
    assert tuple(str(n) for n in loaded.notes) == loaded.warnings
    assert list(loaded.warnings) == [f"gpux.yml:2:17 model.source: file not found: later.onnx (looked for "
                               f"{project / 'later.onnx'}; paths are relative to gpux.yml); build, run and "
                               "validate --check-model need it"]


def test_problems_are_collected_across_kinds(project: Path) -> None:
    """A YAML-level problem, a validation problem and a missing file, in one report ordered by line."""
    lines = problems("name: m\nmodel: {source: gone.onnx}\nname: n\noutputs:\n  y: {dtype: f32, labels: l.txt}\n")
    assert [line.split(" ", 2)[:2] for line in lines] == [
        ["gpux.yml:2:17", "model.source:"], ["gpux.yml:3:1", "name:"], ["gpux.yml:5:14", "outputs.y.dtype:"],
        ["gpux.yml:5:27", "outputs.y.labels:"]]


@pytest.mark.parametrize(("written", "loaded"), [
    ("1.0", "1.0"), ("1.10", "1.10"), ("2", "2"), ("2024-05-01", "2024-05-01"), ("1.0.0", "1.0.0"),
    ("'1.10'", "1.10"),
])
def test_version_is_kept_as_written(project: Path, written: str, loaded: str) -> None:
    Path("gpux.yml").write_text(f"name: m\nversion: {written}\nmodel: {{source: model.onnx}}\n")
    assert load_config("gpux.yml").config.version == loaded


def test_valid_config_round_trip(project: Path) -> None:
    Path("gpux.yml").write_text(textwrap.dedent("""\
        schema_version: 1
        name: resnet50
        model: {source: model.onnx}
        inputs:
          input: {dtype: float32, shape: [batch, 3, 224, 224]}
        runtime:
          backend: [tensorrt, cuda, cpu]
          supported: [tensorrt, cuda, openvino, cpu]
        providers:
          tensorrt: {precision: fp16, workspace: 4GB, profiles: {batch: {min: 1, opt: 8, max: 32}}}
          cuda: {memory: 4GB}
          openvino: {device: "AUTO:GPU,CPU", hint: throughput, streams: auto}
        """))
    cfg = load_config("gpux.yml").config
    assert cfg.runtime.backend == ("tensorrt", "cuda", "cpu")
    assert cfg.inputs is not None and cfg.inputs["input"].shape == ("batch", 3, 224, 224)
    assert cfg.providers.cuda.memory == 4_000_000_000
    assert cfg.providers.openvino.streams == "auto"


def test_anchors_work_and_aliases_cannot_blow_up(project: Path) -> None:
    lol = "\n".join(f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 9) + "]"
                    for i in range(8))
    text = 'a: &a ["lol", "lol"]\n' + lol + "\n" + BASE + "description: *i\n"
    plain = 'a: ["lol", "lol"]\n' + "\n".join(f"{chr(98 + i)}: [" + ", ".join(["x"] * 9) + "]" for i in range(8))
    started = time.monotonic()
    problems(plain + "\n" + BASE + "description: [x]\n")  # the same size without aliases: this machine's pace now
    budget = max(2.0, 50 * (time.monotonic() - started))  # expanded, the aliases would make 9**8 nodes
    started = time.monotonic()
    lines = problems(text)
    assert time.monotonic() - started < budget
    assert lines[0] == f"gpux.yml:1:1 a: unknown field; expected one of {V1_KEYS}"
    assert lines[-1] == "gpux.yml:12:1 description: expected a string, got a list"
    shared = "name: m\nmodel: &src {source: model.onnx}\nproviders:\n  cuda: &gpu {memory: 1GB}\n  rocm: *gpu\n"
    Path("gpux.yml").write_text(shared)
    assert load_config("gpux.yml").config.providers.rocm.memory == 1_000_000_000


def test_recursive_alias_is_an_error_not_a_crash(project: Path) -> None:
    assert problems(BASE + "description: &r [*r]\n") == ["gpux.yml:3:14 description: expected a string, got a list"]


def test_not_utf8(project: Path) -> None:
    Path("gpux.yml").write_bytes(b"name: \xff\xfe\n")
    with pytest.raises(ConfigError) as caught:
        load_config("gpux.yml")
    assert caught.value.lines()[0].startswith("gpux.yml: cannot read: 'utf-8' codec can't decode")


# Through the real CLI: exit 3, the same lines on stderr, never a traceback.
CLI_CASES = ["yaml-syntax", "python-tag", "duplicate-key", "unknown-nested-key", "several-problems"]


def test_cli_validate_reports_every_problem_with_exit_3(tmp_path: Path) -> None:
    (tmp_path / "model.onnx").write_bytes(b"placeholder")
    table = {i: (t, e) for i, t, e in INVALID}
    names = []
    for case in CLI_CASES:
        (tmp_path / case).mkdir()
        (tmp_path / case / "model.onnx").write_bytes(b"placeholder")
        (tmp_path / case / "gpux.yml").write_text(table[case][0])
        names.append(f"{case}/gpux.yml")
    r = gpux("validate", *names, cwd=tmp_path)
    assert r.returncode == ExitCode.CONFIG, r.stderr
    assert "Traceback" not in r.stderr
    errors = [line.removeprefix("error: ") for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [f"{case}/{line}" for case in CLI_CASES for line in table[case][1]]
    assert r.stdout.splitlines()[-1] == f"0 valid, {len(CLI_CASES)} invalid"


@pytest.mark.parametrize("command", [["build", "--provider", "cpu"], ["run", "--benchmark"]])
def test_build_and_run_stop_on_a_config_error_with_exit_3(tmp_path: Path, command: list[str]) -> None:
    (tmp_path / "model.onnx").write_bytes(b"placeholder")
    (tmp_path / "gpux.yml").write_text(BASE + "providers:\n  tensorrt:\n    precison: fp16\n")
    r = gpux(*command, str(tmp_path), cwd=tmp_path)
    assert r.returncode == ExitCode.CONFIG, r.stderr
    assert "Traceback" not in r.stderr
    assert (f"error: {tmp_path / 'gpux.yml'}:5:5 providers.tensorrt.precison: unknown field (did you mean "
            "'precision'?)") in r.stderr.splitlines()


def test_the_files_a_project_names_are_read_from_one_table() -> None:
    """config.files: the python steps' module, the verification folder and the model, each where gpux.yml names it;
    what validate checks, the build keys and gpux package copies (tests/test_package.py)."""
    root = Path(__file__).resolve().parents[1] / "examples" / "ppocr_python"
    project = load_config(root, require_model=False)
    named = {".".join(e.at): e for e in project.named_files()}
    assert next(iter(named)) == "model.source", "the model first"
    step = named["inputs.x.preprocess.python"]
    assert step.path == "ocr_steps:line" and step.found(project.root) == project.root / "ocr_steps.py"
    assert named["verify.data"].field.folder


def test_a_missing_calibration_file_is_found_when_gpux_yml_is_read(tmp_path: Path) -> None:
    (tmp_path / "model.onnx").write_bytes(b"")
    (tmp_path / "gpux.yml").write_text("name: m\nmodel: {source: model.onnx}\nproviders:\n"
                                       "  cpu: {precision: int8, quantization: static, calibration: c.npz}\n")
    with pytest.raises(ConfigError) as exc:
        load_config(tmp_path)
    [problem] = exc.value.problems
    assert problem.field == "providers.cpu.calibration" and problem.line == 4
    assert "file not found: c.npz" in str(problem)
