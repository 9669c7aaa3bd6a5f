"""Which providers to try, in order, and why: --provider > $GPUX_PROVIDER > `gpux use` > runtime.backend >
the tune lock > auto (every provider of the registry, in its order)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from gpux.config.load import Project
from gpux.config.problems import did_you_mean
from gpux.errors import UsageError
from gpux.providers import registry

ENV_PROVIDER = "GPUX_PROVIDER"


@dataclass(frozen=True)
class Selection:
    """The ordered providers to try and where that order came from."""

    chain: tuple[str, ...]
    source: str  # --provider | argument | GPUX_PROVIDER | gpux use | runtime.backend | gpux.lock.json | auto
    strict: bool
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {"chain": list(self.chain), "source": self.source, "strict": self.strict,
                "notes": list(self.notes)}


def parse_request(value: str, source: str) -> tuple[str, ...]:
    names = tuple(v.strip() for v in value.split(","))
    if not all(names):
        raise UsageError(f"{source}: {value!r} has an empty provider name; expected e.g. cuda,cpu")
    if "auto" in names and len(names) > 1:
        raise UsageError(f"{source}: 'auto' stands alone; list providers instead, e.g. cuda,openvino,cpu")
    known = (*registry(), "auto")
    for n in names:
        if n not in known:
            raise UsageError(f"{source}: unknown provider {n!r}{did_you_mean(n, known)}; "
                             f"expected one of auto, {', '.join(known[:-1])}")
    return names or ("auto",)


def select(project: Project, provider: str | None = None, strict: bool = False,
           locked: str | None = None, saved: str | None = None, given_by: str = "--provider") -> Selection:
    """Precedence: --provider > GPUX_PROVIDER > the provider `gpux use` saved (`saved`, see choice.py) >
    runtime.backend > the provider `gpux tune` locked for this machine (`locked`) > auto. A command's
    --provider is never remembered: the next command selects afresh. `given_by` names where `provider`
    came from (the source recorded and named in errors): `--provider` on the command line, `argument` for
    `gpux.load(provider=...)`."""
    cfg = project.config
    names = registry()
    strict = strict or not cfg.runtime.fallback
    supported = cfg.runtime.supported
    notes: list[str] = []
    if provider:
        request, source = parse_request(provider, given_by), given_by
    elif os.environ.get(ENV_PROVIDER):
        request, source = parse_request(os.environ[ENV_PROVIDER], ENV_PROVIDER), ENV_PROVIDER
    elif saved:
        request, source = (saved,), "gpux use"
    elif cfg.runtime.backend != ("auto",):
        request, source = cfg.runtime.backend, "runtime.backend"
    elif locked:
        request, source = (locked,), "gpux.lock.json"
    else:
        request, source = ("auto",), "auto"
    if supported and request != ("auto",):
        bad = [p for p in request if p not in supported]
        if bad:
            raise UsageError(f"{source}: {', '.join(bad)} is not supported by model {project.name!r} "
                             f"(runtime.supported: {', '.join(supported)})",
                             hint=f"use one of {', '.join(supported)}")
    if request == ("auto",):
        chain = tuple(p for p in names if not supported or p in supported)
    elif len(request) == 1:
        chain = (request[0], *names[request[0]].fallback)
        if not strict and "cpu" not in chain:
            chain = (*chain, "cpu")
    else:
        chain = request if strict or "cpu" in request else (*request, "cpu")
    if supported:
        chain = tuple(p for p in chain if p in supported) or chain[:1]
    if strict and request == ("auto",):
        notes.append("strict with backend auto: the best available provider is used; none → exit 4")
    return Selection(chain, source, strict, tuple(notes))
