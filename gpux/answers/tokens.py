"""Per-token labels of a token classifier (`postprocess: {tokens: ...}` on a `[batch, tokens, labels]` output): each
token's best label and score, with the characters it spans in the input text (the text's `Spans`, from the
tokenizer's offsets), joined into entities as transformers' token-classification pipeline does with
aggregation_strategy="simple"; special tokens and padding are no answers. Verified per token: the share of tokens
whose best label the artifact keeps."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NotRequired, TypedDict

from gpux.answers import post
from gpux.answers.decoding import Decoding
from gpux.answers.text import Spans
from gpux.arrays import Array
from gpux.config.load import Project
from gpux.config.steps import Postprocess
from gpux.config.tokens import Tokens
from gpux.errors import Problem
from gpux.model.tensor import Tensor


class _Found(TypedDict):
    """A token or entity found, before the text it spans is read (`Entity` without its `text`)."""

    label: str
    score: float
    start: int | None
    end: int | None
    token: NotRequired[int]


class Entity(_Found):
    """One token's label (aggregation: none, with its `token` index), or an entity of neighbouring tokens; `start`
    and `end` are character offsets into the text (None where tensors were given), `text` what they span."""

    text: str | None


class TokenAgreement(TypedDict):
    """The artifact's best label per token against the reference's (`compare`), over every row."""

    rows: int
    tokens: int
    token_match: float  # the share of tokens whose best label the artifact keeps


def _tag(label: str) -> tuple[str, str]:
    """(B or I, the entity) of a label: B-X begins X, I-X continues it, anything else continues itself."""
    if label.startswith(("B-", "I-")):
        return label[0], label[2:]
    return "I", label


def _tokens(scores: Array, labels: list[str], spans: Spans | None) -> list[_Found]:
    """Each of the text's own tokens (none of the special ones, no padding): its best label and score."""
    best = scores.argmax(-1)
    count = len(spans.offsets) if spans is not None else len(scores)
    out: list[_Found] = []
    for i in range(min(count, len(scores))):
        if spans is not None and spans.special[i]:
            continue
        start, end = spans.offsets[i] if spans is not None else (None, None)
        k = int(best[i])
        out.append({"label": labels[k] if k < len(labels) else str(k), "score": float(scores[i, k]), "token": i,
                    "start": start, "end": end})
    return out


def _grouped(tokens: list[_Found]) -> list[_Found]:
    """Neighbouring tokens of one entity joined: a B- label (or another entity) starts a new one; its label the
    first token's without its B-/I-, its score the mean, its span from the first token's start to the last's end."""
    groups: list[list[_Found]] = []
    for t in tokens:
        bi, tag = _tag(t["label"])
        if groups and bi != "B" and _tag(groups[-1][-1]["label"])[1] == tag:
            groups[-1].append(t)
        else:
            groups.append([t])
    return [{"label": g[0]["label"].split("-", 1)[-1], "score": sum(t["score"] for t in g) / len(g),
             "start": g[0]["start"], "end": g[-1]["end"]} for g in groups]


def decode(row: Array, how: Decoding) -> list[Entity]:
    """One text's entities (or tokens), in text order; labels in `ignore` left out."""
    import numpy as np

    block = how.block_as(Tokens)
    scores = np.asarray(post.activate(row, *how.activation), np.float32)
    spans = how.placement if isinstance(how.placement, Spans) else None
    found = _tokens(scores, how.labels or [], spans)
    found = _grouped(found) if block.aggregation == "simple" else found
    entities: list[Entity] = [{**f, "text": spans.text[f["start"]:f["end"]] if spans is not None else None}
                              for f in found]
    return [e for e in entities if e["label"] not in block.ignore]


def shape(project: Project, name: str, spec: Postprocess, labels: list[str] | None, real: Tensor) -> list[Problem]:
    """A token classifier's output is [batch, tokens, labels]; its labels name the last axis."""
    from gpux.answers.shapes import label_problems

    if real.shape is not None and len(real.shape) != 3:
        return [project.problem(("outputs", name, "postprocess", "tokens"), "tokens labels each token of "
                                f"[batch, tokens, labels]; {name} is {list(real.shape)}")]
    return label_problems(project, name, spec, labels, real)


def judge(row: Array, how: Decoding) -> tuple[int, ...]:
    """Each token's best class (padding included: the reference's and the artifact's rows are alike)."""
    return tuple(int(k) for k in post.activate(row, *how.activation).argmax(-1))


def compare(reference: Sequence[tuple[int, ...]], got: Sequence[tuple[int, ...]]) -> TokenAgreement:
    """The share of tokens whose best label the artifact keeps, over every row."""
    same = sum(a == b for r, g in zip(reference, got, strict=True) for a, b in zip(r, g, strict=True))
    tokens = sum(len(r) for r in reference)
    return {"rows": len(reference), "tokens": tokens, "token_match": same / tokens if tokens else 1.0}


def counts(record: TokenAgreement) -> str:
    return f"{record['rows']} rows, {record['tokens']} tokens"


def text(record: TokenAgreement) -> str:
    return f"tokens labelled the same {record['token_match']:.1%}"


def lines(name: str, answer: list[Entity]) -> list[str]:
    """`  name: 2 entities` then one line each: label, score, the characters [start, end) and their text."""
    head = f"  {name}: {len(answer)} {'entity' if len(answer) == 1 else 'entities'}"
    return [head, *(f"    {a['label']} {a['score']:.3f} [{a['start']}, {a['end']}) {a['text']!r}" for a in answer)]
