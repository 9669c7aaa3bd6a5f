"""Files in, answers out over the protocol: a BYTES input of encoded files (one per element) goes through the
model's declared preprocess, inference and the declared postprocess; answers travel as BYTES, one JSON text per
file. Decoding and answering run off the event loop. docs/serve.md ("Files in, answers out")."""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from gpux.arrays import Feeds, Named
from gpux.model.io import Tensor
from gpux.serve.errors import BadRequest, ServeError, TooLarge, is_bug

if TYPE_CHECKING:
    from gpux.answers.pre import Placement
    from gpux.answers.records import Answer, Answers
    from gpux.arrays import Array
    from gpux.config.kinds import AnswerKind
    from gpux.config.load import Project
    from gpux.config.steps import Postprocess
    from gpux.serve.memory import Budget


ANSWERS = "answers"  # request parameter: false gives tensors for files, true gives answers for tensors
Run = Callable[[Feeds], Awaitable[Named]]


class Answering(Protocol):
    """What serving files reads of a model's steps: gpux.answers.steps.Steps, or a page pipeline's
    (gpux.serve.pages.PageSteps)."""

    @property
    def kind(self) -> str | None: ...  # the kind of file the input takes (image, bytes, text)
    @property
    def post(self) -> Mapping[str, tuple[Postprocess, list[str] | None]]: ...  # answered outputs -> (spec, labels)
    @property
    def kinds(self) -> Mapping[str, AnswerKind]: ...

    def feeds(self, item: bytes, name: str) -> tuple[Feeds, Placement | None]: ...  # an encoded file (or text)
    def answers(self, outputs: Named, placement: Placement | None, row: int = 0,
                only: Sequence[str] | None = None) -> Answers: ...
    def rows(self, outputs: Named) -> int: ...


def bind(project: Project, inputs: dict[str, Tensor], outputs: dict[str, Tensor]) -> tuple[Any, str | None]:
    """The model's declared steps (None without any preprocess or postprocess) and the input that takes encoded
    files: the one input that declares a preprocess of one row per file (not audio, whose file becomes several
    windows), where that preprocess fills every input of the model (a text's ids, mask and type ids; a python
    step's tensors). A misdeclared step stops the load (ConfigError)."""
    from gpux.answers.steps import Steps
    from gpux.errors import InputError

    steps = Steps.of(project, inputs, outputs)
    if not steps.pre and not steps.post:
        return None, None
    if steps.kind == "audio":
        return steps, None
    try:
        name, _, _ = steps.file_input(project.name)
    except InputError:  # no preprocess, or inputs that a file does not fill: tensors only
        return steps, None
    return steps, name


def filled(steps: Answering, name: str) -> list[str]:
    """The model's inputs other than `name` that a file sent to `name` fills (a text's mask and type ids)."""
    return [n for n in getattr(steps, "inputs", {}) if n != name]


def as_bytes(entry: Mapping[str, object], content_type: str, fills: Sequence[str] = ()) -> dict[str, object]:
    """Tensor metadata as the file side sees it: BYTES [-1], the tensor form kept in its parameters, and the other
    inputs it fills (`fills`, where there are any)."""
    params: dict[str, object] = {"content_type": content_type, "tensor_datatype": entry["datatype"],
                                 "tensor_shape": entry["shape"]}
    if fills:
        params["fills"] = list(fills)
    return {"name": entry["name"], "datatype": "BYTES", "shape": [-1], "parameters": params}


def wants_answers(parameters: Mapping[str, object], files: bool) -> bool:
    """Answers by default for files, tensors for tensors; `parameters.answers` says otherwise."""
    value = parameters.get(ANSWERS, files)
    if not isinstance(value, bool):
        raise BadRequest(f"parameters.{ANSWERS} must be true or false, got {value!r}")
    return value


async def run_files(model: Any, item: Any, run: Run, budget: Budget) -> tuple[list[Named], list[Placement | None]]:
    """Each encoded file of `item` through the preprocess (on a thread), then inference: files whose tensors agree
    in shape go as one batch where the model takes a batch, the rest one by one. Each file's outputs (one batch
    row each, in request order) and Placement. `budget`: the server's bytes held decoded (serve/memory.py)."""
    count = item.array.size
    limit = model.settings.max_batch_size
    if count == 0:
        sent, one = ("texts", "one text") if model.steps.kind == "text" else ("files", "one encoded file")
        raise BadRequest(f"input '{item.name}' holds no {sent}; send {one} per element")
    if count > model.settings.max_files:
        raise TooLarge(f"input '{item.name}' has {count} files, above the limit of {model.settings.max_files} "
                       "(serve.max_files)")
    if limit and model.batchable and count > limit:
        raise BadRequest(f"input '{item.name}' has a batch of {count} files, above serve.max_batch_size {limit}")
    started = time.perf_counter()
    prepared = await asyncio.get_running_loop().run_in_executor(None, prepare, model, item, budget)
    model.stats.compute_input.add(time.perf_counter() - started)
    feeds = [f for f, _ in prepared]
    groups: dict[Any, list[int]] = {}
    for i, f in enumerate(feeds):
        groups.setdefault(tuple((k, v.shape) for k, v in f.items()) if model.batchable else i, []).append(i)
    parts: list[Named] = [{} for _ in feeds]

    async def group(files: list[int]) -> None:
        joined = {k: np.concatenate([feeds[i][k] for i in files]) for k in feeds[files[0]]} if len(files) > 1 \
            else feeds[files[0]]
        out = {k: np.asarray(v) for k, v in (await run(joined)).items()}
        for row, i in enumerate(files):
            parts[i] = {k: np.take(a, [row], axis=_batch_axis(model, k)) if len(files) > 1 else a
                        for k, a in out.items()}

    await asyncio.gather(*(group(files) for files in groups.values()))
    return parts, [p for _, p in prepared]


def _batch_axis(model: Any, name: str) -> int:
    """An output's batch axis: 1 for a time-major ctc output, else 0."""
    post = model.steps.post.get(name) if model.steps is not None else None
    return post[0].batch_axis if post else 0


def joined(model: Any, parts: list[Named], names: list[str]) -> Named:
    """The named outputs of every file as one tensor each; files whose outputs differ in shape cannot be one (a 400
    that says to ask for answers or send those files apart)."""
    out = {}
    sent, apart = ("texts", "texts of different token counts") if model.steps.kind == "text" else \
        ("files", "files of different sizes")
    for n in names:
        arrays = [p[n] for p in parts]
        axis = _batch_axis(model, n)
        shapes = {a.shape[:axis] + a.shape[axis + 1:] for a in arrays}
        if len(shapes) > 1:
            raise BadRequest(f"output '{n}' has shapes {', '.join(str(list(s)) for s in sorted(shapes))} for the "
                             f"{sent} sent ({apart}), which make no one tensor; ask for its answers "
                             f"(parameters.{ANSWERS}), or send those {sent} in separate requests")
        out[n] = np.concatenate(arrays, axis=axis)
    return out


def prepare(model: Any, item: Any, budget: Budget) -> list[tuple[Feeds, Placement | None]]:
    """The feeds and Placement of each file; a file that cannot be read is a 400 naming the input and element.
    Images are measured from their headers first (serve.max_image_pixels), and decoded once their share of
    serve.max_decoded_bytes is free (gpux/serve/memory.py)."""
    from gpux.serve import memory

    files = [(f"input '{item.name}' element {i}", v) for i, v in enumerate(item.array.reshape(-1))]
    text = model.steps.kind == "text"
    named = [(name, element_text(value, name) if text else element_bytes(value, name)) for name, value in files]
    s = model.settings
    sizes = [memory.image_bytes(data, name, s.max_image_pixels) for name, data in named] \
        if model.steps.kind == "image" else []
    need = max(sizes, default=0)  # decoded one after the other: the largest is what the request holds at once
    with budget.hold(need, s.max_decoded_bytes, s.request_timeout_s):
        return [_feeds(model, data, name) for name, data in named]


def _feeds(model: Any, data: bytes, name: str) -> tuple[Feeds, Placement | None]:
    """One file's feeds: a decoder's declared error on a malformed file is the file's (400); anything else is a bug,
    logged with its traceback and answered 500 (gRPC INTERNAL)."""
    from gpux.errors import GpuxError, InputError

    try:
        return model.steps.feeds(data, name)
    except InputError as exc:
        raise BadRequest(exc.lines()[0]) from exc
    except GpuxError as exc:  # e.g. Pillow missing on the server
        raise ServeError(exc.lines()[0]) from exc
    except decoding_errors() as exc:
        if is_bug(exc):
            raise _internal(exc, name) from exc
        raise BadRequest(f"{name}: cannot decode the file: {type(exc).__name__}: {exc}") from exc
    except Exception as exc:  # not a decoder's declared error: a bug here or in a library, never the file's
        raise _internal(exc, name) from exc


def decoding_errors() -> tuple[type[Exception], ...]:
    """What the decoders declare on a malformed file: OSError (Pillow's UnidentifiedImageError, truncated data),
    UnicodeDecodeError, and the errors of Pillow and soundfile where they are imported (a decoder not imported
    raised nothing)."""
    import sys

    found: list[type[Exception]] = [OSError, UnicodeDecodeError]
    pil, sound = sys.modules.get("PIL.Image"), sys.modules.get("soundfile")
    if pil is not None:
        found.append(pil.DecompressionBombError)
    if sound is not None:
        found.append(getattr(sound, "SoundFileError", OSError))
    return tuple(found)


def _internal(exc: Exception, name: str) -> ServeError:
    """A bug met while decoding `name`: its traceback logged through the server's logger, a 500 for the client."""
    logging.getLogger("gpux.serve").error("internal error while decoding %s", name, exc_info=exc)
    return ServeError(f"internal error while decoding {name}: {type(exc).__name__}: {exc}")


def element_bytes(value: object, name: str) -> bytes:
    """An element as the file's bytes: binary and gRPC elements as sent, JSON strings base64-decoded."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise BadRequest(f"{name}: a JSON string of a file is the file in base64, and this one is not ({exc}); "
                             "or send the file's bytes with the binary tensor extension") from exc
    raise BadRequest(f"{name}: expected an encoded file (bytes, or base64 text in JSON), got {type(value).__name__}")


def element_text(value: object, name: str) -> bytes:
    """An element as a text's UTF-8 bytes: binary and gRPC elements as sent, JSON strings as the text itself (a
    text is UTF-8, so Triton's rule holds: a BYTES string is its own bytes); an empty text is refused."""
    if isinstance(value, str):
        try:
            value = value.encode("utf-8")
        except UnicodeEncodeError as exc:  # a lone surrogate, escaped in the JSON
            raise BadRequest(f"{name}: not UTF-8 text (character {exc.start}: {exc.reason})") from exc
    if not isinstance(value, bytes):
        raise BadRequest(f"{name}: expected a text (a JSON string, or UTF-8 bytes), got {type(value).__name__}")
    if not value:
        raise BadRequest(f"{name}: an empty text; send at least one character per element")
    return value


def answer(model: Any, outputs: Named | list[Named], placements: list[Placement | None] | None,
           shape: tuple[int, ...] | None, names: list[str]) -> Named:
    """The named outputs as answers: BYTES of `shape` (default: one per batch row), one JSON text per file (`outputs`
    a list: each file's own) or row."""
    if isinstance(outputs, list):  # each file's own outputs (every one: a step may read another, masks' protos)
        answers = [model.steps.answers(part, p, 0, names)
                   for part, p in zip(outputs, placements or [None] * len(outputs), strict=True)]
    else:
        rows = placements if placements is not None else [None] * model.steps.rows({n: outputs[n] for n in names})
        answers = [model.steps.answers(outputs, p, r, names) for r, p in enumerate(rows)]
    out = {}
    for n in names:
        out[n] = encoded(model.steps.kinds.get(n), [a[n] for a in answers], shape)
    return out


def encoded(kind: AnswerKind | None, answers: list[Answer], shape: tuple[int, ...] | None) -> Array:
    """A batch's answers of one output as its kind encodes them (an embedding: one FP32 tensor), else BYTES of
    `shape` (default: one per row), one JSON text each."""
    from gpux.config.kinds import step

    if kind is not None and (encode := step(kind, "encode")) is not None:
        return encode(answers)
    texts = [json.dumps(a, separators=(",", ":"), default=_plain).encode() for a in answers]
    return np.array(texts, dtype=object).reshape(shape if shape is not None else (len(texts),))


def _plain(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON")
