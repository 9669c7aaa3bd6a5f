"""gpux.lock.json, the choice `gpux tune` measured: followed only on the machine, runtimes, config and model
it was measured with (its fingerprint); anything else says why and selects as usual."""

from __future__ import annotations

import hashlib
import json
import platform
from dataclasses import dataclass
from typing import Any, TypedDict

from gpux.config.load import Project
from gpux.providers.options import OptionFields
from gpux.version import __version__


class Fingerprint(TypedDict):
    """What a tune lock's figures depend on (`plan.lock.fingerprint`): the machine, the runtimes, gpux, the config
    and the model."""

    cpu: str
    cpu_flags: list[str]
    machine: str
    os: str
    cores: int | None
    gpux: str
    runtimes: dict[str, str | None]
    config_sha256: str
    model_sha256: str

LOCK_NAME = "gpux.lock.json"
COMPARED = ("cpu", "cpu_flags", "machine", "os", "cores", "runtimes", "config_sha256", "model_sha256")
OPTIONAL = ("cpu_flags",)  # locks written before it was recorded are judged on the rest
SCHEMA = 1


def fingerprint(project: Project) -> Fingerprint:
    """What the figures depend on: this machine, the runtimes, gpux, the config and the model."""
    from gpux.files import digest_files, store_root
    from gpux.machine import cpu_flags, environment_facts
    from gpux.model.io import load_checked, source_files
    from gpux.optional import version_of

    files = source_files(project, load_checked(project))
    host = environment_facts()
    memo = store_root(project.root) / ".hashes.json"  # the build's memo: a large model is not read again
    return {"cpu": host["cpu_model"], "cpu_flags": list(cpu_flags()), "machine": platform.machine(),
            "os": platform.system(), "cores": host["available_cpus"],
            "gpux": __version__,
            "runtimes": {p: version_of(p) for p in ("onnxruntime", "openvino", "nncf", "torch", "tensorrt")},
            "config_sha256": hashlib.sha256(project.path.read_bytes()).hexdigest(),
            "model_sha256": digest_files(files, project.source.parent, memo)}



@dataclass(frozen=True, kw_only=True)
class Locked:
    provider: str
    options: OptionFields
    artifacts: tuple[str, ...] = ()  # the folders of every candidate measured (the choice's among them)
    figures: dict[str, Any] | None = None  # the choice's row
    precision: str = "fp32"
    partial: str = ""  # a search cut short: how many candidates it left unmeasured, in words ("" : none)
    default: bool = False  # nothing measured beat the untuned default: the lock holds it


def partial_of(doc: dict[str, Any]) -> str:
    """`18 of 22 candidates not measured (--budget 200 s)` for a lock of a search cut short, else ""."""
    found = doc.get("search")
    search: dict[str, Any] = found if isinstance(found, dict) else {}
    if not search.get("partial"):
        return ""
    return (f"{len(search.get('unmeasured') or ())} of {search.get('candidates')} candidates not measured "
            f"(--budget {search.get('budget_s'):g} s)")


def differs_text(theirs: Fingerprint, ours: Fingerprint, differs: list[str]) -> str:
    """`cpu (measured on X; this is Y), runtimes`: what differs, the CPUs and their flags named."""
    def flags(fp: Fingerprint) -> str:
        return " ".join(fp.get("cpu_flags") or []) or "none"

    named = {"cpu": f"cpu (measured on {theirs.get('cpu')!r}; this is {ours.get('cpu')!r})",
             "cpu_flags": f"cpu flags (measured with {flags(theirs)}; this has {flags(ours)})"}
    return ", ".join(named.get(k, k) for k in differs)


def read_lock(project: Project) -> tuple[Locked | None, str | None]:
    """The lock's choice when it was measured for this machine, runtimes, config and model; else (None, why
    it is not followed). (None, None): there is no lock."""
    path = project.root / LOCK_NAME
    if not path.is_file() or project.path.name == LOCK_NAME:
        return None, None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        choice, theirs = doc["choice"], doc["fingerprint"]
    except (OSError, ValueError, KeyError, TypeError):
        return None, f"{path}: not a gpux lock; ignored (run `gpux tune` to write one)"
    ours = fingerprint(project)
    differs = [k for k in COMPARED if theirs.get(k) != ours.get(k) and (k in theirs or k not in OPTIONAL)]
    if differs:
        return None, (f"{LOCK_NAME} was measured with another {differs_text(theirs, ours, differs)}; not trusted "
                      f"here, selecting as usual (run `gpux tune` here to measure this one)")
    arts = tuple(c["artifact"] for c in doc.get("candidates") or () if isinstance(c, dict) and c.get("artifact"))
    return Locked(provider=choice["provider"], options=dict(choice.get("options") or {}), artifacts=arts,
                  figures=doc.get("figures"), precision=str(choice.get("precision") or "fp32"), partial=partial_of(doc),
                  default=bool(choice.get("default"))), None


def apply_lock(project: Project) -> tuple[Project, str | None, str | None]:
    """(project with the locked options, the locked provider, a warning): asked by plan.select.ladder only when
    nothing more explicit decides."""
    from gpux.plan.targets import fitted_options, with_options

    locked, why = read_lock(project)
    if locked is None:
        return project, None, why
    options = fitted_options(project, locked.provider, locked.options)  # as tune built it
    said = None if not locked.partial else (f"{LOCK_NAME} came from a partial search ({locked.partial}); "
                                            "`gpux tune` with a larger --budget measures the rest")
    return with_options(project, locked.provider, **options), locked.provider, said
