"""Tables shared by every command: sizes, aligned columns, benchmark results and providers."""

from __future__ import annotations

from collections.abc import Container
from typing import Any


def format_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} GB"


def format_table(headers: list[str], rows: list[list[str]], right: Container[int] = ()) -> str:
    """Plain aligned text: columns two spaces apart, aligned left but for the `right` ones (numbers)."""
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    return "\n".join(line(cells) for cells in [headers, *rows])


def results_table(rows: list[dict[str, Any]]) -> str:
    """A benchmark document's result rows: median, its interval, tail, stalls, throughput, time to ready."""
    def num(v: Any, scale: float = 1.0, fmt: str = ".3f") -> str:
        return "-" if v is None else format(v * scale, fmt)

    staged = any(r.get("stages") for r in rows)  # declared steps: median per stage, then end to end
    head = ["provider", "precision", "status", *(["pre ms", "infer ms", "post ms"] if staged else []),
            "e2e median ms" if staged else "median ms", "95% CI ±%", "p99 ms", "stalls", "throughput/s",
            "time-to-ready ms"]
    body = []
    for r in rows:
        s, ph = r.get("stats") or {}, r.get("phases") or {}
        ci = s.get("median_ci")
        stages = r.get("stages") or {}
        body.append([str(r.get("provider", "")), str(r.get("precision", "")), str(r.get("status", "")),
                     *[num((stages.get(k) or {}).get("p50"), 1e3, ".3f")
                       for k in (("preprocess", "inference", "postprocess") if staged else ())],
                     num(s.get("p50"), 1e3, ".4f"),
                     num(ci and s["p50"] and (ci[1] - ci[0]) / 2 / s["p50"], 100, ".1f"),
                     num(s.get("p99"), 1e3), "-" if not s else str(s.get("stalls", 0)),
                     num(s.get("throughput"), fmt=".1f"), num(ph.get("time_to_ready_s"), 1e3, ".1f")])
    return format_table(head, body, right=range(3, len(head)))  # text columns align left, numbers right


def providers_table(avail: list[dict[str, Any]]) -> str:
    if any("runtime" in a for a in avail):
        rows = [[a["provider"], a.get("runtime") or "", a["status"],
                 a["reason"] + (f" → {a['fix']}" if a.get("fix") else "")] for a in avail]
        return format_table(["provider", "runtime", "status", "detail"], rows)
    rows = [[a["provider"], a["status"], a["reason"] + (f" → {a['fix']}" if a.get("fix") else "")]
            for a in avail]
    return format_table(["provider", "status", "detail"], rows)
