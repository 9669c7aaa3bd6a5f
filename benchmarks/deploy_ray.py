"""Ray Serve benchmark: 1 vs 2 replicas at concurrency 16, and Ray's proxy against `gpux serve`, in one run.

    python benchmarks/deploy_ray.py [--models resnet50,mlp] [--seconds 5] [--out FILE.md]

The same tritonclient clients as benchmarks/serve.py (REST with the binary tensor extension) drive `gpux
serve` (one process, no batching) and a local Ray Serve application (`gpux.deploy.ray.app`) with 1 and then 2
replicas of the model. On a 2-core machine two replicas share the same two cores, so expect little gain;
the figures that matter are the ratios: Ray's HTTP proxy against `gpux serve`.
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


def alternate(cells: list[tuple[str, Any]], seconds: float, rounds: int) -> list[tuple[str, dict[str, Any]]]:
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in cells}
    for _ in range(rounds):
        for label, cell in cells:
            runs[label].append(cell(seconds / rounds))
    return [(label, serve_bench.summarize(r)) for label, r in runs.items()]


def with_replicas(project: Path, replicas: int) -> Any:
    from gpux.config.load import load_config

    p = load_config(project)
    ray_cfg = p.config.deploy.ray.model_copy(update={"num_replicas": replicas, "ray_actor_options": {"num_cpus": 0.5}})
    deploy = p.config.deploy.model_copy(update={"ray": ray_cfg})
    return dataclasses.replace(p, config=p.config.model_copy(update={"deploy": deploy}))


def bench_model(name: str, seconds: float, rounds: int) -> list[tuple[str, dict[str, Any]]]:
    """gpux serve and the Ray application up at once, measured in alternating rounds; then 2 replicas."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray
    from ray import serve

    from gpux.deploy.ray import app

    project = ROOT / "examples" / name
    if not (project / "model.onnx").is_file():
        subprocess.run([sys.executable, str(project / "make_model.py")], check=True, capture_output=True)
    subprocess.run([sys.executable, "-m", "gpux", "build", str(project), "--provider", "cpu"], check=True,
                   capture_output=True)
    port = serve_bench.free_port()
    rows: list[tuple[str, dict[str, Any]]] = []
    with serve_bench.gpux_serve(project, batching=False) as server:
        plain = serve_bench.served_cell("rest-binary", server.http, name)
        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
        try:
            serve.start(http_options={"host": "127.0.0.1", "port": port})
            for replicas in (1, 2):
                serve.run(app([with_replicas(project, replicas)], provider="cpu"), name="gpux", route_prefix="/",
                          blocking=False)
                label = f"Ray Serve, {replicas} replica{'s' * (replicas > 1)}"
                got = alternate([("gpux serve (1 process)", plain),
                                 (label, serve_bench.served_cell("rest-binary", f"127.0.0.1:{port}", name))],
                                seconds, rounds)
                rows += got if replicas == 1 else got[1:]
                serve.delete("gpux")
        finally:
            serve.shutdown()
            ray.shutdown()
    return rows


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
    parser.add_argument("--seconds", type=float, default=12.0, help="per server, split over the rounds")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    parts = [f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; {args.seconds:g} s per server "
             f"in {args.rounds} alternating rounds", ""]
    with tempfile.TemporaryDirectory():
        for name in args.models.split(","):
            parts.append(render(name, bench_model(name, args.seconds, args.rounds)))
            print(parts[-1], flush=True)
    if args.out:
        args.out.write_text("\n".join(parts))


if __name__ == "__main__":
    main()
