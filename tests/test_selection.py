"""One selection (gpux.plan.select): `gpux inspect` reads without writing, the precedence --provider >
$GPUX_PROVIDER > `gpux use` > runtime.backend is the same for build, run and inspect, and it is written once."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pytest

from gpux.cli.main import main

from .conftest import MLP_YML, gpux, make_mlp

GPUX = Path(__file__).resolve().parents[1] / "gpux"
X = json.dumps({"x": [[0.0] * 8]})


def project(tmp_path: Path, runtime: str = "  backend: cpu\n") -> Path:
    folder = tmp_path / "proj"
    folder.mkdir()
    make_mlp(folder / "model.onnx")
    (folder / "gpux.yml").write_text(MLP_YML.format(name="tiny-mlp").replace("  backend: cpu\n", runtime))
    return folder


def snapshot(*roots: Path) -> dict[str, tuple[bool, int, str]]:
    """Every folder and file under `roots`: (is a folder, mtime_ns, sha256 of the bytes)."""
    out = {}
    for root in roots:
        for p in [root, *root.rglob("*")]:
            st = p.stat()
            digest = "" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
            out[str(p)] = (p.is_dir(), st.st_mtime_ns, digest)
    return out


def test_inspect_of_a_built_project_writes_nothing(tmp_path: Path) -> None:
    folder, store = project(tmp_path, "  backend: auto\n"), tmp_path / "store"
    home = Path(os.environ["GPUX_HOME"])
    r = gpux("build", str(folder), "--provider", "cpu", "--store", str(store))
    assert r.returncode == 0, r.stderr
    assert gpux("use", "openvino", str(folder), "--store", str(store)).returncode == 0
    p = folder / "gpux.yml"  # the saved choice is no longer offered: the case that used to be reset on disk
    p.write_text(p.read_text().replace("runtime:\n", "runtime:\n  supported: [cpu]\n"))
    before = snapshot(folder, store, home)
    for args in (("--json",), ()):
        r = gpux("inspect", str(folder), "--store", str(store), *args)
        assert r.returncode == 0, r.stderr
        assert "(openvino) is no longer offered" in r.stderr + r.stdout
    doc = json.loads(gpux("inspect", str(folder), "--store", str(store), "--json").stdout)
    assert doc["would_run_on"] == "cpu" and doc["saved"] == "openvino"
    assert snapshot(folder, store, home) == before
    r = gpux("build", str(folder), "--store", str(store), "--json")  # a build settles it
    assert r.returncode == 0, r.stderr
    assert json.loads((store / "tiny-mlp" / "use.json").read_text())["provider"] == "cpu"


def source_of(command: str, folder: Path, capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[str, str]:
    """(where the provider came from, the provider) as `gpux COMMAND` reports them in --json."""
    args = {"build": ["build", str(folder), "--json", *flags], "inspect": ["inspect", str(folder), "--json"],
            "run": ["run", str(folder), "--input", X, "--json", *flags]}[command]
    with pytest.raises(SystemExit) as code:
        main(args)
    out, err = capsys.readouterr()
    assert code.value.code == 0, err
    doc = json.loads(out)
    if command == "build":
        return doc["requested"]["source"], doc["provider"]
    if command == "inspect":
        return doc["selection"]["source"], doc["would_run_on"]
    return doc["request_source"], doc["provider"]


def test_build_run_and_inspect_follow_one_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    folder = project(tmp_path, "  backend: openvino\n")
    for command in ("build", "run", "inspect"):
        assert source_of(command, folder, capsys) == ("runtime.backend", "openvino"), command
    with pytest.raises(SystemExit):
        main(["use", "cpu", str(folder)])
    for command in ("build", "run", "inspect"):
        assert source_of(command, folder, capsys) == ("gpux use", "cpu"), command
    monkeypatch.setenv("GPUX_PROVIDER", "openvino")
    for command in ("build", "run", "inspect"):
        assert source_of(command, folder, capsys) == ("GPUX_PROVIDER", "openvino"), command
    for command in ("build", "run"):
        assert source_of(command, folder, capsys, "--provider", "cpu") == ("--provider", "cpu"), command


def test_the_precedence_and_the_saved_choice_are_read_in_one_module() -> None:
    """Only plan/select.py reads $GPUX_PROVIDER or the saved choice and asks the tune lock; only `gpux use`
    and plan.choice.keep write the saved choice; the commands that pick a provider probe nothing themselves."""
    env = re.compile(r"environ(\.get\(|\[)\s*(ENV_PROVIDER|[\"']GPUX_PROVIDER)")
    readers = re.compile(r"\b(saved_choice|apply_lock|ladder|read_lock)\(")
    askers = ("artifacts/project.py", "cli/inspect.py", "run/session.py", "deploy/image.py", "deploy/ray.py",
              "workspace/project.py")
    no_probes = ("artifacts/project.py", "cli/build.py", "cli/run.py", "workspace/targets.py", "run/command.py",
                 "run/files.py", "run/fallback.py", "run/session.py", "deploy/image.py",
                 "deploy/ray.py", "workspace/project.py")
    # defined; the lock shown; the lock in force measured beside the untuned default (gpux tune)
    allowed = {"plan/lock.py": {"apply_lock", "read_lock"}, "cli/inspect.py": {"read_lock"},
               "bench/floor.py": {"read_lock"}}
    for path in GPUX.rglob("*.py"):
        rel, text = path.relative_to(GPUX).as_posix(), path.read_text()
        if rel != "plan/select.py":
            assert not env.search(text), f"{rel} reads $GPUX_PROVIDER: ask plan.select"
            calls = {m.group(1) for m in readers.finditer(text)} - allowed.get(rel, set())
            assert not calls, f"{rel} calls {calls}: the selection is plan.select's"
        if rel in askers:
            assert re.search(r"\bselect(_shared)?\(", text), f"{rel} does not ask plan.select"
        if rel in no_probes:
            assert not re.search(r"\bprobe(_for)?\(", text), f"{rel} probes providers itself"
