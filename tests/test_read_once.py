"""A command parses its gpux.yml once and reads and checks the model once: `gpux build` and `gpux run` of the MLP,
through the real CLI in-process, with the real functions counted (each still runs)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import gpux.config
import gpux.config.load
import gpux.model.compat
import gpux.model.io
from gpux.cli.main import cli


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Calls of: telling a workspace from a project, parsing a YAML file, reading a model's I/O to check it (by
    file name; a build step's look at the file in hand, check=False, is not counted), checking the model's
    versions against ONNX Runtime, and deriving the interface gpux uses (declared names and shapes over the
    model's)."""
    calls: Counter[str] = Counter()

    def count(owner: Any, name: str, label: Callable[..., str]) -> None:
        real = getattr(owner, name)

        def counting(*args: Any, **kwargs: Any) -> Any:
            what = label(*args, **kwargs)
            if what:
                calls[what] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, counting)

    count(gpux.config, "find_workspace", lambda *a, **k: "find")
    count(gpux.config.load, "parse_yaml", lambda *a, **k: "parse")
    count(gpux.model.io, "read_io", lambda path, memo=None, check=True: f"read {Path(path).name}" if check else "")
    count(gpux.model.compat, "check", lambda *a, **k: "compat")
    count(gpux.model.io, "effective_io", lambda *a, **k: "effective_io")
    return calls


def invoke(*args: str) -> None:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output


def test_build_and_run_parse_the_config_and_read_the_model_once(mlp_project: Path, counted: Counter[str]) -> None:
    store = str(mlp_project / "store")
    invoke("build", str(mlp_project), "--store", store, "--force", "--json")
    assert counted == {"find": 1, "parse": 1, "read model.onnx": 1, "compat": 1, "effective_io": 1}
    counted.clear()
    invoke("run", str(mlp_project), "--store", store, "--input", json.dumps({"x": [[0.5] * 8]}), "--json")
    assert counted == {"find": 1, "parse": 1, "read model.onnx": 1, "compat": 1, "effective_io": 1}


STEPS = {  # each step of `gpux build`, where the command (or the plan, for the model check) finds it
    "replay": [("gpux.artifacts.unchanged", "replay")], "open": [("gpux.workspace.project", "open_models")],
    "check": [("gpux.model.io", "check_model"), ("gpux.artifacts.plan", "check_model")],
    "select": [("gpux.plan.select", "select"), ("gpux.plan.select", "select_shared")],
    "keep choice": [("gpux.plan.choice", "keep"), ("gpux.workspace.commands", "keep")],
    "plan": [("gpux.artifacts.plan", "plan_selected")], "snapshot": [("gpux.artifacts.unchanged", "before")],
    "targets keyed": [("gpux.artifacts.plan", "plan_build"), ("gpux.artifacts.build", "plan_build")],
    "execute": [("gpux.artifacts.build", "execute")],
    "name index": [("gpux.config.locate", "remember")], "record": [("gpux.artifacts.unchanged", "record")],
    "report": [("gpux.report", "emit_json")],
}


@pytest.fixture
def steps(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Calls of each step of `gpux build` (each still runs)."""
    import importlib

    calls: Counter[str] = Counter()
    owners = {module: importlib.import_module(module) for places in STEPS.values() for module, _ in places}
    for label, places in STEPS.items():  # every module imported first: none binds another's patched function
        for module, name in places:
            owner = owners[module]
            real = getattr(owner, name)
            monkeypatch.setattr(owner, name, lambda *a, _real=real, _label=label, **k: (calls.update([_label]),
                                                                                        _real(*a, **k))[1])
    return calls


def test_each_step_of_a_build_runs_once(mlp_project: Path, steps: Counter[str]) -> None:
    """`gpux build` conducts its steps: each is entered once on a full build; a dry run plans and reports (no
    choice kept, no snapshot, nothing built or recorded); an unchanged build is replayed and reported."""
    invoke("build", str(mlp_project), "--force", "--json")
    assert steps == {label: 1 for label in STEPS if label != "replay"}
    steps.clear()
    invoke("build", str(mlp_project), "--dry-run", "--json")
    assert steps == {"open": 1, "check": 1, "select": 1, "plan": 1, "targets keyed": 1, "report": 1}
    steps.clear()
    invoke("build", str(mlp_project), "--json")
    assert steps == {"replay": 1, "report": 1}


def test_a_workspace_build_runs_each_step_once_per_model(ws: Path, steps: Counter[str]) -> None:
    """A workspace is opened and its provider chosen once, then each model is checked, planned and built once;
    one report. (A workspace has no record: the replay finds none, and nothing is snapshot or recorded.)"""
    invoke("build", str(ws), "--json")
    assert steps == {"replay": 1, "open": 1, "select": 1, "keep choice": 1, "check": 2, "targets keyed": 2,
                     "execute": 2, "report": 1}
