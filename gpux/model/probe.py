"""What a model really returns: its ONNX file run on ONNX Runtime's CPU provider on three seeded samples (a batch of
1 with every other dynamic dim at the size the project feeds it, else 64; a batch of 2; then a batch of 1 with each
input's last dynamic dim 32 longer: a width, a length), remembered in the store by the file's stamp (gpux.files.stamp).
Declared shapes and steps are checked against it (gpux.model.fit), not only against the model's metadata."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from gpux.arrays import Feeds, Outputs
from gpux.model.tensor import Tensor

SAMPLES = ((1, 0), (2, 0), (1, 32))  # (batch, what the last other dynamic dim adds)
SIZE = 64  # a dynamic dim the project does not size


class BoxStats(TypedDict):
    """A row read as boxes with its channels on one axis (`box_stats`): the least and the most value of each of the
    first five channels, and the range of the channels from the fifth on and from the sixth on (None: fewer)."""

    min: list[float]
    max: list[float]
    from4: list[float]
    from5: list[float] | None


@dataclass(frozen=True)
class Real:
    """The shapes the first sample's inputs and each sample's outputs had (`second`, `third`: empty where the model
    refused that sample), and per rank-3 output the statistics of the first row read as boxes (`box_stats`)."""

    inputs: dict[str, list[int]]
    outputs: dict[str, list[int]]
    second: dict[str, list[int]] = field(default_factory=dict)
    third: dict[str, list[int]] = field(default_factory=dict)
    stats: dict[str, dict[str, BoxStats]] = field(default_factory=dict)  # output -> channels axis ("1", "2") -> stats

    def to_dict(self) -> dict[str, Any]:  # the memo's document
        return {"inputs": self.inputs, "outputs": self.outputs, "second": self.second, "third": self.third,
                "stats": self.stats}

    def batch_axis(self, name: str) -> int | None:
        """The output's axis that follows the batch (1 on the first sample, 2 on the second); None where the
        samples do not tell it."""
        first, second = self.outputs.get(name), self.second.get(name)
        if not first or not second or len(first) != len(second):
            return None
        axes = [i for i, (a, b) in enumerate(zip(first, second, strict=True)) if (a, b) == (1, 2)]
        return axes[0] if len(axes) == 1 else None

    def tensor(self, name: str, dtype: str) -> Tensor:
        """The output as it really is: its dims, those that differ between the samples dynamic (the batch's named
        batch)."""
        first, batch = self.outputs[name], self.batch_axis(name)
        others = [s[name] for s in (self.second, self.third) if len(s.get(name) or ()) == len(first)]
        return Tensor(name, dtype, tuple("batch" if i == batch else a if all(o[i] == a for o in others) else None
                                         for i, a in enumerate(first)))


def real_io(source: Path, inputs: tuple[Tensor, ...], memo: Path | None,
            sizes: dict[str, Tensor] | None = None) -> Real | None:
    """The model's real outputs on the samples of its `inputs` (their dims as `sizes` fix them where the model
    leaves them dynamic); None: it cannot run here on them, or its inputs have no rank."""
    from gpux.files import memoised

    if not source.is_file():
        return None
    sizes = sizes or {}
    key = [t.to_dict() for t in (*inputs, *sizes.values())]  # the samples follow the sizes the project feeds

    def probed(path: Path) -> object:  # the memo's document: the record, or why the model could not run
        got = _run(path, inputs, sizes)
        return {**(got.to_dict() if isinstance(got, Real) else {"failed": got}), "key": key}

    [got] = memoised([source], memo, probed, lambda _p, kept: isinstance(kept, dict) and kept.get("key") == key)
    return Real(**{k: v for k, v in got.items() if k != "key"}) if "outputs" in got else None


def _run(source: Path, inputs: tuple[Tensor, ...], sizes: dict[str, Tensor]) -> Real | str:
    """The samples run; why not where the first cannot run."""
    import numpy as np

    try:
        samples = [sample(inputs, sizes, batch, longer) for batch, longer in SAMPLES]
    except (ValueError, TypeError) as exc:  # an input without a rank, of strings, or of a type numpy cannot make
        return f"{type(exc).__name__}: {exc}"[:300]
    try:
        import onnxruntime as ort

        options, quiet = ort.SessionOptions(), ort.RunOptions()
        options.log_severity_level = quiet.log_severity_level = 4  # a refused sample is an answer, not an error
        session = ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
        if any(not o.type.startswith("tensor") for o in session.get_outputs()):  # ZipMaps, as gpux answers them
            from gpux.model.classic import runnable

            session = ort.InferenceSession(runnable(source), options, providers=["CPUExecutionProvider"])
        runs: list[tuple[Feeds, Outputs | None]] = []
        for feeds in samples:
            try:
                runs.append((feeds, session.run(None, feeds, quiet)))
            except Exception:  # ONNX Runtime's errors share no base class but Exception; a refused sample is told
                if not runs:  # by its missing shapes, the first one by the model's failing
                    raise
                runs.append((feeds, None))
    except Exception as exc:  # ONNX Runtime's errors (no common base class) or its import: the metadata is all
        return f"{type(exc).__name__}: {exc}"[:300]  # there is
    names = [o.name for o in session.get_outputs()]
    shapes = [{n: list(np.shape(a)) for n, a in zip(names, got, strict=True)} if got else {} for _, got in runs]
    stats = {n: box_stats(a) for n, a in zip(names, runs[0][1] or (), strict=True) if np.ndim(a) == 3}
    return Real(inputs={k: list(v.shape) for k, v in runs[0][0].items()}, outputs=shapes[0], second=shapes[1],
                third=shapes[2], stats=stats)


def sample(inputs: tuple[Tensor, ...], sizes: dict[str, Tensor], batch: int, longer: int) -> Feeds:
    """Seeded feeds: a dynamic first dim is the batch, every other dynamic dim the size `sizes` gives it (else SIZE),
    the last of them `longer` more."""
    import numpy as np

    rng = np.random.default_rng(0)
    feeds = {}
    for t in inputs:
        if t.shape is None or t.dtype == "string":
            raise ValueError(f"input {t.name!r} has no shape or holds strings")
        fed = (sizes[t.name].shape if t.name in sizes else None) or t.shape
        shape = [d if isinstance(d, int) else batch if i == 0 else f if isinstance(f, int) else SIZE
                 for i, (d, f) in enumerate(zip(t.shape, fed, strict=False))]
        dynamic = [i for i, d in enumerate(t.shape) if i and not isinstance(d, int)]
        if dynamic:
            shape[dynamic[-1]] += longer
        if t.dtype == "bool":
            feeds[t.name] = rng.integers(0, 2, size=shape).astype(bool)
        elif t.dtype.startswith(("int", "uint")):
            feeds[t.name] = rng.integers(0, 2, size=shape).astype(t.dtype)
        else:
            feeds[t.name] = rng.standard_normal(size=shape).astype("float32" if t.dtype == "bfloat16" else t.dtype)
    return feeds


def box_stats(array: Any) -> dict[str, BoxStats]:
    """The first row read as boxes with its channels on axis 1 and on axis 2: per channel of the first five
    (cx, cy, w, h, then objectness or a class score) the least and the most value, and the range of the channels
    from the fifth and from the sixth on (the scores of the two kinds of layout)."""
    import numpy as np

    out: dict[str, BoxStats] = {}
    for axis in (1, 2):
        rows = np.asarray(array[0], np.float64)
        rows = rows if axis == 1 else rows.T  # [channels, anchors]
        if rows.shape[0] < 5 or rows.shape[1] == 0:
            continue
        rows = np.where(np.isfinite(rows), rows, np.nan)
        out[str(axis)] = {"min": np.nanmin(rows[:5], axis=1).tolist(), "max": np.nanmax(rows[:5], axis=1).tolist(),
                          "from4": [float(np.nanmin(rows[4:])), float(np.nanmax(rows[4:]))],
                          "from5": [float(np.nanmin(rows[5:])), float(np.nanmax(rows[5:]))] if len(rows) > 5
                          else None}
    return out
