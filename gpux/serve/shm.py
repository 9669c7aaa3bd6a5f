"""Triton's system shared memory extension: named regions of /dev/shm files, tensors read from and written to them.

A region is an open file descriptor read and written with pread/pwrite, never mapped: a file its owner shrinks
after registering reads short (a 400) instead of faulting the server. A request holds every region it names from
its start to its end, so an unregister meanwhile closes the region only after it, as Triton's does; a request
that starts after the unregister is told the region is unknown. Keys are POSIX shared memory names ("/name"),
opened as /dev/shm/name and nothing else: no other '/', no '..', no symbolic link, regular files only."""

from __future__ import annotations

import math
import os
import re
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpux.serve import codec
from gpux.serve.errors import BadRequest
from gpux.serve.offload import on_thread

EXTENSION = "system_shared_memory"
SHM_DIR = "/dev/shm"
KEY = re.compile(r"/[^/\x00]{1,255}")  # one leading '/', one file name (NAME_MAX 255)
MAX_REGIONS = 256  # each holds a file descriptor
LARGE = 64 * 1024  # copies of more bytes run on a thread, off the event loop
UNREAD = np.empty(0)  # the array of an input still in its region (read_inputs replaces it)
PARAMETERS = ("shared_memory_region", "shared_memory_byte_size", "shared_memory_offset")


@dataclass(frozen=True)
class Ref:
    """Where one tensor of a request lies: `byte_size` bytes at `offset` into region `region`; an input's
    `shape` too."""

    region: str
    byte_size: int
    offset: int = 0
    shape: tuple[int, ...] = ()


def ref_of(where: str, params: dict[str, Any], shape: tuple[int, ...] = ()) -> Ref | None:
    """The shared memory parameters of an input or output (`where` names it), checked; None when it names no
    region."""
    if not params:  # the common case: no parameters at all
        return None
    region = params.get("shared_memory_region")
    if region is None:
        stray = [k for k in PARAMETERS[1:] if k in params]
        if stray:
            raise BadRequest(f"{where}: parameters.{stray[0]} without parameters.shared_memory_region")
        return None
    if not isinstance(region, str) or not region:
        raise BadRequest(f"{where}: parameters.shared_memory_region must be a region name, got {region!r}")
    if "shared_memory_byte_size" not in params:
        raise BadRequest(f"{where}: parameters.shared_memory_byte_size is needed with shared_memory_region")
    size = _count(f"{where}: parameters.shared_memory_byte_size", params["shared_memory_byte_size"])
    offset = _count(f"{where}: parameters.shared_memory_offset", params.get("shared_memory_offset", 0))
    return Ref(region, size, offset, shape)


def input_ref(name: str, datatype: str, shape: tuple[int, ...], params: dict[str, Any]) -> Ref | None:
    """An input's region, its byte size checked against its shape (BYTES: read and counted when it arrives)."""
    ref = ref_of(f"input '{name}'", params, shape)
    if ref is not None and datatype != "BYTES":
        need = math.prod(shape) * (2 if datatype == "BF16" else codec.NUMPY[datatype].itemsize)
        if ref.byte_size != need:
            raise BadRequest(f"input '{name}': parameters.shared_memory_byte_size is {ref.byte_size} but shape "
                             f"{list(shape)} of {datatype} is {need} bytes")
    return ref


def _count(what: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadRequest(f"{what} must be a non-negative integer, got {value!r}")
    return value


class Region:
    """A registered region: `byte_size` bytes at `offset` of the file behind `fd`."""

    def __init__(self, name: str, key: str, offset: int, byte_size: int, fd: int) -> None:
        self.name, self.key, self.offset, self.byte_size, self.fd = name, key, offset, byte_size, fd
        self.users = 0  # requests holding it
        self.dropped = False  # unregistered: closed when the last user lets go

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "key": self.key, "offset": self.offset, "byte_size": self.byte_size}

    def read(self, ref: Ref, where: str) -> bytearray:
        data = bytearray(ref.byte_size)
        got = os.preadv(self.fd, [data], self.offset + ref.offset) if data else 0
        if got != ref.byte_size:
            raise BadRequest(f"{where}: shared memory region '{self.name}' ends early: '{self.key}' is now "
                             f"{os.fstat(self.fd).st_size} bytes (shrunk after it was registered)")
        return data

    def write(self, ref: Ref, data: bytes, where: str) -> None:
        at, size = self.offset + ref.offset, os.fstat(self.fd).st_size
        if at + len(data) > size:
            raise BadRequest(f"{where}: shared memory region '{self.name}' ends early: '{self.key}' is now {size} "
                             f"bytes (shrunk after it was registered)")
        view = memoryview(data)
        while view:
            done = os.pwrite(self.fd, view, at)
            view, at = view[done:], at + done

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class Regions:
    """The server's registered regions by name; every change and every hold under one lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._regions: dict[str, Region] = {}

    def register(self, name: Any, key: Any, offset: Any, byte_size: Any) -> None:
        if not isinstance(name, str) or not name:
            raise BadRequest(f"a shared memory region needs a name, got {name!r}")
        where = f"register '{name}'"
        if not isinstance(key, str) or not KEY.fullmatch(key) or ".." in key:
            raise BadRequest(f"{where}: key {key!r} is not a POSIX shared memory name: one leading '/', no other "
                             f"'/' and no '..' (e.g. '/input_data', the file {SHM_DIR}/input_data)")
        offset, byte_size = _count(f"{where}: offset", offset), _count(f"{where}: byte_size", byte_size)
        if not byte_size:
            raise BadRequest(f"{where}: byte_size must be above 0")
        with self._lock:
            if name in self._regions:
                raise BadRequest(f"{where}: shared memory region '{name}' is already registered (key "
                                 f"'{self._regions[name].key}'); unregister it first")
            if len(self._regions) >= MAX_REGIONS:
                raise BadRequest(f"{where}: {MAX_REGIONS} shared memory regions are registered, the most this "
                                 f"server holds; unregister some first")
            fd = _open(where, key)
            size = os.fstat(fd).st_size
            if offset + byte_size > size:
                os.close(fd)
                raise BadRequest(f"{where}: offset {offset} + byte_size {byte_size} runs past the end of '{key}' "
                                 f"({size} bytes)")
            self._regions[name] = Region(name, key, offset, byte_size, fd)

    def unregister(self, name: str = "") -> None:
        """The region `name` (every region when empty) taken out now, closed once no request holds it; an
        unknown name is no error (as in Triton: unregistering is idempotent)."""
        with self._lock:
            if name:
                gone = [r for r in [self._regions.pop(name, None)] if r is not None]
            else:
                gone, self._regions = list(self._regions.values()), {}
            for region in gone:
                region.dropped = True
                if not region.users:
                    region.close()

    def status(self, name: str = "") -> list[dict[str, Any]]:
        with self._lock:
            if not name:
                return [r.status() for r in self._regions.values()]
            if name not in self._regions:
                raise self._unknown(f"status of '{name}'", name)
            return [self._regions[name].status()]

    def _unknown(self, where: str, name: str) -> BadRequest:
        known = ", ".join(sorted(self._regions)) or "none"
        return BadRequest(f"{where}: unknown shared memory region '{name}' (registered: {known}); register it "
                          f"first")

    @contextmanager
    def hold(self, refs: list[tuple[str, Ref]]) -> Iterator[dict[str, Region]]:
        """The regions `refs` name, each ref checked against its region's bounds, held until the block ends."""
        if not refs:
            yield {}
            return
        with self._lock:
            held: dict[str, Region] = {}
            for where, ref in refs:
                region = self._regions.get(ref.region)
                if region is None:
                    raise self._unknown(f"{where}: parameters.shared_memory_region", ref.region)
                if ref.offset + ref.byte_size > region.byte_size:
                    raise BadRequest(f"{where}: parameters.shared_memory_offset {ref.offset} + "
                                     f"shared_memory_byte_size {ref.byte_size} runs past the end of shared memory "
                                     f"region '{ref.region}' ({region.byte_size} bytes)")
                held[ref.region] = region
            for region in held.values():
                region.users += 1
        try:
            yield held
        finally:
            with self._lock:
                for region in held.values():
                    region.users -= 1
                    if region.dropped and not region.users:
                        region.close()


def _open(where: str, key: str) -> int:
    """The file descriptor of /dev/shm/<name>: read-write, never through a symbolic link, a regular file only."""
    path = os.path.join(SHM_DIR, key[1:])
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError as exc:
        raise BadRequest(f"{where}: no shared memory object '{key}' ({path}); create it before registering") \
            from exc
    except OSError as exc:
        raise BadRequest(f"{where}: cannot open shared memory object '{key}': {exc.strerror}") from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise BadRequest(f"{where}: '{key}' is not a shared memory object (not a regular file in {SHM_DIR})")
    return fd


def refs(request: Any) -> list[tuple[str, Ref]]:
    """Every region a request names, with the input or output that names it."""
    found = [(f"input '{i.name}'", i.shm) for i in request.inputs if i.shm is not None]
    return found + [(f"output '{n}'", r) for n, r in request.shm_outputs.items()]


async def read_inputs(held: dict[str, Region], inputs: list[Any]) -> None:
    """Each input that names a region gets its array from it, copied (the client may reuse the region as soon as
    the answer is sent)."""
    for item in inputs:
        ref = item.shm
        if ref is not None:
            where = f"input '{item.name}'"
            raw = await on_thread(ref.byte_size > LARGE, held[ref.region].read, ref, where)
            item.array = codec.from_bytes(item.name, item.datatype, ref.shape, memoryview(raw))


async def write_outputs(held: dict[str, Region], outputs: list[tuple[str, Any]],
                        wanted: dict[str, Ref]) -> dict[str, dict[str, Any]]:
    """Each output asked for in a region written there; returns their reply parameters by output name."""
    written: dict[str, dict[str, Any]] = {}
    for name, array in outputs:
        ref = wanted.get(name)
        if ref is None:
            continue
        data = codec.to_bytes(array)
        if len(data) > ref.byte_size:
            raise BadRequest(f"output '{name}': {len(data)} bytes (shape {list(array.shape)} of "
                             f"{codec.datatype_of(array)}) do not fit parameters.shared_memory_byte_size "
                             f"{ref.byte_size}")
        await on_thread(len(data) > LARGE, held[ref.region].write, ref, data, f"output '{name}'")
        written[name] = {"shared_memory_region": ref.region, "shared_memory_byte_size": len(data),
                         **({"shared_memory_offset": ref.offset} if ref.offset else {})}
    return written
