"""Each kind's block against its output's real shape, named by gpux.config.kinds as `shape` steps (a box layout's
rank, a ctc output's rank, a probability map's), and the labels (or charset entries) against the class axis: the
problems a session refuses to open with, at the line that declares them."""

from __future__ import annotations

from collections.abc import Mapping

from gpux.config.load import Project
from gpux.config.steps import BOX_LAYOUTS, Postprocess, class_misfit, classes_axis
from gpux.errors import Problem
from gpux.model.tensor import Tensor

AT = ("postprocess",)


def label_problems(project: Project, name: str, spec: Postprocess | None, labels: list[str] | None, real: Tensor,
                   less: str = "") -> list[Problem]:
    """The labels (a ctc output's texts: its charset with the blank and space) against the real class axis."""
    shape, axis = real.shape, classes_axis(spec)
    charset = spec is not None and spec.ctc is not None
    size = shape[axis] if shape and len(shape) >= (3 if axis != -1 or charset else 1) else None
    if labels is None or shape is None:
        return []
    entries = len(labels) - (spec.ctc.classes(0) if spec is not None and spec.ctc is not None else 0)
    wrong = class_misfit(size, entries, spec)
    if wrong is None:
        return []
    where = ("its last axis" if axis == -1 else f"axis {axis}") + less
    at = ("outputs", name) + (("postprocess", "ctc", "charset") if charset else ("labels",))
    return [project.problem(at, f"{wrong} ({name} has {size} on {where} in the model)")]


def _rank3(project: Project, name: str, key: str, said: str, least: int, axis: int, real: Tensor) -> list[Problem]:
    shape = real.shape
    if shape is None:
        return []
    channels = shape[axis] if len(shape) == 3 else None
    if len(shape) != 3 or (isinstance(channels, int) and channels < least):
        return [project.problem(("outputs", name, "postprocess", key), f"{said}; {name} is {list(shape)}")]
    return []


def box_shape(project: Project, name: str, spec: Postprocess, labels: list[str] | None, real: Tensor,
              outputs: Mapping[str, Tensor] | None = None) -> list[Problem]:
    assert spec.boxes is not None
    layout = BOX_LAYOUTS[spec.boxes.layout]
    if layout.heads:
        return heads_shape(project, name, spec, labels, outputs or {name: real})
    wrong = _rank3(project, name, "boxes", f"{spec.boxes.layout} boxes come as {layout.shape}", layout.others + 1,
                   layout.channels_axis, real)
    less = ", less 4 box coordinates" + (" and the objectness," if layout.objectness else " and the angle,"
                                         if layout.angle else ",")
    return wrong or label_problems(project, name, spec, labels, real, less)


def heads_shape(project: Project, name: str, spec: Postprocess, labels: list[str] | None,
                outputs: Mapping[str, Tensor]) -> list[Problem]:
    """The outputs a per-stride layout reads against their shapes (a missing one is Steps.of's to say), and the
    labels against the classes of its first head."""
    from gpux.model.heads import head_misfit

    block = spec.boxes
    assert block is not None
    at = ("outputs", name, "postprocess", "boxes")
    if spec.softmax or (spec.sigmoid and block.layout == "yolov5_heads"):
        said = "the Detect layer's sigmoid is the layout's own" if block.layout == "yolov5_heads" else \
            "each side's bins get their softmax from the layout (sigmoid: true for class scores that are logits)"
        return [project.problem(at, f"{block.layout}: {said}; drop {'softmax' if spec.softmax else 'sigmoid'}")]
    if any(n not in outputs for n in block.reads):
        return []
    wrong = head_misfit(block, name, {n: t.shape for n, t in outputs.items()}, None)
    if wrong:
        return [project.problem((*at, wrong[0]), wrong[1])]
    less = ", less 4 box coordinates and the objectness," if block.layout == "yolov5_heads" else ""
    return label_problems(project, name, spec, labels, outputs[name], less)


def ctc_shape(project: Project, name: str, spec: Postprocess, labels: list[str] | None, real: Tensor) -> list[Problem]:
    assert spec.ctc is not None
    said = ("ctc decodes [batch, time, classes] ([batch, classes, time] with axis: 1, [time, batch, classes] with "
            "time_major: true)")
    return _rank3(project, name, "ctc", said, 1, spec.ctc.axis, real) or \
        label_problems(project, name, spec, labels, real)


def map_shape(project: Project, name: str, spec: Postprocess, labels: list[str] | None, real: Tensor) -> list[Problem]:
    """A probability map is [batch, 1, H, W]."""
    shape = real.shape
    if shape is None or (len(shape) == 4 and (shape[1] == 1 or not isinstance(shape[1], int))):
        return []
    return [project.problem(("outputs", name, "postprocess", "text_boxes"),
                            f"a db probability map comes as [batch, 1, height, width]; {name} is {list(shape)}")]


def as_it_is(project: Project, name: str, spec: Postprocess, labels: list[str] | None, real: Tensor) -> list[Problem]:
    """A python step's contract: its function reads the row as it is."""
    return []
