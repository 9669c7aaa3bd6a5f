"""A provider added by an installed plugin, with no edit to gpux: a distribution whose `gpux.providers` entry point
names one registry row (tests/toy_runtime.py: its row, option model and runtime module). gpux.yml then takes its
block, validated by the row's option model; `gpux build` plans and builds its targets; a session runs it."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from .conftest import MLP_YML, make_mlp
from .conftest import gpux as cli

ROOT = Path(__file__).resolve().parents[1]

RUN = """
import json, sys
import numpy as np
import gpux
feeds = {"x": np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)}
with gpux.load(sys.argv[1], provider="toy", strict=True) as toy, gpux.load(sys.argv[1], provider="cpu") as cpu:
    got, want = toy.run(feeds)["probs"], cpu.run(feeds)["probs"]
    print(json.dumps({"provider": toy.provider, "used": toy.used, "close": bool(np.allclose(got, want, atol=1e-6))}))
"""


@pytest.fixture
def plugin_env(tmp_path: Path) -> dict[str, str]:
    """An installed plugin: a dist-info folder with the entry point, on the path beside the runtime module."""
    site = tmp_path / "site"
    info = site / "gpux_toy-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gpux-toy\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[gpux.providers]\ntoy = tests.toy_runtime:ROW\n")
    return {"PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}


def project(folder: Path, block: str) -> Path:
    folder.mkdir()
    make_mlp(folder / "model.onnx")
    text = MLP_YML.format(name="toy-mlp").replace("backend: cpu", "backend: [toy, cpu]")
    (folder / "gpux.yml").write_text(text + f"providers:\n  toy: {block}\n")
    return folder


def test_a_plugin_provider_is_validated_planned_built_and_run(plugin_env: dict[str, str], tmp_path: Path) -> None:
    bad = project(tmp_path / "bad", "{verbose: 9}")
    r = cli("validate", str(bad), env=plugin_env)
    assert r.returncode == 3, r.stderr
    assert "gpux.yml:12:" in r.stderr and "providers.toy.verbose" in r.stderr, r.stderr  # its own option model

    r = cli("validate", str(bad), env={"PYTHONPATH": str(ROOT)})  # without the plugin: an unknown block
    assert r.returncode == 3 and "unknown provider" in r.stderr, r.stderr

    good = project(tmp_path / "good", "{verbose: 0}")
    r = cli("build", str(good), "--provider", "toy", "--strict", "--json", env=plugin_env)
    assert r.returncode == 0, r.stderr
    built = json.loads(r.stdout)
    assert "toy-reference" in json.dumps(built), built  # the row's planner named the target; its step built it

    import subprocess

    run = subprocess.run([sys.executable, "-c", RUN, str(good)], env={**os.environ, **plugin_env}, text=True,
                         capture_output=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout.splitlines()[-1]) == {"provider": "toy", "used": "onnx.reference", "close": True}


def test_shell_completion_offers_a_plugin_provider(plugin_env: dict[str, str]) -> None:
    words = "gpux build . --provider t"
    env = {**plugin_env, "COMP_WORDS": words, "COMP_CWORD": str(len(words.split()) - 1),
           "_GPUX_COMPLETE": "bash_complete"}
    got = [line.split(",", 1)[1] for line in cli(env=env).stdout.splitlines()]
    assert got == ["tensorrt", "toy"], got
