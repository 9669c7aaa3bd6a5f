"""One inference request, whatever the transport: checked against the model, run on its worker, timed."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from gpux.arrays import Named
from gpux.model.checked import taken_as_given
from gpux.serve import shm
from gpux.serve.classify import classify
from gpux.serve.codec import DATATYPE, model_input
from gpux.serve.errors import BadRequest, RequestTimeout, ServeError, is_bug
from gpux.serve.models import Model, Repository
from gpux.serve.shm import Ref
from gpux.serve.steps import answer, joined, run_files, wants_answers

if TYPE_CHECKING:
    from gpux.answers.pre import Placement
    from gpux.serve.memory import Budget

SERVER_NAME = "gpux"
EXTENSIONS = ["binary_tensor_data", "classification", "statistics", "model_repository", shm.EXTENSION]


STATELESS = "gpux serve has no sequence batcher: every request is stateless; send it without sequence parameters"
# request parameters whose meaning gpux serve does not serve: refused by name, never ignored
REFUSED = {"sequence_id": STATELESS, "sequence_start": STATELESS, "sequence_end": STATELESS,
           "triton_enable_empty_final_response": "gpux serve serves no decoupled models: every request has one "
                                                 "response"}
KNOWN = ("binary_data_output", "answers", "priority", "timeout")  # others without a meaning here: carried nowhere
RESERVED = "triton_"  # Triton's own parameters


@dataclass
class InferInput:
    name: str
    datatype: str
    array: np.ndarray  # an input in shared memory: empty until read from its region
    shm: Ref | None = None


@dataclass(kw_only=True)
class InferRequest:
    model: str
    version: str = ""
    id: str = ""
    inputs: list[InferInput] = field(default_factory=list)
    outputs: list[str] | None = None  # None: every output
    classification: dict[str, int] = field(default_factory=dict)  # output -> top k (classification extension)
    parameters: dict[str, Any] = field(default_factory=dict)
    shm_outputs: dict[str, Ref] = field(default_factory=dict)  # output -> where to write it


@dataclass
class InferResult:
    model: Model
    outputs: list[tuple[str, np.ndarray]]
    shm: dict[str, dict[str, Any]] = field(default_factory=dict)  # output written to shared memory -> parameters


def server_metadata() -> dict[str, Any]:
    from gpux.version import __version__

    return {"name": SERVER_NAME, "version": __version__, "extensions": EXTENSIONS}


async def infer(repo: Repository, request: InferRequest, timeout: float | None = None) -> InferResult:
    """Check the request against the model, run it (encoded files through the declared steps), pick the outputs;
    counted in the model's statistics when it succeeds (a failure is counted by the transport that answers it,
    `Repository.refused`, wherever it failed) and in its requests in flight (an unload waits for them)."""
    model = repo.get(request.model, request.version)
    if request.parameters:
        timeout = checked_parameters(request.parameters, model.settings.request_timeout_s if timeout is None
                                     else timeout)
    started = time.perf_counter()
    model.active += 1
    try:
        regions = shm.refs(request)
        if not regions:  # the common case: tensors in the request, outputs in the reply
            result = await _infer(model, request, timeout, repo.decoding)
        else:
            with repo.shm.hold(regions) as held:  # regions stay open until the outputs are written
                await shm.read_inputs(held, request.inputs)
                result = await _infer(model, request, timeout, repo.decoding)
                result.shm = await shm.write_outputs(held, result.outputs, request.shm_outputs)
    finally:
        model.active -= 1
    model.stats.succeeded(time.perf_counter() - started)
    return result


def checked_parameters(parameters: dict[str, Any], timeout: float | None) -> float | None:
    """The request's time limit (its `timeout` in microseconds, Triton's, within the server's), once its
    parameters are known not to ask for what gpux serve does not do (a sequence, a decoupled model)."""
    if not parameters:
        return timeout
    for key, value in parameters.items():
        if key in REFUSED and value not in (0, "", False):
            raise BadRequest(f"parameters.{key}: {REFUSED[key]}")
        if key.startswith(RESERVED) and key not in REFUSED:
            raise BadRequest(f"parameters.{key}: a Triton parameter gpux serve does not serve")
    given = parameters.get("timeout")
    if given is None:
        return timeout
    if isinstance(given, bool) or not isinstance(given, int) or given < 0:
        raise BadRequest(f"parameters.timeout must be a non-negative integer of microseconds, got {given!r}")
    return given / 1e6 if given and (timeout is None or given / 1e6 < timeout) else timeout


async def _infer(model: Model, request: InferRequest, timeout: float | None, budget: Budget) -> InferResult:
    """The request's outputs, with compute_input and compute_output counted."""
    item = file_item(model, request.inputs)
    answers = wants_answers(request.parameters, item is not None)
    wanted = request.outputs if request.outputs is not None else model.outputs
    unknown = [n for n in wanted if n not in model.outputs] if request.outputs is not None else None
    if unknown:
        raise BadRequest(f"model '{model.name}' has no output '{unknown[0]}'; outputs: {', '.join(model.outputs)}")
    limit = timeout if timeout is not None else model.settings.request_timeout_s
    try:
        outputs, placements = await _run(model, request, item, limit, budget)
    except TimeoutError as exc:
        raise RequestTimeout(f"request to model '{model.name}' took longer than {limit:g} s "
                             f"(serve.request_timeout_s)") from exc
    except ServeError:
        raise
    # a runtime's own errors (ONNX Runtime's pybind errors, OpenVINO's and PyTorch's RuntimeError, a plugin
    # runtime's) are the model's answer to these inputs; a gpux bug goes on to the transport, logged, a 500
    except Exception as exc:
        if is_bug(exc):
            raise
        raise _runtime_error(exc) from exc
    ready = time.perf_counter()
    named = [n for n in wanted if n in model.steps.post and n not in request.classification] \
        if answers and model.steps is not None else []
    picked = joined(model, outputs, [n for n in wanted if n not in named]) if isinstance(outputs, list) else \
        {n: np.asarray(outputs[n]) for n in wanted}
    if named:
        shape = item.array.shape if item is not None else None
        picked.update(await asyncio.get_running_loop().run_in_executor(
            None, answer, model, outputs if isinstance(outputs, list) else  # every output: a step may read another
            {n: np.asarray(a) for n, a in outputs.items()}, placements, shape, named))
        picked = {n: picked[n] for n in wanted}
    classes = request.classification
    result = InferResult(model, [(n, classify(n, a, classes[n], model.labels.get(n)) if n in classes else a)
                                 for n, a in picked.items()] if classes else list(picked.items()))
    model.stats.compute_output.add(time.perf_counter() - ready)
    return result


async def _run(model: Model, request: InferRequest, item: InferInput | None, limit: float,
               budget: Budget) -> tuple[Named | list[Named], list[Placement | None] | None]:
    """The outputs within the time limit (each file's own when files were sent), and each file's Placement."""
    assert model.worker is not None
    if item is not None:
        return await asyncio.wait_for(run_files(model, item, model.worker.infer, budget), limit)
    started = time.perf_counter()
    feeds = check_inputs(model, request.inputs)
    checked = time.perf_counter()
    model.stats.compute_input.add(checked - started)
    if model.worker.runs_inline(feeds):  # runs to completion here: limit checked after
        out = model.worker.infer_inline(feeds)
        if time.perf_counter() - checked > limit:
            raise TimeoutError
        return out, None
    return await asyncio.wait_for(model.worker.infer(feeds), limit), None


def file_item(model: Model, inputs: list[InferInput]) -> InferInput | None:
    """The request's encoded files: BYTES sent to the input that declares a preprocess (None: tensors)."""
    if model.files is None or not any(i.name == model.files and i.datatype == "BYTES" for i in inputs):
        return None
    for i in inputs:
        if i.name in model.inputs and i.name != model.files:  # a text's mask, filled from the text itself
            raise BadRequest(f"input '{i.name}' is filled from the {_sent(model)}s sent to '{model.files}'; send "
                             f"'{model.files}' alone, or every input as tensors")
        if i.name != model.files:
            raise BadRequest(f"model '{model.name}' has no input '{i.name}'; inputs: {model.files}")
    if len(inputs) > 1:
        raise BadRequest(f"input '{model.files}' is given twice")
    return inputs[0]


def _sent(model: Model) -> str:
    """What a model's file input takes, as messages name it: text, or encoded file."""
    return "text" if model.steps is not None and model.steps.kind == "text" else "encoded file"


def _runtime_error(exc: Exception) -> ServeError:
    from gpux.errors import GpuxError

    text = (exc.message if isinstance(exc, GpuxError) else str(exc)).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    if isinstance(exc, rejected_inputs()):
        return BadRequest(f"the model rejected the inputs: {line}")
    return ServeError(f"inference failed: {type(exc).__name__}: {line}")


def rejected_inputs() -> tuple[type[Exception], ...]:
    """The errors a runtime raises on inputs it refuses: gpux's InputError, and ONNX Runtime's InvalidArgument and
    Fail where ONNX Runtime is imported (a runtime not imported raised nothing)."""
    import sys

    from gpux.errors import InputError

    ort = sys.modules.get("onnxruntime.capi.onnxruntime_pybind11_state")
    return (InputError,) if ort is None else (InputError, ort.InvalidArgument, ort.Fail)


def check_inputs(model: Model, inputs: list[InferInput]) -> dict[str, np.ndarray]:
    """Every model input exactly once, with the model's datatype, rank, static dims and batch limit. Names,
    datatypes and shapes that passed once pass again unchecked (a client sends the same few)."""
    signature = tuple((i.name, i.datatype, i.array.shape) for i in inputs)
    if signature in model.checked:
        return {i.name: i.array for i in inputs}
    feeds: dict[str, np.ndarray] = {}
    for item in inputs:
        tensor = model.inputs.get(item.name)
        if tensor is None:
            raise BadRequest(f"model '{model.name}' has no input '{item.name}'; inputs: {', '.join(model.inputs)}")
        if item.name in feeds:
            raise BadRequest(f"input '{item.name}' is given twice")
        expected = DATATYPE.get(tensor.dtype, tensor.dtype)
        if item.datatype != expected:
            files = f" (or BYTES: {_sent(model)}s, one per element)" if item.name == model.files and \
                expected != "BYTES" else ""
            raise BadRequest(f"input '{item.name}' has datatype {item.datatype} but model '{model.name}' "
                             f"expects {expected}{files}")
        check_dims(model, tensor.shape, item)
        feeds[item.name] = model_input(item.array, tensor.dtype)
    missing = [n for n in model.inputs if n not in feeds]
    if missing:
        raise BadRequest(f"missing input '{missing[0]}' for model '{model.name}'; it needs: "
                         f"{', '.join(model.inputs)}")
    # remembered where the inputs are taken as sent (not text the runtime wants as str)
    model.checked.remember(signature, taken_as_given({i.name: i.array for i in inputs}, feeds))
    return feeds


def check_dims(model: Model, dims: tuple[Any, ...] | None, item: InferInput) -> None:
    shape = list(item.array.shape)
    if dims is None:
        return
    want = [d if isinstance(d, int) else -1 for d in dims]
    if len(shape) != len(want) or any(w not in (-1, s) for w, s in zip(want, shape, strict=False)):
        raise BadRequest(f"input '{item.name}' has shape {shape} but model '{model.name}' expects {want}")
    limit = model.settings.max_batch_size
    if limit and model.batchable and shape and shape[0] > limit:
        raise BadRequest(f"input '{item.name}' has a batch of {shape[0]}, above serve.max_batch_size {limit}")
