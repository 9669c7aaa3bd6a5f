"""The work behind `gpux use`, and behind inspect/build/run when their target is a workspace."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Protocol, TypedDict, Unpack

from gpux import report
from gpux.documents import PlanDoc
from gpux.errors import GpuxError, UsageError
from gpux.plan.choice import keep, read, write
from gpux.report import tables
from gpux.workspace.project import Models, derived, open_models, shared_choice

# `gpux run` options a pipeline run does not take (the pipeline is strict: one provider for every step)
UNSUPPORTED = ("placement", "duration", "shapes", "concurrency", "as_csv", "baseline", "report")


class InUse(GpuxError):
    """`gpux use` while a run, benchmark or server of the project holds its in-use lock."""


def use_command(provider: str, target: str, store_dir: str | None, as_json: bool) -> int:
    from gpux.plan.select import parse_request
    from gpux.run.inuse import holders

    names = parse_request(provider, "gpux use")
    if len(names) > 1:
        raise UsageError(f"gpux use {provider}: save one provider (or auto); the models all run on it")
    ms = open_models(target, store_dir)
    held = holders(ms.place.name, ms.place.root, store_dir)
    if held:
        raise InUse(f"{ms.place.name!r} is in use by {', '.join(held)}: its provider cannot change under it",
                    hint="let it finish (or stop it), then run `gpux use` again")
    offer = ms.offer()
    if names[0] != "auto":
        offer.refuse(names[0], f"gpux use {names[0]}")
    write(ms.place, names[0])
    doc = {"name": ms.place.name, "saved": read(ms.place), "file": str(ms.place.file), "offer": list(offer.offer),
           "models": list(ms.models), "disabled": ms.disabled}
    if as_json:
        report.emit_json(doc)
    elif doc["saved"]:
        report.info(f"{ms.place.name}: build, run, serve and package use {doc['saved']} "
                    f"(offered: {', '.join(offer.offer)}); --provider and $GPUX_PROVIDER still win for one command")
    else:
        report.info(f"{ms.place.name}: saved choice cleared; selection is automatic again")
    return 0


def inspect_workspace(ms: Models, store_dir: str | None, as_json: bool) -> int:
    """The model × provider matrix, the offer, the choice and each model's settings derived from it."""
    from gpux.providers import registry

    offer = ms.offer()
    choice = shared_choice(ms, None) if offer.offer else None
    doc: dict[str, Any] = {
        "workspace": ms.place.name, "models": list(ms.models), "disabled": ms.disabled, **offer.to_dict(),
        "saved": read(ms.place), "choice": None if choice is None else {"provider": choice.provider,
                                                                          "source": choice.source},
        "derived": {} if choice is None else {n: derived(p, choice.provider) for n, p in ms.models.items()},
        "pipeline": [s.model_dump() for s in ms.workspace.config.pipeline] if ms.workspace else [],
        "warnings": list(choice.warnings) if choice else []}
    if as_json:
        report.emit_json(doc)
        return 0
    print(f"workspace {ms.place.name}: models {', '.join(doc['models'])}"
          + (f" (disabled: {', '.join(ms.disabled)})" if ms.disabled else ""))
    rows = [[p, *("yes" if offer.matrix[m][p].ok else f"no: {offer.matrix[m][p].why}" for m in doc["models"])]
            for p in registry()]
    print(tables.format_table(["provider", *doc["models"]], rows))
    print(f"\noffer (every enabled model runs it): {', '.join(offer.offer) or 'none'}")
    if choice:
        print(f"runs on {choice.provider} ({choice.source})")
        for n, d in doc["derived"].items():
            print(f"  {n}: {d['artifact']} [{d['precision']}] via {' → '.join(d['steps'])}")
    for w in doc["warnings"]:
        report.warn(w)
    return 0


class BuildOptions(TypedDict, total=False):
    """What `gpux build` hands each model's build (artifacts.build.build's keyword options)."""

    force: bool
    verify: bool
    strict: bool
    shapes: dict[str, int] | None


def build_workspace(ms: Models, provider: str | None, store_dir: str | None, as_json: bool, *, dry_run: bool = False,
                    **options: Unpack[BuildOptions]) -> tuple[object, Callable[[], None]]:
    """Build every enabled model's artifacts for the one provider the workspace runs (`dry_run`: plan them): the
    report document (what --json prints), and what shows it as text."""
    from gpux.artifacts.build import build
    from gpux.artifacts.plan import plan_build

    choice = shared_choice(ms, provider)
    for w in choice.warnings:
        report.warn(w)
    head = {"workspace": ms.place.name, "provider": choice.provider, "source": choice.source}
    if dry_run:
        plans = {n: plan_build(p, choice.provider, store_dir=store_dir, shapes=options.get("shapes")).to_dict()
                 for n, p in ms.models.items()}
        return {**head, "models": plans}, functools.partial(_show_plans, plans)
    keep(choice.selection.reset)  # building settles the choice: a reset saved choice is saved
    log = report.progress(as_json)
    built = {n: build(p, choice.provider, store_dir=store_dir, log=log, **options).to_dict()
             for n, p in ms.models.items()}
    return {**head, "models": built}, functools.partial(_show_built, list(built), choice.provider, choice.source)


def _show_plans(plans: dict[str, PlanDoc]) -> None:
    for plan in plans.values():
        report.render_targets(plan)


def _show_built(names: list[str], provider: str, source: str) -> None:
    for n in names:
        report.info(f"{n}: built for {provider} ({source})")


class RunAsked(Protocol):
    """What `gpux run` was asked for that a pipeline reads (gpux.run.command.RunRequest has it all); the options a
    pipeline does not support are read by name (UNSUPPORTED)."""

    @property
    def provider(self) -> str | None: ...
    @property
    def store(self) -> str | None: ...
    @property
    def as_json(self) -> bool: ...
    @property
    def benchmark(self) -> bool: ...
    @property
    def batch(self) -> int | None: ...
    @property
    def runs(self) -> int | None: ...
    @property
    def warmup(self) -> int | None: ...
    @property
    def input_json(self) -> str | None: ...
    @property
    def input_file(self) -> str | None: ...
    @property
    def output(self) -> str | None: ...


def run_workspace(ms: Models, req: RunAsked) -> int:
    """Run the pipeline once on given inputs, or benchmark it per step and end to end."""
    from gpux.model.inputs import load_file, parse_json, synthetic
    from gpux.run.inuse import holding
    from gpux.workspace.pipeline import benchmark, open_pipeline

    if ms.workspace is None or not ms.workspace.config.pipeline:
        raise UsageError(f"{ms.place.name}: the workspace has no pipeline: to run; run one model by its folder")
    refuse_unsupported(req)
    if req.output and not req.output.endswith(".npz"):
        raise UsageError(f"--output {req.output}: outputs are written as .npz; name the file *.npz")
    choice = shared_choice(ms, req.provider)
    store_dir, as_json = req.store, req.as_json
    what = "gpux run --benchmark" if req.benchmark else "gpux run"
    with holding(ms.place.name, ms.place.root, store_dir, what):
        pipe = open_pipeline(ms, choice, store_dir, report.progress(as_json))
        try:
            if req.benchmark:
                feeds = synthetic(pipe.inputs, {"batch": req.batch or 1})
                doc = benchmark(pipe, feeds, req.runs or 100, req.warmup or 10)
            else:
                text, file = req.input_json, req.input_file
                if (text is None) == (file is None):
                    raise UsageError("pass one of --input or --file (or --benchmark)")
                feeds = parse_json(text, pipe.inputs) if text is not None else load_file(file or "", pipe.inputs)
                outputs = pipe.run_last(feeds)
                if req.output:
                    import numpy as np

                    np.savez(req.output, **outputs)  # type: ignore[arg-type]  # (numpy: as if a name were allow_pickle)
                doc = {"outputs": {k: v.tolist() for k, v in outputs.items()}}
        finally:
            pipe.close()
    doc = {"workspace": ms.place.name, "provider": choice.provider, "source": choice.source,
           "warnings": list(choice.warnings), **doc}
    _render_run(doc, as_json)
    return 0


def refuse_unsupported(req: object, more: tuple[str, ...] = (), what: str = "running a workspace's pipeline") -> None:
    """The `gpux run` options a pipeline run does not take (UNSUPPORTED, and `more`), refused in one line."""
    names = {"as_csv": "csv", "input_json": "input", "input_file": "file"}
    given = [f"--{names.get(k, k).replace('_', '-')}" for k in (*UNSUPPORTED, *more) if getattr(req, k, None)]
    if given:
        raise UsageError(f"{', '.join(given)}: not supported when {what}",
                         hint="run one model by its folder for those; a pipeline is always strict")


def _render_run(doc: dict[str, Any], as_json: bool) -> None:
    if as_json:
        report.emit_json(doc)
        return
    for w in doc["warnings"]:
        report.warn(w)
    report.info(f"{doc['workspace']}: every step on {doc['provider']} ({doc['source']})")
    if "steps" not in doc:
        for k, v in doc["outputs"].items():
            print(f"{k}: {v}")
        return
    rows = [[r["step"], r["provider"], f"{r['p50_ms']:.4f}", f"{r['p99_ms']:.4f}", f"{r['mean_ms']:.4f}"]
            for r in doc["steps"]]
    e = doc["end_to_end"]
    rows.append(["end to end", doc["provider"], f"{e['p50_ms']:.4f}", f"{e['p99_ms']:.4f}", f"{e['mean_ms']:.4f}"])
    print(tables.format_table(["step", "provider", "p50 ms", "p99 ms", "mean ms"], rows))
    print(f"{doc['runs']} runs after {doc['warmup']} warm-up; {e['per_s']:.1f} pipelines/s")


__all__ = ["InUse", "build_workspace", "inspect_workspace", "run_workspace", "use_command"]
