"""The floor `gpux tune` must beat: the untuned default (what `gpux build` picks with no lock, with the declared
options) and the lock it may replace, found among the candidates (or added to them) and measured first; the order
the rest are measured in (each provider's rows taking turns, refinements last); and what a search cut short left
unmeasured."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpux.bench.candidates import Outcome, block_of, label_of
from gpux.config.load import Project
from gpux.providers.options import OptionFields

DEFAULT, LOCK = "default", "lock"  # an Outcome's role
CUT = "over budget"
LISTED = 6  # unmeasured candidates the summary names  # the status of a candidate a search cut short left out


@dataclass(frozen=True, kw_only=True)
class Floor:
    """The untuned default as tune found it: its provider and precision, and whether the search asked for
    takes it in (`outside`: why not, e.g. `--providers cpu`)."""

    provider: str | None
    precision: str
    outside: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"provider": self.provider, "precision": self.precision, "outside": self.outside or None}


def untuned_default(project: Project, store: str | None) -> str | None:
    """The provider `gpux build` runs this project on with no lock here (None: none is available)."""
    from gpux.plan.lock import LOCK_NAME
    from gpux.plan.select import select

    sel = select(project, None, store_dir=store)
    if sel.source == LOCK_NAME:  # the lock rung spoke: every rung above it was silent, so without it, auto
        sel = select(project, "auto", store_dir=store, given_by="auto")
    return sel.runs_on


def declared_precision(project: Project, provider: str) -> str:
    block = getattr(project.config.providers, provider, None)
    return str(getattr(block, "precision", None) or "fp32")


def ordered(outcomes: list[Outcome], first: str | None) -> list[Outcome]:
    """Likeliest winners first: the providers' plain rows taking turns (`first`'s provider leads, then the
    registry's priority order), each provider's rows in its table's order; refinements last, each after the ones
    of candidates before its own."""
    from gpux.providers import registry

    rank = {name: i for i, name in enumerate(registry())}
    plain = [o for o in outcomes if o.refines is None]
    providers = sorted(dict.fromkeys(o.provider for o in plain),
                       key=lambda p: (p != first, rank.get(p, len(rank))))
    queues = [[o for o in plain if o.provider == p] for p in providers]
    turns = [q[i] for i in range(max(map(len, queues), default=0)) for q in queues if i < len(q)]
    return turns + [o for o in outcomes if o.refines is not None]


def with_floor(project: Project, outcomes: list[Outcome], asked: Any) -> tuple[list[Outcome], Floor]:
    """`outcomes` reordered (see `ordered`) with the untuned default and the lock in force put first (their
    roles set; added where no candidate builds what they build). `asked`: the TuneRequest (providers, precisions,
    store). The default is the floor only inside the search asked for."""
    from gpux.plan.lock import read_lock

    provider = untuned_default(project, asked.store)
    floor = Floor(provider=provider, precision=declared_precision(project, provider) if provider else "-")
    out = ordered(outcomes, provider)
    if provider is None:
        return out, Floor(provider=None, precision="-", outside="no provider is available here")
    if asked.providers is not None and provider not in asked.providers:
        floor = Floor(provider=provider, precision=floor.precision, outside=f"--providers {','.join(asked.providers)}")
    elif floor.precision not in asked.precisions:
        floor = Floor(provider=provider, precision=floor.precision,
                      outside=f"--precisions {','.join(asked.precisions)}")
    else:
        out = _put_first(project, out, provider, {}, floor.precision, DEFAULT)
    locked, _ = read_lock(project)
    if locked is not None and (asked.providers is None or locked.provider in asked.providers) \
            and locked.precision in asked.precisions:
        out = _put_first(project, out, locked.provider, locked.options, locked.precision, LOCK, after=DEFAULT)
    return out, floor


def _put_first(project: Project, outcomes: list[Outcome], provider: str, options: OptionFields, precision: str,
               role: str, after: str | None = None) -> list[Outcome]:
    """The candidate building what (provider, options) builds, given `role` and moved to the front (behind the
    one of role `after`); a new candidate where none does. One that already has a role keeps it."""
    built = block_of(project, provider, options)
    same = next((o for o in outcomes if o.provider == provider and o.refines is None
                 and block_of(project, provider, o.options) == built), None)
    if same is not None and same.role:
        return outcomes
    o = same or Outcome(provider=provider, precision=precision, options=dict(options))
    o.role = role
    rest = [x for x in outcomes if x is not o]
    lead = [x for x in rest if after and x.role == after]
    return [*lead, o, *[x for x in rest if x not in lead]]


def kept_out(outcomes: list[Outcome], budget_s: float) -> dict[str, Any]:
    """What the search measured and what a cut-short search left out (`partial`), as the lock and --json say."""
    cut = [o for o in outcomes if o.status == CUT]
    measured = [o for o in outcomes if o.row.get("stats")]
    return {"candidates": len(outcomes), "measured": len(measured), "partial": bool(cut), "budget_s": budget_s,
            "unmeasured": [label_of(o) for o in cut]}


def floor_pick(outcomes: list[Outcome], ranked: list[Outcome], objective: str) -> Outcome | None:
    """The first of `ranked` (the candidates within noise of the fastest, preferred first) that is the untuned
    default or clearly faster than it, measured side by side in the same rounds (gpux.bench.rounds.clearly_faster);
    none: the default. Where the default did not run, the first of `ranked`. A default that only its data cannot
    judge (unverified) is still the floor: it is what runs without a lock."""
    from gpux.bench import rounds

    floor = next((o for o in outcomes if o.role == DEFAULT and o.status in ("ok", "unverified")
                  and o.row.get("stats")), None)
    if floor is None:
        return ranked[0] if ranked else None
    theirs = floor.row.get("round_scores")
    for o in ranked:
        ours = o.row.get("round_scores")
        if o is floor or (ours and theirs and rounds.clearly_faster(ours, theirs, objective)):
            return o
    floor.status = "ok"
    return floor


def said(lock: dict[str, Any]) -> list[str]:
    """What the summary says of the floor and of a search cut short (each a line for report.info)."""
    out = []
    floor, search = lock.get("default") or {}, lock.get("search") or {}
    ran = next((c for c in lock.get("candidates") or () if c.get("role") == DEFAULT), None)
    if floor.get("outside"):
        out.append(f"the untuned default ({floor['provider']} {floor['precision']}) is outside {floor['outside']}: "
                   "not measured, so the lock is not held to it")
    elif ran is not None:
        vs = ran.get("vs_plain_ort")
        out.append(f"the untuned default (what `gpux build` picks with no lock: {ran['provider']} {ran['precision']}) "
                   f"{'ran at ' + format(vs['paired'], '.2f') + '× plain ONNX Runtime' if vs else ran['status']}; "
                   "only a candidate clearly faster than it, in the same rounds, is locked")
    choice = lock.get("choice") or {}
    if choice.get("default"):
        out.append("nothing measured beat the untuned default: the lock holds it (run behaves as without a lock)")
    if search.get("partial"):
        left = search.get("unmeasured") or []
        more = f"; and {len(left) - LISTED} more (--json lists every one)" if len(left) > LISTED else ""
        out.append(f"partial search: {len(left)} of {search['candidates']} candidates not measured (--budget "
                   f"{search['budget_s']:g} s): " + "; ".join(left[:LISTED]) + more)
    return out
