"""The kinds of answer an output's `postprocess:` gives (`AnswerKind`, one row each, picked by its key there): how
a batch row decodes into answers, how the FP32 reference's and an artifact's answers compare and the floors they
are held to, the check against the model's real output, the `--save` picture, the terminal's lines and the
server's encoding, each named as 'module:function' and resolved only where it is used (docs/answers.md, "Kinds of
answer"). A new kind is one module and one `register` call; its config block is a pydantic type of its own."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pkgutil import resolve_name
from typing import TYPE_CHECKING, Literal, Protocol, overload

if TYPE_CHECKING:
    from pydantic import BaseModel

    from gpux.arrays import Array
    from gpux.documents import Agreement
    from gpux.errors import Problem

# A plug-in kind's config type by its key under postprocess: (register adds one); the built-in
# kinds are Postprocess's own fields.
ADDED: dict[str, type[BaseModel]] = {}

__all__ = ["ADDED", "ANSWER_KEYS", "ANSWER_KINDS", "AnswerKind", "Declares", "Floor", "Shaped", "kind_of",
           "proposals", "record_kind", "register", "step"]

Floor = tuple[str, str, str]  # (metric in its agreement record, threshold key under verify:, what it is in words)


@dataclass(frozen=True, kw_only=True)
class AnswerKind:
    """One kind of answer. The steps, each a 'module:function' (None: the kind has none):

    - `decode(row, how)`: one batch row (of rank `rank`) → its answer, in the original input's pixels where
      `how.image` (gpux.answers.kinds.Decoding: an image's placement) maps them back;
    - `judge(row, how)`: one row → what `compare` compares (in the model's input pixels, `how.size`);
    - `compare(reference, got)`: the agreement record (gpux.documents) of every row's judged answers (given the
      thresholds named in `settings` as keywords);
    - `empty(judged)`: why the reference's answers over every sample say nothing (None: they say something);
    - `counts(record)` and `text(record)`: what a record was measured on, and its agreement, in a few words;
    - `fit(project, name, post, real)`: why the output's real values (gpux.model.probe.Real) cannot be this kind
      (or the field under the block, and why);
    - `shape(project, name, post, labels, real)`: problems of the block against the output's real shape (a list);
      a block that `reads` other outputs is given every output's too, as `outputs=`;
    - `draw(canvas, name, answer)`: the answer drawn on a `--save` picture (gpux.answers.draw.Canvas);
    - `lines(name, answer)`: the terminal's lines of the answer;
    - `encode(answers)`: the server's tensor of a batch's answers (default: one JSON text per row, as BYTES);
    - `propose(shape, inputs, outputs)`: what `gpux init` proposes for an output of that shape, given the model's
      inputs and outputs (None: nothing).

    A row with a `layout` answers that layout of its key's block alone (`keypoints.heatmap`), picked over the key's
    own row."""

    key: str  # under postprocess:
    record: str  # the kind its agreement record names ("text" for ctc)
    rank: int  # of one batch row (0: the row as the output holds it)
    decode: str
    judge: str | None = None
    compare: str | None = None
    floors: tuple[Floor, ...] = ()
    empty: str | None = None
    counts: str | None = None
    text: str | None = None
    fit: str | None = None
    shape: str | None = None
    draw: str | None = None
    lines: str | None = None
    encode: str | None = None
    propose: str | None = None
    config: type[BaseModel] | None = None  # a plug-in kind's config type (the built-in kinds' are Postprocess fields)
    settings: tuple[str, ...] = ()  # threshold keys (verify:) `compare` takes as keyword arguments, where set
    layout: str | None = None  # a row for one layout of its key's block (kind_of picks it over the key's own row)

    @property
    def name(self) -> str:
        """Its key in ANSWER_KINDS: the key, with the layout where the row answers one layout."""
        return f"{self.key}.{self.layout}" if self.layout else self.key


BOX_FLOORS: tuple[Floor, ...] = (
    ("recall_confident", "min_box_recall", "confident reference boxes found"),
    ("precision_confident", "min_box_precision", "confident artifact boxes the reference has"),
    ("f1", "min_box_f1", "box F1"), ("mean_iou", "min_box_iou", "mean IoU of matched boxes"))

ANSWER_KINDS: dict[str, AnswerKind] = {
    "topk": AnswerKind(
        key="topk", record="topk", rank=1, decode="gpux.answers.kinds:decode_topk",
        judge="gpux.quality.agreement:judge_topk", compare="gpux.quality.agreement:topk_agreement",
        floors=(("topk_overlap", "min_topk_overlap", "top-k label overlap"),),
        counts="gpux.quality.agreement:topk_counts", text="gpux.report.answers:topk_text",
        draw="gpux.answers.draw:draw_top", lines="gpux.answers.lines:top_lines"),
    "boxes": AnswerKind(
        key="boxes", record="boxes", rank=2, decode="gpux.answers.kinds:decode_boxes",
        judge="gpux.quality.agreement:judge_boxes", compare="gpux.quality.agreement:compare_boxes",
        floors=BOX_FLOORS, empty="gpux.quality.agreement:no_box_area", counts="gpux.quality.agreement:box_counts",
        text="gpux.report.answers:boxes_text", fit="gpux.model.fit:box_misfit", shape="gpux.answers.shapes:box_shape",
        draw="gpux.answers.draw:draw_boxes", lines="gpux.answers.lines:box_lines",
        propose="gpux.answers.propose:boxes"),
    "ctc": AnswerKind(
        key="ctc", record="text", rank=2, decode="gpux.answers.kinds:decode_ctc",
        judge="gpux.quality.agreement:judge_text", compare="gpux.quality.agreement:text_agreement",
        floors=(("exact_confident", "min_exact_match", "exact matches of the texts the reference reads confidently"),
                ("cer", "max_cer", "character error rate")),
        empty="gpux.quality.agreement:no_text", counts="gpux.quality.agreement:text_counts",
        text="gpux.report.answers:text_text", fit="gpux.model.fit:ctc_misfit", shape="gpux.answers.shapes:ctc_shape",
        draw="gpux.answers.draw:draw_text", lines="gpux.answers.lines:text_lines"),
    "text_boxes": AnswerKind(
        key="text_boxes", record="text_boxes", rank=3, decode="gpux.answers.text_boxes:decode",
        judge="gpux.answers.text_boxes:judge", compare="gpux.quality.agreement:polygon_agreement", floors=BOX_FLOORS,
        counts="gpux.quality.agreement:box_counts", text="gpux.report.answers:boxes_text",
        fit="gpux.model.fit:map_misfit", shape="gpux.answers.shapes:map_shape",
        draw="gpux.answers.draw:draw_polygons", lines="gpux.answers.lines:polygon_lines",
        propose="gpux.answers.propose:text_boxes"),
    "embedding": AnswerKind(
        key="embedding", record="embedding", rank=1, decode="gpux.answers.kinds:decode_embedding",
        judge="gpux.answers.kinds:judge_embedding", compare="gpux.quality.agreement:vector_agreement",
        floors=(("close", "min_rows_close", "rows whose vector keeps its direction"),), settings=("row_cosine",),
        counts="gpux.quality.agreement:close_counts", text="gpux.report.answers:embedding_text",
        lines="gpux.answers.lines:vector_lines", encode="gpux.answers.kinds:encode_vectors"),
    "keypoints": AnswerKind(
        key="keypoints", record="keypoints", rank=2, decode="gpux.answers.keypoints:decode",
        judge="gpux.quality.pose:judge_pose", compare="gpux.quality.pose:keypoint_agreement",
        floors=(*BOX_FLOORS, ("mean_oks", "min_box_iou", "mean keypoint similarity (OKS) of matched detections")),
        empty="gpux.quality.agreement:no_box_area", counts="gpux.quality.agreement:box_counts",
        text="gpux.report.answers:pose_text", shape="gpux.answers.keypoints:pose_shape",
        draw="gpux.answers.draw:draw_keypoints", lines="gpux.answers.lines:pose_lines",
        propose="gpux.answers.propose:keypoints"),
    "masks": AnswerKind(
        key="masks", record="masks", rank=2, decode="gpux.answers.masks:decode", judge="gpux.answers.masks:judge",
        compare="gpux.quality.pose:mask_agreement",
        floors=(*BOX_FLOORS, ("mean_mask_iou", "min_box_iou", "mean mask IoU of matched detections")),
        empty="gpux.quality.agreement:no_box_area", counts="gpux.quality.agreement:box_counts",
        text="gpux.report.answers:mask_text", shape="gpux.answers.masks:mask_shape",
        draw="gpux.answers.draw:draw_masks", lines="gpux.answers.lines:mask_lines"),
    "tokens": AnswerKind(
        key="tokens", record="tokens", rank=2, decode="gpux.answers.tokens:decode", judge="gpux.answers.tokens:judge",
        compare="gpux.answers.tokens:compare", floors=(("token_match", "min_exact_match", "tokens labelled the same"),),
        counts="gpux.answers.tokens:counts", text="gpux.answers.tokens:text", shape="gpux.answers.tokens:shape",
        lines="gpux.answers.tokens:lines"),
    "keypoints.heatmap": AnswerKind(
        key="keypoints", layout="heatmap", record="heatmap_keypoints", rank=3, decode="gpux.answers.heatmaps:decode",
        judge="gpux.answers.heatmaps:judge", compare="gpux.answers.heatmaps:compare",
        floors=(("points_close", "min_exact_match", "confident points within a map cell of the reference's"),
                ("mean_oks", "min_box_iou", "mean keypoint similarity (OKS) of the rows")),
        counts="gpux.answers.heatmaps:counts", text="gpux.answers.heatmaps:text",
        shape="gpux.answers.heatmaps:shape", draw="gpux.answers.heatmaps:draw", lines="gpux.answers.heatmaps:lines",
        propose="gpux.answers.heatmaps:propose"),
    "segmentation": AnswerKind(
        key="segmentation", record="segmentation", rank=0, decode="gpux.answers.segmentation:decode",
        judge="gpux.answers.segmentation:judge", compare="gpux.answers.segmentation:compare",
        floors=(("rows_agree", "min_exact_match", "rows whose class maps agree on 99 % of pixels or more"),
                ("mean_iou", "min_box_iou", "mean IoU of the classes")),
        counts="gpux.answers.segmentation:counts", text="gpux.answers.segmentation:text",
        shape="gpux.answers.segmentation:shape", draw="gpux.answers.segmentation:draw",
        lines="gpux.answers.segmentation:lines", propose="gpux.answers.segmentation:propose"),
    "python": AnswerKind(
        key="python", record="python", rank=0, decode="gpux.answers.kinds:decode_python",
        judge="gpux.answers.kinds:judge_python", compare="gpux.quality.agreement:exact_agreement",
        floors=(("exact_match", "min_exact_match", "exact answers"),), counts="gpux.quality.agreement:rows_counts",
        text="gpux.report.answers:python_text", shape="gpux.answers.shapes:as_it_is"),
}
ANSWER_KEYS = tuple(dict.fromkeys(k.key for k in ANSWER_KINDS.values()))  # the built-in kinds' keys, in the
# table's order (taken before any register)


def register(kind: AnswerKind) -> AnswerKind:
    """Add a kind of answer: its row, and its config type under its key in every output's postprocess: (a
    gpux.yml read after this call)."""
    if kind.key in ANSWER_KEYS or kind.config is None:
        raise ValueError(f"{kind.key!r}: a plug-in kind needs a key of its own and a config type")
    ANSWER_KINDS[kind.name] = kind
    ADDED[kind.key] = kind.config
    return kind


class Declares(Protocol):
    """What kind_of reads of an output's postprocess (gpux.config.steps.Postprocess): the (key, block) of the kind
    of answer it declares, None: values only."""

    @property
    def answer(self) -> tuple[str, object] | None: ...


def kind_of(post: Declares | None) -> AnswerKind | None:
    """The row of the kind an output's Postprocess declares (None: values only)."""
    answer = post.answer if post is not None else None
    if not answer:
        return None
    return ANSWER_KINDS.get(f"{answer[0]}.{getattr(answer[1], 'layout', None)}") or ANSWER_KINDS[answer[0]]


class Shaped(Protocol):
    """A model's tensor as the propose steps read it (gpux.model.tensor.Tensor): its name, and its shape (None:
    rank unknown; a dim: an int, a name, None where unnamed and dynamic)."""

    @property
    def name(self) -> str: ...

    @property
    def shape(self) -> tuple[int | str | None, ...] | None: ...


def proposals(shape: Sequence[int | str | None], inputs: Iterable[Shaped], outputs: Iterable[Shaped] = ()
              ) -> list[str]:
    """What each kind proposes for an output of `shape` (gpux init), given the model's inputs and outputs."""
    found = [propose(tuple(shape), list(inputs), list(outputs)) for k in ANSWER_KINDS.values()
             if (propose := step(k, "propose")) is not None]
    return [p for p in found if p]


def record_kind(record: str) -> AnswerKind | None:
    """The row whose agreement records name `record` (None: none does)."""
    return next((k for k in ANSWER_KINDS.values() if k.record == record), None)


# What each role's step returns, as AnswerKind's docstring names them (a kind's `decode` and `judge` return what
# the answers room types: gpux.answers.kinds.decoder gives decode typed).
@overload
def step(kind: AnswerKind, role: Literal["decode"]) -> Callable[..., object]: ...
@overload
def step(kind: AnswerKind, role: Literal["compare"]) -> Callable[..., Agreement] | None: ...
@overload
def step(kind: AnswerKind, role: Literal["empty", "propose"]) -> Callable[..., str | None] | None: ...
@overload
def step(kind: AnswerKind, role: Literal["counts", "text"]) -> Callable[..., str] | None: ...
@overload
def step(kind: AnswerKind, role: Literal["fit"]) -> Callable[..., str | tuple[str, str] | None] | None: ...
@overload
def step(kind: AnswerKind, role: Literal["shape"]) -> Callable[..., list[Problem]] | None: ...
@overload
def step(kind: AnswerKind, role: Literal["draw"]) -> Callable[..., None] | None: ...
@overload
def step(kind: AnswerKind, role: Literal["lines"]) -> Callable[..., list[str]] | None: ...
@overload
def step(kind: AnswerKind, role: Literal["encode"]) -> Callable[..., Array] | None: ...
@overload
def step(kind: AnswerKind, role: str) -> Callable[..., object] | None: ...
@cache
def step(kind: AnswerKind, role: str) -> Callable[..., object] | None:
    """The function a kind names for `role` (a field of AnswerKind), None where it names none."""
    named = getattr(kind, role)
    return resolve_name(named) if named else None
