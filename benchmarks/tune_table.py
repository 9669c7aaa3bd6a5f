"""The accuracy-gated table of every trained example, written into docs/benchmarks.md, with two checks of tune.

    python benchmarks/tune_table.py [--examples mobilenet_v2,silero_vad] [--seconds 1] [--budget 300]
                                    [--small-budget 20] [--objective latency] [--out docs/benchmarks.md]
                                    [--save FOLDER]

Each example (default: every trained one below) is copied to a temporary folder, its model made there by its own
make_model.py (from the wheels installed; nothing downloaded). There `gpux tune COPY --budget SMALL` first locks
what a search too short to measure every candidate picks; then `gpux tune COPY --table --json` (the `--budget`
search, no lock written) measures every candidate again, that lock and the untuned default among them, in the same
interleaved rounds. From that one run come the two checks: the short search's lock against the untuned default
(it must not run slower: at least 0.95 of its speed) and the table's pick against the fastest verified row (within
7 %: at least 0.93). Both are printed per example and written under its table.

The example's section replaces its earlier one between the TABLE markers of the `--out` file (the others stay; a
file without the markers gets them appended). Each section says when, by which command, on which CPU and at which
load it was measured; the part's header holds the machine (CPU model, the instruction-set flags that change the
figures, cores) and the runtimes: a table from another CPU (an AMX Xeon against an AVX-512 EPYC) is another table,
never averaged with this one."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TRAINED = ("mobilenet_v2", "yolov8_detector", "ppocr_recognizer", "ppocr_detector", "picodet_layout", "silero_vad",
           "magika_filetype", "classic_ml")
BEGIN, END = "<!-- tune-table:begin (benchmarks/tune_table.py writes this part) -->", "<!-- tune-table:end -->"
COLUMNS = ["", "provider", "precision", "options", "batch", "size", "vs fp32", "bound (95 %)", "rows", "p50 ms",
           "per s", "vs plain", "locks", "why"]
# How an example's make_model.py is told the folder to write into (default: `--out FOLDER`); those that always
# write beside themselves (the copy) take nothing.
INTO: dict[str, tuple[str, ...]] = {"classic_ml": ("{}",), "ppocr_detector": (), "picodet_layout": ()}
FLOOR_AT_LEAST, PICK_AT_LEAST = 0.95, 0.93  # the short search's lock / the default; the pick / the fastest verified


def machine() -> dict[str, Any]:
    """The CPU model and the flags its kernels choose between (gpux.machine), cores and load."""
    from gpux.machine import CPU_FLAGS, cpu_flags, cpu_model

    return {"cpu": cpu_model(), "flags": list(cpu_flags()), "known": CPU_FLAGS, "cores": len(os.sched_getaffinity(0)),
            "load": os.getloadavg()}


def tuned(copy: Path, work: Path, args: argparse.Namespace, *extra: str) -> dict[str, Any]:
    """`gpux tune COPY --json` with `extra`: its document, or {"error": why}."""
    cmd = [sys.executable, "-m", "gpux", "tune", str(copy), "--json", "--seconds", str(args.seconds),
           "--objective", args.objective, *extra]
    started = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "GPUX_HOME": str(work / "home")})
    try:
        doc = json.loads(r.stdout)
    except ValueError:
        return {"error": f"gpux tune exited {r.returncode}: {r.stderr.strip().splitlines()[-1:]}"}
    doc["took_s"], doc["exit"] = round(time.perf_counter() - started, 1), r.returncode
    return doc


def measured(example: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """On a fresh copy of the example, its model made in the copy: the short search (it writes the lock), then
    `gpux tune --table` (no lock written), which measures that lock beside the untuned default. The table's
    document, the short search's under `short`."""
    src, copy = ROOT / "examples" / example, work / example
    shutil.copytree(src, copy, ignore=shutil.ignore_patterns(".gpux", "gpux.lock.json", "__pycache__", "*.onnx",
                                                              "*.npz"))
    into = [a.format(copy) for a in INTO.get(example, ("--out", "{}"))]
    made = subprocess.run([sys.executable, str(copy / "make_model.py"), *into], capture_output=True, text=True)
    if made.returncode != 0:
        return {"error": f"make_model.py failed: {(made.stderr or made.stdout).strip().splitlines()[-1:]}"}
    short = tuned(copy, work, args, "--budget", str(args.small_budget))
    doc = tuned(copy, work, args, "--table", "--budget", str(args.budget))
    doc["short"] = short
    return doc


def _num(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def _speed(r: dict[str, Any]) -> float | None:
    """A table row's speed, higher faster: its median round ratio over the plain session, else 1/p50."""
    if r.get("vs_plain"):
        return float(r["vs_plain"])
    return 1 / r["p50_ms"] if r.get("p50_ms") else None


def _label(r: dict[str, Any]) -> str:
    return f"{r['provider']} {r['precision']} ({r['options']})" + (f" batch {r['batch']}" if r["batch"] > 1 else "")


def checks(doc: dict[str, Any]) -> dict[str, Any]:
    """The two ratios, from the table's one run: (a) the short search's lock (the row of role `lock`; the
    default's own row where that search kept the default) over the untuned default; (b) the table's pick over
    the fastest verified row. Each None where its rows did not run; `short`: what the short search left out."""
    from gpux.bench import rounds
    from gpux.bench.table import unreached

    scores = {id(row): c.get("round_scores") or [] for c, row in
              zip([c for c in doc.get("candidates") or () if not unreached(c)], doc.get("table") or (), strict=False)}
    rows = [r for r in doc.get("table") or () if r.get("p50_ms") is not None]
    by_role = {r["role"]: r for r in rows if r["role"]}
    short = doc.get("short") or {}
    search = short.get("search") or {}
    default = by_role.get("default")
    kept_default = bool((short.get("choice") or {}).get("default"))
    lock = default if kept_default else by_role.get("lock")
    pick = next((r for r in rows if r["locked"]), None)
    verified = [r for r in rows if r["status"] == "verified" and _speed(r)]
    fastest = max(verified, key=lambda r: _speed(r) or 0.0, default=None)

    def quotient(a: dict[str, Any] | None, b: dict[str, Any] | None) -> float | None:
        sa, sb = (_speed(a), _speed(b)) if a and b else (None, None)
        return round(sa / sb, 3) if sa and sb else None

    def ratio(a: dict[str, Any] | None, b: dict[str, Any] | None) -> float | None:
        """How many times faster a ran than b: the median of the rounds' own ratios (each round's load divided out,
        what tune ranks by), else the quotient of their `vs plain`."""
        if a is b and a is not None:
            return 1.0
        per_round = rounds.ratios(scores.get(id(b), []), scores.get(id(a), []), doc.get("objective") or "latency") \
            if a and b else []
        return round(statistics.median(per_round), 3) if per_round else quotient(a, b)

    return {"floor": ratio(lock, default), "lock": _label(lock) if lock else None, "kept_default": kept_default,
            "default": _label(default) if default else None, "short_error": short.get("error"),
            "short_exit": short.get("exit"), "measured": search.get("measured"), "candidates": search.get("candidates"),
            "unmeasured": len(search.get("unmeasured") or ()), "partial": bool(search.get("partial")),
            "pick_ratio": ratio(pick, fastest), "pick_quotient": quotient(pick, fastest),
            "pick": _label(pick) if pick else None,
            "fastest": _label(fastest) if fastest else None}


def checks_text(c: dict[str, Any], args: argparse.Namespace) -> list[str]:
    """The checks as the section and stderr say them."""
    if c["short_error"]:
        a = f"(a) the short search failed: {c['short_error']}"
    else:
        kept = "the untuned default itself" if c["kept_default"] else c["lock"] or \
            f"nothing (it exited {c['short_exit']}: no candidate measured passed verification)"
        verdict = "-" if c["floor"] is None else "kept" if c["floor"] >= FLOOR_AT_LEAST else "**missed**"
        rest = (c["candidates"] or 0) - (c["measured"] or 0) - c["unmeasured"]
        cut = f"{c['unmeasured']} cut short by the budget, each named in its summary and --json" if c["partial"] \
            else "not cut short"
        a = (f"(a) `gpux tune --budget {args.small_budget:g}` measured {c['measured']} of {c['candidates']} "
             f"candidates ({cut}{f'; {rest} ended before measuring, its --json says why' if rest > 0 else ''}) and "
             f"locked {kept}; in the "
             f"table's rounds it runs at **{_num(c['floor'], '.2f')}×** the untuned default {c['default']} (at least "
             f"{FLOOR_AT_LEAST}: {verdict})")
    verdict = "-" if c["pick_ratio"] is None else "kept" if c["pick_ratio"] >= PICK_AT_LEAST else "**missed**"
    if c["fastest"] is None:
        b = f"(b) no row is ✅ (verified), so the table's pick ({c['pick']}) has no fastest verified row to be held to"
    else:
        b = (f"(b) the table's pick ({c['pick']}, `--budget {args.budget:g}`) runs at "
             f"**{_num(c['pick_ratio'], '.2f')}×** the fastest verified row ({c['fastest']}) (at least "
             f"{PICK_AT_LEAST}: {verdict}; the median of the rounds' own ratios; their `vs plain` divide to "
             f"{_num(c.get('pick_quotient'), '.2f')})")
    return [a, b]


def row_cells(r: dict[str, Any]) -> list[str]:
    metric = "-" if r["metric"] is None or r["value"] is None else \
        f"{r['metric']} {r['value'] * 100:.1f} %" if r["bound"] is not None else f"{r['metric']} {r['value']:.6f}"
    size = "-" if not r["size"] else f"{r['size'] / 1e6:.2f} MB" if r["size"] >= 1e5 else f"{r['size'] / 1e3:.1f} KB"
    return [r["mark"], r["provider"], r["precision"], r["options"] + (f" ({r['role']})" if r["role"] else ""),
            str(r["batch"]), size, metric, "-" if r["bound"] is None else f">= {r['bound'] * 100:.1f} %",
            _num(r["rows"], "d"), _num(r["p50_ms"], ".3f"), _num(r["throughput"], ".1f"),
            "-" if r["vs_plain"] is None else f"{r['vs_plain']:.2f}×", "**tune**" if r["locked"] else "",
            r["detail"].replace("|", "/")[:160]]


def section(example: str, doc: dict[str, Any], said: str, args: argparse.Namespace) -> list[str]:
    """The example's part: `said` (when, which command, CPU, load), its table and the two checks."""
    from gpux.bench.table import unreached

    if doc.get("error"):
        return [f"### {example}", "", said, "", f"not measured: {doc['error']}", ""]
    search = doc.get("search") or {}
    default = doc.get("default") or {}
    base = doc.get("baseline") or {}
    lines = [f"### {example}", "", said, "",
             f"{len(doc['table'])} rows ({sum(map(unreached, doc['candidates']))} int8 refinements not needed or not "
             f"reached left out); measured {search.get('measured')} of {search.get('candidates')} candidates"
             f"{' (partial: --budget spent)' if search.get('partial') else ''} in {doc.get('took_s')} s; untuned "
             f"default: {default.get('provider')} {default.get('precision')}; plain ONNX Runtime p50 "
             f"{_num(base.get('p50_ms'), '.3f')} ms, measured in the same {base.get('rounds')} rounds.", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(row_cells(r)) + " |" for r in doc["table"]]
    return [*lines, "", "Checks, both from this table's rounds: " + "; ".join(checks_text(checks(doc), args)) + ".",
            ""]


def sections_of(block: str) -> tuple[list[str], dict[str, list[str]]]:
    """A written part's header lines and its sections by example (each from its `### NAME` line on)."""
    head: list[str] = []
    found: dict[str, list[str]] = {}
    current: list[str] = head
    for line in block.splitlines():
        if line.startswith("### "):
            current = found.setdefault(line[4:].strip(), [])
        current.append(line)
    return head, found


def write(out: Path, header: list[str], measured_now: dict[str, list[str]]) -> None:
    """The part between the markers: `header`, then each section already there (in its place, replaced by a new
    one of the same example) and the new ones after them."""
    text = out.read_text(encoding="utf-8") if out.is_file() else ""
    if BEGIN in text and END in text:
        before, rest = text.split(BEGIN, 1)
        old, after = rest.split(END, 1)
    else:
        before, old, after = text.rstrip("\n") + "\n\n", "", "\n"
    kept = sections_of(old)[1]
    merged = {**kept, **measured_now}  # an example measured now keeps its place
    body = [*header, *[line for lines in merged.values() for line in lines]]
    while body and not body[-1]:
        body.pop()
    out.write_text(before + "\n".join([BEGIN, *body, "", END]) + after, encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--examples", default=",".join(TRAINED), help="comma list of examples/ folders")
    parser.add_argument("--seconds", type=float, default=1.0, help="measured seconds per candidate")
    parser.add_argument("--budget", type=float, default=300.0, help="seconds for each example's table search")
    parser.add_argument("--small-budget", type=float, default=20.0,
                        help="seconds for the short search whose lock check (a) holds to the default")
    parser.add_argument("--objective", choices=("latency", "throughput"), default="latency")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--save", type=Path, help="folder to write each example's two tune documents into (NAME.json)")
    args = parser.parse_args()
    from gpux.optional import version_of
    from gpux.version import __version__

    host = machine()
    command = "python benchmarks/tune_table.py " + " ".join(sys.argv[1:])
    flags = " ".join(host["flags"]) or "none of " + ", ".join(host["known"])
    header = ["", f"**Machine: {host['cpu']}**, flags {flags}; "
              f"{host['cores']} cores; gpux {__version__}, onnxruntime {version_of('onnxruntime')}, openvino "
              f"{version_of('openvino')}. Each section says when, by which command and at which load average it was "
              "measured. Figures from another CPU (an AMX Xeon runs OpenVINO's fp32 IR at bf16, an AVX-512 EPYC "
              "without AMX does not) are another table: never average them with these.", ""]
    done: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory(prefix="gpux-tune-table-") as tmp:
        for example in args.examples.split(","):
            load = os.getloadavg()[0]
            said = (f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {host['cpu']} at a load "
                    f"average of {load:.1f} by `{command}`: `gpux tune COPY --seconds {args.seconds:g} --budget "
                    f"{args.small_budget:g}` (the short search, its lock kept), then `gpux tune COPY --table "
                    f"--seconds {args.seconds:g} --budget {args.budget:g} --objective {args.objective}`.")
            print(f"measuring {example} (load average {load:.1f}) ...", file=sys.stderr)
            doc = measured(example, args, Path(tmp))
            if args.save:
                args.save.mkdir(parents=True, exist_ok=True)
                (args.save / f"{example}.json").write_text(json.dumps(doc, indent=1), encoding="utf-8")
            done[example] = section(example, doc, said, args)
            if not doc.get("error"):
                for line in checks_text(checks(doc), args):
                    print(f"{example}: {line}", file=sys.stderr)
            write(args.out, header, done)  # after each example: an interrupted run keeps what it measured
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
