"""PyTorch as a runtime (`runtime: torch`): builds a torch artifact (the source, plus the Inductor cache of
its compiled kernels) and opens it eager or under torch.compile on cpu, cuda, rocm or mps.

Compilation: `torch.compile` works on a torch.export program's module directly; a TorchScript module is
opaque to Dynamo (it would run uncompiled), so it is first converted to an ExportedProgram with PyTorch's
TorchScript converter, traced at the example sizes (symbolic dims at least 2). `gpux build` compiles the
model at the resolved input sizes with the Inductor cache directory pointed inside the artifact
(`inductor/`: FX graphs, AOTAutograd entries, generated C++/Triton kernels and their shared objects). `run`
copies that folder into the store's writable `cache/` (the artifact stays as published and hash-checked),
points Inductor at it and compiles again: Dynamo retraces, but every graph is a cache hit, so nothing is
code-generated or sent to a compiler. The compile call is timed and reported (`compile_s`), with the cache
hits and misses Inductor counted, so a warm start is a recorded fact, not a guess.

Precision: fp16/bf16 cast the model's weights and float inputs (the model's own dtype), not autocast:
autocast does not reach inside TorchScript graphs, and a cast model runs (and is verified) in exactly the
dtype reported. Float outputs come back as float32.
"""

from __future__ import annotations

import dataclasses
import platform
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

from gpux.optional import require
from gpux.runtimes import Built

if TYPE_CHECKING:
    from gpux.arrays import Feeds, Outputs
    from gpux.config.load import Project
    from gpux.plan.targets import Target
    from gpux.providers.row import Runner
    from gpux.runtimes import Context, Published

CACHE = "inductor"
MAIN = {"torchscript": "model.pt", "torch_export": "model.pt2"}
DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


@dataclass(frozen=True, kw_only=True)
class Setup:
    """How to run: the target's options, resolved by the plan."""

    device: str  # gpux provider: cpu | cuda | rocm | mps
    device_id: int
    compile: str  # off | default | reduce-overhead | max-autotune
    precision: str
    channels_last: bool
    cuda_graphs: bool
    fmt: str

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> Setup:
        return cls(device=options["device"], device_id=int(options.get("device_id") or 0), compile=options["compile"],
                   precision=options["precision"], channels_last=bool(options.get("channels_last")),
                   cuda_graphs=bool(options.get("cuda_graphs")), fmt=options.get("source_format", "torchscript"))

    @property
    def torch_device(self) -> str:
        from gpux.providers import registry

        kind = registry()[self.device].torch.type  # type: ignore[union-attr]  # planned for torch devices only
        return f"{kind}:{self.device_id}" if kind == "cuda" else kind

    def describe(self) -> str:
        return f"PyTorch {self.torch_device} {self.precision} {'eager' if self.compile == 'off' else self.compile}"


class CacheUse(TypedDict):  # what Inductor's cache did on a compiling call
    state: str  # hit, miss, partial or none
    hits: int
    misses: int


class ModuleInfo(TypedDict):
    """A torch artifact's info: the source file, what runs it, and what compiling it here did (or why it failed)."""

    main: str
    torch: str
    runs_on: str
    compile_failed: NotRequired[str]
    compile_seconds: NotRequired[float]
    compile_cache: NotRequired[CacheUse]
    cache_files: NotRequired[int]


@dataclass
class Opened:
    """A loaded (and maybe compiled) module: `run(feeds)` returns flattened outputs as numpy arrays."""

    run: Callable[[Feeds], Outputs]
    names: list[str]
    details: dict[str, Any] = field(default_factory=dict)


def _torch() -> Any:
    return require("torch", "torch")


def device_identity(target: Target) -> dict[str, str | None]:
    """What keys a torch artifact to a machine: nothing for eager cpu; the CPU for compiled cpu kernels;
    the GPU's name and compute capability (or architecture) for cuda/rocm; the Mac for mps."""
    from gpux.machine import cpu_identity

    setup = Setup.of(target.options)
    if setup.device == "cpu":
        return {} if setup.compile == "off" else {**cpu_identity()}
    if setup.device == "mps":
        return {"mps": platform.machine(), "macos": platform.mac_ver()[0]}
    try:
        torch = _torch()
        props = torch.cuda.get_device_properties(setup.device_id)
        # a CUDA build has gcnArchName too, holding the device's name: the architecture is ROCm's alone
        arch = props.gcnArchName if torch.version.hip else f"sm_{props.major}{props.minor}"
        return {"gpu": props.name, "capability": arch}
    except Exception as exc:  # no GPU here: the key says so, and `run` explains the mismatch
        return {"gpu": None, "reason": f"{type(exc).__name__}: {exc}"[:120]}


# ---- loading ------------------------------------------------------------------------------------------
def _to_program(module: Any, args: tuple[Any, ...]) -> Any:
    """A TorchScript module as a torch.export program's module, which Dynamo can trace."""
    from torch._export.converter import TS2EPConverter

    from gpux.runtimes.torch_export import _quiet_warnings

    with _quiet_warnings():
        return TS2EPConverter(module, args).convert().module()


def _place(module: Any, setup: Setup) -> Any:
    torch = _torch()
    module = module.to(setup.torch_device)
    if setup.precision != "fp32":
        module = module.to(getattr(torch, DTYPES[setup.precision]))
    if setup.channels_last:
        module = module.to(memory_format=torch.channels_last)
    return module


def _call(module: Any, setup: Setup, names: list[str]) -> Callable[[Feeds], Outputs]:
    """feeds -> outputs: numpy in, cast and moved to the device; outputs back on the host, floats as float32."""
    from gpux.runtimes import torch_export as pt

    torch = _torch()
    dtype = getattr(torch, DTYPES[setup.precision])
    device = setup.torch_device

    def prepare(value: Any) -> Any:
        t = pt.to_tensor(value).to(device)
        if t.is_floating_point() and t.dtype != dtype:
            t = t.to(dtype)
        return t.contiguous(memory_format=torch.channels_last) if setup.channels_last and t.dim() == 4 else t

    def run(feeds: Feeds) -> Outputs:
        args = [prepare(feeds[n]) for n in names]
        with torch.inference_mode():
            out = module(*args)
        flat = pt.flatten(out)
        return [pt.to_array(x.float() if x.is_floating_point() and x.dtype != torch.float32 else x)
                for x in flat]

    return run


def _graphed(module: Any) -> Callable[..., Any]:
    """Eager module replayed through CUDA graphs: captured once per input shapes and dtypes, inputs copied into
    the captured buffers, outputs cloned out of them."""
    from gpux.runtimes import torch_export as pt

    torch = _torch()
    graphs: dict[tuple[Any, ...], tuple[Any, list[Any], list[Any]]] = {}

    def call(*args: Any) -> list[Any]:
        key = tuple((tuple(a.shape), a.dtype) for a in args)
        if key not in graphs:
            static = [a.clone() for a in args]
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):  # cuDNN autotuning and allocations happen outside the graph
                    module(*static)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = pt.flatten(module(*static))
            graphs[key] = (graph, static, out)
        graph, static, out = graphs[key]
        for buf, a in zip(static, args, strict=True):
            buf.copy_(a)
        graph.replay()
        return [o.clone() for o in out]

    return call


def _without_hooks(module: Any) -> Any:
    """What torch.compile gets: a torch.export program's module as a plain GraphModule over the same graph and
    parameters, without the hooks `ExportedProgram.module()` registers (the input-constraint check, and the
    pytree registration of nn.Module inputs, which gpux never passes). Dynamo skips the constraint check when
    it traces anyway, but the hooks still ran around every compiled call: about 100 µs per call of the
    torch_cnn example on an H200 (compiled 320 -> 220 µs, reduce-overhead 142 -> 87 µs). The eager module, the
    fallback when compiling fails, keeps its checks."""
    torch = _torch()
    if isinstance(module, torch.fx.GraphModule) and (module._forward_pre_hooks or module._forward_hooks):
        return torch.fx.GraphModule(module, module.graph)
    return module


def _compile_kwargs(setup: Setup) -> dict[str, Any]:
    if setup.compile == "default":
        return {"options": {"triton.cudagraphs": True}} if setup.cuda_graphs else {}
    return {"mode": setup.compile}


def open_module(path: Path, setup: Setup, project: Project, cache_dir: Path | None,
                log: Callable[[str], None]) -> Opened:
    """Load the source, place it on the device in its dtype and, unless eager, compile it at the resolved input
    sizes with Inductor's cache in `cache_dir` (timed: `compile_s`, with the cache hits and misses)."""
    from gpux.model.inputs import synthetic
    from gpux.model.io import interface
    from gpux.plan.targets import resolve_shapes
    from gpux.runtimes import torch_export as pt

    torch = _torch()
    threads = project.config.runtime.threads.intra_op
    if threads and setup.device == "cpu":  # runtime.threads.intra_op, as ONNX Runtime takes it (process-wide)
        torch.set_num_threads(threads)
    inputs, _ = interface(project)
    shapes = resolve_shapes(project)
    module = pt.load_module(path, setup.fmt)
    names = pt.input_order(module, list(inputs))
    example = synthetic(dict(inputs), shapes, 0)
    declared = list(project.config.outputs or {})
    details: dict[str, Any] = {"device": setup.torch_device, "compile": setup.compile,
                               "precision": setup.precision, "channels_last": setup.channels_last,
                               "cuda_graphs": setup.cuda_graphs, "torch": torch.__version__,
                               "threads": torch.get_num_threads()}
    if setup.compile == "off":
        placed = _place(module, setup)
        run = _call(_graphed(placed) if setup.cuda_graphs else placed, setup, names)
        return Opened(run, declared or pt.output_names(None, len(run(example))), details)
    if setup.fmt == "torchscript":
        args, _, _ = pt.example_inputs(module, inputs, shapes, names)
        module = _to_program(module, args)
        details["converted"] = "TorchScript -> torch.export program (torch._export.converter)"
    placed = _place(module, setup)
    compiled = _call(torch.compile(_without_hooks(placed), **_compile_kwargs(setup)), setup, names)
    run = _eager_on_failure(compiled, _call(placed, setup, names), details, log)
    log(f"compiling with torch.compile ({setup.compile}) on {setup.torch_device}")
    outputs, seconds, cache = _first_call(run, example, cache_dir)
    if "compile_failed" not in details:  # eager after all: nothing compiled to time
        details.update(compile_s=round(seconds, 4), compile_cache=cache)
    return Opened(run, declared or pt.output_names(None, len(outputs)), details)


def _eager_on_failure(compiled: Callable[[Feeds], Outputs], eager: Callable[[Feeds], Outputs],
                      details: dict[str, Any], log: Callable[[str], None]) -> Callable[[Feeds], Outputs]:
    """`compiled`, switched to `eager` for good the first time Inductor cannot compile (no C++ compiler, a
    kernel the compiler rejects): one warning line with the reason, kept in `details` as `compile_failed`."""
    from torch._dynamo.exc import BackendCompilerFailed

    from gpux.errors import first_line

    current = [compiled]

    def run(feeds: Feeds) -> Outputs:
        try:
            return current[0](feeds)
        except BackendCompilerFailed as exc:
            reason = first_line(exc)
            log(f"warning: torch.compile ({details['compile']}) failed here, running eager instead: {reason}")
            details.update(compile="off", compile_failed=reason)
            current[0] = eager
            return eager(feeds)

    return run


def _first_call(run: Callable[[Feeds], Outputs], feeds: Feeds,
                cache_dir: Path | None) -> tuple[Outputs, float, CacheUse]:
    """The first (compiling) call, timed, with Inductor's cache in `cache_dir`; what the cache did."""
    import contextlib

    from torch._dynamo.utils import counters
    from torch._inductor.runtime.cache_dir_utils import temporary_cache_dir

    before = dict(counters["inductor"])
    where = temporary_cache_dir(str(cache_dir)) if cache_dir is not None else contextlib.nullcontext()
    with where:
        started = time.perf_counter()
        out = run(feeds)
        seconds = time.perf_counter() - started
    delta = {k: v - before.get(k, 0) for k, v in counters["inductor"].items()}
    hits, misses = delta.get("fxgraph_cache_hit", 0), delta.get("fxgraph_cache_miss", 0)
    state = "hit" if hits and not misses else "miss" if misses and not hits else "partial" if hits else "none"
    return out, seconds, {"state": state, "hits": hits, "misses": misses}


# ---- build, verify, open ------------------------------------------------------------------------------
def build_module(ctx: Context) -> Built:
    """The torch artifact: the source copied in; compiled setups also keep the Inductor cache of the compile
    done here (at the resolved input sizes), so `run` starts warm. The module compiled here is what verification
    runs (`Built`)."""
    from gpux.runtimes.torch_export import system_temp

    torch = _torch()
    setup = Setup.of(ctx.target.options)
    main = ctx.workdir / MAIN[setup.fmt]
    shutil.copyfile(ctx.src, main)
    cache = ctx.workdir / CACHE
    with system_temp():  # Inductor's process-wide folders must outlive this step's scratch folder
        opened = open_module(main, setup, ctx.project, cache, ctx.log)
    info: ModuleInfo = {"main": main.name, "torch": torch.__version__, "runs_on": _runs_on(setup, opened)}
    if setup.compile == "off":
        return Built(info, opened.run)
    if "compile_failed" in opened.details:  # runs eager, as verified; `run` does not try again
        info["compile_failed"] = opened.details["compile_failed"]
        shutil.rmtree(cache, ignore_errors=True)
        return Built(info, opened.run)
    files = [p for p in cache.rglob("*") if p.is_file()]
    for lock in (p for p in files if p.suffix == ".lock"):
        lock.unlink(missing_ok=True)
    info |= {"compile_seconds": opened.details["compile_s"], "compile_cache": opened.details["compile_cache"],
             "cache_files": sum(1 for p in cache.rglob("*") if p.is_file())}
    return Built(info, opened.run)


def verify_runner(artifact: Path, target: Target) -> Callable[[Feeds], Outputs] | str:
    """What verification runs where the build did not hand it the module it compiled (`Built`, what
    `build_module` always returns): the module is not compiled a second time; a reason where the device is not
    here."""
    from gpux.providers import probe_torch

    setup = Setup.of(target.options)
    avail = probe_torch(setup.device, setup.device_id)
    if not avail.ok:
        return f"PyTorch cannot run on {setup.device} here: {avail.reason}"
    return f"the module of {artifact.name} is verified as its build opened it"


def open_runner(provider: str, project: Project, artifact: Published) -> Runner:
    """A Runner over the artifact: the Inductor cache copied to the store's `cache/` and used from there."""
    from gpux.providers import Runner

    setup = Setup.of(artifact.target.options)
    failed = artifact.info.get("compile_failed")
    if failed:  # compiling failed where this artifact was built (and the build said so): eager, as verified
        setup = dataclasses.replace(setup, compile="off")
    cache = None
    if (artifact.dir / CACHE).is_dir():
        cache = artifact.dir.parent / "cache" / artifact.dir.name / CACHE
        if not cache.is_dir():
            tmp = cache.with_name(f".{CACHE}.tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(artifact.dir / CACHE, tmp)
            tmp.replace(cache)
    started = time.perf_counter()
    opened = open_module(artifact.main, setup, project, cache, _warnings_only)
    opened.details["open_s"] = round(time.perf_counter() - started, 4)
    if failed:
        opened.details["compile_failed"] = failed
    return Runner(run=opened.run, output_names=opened.names, used=_runs_on(setup, opened), details=opened.details)


def _runs_on(setup: Setup, opened: Opened) -> str:
    """What executes: eager where compiling failed here."""
    return dataclasses.replace(setup, compile=opened.details["compile"]).describe()


def _warnings_only(msg: str) -> None:
    """Opening for `run` or `serve` is quiet but for a warning (compiling failed, running eager)."""
    from gpux import report

    if msg.startswith("warning: "):
        report.info(msg)


def torch_target(project: Project, provider: str, fmt: str) -> Target:
    """PyTorch runs the source on `provider`'s device: `compile: auto` resolved, the device index recorded."""
    from gpux.plan.targets import Target
    from gpux.providers import registry

    block = getattr(project.config.providers, provider)
    t = block.torch
    torch = registry()[provider].torch
    compiles = torch is not None and torch.compiles  # compile: auto means torch.compile there (a plugin's row), else
    # eager: on an H200, torch.compile's default mode ran slower than eager (docs/benchmarks.md)
    mode = t.compile if t.compile != "auto" else ("default" if compiles else "off")
    opts = {**t.model_dump(mode="json"), "compile": mode, "device": provider,
            "device_id": int(getattr(block, "device_id", 0) or 0), "source_format": fmt}
    label = "eager" if mode == "off" else mode
    return Target(id=f"torch-{provider}-{t.precision}-{label}", kind="torch-module", provider=provider,
                  precision=t.precision, options=opts)
