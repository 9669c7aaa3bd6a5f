"""Generate the ``torch_cnn`` example model: a small image classifier saved as TorchScript.

``image`` float32 [batch, 3, 32, 32] -> ``probs`` float32 [batch, 10]: two 3x3 convolutions with ReLU,
global average pooling, a linear layer and Softmax (about 5,400 parameters). Weights come from a fixed
seed; the module is traced with ``torch.jit.trace`` and written with ``torch.jit.save``, so every run
writes a byte-identical file.

Usage: python examples/torch_cnn/make_model.py [OUT_PATH] [--force]
"""

import argparse
import io
import os
from pathlib import Path

import torch
from torch import nn

SEED = 0
DEFAULT_OUT = Path(__file__).resolve().parent / "model.pt"
CLASSES = 10


class SmallCNN(nn.Module):
    def __init__(self, classes: int = CLASSES) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.fc = nn.Linear(32, classes)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv1(image))
        x = torch.relu(self.conv2(x))
        x = x.mean(dim=(2, 3))
        return torch.softmax(self.fc(x), dim=-1)


def build() -> torch.jit.ScriptModule:
    torch.manual_seed(SEED)
    model = SmallCNN().eval()
    example = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(SEED))
    with torch.no_grad():
        return torch.jit.trace(model, example)


def make(path: str | os.PathLike = DEFAULT_OUT) -> Path:
    """Build and atomically write the TorchScript model to ``path``; return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()  # saved to memory: a file's name would end up inside the archive
    torch.jit.save(build(), buffer)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(buffer.getvalue())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, default=DEFAULT_OUT, help="output .pt path")
    parser.add_argument("--force", action="store_true", help="regenerate even if OUT exists")
    args = parser.parse_args()
    kept = args.out.exists() and not args.force
    path = args.out if kept else make(args.out)
    print(f"{'kept existing' if kept else 'wrote'} {path} ({path.stat().st_size:,} bytes)")
