"""The charts of an HTML report, drawn with matplotlib as inline SVG (text as paths: no font, no script, no
network): each row's latency distribution, and each candidate's speedup with its accuracy beside it.

Every chart element of a row carries an SVG id (matplotlib's `gid`) made of the chart and the row's `key`, so
a reader (or a test) finds one series per candidate in the page."""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

# one color per precision (the same in both charts); other labels (e.g. "fp32 (onnxruntime EP)") by their first word
COLORS = {"fp32": "#4c72b0", "fp16": "#dd8452", "bf16": "#55a868", "int8": "#c44e52"}
OTHER = "#8172b3"
GRAY = "#555555"
STYLE = {"svg.fonttype": "path", "font.size": 9, "axes.spines.top": False, "axes.spines.right": False}
ROW_INCHES = 0.42
WIDTH_INCHES = 7.5
TEXT_INCHES = 4.0  # the speedup chart's accuracy column


@dataclass(kw_only=True)
class Series:
    """One measured row as the charts draw it; latencies in ms."""

    key: str  # unique, [a-z0-9-]: the SVG ids of its elements
    label: str
    precision: str
    ok: bool  # measured and usable (not a fallback, not unverified or failed)
    p50: float
    ci: tuple[float, float] | None = None  # 95 % interval of the median
    p99: float | None = None
    samples: Sequence[float] = ()  # every call's latency, where the document keeps them
    rounds: Sequence[float] = ()  # per-round medians (tune)
    speedup: tuple[float, float, float] | None = None  # (ratio, low, high) against the reference
    accuracy: str = ""  # the verdict and its figures, shown beside the speedup
    measured: bool = True  # False: a row that failed verification, in the speedup chart with its accuracy only


def slug(text: str, taken: set[str]) -> str:
    """A unique id part for `text`: lowercase words joined by dashes (`cpu-fp32-optimization-all`)."""
    base = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "row"
    key, n = base, 1
    while key in taken:
        n += 1
        key = f"{base}-{n}"
    taken.add(key)
    return key


def color(precision: str) -> str:
    return COLORS.get(precision.split(" ")[0], OTHER)


def unit_of(series: Sequence[Series]) -> tuple[str, float]:
    """("µs", 1000) when every row's tail stays under a millisecond, else ("ms", 1)."""
    top = max((s.p99 or s.p50 for s in series), default=1.0)
    return ("µs", 1e3) if top < 1.0 else ("ms", 1.0)


def distribution_svg(series: Sequence[Series]) -> str:
    """One row per series: a box from the 25th to the 75th percentile with whiskers from the 1st to the 99th
    and the median marked, where the calls' latencies are kept; else the median's interval, the per-round
    medians as dots and a line to p99. The black band: the 95 % interval of the median. Ids: `latency-KEY`
    (the box or the interval) per series, `latency-KEY_PART` for its other parts."""
    series = [s for s in series if s.measured]
    with _style("latency"):
        unit, scale = unit_of(series)
        fig, ax = _figure(len(series))
        lows = [_distribution_row(ax, y, s, scale) for y, s in enumerate(series)]
        highs = [(s.p99 or s.p50) * scale for s in series]
        if lows and min(lows) > 0 and max(highs) / min(lows) > 30:
            from matplotlib.ticker import FuncFormatter, NullFormatter

            ax.set_xscale("log")
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))  # 0.01, not 10⁻²
            ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(f"latency per call ({unit})")
        _rows(ax, series)
        return _svg(fig)


def _distribution_row(ax: Any, y: int, s: Series, scale: float) -> float:
    """Draw one series at row y; its lowest point drawn."""
    import numpy as np
    from matplotlib.colors import to_rgba

    c, key = color(s.precision), f"latency-{s.key}"
    if len(s.samples):
        p1, q1, med, q3, p99 = (float(v) for v in np.percentile(np.asarray(s.samples) * scale, [1, 25, 50, 75, 99]))
        ax.hlines(y, p1, p99, colors=c, linewidth=1.2, gid=f"{key}_whiskers")
        low, left, width = p1, q1, q3 - q1
    else:
        med = s.p50 * scale
        lo, hi = (x * scale for x in (s.ci or (s.p50, s.p50)))
        if s.p99 is not None:
            ax.hlines(y, med, s.p99 * scale, colors=c, linewidth=1.2, gid=f"{key}_tail")
        if s.rounds:
            ax.plot([r * scale for r in s.rounds], [y] * len(s.rounds), "o", color=c, markersize=3.5,
                    markeredgecolor="white", markeredgewidth=0.5, gid=f"{key}_rounds", zorder=3)
        low, left, width = lo, lo, hi - lo
    box = ax.barh(y, max(width, 1e-12), left=left, height=0.5, color=to_rgba(c, 0.35 if s.ok else 0.15), edgecolor=c,
                  hatch=None if s.ok else "///")
    box.patches[0].set_gid(key)
    ax.vlines(med, y - 0.25, y + 0.25, colors=c, linewidth=2.2, gid=f"{key}_median")
    if s.ci:
        ax.hlines(y, s.ci[0] * scale, s.ci[1] * scale, colors="black", linewidth=3, alpha=0.6, gid=f"{key}_ci")
    return low


def speedup_svg(series: Sequence[Series], reference: str) -> str:
    """A bar per series with a speedup against `reference` (1×, dashed), its interval as an error bar, bars of
    rows not usable (unverified, fallen back) hatched, and each row's accuracy written to the right; rows that
    failed verification (not measured) have their accuracy only. Ids: `speedup-KEY` per bar."""
    from matplotlib.colors import to_rgba

    rows = [s for s in series if s.speedup is not None or not s.measured]
    with _style("speedup"):
        fig, ax = _figure(len(rows), TEXT_INCHES)
        fig.subplots_adjust(right=1 - TEXT_INCHES / (WIDTH_INCHES + TEXT_INCHES))  # the accuracy column
        for y, s in enumerate(rows):
            if s.speedup is None:
                ax.text(1.02, y, f"not measured   {s.accuracy}", transform=ax.get_yaxis_transform(), va="center",
                        fontsize=8.5, color=GRAY, gid=f"speedup-{s.key}_text")
                continue
            x, lo, hi = s.speedup
            c = color(s.precision)
            bar = ax.barh(y, x, height=0.6, color=to_rgba(c, 0.85 if s.ok else 0.3), edgecolor=c,
                          hatch=None if s.ok else "///")
            bar.patches[0].set_gid(f"speedup-{s.key}")
            ax.errorbar(x, y, xerr=[[max(x - lo, 0)], [max(hi - x, 0)]], fmt="none", ecolor=GRAY, capsize=3,
                        linewidth=1)
            ax.text(1.02, y, f"{x:.2f}×   {s.accuracy}", transform=ax.get_yaxis_transform(), va="center",
                    fontsize=8.5, color="black" if s.ok else GRAY)
        ax.axvline(1.0, linestyle="--", color=GRAY, linewidth=1)
        ax.set_xlim(0, max([1.1, *[(s.speedup or (0, 0, 0))[2] * 1.08 for s in rows]]))
        ax.set_xlabel(f"speedup against {reference} (higher is faster)")
        _rows(ax, rows)
        return _svg(fig)


@contextlib.contextmanager
def _style(name: str) -> Iterator[None]:
    """The report's rcParams while a chart is made and saved (artists read them as they are created)."""
    import matplotlib

    rc: Any = {**STYLE, "svg.hashsalt": f"gpux-{name}"}
    with matplotlib.rc_context(rc):
        yield


def _figure(n: int, extra_width: float = 0.0) -> tuple[Any, Any]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(WIDTH_INCHES + extra_width, 0.9 + ROW_INCHES * max(n, 1)))
    return fig, fig.add_subplot()


def _rows(ax: Any, series: Sequence[Series]) -> None:
    ax.set_yticks(range(len(series)), [s.label for s in series])
    for tick, s in zip(ax.get_yticklabels(), series, strict=True):
        tick.set_color("black" if s.ok else GRAY)
    ax.set_ylim(len(series) - 0.5, -0.5)  # the first row on top
    ax.grid(axis="x", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)


def _svg(fig: Any) -> str:
    """The figure as an <svg> element for an HTML page: no XML prolog, no doctype, no metadata block."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", pad_inches=0.1, metadata={"Date": None})
    text = re.sub(r"<metadata>.*?</metadata>", "", buf.getvalue(), flags=re.S)
    return text[text.index("<svg"):]
