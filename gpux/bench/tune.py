"""`gpux tune`: build the candidates this machine can run, verify each against the declared tolerances,
benchmark the survivors with the protocol, and lock the fastest in gpux.lock.json beside gpux.yml, unless it is not
clearly faster than the untuned default (gpux.bench.floor), which is then locked; `--table` writes no lock.

`run`, `serve` and `package` follow the lock when nothing more explicit (a flag, $GPUX_PROVIDER, a
`runtime.backend` other than auto) decides; on a machine or runtime whose fingerprint differs they say so
and select as usual.
"""

from __future__ import annotations

import json
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpux import report
from gpux.arrays import Feeds
from gpux.bench import protocol as bench
from gpux.bench.batches import batched
from gpux.bench.candidates import Outcome, ms, needless, options_text
from gpux.bench.candidates import candidates as candidates_for
from gpux.bench.records import Accuracy, Baseline, Limiting, Row, Speedup
from gpux.config.load import Project
from gpux.errors import UsageError
from gpux.plan.lock import LOCK_NAME, SCHEMA, fingerprint
from gpux.report import tables

OBJECTIVES = ("latency", "throughput")
WHY_WIDTH = 120  # the table's why column, cut at a word; the JSON keeps the whole text
UNVERIFIED = ("unverified (int8 on generated data only, or on too few real rows to show its floors; declare "
              "verify.data, calibration data or verify.derive)")
LIMITING_SHOWN = 8  # the most sensitive layers the lock lists per ranking


@dataclass(frozen=True, kw_only=True)
class TuneRequest:
    target: str = "."
    objective: str = "latency"
    precisions: tuple[str, ...] = ("fp32", "fp16", "bf16", "int8")
    providers: tuple[str, ...] | None = None  # None: every provider available here
    seconds: float = 1.0  # measured per candidate
    budget_s: float = 300.0  # for the whole search; candidates past it are not measured
    concurrency: int | None = None  # throughput objective: parallel requests (default 4)
    store: str | None = None
    as_json: bool = False
    allow_unverified: bool = False  # a lossy candidate verified on generated data only may be locked
    table: bool = False  # the accuracy-gated table (gpux.bench.table): every row, the one tune would lock marked;
    # no lock written
    as_csv: bool = False


def candidates(project: Project, req: TuneRequest) -> list[Outcome]:
    """Every candidate tune tries for `req` (gpux.bench.candidates)."""
    return candidates_for(project, req.providers, req.precisions)


def measure_all(project: Project, outcomes: list[Outcome], req: TuneRequest,
                log: Callable[[str], None]) -> Baseline | None:
    """Open every candidate (built and verified), then measure the survivors and a plain ONNX Runtime session
    interleaved in rounds (gpux.bench.rounds). The baseline's figures (None: no ONNX source to run plainly)."""
    from gpux.bench import rounds
    from gpux.bench.command import measured_row
    from gpux.quality.references import REFERENCES

    concurrency = (req.concurrency or 4) if req.objective == "throughput" else 1
    protocol = bench.Protocol(warmup=3, warmup_seconds=min(0.2, req.seconds), runs=20, seconds=req.seconds,
                              concurrency=concurrency, batch=project.config.benchmark.batch or 1)
    deadline = time.monotonic() + req.budget_s
    opened: list[tuple[Outcome, Any]] = []
    base: Baseline | None = None
    try:
        with REFERENCES.kept():  # each rung judged on the same rows against the same reference
            open_all(project, outcomes, req, protocol, deadline, log, opened)
        if not opened:
            return None

        def one(calls: list[Any]) -> Any:
            return calls if concurrency > 1 else calls[0]

        more = batched(project, opened) if req.objective == "throughput" else []
        for parent, o, _ in reversed(more):  # each batch size after its candidate's batch-1 row
            outcomes.insert(outcomes.index(parent) + 1, o)
        entries = [rounds.Entry(call=one(p.session.runner.bind(p.feeds, concurrency))) for _, p in opened]
        entries += [rounds.Entry(call=p.session.runner.bind(p.feeds, 1)[0], concurrency=1, batch=o.batch)
                    for _, o, p in more]
        opened = opened + [(o, p) for _, o, p in more]
        plain, base = baseline_entry(project, opened[0][1].feeds, concurrency)
        every = entries + ([rounds.Entry(call=one(plain[0]), keep=plain[1])] if plain else [])
        log(f"measuring {len(entries)} candidates{' and a plain ONNX Runtime session' if plain else ''} "
            f"interleaved in {rounds.ROUNDS} rounds ...")
        done = rounds.measure_rounds(every, protocol, req.seconds, req.objective, deadline)
        if plain and base is not None:
            base.update(baseline_figures(every[-1], concurrency, req.objective))
            base["rounds"] = done
        for (o, prepared), e in zip(opened, entries, strict=True):
            o.row = measured_row(prepared, e.measurement(), e.concurrency or concurrency)
            o.row["round_scores"] = e.scores
            art = prepared.session.build.final.artifact if prepared.session.build else None
            o.row["build_info"] = art.manifest.get("info") if art else None
            o.status = "ok" if o.row["status"] == "ok" else "unavailable"
            if plain and base is not None:
                latency, stats = req.objective == "latency", o.row.get("stats") or {}
                theirs, ours = (base["p50"], stats["p50"]) if latency else (base["throughput"], stats["throughput"])
                o.row["vs_plain_ort"] = rounds.speedup(theirs, every[-1].scores, ours or 0.0, e.scores, req.objective)
    finally:
        for _, prepared in opened:
            prepared.session.close()  # a batched row shares its candidate's session: closing twice is harmless
    return base


def open_all(project: Project, outcomes: list[Outcome], req: TuneRequest, protocol: bench.Protocol,
             deadline: float, log: Callable[[str], None], opened: list[tuple[Outcome, Any]]) -> None:
    """Build, verify and open each candidate in turn (a refinement not needed, or past the budget, is left
    out); the opened ones are appended to `opened`, the others' rows say why."""
    from contextlib import nullcontext

    from gpux.bench.accuracy import verification_status
    from gpux.bench.command import OpenedRow, Rows, open_one
    from gpux.plan.targets import fitted_options, resolve_shapes, with_options
    from gpux.quality.speed import screened

    spent: dict[int, float] = {}  # seconds each opened candidate took, by id()
    for i, o in enumerate(outcomes, 1):
        if time.monotonic() > deadline and not o.role:  # the default and the lock in force are always measured
            o.status, o.why = "over budget", f"not measured: --budget {req.budget_s:g} s spent"
            continue
        o.status, o.why = needless(o, outcomes[:i - 1], spent, deadline - time.monotonic())
        if o.status != "pending":
            continue
        started = time.monotonic()
        log(f"tuning {i}/{len(outcomes)}: {o.provider} {o.precision} {_opts(o.options)}")
        candidate = with_options(project, o.provider, **fitted_options(project, o.provider, o.options))
        rows = Rows(protocol=protocol, shapes=resolve_shapes(candidate), store=req.store, input_file=None, log=log)
        with nullcontext() if o.role else screened():  # the default and the lock in force are verified whatever
            got = open_one(candidate, o.provider, o.precision, rows, pinned=True)
        spent[id(o)] = time.monotonic() - started
        if not isinstance(got, OpenedRow):
            o.row = got
            o.status = got["status"] if got["status"] in ("failed verification", "too slow") else "unavailable"
            o.why = why_out(got)
        else:
            o.status = "ok"
            art = got.session.build.final.artifact if got.session.build else None
            o.row = {"verification_status": verification_status(art.manifest.get("verification") if art else None)}
            opened.append((o, got))


def baseline_entry(project: Project, feeds: Feeds,
                   concurrency: int) -> tuple[tuple[list[Any], Any] | None, Baseline]:
    """The plain ONNX Runtime session on the source model ((calls, session), None where it cannot run: a source
    that is not ONNX, inputs it does not take) and the lock's record of it, saying why not."""
    from gpux.bench import rounds
    from gpux.errors import Failure, classify
    from gpux.formats import source_format

    record: Baseline = {"what": rounds.BASELINE, "source": str(project.source)}
    if source_format(project) != "onnx":
        return None, {**record, "error": f"the source is {source_format(project)}, not ONNX: no plain session"}
    try:
        return rounds.plain_session(project.source, feeds, concurrency), record
    except Exception as exc:  # ONNX Runtime's errors share no base class: the lock says why (a gpux bug is raised)
        if classify(exc) is Failure.BUG:
            raise
        return None, {**record, "error": f"a plain ONNX Runtime session failed: {str(exc).splitlines()[0][:200]}"}


def baseline_figures(entry: Any, concurrency: int, objective: str) -> Baseline:
    """The baseline's figures for the lock (its p50 and throughput in seconds and per second, as rows' stats)."""
    from gpux.bench import rounds

    s = bench.summarize(entry.latencies_s, entry.wall_s, concurrency=concurrency)
    throughput = s["throughput"]
    assert throughput is not None  # summarize's figures span a measured window
    return {"p50": s["p50"], "throughput": throughput, "p50_ms": ms(s["p50"]), "p99_ms": ms(s["p99"]),
            "median_ci_ms": [ms(s["median_ci"][0]), ms(s["median_ci"][1])],
            "round_spread": rounds.spread(entry.scores, objective)}


def why_out(row: Row) -> str:
    """Why a measured candidate is out: each failing metric of its verification whole (`probs: cosine 0.973100
    < min_cosine 0.98`), else its error."""
    return "; ".join(row.get("failures") or ()) or str(row.get("error") or row["status"])


def why_cell(why: str, width: int = WHY_WIDTH) -> str:
    """`why` for the table: whole when it fits, else cut at a word boundary."""
    return textwrap.shorten(why, width, placeholder=" …")


_opts = options_text


PRECISION_RANK = {"fp32": 0, "fp16": 1, "bf16": 2, "int8": 3}  # ties within noise go to the lower rank


def pick_best(outcomes: list[Outcome], objective: str, allow_unverified: bool = False) -> Outcome | None:
    """The fastest candidate that passed verification and ran (None: none did; ranked by the median round ratio over
    the plain session where it was measured, so a round slowed by the machine slows everyone in it); each row says
    why not. One verified on generated data only (a lossy artifact: "unverified"), or whose judged rows do not
    show a floor its answers meet (the bound of docs/verification.md, at any precision), is listed, not chosen,
    unless allowed. A candidate within noise of the fastest (not clearly slower: gpux.bench.rounds.clearly_faster) ties
    with it, and ties go to the higher precision, then to the simpler candidate (earlier in the list). The untuned
    default (role "default") is the floor: the pick replaces it only when clearly faster (gpux.bench.floor)."""
    from gpux.bench import rounds
    from gpux.bench.floor import DEFAULT, floor_pick
    from gpux.quality.evidence import shortfall

    for o in outcomes:
        if o.status != "ok" or allow_unverified or o.role == DEFAULT:  # the default runs without a lock anyway
            continue
        acc: Accuracy = o.row.get("accuracy") or {}
        # lossy: unverified by its build; any precision: its rows must show each floor to rank (the bound's words)
        said = acc.get("unverified") or shortfall(acc.get("evidence") or [])
        if o.row.get("verification_status") == "unverified" or said:
            o.status, o.why = "unverified", f"unverified: {said}" if said else UNVERIFIED
    ok = [o for o in outcomes if o.status == "ok"]
    if not ok:
        return None

    paired = all((vs := o.row.get("vs_plain_ort")) and vs["paired"] for o in ok)

    def speed(o: Outcome) -> float:  # higher is faster: the median round ratio over the plain session, else p50
        vs, s = o.row.get("vs_plain_ort"), o.row.get("stats") or {}
        if paired and vs:
            return float(vs["paired"])
        return float(1 / s["p50"] if objective == "latency" else s["throughput"] or 0.0)

    def beats(a: Outcome, b: Outcome) -> bool:
        ra, rb = a.row.get("round_scores"), b.row.get("round_scores")
        return rounds.clearly_faster(ra, rb, objective) if ra and rb else speed(a) > speed(b)

    fastest = max(ok, key=speed)
    tied = [o for o in ok if not beats(fastest, o)]
    ranked = sorted(tied, key=lambda o: (PRECISION_RANK.get(o.precision, 0), outcomes.index(o)))
    best = floor_pick(outcomes, ranked, objective) or ranked[0]  # the preferred one that clears the floor
    for o in ok:
        o.why = _why(o, best, fastest, objective, beats(best, o), speed)
    return best


def _why(o: Outcome, best: Outcome, fastest: Outcome, objective: str, slower: bool,
         speed: Callable[[Outcome], float]) -> str:
    from gpux.bench import rounds

    def noise(a: Outcome, b: Outcome) -> str:  # how many times faster a was than b, per round
        r = rounds.ratios(b.row.get("round_scores") or [], a.row.get("round_scores") or [], objective)
        return f" ({min(r):.2f}–{max(r):.2f}× per round)" if r else ""

    if o is best and o is fastest:
        return "chosen: fastest verified for " + objective + (" (the untuned default)" if o.role else "")
    if o is best and o.role == "default":
        return (f"chosen: the untuned default; nothing measured was clearly faster (fastest: {fastest.provider} "
                f"{fastest.precision}{noise(fastest, o)})")
    if o is best:
        return (f"chosen: within noise of the fastest ({fastest.provider} {fastest.precision}"
                f"{noise(fastest, o)}), {'higher precision' if o.precision != fastest.precision else 'simpler'}")
    ratio = speed(best) / speed(o)
    if slower:
        return f"{ratio:.2f}× slower than the chosen one"
    return f"within noise of the chosen one{noise(o, best)}; chosen for precision or simplicity"


def tune(req: TuneRequest) -> dict[str, Any]:
    from gpux.bench import rounds
    from gpux.config.locate import open_project
    from gpux.files import atomic_write_text, make_dir, store_root

    if req.objective not in OBJECTIVES:
        raise UsageError(f"--objective {req.objective}: expected one of {', '.join(OBJECTIVES)}")
    from gpux.bench.floor import DEFAULT, kept_out, with_floor

    project = open_project(req.target)
    make_dir(store_root(project.root, req.store))  # a store it cannot write fails here, not as every candidate's row
    outcomes, floor = with_floor(project, candidates(project, req), req)
    started = time.monotonic()
    baseline = measure_all(project, outcomes, req, report.progress(req.as_json))
    best = pick_best(outcomes, req.objective, req.allow_unverified)
    lock = {"schema": SCHEMA, "name": project.name, "objective": req.objective, "baseline": baseline,
            "measured": {"rounds": rounds.ROUNDS, "pause_s": rounds.PAUSE_S, "seconds_each": req.seconds},
            "choice": None if best is None else {"provider": best.provider, "precision": best.precision,
                                                 "options": best.options, "batch": best.batch,
                                                 "default": best.role == DEFAULT},
            "default": floor.to_dict(), "search": kept_out(outcomes, req.budget_s),
            "figures": None if best is None else best.to_dict(), "fingerprint": fingerprint(project),
            "tuned_in_s": round(time.monotonic() - started, 1), "candidates": [o.to_dict() for o in outcomes],
            "limiting_layers": limiting_layers(outcomes)}
    if req.table:
        from gpux.bench.table import table_of

        lock["table"] = table_of(project, lock)
    elif best is not None:  # with no survivor, an earlier lock stays as it was (run follows it as tune built it:
        # plan.lock.apply_lock drops the same declared fields the choice's options reject)
        atomic_write_text(project.root / LOCK_NAME, json.dumps(lock, indent=1) + "\n")
    return lock


def limiting_layers(outcomes: list[Outcome]) -> dict[str, Limiting]:
    """Per provider, the layers int8 hurts most as the ranking of its first mixed-precision build measured them
    (what limits int8 on this model), with what they were ranked on."""
    out: dict[str, Limiting] = {}
    for o in outcomes:
        record = (o.row.get("build_info") or {}).get("keep_fp32") or {}
        if record.get("ranking") and o.provider not in out:
            out[o.provider] = {"ranked_by": record["ranked_by"], "ranked_on": record["ranked_on"],
                               "settings": _opts(o.options), "layers": record["ranking"][:LIMITING_SHOWN]}
    return out


def agreement_cell(acc: Accuracy) -> str:
    """`91/100/100 %`: top-1, confident top-1 and top-5 agreement with the FP32 reference (class scores)."""
    values = [acc.get("top1"), acc.get("top1_confident"), acc.get("top5")]
    if all(v is None for v in values):
        return "-"
    return "/".join("-" if v is None else f"{v * 100:.0f}" for v in values) + " %"


def shown_cell(acc: Accuracy) -> str:
    """`>= 98.9 % of 300`: the lowest bound its judged rows show of a counted rate (the one nearest its floor)."""
    rates = acc.get("evidence") or []
    if not rates:
        return "-"
    w = min(rates, key=lambda w: w["bound"] - w["floor"])
    return f">= {report.percent(w['bound'])} of {w['rows']}"


def vs_cell(vs: Speedup | None) -> str:
    """`2.31× (2.10–2.52)`: the speedup over plain ONNX Runtime and its per-round range."""
    return "-" if not vs else f"{vs['speedup']:.2f}× ({vs['low']:.2f}–{vs['high']:.2f})"


def render(lock: dict[str, Any]) -> None:
    rows = []
    for c in lock["candidates"]:
        acc: Accuracy = c.get("accuracy") or Accuracy()
        rows.append([c["provider"], c["precision"], _opts(c["options"]) or "as declared", str(c.get("batch") or 1),
                     c["status"] + (f" ({c['role']})" if c.get("role") else ""),
                     "-" if c["p50_ms"] is None else f"{c['p50_ms']:.4f}",
                     "-" if c["throughput"] is None else f"{c['throughput']:.1f}", vs_cell(c.get("vs_plain_ort")),
                     agreement_cell(acc), shown_cell(acc),
                     "-" if acc.get("min_cosine") is None else f"{acc['min_cosine']:.6f}",
                     tables.format_size(c["size"]) if c.get("size") else "-", why_cell(c["why"])])
    print(tables.format_table(["provider", "precision", "options", "batch", "status", "p50 ms", "per s", "vs plain ORT",
                               "top-1/conf/top-5", "shown", "cosine", "size", "why"], rows))
    for provider, ranked in (lock.get("limiting_layers") or {}).items():
        report.info(f"layers int8 hurts most on {provider} (SQNR lost, ranked on {ranked['ranked_on']['samples']} "
                    "calibration samples): " + ", ".join(f"{r['layer']} {r['lost_db']:.1f} dB"
                                                         for r in ranked["layers"][:4]))
    base = lock.get("baseline") or {}
    if base.get("error"):
        report.warn(f"no speedups: {base['error']}")
    elif base.get("p50_ms") is not None:
        report.info(f"plain ONNX Runtime (default session on the source model): p50 {base['p50_ms']:.4f} ms, "
                    f"{base['throughput']:.1f} per s; measured interleaved with the candidates in "
                    f"{base.get('rounds')} rounds (noise: the least and greatest ratio of a round)")
    from gpux.bench.floor import said

    for line in said(lock):
        report.info(line)
    choice = lock["choice"]
    if choice is None:
        more = "; --allow-unverified may lock an unverified one" if any(
            c["status"] == "unverified" for c in lock["candidates"]) else ""
        report.error(f"no candidate passed verification and ran: nothing locked (each row says why{more})")
    else:
        vs = (lock.get("figures") or {}).get("vs_plain_ort")
        told = f", {vs_cell(vs)} plain ONNX Runtime" if vs else ""
        at = f" at batch {choice['batch']}" if (choice.get("batch") or 1) > 1 else ""
        report.info(f"locked {choice['provider']} {choice['precision']}{at} ({_opts(choice['options'])}{told}) in "
                    f"{LOCK_NAME}")
        if at:
            report.info(f"it runs fastest with {choice['batch']} rows per call: `gpux run NAME FOLDER --batch "
                        f"{choice['batch']}`, `serve: {{max_batch_size: {choice['batch']}}}`")
