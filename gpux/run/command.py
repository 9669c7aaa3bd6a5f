"""`gpux run` on one project: what it was asked for (`RunRequest`) and one inference on given inputs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpux import report
from gpux.arrays import Named

if TYPE_CHECKING:
    from gpux.config.load import Project


@dataclass(frozen=True, kw_only=True)
class RunRequest:
    """What `gpux run` was asked for (the click options, by name); the benchmark's own ones included."""

    target: str = "."
    files: tuple[str, ...] = ()
    input_json: str | None = None
    input_file: str | None = None
    output: str | None = None
    provider: str | None = None
    strict: bool = False
    store: str | None = None
    as_json: bool = False
    placement: bool = False
    save: str | None = None
    benchmark: bool = False
    runs: int | None = None
    warmup: int | None = None
    duration: float | None = None
    batch: int | None = None
    shapes: tuple[str, ...] = ()
    concurrency: int | None = None
    as_csv: bool = False
    baseline: str | None = None
    max_regression: float = 10.0
    report: str | None = None  # an HTML page of the benchmark
    command_line: str = ""  # as typed, for the page
    on: str = "local"  # where FILES are answered: local, or ray[://ADDRESS]
    resume: bool = False
    actor_cpus: float | None = None
    actor_gpus: float | None = None


# The ways `gpux run` runs one project, and the options that only some of them read: an option given to a way that
# does not read it is refused in one line, not ignored. (--save without FILES, and --save or --benchmark with --on ray,
# are refused where they are read, in words of their own.)
WAYS = {"once": "a run on --input or --file", "files": "answering FILES", "ray": "answering FILES on Ray",
        "benchmark": "--benchmark"}
READ_BY = {"input_json": ("once",), "input_file": ("once", "benchmark"), "output": ("once", "ray"),
           "placement": ("once", "files"), "batch": ("benchmark", "files", "ray"), "concurrency": ("benchmark", "ray"),
           "runs": ("benchmark",), "warmup": ("benchmark",), "duration": ("benchmark",), "shapes": ("benchmark",),
           "as_csv": ("benchmark",), "baseline": ("benchmark",)}
FLAGS = {"input_json": "--input", "input_file": "--file", "as_csv": "--csv", "shapes": "--shape"}


def way_of(req: RunRequest) -> str:
    """Which way a project runs: on Ray, benchmarked, answering FILES, or once on given inputs."""
    return "ray" if req.on != "local" else "benchmark" if req.benchmark else "files" if req.files else "once"


def refuse_unread(req: RunRequest) -> None:
    """The options given that the way this project runs does not read (READ_BY), refused in one line."""
    from gpux.errors import UsageError

    if req.as_csv and req.as_json:
        raise UsageError("--csv and --json both given: pick the one to write on stdout")
    way = way_of(req)
    unread: dict[tuple[str, ...], list[str]] = {}
    for k, ways in READ_BY.items():
        if getattr(req, k) and way not in ways:
            unread.setdefault(ways, []).append(FLAGS.get(k, f"--{k.replace('_', '-')}"))
    if unread:
        said = "; ".join(f"{', '.join(flags)} {'is' if len(flags) == 1 else 'are'} read by {_either(ways)}"
                         for ways, flags in unread.items())
        raise UsageError(f"{said}, not by {WAYS[way]}", hint="leave them out, or run the way that reads them")


def _either(ways: tuple[str, ...]) -> str:
    said = [WAYS[w] for w in ways]
    return said[0] if len(said) == 1 else f"{', '.join(said[:-1])} or {said[-1]}"


def run_once(project: Project, req: RunRequest) -> int:
    """One inference on the inputs of --input or --file: outputs printed, or written to --output."""
    from gpux.errors import InputError
    from gpux.model.inputs import load_file, parse_json
    from gpux.model.io import interface
    from gpux.run.inuse import holding
    from gpux.run.session import load

    if req.input_json is None and req.input_file is None:
        raise InputError("no inputs given", hint="pass --input '{\"name\": [...]}' or --file inputs.npz "
                         "(or --benchmark for seeded random inputs)")
    if req.input_json is not None and req.input_file is not None:
        raise InputError("--input and --file both given; pass one")
    if req.output and not req.output.endswith(".npz"):
        raise InputError(f"--output {req.output}: outputs are written as .npz; name the file *.npz")
    inputs, _ = interface(project, req.store)
    # inputs are read and checked before anything is built or loaded
    feeds = parse_json(req.input_json, inputs) if req.input_json is not None else \
        load_file(req.input_file or "", inputs)
    with holding(project.name, project.root, req.store, "gpux run"), \
            load(project, req.provider, strict=req.strict, store_dir=req.store, log=report.progress(req.as_json),
                 placement=req.placement, provider_source="--provider") as session:
        values = session.run_feeds(feeds)
        outputs = dict(zip(session.output_names, values, strict=True))
        info = session.report()
        if req.output:
            write_outputs(req.output, outputs)
        doc = report.output_doc(session.project, outputs, written=req.output if req.as_json else None)
        if req.as_json:
            report.emit_json({"name": session.project.name, **info, "outputs": doc})
            return 0
        for w in session.warnings:
            report.warn(w)
        for line in report.provider_lines(info):
            (report.warn if line.startswith("skipped ") else report.info)(line)
        print(report.format_outputs(doc))
        if req.output:
            report.info(f"wrote {req.output}")
    return 0


def write_outputs(path: str, outputs: Named) -> None:
    """The outputs as one .npz file (--output)."""
    import numpy as np

    from gpux.errors import InputError

    try:
        np.savez(path, **outputs)  # type: ignore[arg-type]  # numpy types **kwds as its allow_pickle: bool
    except OSError as exc:
        raise InputError(f"--output {path}: cannot write: {exc.strerror or exc}") from exc


__all__ = ["READ_BY", "RunRequest", "refuse_unread", "run_once", "way_of", "write_outputs"]
