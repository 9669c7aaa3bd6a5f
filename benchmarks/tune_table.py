"""The accuracy-gated table of every trained example, written into docs/benchmarks.md.

    python benchmarks/tune_table.py [--examples mobilenet_v2,silero_vad] [--seconds 1] [--budget 300]
                                    [--objective latency] [--out docs/benchmarks.md]

Each example (default: every trained one below) is copied to a temporary folder, its model made there by its own
make_model.py (from the wheels installed; nothing downloaded), then `gpux tune COPY --table --json` measures it
and its rows go into the `--out` file between the TABLE markers (a file without them gets them appended). The
section's header holds the machine (CPU model, the instruction-set flags that change the figures, cores, load),
the runtimes, and this script's exact command line: a table from another CPU (an AMX Xeon against an AVX-512 EPYC)
is another table, never averaged with this one."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TRAINED = ("mobilenet_v2", "yolov8_detector", "ppocr_recognizer", "silero_vad", "magika_filetype")
BEGIN, END = "<!-- tune-table:begin (benchmarks/tune_table.py writes this part) -->", "<!-- tune-table:end -->"
FLAGS = ("amx_bf16", "amx_int8", "amx_tile", "avx512f", "avx512_bf16", "avx512_vnni", "avx512_fp16", "avx_vnni",
         "avx2", "fma")  # those ONNX Runtime's and OpenVINO's kernels choose between
COLUMNS = ["", "provider", "precision", "options", "batch", "size", "vs fp32", "bound (95 %)", "rows", "p50 ms",
           "per s", "vs plain", "locks", "why"]


def machine() -> dict[str, Any]:
    """The CPU model and the flags of FLAGS it has (Linux /proc/cpuinfo), cores and load."""
    model, flags = "unknown", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    except OSError:
        pass
    return {"cpu": model, "flags": [f for f in FLAGS if f in flags], "cores": len(os.sched_getaffinity(0)),
            "load": os.getloadavg()}


def measured(example: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """`gpux tune --table --json` on a fresh copy of the example, its model made in the copy."""
    src, copy = ROOT / "examples" / example, work / example
    shutil.copytree(src, copy, ignore=shutil.ignore_patterns(".gpux", "gpux.lock.json", "__pycache__", "*.onnx",
                                                              "*.npz"))
    made = subprocess.run([sys.executable, str(copy / "make_model.py"), "--out", str(copy)], capture_output=True,
                          text=True)
    if made.returncode != 0:
        return {"error": f"make_model.py failed: {(made.stderr or made.stdout).strip().splitlines()[-1:]}"}
    cmd = [sys.executable, "-m", "gpux", "tune", str(copy), "--table", "--json", "--seconds", str(args.seconds),
           "--budget", str(args.budget), "--objective", args.objective]
    started = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "GPUX_HOME": str(work / "home")})
    try:
        doc = json.loads(r.stdout)
    except ValueError:
        return {"error": f"gpux tune exited {r.returncode}: {r.stderr.strip().splitlines()[-1:]}"}
    doc["took_s"] = round(time.perf_counter() - started, 1)
    return doc


def _num(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def row_cells(r: dict[str, Any]) -> list[str]:
    metric = "-" if r["metric"] is None or r["value"] is None else \
        f"{r['metric']} {r['value'] * 100:.1f} %" if r["bound"] is not None else f"{r['metric']} {r['value']:.6f}"
    size = "-" if not r["size"] else f"{r['size'] / 1e6:.2f} MB" if r["size"] >= 1e5 else f"{r['size'] / 1e3:.1f} KB"
    return [r["mark"], r["provider"], r["precision"], r["options"] + (f" ({r['role']})" if r["role"] else ""),
            str(r["batch"]), size, metric, "-" if r["bound"] is None else f">= {r['bound'] * 100:.1f} %",
            _num(r["rows"], "d"), _num(r["p50_ms"], ".3f"), _num(r["throughput"], ".1f"),
            "-" if r["vs_plain"] is None else f"{r['vs_plain']:.2f}×", "**tune**" if r["locked"] else "",
            r["detail"].replace("|", "/")[:160]]


def section(example: str, doc: dict[str, Any]) -> list[str]:
    from gpux.bench.table import unreached

    if doc.get("error"):
        return [f"### {example}", "", f"not measured: {doc['error']}", ""]
    search = doc.get("search") or {}
    default = doc.get("default") or {}
    base = doc.get("baseline") or {}
    lines = [f"### {example}", "",
             f"{len(doc['table'])} rows ({sum(map(unreached, doc['candidates']))} int8 refinements not needed or not "
             f"reached left out); measured {search.get('measured')} of {search.get('candidates')} candidates"
             f"{' (partial: --budget spent)' if search.get('partial') else ''} in {doc.get('took_s')} s; untuned "
             f"default: {default.get('provider')} {default.get('precision')}; plain ONNX Runtime p50 "
             f"{_num(base.get('p50_ms'), '.3f')} ms, measured in the same {base.get('rounds')} rounds.", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(row_cells(r)) + " |" for r in doc["table"]]
    return [*lines, ""]


def write(out: Path, body: list[str]) -> None:
    text = out.read_text(encoding="utf-8") if out.is_file() else ""
    block = "\n".join([BEGIN, *body, END])
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    out.write_text(text, encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", default=",".join(TRAINED), help="comma list of examples/ folders")
    parser.add_argument("--seconds", type=float, default=1.0, help="measured seconds per candidate")
    parser.add_argument("--budget", type=float, default=300.0, help="seconds for each example's search")
    parser.add_argument("--objective", choices=("latency", "throughput"), default="latency")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args()
    from gpux.optional import version_of
    from gpux.version import __version__

    host = machine()
    command = "python benchmarks/tune_table.py " + " ".join(sys.argv[1:])
    body = ["", f"Written {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by `{command}` (each example: "
            f"`gpux tune COPY --table --seconds {args.seconds:g} --budget {args.budget:g} --objective "
            f"{args.objective}`).", "",
            f"**Machine: {host['cpu']}**, flags {' '.join(host['flags']) or 'none of ' + ', '.join(FLAGS)}; "
            f"{host['cores']} cores, load average {host['load'][0]:.1f} at the start; gpux {__version__}, "
            f"onnxruntime {version_of('onnxruntime')}, openvino {version_of('openvino')}. Figures from another CPU "
            "(an AMX Xeon runs OpenVINO's fp32 IR at bf16, an AVX-512 EPYC without AMX does not) are another table: "
            "never average them with these.", ""]
    with tempfile.TemporaryDirectory(prefix="gpux-tune-table-") as tmp:
        for example in args.examples.split(","):
            print(f"measuring {example} ...", file=sys.stderr)
            body += section(example, measured(example, args, Path(tmp)))
    write(args.out, body)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
