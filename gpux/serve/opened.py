"""A served model as it opened (`Opened`, immutable), from its gpux.yml, a workspace's pipeline, or the record of an
earlier start: the sessions of a record opened again as its runtime opened them (`open_recorded`)."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from gpux.arrays import Feeds, Named, Outputs
from gpux.documents import SessionReport
from gpux.model.io import Tensor
from gpux.serve.record import Recorded

if TYPE_CHECKING:
    from gpux.providers.row import Runner
    from gpux.serve.steps import Answering

RunNamed = Callable[[Feeds], Named]  # one instance's inference: feeds in, outputs by name out


@dataclass(frozen=True, kw_only=True)
class Opened:
    """One version of one model as it opened, whichever way (from its gpux.yml through `gpux.run.session.load`,
    from its record, or a workspace's pipeline): its interface, where it runs, one inference per instance."""

    inputs: dict[str, Tensor]
    outputs: dict[str, Tensor]
    provider: str
    runs_on: str
    report: SessionReport  # the session's report, as `gpux run --json` shows it
    labels: dict[str, list[str]]  # output -> class labels from gpux.yml
    steps: Answering | None = None  # where gpux.yml declares a preprocess or postprocess (or a page pipeline's)
    files: str | None = None  # the input that takes encoded files (BYTES), through its declared preprocess
    runs: tuple[RunNamed, ...] = ()
    record: Recorded | None = None  # how a later start opens it again without its gpux.yml (None: it cannot)
    from_record: bool = False  # opened from the record of an earlier start
    warmup: Feeds | None = None  # the inputs it warmed up on (None: warmup_feeds of its inputs)
    one_by_one: bool = False  # its requests never merged nor run on the event loop (a page pipeline: pages take long)
    close: Callable[[], None] = lambda: None  # releases its sessions (idempotent): an unload, a replaced version

    @property
    def batchable(self) -> bool:
        """Requests can be merged when every input and output starts with a variable (batch) dim."""
        tensors = [*self.inputs.values(), *self.outputs.values()]
        variable = all(t.shape and not isinstance(t.shape[0], int) for t in tensors)
        return not self.one_by_one and bool(tensors) and variable


NOT_OPENED = Opened(inputs={}, outputs={}, provider="", runs_on="", report={}, labels={})


class NotAsRecorded(Exception):
    """A recorded session that opened, but not as its record says (another device, a device dropped)."""


def open_recorded(rec: Recorded, instances: int) -> Opened | None:
    """The sessions of a model recorded by an earlier start, opened as its runtime opened them then; None (its
    project read from its gpux.yml instead, logged) when they do not open so."""
    from gpux.serve.record import open_runner

    runners: list[Runner] = []
    feeds = warmup_feeds(rec.inputs)
    try:
        for _ in range(instances):
            runners.append(open_runner(rec.recipe))
            runner = runners[-1]
            if runner.dropped or _settled(runner.used) != _settled(rec.runs_on):  # an AUTO device elsewhere, say
                raise NotAsRecorded(runner.dropped or f"it runs on {runner.used}, not {rec.runs_on}")
            runner.run(feeds)  # a first inference that fails reads the config (whose fallback may move on)
    # whatever stops the session opening as recorded (a runtime's error, a record edited or gone stale) reads the
    # config instead, the usual path, where a gpux bug shows again and is not caught
    except Exception as exc:
        for r in runners:
            r.close()
        logging.getLogger("gpux.serve").warning("%s: not opened as recorded (%s); reading %s", rec.name,
                                                str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
                                                rec.path)
        return None
    names = runners[0].output_names

    def named(run: Callable[[Feeds], Outputs]) -> RunNamed:
        return lambda feeds: dict(zip(names, run(feeds), strict=True))

    return Opened(inputs=rec.inputs, outputs=rec.outputs, provider=rec.provider, runs_on=rec.runs_on,
                  report=rec.report, labels=rec.labels, from_record=True,
                  runs=tuple(named(r.fast or r.run) for r in runners),  # inputs checked here; the runtime checks again
                  close=closing(r.close for r in runners))


def closing(closes: Iterable[Callable[[], object]]) -> Callable[[], None]:
    """One call that closes each of them (each close is idempotent: a version unloaded, then replaced, is closed
    twice)."""
    kept = tuple(closes)

    def close() -> None:
        for c in kept:
            c()

    return close


def _settled(used: str) -> str:
    """Where a session runs, without the helper devices a runtime names in parentheses while it settles (OpenVINO's
    AUTO runs on "(CPU)" until the device it chose has compiled)."""
    return re.sub(r"\s*\([^)]*\),?", " ", used).strip(" ,")


def warmup_feeds(inputs: dict[str, Tensor], declared: Feeds | None = None) -> Feeds:
    """The inputs a model warms up on: its declared sample data (`declared_data`) where it fits, else zeros of each
    input's shape, variable dims set to 1; strings are "0", a value a string the model casts to a number carries."""
    if declared is not None and set(declared) == set(inputs):
        return declared
    feeds = {}
    for name, t in inputs.items():
        shape = tuple(d if isinstance(d, int) else 1 for d in (t.shape or ()))
        feeds[name] = (np.full(shape, "0", dtype=object) if t.dtype == "string"
                       else np.zeros(shape, dtype="float32" if t.dtype == "bfloat16" else t.dtype))
    return feeds


def declared_data(project: Any, inputs: dict[str, Tensor]) -> Feeds | None:
    """The first sample of the project's verify.data (one file), cast to the inputs; None when none is declared or
    it does not read (the generated feeds are used: verification reports the file's own problems)."""
    data = project.config.verify.data
    if not data:
        return None
    from gpux.errors import GpuxError
    from gpux.model.inputs import load_file

    path = project.root / data
    try:
        feeds = load_file(path, inputs) if path.is_file() else None
    except (GpuxError, OSError, ValueError) as exc:  # a user's file: the generated feeds are used
        logging.getLogger("gpux.serve").debug("%s: verify.data not used for warm-up: %s", project.name, exc)
        return None
    if feeds is None:
        return None
    ranks = {n: len(t.shape) for n, t in inputs.items() if t.shape is not None}
    return {n: a[0] if a.ndim == ranks.get(n, -2) + 1 else a for n, a in feeds.items()}  # samples stacked: the first
