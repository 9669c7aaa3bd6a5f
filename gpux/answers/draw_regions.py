"""A page's answers drawn (`gpux run WORKSPACE IMAGE --save DIR`): the first step's answers on the page as their kinds
draw them (gpux.answers.draw: each text region's polygon), and beside it a white panel of the page's size where each
cropped region's polygon is outlined again, in its color, with what its own answers say written inside it (the
captions their kinds write: a text, the best label), as PaddleOCR's draw_ocr_box_txt shows a page it read."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from gpux.answers.crops import PageAnswer, regions_of
from gpux.answers.draw import PALETTE, Canvas, drawn
from gpux.answers.records import Answer
from gpux.config.kinds import AnswerKind, step
from gpux.optional import require

if TYPE_CHECKING:
    from PIL import Image, ImageDraw

    from gpux.config.steps import Block


def drawn_page(image: Image.Image, answers: Mapping[str, PageAnswer], cropped: set[str],
               kinds: Mapping[str, AnswerKind], blocks: Mapping[str, Block]) -> Image.Image:
    """The upright RGB `image` with the answers drawn; the panel only where a cropped region has a caption.
    `cropped`: the answers that are region lists whose regions hold their own `answers`."""
    picture = drawn(image, dict(answers), kinds, blocks)
    written = [(i, r["box"], " ".join(captions(r.get("answers", {}), kinds, blocks)))
               for name in answers if name in cropped for i, r in enumerate(regions_of(answers, name))]
    if not any(text for _, _, text in written):
        return picture
    image_mod = require("PIL.Image", "images")
    draw_mod = require("PIL.ImageDraw", "images")
    w, h = image.size
    out = image_mod.new("RGB", (picture.width + w, max(picture.height, h)), (255, 255, 255))
    out.paste(picture, (0, 0))
    pen, left = draw_mod.Draw(out), picture.width
    width = max(2, round(max(w, h) / 300))
    for i, box, text in written:  # each region in the color its polygon has on the page
        corners = [(float(x) + left, float(y)) for x, y in box]
        pen.polygon(corners, outline=PALETTE[i % len(PALETTE)], width=width)
        if text:
            _write_inside(pen, corners, text)
    return out


def captions(answers: Mapping[str, Answer], kinds: Mapping[str, AnswerKind], blocks: Mapping[str, Block]) -> list[str]:
    """What each answer's kind writes below a picture (gpux.answers.draw), without the output's name: its text, its
    best label. Shapes a kind draws are drawn on a scratch image (in the crop's pixels, they have no place here)."""
    image_mod = require("PIL.Image", "images")
    draw_mod = require("PIL.ImageDraw", "images")
    font_mod = require("PIL.ImageFont", "images")
    canvas = Canvas(draw_mod.Draw(image_mod.new("RGB", (1, 1))), font_mod.load_default(), 1, blocks)
    out: list[str] = []
    for name, answer in answers.items():
        kind = kinds.get(name)
        if kind is None or (draw := step(kind, "draw")) is None:
            continue
        draw(canvas, name, answer)
        out += [line.removeprefix(f"{name}: ") for line in canvas.lines]
        canvas.lines.clear()
    return out


def _write_inside(pen: ImageDraw.ImageDraw, corners: list[tuple[float, float]], text: str) -> None:
    """`text` in black from the region's left, centred on its height, its font as high as the region allows and
    narrowed to fit the region's width."""
    import math

    font_mod = require("PIL.ImageFont", "images")
    (x0, y0), (x1, y1), (x2, y2), (x3, y3) = corners
    wide = max(math.dist((x0, y0), (x1, y1)), math.dist((x3, y3), (x2, y2)))
    high = max(math.dist((x0, y0), (x3, y3)), math.dist((x1, y1), (x2, y2)))
    size = max(8, round(min(wide, high) * 0.8))
    font = font_mod.load_default(size=size)
    length = font.getlength(text)
    if length > wide > 0:
        font = font_mod.load_default(size=max(8, int(size * wide / length)))
    at = (min(x0, x3) + 2, (min(y0, y1) + max(y2, y3)) / 2)
    pen.text(at, text, fill=(0, 0, 0), font=font, anchor="lm")


__all__ = ["captions", "drawn_page"]
