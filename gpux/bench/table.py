"""`gpux tune --table`: the accuracy-gated table of a project. One row per candidate tune measured (every provider
here × the precisions and options its row tries × batch sizes for throughput) and one per provider not here; each
row ✅ verified (its judged rows show every floor), ❎ built but not shown to keep the answers (the floor and the
rows), ❌ could not build or run (the reason), with its artifact's size, the task metric against fp32 with its
one-sided bound and row count, p50 and throughput, its ratio to a plain ONNX Runtime session measured in the same
rounds, and the row tune would lock. No lock is written."""

from __future__ import annotations

import csv
import io
from typing import Any, TypedDict

from gpux import report
from gpux.bench.candidates import options_text
from gpux.config.load import Project
from gpux.documents import RateDoc

WHY_WIDTH = 100  # the why column, cut at a word; --json and --csv keep it whole
VERIFIED, KEPT_NOT, FAILED, NOT_MEASURED = "✅", "❎", "❌", "➖"


class TableRow(TypedDict):
    """One row of the table, as --json and --csv write it."""

    mark: str  # ✅ ❎ ❌ ➖
    status: str  # verified | failed verification | unverified | could not run | not measured
    provider: str
    precision: str
    options: str
    batch: int
    size: int | None  # the artifact's bytes
    metric: str | None  # the task metric nearest its floor (`confident top-1`), else `cosine`
    value: float | None  # against fp32
    bound: float | None  # its one-sided 95 % lower bound
    floor: float | None
    rows: int | None  # the judged rows
    p50_ms: float | None
    throughput: float | None
    vs_plain: float | None  # the median round ratio over the plain session (>1: faster)
    locked: bool  # the row tune would lock
    role: str  # "default": the untuned default; "lock": the lock in force; else ""
    detail: str  # which floor failed and by how many rows, what is unshown, or why it could not run


def nearest(rates: list[RateDoc]) -> RateDoc | None:
    return min(rates, key=lambda w: w["bound"] - w["floor"]) if rates else None


def detail_of(c: dict[str, Any], rates: list[RateDoc]) -> str:
    """Which floor a ❎ row misses and by how many rows; why a ❌ row could not run."""
    if c["status"] == "failed verification":
        missed = [w for w in rates if w["observed"] < w["floor"]]
        said = [f"{w['output']}: {w['label']} {report.percent(w['observed'])} < {report.percent(w['floor'])} floor: "
                f"{w['rows'] - w['agree']} of {w['rows']} rows disagree (the floor allows "
                f"{int(w['rows'] * (1 - w['floor']) + 1e-9)})" for w in missed]
        return "; ".join(said) or str(c.get("why") or "")
    return str(c.get("why") or c.get("error") or "")


def row_of(c: dict[str, Any]) -> TableRow:
    acc = c.get("accuracy") or {}
    rates: list[RateDoc] = list(acc.get("evidence") or [])
    w = nearest(rates)
    if c["status"] == "failed verification" and not any(r["observed"] < r["floor"] for r in rates):
        w = None  # it failed on a continuous metric: the least cosine is the figure to show
    shown = all(r["shown"] for r in rates)  # ✅ only where the judged rows show every floor
    verified = c.get("verification") == "verified" and c["status"] == "ok" and shown
    if c.get("p50_ms") is not None:
        mark, status = (VERIFIED, "verified") if verified else (KEPT_NOT, "unverified")
    elif c["status"] == "failed verification":
        mark, status = KEPT_NOT, "failed verification"
    elif c["status"] in ("over budget", "not needed", "too slow"):
        mark, status = NOT_MEASURED, "not measured"
    else:
        mark, status = FAILED, "could not run"
    vs = c.get("vs_plain_ort")
    return {"mark": mark, "status": status, "provider": c["provider"], "precision": c["precision"],
            "options": options_text(c.get("options") or {}) or "as declared", "batch": int(c.get("batch") or 1),
            "size": c.get("size"),
            "metric": w["label"] if w else ("cosine" if acc.get("min_cosine") is not None else None),
            "value": w["observed"] if w else acc.get("min_cosine"), "bound": w["bound"] if w else None,
            "floor": w["floor"] if w else None, "rows": w["rows"] if w else acc.get("samples"),
            "p50_ms": c.get("p50_ms"), "throughput": c.get("throughput"), "vs_plain": vs["paired"] if vs else None,
            "locked": str(c.get("why") or "").startswith("chosen"), "role": c.get("role") or "",
            "detail": "" if mark == VERIFIED else detail_of(c, rates)}


def absent_rows(project: Project, lock: dict[str, Any]) -> list[TableRow]:
    """A ❌ row per provider with tune rows that has no candidate here, saying why (its probe, runtime.supported)."""
    from gpux.providers import probe_for, registry

    tried = {c["provider"] for c in lock["candidates"]}
    supported = project.config.runtime.supported
    out: list[TableRow] = []
    for name, row in registry().items():
        if name in tried:
            continue
        avail = probe_for(project, name)
        why = f"not in runtime.supported ({', '.join(supported)})" if supported and name not in supported else \
            f"{avail.reason}" + (f" → {avail.fix}" if avail.fix else "") if not avail.ok else \
            "gpux tune has no rows for it" if not row.tune else "not asked (--providers, --precisions)"
        out.append({"mark": FAILED, "status": "could not run", "provider": name, "precision": "-", "options": "",
                    "batch": 1, "size": None, "metric": None, "value": None, "bound": None, "floor": None,
                    "rows": None, "p50_ms": None, "throughput": None, "vs_plain": None, "locked": False, "role": "",
                    "detail": why})
    return out


def unreached(c: dict[str, Any]) -> bool:
    """A refinement that was not needed, or not reached by the budget: its plain int8 row says why (--json and the
    lock's `search` still list it)."""
    return c["status"] == "not needed" or (bool(c.get("refines")) and c["status"] == "over budget")


def table_of(project: Project, lock: dict[str, Any]) -> list[TableRow]:
    """Every candidate's row but refinements not needed or not reached, then the providers with none."""
    return [row_of(c) for c in lock["candidates"] if not unreached(c)] + absent_rows(project, lock)


def _num(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def cells(r: TableRow) -> list[str]:
    from gpux.report import tables

    metric = "-" if r["metric"] is None or r["value"] is None else \
        f"{r['metric']} {report.percent(r['value']) if r['bound'] is not None else format(r['value'], '.6f')}"
    return [r["mark"], r["provider"], r["precision"], r["options"] + (f" ({r['role']})" if r["role"] else ""),
            str(r["batch"]),
            tables.format_size(r["size"]) if r["size"] else "-", metric,
            "-" if r["bound"] is None else f">= {report.percent(r['bound'])}", _num(r["rows"], "d"),
            _num(r["p50_ms"], ".4f"), _num(r["throughput"], ".1f"), "-" if r["vs_plain"] is None else
            f"{r['vs_plain']:.2f}×", "◀ tune" if r["locked"] else "", r["detail"]]


HEADERS = ["", "provider", "precision", "options", "batch", "size", "vs fp32", "bound (95 %)", "rows", "p50 ms",
           "per s", "vs plain", "locks", "why"]


def render_table(lock: dict[str, Any]) -> None:
    """The table on stdout; the legend, the baseline and the floor on stderr."""
    import textwrap

    from gpux.bench.floor import said
    from gpux.report import tables

    rows = [cells(r) for r in lock["table"]]
    print(tables.format_table(HEADERS, [[*r[:-1], textwrap.shorten(r[-1], WHY_WIDTH, placeholder=" …")] for r in rows],
                              right=(4, 5, 8, 9, 10, 11)))
    report.info("✅ verified (the judged rows show every floor)  ❎ built, not shown to keep the answers  "
                "❌ could not build or run  ➖ not measured; vs fp32: the task metric nearest its floor (else the "
                "least cosine), bound: its one-sided 95 % lower bound over the rows")
    base = lock.get("baseline") or {}
    if base.get("p50_ms") is not None:
        report.info(f"vs plain: the median round ratio over a plain ONNX Runtime session (p50 {base['p50_ms']:.4f} ms) "
                    f"measured in the same {base.get('rounds')} rounds; objective {lock['objective']}")
    left = sum(unreached(c) for c in lock["candidates"])
    if left:
        report.info(f"{left} int8 refinements not needed or not reached are left out of the table (--json lists them)")
    for line in said(lock):
        report.info(line)


def to_csv(rows: list[TableRow]) -> str:
    buf = io.StringIO()
    fields = list(TableRow.__annotations__)
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()
