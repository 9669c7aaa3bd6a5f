"""`--report FILE.html` of `gpux run --benchmark` and `gpux tune`: one self-contained page (inline SVG charts and
CSS, no script, nothing fetched) with each row's latency distribution, the speedup of each candidate against
plain ONNX Runtime with its accuracy beside it, the machine, the command line, and the JSON document itself."""

from __future__ import annotations

import html
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpux import report
from gpux.bench.records import Accuracy
from gpux.errors import InputError
from gpux.providers.options import OptionFields

PLAIN_ORT = "plain ONNX Runtime"
FAILED = "failed verification"


@dataclass(kw_only=True)
class Page:
    """What the page shows, read from a benchmark or tune document."""

    kind: str  # benchmark | tune
    title: str
    series: list[Any]  # charts.Series, in the document's order
    reference: str | None  # what the speedups are against; None: no speedup chart
    no_speedup: str = ""  # why there is no speedup chart
    summary: str = ""
    rows: list[list[str]] = field(default_factory=list)  # the measured rows' table
    left_out: list[list[str]] = field(default_factory=list)  # rows not measured and why
    environment: dict[str, Any] = field(default_factory=dict)


def check_report_path(path: str) -> None:
    """Before minutes of measuring: matplotlib is installed and the page's folder can be written."""
    from gpux.optional import require

    require("matplotlib", "report")
    folder = Path(path).resolve().parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"--report {path}: cannot create its folder: {exc.strerror or exc}") from exc
    if not os.access(folder, os.W_OK):
        raise InputError(f"--report {path}: the folder {folder} is not writable")


def write_report(doc: dict[str, Any], path: str, *, kind: str, command: str, name: str) -> None:
    """Write the page of `doc` (a benchmark document or a tune lock) to `path`."""
    from gpux.files import atomic_write_text

    page = tune_page(doc) if kind == "tune" else benchmark_page(doc, name)
    try:
        atomic_write_text(Path(path), render_page(page, doc, command))
        Path(path).chmod(0o644)  # a page to share, not a private file
    except OSError as exc:
        raise InputError(f"--report {path}: cannot write: {exc.strerror or exc}") from exc
    report.info(f"wrote {path}")


def benchmark_page(doc: dict[str, Any], name: str) -> Page:
    """Rows with timings are drawn; speedups are against the cpu fp32 row (ONNX Runtime's CPU EP) when there is
    one and another row to compare."""
    from gpux.bench.charts import Series, slug

    taken: set[str] = set()
    series, table, left = [], [], []
    for r in doc.get("results") or []:
        stats = r.get("stats")
        label = f"{r.get('provider')} {r.get('precision')}"
        if not stats:
            left.append([label, str(r.get("status")), str(r.get("error") or "")])
            if r.get("status") == FAILED:
                series.append(failed_series(slug(label, taken), label, str(r.get("precision")), r.get("accuracy"),
                                            [*(r.get("failures") or ()), str(r.get("error"))][0]))
            continue
        verdict = r.get("verification_status")
        s = Series(key=slug(label, taken), label=label, precision=str(r.get("precision")),
                   ok=r.get("status") == "ok" and verdict not in ("unverified", "failed"), p50=stats["p50"] * 1e3,
                   ci=_pair(stats.get("median_ci"), 1e3), p99=_ms(stats.get("p99"), 1e3),
                   samples=r.get("latencies_ms") or (), accuracy=accuracy_text(verdict, r.get("accuracy")))
        series.append(s)
        table.append((s, r, str(r.get("status")), "; ".join(stats.get("warnings") or ())))
    ref = next((s for s in series if s.label == "cpu fp32" and s.ok), None)
    timed = [s for s in series if s.measured]
    if ref is not None and len(timed) > 1:
        for s in timed:
            s.speedup = _ratio(ref, s)
    why = "" if ref is not None and len(timed) > 1 else (
        "one row measured: nothing to compare (`-p all` measures every provider and precision)" if len(timed) <= 1
        else "no verified cpu fp32 row measured: no ONNX Runtime reference to compare against")
    env = doc.get("environment") or {}
    return Page(kind="benchmark", title=f"gpux run --benchmark: {name}", series=series,
                reference="cpu fp32 (ONNX Runtime CPU EP, this project's options)" if not why else None, no_speedup=why,
                summary=f"{len(timed)} rows measured, {len(left)} not", rows=[_row_cells(*t) for t in table],
                left_out=left, environment=env)


def tune_page(doc: dict[str, Any]) -> Page:
    """Every measured candidate and the plain ONNX Runtime session tune measured beside them; speedups as tune
    measured them (interleaved rounds)."""
    from gpux.bench.charts import Series, slug
    from gpux.machine import environment_facts

    taken: set[str] = set()
    latency = doc.get("objective") == "latency"
    series, table, left = [], [], []
    marks = table_marks(doc)
    for c in doc.get("candidates") or []:
        label = " ".join([str(c.get("provider")), str(c.get("precision")), _options(c.get("options") or {})]).strip()
        if c.get("p50_ms") is None:
            status = " ".join(x for x in (marks.get(_key(c)), str(c.get("status"))) if x)
            left.append([label, status, str(c.get("why") or c.get("error") or "")])
            if c.get("status") == FAILED:
                series.append(failed_series(slug(label, taken), label, str(c.get("precision")), c.get("accuracy"),
                                            str(c.get("why") or "").split("; ")[0]))
            continue
        chosen = str(c.get("why", "")).startswith("chosen")
        vs = c.get("vs_plain_ort")
        locked = "  (tune would lock)" if marks else "  (locked)"
        s = Series(key=slug(label, taken), label=label + (locked if chosen else ""),
                   precision=str(c.get("precision")), ok=c.get("status") == "ok", p50=c["p50_ms"],
                   ci=_pair(c.get("median_ci_ms")), p99=c.get("p99_ms"), samples=c.get("latencies_ms") or (),
                   rounds=[x * 1e3 for x in c.get("round_scores") or ()] if latency else (),
                   speedup=(vs["speedup"], vs["low"], vs["high"]) if vs else None,
                   accuracy=accuracy_text(c.get("verification"), c.get("accuracy")))
        series.append(s)
        status = " ".join(x for x in (marks.get(_key(c)), str(c.get("status"))) if x)
        table.append(_row_cells(s, c, status, str(c.get("why") or "")))
    left += [[r["provider"], f"{r['mark']} {r['status']}", r["detail"]] for r in doc.get("table") or ()
             if r["precision"] == "-"]  # the providers not here
    base = doc.get("baseline") or {}
    if base.get("p50_ms") is not None:
        spread = base.get("round_spread") or []
        series.append(Series(key=slug(PLAIN_ORT, taken), label=PLAIN_ORT, precision="fp32", ok=True, p50=base["p50_ms"],
                             ci=_pair(base.get("median_ci_ms")), p99=base.get("p99_ms"),
                             rounds=spread if latency else ()))
    measured = any(s.speedup for s in series)
    why = "" if measured else str(base.get("error") or "no candidate was measured beside plain ONNX Runtime")
    choice = doc.get("choice")
    verb = "tune would lock" if marks else "locked"
    summary = (f"objective {doc.get('objective')}; {verb} {choice['provider']} {choice['precision']} "
               f"({_options(choice.get('options') or {})})" if choice else
               f"objective {doc.get('objective')}; nothing locked: no candidate passed verification and ran")
    env = {**environment_facts(), "fingerprint": doc.get("fingerprint"), "measured": doc.get("measured"),
           "tuned_in_s": doc.get("tuned_in_s")}
    return Page(kind="tune", title=f"gpux tune: {doc.get('name')}", series=series,
                reference="plain ONNX Runtime (default InferenceSession on the source model)" if measured else None,
                no_speedup=why, summary=summary, rows=table, left_out=left, environment=env)


def _key(c: dict[str, Any]) -> tuple[str, str, str, int]:
    from gpux.bench.candidates import options_text

    opts = options_text(c.get("options") or {}) or "as declared"
    return str(c.get("provider")), str(c.get("precision")), opts, int(c.get("batch") or 1)


def table_marks(doc: dict[str, Any]) -> dict[tuple[str, str, str, int], str]:
    """A `gpux tune --table` document's mark per row (✅ ❎ ❌ ➖), by provider, precision, options and batch; {}
    for a tune lock."""
    return {(r["provider"], r["precision"], r["options"], r["batch"]): r["mark"] for r in doc.get("table") or ()}


def failed_series(key: str, label: str, precision: str, acc: Accuracy | None, failure: str) -> Any:
    """A row that failed verification: in the speedup chart with its accuracy (or its first failure) only."""
    import textwrap

    from gpux.bench.charts import Series

    figures = accuracy_text(FAILED, acc) if acc else f"{FAILED} · {textwrap.shorten(failure, 90, placeholder=' …')}"
    return Series(key=key, label=label, precision=precision, ok=False, p50=0.0, accuracy=figures, measured=False)


def agreement(acc: Accuracy) -> list[tuple[float | None, str]]:
    """(value, name) of each agreement with the FP32 reference: top-1, confident top-1, top-5."""
    return [(acc.get("top1"), "top-1"), (acc.get("top1_confident"), "confident top-1"), (acc.get("top5"), "top-5")]


def accuracy_text(verdict: str | None, acc: Accuracy | None) -> str:
    """`verified · top-1 100% · cosine 0.999998`: the verdict, then the agreement and the least cosine."""
    acc = acc or {}
    parts = [verdict or str(acc.get("status") or "not verified")]
    parts += [f"{name} {v * 100:.3g}%" for v, name in agreement(acc) if v is not None]
    if acc.get("min_cosine") is not None:
        parts.append(f"cosine {acc['min_cosine']:.6f}")
    shown = report.weakest(acc.get("evidence") or [])
    parts += [shown] if shown else []
    parts += [f"loosened: {', '.join(loosened)}"] if (loosened := acc.get("loosened")) else []
    return " · ".join(parts)


def _row_cells(s: Any, row: dict[str, Any], status: str, why: str) -> list[str]:
    acc: Accuracy = row.get("accuracy") or Accuracy()
    judged = f"{acc.get('samples')} {acc.get('data')}" if acc.get("data") else "-"
    ratio = "-" if s.speedup is None else f"{s.speedup[0]:.2f}× ({s.speedup[1]:.2f}–{s.speedup[2]:.2f})"
    return [s.label, status, _num(s.p50), "-" if not s.ci else f"{_num(s.ci[0])}–{_num(s.ci[1])}", _num(s.p99),
            ratio, str(row.get("verification_status") or row.get("verification") or "-"),
            *[_pct(v) for v, _ in agreement(acc)],
            "-" if acc.get("min_cosine") is None else f"{acc['min_cosine']:.6f}", judged, why]


ROW_HEADERS = ["row", "status", "p50 ms", "95% CI of p50", "p99 ms", "speedup (range)", "verification", "top-1",
               "confident top-1", "top-5", "least cosine", "judged on", "why"]


def render_page(page: Page, doc: dict[str, Any], command: str) -> str:
    from gpux.bench.charts import distribution_svg, speedup_svg
    from gpux.version import __version__

    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    meta = {"kind": page.kind, "command": command, "written": when, "gpux": __version__,
            "environment": page.environment,
            "series": [{"id": s.key, "label": s.label, "measured": s.measured} for s in page.series]}
    parts = [f"<h1>{_e(page.title)}</h1>", f"<pre class='cmd'>$ {_e(command)}</pre>",
             f"<p>{_e(page.summary)}. Written {when} by gpux {__version__}.</p>"]
    if page.reference:
        spread = "the least and greatest ratio of a round" if page.kind == "tune" else \
            "from both 95% intervals of the median; rows measured one after another"
        parts += ["<h2>Speed and accuracy</h2>", speedup_svg(page.series, page.reference),
                  f"<p class='note'>Bars: median speedup against {_e(page.reference)}; whiskers: its range "
                  f"({spread}). "
                  "Colour: precision. Hatched: not usable as measured (unverified, failed or fallen back). "
                  "Right: the verification verdict and the agreement with the fp32 reference.</p>"]
    elif page.no_speedup:
        parts.append(f"<p class='note'>No speedup chart: {_e(page.no_speedup)}.</p>")
    if any(s.measured for s in page.series):
        parts += ["<h2>Latency per call</h2>", distribution_svg(page.series),
                  "<p class='note'>Where every call's latency is kept: box from the 25th to the 75th percentile, "
                  "whiskers from the 1st to the 99th, the median marked. Otherwise: the median, the per-round "
                  "medians as dots and a line to p99. Black band: the 95% interval of the median.</p>"]
    if page.rows:
        parts += ["<h2>Rows measured</h2>", _table(ROW_HEADERS, page.rows)]
    if page.left_out:
        parts += ["<h2>Not measured</h2>", _table(["row", "status", "why"], page.left_out)]
    parts += ["<h2>Machine</h2>", _table(["fact", "value"], [[k, v] for k, v in _flat(page.environment)]),
              "<h2>Data</h2>", "<p>The JSON document (what <code>--json</code> prints) is in this file, in "
              "<code>&lt;script type=\"application/json\" id=\"gpux-document\"&gt;</code>; the command line and "
              "machine in <code>id=\"gpux-report\"</code>.</p>",
              _json_block("gpux-document", doc), _json_block("gpux-report", meta)]
    return (f"<!doctype html>\n<html lang='en'><head><meta charset='utf-8'><title>{_e(page.title)}</title>"
            f"<style>{CSS}</style></head><body>\n" + "\n".join(parts) + "\n</body></html>\n")


CSS = ("body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1100px;padding:0 16px;color:#222}"
       "h1{font-size:22px}h2{font-size:17px;margin-top:28px}pre.cmd{background:#f4f4f4;padding:8px 10px;"
       "white-space:pre-wrap;word-break:break-all}svg{max-width:100%;height:auto;display:block}"
       "p.note{color:#555;font-size:12.5px}table{border-collapse:collapse;font-size:12.5px}"
       "td,th{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}th{background:#f4f4f4}")


def _table(headers: list[str], rows: Iterable[list[Any]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _json_block(ident: str, value: Any) -> str:
    # "<" escaped as \u003c: the JSON stays the same and no "</script>" can end the block early
    return (f"<script type='application/json' id='{ident}'>"
            f"{report.json_text(value, indent=None).replace('<', chr(92) + 'u003c')}</script>")


def _flat(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    if isinstance(value, dict):
        return [kv for k, v in value.items() for kv in _flat(v, f"{prefix}{k}.")]
    return [(prefix.rstrip("."), "-" if value is None else str(value))]


def _options(options: OptionFields, prefix: str = "") -> str:
    """`optimization=all, quantization=static`: the options besides the precision the label already says."""
    return ", ".join(_options(v, f"{prefix}{k}.") if isinstance(v, dict) else f"{prefix}{k}={v}"
                     for k, v in options.items() if k != "precision" or prefix)


def _ratio(ref: Any, s: Any) -> tuple[float, float, float]:
    """The reference's median over the row's, bounded by their intervals."""
    (rl, rh), (sl, sh) = ref.ci or (ref.p50, ref.p50), s.ci or (s.p50, s.p50)
    return ref.p50 / s.p50, rl / sh, rh / sl


def _pair(v: Any, scale: float = 1.0) -> tuple[float, float] | None:
    return (v[0] * scale, v[1] * scale) if v and v[0] is not None and v[1] is not None else None


def _ms(v: float | None, scale: float) -> float | None:
    return None if v is None else v * scale


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:.3g}%"


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)
