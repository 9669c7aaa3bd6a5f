"""The artifact store under .gpux/: content hashes, per-target locks, atomic publish, manifests, cleanup."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STORE_ENV = "GPUX_STORE"
MANIFEST = "manifest.json"
MANIFEST_SCHEMA = 1


def store_root(project_root: Path, override: str | Path | None = None) -> Path:
    """`.gpux/` beside gpux.yml unless --store or GPUX_STORE says otherwise."""
    chosen = override or os.environ.get(STORE_ENV)
    return Path(chosen).resolve() if chosen else project_root / ".gpux"


def sha256_file(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def memoised(paths: list[Path], memo_file: Path | None, compute: Callable[[Path], Any]) -> list[Any]:
    """`compute(p)` for each path, remembered in `memo_file` by (size, mtime_ns) so unchanged files are not
    read again; the memo is read once and written once, and only into a store that exists already (commands
    that only read, such as `inspect`, never create one)."""
    memo: dict[str, list[Any]] = {}
    if memo_file is not None and memo_file.is_file():
        with contextlib.suppress(OSError, ValueError):
            memo = json.loads(memo_file.read_text())
    changed, out = False, []
    for p in paths:
        st = p.stat()
        key = str(p.resolve())
        entry = memo.get(key)
        if not (isinstance(entry, list) and entry[:2] == [st.st_size, st.st_mtime_ns]):
            entry = memo[key] = [st.st_size, st.st_mtime_ns, compute(p)]
            changed = True
        out.append(entry[2])
    if changed and memo_file is not None and memo_file.parent.is_dir():
        with contextlib.suppress(OSError):
            atomic_write_text(memo_file, json.dumps(memo))
    return out


def digest_files(paths: list[Path], root: Path, cache_file: Path | None = None) -> str:
    """One sha256 over several files (name + bytes), memoised by (size, mtime_ns) in `cache_file`."""
    ordered = sorted(paths)
    h = hashlib.sha256()
    for p, digest in zip(ordered, memoised(ordered, cache_file, sha256_file), strict=True):
        h.update(f"{os.path.relpath(p, root)}\0{digest}\n".encode())
    return h.hexdigest()


def atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive inter-process lock on `path` (an OS lock: released by the OS if the process dies)."""
    from filelock import FileLock

    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(path, mode=0o644):
        yield


@dataclass
class Artifact:
    """A published artifact folder and its manifest."""

    dir: Path
    manifest: dict[str, Any]

    @property
    def main(self) -> Path:
        return self.dir / self.manifest["main"]

    @property
    def id(self) -> str:
        return str(self.manifest["target"]["id"])

    def size(self) -> int:
        return sum(int(f["size"]) for f in self.manifest["files"].values())


def file_table(workdir: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for p in sorted(workdir.rglob("*")):
        if p.is_file() and p.name != MANIFEST:
            st = p.stat()
            rel = p.relative_to(workdir).as_posix()
            out[rel] = {"sha256": sha256_file(p), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    return out


def publish(workdir: Path, final: Path, manifest: dict[str, Any]) -> Artifact:
    """Write the manifest last, then rename the whole folder into place in one step."""
    manifest = {**manifest, "files": file_table(workdir)}
    atomic_write_text(workdir / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True))
    os.chmod(workdir / MANIFEST, 0o644)
    os.chmod(workdir, 0o755)
    published = read_manifest(workdir)  # mtimes as they are now
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.exists():
        discard(final)
    os.replace(workdir, final)
    return Artifact(final, published.manifest if published else manifest)


def read_manifest(folder: Path) -> Artifact | None:
    try:
        data = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    target = data.get("target") if isinstance(data, dict) else None
    if (not isinstance(data, dict) or data.get("schema") != MANIFEST_SCHEMA
            or not isinstance(data.get("files"), dict) or not isinstance(data.get("main"), str)
            or not isinstance(target, dict) or not {"id", "step"} <= set(target)
            or not isinstance(data.get("key_parts"), dict)):
        return None
    return Artifact(folder, data)


def check(artifact: Artifact, full: bool) -> str | None:
    """None when every file matches the manifest; else what is wrong. `full` re-hashes the bytes."""
    for rel, meta in artifact.manifest["files"].items():
        p = artifact.dir / rel
        try:
            st = p.stat()
        except OSError:
            return f"{rel} is missing"
        if st.st_size != meta["size"]:
            return f"{rel} has {st.st_size} bytes, the manifest says {meta['size']}"
        if (full or st.st_mtime_ns != meta.get("mtime_ns")) and sha256_file(p) != meta["sha256"]:
            return f"{rel} does not match its sha256 in the manifest"
    return None


def discard(folder: Path) -> None:
    """Move a folder out of the way atomically, then delete it."""
    trash = folder.parent.parent / ".tmp" / f"trash-{folder.name}-{os.getpid()}-{time.monotonic_ns()}"
    trash.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(folder, trash)
    except OSError:
        return
    shutil.rmtree(trash, ignore_errors=True)


def new_workdir(root: Path, label: str) -> Path:
    tmp = root / ".tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(dir=tmp, prefix=f"{label}.pid{os.getpid()}."))


def stale_workdirs(root: Path) -> list[Path]:
    """Leftovers of interrupted builds: temp folders whose process is gone."""
    out = []
    for p in (root / ".tmp").glob("*"):
        m = re.search(r"\.pid(\d+)\.", p.name)
        if p.name.startswith("trash-") or m is None or not _alive(int(m.group(1))):
            out.append(p)
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def artifacts(root: Path, name: str | None = None) -> list[Artifact]:
    """Every published artifact in the store (of one model, or all)."""
    pattern = f"{name}/*/{MANIFEST}" if name else f"*/*/{MANIFEST}"
    found = [read_manifest(p.parent) for p in sorted(root.glob(pattern))]
    return [a for a in found if a is not None]


def discard_tmp(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)


def _failure_file(root: Path, name: str, folder: str) -> Path:
    return root / ".failed" / f"{name}-{folder}.json"


def remember_failure(root: Path, name: str, folder: str, key: str, message: str, hint: str | None) -> None:
    """Record that building the artifact `folder` (keyed like it: model, options, runtime versions) failed."""
    with contextlib.suppress(OSError):
        atomic_write_text(_failure_file(root, name, folder),
                          json.dumps({"key": key, "message": message, "hint": hint}))


def recall_failure(root: Path, name: str, folder: str, key: str) -> dict[str, Any] | None:
    """The recorded failure of this exact build, if any (a changed model, option or runtime misses)."""
    try:
        doc = json.loads(_failure_file(root, name, folder).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("key") == key else None


@contextlib.contextmanager
def scratch(workdir: Path) -> Iterator[None]:
    """Run a build step with the working directory and temp folder inside the build's own temp folder, so
    files runtimes write beside themselves (quantizers, shape inference) stay in the store and vanish."""
    folder = workdir / ".scratch"
    folder.mkdir()
    cwd, tmp = os.getcwd(), tempfile.tempdir
    os.chdir(folder)
    tempfile.tempdir = str(folder)
    try:
        yield
    finally:
        os.chdir(cwd)
        tempfile.tempdir = tmp
        shutil.rmtree(folder, ignore_errors=True)
