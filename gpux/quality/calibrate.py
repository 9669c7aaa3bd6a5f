"""Sample inputs for calibration and verification: declared files, else seeded random data."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpux.arrays import Feeds
from gpux.config.load import Project
from gpux.errors import DataError
from gpux.model.inputs import read_samples, synthetic
from gpux.model.io import Tensor
from gpux.plan.targets import Target


def ranges(project: Project) -> dict[str, tuple[float, float]]:
    return {n: s.range for n, s in (project.config.inputs or {}).items() if s.range is not None}


@dataclass(frozen=True)
class Data:
    """The inputs a verification runs on: where they came from, whether they stand for real use
    (representative), and their digest (a verdict is a function of the artifact, this and the thresholds)."""

    feeds: list[Feeds]
    source: str  # verify.data | calibration hold-out | generated (+ what was held out or dropped)
    representative: bool
    digest: str
    rows: int  # samples, counting each row of a batch (the leading dim of an input whose first dim is symbolic)


def verification_data(job: Any, target: Target) -> Data:
    """verify.data when declared (less any sample the target is calibrated on), else a hold-out of the
    target's calibration data, else seeded generated inputs (not representative)."""
    from gpux.quality.derive import derived

    _, judged, source, representative = declared_samples(job.project, target, job.inputs)
    if judged:
        more = derived(job.project, job.inputs, judged) if representative else []
        if more:
            source += f" + {len(more)} derived from them (verify.derive: seeded crops, scales and mirrors)"
        return _data(judged + more, source, representative, job.inputs)
    return _data(generated(job), "generated", False, job.inputs)


def generated(job: Any) -> list[Feeds]:
    """`verify.samples` seeded inputs of the job's shapes and declared value ranges."""
    v = job.project.config.verify
    return [synthetic(job.inputs, job.shapes, v.seed + i, ranges(job.project)) for i in range(v.samples)]


def calibration_samples(project: Project, target: Target, inputs: dict[str, Tensor]) -> list[Feeds]:
    """The declared calibration samples quantization may use: all of them when verify.data brings samples of
    its own, else all but the hold-out verification judges on."""
    return declared_samples(project, target, inputs)[0]


def declared_samples(project: Project, target: Target, inputs: dict[str, Tensor]) \
        -> tuple[list[Feeds], list[Feeds], str, bool]:
    """The one split of declared data: the calibration samples quantization may use, the samples verification
    judges (none: it generates its own), where those come from, and whether they are representative."""
    path = target.options.get("calibration")
    declared = _declared(project, "calibration", project.root.resolve() / path, inputs) if path else []
    v = project.config.verify
    if v.data:
        feeds = _declared(project, "verify.data", project.root / v.data, inputs)
        seen = {feed_digest(f) for f in declared}
        kept = [f for f in feeds if feed_digest(f) not in seen]
        if kept:
            note = f" ({len(feeds) - len(kept)} also in the calibration data left out)" if len(kept) < len(feeds) \
                else ""
            return declared, kept, "verify.data" + note, True
    calibration, held = split(declared)
    if held:
        return calibration, held, f"calibration hold-out ({len(held)} of {len(declared)} samples, not calibrated " \
            "on)", True
    return declared, declared, "calibration data (the same samples it was calibrated on)", False


def _declared(project: Project, field: str, path: Path, inputs: dict[str, Tensor]) -> list[Feeds]:
    """The samples of a file or folder gpux.yml names at `field`; one that cannot be read or does not fit the inputs
    is a DataError naming gpux.yml and the field, then the file."""
    try:
        return read_samples(path, inputs)
    except DataError as exc:
        raise DataError(f"{project.path}: {field}: {exc.message}", hint=exc.hint) from exc


def _data(feeds: list[Feeds], source: str, representative: bool, inputs: dict[str, Tensor]) -> Data:
    import hashlib

    h = hashlib.sha256()
    for f in feeds:
        h.update(feed_digest(f).encode())
    batched = next((n for n, t in inputs.items() if t.shape and not isinstance(t.shape[0], int)), None)
    return Data(feeds, source, representative, h.hexdigest(), sum(_rows(f, batched) for f in feeds))


def _rows(feed: Feeds, batched: str | None) -> int:
    """Rows in one sample: the size of the first input's leading dim when it is symbolic (a batch), else 1."""
    shape: tuple[int, ...] = tuple(getattr(feed.get(batched or ""), "shape", ()))
    return int(shape[0]) if shape else 1


def feed_digest(feed: Feeds) -> str:
    """A digest of one sample: its input names, dtypes, shapes and bytes."""
    import hashlib

    import numpy as np

    h = hashlib.sha256()
    for name in sorted(feed):
        a = np.ascontiguousarray(feed[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def split(samples: list[Feeds]) -> tuple[list[Feeds], list[Feeds]]:
    """Calibration samples and the hold-out verification judges on: every 4th sample (the last when there are
    2 or 3); a single sample cannot be split."""
    if len(samples) < 2:
        return samples, []
    held = set(range(3, len(samples), 4)) or {len(samples) - 1}
    return ([s for i, s in enumerate(samples) if i not in held], [s for i, s in enumerate(samples) if i in held])


RETRY_SIZE = 64  # undeclared non-leading symbolic dims on the second try (images, sequences, audio)


def retry_shapes(job: Any) -> dict[str, int] | None:
    """Sizes for a second try when generated inputs were rejected: every undeclared symbolic dim except
    each input's first (batch-like) at RETRY_SIZE; None when there is none to change."""
    extra = {}
    for name, t in job.inputs.items():
        for i, d in enumerate(t.shape or ()):
            key = d or f"{name}:{i}"
            if i > 0 and not isinstance(d, int) and key not in job.shapes:
                extra[key] = RETRY_SIZE
    return {**extra, **job.shapes} if extra else None


def describe_generated(job: Any) -> str:
    """What generated inputs assumed: sizes given to symbolic dims and value ranges of integer inputs."""
    from gpux.model.inputs import DEFAULT_INT_RANGE

    sizes: dict[str, int] = {}
    ints = []
    declared = ranges(job.project)
    for name, t in job.inputs.items():
        for i, d in enumerate(t.shape or ()):
            if not isinstance(d, int):
                key = d or f"{name}:{i}"
                sizes.setdefault(key, job.shapes.get(key, 1))
        if t.dtype.startswith(("int", "uint")):
            lo, hi = declared.get(name, DEFAULT_INT_RANGE)
            ints.append(f"{name} in [{lo:g}, {hi:g})")
    parts = [", ".join(f"{d}={n}" for d, n in sizes.items()) and "dims " + ", ".join(f"{d}={n}" for d, n in
                                                                                       sizes.items()),
             ints and "integer inputs " + ", ".join(ints)]
    return "; ".join(p for p in parts if p) or "static shapes"


def feeds(project: Project, target: Target, inputs: dict[str, Tensor], shapes: dict[str, int],
          log: Callable[[str], None]) -> list[Feeds]:
    """Calibration feeds for quantization: `calibration:` files (less the hold-out verification judges on when
    verify.data is not declared), else seeded random inputs (with a warning)."""
    declared = calibration_samples(project, target, inputs)
    if declared:
        return declared
    n = int(target.options.get("calibration_samples") or 16)
    # an ONNX Runtime int8 artifact serves cpu and TensorRT's int8 engines alike
    where = ("providers.cpu.calibration (providers.tensorrt.calibration for TensorRT)"
             if target.provider == "onnxruntime" else f"providers.{target.provider}.calibration")
    log(f"warning: {target.id}: no calibration data declared; calibrating on {n} seeded random inputs "
        f"(accuracy on real data may differ: set {where})")
    return [synthetic(inputs, shapes, 1000 + i, ranges(project)) for i in range(n)]
