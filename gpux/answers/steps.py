"""The declared steps of a project bound to its real inputs and outputs: an image (or tensors) in, answers out.

`Steps.of` checks what only the model's real shapes tell (labels per class, the box layout) and raises a
ConfigError at the line that declares it; `predict` is what `Session.predict` and `gpux run NAME FILE` call."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpux.answers.pre import IMAGE_SUFFIXES, Placement, image_tensor
from gpux.config.load import Project
from gpux.config.steps import ImageSteps, Postprocess, class_misfit, classes_axis
from gpux.errors import ConfigError, InputError
from gpux.model.io import Tensor


@dataclass(frozen=True)
class Steps:
    project: Project
    inputs: dict[str, Tensor]
    images: dict[str, tuple[ImageSteps, Tensor]]  # inputs with preprocess: image
    post: dict[str, tuple[Postprocess, list[str] | None]]  # outputs with postprocess, and their labels

    @classmethod
    def of(cls, project: Project, inputs: dict[str, Tensor], outputs: dict[str, Tensor]) -> Steps:
        from gpux.report import labels_of

        cfg = project.config
        images = {n: (s.preprocess.image, inputs[n]) for n, s in (cfg.inputs or {}).items()
                  if s.preprocess is not None and n in inputs}
        post = {n: (s.postprocess, _texts(project, n, s.postprocess) or labels_of(project, n))
                for n, s in (cfg.outputs or {}).items() if s.postprocess is not None and n in outputs}
        problems = [p for n, (spec, labels) in post.items() for p in _misfits(project, n, spec, labels, outputs[n])]
        if problems:
            raise ConfigError(problems)
        return cls(project, inputs, images, post)

    def feeds(self, item: Any, name: str) -> tuple[dict[str, Any], Placement | None]:
        """The feeds for one item: an image (path, bytes, PIL image, HxWxC array) through the declared steps, a
        ready tensor of the image input's rank, or a dict of tensors (cast to the inputs)."""
        from gpux.model.inputs import cast_all

        if isinstance(item, dict):
            return cast_all(item, self.inputs, "inputs"), None
        input_name, steps, tensor = self.image_input(name)
        if hasattr(item, "__array_interface__") and tensor.shape and getattr(item, "ndim", 0) == len(tensor.shape):
            return cast_all({input_name: item}, self.inputs, "inputs"), None
        array, placement = image_tensor(item, steps, tensor.dtype, name)
        return {input_name: array}, placement

    def image_input(self, name: str) -> tuple[str, ImageSteps, Tensor]:
        """The one input images go to (an InputError naming `name` where the model has none or several)."""
        if not self.images:
            raise InputError(f"{name}: {self.project.name} declares no preprocess for its inputs, so it takes "
                             "tensors only", hint="add preprocess: {image: ...} to its image input (docs/answers.md)"
                             ", or pass tensors")
        if len(self.inputs) != 1:
            raise InputError(f"{name}: an image answers a model of one input; {self.project.name} takes "
                             f"{', '.join(self.inputs)}", hint="pass a dict of tensors")
        (input_name, (steps, tensor)), = self.images.items()
        return input_name, steps, tensor

    def answers(self, outputs: dict[str, Any], placement: Placement | None, row: int = 0) -> dict[str, Any]:
        """Each output's answer for one batch row; outputs without postprocess stay arrays."""
        from gpux.answers.post import answer

        out: dict[str, Any] = {}
        for name, arr in outputs.items():
            spec, labels = self.post.get(name, (None, None))
            out[name] = arr[row] if spec is None else answer(arr[row], spec, labels, placement)
        return out


def _texts(project: Project, name: str, spec: Postprocess) -> list[str] | None:
    """A ctc output's text per class index (the charset, read from its file, with the blank and the space)."""
    if spec.ctc is None:
        return None
    charset = spec.ctc.charset
    if isinstance(charset, str):
        try:
            text = (project.root / charset).read_text(encoding="utf-8-sig")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError([project.problem(("outputs", name, "postprocess", "ctc", "charset"),
                                               f"cannot read the charset file {charset}: {exc}")]) from None
        charset = [line.removesuffix("\r") for line in text.removesuffix("\n").split("\n")] if text else []
    return spec.ctc.texts(charset)


def _misfits(project: Project, name: str, spec: Postprocess, labels: list[str] | None, real: Tensor) -> list[Any]:
    """Problems of an output's postprocess against its real shape: the box layout or the ctc rank, the number of
    labels (or charset entries)."""
    from gpux.config.steps import BOX_LAYOUTS

    shape, axis = real.shape, classes_axis(spec)
    layout = BOX_LAYOUTS[spec.boxes.layout] if spec.boxes is not None else None
    if shape is not None and (layout is not None or spec.ctc is not None):
        channels = shape[axis] if len(shape) == 3 else None
        least = layout.coords + 1 if layout is not None else 1
        if len(shape) != 3 or (isinstance(channels, int) and channels < least):
            key, said = (("boxes", f"{spec.boxes.layout} boxes come as {layout.shape}") if spec.boxes and layout
                         else ("ctc", "ctc decodes [batch, time, classes] (or [batch, classes, time] with axis: 1)"))
            return [project.problem(("outputs", name, "postprocess", key), f"{said}; {name} is {list(shape)}")]
    size = shape[axis] if shape and len(shape) >= (3 if axis != -1 or spec.ctc else 1) else None
    if labels is None or shape is None:
        return []
    entries = len(labels) - (spec.ctc.classes(0) if spec.ctc is not None else 0)
    wrong = class_misfit(size, entries, spec)
    if wrong is None:
        return []
    where = "its last axis" if axis == -1 else f"axis {axis}"
    where += (", less 4 box coordinates" + (" and the objectness," if layout.objectness else ",")) if layout else ""
    at = ("outputs", name) + (("postprocess", "ctc", "charset") if spec.ctc is not None else ("labels",))
    return [project.problem(at, f"{wrong} ({name} has {size} on {where} in the model)")]


def describe(item: Any) -> str:
    """How an item is named in messages: its path, else its kind."""
    if isinstance(item, str | os.PathLike):
        return os.fspath(item)
    return "bytes" if isinstance(item, bytes | bytearray | memoryview) else type(item).__name__


def predict(session: Any, x: Any) -> Any:
    """Answers for one item, a list for a list (or tuple) of items; a dict of tensors answers every batch row (a
    list). `session` is a gpux Session: `run_feeds`, `output_names`, `project`, `inputs`, `outputs`."""
    steps = Steps.of(session.project, session.inputs, session.outputs)
    if isinstance(x, list | tuple):
        return [_one(session, steps, item) for item in x]
    return _one(session, steps, x)


def _one(session: Any, steps: Steps, item: Any) -> Any:
    feeds, placement = steps.feeds(item, describe(item))
    outputs = dict(zip(session.output_names, session.run_feeds(feeds), strict=True))
    if isinstance(item, dict) or (placement is None and hasattr(item, "__array_interface__")):
        rows = min((len(a) for a in outputs.values() if getattr(a, "ndim", 0)), default=1)
        return [steps.answers(outputs, None, r) for r in range(rows)]
    return steps.answers(outputs, placement)


def image_files(paths: Sequence[str]) -> list[str]:
    """The files named, a folder's image files (by suffix, sorted) in its place; a missing path is an error."""
    out: list[str] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            found = sorted(str(f) for f in path.iterdir() if f.suffix.lower() in IMAGE_SUFFIXES and f.is_file())
            if not found:
                raise InputError(f"{p}: no image files in this folder ({' '.join(IMAGE_SUFFIXES)})")
            out += found
        elif path.is_file():
            out.append(p)
        else:
            raise InputError(f"{p}: file not found")
    return out
