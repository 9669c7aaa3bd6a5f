"""Maps configs in the earlier gpux format (runtime.gpu, list inputs, `type:`, serving:) to gpux.yml v1."""

from __future__ import annotations

from typing import Any

Note = tuple[tuple[str, ...], str]

# earlier top-level blocks that v1 does not have: key -> what to do instead
DROPPED = {
    "serving": "ignored: gpux.yml v1 has no serving block; build an image with `gpux package` instead",
    "preprocessing": "ignored: gpux.yml v1 has no preprocessing; prepare inputs before `gpux run`",
}
RUNTIME_MOVED = {
    "batch_size": ("benchmark", "batch"),
}
RUNTIME_DROPPED = {"timeout": "ignored: gpux.yml v1 has no timeout"}


def migrate(data: dict[str, Any]) -> tuple[dict[str, Any], list[Note]]:
    """Return a v1 mapping and the deprecation notes (location, message) for what was rewritten."""
    data = dict(data)
    notes: list[Note] = []
    for key, msg in DROPPED.items():
        if key in data:
            data.pop(key)
            notes.append(((key,), msg))
    for kind in ("inputs", "outputs"):
        if kind in data:
            data[kind] = _tensors(data[kind], kind, notes)
    runtime = data.get("runtime")
    if isinstance(runtime, dict):
        data["runtime"] = _runtime(dict(runtime), data, notes)
    return data, notes


def _tensors(value: Any, kind: str, notes: list[Note]) -> Any:
    if isinstance(value, list) and all(isinstance(v, dict) and "name" in v for v in value):
        notes.append(((kind,), f"deprecated list form: write {kind} as a mapping name -> {{dtype, shape}}"))
        value = {str(v["name"]): {k: x for k, x in v.items() if k != "name"} for v in value}
    if not isinstance(value, dict):
        return value
    out = {}
    for name, spec in value.items():
        if isinstance(spec, dict):
            spec = dict(spec)
            if "type" in spec and "dtype" not in spec:
                spec["dtype"] = spec.pop("type")
                notes.append(((kind, str(name), "type"), "deprecated: write 'dtype:' instead of 'type:'"))
            if "required" in spec:
                spec.pop("required")
                notes.append(((kind, str(name), "required"), "ignored: every model input is required"))
        out[name] = spec
    return out


def _runtime(runtime: dict[str, Any], data: dict[str, Any], notes: list[Note]) -> dict[str, Any]:
    gpu = runtime.pop("gpu", None)
    if isinstance(gpu, dict):
        backend = gpu.get("backend")
        if backend is not None and "backend" not in runtime:
            runtime["backend"] = backend
            notes.append((("runtime", "gpu", "backend"), "deprecated: write runtime.backend instead"))
        memory = gpu.get("memory")
        if memory is not None:
            target = "rocm" if backend == "rocm" else "cuda"
            providers = dict(data.get("providers") or {})
            block = dict(providers.get(target) or {})
            block.setdefault("memory", memory)
            providers[target] = block
            data["providers"] = providers
            notes.append(
                (("runtime", "gpu", "memory"), f"deprecated: write providers.{target}.memory instead")
            )
        rest = {k: v for k, v in gpu.items() if k not in ("backend", "memory")}
        if rest:
            runtime["gpu"] = rest  # unknown keys: let validation report them
    elif gpu is not None:
        runtime["gpu"] = gpu  # let validation report it
    for key, (section_name, name) in RUNTIME_MOVED.items():
        if key in runtime:
            section = dict(data.get(section_name) or {})
            section.setdefault(name, runtime.pop(key))
            data[section_name] = section
            notes.append((("runtime", key), f"deprecated: write {section_name}.{name} instead"))
    for key, msg in RUNTIME_DROPPED.items():
        if key in runtime:
            runtime.pop(key)
            notes.append((("runtime", key), msg))
    return runtime
