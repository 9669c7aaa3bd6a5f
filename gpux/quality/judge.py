"""A built artifact judged, as a build asks it of quality: its speed beside a plain fp32 session first (a build
within a speed screen stops there: tune never verifies a candidate far slower than its default), then its
verification against the FP32 reference; a lossy artifact slower than the plain session in every round is said."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from gpux.arrays import Feeds, Outputs
from gpux.documents import SpeedDoc, VerificationDoc
from gpux.errors import TooSlow
from gpux.quality.speed import LOSSY, too_slow, versus_plain
from gpux.quality.verify import run_verification
from gpux.report import slower_note

if TYPE_CHECKING:
    from gpux.plan.targets import Target
    from gpux.runtimes import ArtifactKind, Job


def judge(job: Job, kind: ArtifactKind, target: Target, artifact: Path,
          opened: Callable[[Feeds], Outputs] | None) -> tuple[VerificationDoc, SpeedDoc | None]:
    """The artifact's verification record and, for a lossy one, its speed beside the plain session (`opened`: the
    artifact as its build step opened it, `runtimes.Built`); TooSlow within a speed screen."""
    speed = _speed(job, kind, target, artifact, opened)
    why = too_slow(speed)
    if why:
        raise TooSlow(f"{target.id}: {why}", conversion=False)
    verification = run_verification(job, kind, target, artifact, opened)
    if note := slower_note(speed):
        job.log(f"warning: {target.id}: {note}")
    return verification, speed


def _speed(job: Job, kind: ArtifactKind, target: Target, artifact: Path,
           opened: Callable[[Feeds], Outputs] | None) -> SpeedDoc | None:
    """A lossy artifact's speed beside a plain fp32 session of the source (quality.speed)."""
    verify = kind.verify_step()
    if target.precision not in LOSSY or verify is None:
        return None
    runner = opened or verify(artifact, target)
    measured = versus_plain(job, target, None if isinstance(runner, str) else runner)
    return measured.to_dict() if measured is not None else None


__all__ = ["judge"]
