"""gpux's image pre-processing and NMS side by side with the hand-written paths users write, on real photos.

    python benchmarks/preprocess.py [--rounds 9] [--photos astronaut,chelsea,coffee,rocket,motorcycle_left]

Pre-processing (examples/mobilenet_v2's steps: shorter side 256, centre crop 224, /255, ImageNet mean/std, NCHW):
`gpux.answers.pre.image_tensor(path, ...)` against torchvision's transforms written in Pillow + numpy (open, convert
RGB, resize the shorter side to 256 bilinear, centre crop 224, `np.asarray(img, float32) / 255`, `(x - mean) / std`,
transpose to a contiguous CHW, add the batch axis), on skimage's photos written as PNG and as JPEG (quality 90), at
their own size and upscaled 4x (where JPEG draft decoding matters). Letterbox (examples/yolov8_detector's steps:
fit 320, pad 114, /255, NCHW) against the usual Pillow + numpy letterbox, on the same files.

Post-processing, on the real YOLOv8n detector's output (nudenet's 320n.onnx in ONNX Runtime) for the letterboxed
photos, at the example's score threshold and at a low one (many candidates): gpux's class-aware NMS
(`gpux.answers.post.nms` with the classes) against a per-box Python loop NMS, and the whole decode
(`decode_yolov8`) against nudenet's own per-anchor loop followed by the loop NMS.

Every pair runs in the same process in interleaved rounds (the two paths back to back, the order flipped each round),
each path timed over enough calls for ~20 ms per round; the times are the medians over rounds of the mean per call,
the ratio hand / gpux (> 1: gpux faster) the median of the rounds' own ratios. Outputs are compared: pre-processing
tensors (differences printed, in tensor units), NMS keeps the same boxes. The machine is shared and noisy: read the
ratios of one run, not absolute times across runs.
"""

from __future__ import annotations

import argparse
import math
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MEAN, STD = np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32)
PHOTOS = "astronaut,chelsea,coffee,rocket,motorcycle_left"
TARGET_S = 0.02  # timed work per path per round


def examples(tmp: Path) -> tuple[Any, Any]:
    """The mobilenet_v2 and yolov8_detector examples' projects (models made by their scripts)."""
    from gpux.config.load import load_config

    out = []
    for name in ("mobilenet_v2", "yolov8_detector"):
        shutil.copytree(ROOT / "examples" / name, tmp / name)
        subprocess.run([sys.executable, "make_model.py"], cwd=tmp / name, check=True, capture_output=True)
        out.append(load_config(tmp / name))
    return out[0], out[1]


def photo_files(tmp: Path, names: list[str]) -> list[tuple[str, str, Path]]:
    """(photo, kind, path): each photo as PNG and JPEG (quality 90), at its size and 4x upscaled (bicubic)."""
    import skimage
    from PIL import Image

    data = Path(skimage.__file__).parent / "data"
    out = []
    for name in names:
        src = next(data / f"{name}{ext}" for ext in (".png", ".jpg") if (data / f"{name}{ext}").is_file())
        img = Image.open(src).convert("RGB")
        for big in (False, True):
            im = img.resize((img.width * 4, img.height * 4), Image.Resampling.BICUBIC) if big else img
            for fmt, ext in (("PNG", "png"), ("JPEG", "jpg")):
                path = tmp / f"{name}{'_4x' if big else ''}.{ext}"
                im.save(path, fmt, **({"quality": 90} if fmt == "JPEG" else {}))
                out.append((name, f"{ext}{' 4x' if big else ''} {im.width}x{im.height}", path))
    return out


def torchvision_path(path: Path) -> Any:
    """torchvision's Resize(256), CenterCrop(224), ToTensor(), Normalize(mean, std), unsqueeze(0), in Pillow + numpy."""
    from PIL import Image

    img = Image.open(path).convert("RGB")
    w, h = img.size
    short, long = (w, h) if w <= h else (h, w)
    size = (256, int(256 * long / short)) if w <= h else (int(256 * long / short), 256)
    img = img.resize(size, Image.Resampling.BILINEAR)
    left, top = round((size[0] - 224) / 2.0), round((size[1] - 224) / 2.0)  # torchvision: int(round(...))
    img = img.crop((left, top, left + 224, top + 224))
    x = np.asarray(img, dtype=np.float32) / 255.0
    x = (x - MEAN) / STD
    return np.ascontiguousarray(x.transpose(2, 0, 1))[None]


def letterbox_path(path: Path, size: int = 320, fill: int = 114) -> Any:
    """The usual YOLO letterbox in Pillow + numpy: fit, paste centred on a gray canvas, /255, CHW, batch axis."""
    from PIL import Image

    img = Image.open(path).convert("RGB")
    k = min(size / img.width, size / img.height)
    w, h = max(1, round(img.width * k)), max(1, round(img.height * k))
    img = img.resize((w, h), Image.Resampling.BILINEAR)
    canvas = Image.new("RGB", (size, size), (fill, fill, fill))
    canvas.paste(img, ((size - w) // 2, (size - h) // 2))
    x = np.asarray(canvas, dtype=np.float32) / 255.0
    return np.ascontiguousarray(x.transpose(2, 0, 1))[None]


def per_call_s(fn: Callable[[], object], calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - started) / calls


def side_by_side(pairs: dict[Any, tuple[Callable[[], object], Callable[[], object]]],
                 rounds: int) -> dict[Any, tuple[float, float, float]]:
    """For each case, the median seconds per call of (hand, gpux) and the median of the rounds' ratios hand / gpux:
    rounds interleaved (every case in each round, the two paths back to back, their order flipped each round), so
    a ratio compares two measurements taken under the same load."""
    calls = {}
    for key, (hand, ours) in pairs.items():  # warm up, and size each path's calls to ~TARGET_S
        calls[key] = tuple(max(1, round(TARGET_S / max(per_call_s(f, 1), per_call_s(f, 1), 1e-7)))
                           for f in (hand, ours))
    times: dict[Any, tuple[list[float], list[float]]] = {k: ([], []) for k in pairs}
    for r in range(rounds):
        for key, fns in pairs.items():
            for i in ((0, 1) if r % 2 == 0 else (1, 0)):
                times[key][i].append(per_call_s(fns[i], calls[key][i]))
    return {k: (statistics.median(h), statistics.median(g), statistics.median(a / b for a, b in zip(h, g, strict=True)))
            for k, (h, g) in times.items()}


def geomean(xs: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(x) for x in xs))


def answers(project: Any) -> Callable[[Any], str]:
    """What the example's model answers for a tensor, in a few characters: the top-1 class (classifier) or the
    classes of the boxes kept (detector)."""
    import onnxruntime as ort

    from gpux.answers.post import decode_yolov8

    sess = ort.InferenceSession(str(project.source), providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    boxes = project.config.outputs[sess.get_outputs()[0].name].postprocess.boxes

    def answer(x: Any) -> str:
        out = sess.run(None, {name: x})[0][0]
        return str(int(out.argmax())) if boxes is None else ",".join(map(str, decode_yolov8(out, boxes)[2])) or "-"

    return answer


def preprocessing(files: list[tuple[str, str, Path]], classifier: Any, detector: Any, rounds: int) -> None:
    from gpux.answers.pre import image_tensor

    crop = classifier.config.inputs["x"].preprocess.image
    box = detector.config.inputs["images"].preprocess.image
    for title, steps, hand, project, said in (
            ("shorter 256, centre crop 224, ImageNet mean/std (examples/mobilenet_v2)", crop, torchvision_path,
             classifier, "MobileNetV2 top-1"),
            ("letterbox 320, fill 114, /255 (examples/yolov8_detector)", box, letterbox_path, detector,
             "YOLOv8n classes kept")):
        pairs = {(n, kind): (lambda p=p, h=hand: h(p), lambda p=p, s=steps: image_tensor(p, s, "float32", "x")[0])
                 for n, kind, p in files}
        answer = answers(project)
        close = {k: (np.abs(pair[0]() - pair[1]()), answer(pair[0]()), answer(pair[1]())) for k, pair in pairs.items()}
        got = side_by_side(pairs, rounds)
        print(f"\n### Pre-processing: {title}\n")
        print("| photo | file | hand-written ms | gpux ms | hand / gpux | max abs diff | mean abs diff "
              f"| {said}: hand, gpux |")
        print("|---|---|---|---|---|---|---|---|")
        for (n, kind), (h, g, ratio) in got.items():
            d, ah, ag = close[(n, kind)]
            print(f"| {n} | {kind} | {h * 1e3:.3f} | {g * 1e3:.3f} | {ratio:.2f}× | {d.max():.4f} | {d.mean():.5f} "
                  f"| {ah}, {ag} |")
        kinds = dict.fromkeys(kind.split(" ")[0] + (" 4x" if " 4x" in kind else "") for _, kind, _ in files)
        summary = [f"{k}: {geomean([x for (_, kind), (_, _, x) in got.items() if kind.startswith(k + ' ')]):.2f}×"
                   for k in kinds]
        agree = sum(ah == ag for _, ah, ag in close.values())
        print(f"\nhand / gpux, geometric mean per file kind: {', '.join(summary)}. Differences in tensor units (after "
              f"/255 and mean/std); the model answers the same on both tensors for {agree} of {len(close)} files.")


def loop_nms(boxes: Any, scores: Any, classes: Any, iou: float) -> list[int]:
    """Greedy class-aware NMS, box by box in Python: a box is kept when no kept box of its class overlaps it by more
    than `iou` (the same test as gpux: intersection > iou x union)."""
    b, c = boxes.tolist(), classes.tolist()
    keep: list[int] = []
    for i in sorted(range(len(b)), key=lambda i: -scores[i]):
        x1, y1, x2, y2 = b[i]
        area = max(0.0, x2 - x1) * max(0.0, y2 - y1)
        for j in keep:
            if c[j] != c[i]:
                continue
            u1, v1, u2, v2 = b[j]
            inter = max(0.0, min(x2, u2) - max(x1, u1)) * max(0.0, min(y2, v2) - max(y1, v1))
            union = area + max(0.0, u2 - u1) * max(0.0, v2 - v1) - inter
            if inter > iou * (union if union > 0 else 1):
                break
        else:
            keep.append(i)
    return keep


def loop_decode(pred: Any, score: float, iou: float, most: int) -> tuple[list[list[float]], list[float], list[int]]:
    """nudenet's own post-processing (a loop over the anchors, numpy per row), then the loop NMS, best first."""
    rows = np.transpose(pred)
    boxes, scores, classes = [], [], []
    for i in range(rows.shape[0]):
        class_scores = rows[i][4:]
        best = np.amax(class_scores)
        if best >= score:
            x, y, w, h = rows[i][0:4]
            boxes.append([x - w / 2, y - h / 2, x + w / 2, y + h / 2])
            scores.append(float(best))
            classes.append(int(np.argmax(class_scores)))
    if not boxes:
        return [], [], []
    keep = loop_nms(np.asarray(boxes, np.float32), scores, np.asarray(classes), iou)[:most]
    return [boxes[i] for i in keep], [scores[i] for i in keep], [classes[i] for i in keep]


def candidates(pred: Any, score: float) -> tuple[Any, Any, Any]:
    """The boxes above `score` (x1 y1 x2 y2), their scores and classes, as decode_yolov8 hands them to NMS."""
    scores_all = pred[4:]
    classes = scores_all.argmax(axis=0)
    scores = scores_all[classes, np.arange(pred.shape[1])]
    keep = scores >= score
    cx, cy, w, h = pred[:4, keep]
    return np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1), scores[keep], classes[keep]


def clustered(n: int, seed: int = 0) -> tuple[Any, Any, Any]:
    """n candidate boxes as a detector gives them at a low threshold: jittered around n / 8 objects in a 320 x 320
    image, each box of its object's class (one in five of another), scores uniform."""
    rng = np.random.default_rng(seed)
    objects = max(1, n // 8)
    centres, sizes = rng.uniform(20, 300, (objects, 2)), rng.uniform(10, 120, (objects, 2))
    of = rng.integers(0, objects, n)
    c = centres[of] + rng.normal(0, 4, (n, 2))
    half = sizes[of] * rng.uniform(0.8, 1.2, (n, 2)) / 2
    classes = np.where(rng.random(n) < 0.8, rng.integers(0, 18, objects)[of], rng.integers(0, 18, n))
    return np.concatenate([c - half, c + half], 1).astype(np.float32), rng.uniform(0.01, 1, n).astype(np.float32), \
        classes


def gpux_nms(b: Any, s: Any, c: Any, iou: float) -> list[int]:
    from gpux.answers.post import nms

    return nms(b, s, iou, c)


def postprocessing(files: list[tuple[str, str, Path]], detector: Any, rounds: int) -> None:
    import onnxruntime as ort

    from gpux.answers.post import decode_yolov8
    from gpux.answers.pre import image_tensor

    steps = detector.config.inputs["images"].preprocess.image
    spec = detector.config.outputs["output0"].postprocess.boxes
    sess = ort.InferenceSession(str(detector.source), providers=["CPUExecutionProvider"])
    preds = {n: sess.run(None, {"images": image_tensor(p, steps, "float32", n)[0]})[0][0]
             for n, kind, p in files if kind.startswith("png ") and " 4x" not in kind}
    nms_pairs, decode_pairs, counts = {}, {}, {}
    sets = [(n, score, *candidates(pred, score)) for n, pred in preds.items() for score in (spec.score, 0.01)]
    sets += [("synthetic", n, *clustered(n)) for n in (100, 300, 1000, 3000)]
    for name, score, b, s, c in sets:
        ours = gpux_nms(b, s, c, spec.iou)
        assert ours == loop_nms(b, s, c, spec.iou), (name, score)
        if len(s):  # decode_yolov8 calls no NMS without candidates
            counts[(name, score)] = (len(s), len(ours))
            nms_pairs[(name, score)] = (lambda b=b, s=s, c=c: loop_nms(b, s, c, spec.iou),
                                        lambda b=b, s=s, c=c: gpux_nms(b, s, c, spec.iou))
        if name in preds:
            pred, at = preds[name], spec.model_copy(update={"score": score})
            got, want = decode_yolov8(pred, at), loop_decode(pred, score, spec.iou, spec.max)
            np.testing.assert_allclose(got[0], np.asarray(want[0]).reshape(-1, 4), atol=1e-4)
            assert got[2].tolist() == want[2], (name, score)
            decode_pairs[(name, score)] = (lambda p=pred, sc=score: loop_decode(p, sc, spec.iou, spec.max),
                                           lambda p=pred, a=at: decode_yolov8(p, a))
    got_nms, got_decode = side_by_side(nms_pairs, rounds), side_by_side(decode_pairs, rounds)
    print("\n### NMS alone, class-aware, IoU 0.45: the YOLOv8n detector's candidates (letterboxed photos, 2100 "
          "anchors) and synthetic clusters\n")
    print("| boxes from | score ≥ / count | candidates | kept | per-box loop ms | gpux ms | loop / gpux |")
    print("|---|---|---|---|---|---|---|")
    for key, (cand, kept) in counts.items():
        h, g, ratio = got_nms[key]
        print(f"| {key[0]} | {key[1]:g} | {cand} | {kept} | {h * 1e3:.4f} | {g * 1e3:.4f} | {ratio:.2f}× |")
    print("\n### The whole post-processing of one output [22, 2100]: nudenet's per-anchor loop + the loop NMS vs "
          "`decode_yolov8`\n")
    print("| photo | score ≥ | hand-written ms | gpux ms | hand / gpux |")
    print("|---|---|---|---|---|")
    for key, (h, g, ratio) in got_decode.items():
        print(f"| {key[0]} | {key[1]:g} | {h * 1e3:.3f} | {g * 1e3:.3f} | {ratio:.2f}× |")
    print("\nKept boxes identical (same indices, same order) in every case; decoded boxes equal within 1e-4 px.")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--photos", default=PHOTOS, help="skimage.data photos, comma separated")
    ap.add_argument("--only", choices=("pre", "post"), default=None)
    args = ap.parse_args()

    import PIL

    with tempfile.TemporaryDirectory() as tmp:
        classifier, detector = examples(Path(tmp))
        files = photo_files(Path(tmp), args.photos.split(","))
        print(f"Pillow {PIL.__version__}, numpy {np.__version__}, {args.rounds} interleaved rounds")
        if args.only != "post":
            preprocessing(files, classifier, detector, args.rounds)
        if args.only != "pre":
            postprocessing(files, detector, args.rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
