"""Text regions cut out of their image: each quadrilateral warped to an upright crop (as PaddleOCR's
get_rotate_crop_image does), and regions put in reading order (top to bottom, left to right). A page's answers
(gpux.workspace.pages) keep each region with the answers of the steps that read its crop (`Region`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NotRequired, TypeAlias, TypeVar, cast

from gpux.answers.records import Answer, TextBox
from gpux.optional import require

if TYPE_CHECKING:
    from PIL import Image


class Region(TextBox):
    """A text region of a page (its corners and score in the page's pixels), with the answers of the steps that
    read its upright crop, by MODEL.OUTPUT (arrays as lists)."""

    answers: NotRequired[dict[str, Answer]]


PageAnswer: TypeAlias = "Answer | list[Region]"
PageAnswers: TypeAlias = "dict[str, PageAnswer]"  # by MODEL.OUTPUT; the region lists steps crop hold their answers
R = TypeVar("R", bound=TextBox)


def regions_of(answers: Mapping[str, PageAnswer], name: str) -> list[Region]:
    """The regions a page's answers hold under `name`: a text_boxes output that later steps crop (the pipeline's
    bind checks its kind), whose regions gain those steps' answers."""
    return cast("list[Region]", answers[name])  # which output holds regions is the pipeline's, not its type's


def upright_crop(image: Image.Image, box: list[list[float]]) -> Image.Image:
    """The region's 4 corners (clockwise from the top left, in the image's pixels) warped onto an upright
    rectangle as wide as its longer top/bottom side and as high as its longer left/right side; a crop at least
    1.5 times higher than wide is turned a quarter left (vertical text read as a line)."""
    import numpy as np

    image_mod = require("PIL.Image", "images")
    p = np.asarray(box, np.float64)
    w = max(1, int(max(np.linalg.norm(p[0] - p[1]), np.linalg.norm(p[2] - p[3]))))
    h = max(1, int(max(np.linalg.norm(p[0] - p[3]), np.linalg.norm(p[1] - p[2]))))
    target = np.asarray([[0, 0], [w, 0], [w, h], [0, h]], np.float64)
    # OpenCV's warp (PaddleOCR's) puts pixel centres at whole coordinates, Pillow's at halves: both sides shift
    crop = image.transform((w, h), image_mod.Transform.PERSPECTIVE, _coefficients(target + 0.5, p + 0.5),
                           image_mod.Resampling.BICUBIC)
    return crop.transpose(image_mod.Transpose.ROTATE_90) if h / w >= 1.5 else crop


def _coefficients(target: Any, source: Any) -> tuple[float, ...]:
    """Pillow's perspective data (a..h): the crop's pixel (x, y) reads the image at
    ((a x + b y + c) / (g x + h y + 1), (d x + e y + f) / (g x + h y + 1)), solved from the 4 corner pairs."""
    import numpy as np

    rows = []
    for (x, y), (u, v) in zip(target, source, strict=True):
        rows.append([x, y, 1, 0, 0, 0, -u * x, -u * y])
        rows.append([0, 0, 0, x, y, 1, -v * x, -v * y])
    return tuple(float(c) for c in np.linalg.solve(np.asarray(rows), source.reshape(8)))


def reading_order(regions: list[R]) -> list[R]:
    """Top to bottom by the top-left corner, then left to right within a line: two regions whose tops differ by
    less than half the lower one's height are on one line (PaddleOCR's sorted_boxes, with its fixed 10 px made
    relative to the text's size)."""
    out = sorted(regions, key=lambda r: (r["box"][0][1], r["box"][0][0]))
    for i in range(1, len(out)):
        j = i
        while j > 0 and _same_line(out[j - 1], out[j]) and out[j]["box"][0][0] < out[j - 1]["box"][0][0]:
            out[j - 1], out[j] = out[j], out[j - 1]
            j -= 1
    return out


def _same_line(a: TextBox, b: TextBox) -> bool:
    height = min(_height(a), _height(b))
    return abs(a["box"][0][1] - b["box"][0][1]) < height / 2


def _height(r: TextBox) -> float:
    (_, y0), _, _, (_, y3) = r["box"]
    return float(abs(y3 - y0))


__all__ = ["PageAnswer", "PageAnswers", "Region", "reading_order", "regions_of", "upright_crop"]
