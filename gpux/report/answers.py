"""Agreement in words, per kind (named by gpux.config.kinds): an answers record's agreement with the reference in a
few words (`text` steps, what a verdict shows; a file's answer as lines: gpux.answers.lines)."""

from __future__ import annotations

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
