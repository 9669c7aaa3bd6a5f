"""`--report FILE.html` of `gpux run --benchmark` and `gpux tune`, from real runs: the page opened in a real
headless Chromium with the network off, its charts drawn (pixels of the precisions' colours in the screenshot)
with one series per measured row (SVG ids in the rendered DOM), and the --json document inside it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .conftest import gpux as cli

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FP32_BAR = (0x4C, 0x72, 0xB0)  # charts.COLORS["fp32"], drawn at 85 % over white in the speedup chart


def offline_prefix() -> list[str]:
    """`unshare -n` (a network namespace with no interface) where this process may make one."""
    if not shutil.which("unshare"):
        return []
    ok = subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0
    return ["unshare", "-n"] if ok else []


def open_page(page: Path, tmp: Path) -> tuple[str, Any]:
    """(the DOM Chromium rendered, its screenshot as a Pillow image), the network off."""
    from PIL import Image

    if not Path(CHROMIUM).is_file():
        pytest.skip("chromium is not installed (`make install` adds Debian's chromium when run as root)")
    base = [*offline_prefix(), CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--disable-background-networking", "--host-resolver-rules=MAP * ~NOTFOUND",
            f"--user-data-dir={tmp / 'chromium'}", "--window-size=1200,1500"]
    url, shot = page.resolve().as_uri(), tmp / f"{page.stem}.png"
    dom = subprocess.run([*base, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0 and "<svg" in dom.stdout, dom.stderr[-2000:]
    taken = subprocess.run([*base, f"--screenshot={shot}", url], capture_output=True, text=True, timeout=120)
    assert taken.returncode == 0 and shot.is_file(), taken.stderr[-2000:]
    return dom.stdout, Image.open(shot).convert("RGB")


def embedded(page: str, ident: str) -> Any:
    found = re.search(rf"<script type='application/json' id='{ident}'>(.*?)</script>", page, re.S)
    assert found, f"no {ident} block"
    return json.loads(found.group(1))


def assert_self_contained(page: str) -> None:
    """Nothing to fetch: no link, no script but the JSON blocks, no address but SVG's namespace names."""
    text = re.sub(r"<script type='application/json'.*?</script>", "", page, flags=re.S)
    text = re.sub(r'xmlns(:\w+)?="[^"]*"', "", text)
    for needle in ("http:", "https:", "<link", "<script", "src=", "@import", "url(http", "<img"):
        assert needle not in text, f"{needle!r} in the page"


def assert_charts_drawn(dom: str, image: Any, meta: dict[str, Any], speedups: int) -> None:
    ids = [s["id"] for s in meta["series"] if s["measured"]]
    for key in ids:
        assert f'id="latency-{key}"' in dom, f"no latency series for {key}"
    assert len(set(re.findall(r'id="latency-([a-z0-9-]+)"', dom))) == len(ids), "one box per row, no more"
    assert len(re.findall(r'id="speedup-[a-z0-9-]+"', dom)) == speedups
    import numpy as np

    pixels = np.asarray(image, dtype=np.int16)
    bar = np.array([round(0.85 * c + 0.15 * 255) for c in FP32_BAR], dtype=np.int16)
    near = int(np.all(np.abs(pixels - bar) <= 12, axis=-1).sum())
    assert near > 2000, f"the fp32 bars did not draw ({near} pixels of their colour)"
    colours = len(np.unique(pixels.reshape(-1, 3), axis=0))
    assert colours > 50, f"{colours} colours on the page: the charts did not draw"


@pytest.mark.slow
def test_benchmark_report_of_every_provider(mlp_project: Path, tmp_path: Path) -> None:
    page = tmp_path / "out" / "bench.html"
    r = cli("run", str(mlp_project), "--benchmark", "-p", "all", "--runs", "50", "--duration", "0.2",
            "--report", str(page), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    text = page.read_text(encoding="utf-8")
    assert_self_contained(text)
    assert embedded(text, "gpux-document") == doc, "the page holds the --json document as it was printed"
    meta = embedded(text, "gpux-report")
    assert meta["command"].startswith("gpux run ") and f"--report {page}" in meta["command"]
    assert meta["environment"]["cpu_model"] == doc["environment"]["cpu_model"]
    measured = [row for row in doc["results"] if row.get("stats")]
    assert {row["provider"] for row in measured} >= {"cpu", "openvino"}
    assert len([s for s in meta["series"] if s["measured"]]) == len(measured)
    dom, image = open_page(page, tmp_path)
    assert_charts_drawn(dom, image, meta, speedups=len(measured))  # against the cpu fp32 row, itself at 1×
    for row in measured:  # each row's accuracy in the table beside its figures (the plain session has none)
        assert row["status"] == "baseline" or f"{row['accuracy']['min_cosine']:.6f}" in dom
    assert "ONNX Runtime CPU EP" in dom and doc["environment"]["platform"] in dom


@pytest.mark.slow
def test_tune_report_with_speedups_and_accuracy(mlp_project: Path, tmp_path: Path) -> None:
    page = tmp_path / "tune.html"
    r = cli("tune", str(mlp_project), "--providers", "cpu", "--seconds", "0.2", "--precisions", "fp32,int8",
            "--report", str(page), "--json")
    assert r.returncode == 0, r.stderr
    lock = json.loads(r.stdout)
    text = page.read_text(encoding="utf-8")
    assert_self_contained(text)
    assert embedded(text, "gpux-document") == lock
    meta = embedded(text, "gpux-report")
    measured = [c for c in lock["candidates"] if c["p50_ms"] is not None]
    assert len([s for s in meta["series"] if s["measured"]]) == len(measured) + 1, \
        "every measured candidate and the plain session"
    assert meta["series"][-1]["label"] == "plain ONNX Runtime"
    assert meta["environment"]["fingerprint"] == lock["fingerprint"]
    dom, image = open_page(page, tmp_path)
    assert_charts_drawn(dom, image, meta, speedups=sum(1 for c in measured if c["vs_plain_ort"]))
    assert "(locked)" in dom
    for c in measured:
        assert f"{c['vs_plain_ort']['speedup']:.2f}×" in dom  # each candidate's row in the table
        assert f"{c['accuracy']['min_cosine']:.6f}" in dom  # and its accuracy beside it


PROBE = """
import sys, importlib.abc
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "matplotlib":
            raise ImportError("blocked: " + name)
sys.meta_path.insert(0, Block())
from gpux.cli.main import main
main({args!r})
"""


@pytest.mark.parametrize("command", [["run", "--benchmark"], ["tune"]])
def test_report_without_matplotlib_says_what_to_install_before_measuring(mlp_project: Path,
                                                                         command: list[str]) -> None:
    args = [command[0], str(mlp_project), *command[1:], "--report", str(mlp_project / "r.html")]
    r = subprocess.run([sys.executable, "-c", PROBE.format(args=args)], capture_output=True, text=True,
                       timeout=60, env={**os.environ})
    assert r.returncode == 4, r.stderr
    assert r.stderr.strip() == "error: matplotlib is not installed → pip install 'gpux-ml[report]'"
    assert not (mlp_project / ".gpux").exists() and not (mlp_project / "r.html").exists(), "nothing was run"


def test_report_needs_a_benchmark(mlp_project: Path) -> None:
    r = cli("run", str(mlp_project), "--report", "r.html")
    assert r.returncode == 2 and "add --benchmark" in r.stderr


def test_a_single_row_benchmark_page_says_why_it_has_no_speedup_chart(mlp_project: Path, tmp_path: Path) -> None:
    page = tmp_path / "one.html"
    r = cli("run", str(mlp_project), "--benchmark", "--runs", "20", "--duration", "0.05", "--report", str(page))
    assert r.returncode == 0, r.stderr
    assert f"wrote {page}" in r.stderr
    text = page.read_text(encoding="utf-8")
    assert_self_contained(text)
    assert "No speedup chart: one row measured" in text and 'id="speedup-' not in text
    meta = embedded(text, "gpux-report")
    assert [s["id"] for s in meta["series"]] == ["cpu-fp32"] and 'id="latency-cpu-fp32"' in text
    assert len(embedded(text, "gpux-document")["results"][0]["latencies_ms"]) >= 20
