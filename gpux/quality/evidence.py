"""Whether judged rows show a floor: the one-sided lower confidence bound (Wilson score) of each agreement rate
that counts answers (labels, confident texts, confident boxes, embedding rows keeping their direction, rows of
continuous values within tolerance), the rows a floor needs, and the verdict's words when the data cannot show it
(docs/verification.md)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import cast

from gpux.documents import OutputMetrics, RateDoc, number
from gpux.report import percent

CONFIDENCE = 0.95  # one-sided: the rate is at least the bound with this probability
RULES = "wilson-one-sided-3"  # part of a verdict's cache key: a new rule, a new verdict

# (where in an output's record ("": the record itself), rate, count of rows it is over, floor key, what it is):
# the rates of answers that are counted one by one, so a bound says what they show. Means (CER, IoU, overlap, the
# mean cosine) are not counts.
RATES: tuple[tuple[str, str, str, str, str], ...] = (
    ("", "top1_confident", "confident_rows", "min_top1_confident", "confident top-1"),
    ("", "top5", "rows", "min_top5", "top-5"),
    ("", "top1", "rows", "min_top1", "top-1"),
    ("answers", "exact_confident", "confident_rows", "min_exact_match", "confident texts read the same"),
    ("answers", "recall_confident", "confident_reference_boxes", "min_box_recall", "confident boxes found"),
    ("answers", "precision_confident", "confident_artifact_boxes", "min_box_precision",
     "confident boxes the reference has"),
    ("answers", "close", "rows", "min_rows_close", "vectors keeping their direction"),
    ("values", "rows_within", "rows", "min_rows_within", "values within tolerance"),
    ("answers", "rows_agree", "rows", "min_exact_match", "class maps that agree"),
    ("answers", "points_close", "confident_points", "min_exact_match", "confident points where the reference puts "
     "them"),
)


def z_of(confidence: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(confidence) if confidence > 0.5 else 0.0


def lower_bound(agree: int, rows: int, confidence: float = CONFIDENCE) -> float:
    """The one-sided Wilson score lower bound of agree/rows (0 with no rows; the observed rate at confidence 0.5)."""
    if rows <= 0:
        return 0.0
    z, p = z_of(confidence), agree / rows
    centre, spread = p + z * z / (2 * rows), z * math.sqrt(p * (1 - p) / rows + z * z / (4 * rows * rows))
    return max(0.0, (centre - spread) / (1 + z * z / rows))


def rows_needed(floor: float, misses: int = 0, confidence: float = CONFIDENCE) -> int | None:
    """The fewest rows whose bound reaches `floor` with `misses` of them missed (None: never, at a floor of 1)."""
    if floor >= 1.0 and z_of(confidence) > 0:
        return None
    if floor <= 0:
        return max(misses, 1)
    high = max(misses + 1, 1)
    while lower_bound(high - misses, high, confidence) < floor:
        high *= 2
    low = max(misses, 1)
    while low < high:
        mid = (low + high) // 2
        low, high = (mid + 1, high) if lower_bound(mid - misses, mid, confidence) < floor else (low, mid)
    return high


def weigh(outputs: Mapping[str, OutputMetrics], floors: Mapping[str, Mapping[str, float | None]],
          confidence: float = CONFIDENCE) -> list[RateDoc]:
    """Each judged rate of each output with its rows, bound and floor (`floors`: each output's thresholds)."""
    out = []
    for name, record in outputs.items():
        for where, rate, count, key, label in RATES:
            block = cast("Mapping[str, object] | None", record.get(where) if where else record)
            floor = (floors.get(name) or {}).get(key)
            observed, counted = (number(block, rate), number(block, count)) if block else (None, None)
            if not block or floor is None or observed is None or counted is None or \
                    (where and not block.get("judged", True)):
                continue
            rows = int(counted)
            agree = round(float(observed) * rows)
            bound = lower_bound(agree, rows, confidence)
            shown = bound >= floor if floor < 1 else agree == rows  # no rows show 100 %: only no miss meets it
            out.append(RateDoc(output=name, metric=rate, label=label, rows=rows, agree=agree, observed=float(observed),
                               bound=bound, floor=floor, shown=shown,
                               needed=rows_needed(floor, rows - agree, confidence)))
    return out


def shortfall(weighed: Sequence[RateDoc], confidence: float = CONFIDENCE) -> str:
    """Why the rows cannot show a floor they meet ("" when every one is shown): the first rate not shown, e.g.
    `45 judged rows (logits: confident top-1) show at most 93.9 %; about 223 more are needed for the 99 % floor`."""
    short = [w for w in weighed if not w["shown"] and w["observed"] >= w["floor"]]
    if not short:
        return ""
    w = min(short, key=lambda w: w["bound"] - w["floor"])
    level = f" ({confidence:.0%} confidence)" if confidence != CONFIDENCE else ""
    needed, rows = w["needed"], w["rows"]
    more = "no number of rows can show a floor of 100 %" if needed is None else \
        f"about {needed - rows} more {'are' if needed - rows != 1 else 'is'} needed for the " \
        f"{percent(w['floor'])} floor"
    return f"{rows} judged rows ({w['output']}: {w['label']}) show at most {percent(w['bound'])}{level}; {more}"


def shown_lines(weighed: list[RateDoc], confidence: float) -> list[str]:
    """What the judged rows show of each rate that missed its floor: the bound beside the observed rate."""
    return [f"{w['output']}: {w['label']} {w['agree']} of {w['rows']} rows ({percent(w['observed'])}): the rows show "
            f"at most {percent(w['bound'])} ({confidence:.0%} one-sided), floor {percent(w['floor'])}"
            for w in weighed if w["observed"] < w["floor"]]


LOOSER_HIGHER = ("atol", "rtol", "row_tolerance")  # tolerances: a higher value is looser, as for every max_


def loosened(user: Iterable[Mapping[str, float | None]], defaults: Mapping[str, float | None],
             confidence: float) -> list[str]:
    """The thresholds each block of `user` sets looser than `defaults` (a lower floor, a higher ceiling), once
    each, and a confidence under the default: what the verdict is shown beside."""
    out: dict[str, None] = {}
    for block in user:
        for key, value in block.items():
            default = defaults.get(key)
            if value is None or default is None or value == default:
                continue
            if (value > default) if key.startswith("max_") or key in LOOSER_HIGHER else (value < default):
                out[f"{key} {value:g} (default {default:g})"] = None
    if confidence < CONFIDENCE:
        out[f"confidence {confidence:g} (default {CONFIDENCE:g})"] = None
    return list(out)
