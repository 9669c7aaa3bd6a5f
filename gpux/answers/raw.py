"""Raw-bytes pre-processing: any file's first and last bytes as one row of byte values, padded where the file is
shorter, its ends optionally stripped of ASCII whitespace (the way content-type classifiers such as Magika read
files). Only the two ends are read, never the whole file."""

from __future__ import annotations

import os

from gpux.arrays import Array
from gpux.config.inputs import BytesSteps
from gpux.errors import InputError, reading_file


def read_ends(source: object, head: int, tail: int, name: str) -> tuple[bytes, bytes]:
    """At most `head` bytes from the start and `tail` bytes from the end of a path or of bytes (both come from the
    whole content when it is shorter)."""
    if isinstance(source, bytes | bytearray | memoryview):
        data = bytes(source)
        return data[:head], data[max(0, len(data) - tail):] if tail else b""
    if not isinstance(source, str | os.PathLike):
        raise InputError(f"{name}: raw-bytes inputs take a path or bytes, not {type(source).__name__}")
    with reading_file(name), open(source, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        first = f.read(head)
        f.seek(max(0, size - tail))
        return first, f.read(tail) if tail else b""


def bytes_tensor(source: object, steps: BytesSteps, dtype: str, name: str) -> Array:
    """[1, head + tail] of `dtype`: the head bytes (stripped at the start, padded at the end), then the tail bytes
    (stripped at the end, padded at the start)."""
    import numpy as np

    block = steps.block or 0
    first, last = read_ends(source, max(block, steps.head) if steps.head else 0,
                            max(block, steps.tail) if steps.tail else 0, name)
    if steps.strip:
        first, last = first.lstrip(), last.rstrip()
    out = np.full((1, steps.size), steps.pad, dtype)
    first = first[:steps.head]
    last = last[max(0, len(last) - steps.tail):] if steps.tail else b""
    out[0, :len(first)] = np.frombuffer(first, np.uint8)
    out[0, steps.size - len(last):] = np.frombuffer(last, np.uint8)
    return out
