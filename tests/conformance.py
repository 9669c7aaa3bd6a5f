"""ONNX's own backend node tests, regenerated from the installed onnx's case code, run through gpux.

Each case's model is written to a project folder with its inputs declared as `verify.data` (the implicit build
is verified on them), run with gpux.load, then compared with onnx's expected outputs at the case's tolerance.
Every case ends in one class:

  pass      ran on the asked provider, outputs equal the expected ones
  fallback  ran, on another provider after the asked one failed (the reason is recorded)
  error     a one-line gpux error (GpuxError): a model or runtime limit, with its reason
  wrong     ran, outputs differ from the expected ones
  crash     any other exception (a traceback: a bug)

`python -m tests.conformance [cpu|openvino] [--every N]` prints the counts and every non-pass reason.
"""

from __future__ import annotations

import contextlib
import io
import sys
import time
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EVERY = 14  # every 14th case by name: 135 of onnx 1.23's 1884


@dataclass
class Outcome:
    name: str
    kind: str  # pass | fallback | error | wrong | crash
    detail: str = ""
    seconds: float = 0.0


def sample(every: int = EVERY) -> list[Any]:
    """A deterministic sample of onnx's node test cases (sorted by name, every `every`-th)."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        cases = sorted(collect_testcases(None), key=lambda c: c.name)
    return [c for i, c in enumerate(cases) if i % every == 0 and c.model is not None and c.data_sets]


def run_case(case: Any, folder: Path, provider: str) -> Outcome:
    import onnx

    import gpux
    from gpux.errors import GpuxError

    started = time.perf_counter()
    folder.mkdir(parents=True, exist_ok=True)
    import numpy as np

    onnx.save(case.model, str(folder / "model.onnx"))
    inputs, expected = case.data_sets[0]
    init = {i.name for i in case.model.graph.initializer}
    names = [i.name for i in case.model.graph.input if i.name not in init]
    feeds = {n: as_array(v) for n, v in zip(names, inputs, strict=False)}
    data = ""
    if feeds and all(getattr(v, "dtype", np.dtype(object)).kind != "O" for v in feeds.values()):
        np.savez(folder / "sample.npz", **feeds)
        data = "verify: {data: sample.npz}\n"
    (folder / "gpux.yml").write_text(f"name: {case.name.replace('_', '-')}\nmodel: {{source: model.onnx}}\n{data}")
    try:
        with gpux.load(folder, provider=provider) as session:
            got = session.run_feeds(feeds)
            fell_back = session.fell_back
            reason = "; ".join(a.reason for a in session.attempts if not a.ok)
    except GpuxError as exc:
        return Outcome(case.name, "error", " ".join(exc.message.split())[:600], time.perf_counter() - started)
    except Exception as exc:  # a traceback in real use
        return Outcome(case.name, "crash", f"{type(exc).__name__}: {exc}"[:240], time.perf_counter() - started)
    seconds = time.perf_counter() - started
    wrong = mismatch(got, [as_array(e) for e in expected], case.rtol, case.atol)
    if wrong:
        return Outcome(case.name, "wrong", wrong, seconds)
    return Outcome(case.name, "fallback" if fell_back else "pass", reason[:240], seconds)


def as_array(value: Any) -> Any:
    """The case's data as numpy (onnx's generators leave numpy scalars and TensorProtos in some)."""
    import numpy as np
    from onnx import TensorProto, numpy_helper

    return numpy_helper.to_array(value) if isinstance(value, TensorProto) else np.asarray(value) \
        if isinstance(value, np.generic) else value


def mismatch(got: list[Any], expected: list[Any], rtol: float, atol: float) -> str:
    import numpy as np

    if len(got) != len(expected):
        return f"{len(got)} outputs, expected {len(expected)}"
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        g, e = np.asarray(g), np.asarray(e)
        if g.shape != e.shape:
            return f"output {i}: shape {g.shape}, expected {e.shape}"
        if e.dtype.kind in "fc":
            if not np.allclose(g.astype(np.float64), e.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True):
                return f"output {i}: max-abs {np.nanmax(np.abs(g.astype(np.float64) - e)):.3g}"
        elif not np.array_equal(g, e):
            return f"output {i}: values differ"
    return ""


def run_all(provider: str, root: Path, every: int = EVERY) -> list[Outcome]:
    return [run_case(c, root / c.name, provider) for c in sample(every)]


# why a case did not pass on the asked provider: the first phrase found in its reason
REASONS = (
    ("newer than onnxruntime", "opset newer than the installed ONNX Runtime reads"),
    ("cannot exchange as a numpy array", "element type numpy cannot hold (float8/float4/int2/...)"),
    ("is not a tensor", "sequence/optional graph inputs or outputs"),
    ("failed verification", "OpenVINO result differs from the FP32 reference (verification)"),
    ("OpenVINO cannot", "OpenVINO cannot convert or compile an operator"),
    ("fails on inputs the FP32 reference runs", "OpenVINO fails at inference on the case's inputs"),
    ("reference (ONNX Runtime) cannot load", "ONNX Runtime lacks the operator or attribute"),
    ("ONNX Runtime", "ONNX Runtime lacks the operator or attribute"),
    ("NotImplemented", "ONNX Runtime lacks the operator or attribute"),
    ("not supported", "ONNX Runtime lacks the operator or attribute"),
    ("not a registered function", "ONNX Runtime lacks the operator or attribute"),
)


def reason_class(detail: str) -> str:
    return next((label for phrase, label in REASONS if phrase in detail), "other")


def counts(outcomes: list[Outcome]) -> dict[str, int]:
    c = Counter(o.kind for o in outcomes)
    return {k: c.get(k, 0) for k in ("pass", "fallback", "error", "wrong", "crash")}


def main(argv: list[str]) -> int:
    import tempfile

    provider = argv[0] if argv else "cpu"
    every = int(argv[argv.index("--every") + 1]) if "--every" in argv else EVERY
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        outcomes = run_all(provider, Path(tmp), every)
        total = time.perf_counter() - started
    print(f"{provider}: {len(outcomes)} cases in {total:.1f}s: {counts(outcomes)}")
    why = Counter((o.kind, reason_class(o.detail)) for o in outcomes if o.kind in ("error", "fallback"))
    for (kind, label), n in sorted(why.items()):
        print(f"  {kind:8} {n:3}  {label}")
    for o in outcomes:
        if o.kind != "pass":
            print(f"  {o.kind:8} {o.name}: {o.detail}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
