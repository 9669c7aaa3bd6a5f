"""What decoding files may hold: images measured from their headers before they are decoded, one budget of decoded
bytes shared by the requests in flight, and large blocks handed back to the system once freed."""

from __future__ import annotations

import contextlib
import functools
import io
import threading
import time
import warnings
from collections.abc import Iterator
from typing import Any

from gpux.serve.errors import RequestTimeout, TooLarge

BYTES_PER_PIXEL = 4  # what a decoded pixel may take (RGBA, or the file's mode and the converted copy)
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
MMAP_THRESHOLD = 2**20  # blocks from this size up are mapped on their own, and unmapped when freed


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
        raise TooLarge(f"{name}: {exc} (and above the limit of {max_pixels}: serve.max_image_pixels)") from exc
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



def return_large_blocks() -> bool:
    """Make glibc map every block of MMAP_THRESHOLD or more on its own (and unmap it when freed) instead of raising
    that threshold as large blocks are freed, which keeps a burst of decoded images in its per-thread arenas (three
    threads decoding 16 images of 2000x2000 each kept +47 MB, of which malloc_trim gave back 1 MB; with the
    threshold fixed, +0 MB). False where the C library is not glibc."""
    libc = _libc()
    return libc is not None and bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))


@functools.cache
def _libc() -> Any:
    """glibc, where it is the C library (None elsewhere: musl, macOS and Windows have no mallopt or a different one)."""
    import ctypes

    try:
        libc = ctypes.CDLL(None)  # the symbols the process has loaded: the C library's among them
    except (OSError, TypeError):
        return None
    return libc if hasattr(libc, "gnu_get_libc_version") else None
