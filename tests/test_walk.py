"""The walk of `gpux run`'s and `gpux build`'s request (tools/walk.py, docs/design.md): read from the source, the
command line is left once, at the start, and the work is reached from the entry points below it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _walk():  # tools/ is no package: loaded by path
    spec = importlib.util.spec_from_file_location("gpux_walk", ROOT / "tools" / "walk.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_commands_leave_the_command_line_once_and_reach_their_work() -> None:
    walk = _walk()
    code = walk.Code(ROOT / "gpux")
    reached = {"gpux run": {("gpux.run.ray_batch", "answer_on_ray"), ("gpux.run.files", "answer_files"),
                            ("gpux.run.command", "run_once"), ("gpux.bench.command", "benchmark_command")},
               "gpux build": {("gpux.artifacts.unchanged", "replay"), ("gpux.artifacts.project", "build_down"),
                              ("gpux.artifacts.build", "execute"), ("gpux.artifacts.unchanged", "record")}}
    for label, entry in walk.ENTRIES.items():
        counts, stays = walk.figures(code, entry)
        rooms = [walk.room(m) for m, _ in stays]
        assert rooms[0] == "cli" and "cli" not in rooms[1:], (label, rooms)
        entered = {(m, f) for m, funcs in stays for f in funcs}
        assert reached[label] <= entered, (label, reached[label] - entered)
        assert counts["stays"] == len(stays) and counts["rooms"] == len(set(rooms))
        assert 0 < counts["climbs"] < counts["stays"] and counts["returns"] < counts["stays"]


def test_the_script_prints_both_commands(capsys) -> None:
    assert _walk().main([]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["stays", "rooms", "climbs", "returns"]
    assert [line.rsplit(None, 4)[0] for line in lines[1:]] == ["gpux run", "gpux build"]


def test_design_md_gives_the_walks_as_the_script_counts_them_now() -> None:
    """docs/design.md's table of `python tools/walk.py` figures: its last row for each command (and for a build step)
    is what the script counts on this code."""
    walk = _walk()
    code = walk.Code(ROOT / "gpux")
    rows = [line.strip("|").split("|") for line in (ROOT / "docs" / "design.md").read_text().splitlines()
            if line.startswith("| `gpux ") or line.startswith("| a build step")]
    entries = {**walk.ENTRIES, "a build step": "gpux/artifacts/build.py:_build_one:job"}
    for label, entry in entries.items():
        last = [r for r in rows if r[0].strip().startswith(f"`{label}`" if label.startswith("gpux") else label)][-1]
        counts, _ = walk.figures(code, entry)
        said = [int(x) for x in last[1:5]]
        assert said == [counts[k] for k in ("stays", "rooms", "climbs", "returns")], (label, last[0], counts)
