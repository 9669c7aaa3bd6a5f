"""PyTorch projects the torch tests share: a small MLP (TorchScript or torch.export) and the torch_cnn example,
each with its gpux.yml, and PyTorch's own outputs for them. Torch alone: the coremltools tests import them, and
so do the runtime tests, which must collect where coremltools is not installed (a GPU machine)."""

from __future__ import annotations

import runpy
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from .conftest import ROOT

torch = pytest.importorskip("torch")

MLP_YML = """\
name: {name}
version: 1.0.0
model:
  source: {source}
inputs:
  x: {{dtype: float32, shape: [batch, 12]}}
outputs:
  probs: {{dtype: float32, shape: [batch, 5]}}
providers:
  openvino: {{inference_precision: f32}}
  coreml: {{compute_precision: fp32, minimum_deployment_target: macOS13}}
"""


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(12, 32)
        self.fc2 = torch.nn.Linear(32, 5)

    def forward(self, x: Any) -> Any:
        return torch.softmax(self.fc2(torch.relu(self.fc1(x))), dim=-1)


def mlp() -> Any:
    torch.manual_seed(1)
    return MLP().eval()


def make_mlp_project(root: Path, name: str = "torch-mlp", kind: str = "torchscript") -> Path:
    """The MLP saved as TorchScript (model.pt) or a torch.export program (model.pt2, exported once per session)."""
    from tests.trained import built

    root.mkdir(parents=True, exist_ok=True)
    source = "model.pt" if kind == "torchscript" else "model.pt2"
    if kind == "torchscript":
        save_mlp(root / source, kind)
    else:
        made = built("torch_mlp", kind, lambda folder: save_mlp(folder / source, kind), Path(__file__))
        shutil.copyfile(made / source, root / source)
    (root / "gpux.yml").write_text(MLP_YML.format(name=name, source=source))
    return root


def save_mlp(path: Path, kind: str) -> None:
    example = torch.randn(2, 12)
    if kind == "torchscript":
        with torch.no_grad():
            torch.jit.save(torch.jit.trace(mlp(), example), str(path))
        return
    batch = torch.export.Dim("batch", min=1, max=256)
    program = torch.export.export(mlp(), (example,), dynamic_shapes={"x": {0: batch}})
    torch.export.save(program, str(path))


def make_cnn_project(root: Path) -> Path:
    """The torch_cnn example as shipped: its gpux.yml and the model its make_model.py writes."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "examples" / "torch_cnn" / "gpux.yml", root / "gpux.yml")
    # a module name TorchScript can record for the class (runpy's default, "<run_path>", is not one)
    script = runpy.run_path(str(ROOT / "examples" / "torch_cnn" / "make_model.py"), run_name="torch_cnn_model")
    script["make"](root / "model.pt")
    return root


def torch_outputs(project: Path, x: np.ndarray) -> np.ndarray:
    src = next(p for p in project.iterdir() if p.suffix in (".pt", ".pt2"))
    module = torch.export.load(str(src)).module() if src.suffix == ".pt2" else torch.jit.load(str(src))
    with torch.inference_mode():
        return module(torch.from_numpy(x)).numpy()
