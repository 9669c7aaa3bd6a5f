"""`gpux run examples/mobilenet_v2 FOLDER` against the loop a user would write by hand, side by side.

    python benchmarks/run_folder.py [--photos 480] [--rounds 3] [--provider cpu]

The folder holds `--photos` real photos (crops and flips of scikit-image's and scikit-learn's sample photos, saved
as 800×600 JPEG). The hand-written loop is what a user would write for speed: two decode threads
(Pillow: resize the shorter side to 256, centre crop 224, normalize) and batches of 8 on a plain
`onnxruntime.InferenceSession("model.onnx")`. Both run as whole processes (start included), alternating, and print
the same top-1 label per file; the figure is files per second, the median over the rounds, and the top-1 answers
are compared file by file.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "mobilenet_v2"

HAND = '''
import sys, json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
import numpy as np, onnxruntime as ort
from PIL import Image
MEAN, STD = np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32)
labels = Path(sys.argv[2]).read_text().splitlines()
def load(p):
    im = Image.open(p).convert("RGB"); w, h = im.size; s = 256 / min(w, h)
    im = im.resize((round(w * s), round(h * s)), Image.BILINEAR); w, h = im.size
    l, t = int(round((w - 224) / 2)), int(round((h - 224) / 2))  # torchvision CenterCrop
    a = np.asarray(im.crop((l, t, l + 224, t + 224)), np.float32) / 255
    return ((a - MEAN) / STD).transpose(2, 0, 1)
sess = ort.InferenceSession(sys.argv[1])
files = sorted(Path(sys.argv[3]).glob("*.jpg"))
with ThreadPoolExecutor(2) as pool:
    xs = pool.map(load, files)
    batch = []
    for f, x in zip(files, xs):
        batch.append((f, x))
        if len(batch) == 8 or f == files[-1]:
            out = sess.run(None, {"x": np.stack([b[1] for b in batch])})[0]
            for (g, _), row in zip(batch, out):
                print(json.dumps({"file": str(g), "top1": labels[int(row.argmax())]}))
            batch = []
'''


def make_photos(folder: Path, n: int) -> None:
    import numpy as np
    import skimage.data as data
    from PIL import Image

    sources = [data.astronaut(), data.chelsea(), data.coffee(), data.rocket(), data.stereo_motorcycle()[0]]
    try:
        from sklearn.datasets import load_sample_images

        sources += list(load_sample_images().images)
    except ImportError:
        pass
    rng = np.random.default_rng(0)
    for i in range(n):
        im = Image.fromarray(sources[i % len(sources)]).convert("RGB")
        w, h = im.size
        s = rng.uniform(0.6, 1.0)
        cw, ch = int(w * s), int(h * s)
        x, y = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
        im = im.crop((x, y, x + cw, y + ch)).resize((800, 600))
        (im.transpose(Image.Transpose.FLIP_LEFT_RIGHT) if i % 2 else im).save(folder / f"p{i:04d}.jpg", quality=90)


def timed(cmd: list[str]) -> tuple[float, list[dict]]:
    start = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return time.perf_counter() - start, [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def top1(doc: dict) -> str:
    return doc["top1"] if "top1" in doc else doc["answers"]["logits"][0]["label"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--photos", type=int, default=480)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--provider", default="auto", help="auto: the example's own choice (gpux.yml)")
    args = ap.parse_args()
    if not (EXAMPLE / "model.onnx").exists():
        subprocess.run([sys.executable, "make_model.py"], cwd=EXAMPLE, check=True, capture_output=True)
    exe = str(Path(sys.executable).parent / "gpux")
    gpux = [exe, "run", str(EXAMPLE)]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        make_photos(folder, args.photos)
        chosen = [] if args.provider == "auto" else ["-p", args.provider]
        subprocess.run([exe, "build", str(EXAMPLE), *chosen], check=True, capture_output=True)
        cmds = {"hand-written loop (plain session, 2 decode threads, batch 8)":
                [sys.executable, "-c", HAND, str(EXAMPLE / "model.onnx"), str(EXAMPLE / "imagenet_labels.txt"),
                 str(folder)],
                f"gpux run examples/mobilenet_v2 FOLDER ({args.provider})": [*gpux, str(folder), "--json", *chosen],
                f"gpux run ... --batch 1 ({args.provider})": [*gpux, str(folder), "--json", *chosen, "--batch", "1"]}
        rates: dict[str, list[float]] = {k: [] for k in cmds}
        answers: dict[str, list[str]] = {}
        for r in range(args.rounds):
            for name in (list(cmds) if r % 2 == 0 else list(cmds)[::-1]):
                seconds, docs = timed(cmds[name])
                rates[name].append(len(docs) / seconds)
                answers[name] = [top1(d) for d in docs]
    hand = statistics.median(rates[next(iter(cmds))])
    print(f"{args.photos} photos (800×600 JPEG), {args.rounds} rounds, process start included")
    print("| command | files/s (median) | vs hand-written loop | same top-1 as the loop | as gpux --batch 1 |")
    print("|---|---|---|---|---|")
    first, single = answers[next(iter(cmds))], answers[list(cmds)[-1]]
    for name in cmds:
        rate = statistics.median(rates[name])
        same = sum(a == b for a, b in zip(answers[name], first, strict=True))
        one = sum(a == b for a, b in zip(answers[name], single, strict=True))
        print(f"| {name} | {rate:.1f} | {rate / hand:.2f}× | {same}/{len(first)} | {one}/{len(single)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
