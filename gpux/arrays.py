"""The array records every room passes along, named once: what a model is fed and what it returns, by tensor
name. Typing only: numpy is not imported at run time."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    import numpy as np

Array: TypeAlias = "np.ndarray[Any, Any]"
Feeds: TypeAlias = "dict[str, np.ndarray[Any, Any]]"  # input name -> array, as a runtime's run() takes them
Named: TypeAlias = "dict[str, np.ndarray[Any, Any]]"  # output name -> array, as a model returned them
Outputs: TypeAlias = "list[np.ndarray[Any, Any]]"  # a runtime's outputs, in the model's output order

__all__ = ["Array", "Feeds", "Named", "Outputs"]
