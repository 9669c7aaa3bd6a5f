"""The benchmark protocol: stop rules, statistics, concurrency, baselines and result documents."""

from __future__ import annotations

import ast
import csv
import io
import json
import os
import sys
import threading
import time

import numpy as np
import pytest

from gpux.bench import protocol as bench
from gpux.bench.protocol import (
    SCHEMA_VERSION,
    Phases,
    Protocol,
    compare_baseline,
    make_document,
    measure,
    result_row,
    summarize,
    to_csv,
)
from gpux.bench.records import Figures
from gpux.machine import environment_facts
from gpux.report.tables import results_table

MS = 1_000_000  # nanoseconds


class FakeClock:
    """Nanosecond clock that moves only when told: by ``tick`` on each read, and by the fake inference."""

    def __init__(self, tick: int = 0) -> None:
        self.t = 1_000 * MS
        self.tick = tick
        self.reads = 0

    def __call__(self) -> int:
        self.reads += 1
        now = self.t
        self.t += self.tick
        return now


class ScriptedInfer:
    """An inference call that takes the next scripted duration (cycling) on a FakeClock."""

    def __init__(self, clock: FakeClock, durations_ns: list[int]) -> None:
        self.clock, self.durations, self.calls = clock, durations_ns, 0

    def __call__(self) -> None:
        self.clock.t += self.durations[self.calls % len(self.durations)]
        self.calls += 1


# --- stop conditions -------------------------------------------------------------------------------

STOP_CASES = {
    # runs reached after 3 calls, 7.5 ms only after 8: time decides
    "count_reached_first": (Protocol(warmup=2, warmup_seconds=0.0045, runs=3, seconds=0.0075), 5, 8),
    # 4.5 ms reached after 5 calls, runs only after 10: count decides
    "time_reached_first": (Protocol(warmup=7, warmup_seconds=0.0005, runs=10, seconds=0.0045), 7, 10),
    "max_runs_cap": (Protocol(warmup=0, warmup_seconds=0, runs=10, seconds=1.0, max_runs=4), 0, 4),
    "max_seconds_cap": (Protocol(warmup=1, warmup_seconds=0, runs=99, seconds=10, max_seconds=0.0055), 1, 6),
}


@pytest.mark.parametrize("name", list(STOP_CASES))
def test_stop_conditions_give_exact_call_counts(name: str) -> None:
    protocol, warm, measured = STOP_CASES[name]
    clock = FakeClock()
    infer = ScriptedInfer(clock, [1 * MS])
    m = measure(infer, protocol, clock=clock)
    assert m.warmup_runs == warm
    assert len(m.latencies_s) == measured
    assert infer.calls == warm + measured
    assert m.warmup_s == pytest.approx(warm * 1e-3)
    assert m.wall_s == pytest.approx(measured * 1e-3)
    assert m.latencies_s == [pytest.approx(1e-3)] * measured
    # Nothing but two clock reads per call, plus one read to open each window.
    assert clock.reads == (1 + 2 * warm if warm else 0) + 1 + 2 * measured


def test_latencies_follow_the_script_and_include_only_the_two_reads() -> None:
    clock = FakeClock(tick=100)
    infer = ScriptedInfer(clock, [1000, 3000, 2000])
    m = measure(infer, Protocol(warmup=0, warmup_seconds=0, runs=4, seconds=0), clock=clock)
    # A call's latency is its duration plus one tick (the end read happens after the start read's tick).
    assert m.latencies_s == pytest.approx([1.1e-6, 3.1e-6, 2.1e-6, 1.1e-6])
    # Each call spans two ticks plus its duration; the window opens one tick before the first start read.
    assert m.wall_s == pytest.approx((4 * 200 + 7000) * 1e-9)


def test_time_only_protocol_stops_on_the_window_not_the_latencies() -> None:
    clock = FakeClock(tick=100)
    infer = ScriptedInfer(clock, [1000])
    m = measure(infer, Protocol(warmup=0, warmup_seconds=0, runs=1, seconds=5.5e-6), clock=clock)
    assert len(m.latencies_s) == 5  # 5 x 1200 ns >= 5500 ns, 4 x 1200 ns is not


def test_real_clock_default() -> None:
    calls = []
    m = measure(lambda: calls.append(1), Protocol(warmup=2, warmup_seconds=0, runs=5, seconds=0))
    assert (m.warmup_runs, len(m.latencies_s), len(calls)) == (2, 5, 7)
    assert m.wall_s > 0 and all(x >= 0 for x in m.latencies_s)


@pytest.mark.parametrize("kwargs", [{"runs": 0}, {"warmup": -1}, {"seconds": -1}, {"max_runs": 0},
                                    {"max_seconds": 0}, {"concurrency": 0}, {"batch": 0}])
def test_protocol_rejects_invalid_values(kwargs: dict) -> None:
    with pytest.raises(ValueError, match="invalid benchmark protocol"):
        Protocol(**kwargs)


# --- statistics ------------------------------------------------------------------------------------

QS = [0, 1, 10, 25, 50, 75, 90, 95, 99, 99.9, 100]


@pytest.mark.parametrize("n", [5, 999, 1000, 2500])
def test_summary_percentiles_and_p99_9_presence(n: int) -> None:
    lat = np.random.default_rng(7).gamma(4.0, 0.001, n).tolist()
    s = summarize(lat, wall_s=sum(lat))
    assert s["count"] == n
    assert s["percentile_method"] == "linear (type 7)"
    for name, q in [("p50", 50), ("p90", 90), ("p95", 95), ("p99", 99)]:
        assert s[name] == pytest.approx(float(np.percentile(lat, q)), rel=1e-12)
    if n >= 1000:
        assert s["p99_9"] == pytest.approx(float(np.percentile(lat, 99.9)), rel=1e-12)
    else:
        assert s["p99_9"] is None
    assert (s["min"], s["max"]) == (min(lat), max(lat))


def test_std_is_sample_std_and_cv_is_relative() -> None:
    lat = [0.001, 0.002, 0.003, 0.004, 0.005]
    s = summarize(lat, wall_s=0.015)
    assert s["mean"] == pytest.approx(0.003)
    assert s["std"] == pytest.approx(float(np.std(lat, ddof=1)))
    assert s["cv_pct"] == pytest.approx(float(np.std(lat, ddof=1)) / 0.003 * 100)
    assert summarize([0.002], wall_s=0.002)["std"] == 0.0


def test_throughput_uses_wall_window_and_batch_not_mean() -> None:
    s = summarize([0.01] * 10, wall_s=0.05, batch=4, concurrency=2)
    assert s["throughput"] == pytest.approx(10 * 4 / 0.05)  # 800/s; 1/mean x batch would say 400/s
    assert (s["batch"], s["concurrency"]) == (4, 2)
    with pytest.raises(ValueError):
        summarize([0.01], wall_s=0)
    with pytest.raises(ValueError):
        summarize([], wall_s=1)


def test_median_ci_is_the_order_statistics_and_covers_95_percent() -> None:
    xs = [float(i) for i in range(1, 101)]
    assert bench.median_ci(xs) == (41.0, 61.0)  # ranks 50 ∓ 1.96·√100/2, 0-based 40 and 60
    assert bench.median_ci([1.0, 2.0, 3.0]) == (1.0, 3.0)  # below 6 samples: the whole range
    rng = np.random.default_rng(7)
    hits = 0
    for _ in range(2000):
        lo, hi = bench.median_ci(sorted(rng.standard_normal(101)))
        hits += lo <= 0.0 <= hi
    assert 0.93 <= hits / 2000 <= 0.975


def test_a_noisy_machine_with_a_precise_median_is_not_warned() -> None:
    rng = np.random.default_rng(1)
    lat = list(1e-3 * rng.lognormal(0, 1.0, 20000))  # CV well over 100 %: spread, not uncertainty
    s = summarize(lat, wall_s=40)
    assert s["cv_pct"] > 100 and s["stable"] and s["warnings"] == []
    lo, hi = s["median_ci"]
    assert lo < s["p50"] < hi and (hi - lo) / 2 / s["p50"] < 0.05
    assert s["mad"] == pytest.approx(1.4826 * float(np.median(np.abs(np.array(lat) - np.median(lat)))))
    assert s["iqr"] == pytest.approx(float(np.percentile(lat, 75) - np.percentile(lat, 25)))


def test_drift_within_a_run_widens_the_interval() -> None:
    lat = [1e-3 + 1e-6 * (i % 5) for i in range(500)] + [1.2e-3 + 1e-6 * (i % 5) for i in range(500)]
    s = summarize(lat, wall_s=1.1)
    lo, hi = s["median_ci"]
    assert lo <= 1.0e-3 + 4e-6 and hi >= 1.2e-3, "both halves' medians are inside"
    assert not s["stable"] and any("measure longer" in w for w in s["warnings"])


def test_an_uncertain_median_says_measure_longer() -> None:
    s = summarize([1e-3, 3e-3, 1.5e-3, 2.5e-3, 1e-3, 4e-3, 2e-3, 1.2e-3], wall_s=0.02)
    assert not s["stable"]
    assert any("measure longer" in w for w in s["warnings"])


@pytest.mark.parametrize("stalled,said", [(30, False), (100, True)])
def test_stalls_are_counted_apart_from_spread(stalled: int, said: bool) -> None:
    lat = [1e-3 * (1 + 0.01 * (i % 7)) for i in range(1000)] + [50e-3] * stalled
    s = summarize(lat, wall_s=2)
    assert s["stalls"] == stalled and s["p50"] == pytest.approx(1.03e-3, rel=0.01)
    assert any("stalled" in w for w in s["warnings"]) is said


def test_phases_time_to_ready() -> None:
    assert Phases(load_s=0.5, first_inference_s=0.25).time_to_ready_s == 0.75
    assert Phases(load_s=0.5).time_to_ready_s is None
    assert Phases(build_s=3.0, load_s=0.5, first_inference_s=0.25).to_dict()["time_to_ready_s"] == 0.75


# --- concurrency -----------------------------------------------------------------------------------


def _sleeper(counter: list[int], i: int, seconds: float = 0.001):
    def call() -> None:
        time.sleep(seconds)
        counter[i] += 1

    return call


def test_concurrency_calls_each_callable_and_pools_latencies() -> None:
    counts = [0, 0, 0]
    infers = [_sleeper(counts, i) for i in range(3)]
    m = measure(infers, Protocol(warmup=3, warmup_seconds=0, runs=30, seconds=0, concurrency=3))
    assert all(c >= 2 for c in counts), counts
    assert sum(counts) == m.warmup_runs + len(m.latencies_s)
    assert 3 <= m.warmup_runs <= 3 + 2  # pooled count; calls in flight finish
    assert 30 <= len(m.latencies_s) <= 30 + 2
    # The window is shared: three workers in parallel take well under the sum of their latencies.
    assert m.wall_s < 0.9 * sum(m.latencies_s)


def test_concurrency_with_one_shared_callable_runs_on_n_threads() -> None:
    seen: set[int] = set()

    def infer() -> None:
        seen.add(threading.get_ident())
        time.sleep(0.001)

    m = measure(infer, Protocol(warmup=0, warmup_seconds=0, runs=30, seconds=0, concurrency=3))
    assert len(seen) == 3
    assert len(m.latencies_s) >= 30


def test_concurrency_respects_max_runs_exactly() -> None:
    counts = [0, 0, 0]
    infers = [_sleeper(counts, i, 0.0005) for i in range(3)]
    m = measure(infers, Protocol(warmup=0, warmup_seconds=0, runs=100, seconds=0, max_runs=10, concurrency=3))
    assert len(m.latencies_s) == 10 == sum(counts)


def test_concurrency_checks_callable_count_and_propagates_errors() -> None:
    with pytest.raises(ValueError, match="2 callables for concurrency 3"):
        measure([lambda: None] * 2, Protocol(concurrency=3))

    def broken() -> None:
        raise RuntimeError("device lost")

    with pytest.raises(RuntimeError, match="device lost"):
        measure(broken, Protocol(warmup=0, warmup_seconds=0, runs=5, seconds=0, concurrency=2))


# --- documents, baselines, rendering ---------------------------------------------------------------


def _stats(p50_ms: float, p99_ms: float, throughput: float, ci_pct: float = 1.0) -> Figures:
    p50 = p50_ms / 1e3
    return {"count": 100, "min": p50_ms / 2e3, "max": p99_ms / 1e3, "mean": p50, "std": 0.0, "cv_pct": 0.0,
            "p50": p50, "p90": p99_ms / 1e3, "p95": p99_ms / 1e3, "p99": p99_ms / 1e3, "p99_9": None,
            "throughput": throughput, "stable": True, "median_ci": [p50 * (1 - ci_pct / 100), p50 * (1 + ci_pct / 100)]}


def _doc(*rows: tuple[str, str, Figures | None, str]) -> dict:
    return make_document([result_row(p, prec, s, Phases(), status=st) for p, prec, s, st in rows])


def _pair(cpu: Figures, cuda: Figures) -> dict:
    return _doc(("cpu", "fp32", cpu, "ok"), ("cuda", "fp16", cuda, "ok"))


BASE = _pair(_stats(1.0, 2.0, 1000.0), _stats(0.5, 0.8, 4000.0))


def test_compare_flags_a_median_regression_past_threshold_and_beyond_both_intervals() -> None:
    cur = _pair(_stats(1.2, 2.0, 1000.0), _stats(0.5, 0.8, 4000.0))
    found = compare_baseline(cur, BASE, 10.0)
    assert len(found) == 1 and "cpu/fp32" in found[0] and "median" in found[0] and "+20.0%" in found[0]
    assert compare_baseline(cur, BASE, 25.0) == []


def test_compare_does_not_fail_on_a_difference_within_noise() -> None:
    wide = _doc(("cpu", "fp32", _stats(1.0, 2.0, 1000.0, ci_pct=30), "ok"))
    cur = _doc(("cpu", "fp32", _stats(1.2, 2.0, 1000.0, ci_pct=30), "ok"))
    notes: list[str] = []
    assert compare_baseline(cur, wide, 10.0, notes=notes) == []
    assert any("within noise" in n for n in notes)


def test_compare_tells_tail_and_throughput_changes_without_gating_on_them() -> None:
    cur = _pair(_stats(1.0, 2.6, 700.0), _stats(0.5, 0.8, 4000.0))
    notes: list[str] = []
    assert compare_baseline(cur, BASE, 10.0, notes=notes) == []
    assert any("p99 +30.0%" in n for n in notes) and any("throughput -30.0%" in n for n in notes)


def test_compare_ignores_improvements() -> None:
    cur = _pair(_stats(0.5, 1.0, 2000.0), _stats(0.25, 0.4, 8000.0))
    assert compare_baseline(cur, BASE, 1.0) == []


def test_compare_notes_rows_missing_from_baseline_and_fails_broken_rows() -> None:
    cur = _doc(("cpu", "int8", _stats(9.0, 9.0, 1.0), "ok"), ("cuda", "fp16", None, "error"))
    notes: list[str] = []
    found = compare_baseline(cur, BASE, 10.0, notes=notes)
    assert found == ["cuda/fp16: status 'error', baseline was 'ok'"]
    assert len(notes) == 1 and "cpu/int8" in notes[0]
    assert compare_baseline(_doc(("cpu", "int8", _stats(9.0, 9.0, 1.0), "ok")), BASE, 10.0) == []


def test_compare_rejects_unknown_schema() -> None:
    with pytest.raises(ValueError, match="schema"):
        compare_baseline({**BASE, "schema": 99}, BASE, 10.0)


def _real_rows() -> list[dict]:
    lat = [1e-3, 1.2e-3, 1.1e-3, 0.9e-3, 1e-3, 1.05e-3]
    phases = Phases(build_s=2.0, load_s=0.3, first_inference_s=0.05, warmup_s=0.2, measure_s=0.1)
    return [
        result_row("cpu", "fp32", summarize(lat, 0.0065, batch=2), phases, latencies_s=lat, model="mlp"),
        result_row("cuda", "fp16", None, Phases(), status="unavailable", error="no CUDA device"),
    ]


def test_json_document_round_trip() -> None:
    doc = make_document(_real_rows(), {"host": environment_facts()})
    text = json.dumps(doc, allow_nan=False)
    back = json.loads(text)
    assert back == doc
    assert back["schema"] == SCHEMA_VERSION == 1
    row = back["results"][0]
    assert set(row) >= {"provider", "precision", "status", "stats", "phases", "latencies_ms"}
    assert row["latencies_ms"] == [1.0, 1.2, 1.1, 0.9, 1.0, 1.05]
    assert row["stats"]["percentile_method"] == "linear (type 7)"
    assert row["phases"]["time_to_ready_s"] == pytest.approx(0.35)
    assert row["model"] == "mlp"


def test_to_csv_header_then_flat_rows() -> None:
    text = to_csv(_real_rows())
    rows = list(csv.reader(io.StringIO(text)))
    header = rows[0]
    assert header[:3] == ["provider", "precision", "status"]
    wanted = {"p50_ms", "p99_ms", "median_ci_low_ms", "mad_ms", "stalls", "throughput_per_s", "cv_pct", "build_s",
              "time_to_ready_s", "artifact_size_bytes", "error"}
    assert wanted <= set(header)
    assert "latencies_ms" not in header
    assert len(rows) == 3
    first, second = (dict(zip(header, r, strict=True)) for r in rows[1:])
    assert first["provider"] == "cpu" and float(first["throughput_per_s"]) == pytest.approx(6 * 2 / 0.0065)
    assert float(first["p50_ms"]) == pytest.approx(1.025)
    assert second["status"] == "unavailable" and second["p50_ms"] == "" and second["error"] == "no CUDA device"


def test_format_table_is_aligned_text() -> None:
    text = results_table(_real_rows())
    lines = text.splitlines()
    assert len(lines) == 3
    columns = ["provider", "precision", "status", "median ms", "95% CI ±%", "p99 ms", "stalls", "throughput/s",
               "time-to-ready ms"]
    assert lines[0].split("  ")[0] == "provider"
    positions = [lines[0].index(c) for c in columns]
    assert positions == sorted(positions)
    assert lines[1].startswith("cpu ") and "350.0" in lines[1] and "1846.2" in lines[1]
    assert lines[2].startswith("cuda") and "-" in lines[2]
    # Right-aligned numeric columns end at the same offset in every line.
    assert len({len(line) for line in lines[:2]}) == 1


def test_environment_facts_are_cheap_stdlib_facts() -> None:
    facts = environment_facts()
    assert facts["logical_cores"] == os.cpu_count()
    assert facts["python"].count(".") == 2
    assert facts["os"]
    if hasattr(os, "sched_getaffinity"):
        assert facts["available_cpus"] == len(os.sched_getaffinity(0))
    json.dumps(facts)


def test_module_imports_only_stdlib_at_module_level() -> None:
    with open(bench.__file__, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    names = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    assert names and names <= set(sys.stdlib_module_names) | {"__future__"}, names
