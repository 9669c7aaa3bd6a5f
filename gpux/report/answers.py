"""Answers in words, per kind (named by gpux.config.kinds): an answers record's agreement with the reference in a
few words (`text` steps, what a verdict shows), and a file's answer as the terminal's lines (`lines` steps)."""

from __future__ import annotations

import json
from typing import Any

from gpux.documents import AnswersRecord


def topk_text(a: AnswersRecord) -> str:
    return f"top-{a['k']} overlap {a['topk_overlap']:.0%}" if a.get("topk_overlap") is not None else ""


def boxes_text(a: AnswersRecord) -> str:
    iou, found, kept = a.get("mean_iou"), a.get("recall_confident"), a.get("precision_confident")
    return f"box F1 {a['f1']:.3f} ({a['reference_boxes']} boxes" + (f", IoU {iou:.2f}" if iou is not None else "") \
        + (f"; confident found {found:.1%}" if found is not None else "") \
        + (f", confident added {1 - kept:.1%}" if kept is not None else "") + ")"


def pose_text(a: AnswersRecord) -> str:
    oks = a.get("mean_oks")
    return boxes_text(a) + (f", keypoint OKS {oks:.3f}" if oks is not None else "")


def mask_text(a: AnswersRecord) -> str:
    iou = a.get("mean_mask_iou")
    return boxes_text(a) + (f", mask IoU {iou:.3f}" if iou is not None else "")


def text_text(a: AnswersRecord) -> str:
    return f"text exact {a['exact_match']:.0%}" + (f" ({a['exact_confident']:.1%} of {a['confident_rows']} read "
                                                   "confidently)" if a.get("exact_confident") is not None else "") \
        + f", CER {a['cer']:.1%}"


def python_text(a: AnswersRecord) -> str:
    return f"python answers exact {a['exact_match']:.0%}"


def embedding_text(a: AnswersRecord) -> str:
    return f"vectors at cosine >= {a['close_at']:g} {a['close']:.1%} of {a['rows']} (least {a['least_cosine']:.4f})"


def top_lines(name: str, answer: list[Any]) -> list[str]:
    return [f"  {name}: " + (", ".join(f"{a['label']} {a['score']:.4f}" for a in answer) or "none")]


def box_lines(name: str, answer: list[Any]) -> list[str]:
    return [f"  {name}: {len(answer)} box{'es' if len(answer) != 1 else ''}"] + \
        [f"    {a['label']} {a['score']:.3f} [{', '.join(f'{v:.0f}' for v in a['box'])}]" for a in answer]


def pose_lines(name: str, answer: list[Any]) -> list[str]:
    return box_lines(name, answer)[:1] + [line for a in answer for line in (
        box_lines(name, [a])[1], "      " + " ".join(f"({k[0]:.0f},{k[1]:.0f})" for k in a["keypoints"]))]


def mask_lines(name: str, answer: list[Any]) -> list[str]:
    return box_lines(name, answer)[:1] + [f"{line} mask {sum(a['mask']['counts'][1::2])} px"
                                          for a in answer for line in box_lines(name, [a])[1:]]


def polygon_lines(name: str, answer: list[Any]) -> list[str]:
    return [f"  {name}: {len(answer)} region{'s' if len(answer) != 1 else ''}"] + \
        [f"    {a['score']:.3f} " + " ".join(f"({x:.0f},{y:.0f})" for x, y in a["box"]) for a in answer]


def text_lines(name: str, answer: Any) -> list[str]:
    return [f"  {name}: {json.dumps(answer['text'], ensure_ascii=False)} {answer['score']:.4f}"]


def vector_lines(name: str, answer: Any) -> list[str]:
    v = answer["vector"]
    head = ", ".join(f"{x:.4f}" for x in v[:4])
    return [f"  {name}: vector of {len(v)} [{head}{', ...' if len(v) > 4 else ''}]"]


def value_lines(name: str, answer: Any) -> list[str]:
    """An answer no kind writes (a passthrough output, a python step's): its values, shortened."""
    import numpy as np

    if isinstance(answer, list) and not answer:
        return [f"  {name}: none"]
    text = np.array2string(np.asarray(answer), threshold=20, edgeitems=3, precision=5)
    return [f"  {name}: " + text.replace("\n", " ")]
