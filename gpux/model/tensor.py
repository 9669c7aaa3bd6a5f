"""A model's interface as gpux reads it: its tensors (name, dtype, shape), versions and problems."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypedDict

Dim = int | str | None


class TensorDoc(TypedDict):
    """A tensor as JSON and the memos write it."""

    name: str
    dtype: str
    shape: list[Dim] | None


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: str
    shape: tuple[Dim, ...] | None  # None: rank unknown; a None dim: unnamed dynamic dim

    def to_dict(self) -> TensorDoc:
        return {"name": self.name, "dtype": self.dtype, "shape": None if self.shape is None else list(self.shape)}


@dataclass(frozen=True, kw_only=True)
class ModelIO:
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    opset: int | None = None
    ir_version: int | None = None
    producer: str = ""
    external_data: tuple[str, ...] = field(default=())
    opsets: dict[str, int] = field(default_factory=dict)  # domain ("" = default) -> version
    problems: tuple[str, ...] = field(default=())  # what makes the file unusable (compat.structural_problems)
    labels: dict[str, list[str]] = field(default_factory=dict)  # output -> the class names the model carries
    exchanged: dict[str, str] = field(default_factory=dict)  # ZipMap output -> the tensor it is answered from

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelIO:  # a memo's document
        def tensors(items: list[TensorDoc]) -> tuple[Tensor, ...]:  # memos may hold -1 dims (dynamic)
            return tuple(Tensor(t["name"], t["dtype"], None if t["shape"] is None else
                                tuple(None if isinstance(d, int) and d < 0 else d for d in t["shape"]))
                         for t in items)

        return cls(inputs=tensors(d["inputs"]), outputs=tensors(d["outputs"]), opset=d["opset"],
                   ir_version=d["ir_version"], producer=d["producer"], external_data=tuple(d["external_data"]),
                   opsets=dict(d.get("opsets") or {}), problems=tuple(d.get("problems") or ()),
                   labels=dict(d.get("labels") or {}), exchanged=dict(d.get("exchanged") or {}))

    def to_dict(self) -> dict[str, Any]:  # the memo's document
        return {
            "inputs": [t.to_dict() for t in self.inputs],
            "outputs": [t.to_dict() for t in self.outputs],
            "opset": self.opset,
            "ir_version": self.ir_version,
            "producer": self.producer,
            "external_data": list(self.external_data),
            "opsets": self.opsets,
            "problems": list(self.problems),
            "labels": self.labels,
            "exchanged": self.exchanged,
        }


def shape_text(shape: tuple[Dim, ...]) -> str:
    """A shape as users read it: [batch, 3, 224, 224], an unnamed dynamic dim as ?."""
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


__all__ = ["Dim", "ModelIO", "Tensor", "TensorDoc", "shape_text"]
