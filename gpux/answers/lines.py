"""A file's answer as the terminal's lines, per built-in kind (the `lines` steps gpux.config.kinds names), the
values of an output no kind writes, and either as an output's kind says (`answer_lines`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpux.answers.records import Box, Text, TextBox, Top, Vector
from gpux.config.kinds import AnswerKind, step

if TYPE_CHECKING:
    from gpux.answers.keypoints import Pose
    from gpux.answers.masks import Instance


def top_lines(name: str, answer: list[Top]) -> list[str]:
    return [f"  {name}: " + (", ".join(f"{a['label']} {a['score']:.4f}" for a in answer) or "none")]


def box_lines(name: str, answer: Sequence[Box]) -> list[str]:
    return [f"  {name}: {len(answer)} box{'es' if len(answer) != 1 else ''}"] + \
        [f"    {a['label']} {a['score']:.3f} [{', '.join(f'{v:.0f}' for v in a['box'])}]" for a in answer]


def pose_lines(name: str, answer: list[Pose]) -> list[str]:
    return box_lines(name, answer)[:1] + [line for a in answer for line in (
        box_lines(name, [a])[1], "      " + " ".join(f"({k[0]:.0f},{k[1]:.0f})" for k in a["keypoints"]))]


def mask_lines(name: str, answer: list[Instance]) -> list[str]:
    return box_lines(name, answer)[:1] + [f"{line} mask {sum(a['mask']['counts'][1::2])} px"
                                          for a in answer for line in box_lines(name, [a])[1:]]


def polygon_lines(name: str, answer: list[TextBox]) -> list[str]:
    return [f"  {name}: {len(answer)} region{'s' if len(answer) != 1 else ''}"] + \
        [f"    {a['score']:.3f} " + " ".join(f"({x:.0f},{y:.0f})" for x, y in a["box"]) for a in answer]


def text_lines(name: str, answer: Text) -> list[str]:
    return [f"  {name}: {json.dumps(answer['text'], ensure_ascii=False)} {answer['score']:.4f}"]


def vector_lines(name: str, answer: Vector) -> list[str]:
    v = answer["vector"]
    head = ", ".join(f"{x:.4f}" for x in v[:4])
    return [f"  {name}: vector of {len(v)} [{head}{', ...' if len(v) > 4 else ''}]"]


def answer_lines(kind: AnswerKind | None, name: str, answer: object) -> list[str]:
    """An output's answer as its kind writes it (its `lines` step), else its values."""
    write = step(kind, "lines") if kind is not None else None
    return write(name, answer) if write is not None else value_lines(name, answer)


def value_lines(name: str, answer: object) -> list[str]:
    """An answer no kind writes (a passthrough output, a python step's): its values, shortened."""
    import numpy as np

    if isinstance(answer, list) and not answer:
        return [f"  {name}: none"]
    text = np.array2string(np.asarray(answer), threshold=20, edgeitems=3, precision=5)
    return [f"  {name}: " + text.replace("\n", " ")]
