"""The artifact store under .gpux/: published artifact folders, their manifests, failures remembered, cleanup."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, cast

from gpux.documents import TargetDoc, VerificationDoc
from gpux.files import atomic_write_text, sha256_file, stamp

if TYPE_CHECKING:
    from gpux.plan.targets import Target
    from gpux.runtimes import Published

MANIFEST = "manifest.json"
MANIFEST_SCHEMA = 1


class FileEntry(TypedDict):
    """One file of an artifact as its manifest records it."""

    sha256: str
    size: int
    mtime_ns: int
    stamp: list[int]  # gpux.files.stamp


class Manifest(TypedDict):
    """manifest.json: what an artifact is, what its key covers, what built it, its verdict and its files."""

    schema: int
    name: str
    version: str  # the model's
    target: TargetDoc  # the Target's own document (gpux.plan.targets.Target.to_dict)
    key: str
    key_parts: dict[str, Any]  # what the key covers, digested as JSON (gpux.artifacts.plan.keyed_targets)
    main: str  # the artifact's main file, relative to its folder
    info: dict[str, Any]  # the build step's own document (what the runtime reports)
    source: str
    built_at: str
    build_seconds: float
    verification: VerificationDoc | None  # gpux.quality.verify's record
    files: dict[str, FileEntry]


@dataclass
class Artifact:
    """A published artifact folder and its manifest."""

    dir: Path
    manifest: Manifest

    @property
    def main(self) -> Path:
        return self.dir / self.manifest["main"]

    @property
    def id(self) -> str:
        return str(self.manifest["target"]["id"])

    @property
    def kind(self) -> str:
        """Its kind of artifact (gpux.runtimes.ArtifactKind)."""
        return str(self.manifest["target"]["kind"])

    @property
    def target(self) -> Target:
        """The target it was built for, as its manifest records it."""
        from gpux.plan.targets import Target  # the config models: only where an artifact is opened

        t = self.manifest["target"]
        return Target(id=str(t["id"]), kind=str(t["kind"]), provider=str(t.get("provider", "")),
                      precision=str(t.get("precision", "")), options=dict(t.get("options") or {}),
                      consumes=str(t.get("consumes", "source")))

    @property
    def info(self) -> dict[str, Any]:
        """What its build step reported (the manifest's "info" document)."""
        return self.manifest.get("info") or {}

    def size(self) -> int:
        return sum(int(f["size"]) for f in self.manifest["files"].values())


if TYPE_CHECKING:
    def _opened_as(artifact: Artifact) -> Published:  # mypy: an Artifact is what a runtime's OpenStep takes
        return artifact


def file_table(workdir: Path) -> dict[str, FileEntry]:
    out: dict[str, FileEntry] = {}
    for p in sorted(workdir.rglob("*")):
        if p.is_file() and p.name != MANIFEST:
            st = p.stat()
            rel = p.relative_to(workdir).as_posix()
            out[rel] = {"sha256": sha256_file(p), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "stamp": stamp(st)}
    return out


def publish(workdir: Path, final: Path, manifest: Manifest) -> Artifact:
    """Write the manifest last (its files listed now), then rename the whole folder into place in one step."""
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
            or not isinstance(target, dict) or "id" not in target or not {"kind", "step"} & set(target)
            or not isinstance(data.get("key_parts"), dict)):
        return None
    if "kind" not in target:  # written before the kind was called so: read as it is named now
        target["kind"] = target.pop("step")
    return Artifact(folder, cast(Manifest, data))  # its shape checked above, as far as gpux reads it


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
        if (full or stamp(st) != meta.get("stamp")) and sha256_file(p) != meta["sha256"]:
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


@dataclass(frozen=True, kw_only=True)
class Failure:
    """A build that failed, remembered for its key (`.failed/<model>-<folder>.json`); a failed verification
    also keeps its record and the build's info."""

    key: str
    message: str
    hint: str | None
    verification: VerificationDoc | None = None  # gpux.quality.verify's record of the failing verification
    info: dict[str, Any] | None = None  # what the build step reported


def remember_failure(root: Path, name: str, folder: str, failure: Failure) -> None:
    """Record that building the artifact `folder` (keyed like it: model, options, runtime versions) failed."""
    verified = failure.verification is not None or failure.info is not None
    extra = {"verification": failure.verification, "info": failure.info} if verified else {}
    with contextlib.suppress(OSError):
        atomic_write_text(_failure_file(root, name, folder),
                          json.dumps({**extra, "key": failure.key, "message": failure.message, "hint": failure.hint}))


def recall_failure(root: Path, name: str, folder: str, key: str) -> Failure | None:
    """The recorded failure of this exact build, if any (a changed model, option or runtime misses)."""
    try:
        doc = json.loads(_failure_file(root, name, folder).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("key") != key:
        return None
    return Failure(key=key, message=str(doc.get("message")), hint=doc.get("hint"),
                   verification=doc.get("verification"), info=doc.get("info"))


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
