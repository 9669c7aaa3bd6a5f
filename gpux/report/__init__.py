"""Renders results for people (text) and machines (JSON): outputs, attempts, artifacts, providers."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from gpux.documents import (
    ArtifactRow,
    AttemptDoc,
    BuildDoc,
    OutputEntry,
    OutputMetrics,
    PlanDoc,
    RateDoc,
    SessionReport,
    SpeedDoc,
    VerificationDoc,
)
from gpux.report.tables import format_size, format_table

if TYPE_CHECKING:
    from gpux.arrays import Named
    from gpux.config.load import Project
    from gpux.providers.row import Availability


@dataclass
class Invocation:
    """One command line's rendering state: made by `gpux.cli.main`, in force while its command runs (`invoked`)."""

    args: list[str] | None = None  # its words, as a --report page shows them (None: sys.argv)
    verbose: bool = False  # -v
    emitted: bool = False  # its JSON document is out: a failure after it adds none


# the Invocation of the command running in this thread or task; set and reset by `invoked`, nothing outlives it
_INVOKED: ContextVar[Invocation | None] = ContextVar("gpux_invocation", default=None)


@contextmanager
def invoked(inv: Invocation) -> Iterator[Invocation]:
    """`inv` is the command line's Invocation while the block runs (the CLI's commands run inside one)."""
    token = _INVOKED.set(inv)
    try:
        yield inv
    finally:
        _INVOKED.reset(token)


def invocation() -> Invocation:
    """The running command line's Invocation; outside a command (the Python API), a fresh one."""
    return _INVOKED.get() or Invocation()


def verbose() -> bool:  # -v on any command: every progress line, every provider absent from this machine
    return invocation().verbose


def emit_json(doc: Any) -> None:
    """One strict JSON document on stdout (NaN and infinities become null)."""
    sys.stdout.write(json_text(doc) + "\n")
    invocation().emitted = True


def json_text(doc: Any, indent: int | None = 2) -> str:
    """`doc` as strict JSON, as --json prints it (NaN and infinities become null)."""
    return json.dumps(_finite(json.loads(json.dumps(doc, default=_default))), indent=indent, allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _default(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "to_dict"):
        return value.to_dict()
    return str(value)


def probe_attempt(skipped: Availability) -> AttemptDoc:
    """A provider passed over at its probe, as an attempt."""
    return {"provider": skipped.provider, "stage": "probe", "ok": False, "reason": skipped.reason, "fix": skipped.fix}


def absent(attempt: AttemptDoc, source: str) -> bool:
    """With `auto`, a provider whose probe failed is simply not on this machine: the normal case, no warning."""
    return source == "auto" and attempt["stage"] == "probe" and not attempt["ok"]


def attempt_line(a: AttemptDoc) -> str:
    fix = f" → {a['fix']}" if a.get("fix") else ""
    return f"skipped {a['provider']} ({a['stage']}): {a['reason']}{fix}"


def fallback_warnings(attempts: Sequence[AttemptDoc], source: str) -> list[str]:
    """One `skipped PROVIDER (stage): reason → fix` line per provider asked for and passed over: the
    warnings of a fallback (with `auto`, providers simply absent from this machine are none)."""
    return [attempt_line(a) for a in attempts if not a["ok"] and not absent(a, source)]


def absent_note(attempts: Sequence[AttemptDoc], source: str) -> str:
    names = [a["provider"] for a in attempts if absent(a, source)]
    return f"; not on this machine: {', '.join(names)} (-v says why)" if names and not verbose() else ""


SLOW_BUILD = "on first use; this can take minutes"


def progress(machine: bool) -> Callable[[str], None]:
    """Progress lines: every one on stderr with -v; otherwise a spinner on a terminal that leaves nothing
    behind, and nothing at all for machine output or when stderr is not a terminal (the summary says it).
    Lines a build step starts with 'warning: ' or 'note: ' are always shown."""
    if verbose():
        return info
    shown: Callable[[str], None] = (lambda _msg: None) if machine or not sys.stderr.isatty() else _Spinner()

    def log(msg: str) -> None:  # a step's own warning or note, and a slow build on first use, are always shown
        (info if msg.startswith(("warning: ", "note: ")) or SLOW_BUILD in msg else shown)(msg)

    return log


class _Spinner:
    """One transient status line, rewritten by each progress message until its target is done."""

    def __init__(self) -> None:
        from rich.console import Console

        self.console = Console(stderr=True, highlight=False)
        self.status: Any = None

    def __call__(self, msg: str) -> None:
        if self.status is None:
            self.status = self.console.status(msg)
            self.status.start()
        else:
            self.status.update(msg)
        if " built → " in msg or " cached → " in msg:
            self.status.stop()
            self.status = None


def warn(msg: str) -> None:
    sys.stderr.write(f"warning: {msg}\n")


def error(msg: str) -> None:
    sys.stderr.write(f"error: {msg}\n")


def info(msg: str) -> None:
    sys.stderr.write(f"{msg}\n")


def provider_lines(report: SessionReport) -> list[str]:
    """requested → used, then one line per skipped provider with its reason and fix."""
    source = report["request_source"]
    lines = fallback_warnings(report["attempts"], source)
    pl = report.get("placement")
    if pl:
        nodes = ", ".join(f"{ep} {n}" for ep, n in pl["nodes"].items())
        lines.append(f"placement: {nodes} of {pl['total']} nodes; {pl['partitions']} partitions; "
                     f"{pl['ep']} coverage {pl['coverage']:.0%}")
    rt: Mapping[str, Any] = report.get("runtime") or {}
    if rt.get("compile_cache"):
        c = rt["compile_cache"]
        lines.append(f"torch.compile ({rt.get('compile')}): first call {rt.get('compile_s', 0):.2f}s, Inductor "
                     f"cache {c['state']} ({c['hits']} hit, {c['misses']} miss)")
    requested = ",".join(report["requested"])
    lines += [f"({attempt_line(a)})" for a in report["attempts"] if verbose() and absent(a, source)]
    if verbose() and rt.get("opened"):
        lines.append(f"opened with: {settings_text(rt['opened'])}")
    at = ""
    if report.get("precision"):
        at = f" at {report['precision']}"
        if report.get("execution_precision") not in (None, report["precision"]):
            at += f" (executes {report['execution_precision']})"
        verified = report.get("verification")
        status = verified["status"] if verified else None
        at += {"unverified": ", UNVERIFIED", "skipped": ", not verified"}.get(status or "", "")
    lines.append(f"provider: requested {requested} ({source}) → ran {report['provider']}"
                 f" [{report['runs_on']}]{at}{absent_note(report['attempts'], source)}")
    return lines


def slower_note(speed: SpeedDoc | None) -> str | None:
    """`slower than a plain fp32 session here (0.81×, ...)` for a lossy artifact's measured speed, where it is in every
    round (a round that says otherwise is the machine's noise, not the artifact)."""
    if not speed or speed["high"] >= 1.0:
        return None
    return f"slower than a plain fp32 session here ({speed['speedup']:.2f}×, {speed['low']:.2f}–{speed['high']:.2f} " \
           "per round)"


def settings_text(settings: Mapping[str, object]) -> str:
    """`graph_optimization=all, intra_op_threads=4`: how a runtime opened (or opens) an artifact."""
    return ", ".join(f"{k}={v}" for k, v in settings.items())


def output_doc(project: Project, outputs: Named, top: int = 5, written: str | None = None) -> dict[str, OutputEntry]:
    """Each output's dtype, shape and values; with `written` (the -o file) the values stay in that file."""
    doc: dict[str, OutputEntry] = {}
    for name, arr in outputs.items():
        entry: OutputEntry = {"dtype": str(arr.dtype), "shape": list(arr.shape)}
        if written:
            entry["file"] = written
        else:
            entry["data"] = arr.tolist()
        names = project.labels_of(name)
        if names and arr.ndim >= 1 and arr.shape[-1] == len(names) and arr.dtype.kind == "f":
            rows = arr.reshape(-1, arr.shape[-1])
            entry["top"] = [
                [{"label": names[i], "score": float(r[i])} for i in r.argsort()[::-1][:top]] for r in rows
            ]
        doc[name] = entry
    return doc


def format_outputs(doc: Mapping[str, OutputEntry]) -> str:
    import numpy as np

    lines = []
    for name, entry in doc.items():
        lines.append(f"{name}: {entry['dtype']} {entry['shape']}")
        if "top" in entry:
            for i, row in enumerate(entry["top"]):
                best = ", ".join(f"{t['label']} {t['score']:.4f}" for t in row)
                lines.append(f"  [{i}] {best}")
        elif "data" in entry:
            text = np.array2string(np.asarray(entry["data"]), threshold=20, edgeitems=3, precision=5)
            lines.extend("  " + line for line in text.splitlines())
    return "\n".join(lines)


def verdict(v: VerificationDoc | None, short: bool = False) -> str:
    """A verification record in a few words: verified / UNVERIFIED / skipped, at which precision, the worst
    cosine (and top-1 where judged), on which data."""
    v = v or {}
    if "skipped" in v:
        return "skipped" if short else f"verify skipped: {v['skipped']}"
    if not v:
        return "-"
    status = v.get("status") or ("verified" if v.get("passed") else "failed")
    word = {"verified": "verified", "unverified": "UNVERIFIED"}.get(status, status)
    if v.get("rejected"):  # the model rejects the inputs gpux generates: nothing was compared
        return f"{word} at {v.get('precision')} (the model rejects generated inputs: declare shapes:, input ranges " \
               "or verify.data)"
    outs = list((v.get("outputs") or {}).values())
    parts = [f"cosine {min((o['cosine'] for o in outs), default=1.0):.6f}"]
    top1 = [o["top1"] for o in outs if o.get("top1") is not None]
    if top1:
        parts.append(f"top-1 {min(top1):.0%}")
    parts += values_parts(v.get("outputs") or {}) + answer_parts(v.get("outputs") or {})
    data = v.get("data", "generated")
    shown = weakest(v["evidence"]["rates"] if "evidence" in v else [])
    if status == "unverified":
        parts.append("generated data only" if data == "generated" else "calibration samples only"
                     if not v.get("representative") else shown or f"only {v.get('rows')} real samples")
    else:
        parts += [shown] if shown else []
        parts += [] if short else [f"{v.get('samples')} samples: {data}"]
    loose = v.get("loosened") or []
    return f"{word} at {v.get('precision')} ({', '.join(parts)})" + (f" [loosened: {', '.join(loose)}]" if loose
                                                                       else "")


def weakest(rates: Sequence[RateDoc]) -> str:
    """The judged rate whose bound is nearest its floor, as its rows show it: `confident top-1 45/45, shown >= 94.3 %
    (floor 99 %)`; "" where no rate was counted."""
    if not rates:
        return ""
    w = min(rates, key=lambda w: w["bound"] - w["floor"])
    return f"{w['label']} {w['agree']}/{w['rows']}, shown >= {percent(w['bound'])} (floor {percent(w['floor'])})"


def percent(x: float) -> str:
    """99 %, 93.9 %: a rate as a user reads it, one decimal where it has one."""
    return f"{x * 100:.1f}".rstrip("0").rstrip(".") + " %"


def answer_parts(outputs: Mapping[str, OutputMetrics]) -> list[str]:
    """The agreement of each output's answers with the reference's, in a few words (named where several), as its
    kind (gpux.config.kinds) says it."""
    from gpux.config.kinds import record_kind, step

    answers = {n: o["answers"] for n, o in outputs.items() if o.get("answers") and "skipped" not in o["answers"]}
    parts = []
    for name, a in answers.items():
        kind = record_kind(a.get("kind", ""))
        said = step(kind, "text") if kind is not None else None
        text = said(a) if said is not None else ""
        if text:
            named = f"{name} " if len(answers) > 1 else ""
            parts.append(named + text + ("" if a.get("judged", True) else " not judged"))
    return parts


def values_parts(outputs: Mapping[str, OutputMetrics]) -> list[str]:
    """Each continuous output's rows in a few words (named where several): `rows within 1 % of scale 124/133
    (worst row 7 %)`, said not judged on generated inputs."""
    values = {n: o["values"] for n, o in outputs.items() if o.get("values")}
    parts = []
    for name, v in values.items():
        named = f"{name} " if len(values) > 1 else ""
        parts.append(f"{named}rows within {percent(v['tolerance'])} of scale {v['rows'] - v['moved']}/{v['rows']} "
                     f"(worst row {percent(v['max_rel'])})" + ("" if v.get("judged", True) else " not judged"))
    return parts


def artifacts_table(arts: list[ArtifactRow]) -> str:
    def speed(a: ArtifactRow) -> str:
        vs = cast("SpeedDoc | None", (a["info"] or {}).get("vs_plain"))
        return f"{vs['speedup']:.2f}×{' SLOWER' if slower_note(vs) else ''}" if vs else "-"

    rows = [[a["id"], a["state"], format_size(a["size"]), verdict(a.get("verification"), short=True), speed(a),
             a["path"]] for a in arts]
    return format_table(["artifact", "state", "size", "verification", "vs plain fp32", "path"], rows)


def build_warnings(doc: BuildDoc) -> list[str]:
    """A build document's warnings, then each provider asked for and passed over, a build for a provider
    that cannot run here, and which provider was built instead of the one asked for (each said once)."""
    source = doc["requested"]["source"]
    said = list(doc.get("warnings") or [])
    more = fallback_warnings(doc.get("attempts") or [], source)
    if doc.get("cannot_run"):
        more.append(f"built for {doc['provider']}, which cannot run on this machine: {doc['cannot_run']}")
    passed = [a["provider"] for a in doc.get("attempts") or [] if not a["ok"] and not absent(a, source)]
    if passed:  # the first provider asked for (auto: the first here) and passed over
        more.append(f"built for {doc['provider']} instead of {passed[0]}")
    return said + [w for w in more if w not in said]


def render_plan(doc: PlanDoc) -> None:
    """`gpux build --dry-run`: the targets the first provider of the chain would build, and their options."""
    avail = doc["available"]
    for w in [*fallback_warnings(doc.get("skipped") or [], doc["selection"]["source"]), *(doc.get("instead") or [])]:
        warn(w)
    render_targets(doc, f" ({avail['status']}: {avail['reason']})")


def render_targets(doc: PlanDoc, note: str = "") -> None:
    """A build plan's targets (artifacts.plan.BuildPlan.to_dict), one line each."""
    print(f"plan for {doc['name']} on {doc['provider']}{note}")
    print(f"  source {doc['source']}")
    for t in doc["targets"]:
        opts = ", ".join(f"{k}={v}" for k, v in t["options"].items() if v not in (None, {}, []))
        print(f"  → {t['id']} [{t['kind']}, {t['precision']}] from {t['consumes']}: {opts}")


def render_build(doc: BuildDoc) -> None:
    """`gpux build`'s human report: warnings and skipped providers on stderr, one line per target."""
    for w in build_warnings(doc):
        warn(w)
    source = doc["requested"]["source"]
    attempts = doc.get("attempts") or []
    for a in attempts if verbose() else []:
        if absent(a, source):
            info(attempt_line(a))
    if source == "auto" and not fallback_warnings(attempts, source):
        info(f"provider: auto → {doc['provider']}{absent_note(attempts, source)}")
    for t in doc["targets"]:
        ver = verdict(t.get("verification"))
        state = "cached" if t["cached"] else f"built in {t['seconds']:.2f}s"
        print(f"{t['target']['id']}: {state}, {format_size(t['size'])}, {ver} → {t['path']}")
        slower = slower_note(t.get("vs_plain"))
        if slower:
            warn(f"{t['target']['id']}: {slower}; the fp32 artifact (precision: fp32) is the faster default here")
