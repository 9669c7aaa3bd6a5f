"""Pipeline overhead: examples/detect_classify run as a gpux pipeline vs the same two sessions called by
hand (detector, then classifier on its features), in alternating rounds, on cpu.

    python benchmarks/pipeline.py [--calls N] [--rounds R]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
EX = ROOT / "examples" / "detect_classify"


def per_call_us(fn, n: int) -> float:
    started = time.perf_counter_ns()
    for _ in range(n):
        fn()
    return (time.perf_counter_ns() - started) / n / 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    subprocess.run([sys.executable, str(EX / "make_models.py")], check=True, capture_output=True)
    import gpux
    from gpux.workspace.pipeline import open_pipeline
    from gpux.workspace.project import open_models, shared_choice

    ms = open_models(str(EX))
    pipe = open_pipeline(ms, shared_choice(ms, "cpu"), None, lambda _m: None)
    det, cls = gpux.load(EX / "detector", provider="cpu"), gpux.load(EX / "classifier", provider="cpu")
    image = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    feeds = {"image": image}
    by_hand = lambda: cls.run(features=det.run(image=image)["features"])  # noqa: E731
    piped = lambda: pipe.run_last(feeds)  # noqa: E731
    for fn in (by_hand, piped):
        per_call_us(fn, 200)  # warm-up
    a, b = [], []
    for _ in range(args.rounds):
        a.append(per_call_us(by_hand, args.calls))
        b.append(per_call_us(piped, args.calls))
    ha, hb = statistics.median(a), statistics.median(b)
    print("| path | median µs/call | vs by hand |\n|---|---|---|")
    print(f"| two sessions by hand (`Session.run` ×2) | {ha:.2f} | 1.00× |")
    print(f"| gpux pipeline (`Pipeline.run_last`) | {hb:.2f} | {hb / ha:.3f}× ({hb - ha:+.2f} µs) |")
    pipe.close()
    det.close()
    cls.close()


if __name__ == "__main__":
    main()
