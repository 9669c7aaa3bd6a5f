"""The work behind `gpux use`, and behind inspect and build when their target is a workspace (a workspace's run:
`workspace.pipeline.run_workspace`, `workspace.pages.answer_pages`)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypedDict, Unpack

from gpux import report
from gpux.documents import PlanDoc
from gpux.errors import GpuxError, UsageError
from gpux.plan.choice import keep, read, write
from gpux.report import tables
from gpux.workspace.project import Models, derived, open_models, shared_choice


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
    """What `gpux build` hands each model's plan (--shape; --force retries what the store remembers failing) and its
    execution (`artifacts.build.execute`: --force, --no-verify, --strict)."""

    force: bool
    verify: bool
    strict: bool
    shapes: dict[str, int] | None


def build_workspace(ms: Models, provider: str | None, store_dir: str | None, as_json: bool, *, dry_run: bool = False,
                    **options: Unpack[BuildOptions]) -> tuple[object, Callable[[], None]]:
    """Build every enabled model's artifacts for the one provider the workspace runs (`dry_run`: plan them): the
    report document (what --json prints), and what shows it as text."""
    from gpux.artifacts.build import execute
    from gpux.artifacts.plan import plan_build
    from gpux.plan.targets import refuse_unknown_dims

    choice = shared_choice(ms, provider)
    for w in choice.warnings:
        report.warn(w)
    head = {"workspace": ms.place.name, "provider": choice.provider, "source": choice.source}
    shapes, force = options.get("shapes"), options.get("force", False)
    plans = {n: plan_build(p, choice.provider, store_dir=store_dir, shapes=shapes, retry=force)
             for n, p in ms.models.items()}  # every model planned before any is built
    refuse_unknown_dims(shapes, {n: plan.inputs for n, plan in plans.items()})
    if dry_run:
        planned = {n: plan.to_dict() for n, plan in plans.items()}
        return {**head, "models": planned}, functools.partial(_show_plans, planned)
    keep(choice.selection.reset)  # building settles the choice: a reset saved choice is saved
    log = report.progress(as_json)
    built = {n: execute(plan, force=force, verify=options.get("verify", True), strict=options.get("strict", False),
                        log=log).to_dict() for n, plan in plans.items()}
    return {**head, "models": built}, functools.partial(_show_built, list(built), choice.provider, choice.source)


def _show_plans(plans: dict[str, PlanDoc]) -> None:
    for plan in plans.values():
        report.render_targets(plan)


def _show_built(names: list[str], provider: str, source: str) -> None:
    for n in names:
        report.info(f"{n}: built for {provider} ({source})")


__all__ = ["InUse", "build_workspace", "inspect_workspace", "use_command"]
