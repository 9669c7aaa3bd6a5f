"""The README's examples run as written (shell lines in a fresh copy of the repo's examples, and the Python block)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from .conftest import ROOT

README = (ROOT / "README.md").read_text()


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, flags=re.S)


def test_readme_shell_examples_run(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "examples" / "mlp", tmp_path / "examples" / "mlp",
                    ignore=shutil.ignore_patterns(".gpux", "*.onnx"))
    bindir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    [commands] = [b for b in blocks("sh") if "gpux build" in b]
    lines = [line.split("  #")[0].strip() for line in commands.splitlines() if line.strip()]
    assert len(lines) >= 5
    for line in lines:
        line = line.replace("python ", f"{sys.executable} ", 1).replace("gpux ", f"{sys.executable} -m gpux ", 1)
        r = subprocess.run(line, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"{line}\n{r.stdout}\n{r.stderr}"


def test_readme_python_example_runs(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "examples" / "mlp", tmp_path / "examples" / "mlp",
                    ignore=shutil.ignore_patterns(".gpux", "*.onnx"))
    subprocess.run([sys.executable, "examples/mlp/make_model.py"], cwd=tmp_path, check=True, capture_output=True)
    [code] = blocks("python")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "cpu (1, 10)"
