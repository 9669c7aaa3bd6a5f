"""The FP32 reference's outputs kept between verifications while a tune runs: it judges each rung of a ladder on
the same rows, and each would run the reference again."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from gpux.files import stamp

if TYPE_CHECKING:
    from gpux.arrays import Outputs
    from gpux.quality.calibrate import Data

Key = tuple[str, tuple[int, ...], str]
# output names, the rows, the reference's outputs on them, and the shapes the rows were generated with (Job.shapes:
# a retry with larger undeclared dims changes them)
Kept = tuple[list[str], "Data", list["Outputs"], dict[str, int]]


class References:
    """A declared cache: the FP32 reference's outputs on the rows the last verification ran, for the next candidate
    judged on the same rows, kept only inside `kept()` (a tune's ladder; a build alone or a server keeps nothing).
    One entry, of at most MAX_BYTES of rows and outputs; keyed by the reference model file as it is on disk and the
    rows' digest."""

    MAX_BYTES = 512 << 20

    def __init__(self) -> None:
        self._entry: tuple[Key, Kept] | None = None
        self._open = 0

    @contextmanager
    def kept(self) -> Iterator[None]:
        """Keep the last reference's outputs for the next verification until the block ends."""
        self._open += 1
        try:
            yield
        finally:
            self._open -= 1
            if not self._open:
                self._entry = None

    @staticmethod
    def key(model: Path, digest: str) -> Key:
        return str(model.resolve()), tuple(stamp(model.stat())), digest

    def get(self, key: Key) -> Kept | None:
        return self._entry[1] if self._entry is not None and self._entry[0] == key else None

    def put(self, key: Key, value: Kept) -> None:
        rows = [*value[2], *(list(f.values()) for f in value[1].feeds)]
        size = sum(getattr(a, "nbytes", 0) for row in rows for a in row)
        self._entry = (key, value) if self._open and size <= self.MAX_BYTES else None


REFERENCES = References()
