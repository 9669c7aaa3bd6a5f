"""The Python API: `load` opens a model with ordered fallback (gpux.run.fallback) and the Session runs it,
moving on to the next provider if the first inference fails."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpux.arrays import Feeds, Named, Outputs
from gpux.config.load import Project
from gpux.config.locate import open_project
from gpux.documents import PlacementDoc, SessionReport, VerificationDoc
from gpux.errors import Failure, InputError, classify, first_line
from gpux.model.checked import Signatures, signature, taken_as_given
from gpux.model.inputs import cast_all
from gpux.model.io import Tensor, check_model
from gpux.providers import Runner
from gpux.run.fallback import Attempt, Fallback, Opened


class Session:
    """A model opened on the best provider that really works; `provider` says what runs."""

    def __init__(self, fallback: Fallback, opened: Opened, *, warnings: list[str], placement: bool = False) -> None:
        self._fallback = fallback
        self.project, self.selection = fallback.project, fallback.selection
        self.io, self.inputs, self.outputs = fallback.checked.io, fallback.checked.inputs, fallback.checked.outputs
        self.warnings = warnings
        self._placement = placement
        self.placement: PlacementDoc | None = None
        self._steps: Any = None  # the declared steps bound to the model's I/O, on the first predict
        self._take(opened)

    def _take(self, opened: Opened) -> None:
        self._runner: Runner | None = opened.runner
        self.provider, self.build, self.timings = opened.provider, opened.build, opened.timings
        self._first_done = False
        # run(dict)'s hot path: signatures (name, type, dtype, shape, strides per input) whose values cast_all
        # took as they were, and the runtime's native run once the first inference succeeded
        self._seen = Signatures()
        self._native: Callable[[Feeds], Outputs] | None = None
        self._names = opened.runner.output_names

    @property
    def attempts(self) -> list[Attempt]:
        return self._fallback.attempts

    def _next_after(self, stage: str, reason: str) -> None:
        """The current provider failed at `stage`: close it and open the next one that works."""
        self.runner.close()
        self._fallback.fail(self.provider, stage, reason)
        self._take(self._fallback.next())

    # -- inference ------------------------------------------------------------------------------
    def run(self, inputs: dict[str, Any] | None = None, **named: Any) -> Named:  # user data: any array-like
        """Run once; values are cast to each input's dtype. Returns output name → array. Arrays of a signature
        already checked (same names, dtypes, shapes and layout, nothing to cast) go straight to the runtime."""
        data = {**(inputs or {}), **named} if named or inputs is None else inputs
        key = signature(data)
        native = self._native
        if native is not None and key in self._seen:
            out = native(data)
            return {self._names[0]: out[0]} if len(out) == 1 else dict(zip(self._names, out, strict=True))
        feeds = cast_all(data, self.inputs, "inputs")
        result = dict(zip(self.output_names, self.run_feeds(feeds), strict=True))
        if self._first_done and self._seen.remember(key, taken_as_given(data, feeds)):
            self._native = self.runner.fast or self.runner.run
        return result

    def predict(self, x: Any) -> Any:
        """Answers for a file of the kind gpux.yml's preprocess declares (an image: path, bytes, PIL image, HxWxC
        uint8 array; raw bytes: path or bytes; audio: path, bytes or a 1-D waveform; text: a str, a Path or bytes)
        or a list of them, through its preprocess and postprocess (docs/answers.md); a dict of tensors answers each
        batch row (a list)."""
        from gpux.answers.steps import Steps, predict

        if self._steps is None:  # labels, charsets and tokenizers are read and checked once per session
            self._steps = Steps.of(self.project, self.inputs, self.outputs)
        return predict(self, self._steps, x)

    def run_feeds(self, feeds: Feeds) -> Outputs:
        """Run prepared feeds; the first inference that fails moves on to the next provider, unless the runtime
        said the feeds do not fit the model (an InputError) or gpux's own code failed (a bug: raised as it is)."""
        assert self._runner is not None
        if self._first_done:
            return self._runner.run(feeds)
        while True:
            runner = self.runner
            try:
                out = runner.run(feeds)
            except runner.rejects as exc:  # the runtime's own word that the feeds do not fit the model
                raise InputError(f"the model rejected the inputs: {str(exc).strip()}") from exc
            except Exception as exc:  # a runtime raises anything at its first inference: the next provider may run
                if classify(exc, runner.rejects) is Failure.BUG:
                    raise
                self._rejected(exc, feeds)
                continue
            problem = self._check_placement(feeds)
            if problem:
                self._next_after("placement", problem)
                continue
            self._first_done = True
            self.attempts.append(Attempt(self.provider, "ok", True, self.runner.used))
            return out

    def _rejected(self, exc: Exception, feeds: Feeds) -> None:
        """The first inference failed: on to the next provider. Where none is left, the inputs are what fails (an
        InputError with the runtime's whole message), not the providers, when every provider that ran them failed
        at it and the model's own file on ONNX Runtime's CPU provider rejects them too."""
        from gpux.errors import ProviderUnavailable

        provider = self.provider
        try:
            self._next_after("first-inference", first_line(exc))
        except ProviderUnavailable:
            ran = [a for a in self.attempts if a.stage in ("first-inference", "placement", "ok")]
            if ran and all(a.stage == "first-inference" for a in ran) and _reference_rejects(self.project, feeds):
                raise InputError(f"{provider} rejected the inputs, and so does the model on ONNX Runtime's CPU "
                                 f"provider: {type(exc).__name__}: {str(exc).strip()}") from exc
            raise

    def prepared(self) -> Callable[[Feeds], Outputs]:
        """The hot path: `call(feeds)` takes numpy arrays already of the inputs' dtypes and returns the outputs
        in `output_names` order. Each new combination of shapes is checked once (names, dtypes, ranks, static
        dims: the same one-line errors as `run`) and its first call goes through the usual fallback; later
        calls of a signature taken as given go straight to the runtime's native run (as many signatures as
        gpux.model.checked keeps; past them, each call is checked)."""
        checked = Signatures()
        native: list[Callable[[Feeds], Outputs]] = []

        def call(feeds: Feeds) -> Outputs:
            key = signature(feeds)
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
            if checked.remember(key, taken_as_given(feeds, cast)):
                native[:] = [self.runner.fast or self.runner.run]
            return out

        return call

    def _check_placement(self, feeds: Feeds) -> str | None:
        """With runtime.min_coverage (or placement asked for), measure which EP took each node."""
        minimum = self.project.config.runtime.min_coverage
        details = self.runner.details
        if (minimum is None and not self._placement) or "ep" not in details or self.build is None:
            return None
        from gpux.runtimes.onnxruntime import placement

        self.placement = placement(self.build.final.artifact.main, details["ep"], details.get("ep_options"), feeds,
                                   (details.get("opened") or {}).get("graph_optimization", "all"))
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

    def report(self) -> SessionReport:
        """What ran and why: `warnings` holds the session's warnings, then one `skipped ...` line per provider
        asked for and passed over (what the text output warns about a fallback)."""
        from gpux.report import fallback_warnings

        source = self.selection.source
        attempts = [a.to_dict() for a in self.attempts]
        return {"requested": ["auto"] if source == "auto" else list(self.selection.chain[:1]),
                "request_source": source, "chain": list(self.selection.chain),
                "provider": self.provider, "runs_on": self.used if self._runner else None,
                "fell_back": self.fell_back, "attempts": attempts,
                "warnings": [*self.warnings, *fallback_warnings(attempts, source)],
                "placement": self.placement, "phases": {k: round(v, 4) for k, v in self.timings.items()},
                "runtime": self.runner.details if self._runner else None, **self._precision()}

    def _precision(self) -> SessionReport:
        """The artifact's precision, what the runtime executes at (OpenVINO reports its hint) and whether it was
        verified (on which data)."""
        if self.build is None or self._runner is None:
            return {}
        precision = self.build.final.target.precision
        v: VerificationDoc = self.build.final.artifact.manifest["verification"] or {}
        return {"precision": precision,
                "execution_precision": self._runner.details.get("inference_precision") or precision,
                "verification": {"status": v.get("status") or ("skipped" if "skipped" in v else "verified"),
                                 "data": v.get("data"), "skipped": v.get("skipped")}}

    def close(self) -> None:
        self._native = None
        if self._runner is not None:
            self._runner.close()
            self._runner = None

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _reference_rejects(project: Project, feeds: Feeds) -> bool:
    """Whether the model's ONNX file on ONNX Runtime's CPU provider fails on these feeds (False where it cannot
    be told: not ONNX, or no session opens)."""
    from gpux.formats import source_format

    if source_format(project) != "onnx":
        return False
    try:
        import onnxruntime as ort

        options, quiet = ort.SessionOptions(), ort.RunOptions()
        options.log_severity_level = quiet.log_severity_level = 4
        session = ort.InferenceSession(str(project.source), options, providers=["CPUExecutionProvider"])
    except Exception:  # ONNX Runtime's errors share no base class: the model or runtime, not the inputs
        return False
    try:
        session.run(None, feeds, quiet)
    except Exception:  # ONNX Runtime's errors share no base class: any failure here is the reference's rejection
        return True
    return False


def load(target: str | os.PathLike[str] | Project = ".", provider: str | None = None, *, strict: bool = False,  # noqa: PLR0913  # the public API: keyword-only options
         store_dir: str | Path | None = None, force: bool = False, verify: bool = True,
         log: Callable[[str], None] | None = None, placement: bool = False,
         provider_source: str = "argument", verified_only: bool | None = None) -> Session:
    """Open a project dir, gpux.yml, model name or .onnx file on the best working provider (`strict`: that
    provider only, and only a verified artifact unless `verified_only` says otherwise). `provider_source` is
    what the report calls a given `provider` (`request_source`): `argument` here, `--provider` from the CLI."""
    project = target if isinstance(target, Project) else open_project(str(target))
    checked = check_model(project, store_dir)
    warnings = [*project.warnings, *map(str, checked.notes)]
    from gpux.providers import ort_conflict_warning

    conflict = ort_conflict_warning()
    if conflict:
        warnings.append(conflict)
    from gpux.plan.select import select

    selection = select(project, provider, strict, store_dir=store_dir, given_by=provider_source)
    project = selection.project or project
    warnings += selection.warnings
    fallback = Fallback(project=project, checked=checked, selection=selection, store_dir=store_dir, force=force,
                        verify=verify, log=log or (lambda _m: None),
                        strict=strict if verified_only is None else verified_only)
    return Session(fallback, fallback.next(), warnings=warnings, placement=placement)


__all__ = ["Attempt", "Session", "Tensor", "load"]
