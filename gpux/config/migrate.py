"""Maps configs in the earlier gpux format (runtime.gpu, list inputs, `type:`, serving:) to gpux.yml v1.

What has a v1 place moves there with a deprecation note that says what to write instead; what v1 has no
use for is dropped with a note; what cannot be mapped safely (unknown keys in runtime.gpu, two places
giving one setting) is an error. Every note and error is located where the file writes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpux.config.parse import Loc
from gpux.config.problems import did_you_mean
from gpux.providers import registry

Note = tuple[Loc, str]

# earlier top-level blocks that v1 does not have: key -> what to do instead
DROPPED = {
    "serving": "ignored: gpux.yml v1 configures `gpux serve` in a serve: block (host, http_port, grpc_port, "
               "max_batch_size; docs/serve.md); move the settings there, then remove it",
    "preprocessing": "ignored: gpux.yml v1 declares image pre-processing per input (inputs.NAME.preprocess; "
                     "docs/answers.md); move the settings there, then remove it",
    "metadata": "ignored: gpux.yml v1 has no metadata block; say what the model is in description:, "
                "then remove it",
}
RUNTIME_MOVED = {"batch_size": ("benchmark", "batch")}
RUNTIME_DROPPED = {
    "timeout": "ignored: gpux.yml v1 has no timeout; remove it",
    "enable_profiling": "ignored: gpux.yml v1 has no enable_profiling; use `gpux run --benchmark`, then "
                        "remove it",
}
TENSOR_DROPPED = {
    "required": "ignored: every model input is required; remove it",
    "max_length": "ignored: gpux.yml v1 declares tensors; give the length in shape: instead (e.g. "
                  "[batch, 512]), then remove it",
}
GPU_KEYS = ("backend", "memory")


@dataclass
class Migration:
    """A v1 mapping plus what the rewrite has to say about the file as written."""

    data: dict[str, Any]
    notes: list[Note] = field(default_factory=list)  # deprecations (warnings)
    errors: list[Note] = field(default_factory=list)  # earlier-format settings that cannot be mapped
    aliases: dict[Loc, Loc] = field(default_factory=dict)  # v1 path -> the path written in the file
    # notes and errors name paths as the file writes them (inputs.0.type), not v1 paths


def migrate(data: dict[str, Any]) -> Migration:
    """Rewrite an earlier-format mapping to v1; a v1 mapping comes back unchanged, with no notes."""
    m = Migration(dict(data))
    for key, msg in DROPPED.items():
        if key in m.data:
            m.data.pop(key)
            m.notes.append(((key,), msg))
    _model_version(m)
    for kind in ("inputs", "outputs"):
        if kind in m.data:
            m.data[kind] = _tensors(m, m.data[kind], kind)
    runtime = m.data.get("runtime")
    if isinstance(runtime, dict):
        m.data["runtime"] = _runtime(m, dict(runtime))
    return m


def _section(m: Migration, name: str) -> dict[str, Any] | None:
    """A copy of the top-level block `name` to write into (None when the file gives it as a non-mapping)."""
    value = m.data.get(name)
    if value is None:
        return {}
    return dict(value) if isinstance(value, dict) else None


def _move(m: Migration, old: Loc, new: Loc, value: Any, how: str) -> None:
    """Put `value` at the v1 path `new`: a top-level key, or a key of a top-level block."""
    block = _section(m, new[0]) if len(new) > 1 else m.data
    where = ".".join(new)
    if block is None:
        m.errors.append((old, f"cannot move this to {where}: {new[0]} is not a mapping"))
        return
    if new[-1] in block:
        m.errors.append((old, f"{where} is also given; remove this earlier-format setting"))
        return
    block[new[-1]] = value
    if len(new) > 1:
        m.data[new[0]] = block
    m.aliases[new] = old
    m.notes.append((old, f"deprecated: write {how} instead"))


def _model_version(m: Migration) -> None:
    model = m.data.get("model")
    if isinstance(model, dict) and "version" in model:
        model = dict(model)
        value = model.pop("version")
        m.data["model"] = model
        _move(m, ("model", "version"), ("version",), value, f"version: {value} at the top level")


def _example(spec: dict[str, Any]) -> str:
    """A list entry written the v1 way, e.g. `x: {dtype: float32, shape: [1, 64]}`."""
    fields = {"dtype": spec.get("dtype", spec.get("type", "float32"))}
    if isinstance(spec.get("shape"), list):
        fields["shape"] = "[" + ", ".join(str(d) for d in spec["shape"]) + "]"
    return f"{spec.get('name', 'x')}: {{" + ", ".join(f"{k}: {v}" for k, v in fields.items()) + "}"


def _tensors(m: Migration, value: Any, kind: str) -> Any:
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        m.notes.append(((kind,), f"deprecated list form: write {kind} as a mapping of name -> spec, e.g. "
                                  f"{_example(value[0])}"))
        mapping: dict[str, Any] = {}
        for i, spec in enumerate(value):
            name = spec.get("name")
            if not isinstance(name, str | int) or isinstance(name, bool) or name == "":
                m.errors.append(((kind, str(i)), "an entry of the earlier list form needs name:"))
                continue
            if str(name) in mapping:
                m.errors.append(((kind, str(i), "name"), f"{kind[:-1]} {str(name)!r} is listed twice"))
                continue
            mapping[str(name)] = {k: v for k, v in spec.items() if k != "name"}
            m.aliases[(kind, str(name))] = (kind, str(i))
        value = mapping
    if not isinstance(value, dict):
        return value
    out = {}
    for name, spec in value.items():
        if isinstance(spec, dict):
            spec = dict(spec)
            here = m.aliases.get((kind, str(name)), (kind, str(name)))
            if "type" in spec:
                if "dtype" in spec:
                    spec.pop("type")
                    m.errors.append(((*here, "type"), "give dtype: only (type: is its earlier name)"))
                else:
                    spec["dtype"] = spec.pop("type")
                    m.aliases[(kind, str(name), "dtype")] = (*here, "type")
                    m.notes.append(((*here, "type"), f"deprecated: write dtype: {spec['dtype']} instead of type:"))
            for key, msg in TENSOR_DROPPED.items():
                if key in spec:
                    spec.pop(key)
                    m.notes.append(((*here, key), msg))
        out[name] = spec
    return out


def _runtime(m: Migration, runtime: dict[str, Any]) -> dict[str, Any]:
    if "gpu" in runtime:
        gpu = runtime.pop("gpu")
        if gpu is None:
            m.notes.append((("runtime", "gpu"), "ignored: an empty earlier-format block; remove it"))
        elif isinstance(gpu, dict):
            _gpu(m, runtime, gpu)
        else:
            hint = f"runtime.backend: {gpu}" if isinstance(gpu, str) else "runtime.backend: PROVIDER"
            m.errors.append((("runtime", "gpu"), f"an earlier-format block that is not a mapping; write {hint} "
                                                 "(and providers.cuda.memory: SIZE for a memory limit) instead"))
    for key, new in RUNTIME_MOVED.items():
        if key in runtime:
            value = runtime.pop(key)
            _move(m, ("runtime", key), new, value, f"{'.'.join(new)}: {value}")
    for key, msg in RUNTIME_DROPPED.items():
        if key in runtime:
            runtime.pop(key)
            m.notes.append((("runtime", key), msg))
    return runtime


def _gpu(m: Migration, runtime: dict[str, Any], gpu: dict[str, Any]) -> None:
    for key in gpu:
        if key not in GPU_KEYS:
            m.errors.append((("runtime", "gpu", str(key)), f"unknown field{did_you_mean(str(key), GPU_KEYS)} in "
                                                           "the earlier runtime.gpu block (it takes backend and "
                                                           "memory)"))
    backend = gpu.get("backend")
    if "backend" in gpu:
        if "backend" in runtime:
            m.errors.append((("runtime", "gpu", "backend"), "runtime.backend is also given; remove this "
                                                            "earlier-format setting"))
        else:
            runtime["backend"] = backend
            m.aliases[("runtime", "backend")] = ("runtime", "gpu", "backend")
            m.notes.append((("runtime", "gpu", "backend"), f"deprecated: write runtime.backend: {backend} instead"))
    if "memory" in gpu:
        _memory(m, gpu["memory"], backend)


def memory_block(backend: Any) -> str | None:
    """The provider block whose `memory` option takes the earlier format's runtime.gpu.memory: the backend's own,
    else its fallback's (tensorrt: the CUDA arena); for auto (or a name no row has), the first row with one."""
    rows = registry()
    row = rows.get(backend) if isinstance(backend, str) else None
    names = (row.name, *row.fallback) if row else tuple(rows)
    return next((n for n in names if n in rows and "memory" in rows[n].option_model.model_fields), None)


def _memory(m: Migration, memory: Any, backend: Any) -> None:
    old = ("runtime", "gpu", "memory")
    target = memory_block(backend)
    if target is None:
        m.notes.append((old, f"ignored: gpux.yml v1 has no memory limit for {backend}; remove it"))
        return
    providers = _section(m, "providers")
    block = (providers or {}).get(target) or {}
    if providers is None or not isinstance(block, dict):
        m.errors.append((old, f"cannot move this to providers.{target}.memory: it is not a mapping"))
        return
    if "memory" in block:
        m.errors.append((old, f"providers.{target}.memory is also given; remove this earlier-format setting"))
        return
    if target not in providers:
        m.aliases[("providers", target)] = ("runtime", "gpu")
    providers[target] = {**block, "memory": memory}
    m.data["providers"] = providers
    m.aliases[("providers", target, "memory")] = old
    m.notes.append((old, f"deprecated: write providers.{target}.memory: {memory} instead"))
