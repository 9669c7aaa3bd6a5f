"""Ordered fallback: each selected provider is probed, built (verified) and opened in turn, every attempt
recorded; the first that opens is handed to the Session. Builds on the way to a session happen here only."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpux.artifacts import store
from gpux.artifacts.build import BuildResult, build
from gpux.config.load import Project
from gpux.documents import AttemptDoc
from gpux.errors import (
    Failure,
    GpuxError,
    InputError,
    ModelError,
    ProviderUnavailable,
    StepError,
    VerificationFailed,
    classify,
    first_line,
)
from gpux.model.io import Checked
from gpux.plan.select import Selection
from gpux.providers import Runner
from gpux.runtimes import kind_of


@dataclass(frozen=True)
class Attempt:
    """One try of one provider: how far it got and why it stopped."""

    provider: str
    stage: str  # probe | build | session | first-inference | ok
    ok: bool
    reason: str = ""
    fix: str | None = None

    def to_dict(self) -> AttemptDoc:
        return {"provider": self.provider, "stage": self.stage, "ok": self.ok, "reason": self.reason,
                "fix": self.fix}

    def line(self) -> str:
        from gpux.report import attempt_line

        return attempt_line(self.to_dict())


@dataclass
class Opened:
    """A provider that opened: its runner, the build it opened, and how long building and loading took."""

    provider: str
    runner: Runner
    build: BuildResult
    timings: dict[str, float]


@dataclass(kw_only=True)
class Fallback:
    """The providers still to try, in order, and every attempt so far."""

    project: Project
    checked: Checked  # the project's model, checked (gpux.model.io.check_model)
    selection: Selection
    store_dir: str | Path | None = None
    force: bool = False
    verify: bool = True
    log: Callable[[str], None] = lambda _m: None
    strict: bool = False  # --strict: refuse an artifact that is not verified too
    attempts: list[Attempt] = field(default_factory=list)
    reserve: Opened | None = None  # an unverified artifact auto selection opens only when nothing verified does
    pending: list[str] = field(init=False)  # the selection's chain, tried from the front

    def __post_init__(self) -> None:
        self.pending = list(self.selection.chain)

    def fail(self, provider: str, stage: str, reason: str, fix: str | None = None,
             cause: GpuxError | None = None) -> None:
        """Record a failed attempt; with fallback off (and not merely absent under auto), stop here."""
        self.attempts.append(Attempt(provider, stage, False, reason, fix))
        if self.selection.strict and (self.selection.source != "auto" or stage != "probe"):
            if isinstance(cause, VerificationFailed):  # an accuracy gate, not a missing provider
                raise cause
            what = "could not build the model" if stage == "build" else f"unavailable ({stage})"  # build: it is here
            raise ProviderUnavailable(f"{provider} {what}: {reason} — fallback is off "
                                      f"(--strict or runtime.fallback: false)", hint=fix)

    def next(self) -> Opened:
        """The next provider that probes, builds and opens; ProviderUnavailable when none is left. Under auto
        selection an unverified artifact is held in reserve while a later provider may give a verified one."""
        try:
            opened = self._next_verified()
        except BaseException:  # whatever stops the search (Ctrl-C included): the runner held in reserve is closed
            self._keep(None)
            raise
        if opened is not None:
            return opened
        tried = "; ".join(a.line() for a in self.attempts) or "nothing to try"
        tried_here = [a for a in self.attempts if a.stage != "probe"]
        if tried_here and all(a.stage == "build" for a in tried_here):  # providers were there; the model failed
            raise ProviderUnavailable(f"{self.project.name!r} cannot run on any provider here (a model or runtime "
                                      f"limit, not a missing provider): {tried}")
        raise ProviderUnavailable(f"no provider could run {self.project.name!r}: {tried}")

    def _next_verified(self) -> Opened | None:
        passing_over = self.selection.source == "auto" and not self.selection.strict
        while self.pending:
            provider = self.pending.pop(0)
            avail = self.selection.available(provider)
            if not avail.ok:
                self.fail(provider, "probe", avail.reason, avail.fix)
                continue
            opened = self._open(provider)
            if opened is None:
                continue
            why = unverified(opened.build) if passing_over else ""
            if why and (self.pending or self.reserve is not None):
                self.attempts.append(Attempt(provider, "build", False, f"{why}; a verified one is preferred"))
                self._keep(opened)  # the first unverified one is kept, a later one closed
                continue
            self._keep(None)
            return opened
        if self.reserve is None:
            return None
        opened, self.reserve = self.reserve, None
        self.attempts = [a for a in self.attempts if a.provider != opened.provider]
        return opened

    def _open(self, provider: str) -> Opened | None:
        started = time.perf_counter()
        try:
            result = build(self.project, provider, force=self.force, verify=self.verify, store_dir=self.store_dir,
                           log=self.log, full_check=True, for_run=True, strict=self.strict)
        except (ModelError, InputError, StepError):
            raise  # the model itself, the inputs in hand or the user's python step: no other provider helps
        except GpuxError as exc:
            self.fail(provider, "build", " ".join(x.strip() for x in exc.message.splitlines()), exc.hint, exc)
            return None
        built = time.perf_counter()
        for line in result.instead:  # a lossy target that converted nothing: the fp32 artifact it made, said
            self.log(f"warning: {line}")
        try:
            runner = open_runner(provider, self.project, result.final.artifact)
        except Exception as exc:  # runtimes raise anything when a device or library is missing; a gpux bug is raised
            if classify(exc) is Failure.BUG:
                raise
            self.fail(provider, "session", first_line(exc))
            return None
        if runner.dropped:
            runner.close()
            self.fail(provider, "session", runner.dropped)
            return None
        timings = {"build_s": built - started, "load_s": time.perf_counter() - built}
        if "compile_s" in runner.details:  # torch.compile's first call, done while opening
            timings["compile_s"] = runner.details["compile_s"]
        return Opened(provider, runner, result, timings)


    def _keep(self, opened: Opened | None) -> None:
        """Hold `opened` in reserve (the first unverified one only), closing what is not kept."""
        if opened is not None and self.reserve is None:
            self.reserve = opened
        elif opened is not None:
            opened.runner.close()
        elif self.reserve is not None:
            self.reserve.runner.close()
            self.reserve = None


def unverified(result: BuildResult) -> str:
    """Why the artifact a build ends on is not verified ("" when it is)."""
    v = result.final.artifact.manifest.get("verification") or {}
    return f"its artifact is unverified ({v.get('unverified')})" if v.get("status") == "unverified" else ""


def open_runner(provider: str, project: Project, artifact: store.Artifact) -> Runner:
    """Open an artifact with the runtime its build step names."""
    return kind_of(artifact.kind).open_step()(provider, project, artifact)
