"""`gpux --help`, `--version`, `validate` and `schema` import no heavy runtime."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ["onnxruntime", "openvino", "onnx", "numpy", "coremltools", "tensorrt", "torch", "docker", "nncf",
         # the serve extra
         "grpc", "google", "uvicorn", "uvloop", "httptools", "prometheus_client", "tritonclient"]

# Block the heavy modules outright, then run the CLI and report what got imported.
PROBE = """
import sys, importlib.abc
HEAVY = {heavy!r}
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HEAVY:
            raise ImportError("blocked heavy import: " + name)
        return None
sys.meta_path.insert(0, Block())
sys.argv = ["gpux", *{args!r}]
from gpux.cli.main import main
code = 0
try:
    main({args!r})
except SystemExit as exc:
    code = exc.code
loaded = sorted(m for m in sys.modules if m.split(".")[0] in HEAVY)
print("LOADED=" + ",".join(loaded), file=sys.stderr)
sys.exit(code)
"""


def run_blocked(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    code = PROBE.format(heavy=HEAVY, args=list(args))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, timeout=60)


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["schema"], ["build", "--help"], ["run", "--help"],
                                  ["serve", "--help"]])
def test_cli_entry_points_import_nothing_heavy(args: list[str]) -> None:
    r = run_blocked(*args)
    assert r.returncode == 0, r.stderr
    assert "LOADED=\n" in r.stderr


def test_help_does_not_read_installed_distributions() -> None:
    """`gpux --help` lists providers without importlib.metadata (plugins are looked up when a command needs them)."""
    code = ("import sys; from gpux.cli.main import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print('METADATA' if 'importlib.metadata' in sys.modules else 'NONE', file=sys.stderr)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stderr.strip().endswith("NONE"), r.stderr


def test_validate_imports_nothing_heavy(mlp_project: Path) -> None:
    r = run_blocked("validate", str(mlp_project / "gpux.yml"))
    assert r.returncode == 0, r.stderr
    assert "LOADED=\n" in r.stderr
    bad = mlp_project / "bad.yml"
    bad.write_text("name: x\nmodel: {source: model.onnx}\nruntime: {backend: cdua}\n")
    r = run_blocked("validate", str(bad))
    assert r.returncode == 3
    assert "LOADED=\n" in r.stderr


def test_the_server_imports_no_config_models() -> None:
    """The serving modules, the ONNX Runtime runtime and the serve record load without pydantic or the config
    models: a start served from its record (gpux/serve/record.py) keeps them out of the process."""
    code = ("import sys\n"
            "import gpux.serve.command, gpux.serve.server, gpux.serve.grpc_service, gpux.serve.record\n"
            "import gpux.runtimes.onnxruntime, gpux.run.inuse\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'yaml')"
            " or m.startswith('gpux.config.')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr
