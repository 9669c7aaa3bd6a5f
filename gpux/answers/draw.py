"""Answers drawn on the image they answer (`gpux run NAME FILES --save DIR`): each box outlined on the picture with
its label and score, a classifier's best label and a recognizer's text written in a band added below it, so the
picture's own pixels stay as they were elsewhere. The image is written under the input file's name, in its
format (by suffix)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeGuard

from gpux.answers.records import Answers, Box, Text, Top
from gpux.errors import UsageError
from gpux.optional import require

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


def captions(answers: Answers) -> list[str]:
    """One line per output answered by classes (the best) or text; boxes and plain arrays give none."""
    lines = []
    for name, answer in answers.items():
        if _is_text(answer):
            lines.append(f"{name}: {answer['text']} ({answer['score']:.3f})")
        elif isinstance(answer, list) and answer and _is_top(answer[0]):
            lines.append(f"{name}: {answer[0]['label']} {answer[0]['score']:.3f}")
    return lines


def boxes_of(answers: Answers) -> list[Box]:
    return [a for answer in answers.values() if isinstance(answer, list) for a in answer if _is_box(a)]


def _is_text(answer: object) -> TypeGuard[Text]:
    return isinstance(answer, dict) and "text" in answer


def _is_top(answer: object) -> TypeGuard[Top]:
    return isinstance(answer, dict) and "box" not in answer


def _is_box(answer: object) -> TypeGuard[Box]:
    return isinstance(answer, dict) and "box" in answer


def drawn(image: Any, answers: Answers) -> Any:
    """A copy of the upright RGB `image` with the answers drawn: boxes on it, captions in a band below (widened
    where a caption is longer than the image is wide)."""
    image_mod = require("PIL.Image", "images")
    draw_mod = require("PIL.ImageDraw", "images")
    font_mod = require("PIL.ImageFont", "images")
    w, h = image.size
    size = max(12, round(max(w, h) / 40))
    font = font_mod.load_default(size=size)
    lines = captions(answers)
    band = len(lines) * (size + 4) + 4 if lines else 0
    wide = max([w, *(round(font.getlength(line)) + 8 for line in lines)])
    out = image_mod.new("RGB", (wide, h + band), (255, 255, 255))
    out.paste(image.convert("RGB"), (0, 0))
    pen = draw_mod.Draw(out)
    width = max(2, round(max(w, h) / 300))
    for a in boxes_of(answers):
        color = PALETTE[a["index"] % len(PALETTE)]
        x1, y1, x2, y2 = a["box"]
        pen.rectangle((x1, y1, x2, y2), outline=color, width=width)
        tag = f"{a['label']} {a['score']:.2f}"
        left, top, right, bottom = pen.textbbox((x1, y1), tag, font=font, anchor="lb")
        if top < 0:  # no room above the box: inside it
            left, top, right, bottom = pen.textbbox((x1, y1), tag, font=font, anchor="lt")
        pen.rectangle((left - 2, top - 2, right + 2, bottom + 2), fill=color)
        pen.text((left, top), tag, fill=(255, 255, 255), font=font, anchor="lt")
    for i, line in enumerate(lines):
        pen.text((4, h + 4 + i * (size + 4)), line, fill=(0, 0, 0), font=font)
    return out


def save_drawn(file: str, answers: Answers, path: Path) -> Path:
    """`file` (upright, as preprocess saw it) with its answers drawn, written to `path` in the format its suffix
    names."""
    from gpux.answers.pre import open_image

    ops = require("PIL.ImageOps", "images")
    image = ops.exif_transpose(open_image(file, file)).convert("RGB")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        drawn(image, answers).save(path, **({"quality": 95} if path.suffix.lower() in (".jpg", ".jpeg") else {}))
    except (OSError, ValueError) as exc:
        raise UsageError(f"--save: cannot write {path}: {exc}") from exc
    return path
