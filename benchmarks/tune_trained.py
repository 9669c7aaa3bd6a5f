"""`gpux tune` on the trained MobileNetV2 (examples/mobilenet_v2), several times: how stable its pick is, and the
speed-vs-agreement front of every candidate.

    python benchmarks/tune_trained.py [--runs 3] [--seconds 1] [--budget 600] [--floor min_top1=1.0] [--held-out]
                                      [--out F.md]

`--out` writes the table there and every run's lock beside it (F.json).

Each run is `gpux tune COPY --json` on one copy of the example (runs after the first find its builds cached and only
measure again); `--floor KEY=VALUE` adds verify thresholds to the copy's gpux.yml (the user's accuracy floor;
default: the int8 defaults). `--held-out` judges every candidate on other crops of the same photos (a 3×3 grid at
two scales, ~170 crops, written to held_out.npz as verify.data) instead of the example's every-4th hold-out (11
crops), and int8 calibrates on all 44 of crops.npz. Printed: per run the pick, its speedup over a plain ONNX Runtime
session with the per-round range, the machine's load average before and after; then per candidate its verdict and
speedup in each run, its agreement with the FP32 reference on the held-out crops (top-1, confident top-1, top-5,
cosine), whether it is on the front (no candidate that passed is faster in its median speedup over the runs and at
least as faithful), and the layers int8 hurts most as tune's ranking measured them."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "mobilenet_v2"


def held_out_crops(scales: tuple[int, ...] = (256, 320), size: int = 224) -> Any:
    """[N, 3, size, size] float32: the example's photos, resized by the shorter side to each scale, cropped on a
    3×3 grid and normalized as the example's crops are (those among them that are calibration crops too are left
    out by verification, which says how many)."""
    import numpy as np

    sys.path.insert(0, str(EXAMPLE))
    import make_model  # the example's photos, resizing and normalization

    out = []
    for rgb in make_model.photos():
        for scale in scales:
            img = make_model.resized(rgb, scale, size)
            w, h = img.size
            out += [make_model.normalized(img, x, y, size)
                    for y in (0, (h - size) // 2, h - size) for x in (0, (w - size) // 2, w - size)]
    return np.stack(out).astype(np.float32)


def project_copy(floor: list[str], held_out: bool = False) -> Path:
    """A copy of the example (its model and crops made first if missing) with the floor added to `verify:` and,
    with `held_out`, verify.data pointing at crops held out from calibration entirely."""
    if not (EXAMPLE / "model.onnx").is_file() or not (EXAMPLE / "crops.npz").is_file():
        subprocess.run([sys.executable, str(EXAMPLE / "make_model.py")], check=True, capture_output=True)
    folder = Path(tempfile.mkdtemp(prefix="gpux-tune-trained-")) / "mobilenet_v2"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns(".gpux", "gpux.lock.json", "__pycache__"))
    yml = folder / "gpux.yml"
    text = yml.read_text()
    assert text.rstrip().splitlines()[-1].startswith("  ") and "\nverify:\n" in text, "verify: is the last block"
    if held_out:
        import numpy as np

        np.savez(folder / "held_out.npz", x=held_out_crops()[:, None])
        assert "  data: crops.npz" in text
        text = text.replace("  data: crops.npz", "  data: held_out.npz", 1)
    yml.write_text(text.rstrip() + "\n" + "".join(f"  {k}: {v}\n" for k, v in (f.split("=", 1) for f in floor)))
    return folder


def tune_once(folder: Path, seconds: float, budget: float) -> dict[str, Any]:
    load_before = os.getloadavg()
    started = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "gpux", "tune", str(folder), "--seconds", str(seconds), "--budget",
                        str(budget), "--json"], capture_output=True, text=True)
    if r.returncode not in (0, 1):
        raise SystemExit(f"gpux tune failed ({r.returncode}): {r.stderr[-2000:]}")
    return {"lock": json.loads(r.stdout), "wall_s": time.perf_counter() - started, "load": (load_before,
                                                                                            os.getloadavg())}


def label(c: dict[str, Any]) -> str:
    skip = ("precision", "calibration", "inference_precision")
    opts = ", ".join(f"{k}={v}" for k, v in c["options"].items() if k not in skip)
    shown = c["precision"] if c["options"].get("inference_precision") != "bf16" else "bf16 execution"
    return f"{c['provider']} {shown}" + (f" ({opts})" if opts else "")


def pct(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:.0f}"


def vs(c: dict[str, Any]) -> str:
    v = c.get("vs_plain_ort")
    return "-" if not v else f"{v['speedup']:.2f}× ({v['low']:.2f}–{v['high']:.2f})"


def median_speedup(k: int, runs: list[dict[str, Any]]) -> float | None:
    """Candidate k's speedup over plain ONNX Runtime, the median over the runs that measured it."""
    got = [(r["lock"]["candidates"][k].get("vs_plain_ort") or {}).get("speedup") for r in runs]
    got = [g for g in got if g is not None]
    return statistics.median(got) if got else None


def faith(c: dict[str, Any]) -> tuple[float, ...]:
    """Agreement with the FP32 reference: top-1, confident top-1, top-5, then the cosine to 3 decimals."""
    a = c.get("accuracy") or {}
    return (*(a.get(m) or 0.0 for m in ("top1", "top1_confident", "top5")), round(a.get("min_cosine") or 0, 3))


def front(runs: list[dict[str, Any]]) -> set[int]:
    """The candidates (indices) that passed and that no other passing one beats in median speedup at least as
    faithfully: the speed-vs-agreement front."""
    last = runs[-1]["lock"]["candidates"]
    speed = {k: median_speedup(k, runs) for k, c in enumerate(last) if c["status"] == "ok"}
    known = {k: v for k, v in speed.items() if v is not None}
    return {k for k, v in known.items()
            if not any(w > v and all(a >= b for a, b in zip(faith(last[j]), faith(last[k]), strict=True))
                       for j, w in known.items() if j != k)}


def render(runs: list[dict[str, Any]], floor: list[str]) -> str:
    out = [f"floor: {', '.join(floor) or 'the int8 defaults'}; {os.cpu_count()} CPUs", "",
           "| run | pick | vs plain ORT (round range) | plain ORT p50 ms | load avg before → after | tune s |",
           "|---|---|---|---|---|---|"]
    for i, r in enumerate(runs, 1):
        lock, (before, after) = r["lock"], r["load"]
        pick = lock.get("figures") or {}
        out.append(f"| {i} | {label(pick) if pick else 'nothing locked'} | {vs(pick) if pick else '-'} | "
                   f"{(lock.get('baseline') or {}).get('p50_ms', 0):.2f} | {before[0]:.2f} → {after[0]:.2f} | "
                   f"{r['wall_s']:.0f} |")
    last = runs[-1]["lock"]["candidates"]
    on_front = front(runs)
    out += ["", "| candidate | verdict (last run) | " + " | ".join(f"run {i}" for i in range(1, len(runs) + 1))
            + " | top-1 / conf / top-5 % | cosine | front |", "|---|---|" + "---|" * len(runs) + "---|---|---|"]
    for k, c in enumerate(last):
        acc = c.get("accuracy") or {}
        agree = "/".join(pct(acc.get(m)) for m in ("top1", "top1_confident", "top5")) if acc else "-"
        cells = [vs(r["lock"]["candidates"][k]) for r in runs]
        verdict = c["status"] + (f": {c['why'][:70]}" if c["status"] not in ("ok",) else "")
        out.append(f"| {label(c)} | {verdict} | " + " | ".join(cells) + f" | {agree} | "
                   f"{'-' if acc.get('min_cosine') is None else format(acc['min_cosine'], '.4f')} | "
                   f"{'yes' if k in on_front else ''} |")
    for provider, ranked in (runs[-1]["lock"].get("limiting_layers") or {}).items():
        out += ["", f"layers int8 hurts most on {provider} ({ranked['settings']}; SQNR lost, ranked on "
                    f"{ranked['ranked_on']['samples']} calibration crops):",
                "", *(f"- {r['layer']}: {r['lost_db']:.1f} dB ({r['in_db']:.1f} → {r['out_db']:.1f})"
                      for r in ranked["layers"])]
    picks = [(r["lock"].get("figures") or {}).get("vs_plain_ort") for r in runs]
    speeds = [p["speedup"] for p in picks if p]
    if speeds:
        out += ["", f"pick's speedup over the runs: median {statistics.median(speeds):.2f}×, "
                    f"{min(speeds):.2f}–{max(speeds):.2f}×"]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=1.0, help="measured per candidate (gpux tune --seconds)")
    parser.add_argument("--budget", type=float, default=600.0)
    parser.add_argument("--floor", action="append", default=[], help="a verify threshold KEY=VALUE, repeatable")
    parser.add_argument("--held-out", action="store_true", help="judge on ~170 other crops (held_out.npz)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    folder = project_copy(args.floor, args.held_out)
    runs = []
    for i in range(args.runs):
        runs.append(tune_once(folder, args.seconds, args.budget))
        print(f"run {i + 1}/{args.runs}: {runs[-1]['wall_s']:.0f} s", file=sys.stderr)
    text = render(runs, args.floor)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
        args.out.with_suffix(".json").write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
