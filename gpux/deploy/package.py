"""Container images per provider: a build context (Dockerfile, project, artifacts, gpux wheel), built by Docker.

`gpux package` builds the provider's artifacts on this machine, writes a build context and builds it on the
engine `DOCKER_HOST` names. The image installs gpux and the provider's runtime with pip, pinned to the
versions the packaged artifacts' cache keys name, then runs `gpux build` once at image build time: a cache
hit when the keys match there, a rebuild inside the image when they cannot. Its entry point is
`gpux run /model`, so `docker run IMAGE --input '{...}' --json` and `docker run IMAGE --benchmark` work;
with `--serve` it is `gpux serve /model` (ports exposed, a readiness healthcheck).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
import shlex
import shutil
import sys
import time
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gpux
from gpux import report
from gpux.artifacts import store
from gpux.config.load import Project
from gpux.config.schema import PROVIDERS
from gpux.deploy.docker import (
    Progress,
    build_image,
    connect,
    ensure_base_image,
    run_image,
)
from gpux.errors import UsageError
from gpux.providers import TORCH_INDEX, TORCH_INDEX_URL
from gpux.serve.image import ServeImage, serve_requirements

CUDA_BASE = "nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04"  # Ubuntu 24.04: Python 3.12 from apt (22.04 has 3.10)
VENV = "/opt/gpux"
MODEL_DIR = "/model"
STORE_DIR = "/var/lib/gpux/store"
HOME_DIR = "/var/lib/gpux/home"
WRITTEN = ("Dockerfile", "gpux-ca.crt", "wheels", "model", "store")  # what a context folder holds


@dataclass(frozen=True)
class ImageRow:
    """How the image of one provider is made and run."""

    base_image: str | None  # None: the user must name one (--base-image or package.base_image)
    pip: tuple[str, ...]  # runtime distributions pip installs beside gpux
    apt: tuple[str, ...] = ()  # system packages the base image needs for Python >= 3.11 and venv
    gpus: bool = False  # request every GPU at run time (DeviceRequest count=-1, capabilities [[gpu]])
    devices: tuple[str, ...] = ()  # host devices passed at run time
    host_build: str | None = None  # provider whose artifacts this machine builds and the image may reuse
    image_build: str | None = None  # provider `gpux build` runs for at image build time
    no_device_probe: bool = False  # the image build machine has no GPU: build without the device probe
    note: str = ""
    torch_index: str | None = None  # runtime torch: the PyTorch wheel index torch is installed from


IMAGES: dict[str, ImageRow] = {
    "cpu": ImageRow("python:3.11-slim", ("onnxruntime",), host_build="cpu", image_build="cpu"),
    "openvino": ImageRow("python:3.11-slim", ("openvino", "nncf", "onnxruntime"), host_build="openvino",
                         image_build="openvino"),
    "cuda": ImageRow(CUDA_BASE, ("onnxruntime-gpu",), ("python3", "python3-venv"), gpus=True,
                     host_build="cuda", image_build="cuda", no_device_probe=True),
    "tensorrt": ImageRow(CUDA_BASE, ("onnxruntime-gpu", "tensorrt"), ("python3", "python3-venv"), gpus=True,
                         host_build="cuda", image_build="cuda", no_device_probe=True,
                         note="the TensorRT engine is keyed by the GPU: it is built on the first run; mount a "
                              f"volume at {STORE_DIR} to keep it"),
    "rocm": ImageRow(None, (), devices=("/dev/kfd", "/dev/dri"), host_build="rocm", image_build="rocm",
                     no_device_probe=True,
                     note="ONNX Runtime for ROCm is not on PyPI: the base image must provide it"),
}  # fmt: skip
_COMPILED_ON_FIRST_RUN = ("PyTorch compiles for the GPU it runs on: the first run builds the artifact (and "
                         f"its Inductor cache) in the container; mount a volume at {STORE_DIR} to keep it")
# providers set to `runtime: torch`: PyTorch from its own wheel index (the builds with that backend's libraries)
TORCH_IMAGES: dict[str, ImageRow] = {
    "cpu": ImageRow("python:3.11-slim", (), host_build="cpu", image_build="cpu",
                    torch_index=TORCH_INDEX["cpu"]),
    "cuda": ImageRow("python:3.11-slim", (), gpus=True, torch_index=TORCH_INDEX["cuda"], note=_COMPILED_ON_FIRST_RUN),
    "rocm": ImageRow("python:3.11-slim", (), devices=("/dev/kfd", "/dev/dri"), torch_index=TORCH_INDEX["rocm"],
                     note=_COMPILED_ON_FIRST_RUN),
}
REFUSED = {
    "mps": "Metal (MPS) runs on macOS only; a Linux container cannot reach the Apple GPU",
    "coreml": "Core ML runs on macOS only; a Linux container cannot reach the Apple Neural Engine or GPU",
    "directml": "DirectML needs Windows and DirectX 12; a Linux container cannot use it",
}


@dataclass
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
        lines = [f"# gpux package: {self.name} {self.version} for {self.provider} (gpux {gpux.__version__})",
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
    """--provider, else GPUX_PROVIDER or runtime.backend when they name one, else cpu (the portable image)."""
    from gpux.plan.choice import choose

    if provider and ("," in provider or provider == "auto"):
        raise UsageError(f"--provider {provider}: an image is made for one provider",
                         hint=f"pick one of {', '.join(IMAGES)}")
    _, selection, warnings = choose(project, provider)
    from gpux import report

    for w in warnings:
        report.warn(w)
    name = selection.chain[0]
    if selection.source == "auto" and "cpu" in selection.chain:
        name = "cpu"
    if name in REFUSED:
        raise UsageError(f"cannot package {name}: {REFUSED[name]}", hint=f"package one of {', '.join(IMAGES)}")
    if name not in IMAGES:
        raise UsageError(f"unknown provider {name!r}; expected one of {', '.join(IMAGES)}")
    return name


def image_row(project: Project, provider: str) -> ImageRow:
    """The provider's image row: PyTorch's own for a provider set to `runtime: torch`."""
    from gpux.providers import runtime_of

    if runtime_of(project, provider) == "torch" and provider in TORCH_IMAGES:
        return TORCH_IMAGES[provider]
    return IMAGES[provider]


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
    return ImagePlan(project.name, str(project.config.version), provider, row, base,
                     tag or default_tag(project, provider), reqs, apt, wheel_name(), reuse, notes,
                     ca_bundle=chosen_ca_bundle(project, ca_bundle), torch=torch,
                     serve=ServeImage(ports.http_port or 8000, ports.grpc_port) if serve else None)


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


# -- the gpux wheel: written from the running package, so images need neither a source tree nor PyPI for gpux --
def wheel_name() -> str:
    return f"gpux_ml-{gpux.__version__}-py3-none-any.whl"


def wheel_requirements() -> list[str]:
    """gpux's own dependencies: from pyproject.toml in a source checkout, else the installed metadata."""
    import tomllib
    from importlib import metadata

    pyproject = Path(gpux.__file__).resolve().parent.parent / "pyproject.toml"
    with contextlib.suppress(OSError, ValueError, KeyError):
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
        if data.get("name") == "gpux-ml":
            return list(data.get("dependencies", []))
    try:
        return [r for r in metadata.requires("gpux-ml") or [] if "extra ==" not in r]
    except metadata.PackageNotFoundError:
        return []


def write_wheel(dest: Path) -> Path:
    """A pure-Python wheel of the running gpux package (fixed timestamps: same bytes, same image layer)."""
    pkg = Path(gpux.__file__).resolve().parent
    dist_info = f"gpux_ml-{gpux.__version__}.dist-info"
    files = {f"gpux/{p.relative_to(pkg).as_posix()}": p.read_bytes() for p in sorted(pkg.rglob("*"))
             if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")}
    meta = ["Metadata-Version: 2.1", "Name: gpux-ml", f"Version: {gpux.__version__}", "Requires-Python: >=3.11",
            *(f"Requires-Dist: {r}" for r in wheel_requirements())]
    files[f"{dist_info}/METADATA"] = ("\n".join(meta) + "\n").encode()
    files[f"{dist_info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: gpux\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files[f"{dist_info}/entry_points.txt"] = b"[console_scripts]\ngpux = gpux.cli.main:main\n"
    record = [f"{name},sha256={_b64(hashlib.sha256(data).digest())},{len(data)}" for name, data in files.items()]
    files[f"{dist_info}/RECORD"] = ("\n".join([*record, f"{dist_info}/RECORD,,"]) + "\n").encode()
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / wheel_name()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            zf.writestr(info, data, zipfile.ZIP_DEFLATED)
    return out


def _b64(digest: bytes) -> str:
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


# -- the build context -----------------------------------------------------------------------------------------
def project_files(project: Project, io: Any) -> tuple[str, list[tuple[Path, str]]]:
    """(model.source as packaged, [(file here, path under model/)]): the source, its external data, labels,
    verification data and calibration data. Files other than the source must lie inside the project folder."""
    from gpux.artifacts.build import source_files

    root, src = project.root.resolve(), project.source
    try:
        source_rel = src.relative_to(root).as_posix()
    except ValueError:
        source_rel = src.name
    out = [(src, source_rel)]
    for f in source_files(project, io)[1:]:
        out.append((f, (Path(source_rel).parent / f.relative_to(src.parent)).as_posix()))
    cfg = project.config
    named = [s.labels for s in [*(cfg.inputs or {}).values(), *(cfg.outputs or {}).values()]
             if isinstance(s.labels, str)]
    named += [cfg.verify.data] if cfg.verify.data else []
    named += [c for p in PROVIDERS if (c := getattr(getattr(cfg.providers, p), "calibration", None))]
    for rel in named:
        path = (root / rel).resolve()
        if not path.is_relative_to(root):
            raise UsageError(f"{project.path}: {rel} lies outside the project folder; an image cannot hold it",
                             hint=f"move it into {root}")
        found = sorted(x for x in path.rglob("*") if x.is_file()) if path.is_dir() else [path]
        out += [(x, x.relative_to(root).as_posix()) for x in found]
    return source_rel, list(dict.fromkeys(out))


def packaged_config(project: Project, source_rel: str) -> str:
    """gpux.yml for the image: the file as written, with model.source rewritten only where it moved."""
    import yaml

    if not project.path.is_file():  # a bare .onnx file: gpux.yml is implied
        return yaml.safe_dump({"name": project.name, "model": {"source": source_rel}}, sort_keys=False)
    text = project.path.read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    written = str((data.get("model") or {}).get("source", ""))
    if (project.root / written).resolve() == (project.root / source_rel).resolve():
        return text
    data["model"]["source"] = source_rel
    return yaml.safe_dump(data, sort_keys=False)


def write_context(plan: ImagePlan, project: Project, io: Any, out: Path, link: bool = False) -> Path:
    """Write Dockerfile, model/, store/, wheels/ and the CA bundle into `out` (created or emptied of them)."""
    if out.exists() and any(p.name not in WRITTEN for p in out.iterdir()):
        raise UsageError(f"{out} holds files gpux did not write; the whole folder is the image's build context",
                         hint="pass an empty or new folder")
    out.mkdir(parents=True, exist_ok=True)
    for name in WRITTEN:
        p = out / name
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()
    copy = _link_or_copy if link else shutil.copy2
    source_rel, files = project_files(project, io)
    for src, rel in files:
        (out / "model" / rel).parent.mkdir(parents=True, exist_ok=True)
        copy(src, out / "model" / rel)
    (out / "model" / "gpux.yml").write_text(packaged_config(project, source_rel), encoding="utf-8")
    if plan.reuse:
        for art in plan.artifacts:
            shutil.copytree(art, out / "store" / project.name / art.name, copy_function=copy)
    write_wheel(out / "wheels")
    if plan.ca_bundle:
        shutil.copyfile(plan.ca_bundle, out / "gpux-ca.crt")
    (out / "Dockerfile").write_text(plan.dockerfile(), encoding="utf-8")
    return out


def _link_or_copy(src: Any, dst: Any) -> Any:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
    return dst


# -- the command -----------------------------------------------------------------------------------------------
def host_key_parts(project: Project, provider: str | None, io: Any) -> list[dict[str, Any]]:
    """Key parts of the targets this machine would build for `provider` (versions, device), without building."""
    from gpux.artifacts.build import keyed_targets
    from gpux.model.io import effective_io

    if provider is None:
        return []
    inputs, _ = effective_io(project, io)
    return [parts for _, parts, _ in keyed_targets(project, provider, inputs, "")]


@dataclass(frozen=True)
class PackageRequest:
    """What `gpux package` was asked for (the click options, by name)."""

    path: str = "."
    provider: str | None = None
    tag: str | None = None
    out_dir: str | None = None
    base_image: str | None = None
    run_args: str | None = None
    ca_bundle: str | None = None
    serve: bool = False
    store: str | None = None
    as_json: bool = False


def package_command(req: PackageRequest) -> int:
    from gpux.artifacts.build import build
    from gpux.config.locate import open_project
    from gpux.model.io import load_checked

    if req.serve and req.run_args is not None:
        raise UsageError("--run runs the image once with `gpux run` arguments; a --serve image keeps serving",
                         hint="start it with the `docker run` line printed after the build")
    project = open_project(req.path)
    for w in project.warnings:
        report.warn(w)
    name = choose_provider(project, req.provider)
    client = None if req.out_dir else connect()  # before building anything: fail fast without an engine
    io = load_checked(project)
    row = image_row(project, name)
    plan = plan_image(project, name, host_key_parts(project, row.host_build, io), base_image=req.base_image,
                      tag=req.tag, ca_bundle=req.ca_bundle, serve=req.serve)
    if plan.reuse and row.host_build:
        built = build(project, row.host_build, store_dir=req.store, log=report.progress(req.as_json), io=io)
        plan.artifacts = [r.artifact.dir for r in built.results]
    for note in plan.notes:
        report.info(f"note: {note}")
    if req.out_dir:
        return _write_only(req, plan, project, io)
    return _build_and_run(req, plan, project, io, client)


def _write_only(req: PackageRequest, plan: ImagePlan, project: Project, io: Any) -> int:
    """--dockerfile-only: the build context in a folder, and the commands that build and run it."""
    doc: dict[str, Any] = plan.to_dict()
    ctx = write_context(plan, project, io, Path(str(req.out_dir)))
    doc["context"] = str(ctx)
    doc["build"] = shlex.join(["docker", "build", "--network", "host", "-t", plan.tag, str(ctx)])
    if req.as_json:
        report.emit_json(doc)
    else:
        print(f"wrote {ctx}/Dockerfile and its build context")
        print(f"build it: {doc['build']}")
        print(f"run it:   {plan.run_line()}")
    return 0


def _build_and_run(req: PackageRequest, plan: ImagePlan, project: Project, io: Any, client: Any) -> int:
    """Build the image on the engine (and run it once with --run)."""
    doc: dict[str, Any] = plan.to_dict()
    ensure_base_image(client, plan.base_image, report.info)
    started = time.perf_counter()
    tmp = store.new_workdir(store.store_root(project.root, req.store), f"package-{plan.provider}")  # hardlinks
    try:
        ctx = write_context(plan, project, io, tmp / "context", link=True)
        doc["image_id"] = build_image(client, ctx, plan.tag, Progress())
    finally:
        store.discard_tmp(tmp)
    doc["seconds"] = round(time.perf_counter() - started, 2)
    code = 0
    if req.run_args is not None:
        result = run_image(client, plan.tag, shlex.split(req.run_args), plan.row.gpus, plan.row.devices)
        doc["run_result"] = {"args": shlex.split(req.run_args), "exit_code": result.exit_code,
                             "stdout": result.stdout, "stderr": result.stderr}
        code = result.exit_code
    if req.as_json:
        report.emit_json(doc)
        return code
    print(f"built {plan.tag} ({doc['image_id'][:19]}) from {plan.base_image} in {doc['seconds']:.1f}s")
    print(f"run it: {plan.run_line()}")
    if req.run_args is not None:
        sys.stderr.write(doc["run_result"]["stderr"])
        sys.stdout.write(doc["run_result"]["stdout"])
    return code


__all__ = ["IMAGES", "REFUSED", "ImagePlan", "PackageRequest", "package_command", "plan_image", "write_context",
           "write_wheel"]
