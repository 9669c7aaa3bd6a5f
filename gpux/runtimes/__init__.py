"""The kinds of artifact (`ArtifactKind`; a target's `step` names one) and what a build is handed: how each
kind is built, checked on this machine and opened, named as 'module:function' so nothing heavy is imported until
one is built. (The pre- and post-processing steps a gpux.yml declares are another thing: gpux.answers.steps.)"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from pkgutil import resolve_name as resolve
from typing import TYPE_CHECKING, Protocol, TypedDict, cast

from gpux.errors import BuildFailed, error_lines, first_line

if TYPE_CHECKING:
    from gpux.arrays import Feeds, Outputs
    from gpux.config.load import Project
    from gpux.model.tensor import Tensor
    from gpux.plan.targets import Target
    from gpux.providers.row import Runner

Log = Callable[[str], None]
__all__ = [
    "ARTIFACT_KINDS",
    "KIND_HINTS",
    "MESSAGES",
    "NOTHING_QUANTIZED",
    "OPENING",
    "ArtifactKind",
    "BuildStep",
    "Built",
    "Context",
    "Environment",
    "Goal",
    "Job",
    "Log",
    "NothingConverted",
    "OpenStep",
    "Published",
    "VerifyStep",
    "error_line",
    "int8_did_nothing",
    "kind_of",
    "opening",
    "refuse",
    "resolve",
    "targets",
]


class Environment(TypedDict):
    """What of this machine an artifact depends on (part of its key)."""

    versions: dict[str, str | None]  # its runtime's distributions (None: not installed)
    device: Mapping[str, object]  # the identity of the device it is made for (gpux.machine.device_identity)


class Published(Protocol):
    """A published artifact as its runtime opens it (gpux.artifacts.store.Artifact): its folder, its main file, the
    target it was built for and the info its build step returned (as kept in its manifest)."""

    @property
    def dir(self) -> Path: ...

    @property
    def main(self) -> Path: ...

    @property
    def target(self) -> Target: ...

    @property
    def info(self) -> Mapping[str, object]: ...  # what its build step returned, as manifest.json keeps it


@dataclass(frozen=True)
class Built:
    """A build step's result when building opened the artifact: its info, and the opened artifact that verification
    runs instead of opening it again (a module compiled by the build, which a second compile would only repeat)."""

    info: Mapping[str, object]
    opened: Callable[[Feeds], Outputs]


class BuildStep(Protocol):
    """A kind's `build`: writes its artifact into `ctx.workdir` and returns its info, the runtime's own record
    (a TypedDict of JSON values, each runtime its own keys) kept as the manifest's "info"; its "main" names the
    artifact's main file, relative to the folder. A step that opened what it built returns it with its info
    (`Built`)."""

    def __call__(self, ctx: Context) -> Mapping[str, object] | Built: ...


class VerifyStep(Protocol):
    """A kind's `verify`: the built artifact opened on this machine as `infer(feeds) -> outputs`, what the build
    checks against the FP32 reference; a string says why it cannot run here (verification skipped)."""

    def __call__(self, artifact: Path, target: Target) -> Callable[[Feeds], Outputs] | str: ...


class Goal(Protocol):
    """What verification will hold a build to (`gpux.quality.verify.Goal`), as a build step that aims at it reads
    it: the inputs, the cosine asked for, what the inputs are, and how verification scores outputs on them."""

    @property
    def feeds(self) -> list[Feeds]: ...

    @property
    def min_cosine(self) -> float: ...

    @property
    def data(self) -> str: ...

    def cosine(self, got: Sequence[Outputs], samples: Sequence[int] | None = None) -> float: ...


class OpenStep(Protocol):
    """A kind's `open`: the published artifact opened for provider `provider` as the project asks."""

    def __call__(self, provider: str, project: Project, artifact: Published) -> Runner: ...


EXPORT_OPSET = 17  # pinned: the ONNX opset PyTorch sources are exported at


@dataclass(frozen=True, kw_only=True)
class ArtifactKind:
    """How one kind of target is built and checked (functions named lazily as 'module:function', each the role
    its Protocol says: `build_step`, `verify_step` and `open_step` resolve them as such)."""

    build: str  # a BuildStep
    verify: str | None  # a VerifyStep: an infer(feeds) -> outputs callable on this machine; None: not here
    packages: tuple[str, ...]  # distributions whose versions key the artifact
    device: str  # "none" | "cpu" | "cpu-if-level" | "gpu" | "torch": which device identity keys it
    open: str = "gpux.runtimes.onnxruntime:open_runner"  # an OpenStep: (provider, project, artifact) -> Runner
    on_run: bool = True  # cheap enough to build silently on `run`? (False: say it may take minutes)
    needs_device: bool = False  # can only be built on the device it runs on
    shapes: bool = False  # the resolved sizes of symbolic dims shape the artifact (key them)
    # 'module:function', (target) -> the precision an artifact of this kind computes at where its runtime says
    # (OpenVINO's execution precision hint); None: the target's precision
    precision: str | None = None

    def build_step(self) -> BuildStep:
        return cast("BuildStep", resolve(self.build))

    def verify_step(self) -> VerifyStep | None:
        """None: this kind cannot run on this machine (verification skipped)."""
        return None if self.verify is None else cast("VerifyStep", resolve(self.verify))

    def open_step(self) -> OpenStep:
        return cast("OpenStep", resolve(self.open))

    def environment(self, target: Target) -> Environment:
        """What of this machine an artifact of this kind depends on (part of its key): the versions of its
        runtime's packages, and the identity of the device it is made for (a PyTorch module's: its runtime's)."""
        from gpux.machine import device_identity
        from gpux.optional import versions_of

        device = resolve("gpux.runtimes.torch_module:device_identity")(target) if self.device == "torch" else \
            device_identity(self.device, target.options)
        return {"versions": versions_of(self.packages), "device": device}


ORT_KIND = ArtifactKind(build="gpux.runtimes.onnxruntime:build_onnx", verify="gpux.runtimes.onnxruntime:verify_runner",
                        packages=("onnxruntime", "onnx"), device="cpu-if-level")
ARTIFACT_KINDS: dict[str, ArtifactKind] = {
    "optimize": ORT_KIND,
    "float16": dataclasses.replace(ORT_KIND, build="gpux.runtimes.onnxruntime_fp16:build_fp16"),
    "quantize": dataclasses.replace(ORT_KIND, build="gpux.runtimes.onnxruntime_int8:build_int8"),
    "torch-export": ArtifactKind(
        build="gpux.runtimes.torch_export:export_onnx", verify="gpux.runtimes.onnxruntime:verify_runner",
        packages=("torch", "onnx"), device="none"),
    "coreml-package": ArtifactKind(
        build="gpux.runtimes.coreml:build_package", verify="gpux.runtimes.coreml:verify_runner",
        packages=("coremltools", "torch"), device="none", open="gpux.runtimes.coreml:open_runner", shapes=True),
    "openvino-ir": ArtifactKind(
        build="gpux.runtimes.openvino:build_ir", verify="gpux.runtimes.openvino:verify_runner",
        packages=("openvino", "nncf", "onnxruntime"), device="cpu", open="gpux.runtimes.openvino:open_runner",
        shapes=True, precision="gpux.runtimes.openvino_options:execution_precision"),
    "torch-module": ArtifactKind(
        build="gpux.runtimes.torch_module:build_module", verify="gpux.runtimes.torch_module:verify_runner",
        packages=("torch",), device="torch", open="gpux.runtimes.torch_module:open_runner", needs_device=True,
        shapes=True),
    "tensorrt-engine": ArtifactKind(
        build="gpux.runtimes.tensorrt:build_engine", verify="gpux.runtimes.tensorrt:verify_runner",
        packages=("tensorrt", "onnxruntime"), device="gpu", open="gpux.runtimes.tensorrt:open_runner", on_run=False,
        needs_device=True),
}


# A runtime's error in one line: (how the first line of its message opens, its reader 'module:function',
# (exc) -> text); the first row whose opening matches reads it (the last, ONNX Runtime's, matches any).
MESSAGES: tuple[tuple[str, str], ...] = (
    ("Exception from", "gpux.runtimes.openvino:reason"),  # OpenVINO: source locations first, the reason last
    ("", "gpux.runtimes.onnxruntime:status_message"),
)


def error_line(exc: BaseException) -> str:
    """A runtime's error as one line (`Type: reason`), read as the runtime that raised it writes its messages."""
    lines = error_lines(exc)
    opening = lines[0] if lines else ""
    reader = next(r for opens, r in MESSAGES if opening.startswith(opens))
    return first_line(exc, str(resolve(reader)(exc)))


def kind_of(name: str) -> ArtifactKind:
    """The kind of artifact `name`: built in, or added by a registry row (a plugin runtime's own kind)."""
    if name in ARTIFACT_KINDS:
        return ARTIFACT_KINDS[name]
    from gpux.providers import registry

    added = {n: kind for row in registry().values() for n, kind in row.kinds}
    kind = added[name]
    if not isinstance(kind, ArtifactKind):
        raise TypeError(f"the kind of artifact {name!r} a provider row adds is not a gpux.runtimes.ArtifactKind")
    return kind


# runtime -> how its sessions open an artifact on this machine, (project, provider) -> settings; what `gpux inspect`
# shows and `-v` repeats from the opened runner. A runtime not named here opens as its block says.
OPENING = {"onnxruntime": "gpux.runtimes.onnxruntime:opening", "openvino": "gpux.runtimes.openvino:opening"}


def opening(project: Project, provider: str) -> dict[str, object]:
    """How provider `provider`'s artifact is opened here: its runtime's settings, else its block's `torch:` one."""
    from gpux.providers import runtime_of

    name = runtime_of(project, provider)
    if name in OPENING:
        return dict(resolve(OPENING[name])(project, provider))
    block = getattr(project.config.providers, provider, None)
    torch = getattr(block, "torch", None)
    return torch.model_dump(mode="json") if torch is not None and name == "torch" else {}


def targets(project: Project, provider: str, inputs: dict[str, Tensor] | None = None) -> list[Target]:
    """The targets that provider `provider` needs, in build order, as its row's planner says (`inputs`: the
    model's Tensors, which fix TensorRT's shape profiles). A PyTorch source runs in PyTorch itself (runtime
    torch), is converted by the row's own PyTorch planner, or is first exported to ONNX, which the rest consume."""
    from gpux.formats import TORCH_FORMATS, source_format
    from gpux.plan.targets import Target
    from gpux.providers import registry, runtime_of

    row = registry().get(provider)
    plan = resolve(row.targets if row else "gpux.runtimes.onnxruntime_plan:onnx_targets")  # unknown: ORT's artifact
    fmt = source_format(project)
    if fmt not in TORCH_FORMATS:
        return list(plan(project, provider, inputs))
    if row is not None and row.torch is not None and runtime_of(project, provider) == "torch":
        return [resolve("gpux.runtimes.torch_module:torch_target")(project, provider, fmt)]
    if row is not None and row.torch_targets:  # it converts PyTorch itself (coremltools: an ML Program package)
        return list(resolve(row.torch_targets)(project, provider, fmt))
    export = Target(id="onnx-export", kind="torch-export", provider="torch", precision="fp32",
                    options={"opset": EXPORT_OPSET, "source_format": fmt})
    return [export, *(dataclasses.replace(t, consumes=export.id) if t.consumes == "source" else t
                      for t in plan(project, provider, inputs))]


NOTHING_QUANTIZED = "no operator was quantized"


class NothingConverted(BuildFailed):
    """A lossy build that left every operator of the model in fp32 (an int8 quantizer that quantized nothing, an fp16
    conversion that converts nothing): its artifact would be the fp32 model under another precision's name. The
    build publishes the fp32 artifact instead, keyed as fp32, and says so (gpux.artifacts.plan.as_fp32); never
    remembered as a failing conversion."""

    def __init__(self, message: str) -> None:
        super().__init__(message, hint="set precision: fp32 for this model to say so; --strict refuses it",
                         conversion=False)


def int8_did_nothing(ctx: Context, problem: str) -> bool:
    """Whether an int8 build changed nothing useful (`problem` says how: empty, it did): a warning (the caller
    notes `problem` in the artifact's info as "int8_warning"); NothingConverted where no operator was quantized
    (NOTHING_QUANTIZED: the fp32 artifact is built instead); a failure under --strict (not remembered as a failing
    conversion)."""
    if not problem:
        return False
    message = f"{ctx.target.id}: int8 did nothing useful for this model: {problem}"
    refuse(ctx, message, problem == NOTHING_QUANTIZED)
    ctx.log(f"warning: {message}")
    return True


def refuse(ctx: Context, message: str, nothing: bool = True) -> None:
    """A lossy build that did nothing (useful): refused under --strict (not remembered as failing); where it
    converted nothing at all (`nothing`), NothingConverted."""
    if ctx.strict:
        raise BuildFailed(message, hint="keep fp32 for this model, or drop --strict to accept it",
                          conversion=False)  # --strict only: not remembered as failing
    if nothing:
        raise NothingConverted(message)


# what to do when building a kind of artifact raises, by kind
KIND_HINTS = {
    "float16": "the fp16 conversion failed for this model; keep precision: fp32. GPUX_DEBUG=1 shows details",
    "quantize": "int8 quantization failed for this model; keep precision: fp32 or try another quantization "
                "mode. GPUX_DEBUG=1 shows details",
    "": "this runtime cannot take the model as it is; GPUX_DEBUG=1 shows details",
}


@dataclass(kw_only=True)
class Context:
    """What a build step receives: its input file, a private folder, and the model's interface."""

    project: Project
    target: Target
    src: Path
    workdir: Path
    inputs: dict[str, Tensor]
    shapes: dict[str, int]
    log: Log
    calibration: Callable[[], list[Feeds]]
    strict: bool = False  # precision that did nothing fails instead of warning
    goal: Callable[[], Goal] | None = None  # verification inputs, FP32 outputs and min cosine (accuracy-aware)


@dataclass(kw_only=True)
class Job:
    """What every target of one build shares, read by its steps and by quality: the project, the model's interface,
    the sizes of symbolic dims and the model the first target reads. What the command asked (--force, --no-verify,
    --strict) is the executor's (`artifacts.build.Asked`), not the steps'."""

    project: Project
    inputs: dict[str, Tensor]
    shapes: dict[str, int]
    log: Log
    source: Path  # the model the first target reads and the FP32 reference runs (IR-lowered copy if needed)
