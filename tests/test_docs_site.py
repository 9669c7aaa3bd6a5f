"""The docs site builds strictly (mkdocs-material), its config and CLI references are generated from the schema
and the commands, and a broken link fails the build."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT


def build(root: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(root / "mkdocs.yml"),
                           "-d", str(out)], cwd=root, capture_output=True, text=True, timeout=300,
                          env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin", "HOME": str(out.parent)})


def copy_site_sources(dst: Path) -> Path:
    dst.mkdir()
    for name in ("mkdocs.yml", "README.md"):
        shutil.copy(ROOT / name, dst / name)
    for name in ("docs", "tools"):
        shutil.copytree(ROOT / name, dst / name)
    return dst


def test_site_builds_strictly_with_generated_references(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    r = build(ROOT, tmp_path / "site")
    assert r.returncode == 0, r.stderr
    cli = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text()
    for command in ("gpux init", "gpux run", "gpux export triton", "gpux cache prune"):
        assert command in cli, command
    config = (tmp_path / "site" / "reference" / "config" / "index.html").read_text()
    for field in ("calibration", "postprocess", "min_top1_confident"):
        assert field in config, field
    home = (tmp_path / "site" / "index.html").read_text()
    assert "A trained classifier, a real photo" in home  # the README is the home page


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    src = copy_site_sources(tmp_path / "src")
    page = src / "docs" / "answers.md"
    page.write_text(page.read_text() + "\nSee [the missing page](no-such-page.md).\n")
    r = build(src, tmp_path / "site")
    assert r.returncode != 0
    assert "no-such-page.md" in r.stderr


def test_every_shell_block_in_the_docs_runs_in_the_tests_or_says_it_is_illustrative() -> None:
    """A command printed in docs/ either runs in the tests (README's blocks do: tests/test_readme.py) or sits under
    an `<!-- illustrative: why -->` line, so no command a reader copies is silently untested."""
    import re

    unmarked = []
    for page in sorted((ROOT / "docs").glob("*.md")):
        lines = page.read_text().splitlines()
        for i, line in enumerate(lines):
            if re.match(r"^```(sh|bash|shell|console)\s*$", line):
                prev = next((x for x in reversed(lines[:i]) if x.strip()), "")
                if not re.match(r"<!-- (illustrative|run by tests/\S+): .+ -->$", prev):
                    unmarked.append(f"{page.name}:{i + 1}")
    assert not unmarked, f"shell blocks neither run by a test nor marked illustrative: {unmarked}"
