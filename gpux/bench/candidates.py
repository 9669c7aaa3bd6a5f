"""What `gpux tune` tries: per provider the precision and option rows of the runtime it runs with, and the int8
refinements, tried only where the plain int8 candidate of their provider failed verification, in order until
one passes (each later one could only be slower or costlier): cheap calibration variants, then layers left in
fp32 (the most sensitive first, ranked on the calibration samples), then costly ones (entropy calibration,
NNCF's accuracy control). An int8 candidate on
a provider with no calibration data of its own borrows the calibration another provider block declares (the
same model inputs), so that it is calibrated on real data rather than generated samples."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpux.bench.records import Row
from gpux.config.load import Project
from gpux.errors import UsageError
from gpux.providers.builtin import ACCURACY_CONTROL_COST
from gpux.providers.options import OptionFields

SLOWER = ACCURACY_CONTROL_COST  # accuracy control's builds, in plain ones (each registry row holds its own table)


@dataclass(kw_only=True)
class Outcome:
    """One candidate's row: what it is, how it did, and why it was or was not chosen."""

    provider: str
    precision: str
    options: OptionFields
    status: str = "pending"  # ok | failed verification | unverified | unavailable | too slow | over budget | not needed
    row: Row = field(default_factory=lambda: Row())  # as measured (bench.command.measured_row), with tune's figures
    why: str = ""
    refines: Outcome | None = field(default=None, repr=False)  # the plain int8 candidate this one refines
    changes: OptionFields = field(default_factory=dict)  # what it changes over that one
    cost: float = 1.0  # its build time, in the plain one's
    note: str = ""  # e.g. where its calibration data comes from
    batch: int = 1  # rows per call (throughput: gpux.bench.batches), with one caller where above 1
    role: str = ""  # "default": the untuned default (the floor); "lock": the lock in force (gpux.bench.floor)

    def to_dict(self) -> dict[str, Any]:
        """The candidate's row in the lock and --json: its options, verdict, figures and agreement; for a
        mixed-precision one, the layers it left in fp32 (the ranking is the lock's `limiting_layers`)."""
        stats = self.row.get("stats") or {}
        info = self.row.get("build_info") or {}
        return {"provider": self.provider, "precision": self.precision, "options": self.options, "batch": self.batch,
                "role": self.role or None, "status": self.status, "why": self.why,
                "verification": self.row.get("verification_status"),
                "refines": bool(self.refines), "changes": self.changes or None, "note": self.note or None,
                "p50_ms": ms(stats.get("p50")), "p99_ms": ms(stats.get("p99")), "throughput": stats.get("throughput"),
                "median_ci_ms": [ms(v) for v in stats["median_ci"]] if stats.get("median_ci") else None,
                "round_scores": self.row.get("round_scores"), "vs_plain_ort": self.row.get("vs_plain_ort"),
                "artifact": Path(art).parent.name if (art := self.row.get("artifact")) else None,
                "accuracy": self.row.get("accuracy"), "size": self.row.get("artifact_size"),
                "keep_fp32": {k: v for k, v in (info.get("keep_fp32") or {}).items() if k != "ranking"} or None,
                "build_s": (self.row.get("phases") or {}).get("build_s"), "error": self.row.get("error")}


def options_text(options: OptionFields, prefix: str = "") -> str:
    """`precision=fp32, optimization=all`; a nested block's fields as `torch.compile=default`."""
    return ", ".join(options_text(v, f"{prefix}{k}.") if isinstance(v, dict) else f"{prefix}{k}={v}"
                     for k, v in options.items())


def label_of(o: Outcome) -> str:
    """`openvino fp32 (precision=fp32, hint=latency)`, with ` batch 8` where above 1."""
    opts = options_text(o.options)
    return f"{o.provider} {o.precision}" + (f" ({opts})" if opts else "") + (f" batch {o.batch}" if o.batch > 1 else "")


def ms(v: float | None) -> float | None:
    return None if v is None else v * 1e3


def option_rows(project: Project, provider: str) -> list[tuple[str, OptionFields]]:
    """(precision label, option fields) tune tries on `provider`, in the runtime the project runs it with:
    ONNX Runtime's, OpenVINO's or TensorRT's fields (its registry row's `tune`), or with `runtime: torch` the
    `torch:` block's compile mode and precision (the row's variants); fields of another runtime are never candidates."""
    from gpux.providers import registry, runtime_of

    row = registry().get(provider)
    if runtime_of(project, provider) != "torch":
        return list(row.tune) if row is not None else []
    variants = row.torch.variants if row is not None and row.torch is not None else ()
    return [(precision, {"torch": {"compile": mode, "precision": precision}}) for mode, precision in variants]


def candidates(project: Project, providers: tuple[str, ...] | None, precisions: tuple[str, ...]) -> list[Outcome]:
    """Every candidate of the providers available here (`providers`: only these), refinements after their plain
    int8 one."""
    from gpux.providers import probe_for, registry

    supported = project.config.runtime.supported
    out = []
    registered = registry()  # the rows with tune options from the most portable up (cpu first), then the rest
    for provider in dict.fromkeys([*reversed([n for n, r in registered.items() if r.tune]), *registered]):
        if providers is not None and provider not in providers:
            continue
        rows = [(label, opts) for label, opts in option_rows(project, provider) if label in precisions]
        if not rows or (supported and provider not in supported) or not probe_for(project, provider).ok:
            continue
        for label, opts in rows:
            plain = Outcome(provider=provider, precision=label, options=opts)
            plain.options, plain.note = borrowed(project, provider, opts)
            out += [plain, *refinements(project, plain)]
    if not out:
        raise UsageError("no candidate to tune: none of the asked providers and precisions is available here",
                         hint="see `gpux inspect` for what this machine has")
    return out


def refinements(project: Project, plain: Outcome) -> list[Outcome]:
    """The refinements of `plain` when it is its provider's plain int8 row (its registry row's `refine`), less any
    that builds what it builds (a calibration method its block declares already)."""
    from gpux.providers import registry

    row = registry().get(plain.provider)
    entry = row.refine if row is not None else None
    if entry is None or plain.precision != "int8" or any(plain.options.get(k) != v for k, v in entry[0].items()):
        return []
    built = block_of(project, plain.provider, plain.options)
    out = []
    for changes, cost in entry[1]:
        options = {**plain.options, **changes}
        if block_of(project, plain.provider, options) != built:
            out.append(Outcome(provider=plain.provider, precision="int8", options=options, refines=plain,
                               changes=changes, cost=cost, note=plain.note))
    return out


def block_of(project: Project, provider: str, options: OptionFields) -> Any:
    """The provider block a candidate with `options` builds with (as tune builds it)."""
    from gpux.plan.targets import fitted_options, with_options

    candidate = with_options(project, provider, **fitted_options(project, provider, options))
    return getattr(candidate.config.providers, provider, None)


def borrowed(project: Project, provider: str, options: OptionFields) -> tuple[OptionFields, str]:
    """`options`, plus the calibration data another provider block declares where this int8 candidate would
    otherwise calibrate on generated samples (its block declares none, and its option model takes one); and a
    note saying so."""
    from pydantic import ValidationError

    block = getattr(project.config.providers, provider, None)
    if options.get("precision") != "int8" or block is None or getattr(block, "calibration", "") is not None:
        return options, ""
    others = project.config.providers.model_dump()
    source = next((name for name, b in others.items() if name != provider and (b or {}).get("calibration")), None)
    if source is None:
        return options, ""
    out = {**options, "calibration": others[source]["calibration"]}
    try:
        type(block).model_validate(block_of(project, provider, out).model_dump())
    except ValidationError:  # this int8 mode takes no calibration data
        return options, ""
    return out, f"calibration from providers.{source}.calibration"


def needless(o: Outcome, done: list[Outcome], spent: dict[int, float], left_s: float) -> tuple[str, str]:
    """("pending", "") for a candidate to measure, else its status and why it is left out: a refinement is
    needed only when its plain int8 candidate failed verification and no earlier refinement of it passed, and
    only while the budget left covers its cost."""
    plain = o.refines
    if plain is None:
        return "pending", ""
    if plain.status == "ok" and plain.row.get("verification_status") == "unverified":
        return "not needed", "plain int8 is unverified (its data cannot judge it): a refinement would be too"
    if plain.status == "ok":
        return "not needed", "plain int8 passed verification: a refinement could only be slower"
    if plain.status != "failed verification":
        return "unavailable", f"plain int8 did not build: {plain.why}"
    first = next((d for d in done if d.refines is plain and d.status == "ok"), None)
    if first is not None:
        return "not needed", f"{_changes(first.changes)} passed verification first"
    needed_s = o.cost * spent.get(id(plain), 0.0)
    if needed_s > left_s:
        return "over budget", f"not measured: needs about {needed_s:.0f} s, {left_s:.0f} s of --budget left"
    return "pending", ""


def _changes(changes: OptionFields) -> str:
    return ", ".join(f"{k}={v}" for k, v in changes.items())
