"""The image of each provider: its base image, runtime distributions, pinned requirements and Dockerfile.

Each registry row says how its provider's image is made and run (`Provider.image`, `TorchDevice.image` for
providers set to `runtime: torch`, `Provider.no_container` for those a Linux container cannot run);
`plan_image` turns such a row, gpux.yml's `package:` section and the key parts of the artifacts this machine
builds into an `ImagePlan`: the pins that let those artifacts be reused inside the image (or why they cannot
be), and the Dockerfile text.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpux import report
from gpux.config.load import Project
from gpux.deploy.serve_image import ServeImage, serve_requirements
from gpux.deploy.wheel import wheel_name, wheel_requirements
from gpux.errors import UsageError
from gpux.providers import TORCH_INDEX_URL, ImageRow, registry
from gpux.providers.builtin import CUDA_BASE
from gpux.version import __version__

VENV = "/opt/gpux"
MODEL_DIR = "/model"
STORE_DIR = "/var/lib/gpux/store"
HOME_DIR = "/var/lib/gpux/home"



def _placed(row: ImageRow) -> ImageRow:
    """The row with its note naming the image's artifact store."""
    return dataclasses.replace(row, note=row.note.format(store=STORE_DIR))


# providers with an image, and those a Linux container cannot run (and why): read from the registry's rows
IMAGES: dict[str, ImageRow] = {name: _placed(row.image) for name, row in registry().items() if row.image is not None}
REFUSED: dict[str, str] = {name: row.no_container for name, row in registry().items() if row.no_container}


@dataclass(kw_only=True)
class ImagePlan:
    """Everything the Dockerfile and the build context are made from."""

    name: str
    version: str
    provider: str
    row: ImageRow
    base_image: str
    tag: str
    requirements: list[str]
    apt: list[str]
    wheel: str
    reuse: bool  # the host artifacts are copied: their keys can match inside the image
    notes: list[str] = field(default_factory=list)
    artifacts: list[Path] = field(default_factory=list)
    ca_bundle: Path | None = None
    serve: ServeImage | None = None  # the entry point is `gpux serve` instead of `gpux run`
    torch: str | None = None  # the torch requirement installed from the row's torch_index

    def dockerfile(self) -> str:
        q = shlex.join
        lines = [f"# gpux package: {self.name} {self.version} for {self.provider} (gpux {__version__})",
                 f"FROM {self.base_image}"]
        if self.apt:
            lines.append("RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y "
                         f"--no-install-recommends {q(self.apt)} && rm -rf /var/lib/apt/lists/*")
        env = {"PATH": f"{VENV}/bin:$PATH", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_CACHE_DIR": "1",
               "PIP_PROGRESS_BAR": "off"}
        if self.ca_bundle:
            lines.append("COPY gpux-ca.crt /etc/gpux/ca.crt")
            env["PIP_CERT"] = "/etc/gpux/ca.crt"
        check = 'import sys; sys.exit("gpux needs Python >= 3.11" if sys.version_info < (3, 11) else 0)'
        lines += [f"RUN python3 -c {shlex.quote(check)} && python3 -m venv --system-site-packages {VENV}",
                  "ENV " + " ".join(f"{k}={v}" for k, v in env.items())]
        if self.torch and self.row.torch_index:
            lines.append(f"RUN pip install --index-url {TORCH_INDEX_URL}{self.row.torch_index} {q([self.torch])}")
        lines += ["COPY wheels/ /tmp/gpux-wheels/",
                  f"RUN pip install {q([f'/tmp/gpux-wheels/{self.wheel}', *self.requirements])} "
                  "&& rm -rf /tmp/gpux-wheels",
                  f"ENV GPUX_PROVIDER={self.provider} GPUX_STORE={STORE_DIR} GPUX_HOME={HOME_DIR}",
                  f"COPY model/ {MODEL_DIR}/"]
        if self.reuse and self.artifacts:
            lines.append(f"COPY store/ {STORE_DIR}/")
        if self.row.image_build:
            probe = "GPUX_PROBE_DEVICES=0 " if self.row.no_device_probe else ""
            lines.append(f"RUN {probe}gpux build {MODEL_DIR} --provider {self.row.image_build} --strict")
        labels = {"org.opencontainers.image.title": self.name, "org.opencontainers.image.version": self.version,
                  "io.gpux.provider": self.provider, "io.gpux.gpus": "all" if self.row.gpus else "none"}
        lines += ["LABEL " + " ".join(f"{k}={json.dumps(v)}" for k, v in labels.items()),
                  f"WORKDIR {MODEL_DIR}"]
        lines += (self.serve.dockerfile_lines(MODEL_DIR) if self.serve
                  else ["ENTRYPOINT " + json.dumps(["gpux", "run", MODEL_DIR])])
        return "\n".join(lines) + "\n"

    def run_flags(self) -> list[str]:
        flags = ["--gpus", "all"] if self.row.gpus else []
        for d in self.row.devices:
            flags += ["--device", d]
        return flags

    def run_line(self, args: str | None = None) -> str:
        if self.serve:
            return shlex.join(["docker", "run", "--rm", *self.run_flags(), *self.serve.publish_flags(), self.tag])
        return shlex.join(["docker", "run", "--rm", *self.run_flags(), self.tag]) + f" {args or '--benchmark'}"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "provider": self.provider, "tag": self.tag, "base_image": self.base_image,
                "requirements": self.requirements, "apt": self.apt, "gpus": self.row.gpus,
                "devices": list(self.row.devices), "reuse_artifacts": self.reuse, "notes": self.notes,
                "artifacts": [p.name for p in self.artifacts] if self.reuse else [],
                "torch": self.torch, "torch_index": self.row.torch_index,
                "image_build": self.row.image_build, "run": self.run_line()}


def choose_provider(project: Project, provider: str | None) -> str:
    """The selection's first provider (--provider, GPUX_PROVIDER, `gpux use`, runtime.backend, the tune lock),
    made for another machine (nothing probed here); under auto the last resort (the portable image)."""
    from gpux.plan.select import last_resort, select

    if provider and ("," in provider or provider == "auto"):
        raise UsageError(f"--provider {provider}: an image is made for one provider",
                         hint=f"pick one of {', '.join(IMAGES)}")
    selection = select(project, provider, here=False)
    for w in selection.warnings:
        report.warn(w)
    name = selection.chain[0]
    if selection.source == "auto" and last_resort() in selection.chain:
        name = last_resort()
    if name in REFUSED:
        raise UsageError(f"cannot package {name}: {REFUSED[name]}", hint=f"package one of {', '.join(IMAGES)}")
    if name not in IMAGES:
        raise UsageError(f"unknown provider {name!r}; expected one of {', '.join(IMAGES)}")
    return name


def image_row(project: Project, provider: str) -> ImageRow:
    """The provider's image row: PyTorch's own for a provider set to `runtime: torch`."""
    from gpux.providers import runtime_of

    row = registry()[provider].image_for(runtime_of(project, provider))
    if row is None:
        raise UsageError(f"cannot package {provider}: {REFUSED.get(provider) or 'it has no image'}",
                         hint=f"package one of {', '.join(IMAGES)}")
    return _placed(row)


def torch_requirement(reqs: list[str]) -> tuple[list[str], str]:
    """The torch pin taken out of `reqs` (installed from the wheel index instead), else this machine's torch
    version without its local build tag (+cpu, +cu128): the index picks the build."""
    from gpux.optional import version_of

    pinned = next((r for r in reqs if _req_name(r) == "torch"), None)
    here = version_of("torch")
    return [r for r in reqs if _req_name(r) != "torch"], pinned or (f"torch=={here.split('+')[0]}" if here else "torch")


def default_tag(project: Project, provider: str) -> str:
    repo = re.sub(r"[^a-z0-9._-]", "-", project.name.lower()).strip("._-") or "model"
    tag = re.sub(r"[^A-Za-z0-9_.-]", "-", f"{project.config.version}-{provider}")[:128]
    return f"gpux/{repo}:{tag}"


def _req_name(req: str) -> str:
    return re.split(r"[\s<>=!~;\[@]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def pin_requirements(wanted: Iterable[str], versions: dict[str, str | None],
                     always: Iterable[str] = ()) -> tuple[list[str], list[str]]:
    """Pin `wanted` to the versions the artifacts' keys name; say why those keys cannot match in the image.

    `versions` is a key's `versions` part ({"onnxruntime": "onnxruntime 1.31.1", "onnx": "1.23.2"});
    `always` are distributions the image gets anyway (gpux's own dependencies).
    """
    reqs = list(dict.fromkeys(wanted))
    names = {_req_name(r): r for r in reqs}
    present = set(names) | {_req_name(a) for a in always}
    pins: dict[str, str] = {}
    misses: list[str] = []
    for pkg, value in sorted(versions.items()):
        if value is None:
            if pkg in present:
                misses.append(f"{pkg} is not installed here but the image installs it")
            continue
        dist, _, ver = value.rpartition(" ") if " " in value else (pkg, "", value)
        dist = dist.lower()
        spec = names.get(dist)
        if dist not in present:
            instead = [n for n in names if n.startswith(pkg)] or ["no " + pkg]
            misses.append(f"the artifacts were built with {dist} {ver}; the image has {', '.join(instead)}")
        elif spec is not None and spec.strip().lower() != dist and spec.replace(" ", "") != f"{dist}=={ver}":
            misses.append(f"package.packages asks for {spec}; the artifacts were built with {dist} {ver}")
        else:
            pins[dist] = ver
    out = [f"{_req_name(r)}=={pins.pop(_req_name(r))}" if _req_name(r) in pins else r for r in reqs]
    out += [f"{d}=={v}" for d, v in pins.items()]
    return out, misses


def plan_image(project: Project, provider: str, key_parts: list[dict[str, Any]], *,
               base_image: str | None = None, tag: str | None = None, ca_bundle: str | None = None,
               serve: bool = False) -> ImagePlan:
    """The image for `provider`: base image, pinned requirements, and whether artifacts with these key parts
    (those of the row's host_build targets) can be built here and reused inside the image."""
    row = image_row(project, provider)
    cfg = project.config.package
    per_provider = {str(k): v for k, v in cfg.base_images.items()}
    base = base_image or per_provider.get(provider) or cfg.base_image or row.base_image
    if base is None:
        raise UsageError(f"{provider} images need a base image: {row.note}",
                         hint="pass --base-image IMAGE (or set package.base_image in gpux.yml)")
    versions: dict[str, str | None] = {}
    notes = [row.note] if row.note else []
    for parts in key_parts:
        versions.update(parts.get("versions") or {})
        if parts.get("device"):
            notes.append(f"{parts['step']} artifacts are keyed to this machine's "
                         f"{', '.join(str(v) for v in parts['device'].values())}: on another, gpux rebuilds "
                         "them in the container on the first run")
    extra = serve_requirements() if serve else []
    always = [*wheel_requirements(), *(["torch"] if row.torch_index else [])]
    reqs, misses = pin_requirements([*row.pip, *extra, *cfg.packages], versions, always=always)
    torch = None
    if row.torch_index:
        reqs, torch = torch_requirement(reqs)
    reuse = bool(key_parts) and not misses
    if key_parts and misses:
        notes.append("artifacts are built inside the image, not copied from here: " + "; ".join(misses))
    apt = list(dict.fromkeys([*row.apt, *cfg.system_packages]))
    ports = project.config.serve
    return ImagePlan(name=project.name, version=str(project.config.version), provider=provider, row=row,
                     base_image=base, tag=tag or default_tag(project, provider), requirements=reqs, apt=apt,
                     wheel=wheel_name(), reuse=reuse, notes=notes, ca_bundle=chosen_ca_bundle(project, ca_bundle),
                     torch=torch, serve=ServeImage(ports.http_port or 8000, ports.grpc_port) if serve else None)


def chosen_ca_bundle(project: Project, flag: str | None) -> Path | None:
    """--ca-bundle, else package.ca_bundle (relative to gpux.yml), else none: an image never inherits the
    build host's trust store unless asked."""
    if flag is None and project.config.package.ca_bundle is None:
        return None
    where, path = ("--ca-bundle", Path(flag)) if flag is not None else \
        ("package.ca_bundle", project.root / str(project.config.package.ca_bundle))
    if not path.is_file():
        raise UsageError(f"{where}: {path} is not a file",
                         hint="name a PEM bundle, e.g. /etc/ssl/certs/ca-certificates.crt")
    return path



__all__ = ["CUDA_BASE", "IMAGES", "REFUSED", "ImagePlan", "ImageRow", "choose_provider", "default_tag", "image_row",
           "pin_requirements", "plan_image"]
