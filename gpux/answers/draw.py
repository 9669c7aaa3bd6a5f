"""Answers drawn on the image they answer (`gpux run NAME FILES --save DIR`), as each output's kind draws them
(gpux.config.kinds): each box outlined on the picture with its label and score, each text region's polygon, a
classifier's best label and a recognizer's text written in a band added below it, so the picture's own pixels stay
as they were elsewhere. The image is written under the input file's name, in its
format (by suffix)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gpux.answers.records import Answers, Box, Text, TextBox, Top
from gpux.config.kinds import AnswerKind, step
from gpux.errors import UsageError
from gpux.optional import require

if TYPE_CHECKING:
    from PIL import Image, ImageDraw, ImageFont

    from gpux.answers.keypoints import Pose
    from gpux.answers.masks import Instance
    from gpux.config.steps import Block

# distinct colors, one per class index (cycled)
PALETTE = ((230, 25, 75), (60, 180, 75), (0, 130, 200), (245, 130, 48), (145, 30, 180), (70, 240, 240),
           (240, 50, 230), (210, 245, 60), (0, 128, 128), (170, 110, 40))


def save_paths(files: Sequence[str], folder: str) -> list[Path]:
    """Where each file's drawing goes: `folder`/its name. Two different files of one name, or a drawing that
    would replace its own input, are refused before anything runs."""
    out = [Path(folder) / Path(f).name for f in files]
    seen: dict[Path, str] = {}
    for file, path in zip(files, out, strict=True):
        if path in seen and Path(seen[path]).resolve() != Path(file).resolve():
            raise UsageError(f"--save {folder}: {seen[path]} and {file} would both be written as {path}",
                             hint="answer them in two runs, or rename one")
        if path.resolve() == Path(file).resolve():
            raise UsageError(f"--save {folder}: writing {path} would replace the input {file}",
                             hint="save into another folder")
        seen[path] = file
    return out


@dataclass
class Canvas:
    """A `--save` picture being drawn: the pen on the image, its font and line width, and the caption lines a kind
    adds to the band below it."""

    pen: ImageDraw.ImageDraw
    font: ImageFont.ImageFont | ImageFont.FreeTypeFont  # ImageFont.load_default's
    width: int
    blocks: Mapping[str, Block] = field(default_factory=dict)  # each output's kind block (gpux.config.steps)
    lines: list[str] = field(default_factory=list)


def draw_top(canvas: Canvas, name: str, answer: list[Top]) -> None:
    if answer:
        canvas.lines.append(f"{name}: {answer[0]['label']} {answer[0]['score']:.3f}")


def draw_text(canvas: Canvas, name: str, answer: Text) -> None:
    canvas.lines.append(f"{name}: {answer['text']} ({answer['score']:.3f})")


def _tag(canvas: Canvas, at: tuple[float, float], tag: str, color: tuple[int, int, int]) -> None:
    """A label on a filled band above `at` (inside, where there is no room above)."""
    pen, font = canvas.pen, canvas.font
    left, top, right, bottom = pen.textbbox(at, tag, font=font, anchor="lb")
    if top < 0:  # no room above the box: inside it
        left, top, right, bottom = pen.textbbox(at, tag, font=font, anchor="lt")
    pen.rectangle((left - 2, top - 2, right + 2, bottom + 2), fill=color)
    pen.text((left, top), tag, fill=(255, 255, 255), font=font, anchor="lt")


def draw_boxes(canvas: Canvas, name: str, answer: Sequence[Box]) -> None:
    for a in answer:
        color = PALETTE[a["index"] % len(PALETTE)]
        x1, y1, x2, y2 = a["box"]
        canvas.pen.rectangle((x1, y1, x2, y2), outline=color, width=canvas.width)
        _tag(canvas, (x1, y1), f"{a['label']} {a['score']:.2f}", color)


def draw_keypoints(canvas: Canvas, name: str, answer: list[Pose]) -> None:
    """Each detection's box, its keypoints (those seen: visibility >= 0.5) as dots, joined as the block's skeleton
    says."""
    draw_boxes(canvas, name, answer)
    r = canvas.width + 1
    skeleton = getattr(canvas.blocks.get(name), "skeleton", None) or ()
    for a in answer:
        color = PALETTE[a["index"] % len(PALETTE)]
        seen = [len(k) < 3 or k[2] >= 0.5 for k in a["keypoints"]]
        for i, j in skeleton:
            if seen[i] and seen[j]:
                canvas.pen.line([tuple(a["keypoints"][i][:2]), tuple(a["keypoints"][j][:2])], fill=color,
                                width=canvas.width)
        for k in a["keypoints"]:
            if len(k) < 3 or k[2] >= 0.5:
                canvas.pen.ellipse((k[0] - r, k[1] - r, k[0] + r, k[1] + r), fill=color)


def draw_masks(canvas: Canvas, name: str, answer: list[Instance]) -> None:
    """Each detection's box, and its mask filled over the picture."""
    import numpy as np
    from PIL import Image

    from gpux.answers.masks import from_run_lengths

    for a in answer:
        bitmap = Image.fromarray((from_run_lengths(a["mask"]) * 255).astype(np.uint8), "L")
        canvas.pen.bitmap((0, 0), bitmap, fill=PALETTE[a["index"] % len(PALETTE)])
    draw_boxes(canvas, name, answer)


def draw_polygons(canvas: Canvas, name: str, answer: list[TextBox]) -> None:
    for i, a in enumerate(answer):
        corners = [(float(x), float(y)) for x, y in a["box"]]
        canvas.pen.polygon(corners, outline=PALETTE[i % len(PALETTE)], width=canvas.width)


def drawn(image: Image.Image, answers: Mapping[str, object], kinds: Mapping[str, AnswerKind],
          blocks: Mapping[str, Block] | None = None) -> Image.Image:
    """A copy of the upright RGB `image` with each output's answer drawn as its kind draws it (gpux.config.kinds):
    shapes on it, captions in a band below (widened where a caption is longer than the image is wide)."""
    image_mod = require("PIL.Image", "images")
    draw_mod = require("PIL.ImageDraw", "images")
    font_mod = require("PIL.ImageFont", "images")
    w, h = image.size
    size = max(12, round(max(w, h) / 40))
    font = font_mod.load_default(size=size)
    picture = image.convert("RGB")
    canvas = Canvas(draw_mod.Draw(picture), font, max(2, round(max(w, h) / 300)), blocks or {})
    for name, answer in answers.items():
        kind = kinds.get(name)
        if kind is not None and (draw := step(kind, "draw")) is not None:
            draw(canvas, name, answer)
    lines = canvas.lines
    band = len(lines) * (size + 4) + 4 if lines else 0
    wide = max([w, *(round(font.getlength(line)) + 8 for line in lines)])
    out = image_mod.new("RGB", (wide, h + band), (255, 255, 255))
    out.paste(picture, (0, 0))
    pen = draw_mod.Draw(out)
    for i, line in enumerate(lines):
        pen.text((4, h + 4 + i * (size + 4)), line, fill=(0, 0, 0), font=font)
    return out


def save_drawn(file: str, answers: Answers, path: Path, kinds: Mapping[str, AnswerKind],
               blocks: Mapping[str, Block] | None = None) -> Path:
    """`file` (upright, as preprocess saw it) with its answers drawn, written to `path` in the format its suffix
    names."""
    from gpux.answers.pre import open_image

    ops = require("PIL.ImageOps", "images")
    image = ops.exif_transpose(open_image(file, file)).convert("RGB")
    return write_picture(drawn(image, answers, kinds, blocks), path)


def write_picture(picture: Image.Image, path: Path) -> Path:
    """A drawn picture written to `path` in the format its suffix names (its folder made)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        if path.suffix.lower() in (".jpg", ".jpeg"):
            picture.save(path, quality=95)
        else:
            picture.save(path)
    except (OSError, ValueError) as exc:
        raise UsageError(f"--save: cannot write {path}: {exc}") from exc
    return path
