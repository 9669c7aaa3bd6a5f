"""The declared outputs and their steps against what the model really returns (gpux.model.probe): metadata that
misstates an output gives way to the real output (a warning says so), and a step that cannot fit the
real tensor is refused at its line (docs/answers.md, "Checked against the real output")."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from gpux.errors import Problem
from gpux.model.classic import ML
from gpux.model.probe import Real
from gpux.model.tensor import ModelIO, shape_text

if TYPE_CHECKING:
    from gpux.config.load import Project
    from gpux.config.steps import Postprocess

SLACK = 1e-3  # scores a little outside [0, 1], widths a little under 0: rounding, not another layout
SPAN = 8  # decoded boxes' centres spread over at least 1/SPAN of the input's width and height


def wants_real(project: Project, problems: list[Problem], io: ModelIO) -> bool:
    """Whether the real output is needed: an output answers a kind that checks it (gpux.config.kinds: boxes, text),
    its declared shape disagrees with the metadata, or the model has ONNX-ML operators (their converters write fixed
    label shapes, `[1]`, for outputs that return a row per input row)."""
    from gpux.config.kinds import kind_of

    outputs = project.config.outputs or {}
    steps = any(getattr(kind_of(s.postprocess), "fit", None) for s in outputs.values())
    return steps or ML in io.opsets or any(p.field.startswith("outputs.") and ".shape" in p.field for p in problems)


def trued(io: ModelIO, real: Real) -> tuple[ModelIO, list[str]]:
    """The interface with each output whose metadata disagrees with what it returns (on any sample: a dim it fixes
    that follows the batch) replaced by the real one, and which outputs those are."""
    outputs, changed = [], []
    for t in io.outputs:
        got = real.outputs.get(t.name)
        others = [s[t.name] for s in (real.second, real.third) if t.name in s]
        if got is not None and (t.shape is None or not all(fits(t.shape, g) for g in (got, *others))):
            t = real.tensor(t.name, t.dtype)
            changed.append(t.name)
        outputs.append(t)
    return (replace(io, outputs=tuple(outputs)) if changed else io), changed


def fits(shape: tuple[Any, ...] | None, got: list[int]) -> bool:
    """Whether a shape (ints and names) fits a real one: the same rank, every int the same."""
    return shape is None or (len(shape) == len(got) and all(not isinstance(d, int) or d == g
                                                             for d, g in zip(shape, got, strict=True)))


def notes(project: Project, io: ModelIO, changed: list[str], real: Real) -> list[Problem]:
    """One warning per output whose metadata misstates it (one without a shape there is only completed)."""
    said = {t.name: t.shape for t in io.outputs}

    def returned(n: str) -> list[int]:  # the first sample's shape that the metadata does not fit
        got = [s[n] for s in (real.outputs, real.second, real.third) if n in s]
        return next((g for g in got if not fits(said[n], g)), got[0])

    return [project.problem(("outputs", n) if n in (project.config.outputs or {}) else ("model", "source"),
                            f"the model's metadata says {n} is {shape_text(said[n] or ())} but it returns "
                            f"{shape_text(tuple(returned(n)))} on a sample; gpux goes by what it returns")
            for n in changed if said[n] is not None]


def step_problems(project: Project, real: Real) -> list[Problem]:
    """Every declared step that cannot fit what its output really holds, as its kind checks it, at its line."""
    from gpux.config.kinds import kind_of, step

    out: list[Problem] = []
    for name, spec in (project.config.outputs or {}).items():
        post, kind = spec.postprocess, kind_of(spec.postprocess)
        check = step(kind, "fit") if kind is not None else None
        if post is None or kind is None or check is None or name not in real.outputs:
            continue
        wrong = check(project, name, post, real)  # why, or (the field under the kind's block, why)
        if wrong:
            field, why = wrong if isinstance(wrong, tuple) else (None, wrong)
            out.append(project.problem(("outputs", name, "postprocess", kind.key, *([field] if field else [])), why))
    return out


def ctc_misfit(project: Project, name: str, post: Postprocess, real: Real) -> str | None:
    """Why the declared batch axis is not the real one: the axis that doubles with the batch, else (a fixed
    batch of one) the declared one is not 1."""
    declared, found = post.batch_axis, real.batch_axis(name)
    first = real.outputs[name]
    if len(first) != 3:
        return None
    where = f"{name} returns {shape_text(tuple(first))} for a batch of 1"
    if found is not None and found != declared:
        where += f" and {shape_text(tuple(real.second[name]))} for 2: its batch is axis {found}"
    elif found is None and first[declared] != 1:
        where += f": axis {declared} is not its batch"
    else:
        return None
    fix = "declare ctc: {time_major: true}" if declared == 0 else "drop time_major"
    layout = "[time, batch, classes]" if declared else "[batch, time, classes]"
    return f"ctc reads {name} as {layout}, but {where}; {fix}"


def box_misfit(project: Project, name: str, post: Postprocess, real: Real) -> str | tuple[str, str] | None:
    """Why an output's values cannot be boxes of the declared layout, on the first sample: widths or heights
    under 0 or none above, centres that do not spread over the input, scores outside [0, 1] where no activation
    is declared; for a layout of one output per stride, (the field, why) where a named output is missing or is
    not of its shape on the sample's grids."""
    from gpux.config.steps import BOX_LAYOUTS

    assert post.boxes is not None
    layout = BOX_LAYOUTS[post.boxes.layout]
    if layout.heads:  # one output per stride: each named one's real shape, on the sample input's grids
        from gpux.model.heads import head_misfit

        return head_misfit(post.boxes, name, {n: tuple(s) for n, s in real.outputs.items()},
                           _input_size(project, post, real))
    stats = real.stats.get(name, {}).get(str(layout.channels_axis))
    if stats is None or len(real.outputs[name]) != 3:
        return None
    lo, hi = stats["min"], stats["max"]
    said = f"{name} cannot hold {post.boxes.layout} boxes ({layout.shape}, cx, cy, w, h in input pixels): on a sample"
    size = _input_size(project, post, real)
    if layout.grid:
        return _grid_misfit(name, post, real, size)
    if min(lo[2], lo[3]) < -SLACK * max(size or (1, 1)) or max(hi[2], hi[3]) <= 0:
        return (f"{said} its widths and heights span [{_num(lo[2])}, {_num(hi[2])}] and [{_num(lo[3])}, "
                f"{_num(hi[3])}]; {RAW}")
    if size is not None and (hi[0] - lo[0] < size[1] / SPAN or hi[1] - lo[1] < size[0] / SPAN):
        return (f"{said} its centres span only x [{_num(lo[0])}, {_num(hi[0])}] and y [{_num(lo[1])}, {_num(hi[1])}] "
                f"of a {size[1]}x{size[0]} input; {RAW}")
    scores = stats["from4"] if not layout.objectness else [min(lo[4], (stats["from5"] or [0])[0]),
                                                           max(hi[4], (stats["from5"] or [1])[1])]
    if not (post.softmax or post.sigmoid) and not layout.angle and (scores[0] < -SLACK or scores[1] > 1 + SLACK):
        # (an oriented box's angle follows its scores: the statistics from the fifth channel hold it too)
        return (f"{said} its scores span [{_num(scores[0])}, {_num(scores[1])}], not probabilities; declare "
                "sigmoid: true if they are logits")
    return None


def _grid_misfit(name: str, post: Postprocess, real: Real, size: tuple[int, int] | None) -> str | None:
    """Why the declared strides' grids over the sample input do not make the output's anchors (the anchors are on
    axis 1 of [batch, anchors, 5 + classes])."""
    import math

    assert post.boxes is not None
    anchors, strides = real.outputs[name][1], post.boxes.strides
    if size is None:
        return None
    cells = sum(math.ceil(size[0] / s) * math.ceil(size[1] / s) for s in strides)
    if cells == anchors:
        return None
    return (f"strides {strides} over the {size[1]}x{size[0]} sample input make {cells} grid cells, but {name} has "
            f"{anchors} anchors; declare the strides of its heads")


def map_misfit(project: Project, name: str, post: Postprocess, real: Real) -> str | None:
    """Why an output is not a probability map over the image input: [batch, 1, H, W] at the input's own size."""
    got, size = real.outputs[name], _input_size(project, post, real)
    said = f"text_boxes reads a probability map [batch, 1, height, width]; {name} returns {shape_text(tuple(got))}"
    if len(got) != 4 or got[1] != 1:
        return said
    if size is not None and tuple(got[2:]) != size:
        return f"{said} for a {size[1]}x{size[0]} input: its map is not at the input's size"
    return None


RAW = ("a raw anchor grid (offsets, log sizes) is not decoded boxes: export the model with its decoding (YOLOX's "
       "--decode_in_inference) or declare the layout it holds")


def _num(value: float) -> str:
    return f"{value:.3g}"


def _input_size(project: Project, post: Postprocess, real: Real) -> tuple[int, int] | None:
    """(height, width) of the sample fed to the image input the boxes are in (None: no image input)."""
    images = {n: s.preprocess.image for n, s in (project.config.inputs or {}).items()
              if s.preprocess is not None and s.preprocess.image is not None}
    name = getattr(post.block, "image", None) or next(iter(images), None)
    shape, image = real.inputs.get(name or ""), images.get(name or "")
    if shape is None or image is None or len(shape) != 4:
        return None
    return (shape[2], shape[3]) if image.layout == "nchw" else (shape[1], shape[2])
