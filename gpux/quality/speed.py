"""A lossy artifact against doing nothing: how fast it runs, opened as sessions open it, beside the source model in a
plain ONNX Runtime session on this machine. Measured once when it is built (a few hundred milliseconds, interleaved
rounds), kept in its manifest, and said where it is slower: a lossy artifact that is slower than fp32 is never a
silent default."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpux.arrays import Feeds, Outputs
from gpux.documents import SpeedDoc

if TYPE_CHECKING:
    from gpux.plan.targets import Target
    from gpux.runtimes import Job

ROUNDS = 5
ROUND_S = 0.06  # seconds per side per round
LOSSY = ("fp16", "bf16", "int8")
# Within `screened`: a lossy artifact whose fastest round is under this fraction of the plain session's speed is not
# verified (tune never locks a candidate below its untuned default, which runs as the plain session does)
_SCREEN: ContextVar[float] = ContextVar("gpux_speed_screen", default=0.0)
SCREEN = 0.5  # tune's: half the plain session's speed in every round, far outside the rounds' noise


@contextmanager
def screened(below: float = SCREEN) -> Iterator[None]:
    """Builds in this block leave a lossy artifact slower than `below`× a plain session unverified (`too_slow`)."""
    token = _SCREEN.set(below)
    try:
        yield
    finally:
        _SCREEN.reset(token)


def too_slow(speed: SpeedDoc | None) -> str | None:
    """Why a build within `screened` is not verified (its speed beside the plain session), else None."""
    below = _SCREEN.get()
    if not below or not speed or speed["high"] >= below:
        return None
    return (f"{speed['speedup']:.2f}× a plain fp32 session here ({speed['low']:.2f}–{speed['high']:.2f} per round), "
            f"under {below:g}× in every round: not verified, as tune never locks a candidate slower than its default")


@dataclass(frozen=True)
class Speed:
    """A lossy artifact's speed beside the plain session: `speedup` (plain time / artifact time, medians), `low` and
    `high` (its range over the rounds), and what it was timed against."""

    speedup: float
    low: float
    high: float
    against: str = "a plain onnxruntime session of the source (fp32)"

    def to_dict(self) -> SpeedDoc:  # as its manifest keeps it (info.vs_plain)
        return {"speedup": self.speedup, "low": self.low, "high": self.high, "against": self.against}


def versus_plain(job: Job, target: Target, runner: Callable[[Feeds], Outputs] | None) -> Speed | None:
    """The speed of a lossy target beside a plain session of its source, where that is an ONNX model a plain
    session opens here; None otherwise (or where either side fails to run)."""
    from gpux.formats import TORCH_FORMATS, source_format
    from gpux.optional import is_installed

    if runner is None or target.precision not in LOSSY or source_format(job.project) in TORCH_FORMATS \
            or not is_installed("onnxruntime"):
        return None
    import onnxruntime as ort

    from gpux.model.inputs import synthetic
    from gpux.quality.calibrate import ranges
    from gpux.runtimes.onnxruntime import quiet_stderr

    feeds = synthetic(job.inputs, job.shapes, 0, ranges(job.project))
    try:
        with quiet_stderr():
            plain = ort.InferenceSession(str(job.project.source), providers=["CPUExecutionProvider"])
            sides: dict[str, Callable[[], object]] = {"plain": lambda: plain.run(None, feeds),
                                                      "artifact": lambda: runner(feeds)}
            for call in sides.values():
                call()
            times = _rounds(sides)
    except Exception:  # the speed check is advice: a side that cannot run leaves the artifact as verified
        return None
    ratios = [p / a for p, a in zip(times["plain"], times["artifact"], strict=True)]
    return Speed(round(statistics.median(times["plain"]) / statistics.median(times["artifact"]), 3),
                 round(min(ratios), 3), round(max(ratios), 3))


def _rounds(sides: dict[str, Callable[[], Any]]) -> dict[str, list[float]]:
    """Mean seconds per call of each side per round, the order alternating, a pause between (ONNX Runtime's threads
    spin after a run)."""
    times: dict[str, list[float]] = {k: [] for k in sides}
    names = list(sides)
    for r in range(ROUNDS):
        for name in names if r % 2 == 0 else names[::-1]:
            n, started = 0, time.perf_counter()
            while (elapsed := time.perf_counter() - started) < ROUND_S or n == 0:
                sides[name]()
                n += 1
            times[name].append(elapsed / n)
            time.sleep(0.02)
    return times

