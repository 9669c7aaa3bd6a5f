"""The pydantic models of gpux.yml's `verify:` block: thresholds (for every output, and per output under
`verify.outputs.NAME`) and the data verification runs on (docs/verification.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Thresholds(Strict):
    """Verification thresholds; unset ones take the default of the artifact's execution precision."""

    atol: float | None = Field(None, ge=0, description="Absolute tolerance; default depends on precision.")
    rtol: float | None = Field(None, ge=0, description="Relative tolerance; default depends on precision.")
    min_cosine: float | None = Field(
        None, ge=-1, le=1, description="Least cosine similarity of each output with the reference."
    )
    min_within: float | None = Field(
        None, ge=0, le=1, description="Least fraction of each output's values within atol + rtol·|ref|."
    )
    min_slice_cosine: float | None = Field(
        None, ge=-1, le=1, description="Least cosine of every slice along an output's channel axis (a block of "
        "channels that collapses fails even when the whole tensor agrees)."
    )
    min_top1: float | None = Field(
        None, ge=0, le=1, description="Least top-1 agreement on class-score outputs (see classifications)."
    )
    min_top5: float | None = Field(
        None, ge=0, le=1, description="Least fraction of rows whose reference top-1 is in the artifact's top-5."
    )
    min_top1_confident: float | None = Field(
        None, ge=0, le=1, description="Least top-1 agreement on rows where the reference's top probability is "
        "at least 0.5 (softmax of logits)."
    )
    max_sum_error: float | None = Field(
        None, ge=0, description="Largest deviation from 1 of a probability output's row sums."
    )
    min_topk_overlap: float | None = Field(
        None, ge=0, le=1, description="Answers of postprocess topk: least mean fraction of the reference's k best "
        "labels that are among the artifact's k best (on real data)."
    )
    min_box_f1: float | None = Field(
        None, ge=0, le=1, description="Answers of postprocess boxes: least F1 of the artifact's boxes against the "
        "reference's after NMS (same label, IoU >= 0.5; on real data)."
    )
    min_box_iou: float | None = Field(
        None, ge=0, le=1, description="Answers of postprocess boxes: least mean IoU of the matched boxes."
    )
    min_exact_match: float | None = Field(
        None, ge=0, le=1, description="Text answers: least fraction of the texts the reference reads confidently "
        "(every character at probability >= 0.5) that the artifact reads the same."
    )
    max_cer: float | None = Field(
        None, ge=0, description="Text answers: largest character error rate (edits over the reference's "
        "characters)."
    )
    min_box_recall: float | None = Field(
        None, ge=0, le=1, description="Answers of postprocess boxes: least fraction of the reference's confident "
        "boxes (score >= 0.5 and the threshold + 0.1) the artifact finds (same label, IoU >= 0.5)."
    )
    min_box_precision: float | None = Field(
        None, ge=0, le=1, description="Answers of postprocess boxes: least fraction of the artifact's confident "
        "boxes that match a reference box (1 - the rate of false boxes added)."
    )
    row_cosine: float | None = Field(
        None, ge=-1, le=1, description="Answers of postprocess embedding: the least cosine of a row's vector with "
        "the reference's for the row to keep its direction (counted for min_rows_close); default 0.99."
    )
    min_rows_close: float | None = Field(
        None, ge=0, le=1, description="Answers of postprocess embedding: least fraction of rows whose vector keeps "
        "its direction (cosine with the reference's >= row_cosine), shown by the judged real rows' one-sided bound; "
        "default 0.99."
    )
    row_tolerance: float | None = Field(
        None, ge=0, description="Continuous outputs (values no postprocess decodes: regression values, scores, "
        "embeddings, maps): how far a row's values may move, as a fraction of the output's scale (the distance "
        "between the reference's 1st and 99th percentiles); default 0.01 (0.02 at bf16 and int8)."
    )
    min_rows_within: float | None = Field(
        None, ge=0, le=1, description="Continuous outputs: least fraction of rows whose every value stays within "
        "row_tolerance of the scale, shown by the judged real rows' one-sided bound; default 0.99 below fp32."
    )


class OutputCheck(Thresholds):
    kind: Literal["auto", "dense", "scores", "distribution"] = Field(
        "auto", description="How the output is judged: dense values, class scores (top-k too), or probability "
        "distributions (top-k and row sums); auto: distributions when rows sum to 1, scores when labeled."
    )
    axis: int | None = Field(
        None, description="The channel/class axis its slices are taken along (default: the smallest axis after "
        "the first, for outputs of rank 3 or more)."
    )


class Derive(Strict):
    """More judged rows from the samples verification judges: seeded crops (resized back) and mirrors."""

    rows: int = Field(600, ge=1, le=100_000, description="Samples to judge in all: the declared ones, then "
                      "variants of each in turn (a seeded crop of 40-100 % of its area, resized back to its size, "
                      "mirrored half the time) until there are this many.")
    mirror: bool = Field(True, description="Mirror half of the variants left to right (false for text).")
    seed: int = Field(0, description="Seed of the crops and mirrors (the same seed, the same rows).")


class Verify(Thresholds):
    enabled: bool = Field(True, description="Compare every built artifact with the FP32 reference.")
    samples: int = Field(4, ge=1, description="Seeded random input sets to compare on.")
    seed: int = Field(0, description="Seed of the random inputs.")
    data: str | None = Field(None, description="Real sample inputs (.npz/.npy/.json file or folder; one array "
                             "per input, an extra leading axis stacks samples); preferred over generated ones. "
                             "An int8 artifact is verified only on real data (this, or a hold-out of its "
                             "calibration data); on generated data alone it is reported unverified.")
    confidence: float = Field(0.95, ge=0.5, lt=1, description="How sure a verdict is that an agreement rate meets "
                              "its floor: the one-sided Wilson lower bound at this level must reach the floor "
                              "(0.5: the observed rate alone). Lower is looser, and said beside the verdict.")
    derive: Derive | None = Field(None, description="Judge on more rows than declared: variants of each sample "
                                  "verification judges (never of calibration samples): crops, scales and mirrors "
                                  "of its image inputs.")
    classifications: list[str] | None = Field(
        None, description="Outputs that are class scores (compared by top-1 too); default: outputs with labels."
    )
    outputs: dict[str, OutputCheck] = Field(
        default_factory=dict, description="Per-output kind, channel axis and thresholds, over the ones above."
    )
