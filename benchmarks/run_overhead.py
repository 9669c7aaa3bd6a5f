"""What gpux's Python API costs per call over raw ONNX Runtime, on the same cpu fp32 artifact of examples/mlp.

    python benchmarks/run_overhead.py [--rounds 15] [--calls 20000] [--batch 1]

One process, one artifact: a raw `onnxruntime.InferenceSession(artifact).run(None, feeds)`, then gpux's
`Session.run({...})`, `Session.run_feeds(feeds)` and the `Session.prepared()` call, measured interleaved in rounds
(each round times every variant over `--calls` calls, in rotated order) and reported as the median over the
rounds of µs per call, with the difference from raw ONNX Runtime. The machine is shared: read the medians.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def project(tmp: Path) -> Path:
    dst = tmp / "mlp"
    shutil.copytree(ROOT / "examples" / "mlp", dst)
    subprocess.run([sys.executable, "make_model.py"], cwd=dst, check=True, capture_output=True)
    return dst


def per_call_us(fn: Callable[[], object], calls: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    return (time.perf_counter_ns() - start) / calls / 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--batch", type=int, default=1)
    args = ap.parse_args()

    import numpy as np
    import onnxruntime as ort

    import gpux

    with tempfile.TemporaryDirectory() as tmp:
        session = gpux.load(project(Path(tmp)), "cpu", strict=True)
        artifact = session.build.final.artifact.main
        raw = ort.InferenceSession(str(artifact), providers=["CPUExecutionProvider"])
        x = np.random.default_rng(0).standard_normal((args.batch, 64)).astype(np.float32)
        feeds = {"x": x}
        prepared = session.prepared()
        variants: dict[str, Callable[[], object]] = {
            "raw InferenceSession.run(None, feeds)": lambda: raw.run(None, feeds),
            "gpux Session.run({'x': x})": lambda: session.run({"x": x}),
            "gpux Session.run(x=x)": lambda: session.run(x=x),
            "gpux Session.run_feeds(feeds)": lambda: session.run_feeds(feeds),
            "gpux Session.prepared()(feeds)": lambda: prepared(feeds),
        }
        for fn in variants.values():  # warm up; the first gpux call goes through the fallback's checks
            per_call_us(fn, 1000)
        times: dict[str, list[float]] = {k: [] for k in variants}
        names = list(variants)
        for r in range(args.rounds):
            for k in range(len(names)):
                name = names[(k + r) % len(names)]
                times[name].append(per_call_us(variants[name], args.calls))
        session.close()
    base = statistics.median(times[names[0]])
    print(f"artifact: {artifact.parent.name} (examples/mlp, cpu fp32), batch {args.batch}, "
          f"{args.rounds} rounds × {args.calls} calls, onnxruntime {ort.__version__}")
    print(f"{'call':<40} {'median µs':>10} {'vs raw µs':>10}  {'round min–max µs':>18}")
    for name in names:
        med = statistics.median(times[name])
        print(f"{name:<40} {med:>10.2f} {med - base:>+10.2f}  {min(times[name]):>8.2f}–{max(times[name]):<8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
