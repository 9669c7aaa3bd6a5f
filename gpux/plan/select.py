"""What runs, decided in one place: the precedence (--provider > $GPUX_PROVIDER > `gpux use` > runtime.backend >
the tune lock > auto, written once in `ladder`), gating by runtime.supported and the offer, and the probe of
the chain on this machine. Selecting reads only: a saved choice that is no longer offered comes back as
`Selection.reset`, which `choice.keep` writes for the commands that persist it."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpux.config.load import Project
from gpux.config.problems import did_you_mean
from gpux.documents import SelectionDoc
from gpux.errors import ProviderUnavailable, UsageError
from gpux.plan.choice import Place, Reset, read
from gpux.providers import Availability, broken_plugin, registry

ENV_PROVIDER = "GPUX_PROVIDER"
SAVED = "gpux use"
BACKEND = "runtime.backend"
AUTO = "auto"


@dataclass(frozen=True, kw_only=True)
class Selection:
    """The ordered providers to try, where that order came from, and what this machine said about them."""

    chain: tuple[str, ...]
    source: str  # --provider | argument | GPUX_PROVIDER | gpux use | runtime.backend | gpux.lock.json | auto
    strict: bool
    notes: tuple[str, ...] = field(default=())
    warnings: tuple[str, ...] = ()  # said on the way: a saved choice no longer offered, a lock measured elsewhere
    skipped: tuple[Availability, ...] = ()  # providers of the chain passed over before `runs_on`, and why
    runs_on: str | None = None  # the first provider of the chain available here (None: none, or not probed)
    project: Project | None = field(default=None, repr=False, compare=False)  # with the tune lock's options
    reset: Reset | None = None  # for choice.keep: a stale saved choice and what replaces it

    def to_dict(self) -> SelectionDoc:
        return {"chain": list(self.chain), "source": self.source, "strict": self.strict,
                "notes": list(self.notes)}

    def available(self, provider: str) -> Availability:
        """Is `provider` usable here for this project (its runtime's own probe)?"""
        from gpux.providers import probe, probe_for

        return probe(provider) if self.project is None else probe_for(self.project, provider)


def last_resort() -> str:
    """The provider every non-strict request ends on: the registry's row that runs everywhere."""
    return next(n for n, row in registry().items() if row.last_resort)


def parse_request(value: str, source: str) -> tuple[str, ...]:
    names = tuple(v.strip() for v in value.split(","))
    if not all(names):
        raise UsageError(f"{source}: {value!r} has an empty provider name; expected e.g. cuda,cpu")
    if AUTO in names and len(names) > 1:
        raise UsageError(f"{source}: 'auto' stands alone; list providers instead, e.g. cuda,openvino,cpu")
    known = (*registry(), AUTO)
    for n in names:
        if n not in known:
            raise UsageError(f"{source}: unknown provider {n!r}{did_you_mean(n, known)}{broken_plugin(n)}; "
                             f"expected one of auto, {', '.join(known[:-1])}")
    return names or (AUTO,)


def ladder(provider: str | None, given_by: str, backend: tuple[str, ...], saved: Callable[[], str | None],
           locked: Callable[[], str | None] = lambda: None) -> tuple[tuple[str, ...], str]:
    """(the request, its source): the first rung that says something. The only place the precedence is
    written; `saved` and `locked` are asked only when every rung above them is silent."""
    rungs: tuple[tuple[str, Callable[[], tuple[str, ...] | None]], ...] = (
        (given_by, lambda: parse_request(provider, given_by) if provider else None),
        (ENV_PROVIDER, lambda: parse_request(os.environ[ENV_PROVIDER], ENV_PROVIDER)
         if os.environ.get(ENV_PROVIDER) else None),
        (SAVED, lambda: (choice,) if (choice := saved()) else None),
        (BACKEND, lambda: backend if backend != (AUTO,) else None),
        ("gpux.lock.json", lambda: (lock,) if (lock := locked()) else None),
    )
    for source, says in rungs:
        request = says()
        if request:
            return request, source
    return (AUTO,), AUTO


def saved_choice(place: Place, models: dict[str, Project]) -> tuple[str | None, str | None, Reset | None]:
    """(the saved choice if still offered, else the best offered provider that replaces it; a warning saying why
    it was replaced; the reset `choice.keep` writes). Nothing saved: (None, None, None). Reads only."""
    if not place.file.is_file():
        return None, None, None
    saved = read(place)
    from gpux.plan.offer import compute

    offer = compute(models)
    if saved in offer.offer:
        return saved, None, None
    why = "; ".join(offer.blockers(saved)) if saved else f"{place.file} does not name a provider"
    reset = f"reset to {offer.best}" if offer.best else "forgotten: no provider runs every enabled model here"
    return offer.best, (f"the provider saved with `gpux use` ({saved or 'unreadable'}) is no longer offered "
                        f"({why}); {reset}"), (place, offer.best)


def select(project: Project, provider: str | None = None, strict: bool = False, *,
           store_dir: str | Path | None = None, given_by: str = "--provider", here: bool = True) -> Selection:
    """What runs `project`: the request by precedence (`ladder`; `given_by` names where `provider` came from:
    `--provider`, or `argument` for `gpux.load(provider=...)`), gated by runtime.supported, made a chain
    (a provider's row fallback, then the last resort, unless strict), and probed up to the first provider
    available here (`here=False`: for another machine, nothing probed). A command's --provider is never
    remembered. Nothing is written."""
    from gpux.plan.lock import apply_lock

    cfg = project.config
    strict = strict or not cfg.runtime.fallback
    place = Place(project.name, project.root, store_dir)
    warnings: list[str] = []
    reset: Reset | None = None

    def saved() -> str | None:
        nonlocal reset
        choice, said, reset = saved_choice(place, {project.name: project})
        warnings.extend([said] if said else [])
        return choice

    def locked() -> str | None:
        nonlocal project
        project, name, why = apply_lock(project)
        warnings.extend([why] if why else [])
        return name

    request, source = ladder(provider, given_by, cfg.runtime.backend, saved, locked)
    chain = _chain(project, request, source, strict)
    notes = ("strict with backend auto: the best available provider is used; none → exit 4",) \
        if strict and request == (AUTO,) else ()
    sel = Selection(chain=chain, source=source, strict=strict, notes=notes, warnings=tuple(warnings), project=project,
                    reset=reset)
    if not here:
        return sel
    skipped: list[Availability] = []
    for name in chain:
        avail = sel.available(name)
        if avail.ok:
            break
        skipped.append(avail)
    runs_on = chain[len(skipped)] if len(skipped) < len(chain) else None
    from dataclasses import replace

    return replace(sel, skipped=tuple(skipped), runs_on=runs_on)


def _chain(project: Project, request: tuple[str, ...], source: str, strict: bool) -> tuple[str, ...]:
    """The providers to try for `request`, in order, kept to runtime.supported."""
    names, last = registry(), last_resort()
    supported = project.config.runtime.supported
    if supported and request != (AUTO,):
        bad = [p for p in request if p not in supported]
        if bad:
            raise UsageError(f"{source}: {', '.join(bad)} is not supported by model {project.name!r} "
                             f"(runtime.supported: {', '.join(supported)})",
                             hint=f"use one of {', '.join(supported)}")
    if request == (AUTO,):
        chain = tuple(p for p in names if not supported or p in supported)
    else:
        chain = (request[0], *names[request[0]].fallback) if len(request) == 1 else request
        if not strict and last not in chain:
            chain = (*chain, last)
    if supported:
        chain = tuple(p for p in chain if p in supported) or chain[:1]
    return chain


def select_shared(models: dict[str, Project], place: Place, provider: str | None, backend: str) -> Selection:
    """The one provider every model of a workspace runs: the same precedence (no tune lock: it is measured per
    model), a single provider only, gated by the offer (a request outside it is refused naming the models that
    block it; auto takes the best offered). The chain is that provider alone. Nothing is written."""
    from gpux.plan.offer import compute

    offer = compute(models)
    warnings: list[str] = []
    reset: Reset | None = None

    def saved() -> str | None:
        nonlocal reset
        choice, said, reset = saved_choice(place, models)
        warnings.extend([said] if said else [])
        return choice

    request, source = ladder(provider, "--provider", (backend,), saved)
    if len(request) > 1:
        raise UsageError(f"{source}: {','.join(request)}: a workspace runs one provider for all its models")
    wanted = None if request == (AUTO,) else request[0]
    if wanted is not None:
        offer.refuse(wanted, source)
    elif offer.best is None:  # the last resort: say what keeps even it out
        last = last_resort()
        raise ProviderUnavailable("no provider runs every enabled model here "
                                  f"({last}: {'; '.join(offer.blockers(last))})",
                                  hint="see `gpux inspect` for the model × provider matrix")
    chosen = wanted or offer.best
    assert chosen is not None
    return Selection(chain=(chosen,), source=source, strict=True, warnings=tuple(warnings), runs_on=chosen, reset=reset)


__all__ = ["ENV_PROVIDER", "Selection", "ladder", "last_resort", "parse_request", "select", "select_shared"]
