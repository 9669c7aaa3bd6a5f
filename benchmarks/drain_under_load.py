"""SIGTERM under load, many times, with both cores busy: how many requests the server accepted and never answered.

    python benchmarks/drain_under_load.py [--runs 50] [--busy 2] [--code DIR]

Each run is the scenario of tests/test_serve_drain.py: a real `gpux serve` process on the MLP, 6 REST clients
(half on fresh connections) and 2 gRPC clients, SIGTERM after a second. `--busy N` busy loops (pure Python, each
pinned to a core in turn with sched_setaffinity) run beside it the whole time, at the benchmark's own niceness, so
the server, its clients and the loops share the cores. An outcome is accepted-but-unanswered when a request whose
bytes went out got no answer (REST: a reset or close after sending; gRPC: any code but OK and UNAVAILABLE, e.g.
CANCELLED); 503 and UNAVAILABLE are refusals while draining, "refused before sending" a closed port.
`--code DIR` serves another checkout of gpux (a before/after side by side).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.serving import mlp_project  # noqa: E402
from tests.test_serve_cli import Process  # noqa: E402
from tests.test_serve_drain import under_load  # noqa: E402

ANSWERED = {"200", "503", "OK", "UNAVAILABLE", "refused before sending"}


def spin(core: int) -> None:
    """A busy loop on one core until killed."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {core})
    while True:
        pass


def busy(n: int) -> list[multiprocessing.Process]:
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    loops = [multiprocessing.Process(target=spin, args=(cores[i % len(cores)],), daemon=True) for i in range(n)]
    for p in loops:
        p.start()
    return loops


def one_run(root: Path) -> tuple[Counter[str], float]:
    """The outcomes of one drain under load, and how long the server took to exit after SIGTERM."""
    p = Process(str(mlp_project(root, "1.0.0", 0)), "--no-access-log")
    try:
        p.start()
        started = time.monotonic()
        seen = under_load(p)
        return seen, time.monotonic() - started - 1.0
    finally:
        if p.proc.poll() is None:
            p.proc.kill()
        p.proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--busy", type=int, default=2, help="busy loops beside the server (0: a quiet machine)")
    ap.add_argument("--code", type=Path, help="serve this checkout of gpux instead of this one")
    args = ap.parse_args()
    if args.code is not None:
        os.environ["PYTHONPATH"] = str(args.code.resolve())
    loops = busy(args.busy)
    total, unanswered, worst, drains = Counter[str](), 0, 0, []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for run in range(args.runs):
                seen, drain_s = one_run(Path(tmp) / f"mlp{run}")
                lost = sum(v for k, v in seen.items() if k not in ANSWERED)
                total.update(seen)
                unanswered += lost
                worst = max(worst, lost)
                drains.append(drain_s)
                print(f"run {run + 1}/{args.runs}: {dict(seen)}{'  <- UNANSWERED' if lost else ''}", flush=True)
    finally:
        for p in loops:
            p.kill()
    drains.sort()
    print(f"\n{args.runs} runs, {args.busy} busy loops, load average {os.getloadavg()[0]:.1f}: "
          f"{unanswered} accepted-but-unanswered (worst run {worst}); outcomes {dict(total)}; "
          f"SIGTERM to exit median {drains[len(drains) // 2]:.2f} s, max {drains[-1]:.2f} s")
    sys.exit(1 if unanswered else 0)


if __name__ == "__main__":
    main()
