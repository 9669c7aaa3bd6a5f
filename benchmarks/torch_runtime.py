"""PyTorch runtime benchmark: torch eager vs torch.compile vs ONNX Runtime vs OpenVINO, side by side in one run.

    python benchmarks/torch_runtime.py                 # CPU: examples/torch_cnn, batch 1
    python benchmarks/torch_runtime.py --device cuda   # GPU: eager / compile / reduce-overhead, fp32 / fp16 / bf16

Every row is a gpux session (what `gpux run` opens) in a fresh store; per-call times are medians of
alternating rounds (A, B, C, ... A, B, C, ...), so the rows share the machine's noise, and ratios are taken
against torch eager fp32. Cold vs warm start: the compile phase at `gpux build` (empty Inductor cache) vs at
the later open (the artifact's cache), for every compiled row.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# (label, provider, runtime settings): torch rows give (compile, precision); None = the provider's ONNX path
CPU_ROWS = [
    ("torch eager fp32", "cpu", ("off", "fp32")),
    ("torch.compile fp32", "cpu", ("default", "fp32")),
    ("onnxruntime cpu fp32", "cpu", None),
    ("openvino fp32 (f32 exec)", "openvino", None),
]
GPU_ROWS = [
    ("torch eager fp32", "DEV", ("off", "fp32")),
    ("torch.compile fp32", "DEV", ("default", "fp32")),
    ("reduce-overhead fp32", "DEV", ("reduce-overhead", "fp32")),
    ("torch eager fp16", "DEV", ("off", "fp16")),
    ("reduce-overhead fp16", "DEV", ("reduce-overhead", "fp16")),
    ("torch.compile bf16", "DEV", ("default", "bf16")),
]


def configure(project, provider: str, torch_setting, batch: int, threads: int):
    from gpux.bench.command import with_torch
    from gpux.plan.targets import with_options

    cfg = project.config
    runtime = cfg.runtime.model_copy(update={"threads": cfg.runtime.threads.model_copy(
        update={"intra_op": threads})})
    project = dataclasses.replace(project, config=cfg.model_copy(
        update={"benchmark": cfg.benchmark.model_copy(update={"batch": batch}), "runtime": runtime}))
    if torch_setting is not None:
        return with_torch(project, provider, *torch_setting)
    if provider == "openvino":
        return with_options(project, provider, inference_precision="f32", threads=threads or None)
    return with_options(project, provider, runtime="onnxruntime")


def open_row(project, provider: str, store: Path) -> tuple[object, dict]:
    """Build (timed, cold compile) then open (timed, warm compile) one row."""
    import gpux
    from gpux.artifacts.build import build

    started = time.perf_counter()
    result = build(project, provider, store_dir=store)
    built = time.perf_counter() - started
    info = result.final.artifact.manifest["info"]
    session = gpux.load(project, provider, strict=True, store_dir=store)
    return session, {"build_s": built, "cold_compile_s": info.get("compile_seconds"),
                     "warm_compile_s": session.timings.get("compile_s"), "runs_on": session.used}


def per_call_us(call, n: int) -> float:
    started = time.perf_counter_ns()
    for _ in range(n):
        call()
    return (time.perf_counter_ns() - started) / n / 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda", "rocm"])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads of every runtime (0 = defaults)")
    args = ap.parse_args()
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="gpux-bench-inductor-"))
    import subprocess

    import numpy as np  # noqa: F401  (loaded before timing)

    from gpux.config.load import load_config
    from gpux.model.inputs import synthetic

    example = ROOT / "examples" / "torch_cnn"
    subprocess.run([sys.executable, str(example / "make_model.py")], check=True, capture_output=True)
    base = load_config(example / "gpux.yml")
    rows = CPU_ROWS if args.device == "cpu" else [(a, args.device, c) for a, _, c in GPU_ROWS]
    store = Path(tempfile.mkdtemp(prefix="gpux-bench-store-"))
    opened, failed = [], []
    for label, provider, setting in rows:
        print(f"opening {label} ...", file=sys.stderr)
        try:  # a row that cannot build or open is reported, and the others are still measured
            session, facts = open_row(configure(base, provider, setting, args.batch, args.threads), provider, store)
            feeds = synthetic(session.inputs, {"batch": args.batch}, 0)
            session.run_feeds(feeds)
        except Exception as exc:
            traceback.print_exc()
            print(f"  {label} FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
            failed.append((label, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:160]))
            continue
        print(f"  {facts}", file=sys.stderr)  # the build's facts, before minutes of timing
        opened.append((label, session, facts, session.runner.bind(feeds)[0]))
    if not opened:
        sys.exit("no row opened")
    times: dict[str, list[float]] = {label: [] for label, *_ in opened}
    for _ in range(args.rounds):
        for label, _, _, call in opened:
            times[label].append(per_call_us(call, args.calls))
    ref = statistics.median(times[opened[0][0]])
    print(f"\n{args.device}, examples/torch_cnn, batch {args.batch}, intra-op threads {args.threads or 'default'}, "
          f"{args.rounds} alternating rounds x {args.calls} calls\n")
    print("| row | runs on | median µs/call | vs torch eager | cold compile s | warm compile s |")
    print("|---|---|---|---|---|---|")
    for label, session, facts, _ in opened:
        med = statistics.median(times[label])
        cold, warm = facts["cold_compile_s"], facts["warm_compile_s"]
        print(f"| {label} | {facts['runs_on']} | {med:.1f} | {ref / med:.2f}x | "
              f"{'-' if cold is None else f'{cold:.2f}'} | {'-' if warm is None else f'{warm:.2f}'} |")
        session.close()
    for label, reason in failed:
        print(f"| {label} | failed: {reason} | - | - | - | - |")
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
