"""Turns user data (JSON, .npy, .npz) or a seed into feeds cast to each model input's real dtype and shape."""

from __future__ import annotations

import json
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpux.arrays import Array, Feeds
from gpux.config.problems import did_you_mean
from gpux.errors import DataError, InputError
from gpux.model.io import Tensor, shape_text

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

DEFAULT_INT_RANGE = (0, 2)
# what numpy.load raises on a file it cannot read as .npy/.npz (a damaged archive is zipfile's), allow_pickle off
NPY_ERRORS = (OSError, ValueError, EOFError, zipfile.BadZipFile)
NPY_HEADERS = (b"\x93NUMPY", b"PK\x03\x04", b"PK\x05\x06")  # how .npy and .npz (a zip, or an empty zip) files begin


def _np() -> Any:
    import numpy

    return numpy


def dims(tensor: Tensor, shapes: dict[str, int]) -> tuple[int, ...]:
    """Concrete dims for a tensor: static ints, named dims from `shapes` (an unnamed one as
    "INPUT:AXIS"), else 1."""
    out = []
    for i, d in enumerate(tensor.shape or ()):
        out.append(d if isinstance(d, int) else shapes.get(d or f"{tensor.name}:{i}", 1))
    return tuple(out)


def synthetic(tensors: dict[str, Tensor], shapes: dict[str, int], seed: int = 0,
              ranges: dict[str, tuple[float, float]] | None = None) -> Feeds:
    """Seeded random feeds: floats ~ N(0, 1) (or uniform in a declared range), ints uniform in range."""
    np = _np()
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, t in tensors.items():
        shape = dims(t, shapes)
        lo_hi = (ranges or {}).get(name)
        if t.dtype == "bool":
            value = rng.integers(0, 2, size=shape).astype(bool)
        elif t.dtype == "string":
            value = np.full(shape, "", dtype=object)
        elif t.dtype.startswith(("int", "uint")):
            lo, hi = lo_hi or DEFAULT_INT_RANGE
            value = rng.integers(int(lo), max(int(hi), int(lo) + 1), size=shape).astype(t.dtype)
        elif lo_hi:
            value = rng.uniform(lo_hi[0], lo_hi[1], size=shape).astype(_float(t.dtype))
        else:
            value = rng.standard_normal(size=shape).astype(_float(t.dtype))
        feeds[name] = value
    return feeds


def _float(dtype: str) -> str:
    return "float32" if dtype == "bfloat16" else dtype


def parse_json(text: str, tensors: dict[str, Tensor], origin: str = "--input") -> Feeds:
    return cast_all(_json_object(text, origin), tensors, origin)


def _json_object(text: str, origin: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{origin}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
                         hint="""pass an object such as '{"x": [[1.0, 2.0]]}'""") from exc
    if not isinstance(data, dict):
        raise InputError(f"{origin}: expected a JSON object mapping input names to arrays")
    return data


def load_file(path: str | Path, tensors: dict[str, Tensor]) -> Feeds:
    """One sample file (.json, .npy, .npz) cast to the inputs."""
    return cast_all(read_arrays(Path(path), tensors), tensors, str(path))


def read_arrays(p: Path, tensors: dict[str, Tensor]) -> dict[str, Any]:
    """A .json/.npy/.npz file's values by input name, as they are (not yet cast to the inputs)."""
    if not p.is_file():
        raise InputError(f"{p}: file not found")
    suffix = p.suffix.lower()
    if suffix == ".json":
        return _json_object(p.read_text(encoding="utf-8"), str(p))
    with p.open("rb") as fh:
        head = fh.read(len(NPY_HEADERS[0]))
    if not head.startswith(NPY_HEADERS):  # numpy would take it for pickled objects, which gpux never loads
        raise InputError(f"{p}: not .json, .npy or .npz data (a .npy file starts with numpy's header, a .npz is a zip)",
                         hint="save arrays with numpy.save/numpy.savez, or write JSON mapping input names to arrays")
    np = _np()
    try:
        loaded = np.load(p, allow_pickle=False)
    except NPY_ERRORS as exc:
        raise InputError(f"{p}: cannot read as {suffix or 'numpy'} data: {exc}") from exc
    if not hasattr(loaded, "files"):
        if len(tensors) != 1:
            raise InputError(f"{p}: a .npy holds one array but the model has inputs {', '.join(tensors)}",
                             hint="use a .npz with one array per input name")
        return {next(iter(tensors)): loaded}
    with loaded:
        return {k: loaded[k] for k in loaded.files}


def read_samples(path: Path, inputs: dict[str, Tensor]) -> list[Feeds]:
    """Declared samples (verify.data, calibration): a file (.npz/.npy/.json) or a folder of them. An array with one
    more axis than the input is a stack of samples along axis 0; an array of the input's own rank is one sample (a
    batch); any other rank, or a file that does not fit the inputs, is a DataError naming the file."""
    files = sorted(p for p in path.iterdir() if p.suffix in (".npz", ".npy", ".json")) if path.is_dir() \
        else [path]
    if not files:
        raise DataError(f"{path}: no .npz/.npy/.json sample files found")
    out: list[Feeds] = []
    for f in files:
        try:
            raw = read_arrays(f, inputs)
            ranks = {n: len(inputs[n].shape or ()) for n in raw if n in inputs and inputs[n].shape is not None}
            _check_ranks(f, raw, ranks, inputs)
            stacked = all(getattr(raw[n], "ndim", 0) == ranks[n] + 1 for n in ranks) and bool(ranks)
            count = min(raw[n].shape[0] for n in ranks) if stacked else 0
            out += [cast_all({n: raw[n][i] for n in raw}, inputs, str(f)) for i in range(count)] if stacked \
                else [cast_all(raw, inputs, str(f))]
        except InputError as exc:  # declared data is the config's: its exit code, not a command line's
            raise DataError(exc.message, hint=exc.hint) from exc
    return out


def _check_ranks(f: Path, raw: dict[str, Any], ranks: dict[str, int], inputs: dict[str, Tensor]) -> None:
    for n, rank in ranks.items():
        ndim = getattr(raw[n], "ndim", None)
        if ndim is not None and ndim not in (rank, rank + 1):
            shape = list(raw[n].shape)
            raise DataError(f"{f}: array {n!r} has shape {shape}, which fits input {n!r} "
                            f"{shape_text(inputs[n].shape or ())} neither as one sample (rank {rank}) nor as a "
                            f"stack of samples (rank {rank + 1})")


def cast_all(data: Mapping[str, ArrayLike], tensors: dict[str, Tensor], origin: str) -> Feeds:
    """Each input's value (an array, nested lists, a scalar) cast to it; a name the model lacks, a missing input or
    a named dim two inputs size differently is an InputError."""
    unknown = [k for k in data if k not in tensors]
    if unknown:
        k = unknown[0]
        raise InputError(f"{origin}: the model has no input {k!r}{did_you_mean(k, list(tensors))}; "
                         f"inputs: {', '.join(tensors)}")
    missing = [k for k in tensors if k not in data]
    if missing:
        raise InputError(f"{origin}: missing input {', '.join(missing)}",
                         hint=f"give every input: {_describe(tensors)}")
    feeds = {k: cast(data[k], tensors[k], origin) for k in tensors}
    seen: dict[str, tuple[int, str]] = {}
    for name, t in tensors.items():
        for d, n in zip(t.shape or (), getattr(feeds[name], "shape", ()), strict=False):
            if isinstance(d, str):
                if d in seen and seen[d][0] != n:
                    raise InputError(f"{origin}: dim {d!r} is {seen[d][0]} in input {seen[d][1]!r} but {n} in "
                                     f"input {name!r}; inputs sharing a dim name must agree")
                seen.setdefault(d, (int(n), name))
    return feeds


def cast(value: ArrayLike, tensor: Tensor, origin: str = "input") -> Array:
    """One value to the input's dtype, checking rank and static dims; symbolic dims take the data's size."""
    np = _np()
    try:
        with np.errstate(over="raise", invalid="raise"):
            arr = np.asarray(value, dtype=object if tensor.dtype == "string" else _float(tensor.dtype))
    except FloatingPointError as exc:
        raise InputError(f"{origin}: input {tensor.name!r} has a value outside the range of {tensor.dtype}",
                         hint=f"scale the data into {tensor.dtype}'s range") from exc
    except (ValueError, TypeError, OverflowError) as exc:
        raise InputError(f"{origin}: input {tensor.name!r} cannot be read as {tensor.dtype}: {exc}") from exc
    if tensor.shape is not None:
        if arr.ndim != len(tensor.shape):
            raise InputError(f"{origin}: input {tensor.name!r} has shape {list(arr.shape)} but the model "
                             f"expects rank {len(tensor.shape)} {shape_text(tensor.shape or ())}")
        for i, (d, n) in enumerate(zip(tensor.shape, arr.shape, strict=True)):
            if isinstance(d, int) and d != n:
                raise InputError(f"{origin}: input {tensor.name!r} has shape {list(arr.shape)} but dim {i} "
                                 f"must be {d} {shape_text(tensor.shape or ())}")
    return arr if arr.flags.c_contiguous else arr.copy(order="C")  # 0-d stays 0-d


def _describe(tensors: dict[str, Tensor]) -> str:
    return ", ".join(f"{n} {t.dtype}{shape_text(t.shape or ())}" for n, t in tensors.items())


def symbolic_values(feeds: Feeds, tensors: dict[str, Tensor]) -> dict[str, int]:
    """The sizes the data gave each named dim (for reports)."""
    out: dict[str, int] = {}
    for name, t in tensors.items():
        for d, n in zip(t.shape or (), getattr(feeds.get(name), "shape", ()), strict=False):
            if isinstance(d, str):
                out[d] = int(n)
    return out


def parse_shapes(items: tuple[str, ...] | list[str]) -> dict[str, int]:
    """`--shape batch=8 --shape seq=128` → {batch: 8, seq: 128}."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not value.strip().isdigit() or int(value) < 1:
            raise InputError(f"--shape {item!r}: expected NAME=SIZE with SIZE >= 1, e.g. batch=8")
        out[name.strip()] = int(value)
    return out
