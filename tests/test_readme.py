"""The README's examples run as written (shell lines in a fresh copy of the repo's examples, and the Python block)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from .conftest import ROOT
from .trained import mobilenet_v2_example, prebuilt

README = (ROOT / "README.md").read_text()


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, flags=re.S)


def test_readme_shell_examples_run_as_printed(tmp_path: Path) -> None:
    """One shell runs the block line by line, exactly as printed, in a checkout whose .venv is this test's venv
    and whose PATH does not hold it until the block activates it."""
    _examples(tmp_path)
    venv = Path(sys.prefix)
    (tmp_path / ".venv").symlink_to(venv, target_is_directory=True)
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if Path(p) != venv / "bin")
    env = {**os.environ, "PATH": path}
    env.pop("VIRTUAL_ENV", None)
    [commands] = [b for b in blocks("sh") if "gpux build" in b]
    lines = [line.split("  #")[0].strip() for line in commands.splitlines() if line.strip()]
    assert len(lines) >= 6 and lines[0] == ". .venv/bin/activate"
    script = "set -e\n" + "".join(f"echo '$ {i}' >&2\n{line}\n" for i, line in enumerate(lines))
    r = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr[-3000:]}"
    assert "warning:" not in r.stderr, r.stderr
    assert "logits: Egyptian cat 0." in r.stdout, r.stdout  # the trained model names the photo's cat
    assert "→ ran openvino [OpenVINO CPU] at int8" in r.stderr, r.stderr  # the verified int8 the example ships


def _examples(root: Path) -> None:
    """The README's examples as a fresh clone has them: no models, no built artifacts, no generated crops."""
    for name in ("mlp", "mobilenet_v2"):
        shutil.copytree(ROOT / "examples" / name, root / "examples" / name,
                        ignore=shutil.ignore_patterns(".gpux", "*.onnx", "crops.npz"))


def test_readme_python_example_runs(tmp_path: Path) -> None:
    """The Python block answers the photo with the label its comment promises: on the example as make_model.py
    writes it, built once per session (the shell test above builds it from nothing, as the README does)."""
    prebuilt(mobilenet_v2_example(tmp_path / "examples" / "mobilenet_v2"), "openvino")
    [code] = blocks("python")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    promised = re.search(r"# (.+)$", code.strip().splitlines()[-1])
    assert promised and r.stdout.strip() == promised.group(1).strip()
