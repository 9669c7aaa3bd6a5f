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
