"""The `tokens:` block of an output's postprocess (per-token labels of a token classifier, `[batch, tokens,
labels]`): how tokens are joined into entities and which labels are left out (gpux.answers.tokens decodes it)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gpux.config.base import Strict


class Tokens(Strict):
    aggregation: Literal["simple", "none"] = Field(
        "simple", description="simple: neighbouring tokens of one entity joined into one answer (a B- label starts "
        "an entity, I- and the same label continue it; its score the mean of its tokens'), as transformers' "
        "token-classification pipeline does with aggregation_strategy='simple'; none: one answer per token.")
    ignore: list[str] = Field(["O"], description="Labels not answered (an entity's label, without B-/I-, with "
                              "simple; a token's with none): the outside-any-entity label by default.")

    @property
    def classes_axis(self) -> int:
        return -1
