"""The row a user would otherwise measure: the source model in a plain `onnxruntime.InferenceSession(path)` with
ONNX Runtime's defaults, timed by the same protocol on the same inputs as gpux's rows (`run --benchmark -p all`)."""

from __future__ import annotations

from typing import Any

from gpux.arrays import Feeds
from gpux.bench import protocol as bench
from gpux.bench.records import Row
from gpux.config.load import Project

PLAIN = "plain onnxruntime"


def plain_rows(project: Project, rows: Any) -> list[Row]:
    """The plain session's row, on the inputs gpux's rows ran (`rows`: the bench.command.Rows they share); none
    with declared steps (those rows time each stage, which a plain session has not)."""
    from gpux.model.inputs import load_file, synthetic
    from gpux.model.io import check_model
    from gpux.quality.calibrate import ranges

    if rows.stages:
        return []
    inputs = check_model(project, rows.store).inputs
    feeds = load_file(rows.input_file, inputs) if rows.input_file else synthetic(inputs, rows.shapes, 0,
                                                                                  ranges(project))
    rows.log("benchmarking a plain onnxruntime session ...")
    row = plain_row(project, rows, feeds)
    return [row] if row else []


def plain_row(project: Project, rows: Any, feeds: Feeds) -> Row | None:
    """The plain session's row on `feeds` (what gpux's rows ran), or None where the source is not an ONNX model
    ONNX Runtime can open here."""
    import time

    from gpux.formats import TORCH_FORMATS, source_format
    from gpux.optional import is_installed

    if source_format(project) in TORCH_FORMATS or not is_installed("onnxruntime"):
        return None
    from gpux.bench.rounds import plain_session
    from gpux.errors import Failure, classify

    protocol = rows.protocol
    started = time.perf_counter()
    try:  # the same plain session tune measures against, through the same native run call as gpux's rows
        calls, _session = plain_session(project.source, feeds, protocol.concurrency)
    except Exception as exc:  # ONNX Runtime's errors share no base class: the row says why (a gpux bug is raised)
        if classify(exc) is Failure.BUG:
            raise
        return bench.result_row(PLAIN, "fp32", None, bench.Phases(), status="unavailable",
                                error=f"a plain session cannot run the source: {exc}".splitlines()[0])
    load_s = time.perf_counter() - started  # its first run included
    m = bench.measure(calls if protocol.concurrency > 1 else calls[0], protocol)
    batch = next((len(v) for v in feeds.values() if getattr(v, "ndim", 0)), 1)
    stats = bench.summarize(m.latencies_s, m.wall_s, batch=batch, concurrency=protocol.concurrency)
    phases = bench.Phases(load_s=load_s, warmup_s=m.warmup_s, measure_s=m.wall_s)
    return bench.result_row(PLAIN, "fp32", stats, phases, status="baseline", latencies_s=m.latencies_s,
                            requested=PLAIN, runs_on="CPUExecutionProvider", options={"graph_optimization": "all"})


def plain_line(rows: list[Row]) -> str | None:
    """`each row against a plain session: cpu fp32 1.02×, ...` (median speed ratios), where the plain row ran."""
    plain = next((r for r in rows if r.get("provider") == PLAIN and r.get("stats")), None)
    if plain is None:
        return None
    base = (plain.get("stats") or {})["p50"]
    parts = [f"{r['provider']} {r['precision']} {base / p50:.2f}×" for r in rows
             if r is not plain and (p50 := (r.get("stats") or {}).get("p50"))]
    return f"against a plain onnxruntime session ({base * 1e3:.3f} ms): " + ", ".join(parts) if parts else None
