"""Triton's model configuration for a served model (its model configuration extension), derived from what opened
and the `serve:` block, and a load's config override: the fields gpux applies, the rest refused by name.

The configuration is a dict in the shape protobuf's `MessageToDict(preserving_proto_field_name=True)` gives for
Triton's `ModelConfig`; gpux/deploy/triton.py writes the same tensors into a Triton repository's config.pbtxt."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from gpux.errors import UsageError
from gpux.formats import TRITON_DATA_TYPES
from gpux.model.io import Tensor
from gpux.serve.errors import BadRequest, ServeError

if TYPE_CHECKING:
    from gpux.serve.settings import Settings

# the fields of an override gpux applies (top level of ModelConfig); any other must equal the served config
APPLIED = ("max_batch_size", "dynamic_batching", "instance_group")
CHANNELS = (1, 3, 4)  # an image tensor's channel counts: gray, RGB, RGBA


def dims(t: Tensor, batched: bool) -> list[int]:
    shape = list(t.shape or ())
    return [d if isinstance(d, int) else -1 for d in (shape[1:] if batched else shape)]


def batch_dim(tensors: list[Tensor]) -> str | None:
    """The name every tensor's leading dim shares, when it is symbolic: the dim Triton may batch along."""
    firsts = {t.shape[0] if t.shape else None for t in tensors}
    only = firsts.pop() if len(firsts) == 1 else None
    return only if isinstance(only, str) else None


def tensor_entries(tensors: dict[str, Tensor], batched: bool) -> list[dict[str, Any]]:
    out = []
    for t in tensors.values():
        if t.dtype not in TRITON_DATA_TYPES:
            raise UsageError(f"{t.name}: Triton has no data type for {t.dtype}")
        entry: dict[str, Any] = {"name": t.name, "data_type": TRITON_DATA_TYPES[t.dtype], "dims": dims(t, batched)}
        if not entry["dims"]:  # a scalar: Triton wants one dim and reshapes it away
            entry.update(dims=[1], reshape={"shape": []})
        out.append(entry)
    return out


def image_format(t: Tensor, batched: bool, layout: str | None = None) -> str | None:
    """FORMAT_NCHW / FORMAT_NHWC for an image input: its declared preprocess layout, else a floating tensor of
    three dims (past the batch) whose first or last holds 1, 3 or 4 channels."""
    if layout:
        return f"FORMAT_{layout.upper()}"
    shape = dims(t, batched)
    if len(shape) != 3 or not t.dtype.startswith(("float", "bfloat")):
        return None
    if shape[0] in CHANNELS:
        return "FORMAT_NCHW"
    return "FORMAT_NHWC" if shape[-1] in CHANNELS else None


def platform_of(provider: str) -> dict[str, str]:
    """The platform (or backend) Triton serves the provider's artifact with; gpux's own name where Triton has none."""
    from gpux.providers import registry

    row = registry().get(provider)
    flavor = next((f for runtime, f in (row.triton if row else ()) if runtime == row.runtime), None) if row else None
    if flavor is None:
        return {"backend": f"gpux_{provider or 'pending'}"}
    return {"platform": flavor.platform} if flavor.platform else {"backend": str(flavor.backend)}


def config_of(model: Any) -> dict[str, Any]:
    """The served model's ModelConfig: name, platform, batching, tensors (their tensor form: a model taking files
    takes tensors too), image formats, instances on the device kind it runs on."""
    settings: Settings = model.settings
    batched = model.batchable and settings.max_batch_size > 0
    cfg: dict[str, Any] = {"name": model.name, **platform_of(model.provider),
                           "max_batch_size": settings.max_batch_size if batched else 0}
    layouts = model.layouts
    inputs = tensor_entries(model.inputs, batched)
    for entry, t in zip(inputs, model.inputs.values(), strict=True):
        form = image_format(t, batched, layouts.get(t.name))
        if form:
            entry["format"] = form
    cfg["input"], cfg["output"] = inputs, tensor_entries(model.outputs, batched)
    from gpux.providers import registry

    row = registry().get(model.provider)  # a GPU instance where the provider's device is one (its GPU resource)
    gpu = "CPU" not in model.runs_on.upper() and row is not None and row.gpu_resource is not None
    cfg["instance_group"] = [{"name": model.name, "count": settings.instances, "kind": "KIND_GPU" if gpu else
                              "KIND_CPU", **({"gpus": [0]} if gpu else {})}]
    if batched:
        cfg["dynamic_batching"] = {"max_queue_delay_microseconds": settings.max_queue_delay_us}
    return cfg


def message_of(cfg: dict[str, Any]) -> Any:
    """The dict as the gRPC ModelConfig message."""
    from google.protobuf.json_format import ParseDict

    from gpux.serve.proto import inference_pb2 as pb

    return ParseDict(cfg, pb.ModelConfig())


def overridden(model: Any, text: str) -> dict[str, Any]:
    """The `serve:` settings a load's config override sets, checked against the served `model`: JSON of a
    ModelConfig (as Triton takes it); max_batch_size, dynamic_batching.max_queue_delay_microseconds and
    instance_group counts are applied, any other field must equal the served config. Whatever cannot be applied
    is a 400 naming it."""
    from google.protobuf.json_format import MessageToDict, ParseDict, ParseError

    from gpux.serve.proto import inference_pb2 as pb

    where = f"failed to load '{model.name}': config override"
    try:
        doc = json.loads(text)
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        given = ParseDict(doc, pb.ModelConfig())
    except (ValueError, ParseError) as exc:
        raise BadRequest(f"{where} is not a model configuration gpux serve can apply ({one_line(exc)}); it "
                         f"applies max_batch_size, dynamic_batching.max_queue_delay_microseconds and "
                         f"instance_group count") from exc
    current = message_of(config_of(model))
    for fd, value in given.ListFields():
        if fd.name not in APPLIED and value != getattr(current, fd.name):
            raise BadRequest(f"{where}: field '{fd.name}' differs from the served configuration and is not one "
                             f"gpux serve applies (max_batch_size, dynamic_batching.max_queue_delay_microseconds, "
                             f"instance_group count); set it in gpux.yml")
    update: dict[str, Any] = {}
    if given.HasField("dynamic_batching"):
        extra = [k for k in MessageToDict(given.dynamic_batching) if k != "maxQueueDelayMicroseconds"]
        if extra:
            raise BadRequest(f"{where}: dynamic_batching.{extra[0]} is not applied by gpux serve")
        update["max_queue_delay_us"] = given.dynamic_batching.max_queue_delay_microseconds
    if given.instance_group:
        update["instances"] = max(1, sum(g.count or 1 for g in given.instance_group))
    if "max_batch_size" in doc:
        refused = unbatchable(model, given.max_batch_size)
        if refused:
            raise BadRequest(f"{where}: max_batch_size {given.max_batch_size} {refused}")
        update["max_batch_size"] = given.max_batch_size
    return update


def unbatchable(model: Any, size: int) -> str:
    """Why `size` cannot be the model's max_batch_size (empty: it can)."""
    if size < 0:
        return "is negative; 0 serves the model unbatched, N > 0 merges requests up to N rows"
    if not size:
        return ""
    if model.opened.one_by_one:
        return ("for a model that answers one file at a time (a page pipeline: each image runs through all its "
                "steps on its own, requests are never merged); 0 serves it")
    if not model.batchable:
        return "for a model whose tensors share no variable leading (batch) dim; 0 serves it unbatched"
    return ""


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def refuse_files(name: str, keys: list[str]) -> ServeError:
    """Model files sent with a load: gpux serve reads a model from its project only. Triton's own answer to files
    it cannot take (an INTERNAL 'failed to poll from model repository'), which clients check for."""
    shown = keys[0] if len(keys[0]) <= 40 else keys[0][:37] + "..."
    return ServeError(f"failed to load '{name}': failed to poll from model repository: gpux serve takes no model "
                      f"files in a load request (parameter '{shown}'); put them in the model's project folder, "
                      "beside its gpux.yml, and load again")
