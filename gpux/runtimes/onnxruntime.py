"""ONNX Runtime: the ONNX build steps (optimize, float16, quantize) and sessions for its execution providers."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

from gpux.documents import PlacementDoc
from gpux.errors import debugging, error_lines
from gpux.optional import require

if TYPE_CHECKING:
    from types import ModuleType

    import onnx
    import onnxruntime  # no type stubs: mypy reads it as untyped (ignore_missing_imports)

    from gpux.arrays import Feeds, Outputs
    from gpux.config.load import Project
    from gpux.plan.targets import Target
    from gpux.providers.row import Runner
    from gpux.runtimes import Context, Published

EXTERNAL_THRESHOLD = 1_800_000_000  # protobuf's 2 GB limit, with room


def ort() -> ModuleType:
    return require("onnxruntime")


# CPUOptions.optimization -> onnxruntime.GraphOptimizationLevel member name.
ORT_GRAPH_OPTIMIZATION = {"disabled": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC",
                          "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}


def session_options(level: str = "basic", intra_op: int = 0, inter_op: int = 0,
                    settings: dict[str, bool | str] | None = None) -> onnxruntime.SessionOptions:
    so = ort().SessionOptions()
    so.graph_optimization_level = getattr(ort().GraphOptimizationLevel, ORT_GRAPH_OPTIMIZATION[level])
    so.intra_op_num_threads = intra_op
    so.inter_op_num_threads = inter_op
    so.log_severity_level = 3  # errors only: gpux reports what ran itself
    for key, value in (settings or {}).items():  # execution_mode: an ExecutionMode member's name
        setattr(so, key, getattr(ort().ExecutionMode, str(value)) if key == "execution_mode" else value)
    return so


def has_external_data(path: Path) -> bool:
    from gpux.model.io import read_io

    return bool(read_io(path, check=False).external_data)


def optimize(src: Path, dst: Path, level: str) -> None:
    """Offline graph optimization by ONNX Runtime itself, written to `dst`."""
    so = session_options(level)
    so.optimized_model_filepath = str(dst)
    if has_external_data(src) or src.stat().st_size > EXTERNAL_THRESHOLD:
        so.add_session_config_entry("session.optimized_model_external_initializers_file_name",
                                    dst.name + ".data")
        so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    with quiet_stderr():
        ort().InferenceSession(str(src), so, providers=["CPUExecutionProvider"])


def save_model(model: onnx.ModelProto, dst: Path) -> None:
    onnx = require("onnx")
    external = model.ByteSize() > EXTERNAL_THRESHOLD
    onnx.save_model(model, str(dst), save_as_external_data=external, location=dst.name + ".data")


@dataclass
class OrtSession:
    """An InferenceSession plus what actually runs it."""

    opened: onnxruntime.InferenceSession | None  # None once closed: its memory is released
    requested: list[str]
    used: list[str]
    output_names: list[str] = field(default_factory=list)
    input_names: list[str] = field(default_factory=list)

    @property
    def session(self) -> onnxruntime.InferenceSession:
        if self.opened is None:
            raise RuntimeError("an ONNX Runtime session run after it was closed")  # a gpux bug
        return self.opened

    def run(self, feeds: Feeds) -> Outputs:
        return self.session.run(self.output_names, feeds)

    def close(self) -> None:
        self.opened = None


def create_session(model: Path, ep: str, ep_options: dict[str, str] | None, *, intra_op: int = 0,
                   inter_op: int = 0, settings: dict[str, bool | str] | None = None,
                   level: str) -> OrtSession:
    """Create a session asking for `ep` (then CPU); report what ONNX Runtime actually took. `level`: its graph
    optimization, said by every caller (sessions that serve open at ONLINE_LEVEL, references at "disabled")."""
    so = session_options(level, intra_op, inter_op, settings)
    providers: list[Any] = [(ep, ep_options or {})]
    if ep != "CPUExecutionProvider":
        providers.append("CPUExecutionProvider")
    with quiet_stderr():
        sess = ort().InferenceSession(str(model), so, providers=providers)
    return OrtSession(sess, [ep], list(sess.get_providers()),
                      [o.name for o in sess.get_outputs()], [i.name for i in sess.get_inputs()])


@contextlib.contextmanager
def quiet_stderr(log: Callable[[str], None] | None = None, label: str = "onnxruntime") -> Iterator[None]:
    """Keep third-party output off the terminal and off stdout (which --json owns) for the duration: what
    native libraries write to fds 1 and 2 (ORT's EP load errors are reported by gpux itself), Python's
    print, logging records and warnings. With `log` (a build's progress log: shown with -v) each of those
    lines goes there as `[label] line`; without, it is dropped. GPUX_DEBUG leaves everything where it was."""
    if debugging():
        yield
        return
    lines: list[str] = []
    try:
        with _fds_captured(lines), _python_captured(lines):
            yield
    finally:
        said = log or (lambda _msg: None)
        for line in lines:
            if line.strip():
                said(f"[{label}] {line.rstrip()}")


@contextlib.contextmanager
def _fds_captured(lines: list[str]) -> Iterator[None]:
    """Fds 1 and 2 into a temporary file; its lines are added to `lines` afterwards."""
    import sys
    import tempfile

    try:
        saved = [os.dup(1), os.dup(2)]
    except OSError:
        yield
        return
    with tempfile.TemporaryFile() as sink:
        try:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):  # broad: a replaced stream may be anything; unflushed is fine
                    stream.flush()
            os.dup2(sink.fileno(), 1)
            os.dup2(sink.fileno(), 2)
            yield
        finally:
            for fd, copy in zip((1, 2), saved, strict=True):
                os.dup2(copy, fd)
                os.close(copy)
            sink.seek(0)
            lines += sink.read().decode(errors="replace").splitlines()


@contextlib.contextmanager
def _python_captured(lines: list[str]) -> Iterator[None]:
    """sys.stdout/stderr, the root logger's records (its handlers set aside, so that a library's
    logging.warning() configures nothing) and warnings, into `lines`."""
    import io
    import logging
    import warnings

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(f"{record.levelname} {record.name}: {record.getMessage()}")

    root = logging.getLogger()
    handlers, root.handlers = root.handlers, [Collect()]
    text = io.StringIO()
    try:
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(text), \
                contextlib.redirect_stderr(text):
            yield
    finally:
        root.handlers = handlers
        lines += text.getvalue().splitlines()
        lines += [f"{w.category.__name__}: {w.message}" for w in caught]


class OnnxInfo(TypedDict):
    """An ONNX artifact's info (its manifest's): the file, and the level it was optimized at offline."""

    main: str
    optimization: str


def build_onnx(ctx: Context) -> OnnxInfo:
    """The ONNX artifact: the source optimized offline (fp16: gpux.runtimes.onnxruntime_fp16; int8:
    gpux.runtimes.onnxruntime_int8)."""
    return optimized(ctx, ctx.src)


def optimized(ctx: Context, src: Path) -> OnnxInfo:
    """`src` optimized offline into the artifact's model.onnx at the target's level (an intermediate `src` is
    removed); the artifact's info."""
    level = ctx.target.options.get("optimization", "basic")
    dst = ctx.workdir / "model.onnx"
    optimize(src, dst, level)
    if src != ctx.src:
        for p in (src, src.with_name(src.name + ".data")):
            p.unlink(missing_ok=True)
    return {"main": dst.name, "optimization": level}


# The level a session opens an artifact at unless its block says otherwise: ONNX Runtime's own default, what a plain
# InferenceSession(path) applies on the machine that runs it. The level a file is saved at is a separate choice.
ONLINE_LEVEL = "all"


def verify_runner(artifact: Path, target: Target) -> Callable[[Feeds], Outputs]:
    """The artifact as sessions open it (online optimizations on: with int8, these pick the int8 kernels)."""
    sess = create_session(artifact, "CPUExecutionProvider", None, level=ONLINE_LEVEL)
    return sess.run


def open_runner(provider: str, project: Project, artifact: Published) -> Runner:
    """A session on the provider's EP; `dropped` says so when ONNX Runtime silently fell back to CPU."""
    from gpux.providers import registry
    from gpux.runtimes import onnxruntime_options as o

    # a plugin's row has no gpux.yml block: its option model's defaults
    opts = getattr(project.config.providers, provider, None) or registry()[provider].option_model()
    ep = o.ort_ep_name(provider, opts)
    cache = artifact.dir.parent / "cache" / provider
    ep_opts = o.ort_provider_options(provider, opts, str(cache))
    if any(k.endswith(("cache_path", "CacheDirectory", "cache_dir")) for k in ep_opts):
        cache.mkdir(parents=True, exist_ok=True)
    settings = dict(o.SESSION_SETTINGS.get(provider, {}))
    level = opening(project, provider)["graph_optimization"]
    device = ("cuda", int(getattr(opts, "device_id", 0))) if getattr(opts, "io_binding", False) else None
    threads = project.config.runtime.threads
    return open_session_runner(artifact.main, ep, ep_opts, intra_op=threads.intra_op, inter_op=threads.inter_op,
                               settings=settings, level=level, device=device)


class Opening(TypedDict):
    """How a session opens an ONNX artifact: the online optimization level and the thread counts."""

    graph_optimization: str
    intra_op_threads: int | str  # 0: "default (one per core)"
    inter_op_threads: NotRequired[int]


def opening(project: Project, provider: str) -> Opening:
    """How a session opens the provider's artifact on this machine: the online graph optimization level (the
    cpu block's `online_optimization`, else ONNX Runtime's default) and the thread counts."""
    threads = project.config.runtime.threads
    block = getattr(project.config.providers, provider, None)
    out: Opening = {"graph_optimization": getattr(block, "online_optimization", ONLINE_LEVEL),
                    "intra_op_threads": threads.intra_op or "default (one per core)"}
    if threads.inter_op:
        out["inter_op_threads"] = threads.inter_op
    return out


def open_session_runner(  # noqa: PLR0913  # a recipe: each keyword a plain value the serve record replays
        model: Path | str, ep: str, ep_opts: dict[str, str], *, intra_op: int = 0, inter_op: int = 0,
        settings: dict[str, bool | str] | None = None, level: str = ONLINE_LEVEL,
        device: Sequence[str | int] | None = None) -> Runner:
    """`device` ("cuda", id): benchmark inputs and outputs stay in device memory (IO binding). The runner's
    `recipe` is these arguments, plain values: this call again opens the same session (gpux/serve/record.py)."""
    from gpux.providers.row import Recipe, Runner

    recipe = {"model": str(model), "ep": ep, "ep_opts": ep_opts, "intra_op": intra_op, "inter_op": inter_op,
              "settings": settings, "level": level, "device": list(device) if device else None}
    on = (str(device[0]), int(device[1])) if device else None
    sess = create_session(Path(model), ep, ep_opts, intra_op=intra_op, inter_op=inter_op, settings=settings,
                          level=level)
    used = sess.used[0] if sess.used else "none"
    dropped = None
    if used != ep:
        dropped = f"ONNX Runtime did not take {ep} (it would run on {used})"
    opened = {"graph_optimization": level, "intra_op_threads": intra_op or "default (one per core)",
              **({"inter_op_threads": inter_op} if inter_op else {})}  # as `opening` says, from these arguments
    from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument

    return Runner(run=sess.run, output_names=sess.output_names, used=used, dropped=dropped,
                  rejects=(InvalidArgument,),  # ONNX Runtime's word that the feeds do not fit the model
                  details={"ep": ep, "ep_options": ep_opts, "session_providers": sess.used, "opened": opened},
                  close=sess.close,
                  native=sess.session,
                  binder=lambda feeds, n: bind_device(sess, feeds, n, on) if on else bind(sess, feeds, n),
                  fast=native_run(sess), recipe=Recipe("gpux.runtimes.onnxruntime:open_session_runner", recipe))


def native_run(sess: OrtSession) -> Callable[[Feeds], Outputs]:
    """The C++ session's run for every output: what InferenceSession.run calls after its Python checks (the
    C++ side still checks names, types and shapes)."""
    native, names = sess.session._sess.run, sess.output_names

    def run(feeds: Feeds) -> Outputs:
        return native(names, feeds, None)

    return run


def bind_device(sess: OrtSession, feeds: Feeds, n: int, device: tuple[str, int]) -> list[Callable[[], object]]:
    """IO binding: inputs copied to the device once, outputs left there; a call is only the run. One binding
    per worker (a binding is not shared between threads)."""
    import functools

    out: list[Callable[[], object]] = []
    for _ in range(n):
        binding = sess.session.io_binding()
        for name, value in feeds.items():
            binding.bind_ortvalue_input(name, ort().OrtValue.ortvalue_from_numpy(value, device[0], device[1]))
        for name in sess.output_names:
            binding.bind_output(name, device[0], device[1])
        out.append(functools.partial(sess.session.run_with_iobinding, binding))
    return out


def bind(sess: OrtSession, feeds: Feeds, n: int) -> list[Callable[[], object]]:
    """The C++ session's own run with names and feeds fixed: no per-call Python checks. Sessions are
    thread-safe, so one callable serves every worker."""
    import functools

    native = sess.session._sess  # InferenceSession.run validates, then calls this
    return [functools.partial(native.run, sess.output_names, feeds, None)] * n


def placement(model: Path, ep: str, ep_opts: dict[str, str] | None, feeds: Feeds,
              level: str = ONLINE_LEVEL) -> PlacementDoc:
    """Which execution provider ran each node of the partitioned graph, from ONNX Runtime's own profile of
    one inference: node counts per EP, partitions (runs of consecutive non-CPU nodes) and coverage."""
    import json
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        profiled: dict[str, bool | str] = {"enable_profiling": True, "profile_file_prefix": str(Path(tmp) / "gpux")}
        sess = create_session(model, ep, ep_opts, settings=profiled, level=level).session
        sess.run(None, feeds)
        events = json.loads(Path(sess.end_profiling()).read_text())
    seen: dict[str, str] = {}
    for e in events:
        args = e.get("args") or {}
        if e.get("cat") == "Node" and "provider" in args:
            seen.setdefault(e["name"].removesuffix("_kernel_time").removesuffix("_fence_before")
                            .removesuffix("_fence_after"), args["provider"])
    order = list(seen.values())
    return placement_summary(order, ep)


def placement_summary(order: list[str], ep: str) -> PlacementDoc:
    counts: dict[str, int] = {}
    partitions, previous = 0, "CPUExecutionProvider"
    for p in order:
        counts[p] = counts.get(p, 0) + 1
        if p != "CPUExecutionProvider" and p != previous:
            partitions += 1
        previous = p
    total = len(order)
    coverage = (counts.get(ep, 0) / total) if total else 0.0
    return {"ep": ep, "nodes": counts, "total": total, "partitions": partitions, "coverage": round(coverage, 4)}


def status_message(exc: BaseException) -> str:
    """ONNX Runtime's error as its status message, without the source location (gpux.runtimes.MESSAGES)."""
    import re

    lines = error_lines(exc)
    text = lines[0] if lines else ""
    text = text.split("Status Message:")[-1]
    text = re.sub(r"Load model from \S+ failed:", "", text)
    text = re.sub(r"\[ONNXRuntimeError\] : \d+ : \w+ : ", "", text)
    text = re.sub(r"/onnxruntime_src/\S+:\d+ (\S+\([^)]*\)( \[with [^\]]*\])? )?", "", text)
    return text.strip()
