"""`gpux run examples/mobilenet_v2 FOLDER --on ray` on a local two-node Ray cluster against the local `gpux run
examples/mobilenet_v2 FOLDER`, side by side.

    python benchmarks/ray_batch.py [--photos 2000] [--rounds 2] [--actors 1,2] [--kill]

The folder holds `--photos` real photos (benchmarks/run_folder.py's: crops and flips of scikit-image's and
scikit-learn's sample photos, 800x600 JPEG). A head and a second node are started on 127.0.0.1 (one CPU each, as
`ray.cluster_utils.Cluster` allows), and stay up for the whole run, as a user's cluster does. Each cell is a whole
`gpux run` process, its start and the driver's connection included; cells alternate round by round. Figures: files
per second (the median over the rounds) and its ratio to the local run; the top-1 answers of every Ray run are
compared file by file with the local run's, and every file must come back exactly once. `--kill` also SIGKILLs one
actor once a quarter of the files are answered (a run of its own, not timed against the others).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "mobilenet_v2"


def run_folder() -> Any:
    spec = importlib.util.spec_from_file_location("run_folder", ROOT / "benchmarks" / "run_folder.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def gpux(*args: str) -> list[str]:
    return [sys.executable, "-m", "gpux", "run", str(EXAMPLE), *args]


def top1(lines: list[str]) -> dict[str, str]:
    docs = [json.loads(line) for line in lines if line.strip()]
    files = [d["file"] for d in docs]
    assert len(files) == len(set(files)), "a file answered twice"
    return {d["file"]: d["answers"]["logits"][0]["label"] for d in docs}


def timed(cmd: list[str], out: Path | None) -> tuple[float, dict[str, str]]:
    start = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if r.returncode:
        raise SystemExit(f"{' '.join(cmd)}: exit {r.returncode}\n{r.stderr[-2000:]}")
    return seconds, top1(out.read_text().splitlines() if out else r.stdout.splitlines())


def actor_pids() -> list[int]:
    found = []
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and "FileAnswerer" in (p / "cmdline").read_bytes().decode(errors="replace"):
                found.append(int(p.name))
        except OSError:
            continue
    return found


def killed_run(cmd: list[str], out: Path, n: int) -> tuple[float, dict[str, str], str]:
    """The Ray run with one actor SIGKILLed once a quarter of the files are answered."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    killed = "none"
    while proc.poll() is None:
        done = len(out.read_text().splitlines()) if out.exists() else 0
        if done >= n // 4 and killed == "none":
            pids = actor_pids()
            if pids:
                os.kill(pids[0], signal.SIGKILL)
                killed = f"pid {pids[0]} at {done}/{n} files"
        time.sleep(0.1)
    _, err = proc.communicate()
    if proc.returncode:
        raise SystemExit(f"killed run: exit {proc.returncode}\n{err[-2000:]}")
    return time.perf_counter() - start, top1(out.read_text().splitlines()), killed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--photos", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--actors", default="1,2")
    ap.add_argument("--kill", action="store_true")
    args = ap.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # keep the driver's addresses on loopback
    from ray.cluster_utils import Cluster

    if not (EXAMPLE / "model.onnx").is_file():
        subprocess.run([sys.executable, str(EXAMPLE / "make_model.py")], check=True)
    subprocess.run([sys.executable, "-m", "gpux", "build", str(EXAMPLE)], check=True, capture_output=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "photos"
        folder.mkdir()
        run_folder().make_photos(folder, args.photos)
        node = {"num_cpus": 1, "node_ip_address": "127.0.0.1", "include_dashboard": False}
        cluster = Cluster(initialize_head=True, head_node_args=node)
        from ray._common.utils import reset_ray_address

        reset_ray_address()  # drivers here name the address; another's plain ray.init() must not join this cluster
        try:
            cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
            cluster.wait_for_nodes()
            on = f"ray:{cluster.address}"
            cells: list[tuple[str, list[str], Path | None]] = [("gpux run FOLDER (local)", gpux(str(folder), "--json"),
                                                                None)]
            for a in (int(x) for x in args.actors.split(",")):
                out = Path(tmp) / f"ray{a}.jsonl"
                cells.append((f"--on ray, {a} actor(s)", gpux(str(folder), "--on", on, "--concurrency", str(a),
                                                              "-o", str(out)), out))
            seconds: dict[str, list[float]] = {label: [] for label, _, _ in cells}
            answers: dict[str, dict[str, str]] = {}
            for _ in range(args.rounds):
                for label, cmd, out in cells:
                    s, answers[label] = timed(cmd, out)
                    seconds[label].append(s)
            local = answers[cells[0][0]]
            base = args.photos / statistics.median(seconds[cells[0][0]])
            print(f"{args.photos} photos, MobileNetV2 (examples/mobilenet_v2, provider auto), {args.rounds} rounds, "
                  f"2 nodes x 1 CPU on {os.cpu_count()} cores")
            print("| run | files/s (median) | vs local | seconds per round | top-1 same as local |")
            print("|---|---|---|---|---|")
            for label, _, _ in cells:
                rate = args.photos / statistics.median(seconds[label])
                same = sum(answers[label].get(f) == t for f, t in local.items())
                print(f"| {label} | {rate:.1f} | {rate / base:.2f}x | {', '.join(f'{s:.1f}' for s in seconds[label])}"
                      f" | {same}/{len(local)} |")
            if args.kill:
                out = Path(tmp) / "killed.jsonl"
                s, got, killed = killed_run(gpux(str(folder), "--on", on, "--concurrency", "2", "-o", str(out)), out,
                                            args.photos)
                same = sum(got.get(f) == t for f, t in local.items())
                print(f"\nan actor killed ({killed}): {len(got)} files answered once each in {s:.1f}s, "
                      f"top-1 same as local {same}/{len(local)}")
        finally:
            cluster.shutdown()


if __name__ == "__main__":
    main()
