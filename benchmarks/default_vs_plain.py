"""gpux's default path against the one line a user would write instead, on trained models, side by side.

    python benchmarks/default_vs_plain.py [--rounds 9] [--seconds 0.4] [--only mobilenet]

For every provider that runs here, each trained model is opened twice in one process: by gpux (`gpux.load(dir,
provider)` on a gpux.yml that declares only the model and its input, then `Session.run(dict)`) and by what the user
would write instead: `onnxruntime.InferenceSession("model.onnx")` for cpu, `Core().compile_model("model.onnx",
"CPU", {INFERENCE_PRECISION_HINT: <what gpux executes>})` for openvino, an eager TorchScript `module(x)` for the
torch runtime (the trained MobileNetV2 traced; `cpu: {runtime: torch}`).
The two are timed in alternating rounds (a 50 ms pause between them: ONNX Runtime's threads spin after a run) on
real inputs where the example has them; each figure is the median over rounds of the mean time per call, and
"gpux / plain" is the plain time over gpux's (above 1: gpux is faster). The README's MobileNetV2 example is also
measured as shipped (auto selection on its own gpux.yml: what `gpux run examples/mobilenet_v2` runs).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


@dataclass(frozen=True)
class Case:
    label: str
    example: str
    inputs: str  # the gpux.yml inputs block of the minimal config
    data: tuple[str, str] | None = None  # (npz file, key) of real inputs, one per row
    shipped: bool = False  # use the example's own gpux.yml


CASES = [
    Case("MobileNetV2 (ImageNet)", "mobilenet_v2", "x: {dtype: float32, shape: [1, 3, 224, 224]}",
         ("crops.npz", "x")),
    Case("YOLOv8n detector (nudenet 320n)", "yolov8_detector", "images: {dtype: float32, shape: [1, 3, 320, 320]}",
         ("photos.npz", "images")),
    Case("PP-OCRv4 recognizer (rapidocr)", "ppocr_recognizer", "x: {dtype: float32, shape: [1, 3, 48, 320]}"),
    Case("MLP (examples/mlp)", "mlp", "x: {dtype: float32, shape: [1, 64]}"),
    Case("MobileNetV2, the README's example as shipped", "mobilenet_v2", "", ("crops.npz", "x"), shipped=True),
]

MINIMAL = "name: {name}\nversion: 1.0.0\nmodel:\n  source: model.onnx\ninputs:\n  {inputs}\nruntime:\n  backend: {p}\n"


def project(tmp: Path, case: Case, provider: str) -> Path:
    src = ROOT / "examples" / case.example
    if not (src / "model.onnx").exists():
        subprocess.run([sys.executable, "make_model.py"], cwd=src, check=True, capture_output=True)
    dst = tmp / f"{case.example}-{provider}-{'shipped' if case.shipped else 'minimal'}"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".gpux"))
    if not case.shipped:
        (dst / "gpux.yml").write_text(MINIMAL.format(name=dst.name, inputs=case.inputs, p=provider))
    return dst


def feeds_of(case: Case, folder: Path, session) -> list[dict]:
    import numpy as np

    if case.data:
        file, key = case.data
        rows = np.load(folder / file)[key]
        return [{session.io.inputs[0].name: np.ascontiguousarray(r, dtype=np.float32)} for r in rows[:16]]
    import yaml

    (name, spec), = yaml.safe_load(case.inputs).items()
    rng = np.random.default_rng(0)
    return [{name: rng.random(spec["shape"], dtype=np.float32)} for _ in range(4)]


def plain_runner(provider: str, model: Path, session) -> Callable[[dict], object]:
    """What a user writes instead, at the precision gpux executes (OpenVINO: the same INFERENCE_PRECISION_HINT)."""
    if provider == "torch":
        import torch

        module = torch.jit.load(str(model.with_suffix(".pt"))).eval()

        def eager(feeds: dict) -> object:
            with torch.inference_mode():
                return module(*(torch.from_numpy(v) for v in feeds.values()))

        return eager
    if provider == "openvino":
        import openvino as ov

        hint = session.report().get("execution_precision") or "f32"
        compiled = ov.Core().compile_model(str(model), "CPU", {"INFERENCE_PRECISION_HINT": hint})
        request = compiled.create_infer_request()
        return lambda feeds: request.infer(feeds)
    import onnxruntime as ort

    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return lambda feeds: sess.run(None, feeds)


def mean_call_s(fn: Callable[[dict], object], feeds: list[dict], seconds: float) -> float:
    n, start = 0, time.perf_counter()
    while True:
        for f in feeds:
            fn(f)
        n += len(feeds)
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return elapsed / n


def torch_project(folder: Path) -> None:
    """The trained MobileNetV2 traced to TorchScript beside its ONNX file, run by gpux's torch runtime on cpu."""
    import importlib.util

    import torch

    maker = ROOT / "examples" / "mobilenet_v2" / "make_model.py"
    spec = importlib.util.spec_from_file_location("make_mobilenet", maker)
    make = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make)
    module = make.mobilenet_v2().eval()
    torch.jit.save(torch.jit.trace(module, torch.zeros(1, 3, 224, 224)), str(folder / "model.pt"))
    yml = (folder / "gpux.yml").read_text().replace("model.onnx", "model.pt").replace("backend: torch", "backend: cpu")
    (folder / "gpux.yml").write_text(yml + "providers:\n  cpu: {runtime: torch}\n")


def measure(case: Case, provider: str, tmp: Path, rounds: int, seconds: float) -> dict:
    import gpux

    folder = project(tmp, case, provider)
    if provider == "torch":
        torch_project(folder)
    session = gpux.load(folder, None, store_dir=tmp / "store") if case.shipped else \
        gpux.load(folder, "cpu" if provider == "torch" else provider, strict=True, store_dir=tmp / "store")
    feeds = feeds_of(case, folder, session)
    plain = plain_runner("cpu" if case.shipped else provider, folder / "model.onnx", session)
    ours = session.run
    for fn in (plain, ours):
        mean_call_s(fn, feeds, seconds / 2)
    times: dict[str, list[float]] = {"plain": [], "gpux": []}
    for r in range(rounds):
        for name in (("plain", "gpux") if r % 2 == 0 else ("gpux", "plain")):
            times[name].append(mean_call_s(plain if name == "plain" else ours, feeds, seconds))
            time.sleep(0.05)
    opened = session.report()
    session.close()
    g, p = statistics.median(times["gpux"]), statistics.median(times["plain"])
    return {"case": case.label, "provider": session.provider if case.shipped else provider, "gpux_ms": g * 1e3,
            "plain_ms": p * 1e3, "ratio": p / g,
            "opened": (opened.get("runtime") or {}).get("opened") or {}, "precision": opened.get("execution_precision")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--seconds", type=float, default=0.4, help="per variant per round")
    ap.add_argument("--only", default="", help="cases whose label contains this text")
    ap.add_argument("--providers", default="cpu,openvino,torch", help="torch: gpux's torch runtime on cpu")
    args = ap.parse_args()

    from gpux.optional import is_installed

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for provider in args.providers.split(","):
            if not is_installed(provider if provider != "cpu" else "onnxruntime"):
                continue
            for case in CASES:
                if args.only.lower() not in case.label.lower() or (case.shipped and provider != "cpu") or \
                        (provider == "torch" and case.example != "mobilenet_v2"):
                    continue
                rows.append(measure(case, provider, Path(tmp), args.rounds, args.seconds))
                r = rows[-1]
                print(f"{r['provider']:<9} {r['case']:<46} gpux {r['gpux_ms']:7.2f} ms  plain {r['plain_ms']:7.2f} ms"
                      f"  gpux/plain {r['ratio']:.2f}x  ({r['precision']}; {_opened(r['opened'])})", flush=True)
    print()
    print("| provider | trained model | gpux default | plain | gpux / plain | executes | opened with |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['provider']} | {r['case']} | {r['gpux_ms']:.2f} ms | {r['plain_ms']:.2f} ms | "
              f"**{r['ratio']:.2f}×** | {r['precision']} | {_opened(r['opened'])} |")
    return 0


def _opened(opened: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in opened.items()) or "–"


if __name__ == "__main__":
    raise SystemExit(main())
