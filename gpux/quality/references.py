"""The FP32 reference's outputs kept between verifications in one process: tune judges each rung of a ladder on
the same rows, and each would run the reference again."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpux.arrays import Outputs
    from gpux.quality.calibrate import Data

Key = tuple[str, int, int, str]
# output names, the rows, the reference's outputs on them, and the shapes the rows were generated with (Job.shapes:
# a retry with larger undeclared dims changes them)
Kept = tuple[list[str], "Data", list["Outputs"], dict[str, int]]


class References:
    """A declared cache: the FP32 reference's outputs on the rows the last verification ran, for the next candidate
    judged on the same rows (tune verifies each rung of a ladder on them; each would run the reference again). One
    entry, of at most MAX_BYTES of outputs; keyed by the reference model file as it is on disk and the rows' digest."""

    MAX_BYTES = 512 << 20

    def __init__(self) -> None:
        self._entry: tuple[Key, Kept] | None = None

    @staticmethod
    def key(model: Path, digest: str) -> Key:
        st = model.stat()
        return str(model.resolve()), st.st_size, st.st_mtime_ns, digest

    def get(self, key: Key) -> Kept | None:
        return self._entry[1] if self._entry is not None and self._entry[0] == key else None

    def put(self, key: Key, value: Kept) -> None:
        size = sum(getattr(a, "nbytes", 0) for row in value[2] for a in row)
        self._entry = (key, value) if size <= self.MAX_BYTES else None


REFERENCES = References()
