"""Opens a model with ordered fallback, records every attempt, and runs inference: the Python API."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpux.artifacts import store
from gpux.artifacts.build import BuildResult, build
from gpux.config.load import Project
from gpux.config.locate import open_project
from gpux.errors import GpuxError, InputError, ModelError, ProviderUnavailable, VerificationFailed, first_line
from gpux.model.inputs import cast_all
from gpux.model.io import ModelIO, Tensor, effective_io, load_checked
from gpux.plan.select import Selection
from gpux.providers import Runner, probe_for
from gpux.runtimes import resolve, step_of


@dataclass(frozen=True)
class Attempt:
    """One try of one provider: how far it got and why it stopped."""

    provider: str
    stage: str  # probe | build | session | first-inference | ok
    ok: bool
    reason: str = ""
    fix: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"provider": self.provider, "stage": self.stage, "ok": self.ok, "reason": self.reason,
                "fix": self.fix}

    def line(self) -> str:
        from gpux.report import attempt_line

        return attempt_line(self.to_dict())


class Session:
    """A model opened on the best provider that really works; `provider` says what runs."""

    def __init__(self, project: Project, io: ModelIO, selection: Selection, *, store_dir: str | Path | None,
                 force: bool, verify: bool, log: Callable[[str], None], warnings: list[str],
                 placement: bool = False, samples: list[dict[str, Any]] | None = None) -> None:
        self.project = project
        self._samples = samples
        self.io = io
        self.selection = selection
        self.inputs, self.outputs = effective_io(project, io)
        self.attempts: list[Attempt] = []
        self.warnings = warnings
        self.build: BuildResult | None = None
        self._store_dir, self._force, self._verify, self._log = store_dir, force, verify, log
        self._runner: Runner | None = None
        self._pending = list(selection.chain)
        self._first_done = False
        self.provider = ""
        self.timings: dict[str, float] = {}
        self._placement = placement
        self.placement: dict[str, Any] | None = None
        self._advance()

    # -- opening with fallback ------------------------------------------------------------------
    def _fail(self, provider: str, stage: str, reason: str, fix: str | None = None,
              cause: GpuxError | None = None) -> None:
        self.attempts.append(Attempt(provider, stage, False, reason, fix))
        if self.selection.strict and (self.selection.source != "auto" or stage != "probe"):
            if isinstance(cause, VerificationFailed):  # an accuracy gate, not a missing provider
                raise cause
            raise ProviderUnavailable(f"{provider} unavailable ({stage}): {reason} — fallback is off "
                                      f"(--strict or runtime.fallback: false)", hint=fix)

    def _advance(self) -> None:
        while self._pending:
            provider = self._pending.pop(0)
            avail = probe_for(self.project, provider)
            if not avail.ok:
                self._fail(provider, "probe", avail.reason, avail.fix)
                continue
            started = time.perf_counter()
            try:
                result = build(self.project, provider, force=self._force, verify=self._verify,
                               store_dir=self._store_dir, log=self._log, io=self.io, full_check=True, for_run=True,
                               samples=self._samples)
            except (ModelError, InputError):
                raise  # the model itself, or the inputs in hand: no other provider helps
            except GpuxError as exc:
                self._fail(provider, "build", " ".join(x.strip() for x in exc.message.splitlines()), exc.hint, exc)
                continue
            built = time.perf_counter()
            try:
                runner = open_runner(provider, self.project, result.final.artifact)
            except Exception as exc:  # runtimes raise anything when a device or library is missing
                self._fail(provider, "session", first_line(exc))
                continue
            if runner.dropped:
                runner.close()
                self._fail(provider, "session", runner.dropped)
                continue
            self.timings = {"build_s": built - started, "load_s": time.perf_counter() - built}
            if "compile_s" in runner.details:  # torch.compile's first call, done while opening
                self.timings["compile_s"] = runner.details["compile_s"]
            self._runner, self.provider, self.build = runner, provider, result
            self._first_done = False
            return
        tried = "; ".join(a.line() for a in self.attempts) or "nothing to try"
        tried_here = [a for a in self.attempts if a.stage != "probe"]
        if tried_here and all(a.stage == "build" for a in tried_here):  # providers were there; the model failed
            raise ProviderUnavailable(f"{self.project.name!r} cannot run on any provider here (a model or runtime "
                                      f"limit, not a missing provider): {tried}")
        raise ProviderUnavailable(f"no provider could run {self.project.name!r}: {tried}")

    # -- inference ------------------------------------------------------------------------------
    def run(self, inputs: dict[str, Any] | None = None, **named: Any) -> dict[str, Any]:
        """Run once; values are cast to each input's dtype. Returns output name → array."""
        feeds = cast_all({**(inputs or {}), **named}, self.inputs, "inputs")
        return dict(zip(self.output_names, self.run_feeds(feeds), strict=True))

    def run_feeds(self, feeds: dict[str, Any]) -> list[Any]:
        """Run prepared feeds; the first inference that fails moves on to the next provider."""
        assert self._runner is not None
        if self._first_done:
            return self._runner.run(feeds)
        while True:
            try:
                out = self._runner.run(feeds)
            except Exception as exc:
                if type(exc).__name__ == "InvalidArgument":  # ONNX Runtime: the feeds do not fit the model
                    raise InputError(f"the model rejected the inputs: {first_line(exc)}") from None
                self._runner.close()
                self._fail(self.provider, "first-inference", first_line(exc))
                self._advance()
                continue
            problem = self._check_placement(feeds)
            if problem:
                self._runner.close()
                self._fail(self.provider, "placement", problem)
                self._advance()
                continue
            self._first_done = True
            self.attempts.append(Attempt(self.provider, "ok", True, self._runner.used))
            return out

    def prepared(self) -> Callable[[dict[str, Any]], list[Any]]:
        """The hot path: `call(feeds)` takes numpy arrays already of the inputs' dtypes and returns the outputs
        in `output_names` order. Each new combination of shapes is checked once (names, dtypes, ranks, static
        dims: the same one-line errors as `run`) and its first call goes through the usual fallback; later
        calls with those shapes go straight to the runtime's native run."""
        checked: set[tuple[Any, ...]] = set()
        native: list[Callable[[dict[str, Any]], list[Any]]] = []

        def call(feeds: dict[str, Any]) -> list[Any]:
            key = tuple([getattr(v, "shape", None) for v in feeds.values()])
            if key in checked:
                return native[0](feeds)
            cast = cast_all(feeds, self.inputs, "inputs")
            wrong = [n for n in cast if cast[n] is not feeds[n] and getattr(cast[n], "dtype", None) !=
                     getattr(feeds[n], "dtype", None)]
            if wrong:
                t = self.inputs[wrong[0]]
                raise InputError(f"inputs: {wrong[0]!r} must already be a {t.dtype} array on the prepared path",
                                 hint="cast once outside the loop, or use Session.run(dict), which casts")
            out = self.run_feeds(cast)
            native[:] = [self.runner.fast or self.runner.run]
            checked.add(key)
            return out

        return call

    def _check_placement(self, feeds: dict[str, Any]) -> str | None:
        """With runtime.min_coverage (or placement asked for), measure which EP took each node."""
        minimum = self.project.config.runtime.min_coverage
        details = self.runner.details
        if (minimum is None and not self._placement) or "ep" not in details or self.build is None:
            return None
        from gpux.runtimes.onnxruntime import placement

        self.placement = placement(self.build.final.artifact.main, details["ep"], details.get("ep_options"), feeds)
        coverage = self.placement["coverage"]
        if minimum is not None and coverage < minimum:
            return (f"{details['ep']} took {coverage:.0%} of the nodes, below runtime.min_coverage "
                    f"{minimum:.0%} ({self.placement['partitions']} partitions)")
        return None

    @property
    def runner(self) -> Runner:
        assert self._runner is not None
        return self._runner

    @property
    def output_names(self) -> list[str]:
        return self.runner.output_names

    @property
    def used(self) -> str:
        return self.runner.used

    @property
    def fell_back(self) -> bool:
        """Something other than the choice runs (with `auto`, providers absent from this machine don't count)."""
        auto = self.selection.source == "auto"
        return any(not a.ok and not (auto and a.stage == "probe") for a in self.attempts)

    def report(self) -> dict[str, Any]:
        auto = self.selection.source == "auto"
        return {"requested": ["auto"] if auto else list(self.selection.chain[:1]),
                "request_source": self.selection.source, "chain": list(self.selection.chain),
                "provider": self.provider, "runs_on": self.used if self._runner else None,
                "fell_back": self.fell_back,
                "attempts": [a.to_dict() for a in self.attempts], "warnings": self.warnings,
                "placement": self.placement, "phases": {k: round(v, 4) for k, v in self.timings.items()},
                "runtime": self.runner.details if self._runner else None, **self._precision()}

    def _precision(self) -> dict[str, Any]:
        """The artifact's precision and what the runtime executes at (OpenVINO reports its hint)."""
        if self.build is None or self._runner is None:
            return {}
        precision = self.build.final.target.precision
        return {"precision": precision,
                "execution_precision": self._runner.details.get("inference_precision") or precision}

    def close(self) -> None:
        if self._runner is not None:
            self._runner.close()
            self._runner = None

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_runner(provider: str, project: Project, artifact: store.Artifact) -> Runner:
    """Open an artifact with the runtime its build step names."""
    opener = resolve(step_of(artifact.manifest["target"]["step"]).open)
    return opener(provider, project, artifact)


def load(target: str | os.PathLike[str] | Project = ".", provider: str | None = None, *, strict: bool = False,
         store_dir: str | Path | None = None, force: bool = False, verify: bool = True,
         log: Callable[[str], None] | None = None, placement: bool = False,
         samples: list[dict[str, Any]] | None = None) -> Session:
    """Open a project dir, gpux.yml, model name or .onnx file on the best working provider; `samples`
    (inputs in hand) verify any artifact built on the way instead of generated data."""
    project = target if isinstance(target, Project) else open_project(str(target))
    io = load_checked(project, store_dir)
    warnings = list(project.warnings)
    from gpux.providers import ort_conflict_warning

    conflict = ort_conflict_warning()
    if conflict:
        warnings.append(conflict)
    from gpux.plan.choice import choose

    project, selection, why = choose(project, provider, strict, store_dir)
    warnings += why
    return Session(project, io, selection, store_dir=store_dir, force=force, verify=verify,
                   log=log or (lambda _m: None), warnings=warnings, placement=placement, samples=samples)


__all__ = ["Attempt", "Session", "Tensor", "load"]
