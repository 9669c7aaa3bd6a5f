"""Inputs checked once, then handed straight to the runtime: the signatures (names, types, dtypes, shapes...) of
inputs that passed the checks as they were given, bounded, and the rule for when one may be remembered. What
`Session.run(dict)`, `Session.prepared()` and the server's `check_inputs` share."""

from __future__ import annotations

from collections.abc import Hashable, Mapping

KEPT = 256  # signatures remembered per model (varying shapes beyond it are checked each call)


class Signatures:
    """A bounded set of input signatures known to pass. A signature is remembered only when the inputs of the
    call that passed were taken as given (nothing cast, copied or converted: the same values would reach the
    runtime unchecked next time), and only while fewer than `limit` are kept; past it, new ones are checked
    each call."""

    __slots__ = ("_kept", "limit")

    def __init__(self, limit: int | None = None) -> None:
        self.limit = KEPT if limit is None else limit
        self._kept: set[Hashable] = set()

    def __contains__(self, signature: object) -> bool:
        return signature in self._kept

    def __len__(self) -> int:
        return len(self._kept)

    def remember(self, signature: Hashable | None, taken_as_given: bool) -> bool:
        """Keep `signature` (None: inputs that have none, never kept) if its inputs were taken as given and
        there is room; whether it is kept."""
        if signature is None or not taken_as_given or len(self._kept) >= self.limit:
            return signature is not None and signature in self._kept
        self._kept.add(signature)
        return True


def signature(values: Mapping[str, object]) -> tuple[object, ...] | None:
    """Name, type, dtype, shape and strides of every value, flat (None: a value that is not an array)."""
    key: list[object] = []
    try:
        for k, v in values.items():
            key += (k, type(v), v.dtype, v.shape, v.strides)  # type: ignore[attr-defined]
    except AttributeError:
        return None
    return tuple(key)


def taken_as_given(given: Mapping[str, object], used: Mapping[str, object]) -> bool:
    """Whether every value given is the very object used (none was cast or copied)."""
    return all(used.get(k) is v for k, v in given.items())


__all__ = ["KEPT", "Signatures", "signature", "taken_as_given"]
