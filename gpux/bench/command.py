"""`gpux run --benchmark`: opens the model per provider and precision, times every phase, applies the protocol."""

from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpux import report
from gpux.arrays import Feeds
from gpux.bench import protocol as bench
from gpux.bench.accuracy import accuracy_of, verification_status
from gpux.bench.records import Gate, Row
from gpux.config.load import Project
from gpux.documents import VerificationDoc
from gpux.errors import GpuxError, InputError, TooSlow, VerificationFailed
from gpux.machine import environment_facts
from gpux.plan.targets import with_options
from gpux.report import tables
from gpux.version import __version__


def with_torch(project: Project, provider: str, compile_mode: str, precision: str) -> Project:
    """The same project with provider `provider` on runtime torch, in this compile mode and precision."""
    block = getattr(project.config.providers, provider)
    torch_opts = block.torch.model_copy(update={"compile": compile_mode, "precision": precision})
    return with_options(project, provider, runtime="torch", torch=torch_opts)


def torch_rows(project: Project, rows_of: Rows) -> list[Row]:
    """`--provider all` for a PyTorch source: each device PyTorch has here, eager and compiled."""
    from gpux.formats import TORCH_FORMATS, source_format
    from gpux.providers import probe_for

    if source_format(project) not in TORCH_FORMATS:
        return []
    rows: list[Row] = []
    from gpux.providers import registry

    for name, variants in ((n, r.torch.variants) for n, r in registry().items() if r.torch):
        avail = probe_for(with_torch(project, name, "off", "fp32"), name)
        if not avail.ok:
            rows.append(bench.result_row(name, "torch", None, bench.Phases(), status="unavailable",
                                         error=avail.reason, fix=avail.fix))
            continue
        for mode, precision in variants:
            label = f"{precision} (torch {'eager' if mode == 'off' else mode})"
            rows_of.log(f"benchmarking {name} {label} ...")
            rows.append(bench_one(with_torch(project, name, mode, precision), name, label, rows_of, pinned=True))
    return rows


def with_precision(project: Project, provider: str, precision: str) -> Project:
    """The same project with `providers.<provider>.precision` replaced."""
    return with_options(project, provider, precision=precision)


def protocol_for(project: Project, runs: int | None, warmup: int | None, duration: float | None,
                 batch: int | None, concurrency: int | None) -> bench.Protocol:
    b = project.config.benchmark
    return bench.Protocol(warmup=b.warmup if warmup is None else warmup, warmup_seconds=b.warmup_seconds,
                          runs=runs or b.runs, seconds=b.seconds if duration is None else duration,
                          concurrency=concurrency or b.concurrency, batch=batch or b.batch or 1)


@dataclass(frozen=True, kw_only=True)
class Rows:
    """What every row of one benchmark shares: the protocol, the inputs (a file, else synthetic ones of these
    sizes), the store and the progress log; `stages`: each call through the declared steps, timed per stage, on
    these image `files` (else a generated image; gpux/bench/stages.py)."""

    protocol: bench.Protocol
    shapes: dict[str, int]
    store: str | None = None
    input_file: str | None = None
    log: Any = None
    stages: bool = False
    files: tuple[str, ...] = ()


def bench_one(project: Project, provider: str | None, precision: str | None, rows: Rows, *,
              strict: bool = False, pinned: bool = False) -> Row:
    """One row: open (build or cache hit, load), first inference, warm-up, measurement. `pinned`: this provider
    only (a row of a table), an unverified artifact measured and marked; `strict`: the user's --strict."""
    opened = open_one(project, provider, precision, rows, strict=strict, pinned=pinned)
    if not isinstance(opened, OpenedRow):
        return opened
    protocol = rows.protocol
    with opened.session:
        if opened.split is not None:
            m = bench.measure(opened.split, protocol)
            row = measured_row(opened, m, protocol.concurrency)
            row.update(opened.split.summary(m, row["stats"]))
            return row
        calls = opened.session.runner.bind(opened.feeds, protocol.concurrency)
        m = bench.measure(calls if protocol.concurrency > 1 else calls[0], protocol)
        return measured_row(opened, m, protocol.concurrency)


@dataclass(kw_only=True)
class OpenedRow:
    """A session opened for a row, the inputs it is measured on and what the row says before its timings."""

    session: Any
    feeds: Feeds
    requested: str | None
    precision: str | None
    first_s: float
    split: Any = None  # a stages.Split where each call is timed per declared step


def open_one(project: Project, provider: str | None, precision: str | None, rows: Rows, *,
             strict: bool = False, pinned: bool = False) -> OpenedRow | Row:
    """Open (build or cache hit, load) and run once; a row saying why when it cannot (see bench_one)."""
    from gpux.model.inputs import load_file, synthetic
    from gpux.quality.calibrate import ranges
    from gpux.run.session import load

    label = precision or "-"
    try:
        session = load(project, provider, strict=strict or pinned, store_dir=rows.store, log=rows.log,
                       provider_source="--provider", verified_only=strict)
    except TooSlow as exc:  # screened out by its speed before verification (tune)
        return bench.result_row(provider or "auto", label, None, bench.Phases(), status="too slow",
                                error=exc.message)
    except VerificationFailed as exc:  # a headline, then one line per failing metric
        lines = [x.strip() for x in exc.message.splitlines() if x.strip()]
        return bench.result_row(provider or "auto", label, None, bench.Phases(), status="failed verification",
                                error=" ".join(lines), failures=lines[1:],
                                accuracy=accuracy_of(exc.verification or {}), build_info=exc.info)
    except GpuxError as exc:
        return bench.result_row(provider or "auto", label, None, bench.Phases(), status="unavailable",
                                error=exc.message)
    try:
        feeds = load_file(rows.input_file, session.inputs) if rows.input_file else \
            synthetic(session.inputs, rows.shapes, 0, ranges(project))
        if rows.stages:
            from gpux.bench.stages import open_split

            split = open_split(session, project, list(rows.files), rows.shapes, feeds)
            feeds, first_s = split.first()
            return OpenedRow(session=session, feeds=feeds, requested=provider, precision=precision, first_s=first_s,
                             split=split)
        started = time.perf_counter()
        session.run_feeds(feeds)
    except BaseException:  # whatever stops the first run (Ctrl-C too): the session is closed, the error raised
        session.close()
        raise
    return OpenedRow(session=session, feeds=feeds, requested=provider, precision=precision,
                     first_s=time.perf_counter() - started)


def measured_row(opened: OpenedRow, m: bench.Measurement, concurrency: int) -> Row:
    """The row of an opened session measured as `m` says."""
    from gpux.model.inputs import symbolic_values

    session, feeds, provider, precision = opened.session, opened.feeds, opened.requested, opened.precision
    batch = next((v for k, v in symbolic_values(feeds, session.inputs).items() if k == "batch"), 1)
    stats = bench.summarize(m.latencies_s, m.wall_s, batch=batch, concurrency=concurrency)
    phases = bench.Phases(build_s=session.timings.get("build_s"), load_s=session.timings.get("load_s"),
                          first_inference_s=opened.first_s, warmup_s=m.warmup_s, measure_s=m.wall_s,
                          compile_s=session.timings.get("compile_s"))
    art = session.build.final.artifact if session.build else None
    status = f"fell back to {session.provider}" if session.fell_back else "ok"
    verification: VerificationDoc = {}
    if art is not None and art.manifest["verification"]:
        verification = art.manifest["verification"]
    return bench.result_row(
        session.provider, precision or (art.manifest["target"]["precision"] if art else "-"), stats, phases,
        status=status, latencies_s=m.latencies_s, requested=provider or "auto", runs_on=session.used,
        request_source=session.selection.source, attempts=[a.to_dict() for a in session.attempts],
        artifact=str(art.main) if art else None,
        artifact_size=art.size() if art else None, verification_status=verification_status(verification),
        artifact_sha256=art.manifest["files"][art.manifest["main"]]["sha256"] if art else None,
        accuracy=accuracy_of(verification), options=session.runner.details,
        versions=art.manifest["key_parts"]["versions"] if art else None,
        shapes={n: list(getattr(v, "shape", ())) for n, v in feeds.items()},
    )


@dataclass(frozen=True, kw_only=True)
class BenchmarkRequest:
    """What `gpux run --benchmark` was asked for (the click options, by name)."""

    target: str = "."
    files: tuple[str, ...] = ()  # images: each call through the declared steps, timed per stage
    provider: str | None = None  # "all": every provider here, per precision
    strict: bool = False
    store: str | None = None
    as_json: bool = False
    input_file: str | None = None  # the data to measure on; else seeded synthetic inputs
    runs: int | None = None
    warmup: int | None = None
    duration: float | None = None
    batch: int | None = None
    shapes: tuple[str, ...] = ()  # --shape NAME=SIZE, as given
    concurrency: int | None = None
    as_csv: bool = False
    baseline: str | None = None  # a benchmark JSON document to gate on
    max_regression: float = 10.0  # percent
    report: str | None = None  # an HTML page of the document (gpux.bench.report_html)
    command_line: str = ""  # as typed, for the page


def benchmark_command(project: Project, req: BenchmarkRequest) -> int:
    """`project`: the one `req.target` opened (by `gpux run`, which holds its in-use lock meanwhile)."""
    from gpux.bench.stages import check_files
    from gpux.config.steps import declared_steps

    base = load_baseline(req.baseline) if req.baseline else None  # a bad baseline fails before minutes of measuring
    tensors = [flag for flag, v in (("--file", req.input_file), ("--batch", req.batch), ("--shape", req.shapes)) if v]
    files = tuple(check_files(project, req.files, req.store, tensors)) if req.files else ()
    shape_values = synthetic_sizes(project, req)
    stages = bool(files) or (bool(declared_steps(project.config)) and not tensors)
    protocol = protocol_for(project, req.runs, req.warmup, req.duration, 1 if stages else req.batch, req.concurrency)
    log = report.progress(req.as_json or req.as_csv)
    rows_of = Rows(protocol=protocol, shapes=shape_values, store=req.store, input_file=req.input_file, log=log,
                   stages=stages, files=files)
    if req.provider == "all":
        rows = every_provider_rows(project, rows_of)
    else:
        rows = [bench_one(project, req.provider, None, rows_of, strict=req.strict)]
    doc = bench.make_document(rows, environment(project, protocol))
    doc["warnings"] = row_warnings(rows, hide_unavailable=req.provider == "all")
    code = 0 if base is None else gate(doc, base, req)
    if req.as_json:
        report.emit_json(doc)
    elif req.as_csv:
        sys.stdout.write(bench.to_csv(rows))
    else:
        render(rows, doc.get("baseline"), all_providers=req.provider == "all")
    if req.report:
        from gpux.bench.report_html import write_report

        write_report(doc, req.report, kind="benchmark", command=req.command_line, name=project.name)
    if not any(r["status"] != "unavailable" and r.get("stats") for r in rows):
        code = code or 4
    return code


def synthetic_sizes(project: Project, req: BenchmarkRequest) -> dict[str, int]:
    """The sizes of symbolic dims for synthetic inputs: --shape and --batch over the config's own."""
    from gpux.model.inputs import parse_shapes
    from gpux.plan.targets import resolve_shapes

    asked = parse_shapes(req.shapes)
    if req.input_file and (asked or req.batch):
        raise InputError("--shape/--batch size synthetic inputs; with --file the data's own shapes are used")
    dims = {d for spec in (project.config.inputs or {}).values() for d in (spec.shape or ()) if isinstance(d, str)}
    unknown = sorted(set(asked) - dims) if project.config.inputs else []
    if unknown:
        raise InputError(f"--shape {unknown[0]}: no declared input has a dim named {unknown[0]!r}; "
                         f"named dims: {', '.join(sorted(dims)) or 'none'}")
    shape_values = resolve_shapes(project, asked)
    if req.batch:
        shape_values["batch"] = req.batch
    return shape_values


def every_provider_rows(project: Project, rows_of: Rows) -> list[Row]:
    """`--provider all`: a row per provider and precision (unavailable providers included), then the torch rows."""
    from gpux.providers import ort_available_eps, probe, registry, runtime_of

    rows: list[Row] = []
    for name, row in registry().items():
        if row.runtime == "torch":
            continue  # PyTorch-only providers (mps): their rows come from torch_rows
        avail = probe(name)
        if not avail.ok:
            rows.append(bench.result_row(name, "-", None, bench.Phases(), status="unavailable",
                                         error=avail.reason, fix=avail.fix))
            continue
        # a block set to runtime torch gets its ONNX Runtime rows here and its torch rows below
        ort = with_options(project, name, runtime="onnxruntime") if runtime_of(project, name) == "torch" \
            else project
        for precision in row.precisions:
            rows_of.log(f"benchmarking {name} {precision} ...")
            rows.append(bench_one(with_precision(ort, name, precision), name, precision, rows_of, pinned=True))
        # a provider whose own runtime is another that ONNX Runtime's EP also runs (openvino): that EP too
        if row.runtime != "onnxruntime" and row.ep and row.ep in (ort_available_eps() or ()):
            rows_of.log(f"benchmarking {name} through ONNX Runtime's {row.ep} ...")
            rows.append(bench_one(with_options(project, name, runtime="onnxruntime"), name, "fp32 (onnxruntime EP)",
                                  rows_of, pinned=True))
    from gpux.bench.plain import plain_rows

    return rows + torch_rows(project, rows_of) + plain_rows(project, rows_of)



def gate(doc: dict[str, Any], base: dict[str, Any], req: BenchmarkRequest) -> int:
    """Compare the document with the --baseline one, noting the outcome in it; 1 if a figure regressed."""
    notes: list[str] = []
    try:
        regressions = bench.compare_baseline(doc, base, req.max_regression, notes=notes)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise InputError(f"--baseline {req.baseline}: not a gpux benchmark document: {exc}") from exc
    doc["baseline"] = {"file": req.baseline, "max_regression_pct": req.max_regression, "regressions": regressions,
                       "notes": notes}
    return 1 if regressions else 0


def render(rows: list[Row], gate: Gate | None, all_providers: bool) -> None:
    """The table on stdout; on stderr, what went wrong per row, one line for the providers not on this
    machine (with -p all), and the baseline gate: each regression an error, the rest one line."""
    hide = all_providers and not report.verbose()
    absent = [r for r in rows if hide and r["status"] == "unavailable"]
    print(tables.results_table([dict(r) for r in rows if r not in absent]))
    from gpux.bench.stages import inputs_line, speed_line

    said = [line for r in rows if (line := speed_line(r))]
    for line in said:
        report.info(line)
    if said:
        report.info(inputs_line(next(r for r in rows if r.get("inputs"))))
    if absent:
        report.info(f"not on this machine: {', '.join(r['provider'] for r in absent)} (-v says why)")
    from gpux.bench.plain import plain_line

    against = plain_line(rows)
    if against:
        report.info(against)
    for w in row_warnings(rows, hide_unavailable=hide):
        report.warn(w)
    for row in rows:
        for w in (row.get("stats") or {}).get("warnings", []):
            report.info(f"{row['provider']} {row['precision']}: {w}")
    if gate is None:
        return
    for r in gate["regressions"]:
        report.error(f"regression against {gate['file']}: {r}")
    for n in gate["notes"] if report.verbose() else []:
        report.info(f"baseline: {n}")
    if not gate["regressions"]:
        report.info(f"baseline {gate['file']}: no regression beyond {gate['max_regression_pct']:g}% "
                    f"({len(gate['notes'])} notes; -v shows them)")


def row_warnings(rows: list[Row], hide_unavailable: bool) -> list[str]:
    """Per row, each provider asked for and passed over (a fallback) and what stopped the row, as
    `PROVIDER PRECISION: ...` lines: the text output's warnings and the JSON document's `warnings`.
    `hide_unavailable`: rows of providers not on this machine (`-p all`) are no warning."""
    out: list[str] = []
    for row in rows:
        label = f"{row['provider']} {row['precision']}"
        source = row.get("request_source") or ("auto" if row.get("requested") == "auto" else "--provider")
        out += [f"{label}: {line}" for line in report.fallback_warnings(row.get("attempts") or [], source)]
        if row.get("error") and not (hide_unavailable and row["status"] == "unavailable"):
            out.append(f"{label}: {row['status']}: {row['error']}")
    return out


def load_baseline(path: str) -> dict[str, Any]:
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"--baseline {path}: cannot read it: {exc}") from exc
    rows = doc.get("results") if isinstance(doc, dict) else None
    valid = isinstance(rows, list) and all(isinstance(r, dict) for r in rows)
    if not valid or doc.get("schema") != bench.SCHEMA_VERSION:
        raise InputError(f"--baseline {path}: not a gpux benchmark document (write one with --benchmark --json)")
    return doc


def environment(project: Project, protocol: bench.Protocol) -> dict[str, Any]:
    cfg_bytes = project.path.read_bytes() if project.path.is_file() else b""
    return {**environment_facts(), "gpux": __version__,
            "config": str(project.path), "config_sha256": hashlib.sha256(cfg_bytes).hexdigest(),
            "threads": project.config.runtime.threads.model_dump(),
            "protocol": {"warmup": protocol.warmup, "warmup_seconds": protocol.warmup_seconds,
                         "runs": protocol.runs, "seconds": protocol.seconds, "concurrency": protocol.concurrency,
                         "batch": protocol.batch}}
