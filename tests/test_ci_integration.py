"""Where CI users are: the pre-commit hook (run by the real `pre-commit try-repo` on a sample repository) and the
GitHub Action's script (run here as the action runs it), each on a good and a bad gpux.yml."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .conftest import ROOT

GOOD = """\
name: good
version: 1.0.0
model:
  source: model.onnx
inputs:
  x: {dtype: float32, shape: [batch, 8]}
runtime:
  backend: cpu
"""
BAD = GOOD.replace("backend: cpu", "backend: cpuu")  # line 8


def sample_repo(root: Path) -> Path:
    repo = root / "sample"
    (repo / "good").mkdir(parents=True)
    (repo / "bad").mkdir()
    (repo / "good" / "gpux.yml").write_text(GOOD)
    (repo / "bad" / "gpux.yml").write_text(BAD)
    (repo / "README.md").write_text("not a config\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    for cmd in (["git", "init", "-q"], ["git", "add", "."], ["git", "commit", "-qm", "sample"]):
        subprocess.run(cmd, cwd=repo, check=True, env=env)
    return repo


def test_hook_definition_matches_gpux_yml_files_only() -> None:
    import re

    [hook] = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hook["id"] == "gpux-validate" and hook["language"] == "python"
    assert hook["entry"].split()[0] == "gpux"
    pattern = re.compile(hook["files"])
    assert pattern.search("gpux.yml") and pattern.search("models/a/gpux.yaml")
    assert not pattern.search("my-gpux.yml.bak") and not pattern.search("README.md")


@pytest.mark.slow
def test_pre_commit_try_repo_passes_the_good_file_and_fails_the_bad_one_at_its_line(tmp_path: Path) -> None:
    """The real pre-commit installs gpux from this checkout into its own environment and runs the hook."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = sample_repo(tmp_path)
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home"), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("VIRTUAL_ENV", None)
    pre_commit = [sys.executable, "-m", "pre_commit", "try-repo", str(ROOT), "gpux-validate"]
    good = subprocess.run([*pre_commit, "--files", "good/gpux.yml", "README.md"], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=900)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "gpux validate" in good.stdout and "Passed" in good.stdout
    bad = subprocess.run([*pre_commit, "--files", "bad/gpux.yml", "good/gpux.yml"], cwd=repo, env=env,
                         capture_output=True, text=True, timeout=900)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "Failed" in bad.stdout
    assert "bad/gpux.yml:8:12 runtime.backend: unknown provider 'cpuu'" in bad.stdout, bad.stdout
    assert "Traceback" not in bad.stdout


def test_action_script_annotates_the_bad_file_and_passes_the_good_one(tmp_path: Path) -> None:
    """action/validate.sh as action.yml runs it (gpux already on PATH: no install step)."""
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    steps = action["runs"]["steps"]
    assert action["runs"]["using"] == "composite" and "action/validate.sh" in steps[-1]["run"]
    assert set(action["inputs"]) >= {"paths", "python-version"}
    repo = sample_repo(tmp_path)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "GPUX_ACTION_PATH": str(ROOT)}

    def run(paths: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(ROOT / "action" / "validate.sh")], cwd=repo, capture_output=True,
                              text=True, env={**env, "GPUX_PATHS": paths}, timeout=120)

    good = run("good/gpux.yml")
    assert good.returncode == 0, good.stderr
    assert "::error" not in good.stdout
    bad = run("good bad/gpux.yml")
    assert bad.returncode == 3
    assert "::error file=bad/gpux.yml,line=8,col=12::runtime.backend: unknown provider 'cpuu'" in bad.stdout
    everything = run(".")  # a folder: every gpux.yml below it
    assert everything.returncode == 3 and "1 valid, 1 invalid" in everything.stdout + everything.stderr
