"""Who is using a project right now: runs, benchmarks and servers each hold an OS file lock (released by the
OS when the process exits, even after SIGKILL) with a note of what they are; `gpux use` asks before switching."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

from gpux import files
from gpux.artifacts import store

FOLDER = ".in-use"


def _folder(name: str, root: Path, store_dir: str | Path | None) -> Path:
    return files.store_root(root, store_dir) / name / FOLDER


@contextlib.contextmanager
def holding(name: str, root: Path, store_dir: str | Path | None, what: str) -> Iterator[None]:
    """Mark project (or workspace) `name` in use by this process while the block runs."""
    from filelock import FileLock

    folder = files.make_dir(_folder(name, root, store_dir))
    lock = folder / f"{os.getpid()}-{time.monotonic_ns()}.lock"
    note = lock.with_suffix(".json")
    since = time.strftime("%H:%M:%S", time.gmtime())
    files.atomic_write_text(note, json.dumps({"what": what, "pid": os.getpid(), "since": since}))
    try:
        with FileLock(lock):
            yield
    finally:
        for p in (lock, note):
            p.unlink(missing_ok=True)


def holders(name: str, root: Path, store_dir: str | Path | None) -> list[str]:
    """'WHAT (pid N, since HH:MM:SS UTC)' for each live holder; leftovers of dead holders are removed."""
    from filelock import FileLock, Timeout

    out = []
    folder = _folder(name, root, store_dir)
    for lock in sorted(folder.glob("*.lock")) if folder.is_dir() else []:
        note = lock.with_suffix(".json")
        probe = FileLock(lock)
        try:
            probe.acquire(timeout=0)
        except Timeout:
            try:
                info = json.loads(note.read_text(encoding="utf-8"))
                out.append(f"{info['what']} (pid {info['pid']}, since {info['since']} UTC)")
            except (OSError, ValueError, KeyError):
                out.append(f"a process ({lock.name})")
            continue
        probe.release()
        pid = lock.name.split("-", 1)[0]
        if pid.isdigit() and not store._alive(int(pid)):  # its holder died: tidy up
            for p in (lock, note):
                p.unlink(missing_ok=True)
    return out


__all__ = ["holders", "holding"]
