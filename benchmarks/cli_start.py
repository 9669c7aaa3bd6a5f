"""`gpux --help` as a whole process: wall time and peak memory, median of interleaved runs; with --vs, beside another
checkout of gpux (run from a folder outside both, so each imports its own).

    python benchmarks/cli_start.py --runs 40 [--vs ../gpux-before]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def once(checkout: Path, argv: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one `python -m gpux ARGV` importing gpux from `checkout`."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "gpux", *argv], env=env, cwd=tempfile.gettempdir(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)  # the child's own rusage (Popen.wait has none)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"gpux {' '.join(argv)} exited with {proc.returncode} (gpux from {checkout})")
    return wall, usage.ru_maxrss / 1024  # kilobytes on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--vs", type=Path, help="another checkout of gpux to time beside this one")
    parser.add_argument("argv", nargs="*", default=["--help"], help="gpux's arguments (default: --help)")
    args = parser.parse_args()
    checkouts = {"this checkout": ROOT, **({"--vs": args.vs.resolve()} if args.vs else {})}
    for path in checkouts.values():
        where = subprocess.run([sys.executable, "-c", "import gpux; print(gpux.__file__)"], cwd=tempfile.gettempdir(),
                               env={**os.environ, "PYTHONPATH": str(path)}, capture_output=True, text=True).stdout
        if not Path(where.strip()).resolve().is_relative_to(path):
            raise SystemExit(f"{path}: gpux imports from {where.strip() or 'nowhere'} there, not from that checkout")
        once(path, args.argv)  # warm the file cache and the bytecode
    runs: dict[str, list[tuple[float, float]]] = {k: [] for k in checkouts}
    for _ in range(args.runs):
        for label, path in checkouts.items():
            runs[label].append(once(path, args.argv))
    print(f"`gpux {' '.join(args.argv)}`, {args.runs} interleaved runs each, median\n")
    print("| | wall ms | peak MiB |\n|---|---|---|")
    med = {k: (statistics.median(w for w, _ in r), statistics.median(m for _, m in r)) for k, r in runs.items()}
    for label, (wall, peak) in med.items():
        print(f"| {label} | {wall * 1e3:.0f} | {peak:.1f} |")
    if args.vs:
        print(f"\nratio (this / --vs): wall {med['this checkout'][0] / med['--vs'][0]:.2f}×")


if __name__ == "__main__":
    main()
