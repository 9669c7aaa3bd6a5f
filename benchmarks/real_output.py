"""What checking declared steps against the real output costs (gpux.model.probe, gpux.model.fit), side by side.

    python benchmarks/real_output.py [--rounds 7]

On the trained models of two examples (examples/ppocr_recognizer: PP-OCRv4's recognizer, a ctc step; and
examples/yolov8_detector: nudenet's YOLOv8n, a boxes step), `gpux.model.io.check_model` on a freshly loaded
project, three ways in interleaved rounds: the project with its steps removed (metadata only, what every command paid
before), with its steps and the probe's memo removed first (cold: the model runs on its three samples), and with
its steps and the memo kept in the store (warm: what every later command pays). Medians over rounds; ratios of
those medians to the metadata-only time. The machine is shared and noisy: read the ratios of one run.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def example(name: str, folder: Path) -> Path:
    spec = importlib.util.spec_from_file_location(f"make_{name}", ROOT / "examples" / name / "make_model.py")
    assert spec is not None and spec.loader is not None
    make = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make)
    folder.mkdir(parents=True)
    make.export(folder if name == "ppocr_recognizer" else folder / "model.onnx")
    import yaml

    config = yaml.safe_load((ROOT / "examples" / name / "gpux.yml").read_text())
    config.pop("verify", None)  # its data files are not needed to check the model
    (folder / "gpux.yml").write_text(yaml.safe_dump(config))
    bare = folder.parent / f"{name}-bare"
    shutil.copytree(folder, bare)
    for output in config["outputs"].values():
        output.pop("postprocess", None)
        output.pop("labels", None)
    (bare / "gpux.yml").write_text(yaml.safe_dump(config))
    for f in (folder, bare):
        (f / ".gpux").mkdir()
    return folder


def timed(folder: Path, memo: bool) -> float:
    from gpux.config.load import load_config
    from gpux.model.io import check_model

    if not memo:
        (folder / ".gpux" / ".model-real.json").unlink(missing_ok=True)
    project = load_config(folder / "gpux.yml")
    started = time.perf_counter()
    check_model(project)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    rounds = parser.parse_args().rounds
    with tempfile.TemporaryDirectory() as tmp:
        rows: list[tuple[str, dict[str, Any]]] = []
        for name in ("ppocr_recognizer", "yolov8_detector"):
            steps = example(name, Path(tmp) / name)
            bare = Path(tmp) / f"{name}-bare"
            times: dict[str, list[float]] = {"metadata only": [], "cold": [], "warm": []}
            for _ in range(rounds):
                times["metadata only"].append(timed(bare, True))
                times["cold"].append(timed(steps, False))
                times["warm"].append(timed(steps, True))
            rows.append((name, {k: statistics.median(v) for k, v in times.items()}))
    print("| example | metadata only ms | steps, cold ms | steps, warm ms | cold / metadata | warm / metadata |")
    print("|---|---|---|---|---|---|")
    for name, m in rows:
        base = m["metadata only"]
        print(f"| {name} | {base * 1e3:.1f} | {m['cold'] * 1e3:.1f} | {m['warm'] * 1e3:.1f} | "
              f"{m['cold'] / base:.1f}x | {m['warm'] / base:.2f}x |")


if __name__ == "__main__":
    main()
