"""Triton model repositories: a project's built, verified artifact in Triton's layout with its config.pbtxt.

The configuration is made as a dict in the shape protobuf's `MessageToDict(preserving_proto_field_name=True)`
gives for Triton's `ModelConfig`, checked against Triton's rules that the proto itself does not enforce,
then written as protobuf text. Batching, instances and the queue delay come from the `serve:` block, so
one gpux.yml drives `gpux serve` and Triton alike.
"""

from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpux.config.load import Project
from gpux.config.steps import declared_steps
from gpux.errors import UsageError
from gpux.formats import TRITON_DATA_TYPES
from gpux.model.io import Tensor
from gpux.providers.row import Flavor
from gpux.serve.model_config import batch_dim, tensor_entries

DATA_TYPES = TRITON_DATA_TYPES  # gpux dtype -> Triton config data_type (gpux/formats.py)


ONNX = ("model.onnx",)


def flavors() -> dict[tuple[str, str], Flavor]:
    """(provider, the runtime it runs with) -> how Triton serves that artifact, from the registry's rows."""
    from gpux.providers import registry

    return {(name, runtime): f for name, row in registry().items() for runtime, f in row.triton}


def flavor_of(project: Project, provider: str) -> Flavor:
    from gpux.providers import runtime_of

    served = flavors()
    if not any(p == provider for p, _ in served):
        names = list(dict.fromkeys(p for p, _ in served))
        raise UsageError(f"--provider {provider}: Triton has no backend or ONNX Runtime accelerator for it",
                         hint=f"export for {', '.join(names[:-1])} or {names[-1]}")
    runtime = runtime_of(project, provider)
    if (provider, runtime) not in served:
        raise UsageError(f"--provider {provider}: the project runs it with runtime: {runtime}; this exporter "
                         "writes ONNX and OpenVINO models", hint="export with a provider on its ONNX Runtime default")
    return served[provider, runtime]


def accelerators(block: Any, flavor: Flavor) -> dict[str, Any]:
    """`optimization.execution_accelerators`: the flavor's accelerator, its parameters mapped from the block."""
    if not flavor.accelerator:
        return {}
    from pkgutil import resolve_name

    entry: dict[str, Any] = {"name": flavor.accelerator}
    if flavor.accelerator_parameters:
        entry["parameters"] = resolve_name(flavor.accelerator_parameters)(block)
    device = "gpu" if flavor.kind == "KIND_GPU" else "cpu"
    return {f"{device}_execution_accelerator": [entry]}


def config_dict(project: Project, provider: str, inputs: dict[str, Tensor], outputs: dict[str, Tensor],
                name: str | None = None) -> dict[str, Any]:
    """Triton's ModelConfig for the project on `provider`, as MessageToDict would give it."""
    flavor = flavor_of(project, provider)
    serve = project.config.serve
    batched = serve.max_batch_size > 0
    if batched and batch_dim([*inputs.values(), *outputs.values()]) is None:
        raise UsageError(f"serve.max_batch_size: {serve.max_batch_size}, but the model's inputs and outputs do "
                         f"not share a symbolic leading (batch) dim for Triton to batch along",
                         hint="set serve.max_batch_size: 0 to export without batching")
    cfg: dict[str, Any] = {"name": name or project.name}
    cfg.update({"platform": flavor.platform} if flavor.platform else {"backend": flavor.backend})
    cfg["max_batch_size"] = serve.max_batch_size
    cfg["input"] = tensor_entries(inputs, batched)
    cfg["output"] = tensor_entries(outputs, batched)
    block = getattr(project.config.providers, provider)
    group: dict[str, Any] = {"count": serve.instances, "kind": flavor.kind}
    if flavor.kind == "KIND_GPU":
        group["gpus"] = [getattr(block, "device_id", 0)]
    cfg["instance_group"] = [group]
    if batched:
        cfg["dynamic_batching"] = {"max_queue_delay_microseconds": serve.max_queue_delay_us}
    acc = accelerators(block, flavor)
    if acc:
        cfg["optimization"] = {"execution_accelerators": acc}
    if flavor.parameters:
        from pkgutil import resolve_name

        cfg["parameters"] = resolve_name(flavor.parameters)(block)
    return cfg


def check(cfg: dict[str, Any], folder: Path, model_ranks: dict[str, int] | None = None) -> list[str]:
    """Triton's rules the proto does not enforce: the name is the folder's, versions are positive integers
    holding the platform's files, and dims agree with max_batch_size (`model_ranks`: each tensor's rank in
    the model file, batch dim included)."""
    found = []
    if cfg.get("name") != folder.name:
        found.append(f"name {cfg.get('name')!r} differs from its folder {folder.name!r}")
    if bool(cfg.get("platform")) == bool(cfg.get("backend")):
        found.append("exactly one of platform and backend must be set")
    versions = [p for p in folder.iterdir() if p.is_dir()] if folder.is_dir() else []
    if not versions:
        found.append("no version folder")
    wanted = next((f.files for f in flavors().values() if (f.platform, f.backend) ==
                   (cfg.get("platform"), cfg.get("backend"))), ())
    for v in versions:
        if not v.name.isdigit() or int(v.name) < 1:
            found.append(f"version folder {v.name!r} is not a positive integer")
        found += [f"{v.name}/{f} is missing" for f in wanted if not (v / f).is_file()]
    batch = int(cfg.get("max_batch_size") or 0)
    for kind in ("input", "output"):
        for t in cfg.get(kind) or []:
            shape = [int(d) for d in t.get("dims") or []]
            if not shape:
                found.append(f"{kind} {t.get('name')}: dims must not be empty")
            if any(d < -1 or d == 0 for d in shape):
                found.append(f"{kind} {t.get('name')}: dims must be positive or -1, got {shape}")
            rank = model_ranks.get(t.get("name", "")) if model_ranks else None
            if rank is not None and "reshape" not in t and len(shape) + (batch > 0) != rank:
                found.append(f"{kind} {t.get('name')}: {len(shape)} dims with max_batch_size {batch}, but the "
                             f"model's tensor has rank {rank}" + (" (dims must leave out the batch dim)"
                                                                   if batch > 0 and len(shape) == rank else ""))
    if batch == 0 and "dynamic_batching" in cfg:
        found.append("dynamic_batching needs max_batch_size > 0")
    return found


def render(value: Any, indent: int = 0) -> str:
    """A MessageToDict-shaped dict as protobuf text format (maps as repeated key/value entries)."""
    pad = "  " * indent
    lines = []
    for key, v in value.items():
        for item in (v if isinstance(v, list) and (not v or isinstance(v[0], dict)) else [v]):
            lines.append(pad + _field(key, item, indent))
    return "\n".join(lines)


def _field(key: str, v: Any, indent: int) -> str:
    pad = "  " * indent
    if isinstance(v, dict):
        if key in MAPS:  # map<string, ...>: one entry per key
            return "\n".join(f"{pad if i else ''}{key} {{ key: {_scalar(k, key)} value: "
                             f"{_value(val, indent + 1)} }}" for i, (k, val) in enumerate(v.items()))
        return f"{key} {{\n{render(v, indent + 1)}\n{pad}}}"
    if isinstance(v, list):
        return f"{key}: [{', '.join(_scalar(x, key) for x in v)}]"
    return f"{key}: {_scalar(v, key)}"


def _value(v: Any, indent: int) -> str:
    return f"{{ {render(v).replace(chr(10), ' ')} }}" if isinstance(v, dict) else _scalar(v, "value")


ENUMS = ("data_type", "kind")
MAPS = ("parameters", "input_map", "output_map")


def _scalar(v: Any, key: str) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return str(v)
    return str(v) if key in ENUMS else '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(kw_only=True)
class Exported:
    name: str
    provider: str
    folder: Path
    version: int
    files: list[str]
    config: dict[str, Any]
    not_carried: list[str] = dataclasses.field(default_factory=list)  # declared steps Triton does not run

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "folder": str(self.folder)}


# the fields of the builder's block a provider's ONNX plan decides; those it leaves out go back to their defaults
PLANNED = ("optimization", "precision", "quantization", "calibration", "calibration_samples")


def served_project(project: Project, provider: str, flavor: Flavor) -> Project:
    """The project whose `flavor.builder` block builds the artifact `provider` serves in Triton: the project itself
    when the provider builds it; else the portable ONNX artifact the provider's own plan starts from (fp32 at the
    basic level for GPU providers; TensorRT's int8 the calibrated QDQ model); Triton applies the accelerator."""
    if flavor.builder == provider:
        return project
    from gpux.plan.targets import with_options
    from gpux.runtimes import targets
    from gpux.runtimes.onnxruntime_plan import ONNX_STEPS

    onnx = next(t for t in targets(project, provider) if t.kind in ONNX_STEPS.values())
    fields = type(getattr(project.config.providers, flavor.builder)).model_fields
    opts = {k: onnx.options.get(k, fields[k].get_default(call_default_factory=True)) for k in PLANNED if k in fields}
    return with_options(project, flavor.builder, **opts)


def artifact_files(art_dir: Path, main: str, flavor: Flavor) -> list[tuple[Path, str]]:
    """(source, name in the version folder): the main file under Triton's name, companions beside it."""
    if flavor.files == ONNX:
        pairs = [(art_dir / main, "model.onnx")]
        pairs += [(p, p.name) for p in art_dir.iterdir() if p.is_file() and p.name.endswith(".data")]
        return pairs
    xml = art_dir / main
    return [(xml, "model.xml"), (xml.with_suffix(".bin"), "model.bin")]


def write_model(repo: Path, cfg: dict[str, Any], version: int, files: list[tuple[Path, str]]) -> Path:
    """Write one model folder atomically: built beside the repository, then moved into place."""
    import tempfile

    repo.mkdir(parents=True, exist_ok=True)
    final = repo / cfg["name"]
    tmp = Path(tempfile.mkdtemp(prefix=f".{cfg['name']}.", dir=repo))
    try:
        (tmp / str(version)).mkdir()
        for src, name in files:
            shutil.copyfile(src, tmp / str(version) / name)
        (tmp / "config.pbtxt").write_text(render(cfg) + "\n", encoding="utf-8")
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
    except BaseException:  # whatever stops it, an interrupt too: no half-written folder is left, then it goes on
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def export(project: Project, provider: str, repo: Path, version: int = 1, store_dir: str | None = None,
           log: Any = None) -> Exported:
    """Build (or reuse) the verified artifact and write `repo/<name>/{config.pbtxt, <version>/...}`."""
    from gpux.artifacts.build import build
    from gpux.model.io import interface

    flavor = flavor_of(project, provider)
    inputs, outputs = interface(project, store_dir)
    cfg = config_dict(project, provider, inputs, outputs)
    built = build(served_project(project, provider, flavor), flavor.builder, store_dir=store_dir, log=log)
    art = built.final.artifact
    files = artifact_files(art.dir, art.manifest["main"], flavor)
    folder = write_model(repo, cfg, version, files)
    ranks = {t.name: len(t.shape) for t in [*inputs.values(), *outputs.values()] if t.shape is not None}
    problems = check(cfg, folder, ranks)
    if problems:
        raise UsageError(f"{folder}: " + "; ".join(problems))
    # a Triton repository serves the model's tensors only: clients run the declared steps (or `gpux serve` does)
    return Exported(name=cfg["name"], provider=provider, folder=folder, version=version, files=[n for _, n in files],
                    config=cfg, not_carried=declared_steps(project.config))
