"""`gpux tune` against plain ONNX Runtime, side by side in one run.

    python benchmarks/tune.py [--models mlp,resnet50] [--seconds 3] [--rounds 5] [--out FILE.md]

For each example: `gpux tune` (latency objective) writes gpux.lock.json; then, in alternating rounds, a plain
ONNX Runtime session with default options on the source model and the session `gpux.load` opens by following
the lock are timed on the same seeded input (median per call, through their ordinary Python calls:
`InferenceSession.run`, and the tuned session's `Session.prepared()` and `Session.run(dict)`). The tuned choice's
accuracy comes from its verification.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EX = ROOT / "examples"


def median_ms(call: Any, seconds: float) -> float:
    times = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(times) < 5:
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def bench_model(name: str, seconds: float, rounds: int, budget: float, min_cosine: float) -> dict[str, Any]:
    import numpy as np
    import onnxruntime as ort

    import gpux
    from gpux.model.inputs import synthetic

    source = EX / name
    if not (source / "model.onnx").is_file():
        subprocess.run([sys.executable, str(source / "make_model.py")], check=True, capture_output=True)
    project = Path(tempfile.mkdtemp(prefix=f"gpux-tune-{name}-")) / name  # the lock is written beside gpux.yml
    shutil.copytree(source, project, ignore=shutil.ignore_patterns(".gpux", "gpux.lock.json"))
    yml = project / "gpux.yml"  # the accuracy the user declares; tune keeps only candidates meeting it
    yml.write_text(yml.read_text() + f"verify: {{min_cosine: {min_cosine}}}\n")
    started = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "gpux", "tune", str(project), "--seconds", "1", "--budget",
                        str(budget), "--json"], capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"gpux tune {name} failed: {r.stderr[-2000:]}")
    lock = json.loads(r.stdout)
    tuned_s = time.perf_counter() - started
    plain = ort.InferenceSession(str(project / "model.onnx"), providers=["CPUExecutionProvider"])
    with gpux.load(project) as s:
        assert s.selection.source == "gpux.lock.json", s.selection
        feeds = synthetic(s.inputs, {"batch": 1}, 0)
        fast = s.prepared()
        ref, got = plain.run(None, feeds)[0], fast(feeds)[0]
        cos = float(np.dot(ref.ravel(), got.ravel()) / (np.linalg.norm(ref) * np.linalg.norm(got)))
        a, b, d = [], [], []
        for _ in range(rounds):  # alternate, so all see the same machine
            a.append(median_ms(lambda: plain.run(None, feeds), seconds))
            b.append(median_ms(lambda: fast(feeds), seconds))
            d.append(median_ms(lambda: s.run(feeds), seconds))
        used = s.used
    best = min((c for c in lock["candidates"] if c["status"] == "ok"), key=lambda c: c["p50_ms"])
    table = [(c["provider"], c["precision"], c["options"], c["status"], c["p50_ms"], c["why"][:60])
             for c in lock["candidates"]]
    return {"name": name, "table": table, "choice": lock["choice"], "runs_on": used, "plain_ms": statistics.median(a),
            "tuned_ms": statistics.median(b), "dict_ms": statistics.median(d), "cosine_vs_plain": cos,
            "verified": lock["figures"]["accuracy"],
            "tuned_s": tuned_s, "best_candidate_ms": best["p50_ms"],
            "candidates": len(lock["candidates"]), "ok": sum(c["status"] == "ok" for c in lock["candidates"])}


def render(rows: list[dict[str, Any]]) -> str:
    out = ["| model | tuned choice | plain ORT ms | gpux prepared() ms | speed-up | gpux run(dict) ms | speed-up | "
           "cosine vs plain | tune time |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        c = r["choice"]
        opts = ", ".join(f"{k}={v}" for k, v in c["options"].items())
        out.append(f"| {r['name']} | {c['provider']} {c['precision']} ({opts}) on {r['runs_on']} | "
                   f"{r['plain_ms']:.4f} | {r['tuned_ms']:.4f} | **{r['plain_ms'] / r['tuned_ms']:.2f}×** | "
                   f"{r['dict_ms']:.4f} | **{r['plain_ms'] / r['dict_ms']:.2f}×** | "
                   f"{r['cosine_vs_plain']:.6f} | {r['tuned_s']:.0f} s ({r['ok']}/{r['candidates']} verified) |")
    for r in rows:
        out += ["", f"{r['name']} candidates (p50 ms measured by tune, best first):", ""]
        for p, prec, opts, status, p50, why in sorted(r["table"], key=lambda t: (t[4] is None, t[4] or 0)):
            shown = "-" if p50 is None else f"{p50:.4f}"
            out.append(f"- {p} {prec} {', '.join(f'{k}={v}' for k, v in opts.items())}: {status}, {shown} ({why})")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="mlp,resnet50")
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--budget", type=float, default=600.0)
    parser.add_argument("--min-cosine", type=float, default=0.999, help="verify: min_cosine declared for tune")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rows = [bench_model(n, args.seconds, args.rounds, args.budget, args.min_cosine) for n in args.models.split(",")]
    text = f"{os.cpu_count()} CPUs; medians of {args.rounds} alternating rounds of {args.seconds:g} s\n\n{render(rows)}"
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
