"""What every block of gpux.yml's steps shares: a strict, frozen pydantic model, and a rule's failure as one message
at the field it names (gpux.config.problems reads `at`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic_core import PydanticCustomError


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def fail(message: str, *at: str | int) -> PydanticCustomError:
    """A validation failure saying `message`, at field `at` under the model that raises it."""
    return PydanticCustomError("gpux", "{message}", {"message": message, "at": tuple(str(a) for a in at)})
