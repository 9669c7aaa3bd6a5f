"""What decoding files may hold: images measured from their headers before they are decoded, one budget of decoded
bytes shared by the requests in flight, and memory handed back to the system after a large request."""

from __future__ import annotations

import contextlib
import io
import threading
import time
import warnings
from collections.abc import Iterator
from typing import Any

from gpux.serve.errors import RequestTimeout, TooLarge

BYTES_PER_PIXEL = 4  # what a decoded pixel may take (RGBA, or the file's mode and the converted copy)
TRIM_AFTER = 32 * 2**20  # decoded bytes past which the allocator's free memory goes back to the system


def image_bytes(data: bytes, name: str, max_pixels: int) -> int:
    """The memory the image in `data` takes decoded, from its header (Pillow reads the size without decoding);
    413 naming serve.max_image_pixels above it; 0 for what Pillow cannot read (decoding says why)."""
    from PIL import Image

    try:
        with warnings.catch_warnings():  # Pillow's own bomb warning: the limit below says it
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as image:
                width, height = image.size
    except Image.DecompressionBombError as exc:
        raise TooLarge(f"{name}: {exc} (and above the limit of {max_pixels}: serve.max_image_pixels)") from None
    except Exception:  # not an image, or a malformed header: the decoder answers it with its own 400
        return 0
    if width * height > max_pixels:
        raise TooLarge(f"{name}: an image of {width}x{height} = {width * height} pixels, above the limit of "
                       f"{max_pixels} (serve.max_image_pixels)")
    return width * height * BYTES_PER_PIXEL


class Budget:
    """Decoded bytes held by the requests in flight (each holds its largest image: its files are decoded one after
    the other): a request waits until its share fits its model's limit."""

    def __init__(self) -> None:
        self.held = 0
        self._changed = threading.Condition()

    @contextlib.contextmanager
    def hold(self, need: int, limit: int, timeout_s: float) -> Iterator[None]:
        if need > limit:
            raise TooLarge(f"an image of the request takes {need} bytes decoded, above the limit of {limit} "
                           "(serve.max_decoded_bytes)")
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while self.held and self.held + need > limit:
                if not self._changed.wait(deadline - time.monotonic()) and time.monotonic() >= deadline:
                    raise RequestTimeout(f"the request's images waited {timeout_s} s for memory to decode in "
                                         "(serve.max_decoded_bytes, serve.request_timeout_s)")
            self.held += need
        try:
            yield
        finally:
            with self._changed:
                self.held -= need
                self._changed.notify_all()


DECODING = Budget()


@contextlib.contextmanager
def trimmed(size: int) -> Iterator[None]:
    """After a block that decoded `size` bytes or more, the C allocator's free memory goes back to the system
    (glibc keeps freed blocks in its arenas: a burst of large images would otherwise stay in the process)."""
    try:
        yield
    finally:
        if size >= TRIM_AFTER:
            trim()


def trim() -> None:
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


_LIBC: list[Any] = []


def _libc() -> Any:
    """glibc, where it is the C library (None elsewhere: musl, macOS and Windows have no malloc_trim)."""
    if not _LIBC:
        import ctypes

        try:
            libc = ctypes.CDLL(None)  # the symbols the process has loaded: the C library's among them
        except (OSError, TypeError):
            libc = None
        _LIBC.append(libc if libc is not None and hasattr(libc, "malloc_trim") else None)
    return _LIBC[0]
