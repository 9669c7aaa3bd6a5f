"""Files gpux keeps: the store's folder, content stamps and the hashes memoised by them, atomic writes, OS locks."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any

STORE_ENV = "GPUX_STORE"
_READING = ContextVar("reading_only", default=False)


@contextlib.contextmanager
def reading_only() -> Iterator[None]:
    """Within the block, memos are read but never written (commands that only read, such as `inspect`)."""
    token = _READING.set(True)
    try:
        yield
    finally:
        _READING.reset(token)


def may_write_memos() -> bool:
    """False within reading_only()."""
    return not _READING.get()


def store_root(project_root: Path, override: str | Path | None = None) -> Path:
    """`.gpux/` beside gpux.yml unless --store or GPUX_STORE says otherwise."""
    chosen = override or os.environ.get(STORE_ENV)
    return Path(chosen).resolve() if chosen else project_root / ".gpux"


def make_dir(path: Path, hint: str | None = None) -> Path:
    """`path` made with its parents (a store's folders); where no folder can be made (a file in the way, a place no
    folder can be, no permission) a UsageError naming it, and `hint` (default: the store's settings)."""
    from gpux.errors import UsageError

    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileNotFoundError, NotADirectoryError, FileExistsError, PermissionError) as exc:
        why = "a file is there, not a folder" if isinstance(exc, FileExistsError) else exc.strerror or exc
        raise UsageError(f"{path}: cannot create the folder: {why}",
                         hint=hint or f"name a folder gpux can write with --store or ${STORE_ENV}") from exc
    return path


def stamp(st: os.stat_result) -> list[int]:
    """What says a file is unchanged without reading it: size and mtime, and what a rewrite cannot keep (the inode:
    a file written anew and renamed over; the ctime: a file rewritten in place, even with its mtime set back)."""
    return [st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns]


def sha256_file(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def read_memo(memo_file: Path | None) -> dict[str, Any]:
    """A memo file's entries ({} when there is none, or it is unreadable)."""
    if memo_file is None or not memo_file.is_file():
        return {}
    with contextlib.suppress(OSError, ValueError):
        got = json.loads(memo_file.read_text())
        return got if isinstance(got, dict) else {}
    return {}


def write_memo(memo_file: Path | None, memo: dict[str, Any]) -> None:
    """Replace a memo file, only in a store that exists already and never within reading_only() (commands that
    only read, such as `inspect`, never create or change one); a read-only store is left as it is."""
    if memo_file is not None and memo_file.parent.is_dir() and may_write_memos():
        with contextlib.suppress(OSError):
            atomic_write_text(memo_file, json.dumps(memo))


def memoised(paths: list[Path], memo_file: Path | None, compute: Callable[[Path], Any],
             still_true: Callable[[Path, Any], bool] | None = None) -> list[Any]:
    """`compute(p)` for each path, remembered in `memo_file` by the file's `stamp` so unchanged files are not
    read again; the memo is read once and written once, and only into a store that exists already (commands
    that only read, such as `inspect`, never create one)."""
    memo = read_memo(memo_file)
    changed, out = False, []
    for p in paths:
        now = stamp(p.stat())
        key = str(p.resolve())
        entry = memo.get(key)
        if not (isinstance(entry, list) and len(entry) == 2 and entry[0] == now
                and (still_true is None or still_true(p, entry[1]))):
            entry = memo[key] = [now, compute(p)]
            changed = True
        out.append(entry[1])
    if changed:
        write_memo(memo_file, memo)
    return out


def digest_files(paths: list[Path], root: Path, cache_file: Path | None = None) -> str:
    """One sha256 over several files (name + bytes), memoised by their stamps in `cache_file`."""
    ordered = sorted(paths)
    h = hashlib.sha256()
    for p, digest in zip(ordered, memoised(ordered, cache_file, sha256_file), strict=True):
        h.update(f"{os.path.relpath(p, root)}\0{digest}\n".encode())
    return h.hexdigest()


def digest_data(path: Path, root: Path, what: str, named_in: Path) -> str:
    """The digest of declared sample data: a file, or every file under a folder (`what` and `named_in`: the data's
    kind and the gpux.yml that names it, for the error when there is none)."""
    from gpux.errors import DataError

    files = sorted(x for x in path.rglob("*") if x.is_file()) if path.is_dir() else [path]
    if not files or not all(f.is_file() for f in files):
        raise DataError(f"{named_in}: {what} data not found: {path}")
    return digest_files(files, root)


def umask() -> int:
    """The process's umask (read without changing it where /proc says it; else set and restored at once)."""
    with contextlib.suppress(OSError, ValueError, StopIteration):
        status = Path("/proc/self/status").read_text().splitlines()
        return int(next(line for line in status if line.startswith("Umask:")).split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_text(path: Path, text: str) -> None:
    """`path` replaced at once by a file holding `text`, with the mode open() would give it (the umask's)."""
    make_dir(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o666 & ~umask())
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:  # interrupted too: no half-written temporary file left behind, then re-raised
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive inter-process lock on `path` (an OS lock: released by the OS if the process dies)."""
    from filelock import FileLock

    make_dir(path.parent)
    with FileLock(path, mode=0o644):
        yield
