"""Ray Serve benchmark: 1 vs 2 replicas at concurrency 16, and Ray's proxy against `gpux serve`, in one run.

    python benchmarks/deploy_ray.py [--models resnet50,mlp] [--seconds 5] [--out FILE.md]

The same tritonclient clients as benchmarks/serve.py (REST with the binary tensor extension) drive `gpux
serve` (one process, no batching) and a local Ray Serve application (`gpux.deploy.ray.app`) with 1 and then 2
replicas of the model. On a 2-core machine two replicas share the same two cores, so expect little gain;
the figures that matter are the ratios: Ray's HTTP proxy + handle hop against `gpux serve`.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("serve_bench", ROOT / "benchmarks" / "serve.py")
assert _spec and _spec.loader
serve_bench: Any = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(serve_bench)


def ray_rows(project: Path, name: str, seconds: float) -> list[tuple[str, dict[str, float]]]:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray
    from ray import serve

    from gpux.config import load_config
    from gpux.deploy.ray import app

    rows = []
    port = serve_bench.free_port()
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        for replicas in (1, 2):
            p = load_config(project)
            ray_cfg = p.config.deploy.ray.model_copy(update={"num_replicas": replicas,
                                                             "ray_actor_options": {"num_cpus": 0.5}})
            deploy = p.config.deploy.model_copy(update={"ray": ray_cfg})
            p = dataclasses.replace(p, config=p.config.model_copy(update={"deploy": deploy}))
            serve.run(app([p], provider="cpu"), name="gpux", route_prefix="/", blocking=False)
            rows.append((f"Ray Serve, {replicas} replica{'s' * (replicas > 1)}",
                         serve_bench.measure("rest-binary", f"127.0.0.1:{port}", name, seconds)))
            serve.delete("gpux")
    finally:
        serve.shutdown()
        ray.shutdown()
    return rows


def bench_model(name: str, seconds: float) -> list[tuple[str, dict[str, float]]]:
    project = ROOT / "examples" / name
    if not (project / "model.onnx").is_file():
        subprocess.run([sys.executable, str(project / "make_model.py")], check=True, capture_output=True)
    subprocess.run([sys.executable, "-m", "gpux", "build", str(project), "--provider", "cpu"], check=True,
                   capture_output=True)
    with serve_bench.gpux_serve(project, batching=False) as server:
        rows = [("gpux serve (1 process)", serve_bench.measure("rest-binary", server.http, name, seconds))]
    return rows + ray_rows(project, name, seconds)


def render(name: str, rows: list[tuple[str, dict[str, float]]]) -> str:
    base = rows[0][1]
    out = [f"### {name} (REST binary)", "",
           "| server | p50 ms (c=1) | req/s (c=1) | req/s (c=16) | c=16 vs gpux serve |", "|---|---|---|---|---|"]
    for label, r in rows:
        out.append(f"| {label} | {r['p50_ms']:.3f} | {r['rps1']:.1f} | {r['rps16']:.1f} | "
                   f"{r['rps16'] / base['rps16']:.2f}× |")
    one, two = rows[1][1], rows[2][1]
    out += ["", f"2 vs 1 replicas at concurrency 16: **{two['rps16'] / one['rps16']:.2f}×**; Ray (1 replica) "
            f"per-request overhead at concurrency 1 over gpux serve: **{one['p50_ms'] - base['p50_ms']:+.3f} ms** "
            f"(p50 ratio {one['p50_ms'] / base['p50_ms']:.2f}×)", ""]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="resnet50,mlp")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    parts = [f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; {args.seconds:g} s windows", ""]
    with tempfile.TemporaryDirectory():
        for name in args.models.split(","):
            parts.append(render(name, bench_model(name, args.seconds)))
            print(parts[-1], flush=True)
    if args.out:
        args.out.write_text("\n".join(parts))


if __name__ == "__main__":
    main()
