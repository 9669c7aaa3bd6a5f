"""Generate the ``torch_native`` example model: a small tabular classifier saved as a torch.export program.

``features`` float32 [batch, 16] -> ``probs`` float32 [batch, 3]: two linear layers with GELU, LayerNorm and
Softmax (about 1,800 parameters). Weights come from a fixed seed; the module is exported with
``torch.export.export`` (the batch dim dynamic, 1 to 1024) and written with ``torch.export.save``.

Usage: python examples/torch_native/make_model.py [OUT_PATH] [--force]
"""

import argparse
import os
from pathlib import Path

import torch
from torch import nn

SEED = 0
DEFAULT_OUT = Path(__file__).resolve().parent / "model.pt2"
FEATURES, HIDDEN, CLASSES = 16, 64, 3


class TabularClassifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.hidden = nn.Linear(FEATURES, HIDDEN)
        self.norm = nn.LayerNorm(HIDDEN)
        self.out = nn.Linear(HIDDEN, CLASSES)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        x = self.norm(nn.functional.gelu(self.hidden(features)))
        return torch.softmax(self.out(x), dim=-1)


def build() -> torch.export.ExportedProgram:
    torch.manual_seed(SEED)
    model = TabularClassifier().eval()
    example = torch.randn(2, FEATURES, generator=torch.Generator().manual_seed(SEED))
    batch = torch.export.Dim("batch", min=1, max=1024)
    with torch.no_grad():
        return torch.export.export(model, (example,), dynamic_shapes={"features": {0: batch}})


def make(path: str | os.PathLike = DEFAULT_OUT) -> Path:
    """Build and atomically write the program to ``path``; return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.pt2")
    try:
        torch.export.save(build(), str(tmp))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, default=DEFAULT_OUT, help="output .pt2 path")
    parser.add_argument("--force", action="store_true", help="regenerate even if OUT exists")
    args = parser.parse_args()
    kept = args.out.exists() and not args.force
    path = args.out if kept else make(args.out)
    print(f"{'kept existing' if kept else 'wrote'} {path} ({path.stat().st_size:,} bytes)")
