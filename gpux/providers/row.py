"""What one registry row is made of: the `Provider` row and the facts it holds (how PyTorch reaches its device,
its container image, how Triton serves it), plus what a probe answers (`Availability`) and what an opened
artifact is (`Runner`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from pkgutil import resolve_name
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from gpux.documents import AvailabilityDoc

if TYPE_CHECKING:
    from gpux.arrays import Feeds, Outputs
    from gpux.providers.options import OptionFields, Options

Status = Literal["ok", "not installed", "import failed", "no device"]
# `gpux tune`'s rows of a provider: (precision label, option fields); and its int8 refinements: (the fields that mark
# its plain int8 row, [(what a refinement changes, its build time in the plain one's)])
TuneRows: TypeAlias = "tuple[tuple[str, OptionFields], ...]"
Refinements: TypeAlias = "tuple[OptionFields, tuple[tuple[OptionFields, float], ...]]"


@dataclass(frozen=True)
class Availability:
    provider: str
    status: Status
    reason: str = ""
    fix: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> AvailabilityDoc:
        return {"provider": self.provider, "status": self.status, "reason": self.reason, "fix": self.fix}


@dataclass(frozen=True)
class Recipe:
    """How a runtime opens a session again without the project (`Runner.recipe`, kept in gpux serve's record): its
    opening function, and the plain values it is called with."""

    runtime: str  # module:function, called only where it is how the artifact's own kind opens (serve.record.opener)
    arguments: dict[str, Any]  # its keyword arguments, plain values as JSON keeps them

    @classmethod
    def of(cls, doc: Mapping[str, Any]) -> Recipe:
        """The recipe as a record on disk holds it."""
        return cls(str(doc["runtime"]), dict(doc["arguments"]))

    @property
    def artifact(self) -> Path:
        """The folder of the artifact it opens."""
        return Path(self.arguments["model"]).parent


@dataclass(kw_only=True)
class Runner:
    """An opened artifact: `run(feeds)` returns outputs in `output_names` order."""

    run: Callable[[Feeds], Outputs]
    output_names: list[str]
    used: str  # what executes, e.g. "CPUExecutionProvider" or "OpenVINO CPU"
    dropped: str | None = None  # why the runtime did not take the requested device (None: it did)
    details: dict[str, Any] = field(default_factory=dict)
    close: Callable[[], None] = lambda: None
    native: object = None  # the runtime's own session / compiled model (gpux itself never reads it)
    binder: Callable[[Feeds, int], list[Callable[[], object]]] | None = None
    fast: Callable[[Feeds], Outputs] | None = None  # run() without the runtime's Python-side checks
    recipe: Recipe | None = None  # how to open it again without the project
    # the runtime's error types for inputs it rejects (the feeds do not fit the model): an InputError, no fallback
    rejects: tuple[type[BaseException], ...] = ()

    def bind(self, feeds: Feeds, n: int = 1) -> list[Callable[[], object]]:
        """`n` zero-argument callables that each run `feeds` with the least per-call work (for timing loops);
        each may be used from its own thread."""
        if self.binder is not None:
            return self.binder(feeds, n)
        run = self.run
        return [lambda: run(feeds)] * n


@dataclass(frozen=True, kw_only=True)
class ImageRow:
    """How the container image of one provider is made and run (gpux.deploy.image)."""

    base_image: str | None  # None: the user must name one (--base-image or package.base_image)
    pip: tuple[str, ...]  # runtime distributions pip installs beside gpux
    apt: tuple[str, ...] = ()  # system packages the base image needs for Python >= 3.11 and venv
    gpus: bool = False  # request every GPU at run time (DeviceRequest count=-1, capabilities [[gpu]])
    devices: tuple[str, ...] = ()  # host devices passed at run time
    host_build: str | None = None  # provider whose artifacts this machine builds and the image may reuse
    image_build: str | None = None  # provider `gpux build` runs for at image build time
    no_device_probe: bool = False  # the image build machine has no GPU: build without the device probe
    note: str = ""  # `{store}` reads as the image's artifact store
    torch_index: str | None = None  # runtime torch: the PyTorch wheel index torch is installed from


@dataclass(frozen=True, kw_only=True)
class TorchDevice:
    """How PyTorch reaches a provider's device (`runtime: torch`)."""

    type: str  # torch.device type (ROCm builds call HIP "cuda")
    build: str = ""  # the PyTorch build it needs: CUDA | ROCm ("": any)
    index: str | None = None  # its wheels at download.pytorch.org/whl/<index> (None: PyPI's own)
    compiles: bool = False  # `compile: auto` means torch.compile here (eager elsewhere)
    variants: tuple[tuple[str, str], ...] = ()  # (compile, precision) rows `run --benchmark -p all` adds
    image: ImageRow | None = None  # the container image of a project that runs it with runtime torch


@dataclass(frozen=True, kw_only=True)
class Flavor:
    """How Triton serves one provider's artifact: which platform or backend, on which device kind."""

    platform: str | None  # e.g. onnxruntime_onnx
    backend: str | None  # e.g. openvino
    kind: str  # KIND_CPU | KIND_GPU
    files: tuple[str, ...]  # the file names Triton looks for in a version folder
    accelerator: str | None = None  # ONNX Runtime execution accelerator Triton adds
    builder: str = "cpu"  # the provider whose build makes the served artifact (another: the ONNX its plan starts from)
    parameters: str = ""  # 'module:function' (its options) -> the model's `parameters` (a backend's own)
    accelerator_parameters: str = ""  # 'module:function' (its options) -> the accelerator's parameters


@dataclass(frozen=True, kw_only=True)
class Provider:
    """One row of the registry: every fact gpux keeps about one provider. Plugins add rows through the
    `gpux.providers` entry-point group; a row names its code as 'module:attribute', imported only when used."""

    name: str
    runtime: str  # what runs it unless its block says otherwise: onnxruntime | openvino | torch | a plugin's
    ep: str | None  # exact ONNX Runtime execution provider string (also where its default runtime is another)
    extra: str  # pip extra of gpux-ml that installs it
    platforms: tuple[str, ...]  # sys.platform prefixes where it can run
    device_problem: Callable[[], str | None] | None = field(default=None, compare=False)  # why no device (None: found)
    hardware: str = ""
    in_every_build: bool = False  # its EP is in every build of its runtime: no import needed to know
    last_resort: bool = False  # runs everywhere its package installs: where every non-strict request ends
    options: str = "Options"  # its gpux.yml block's option model: 'module:Class' (a bare name: gpux.providers.options)
    fallback: tuple[str, ...] = ()  # what an explicit request for it falls back to, before cpu
    ort_package: str = ""  # the ONNX Runtime distribution that carries its EP (for the fix line)
    also_accepted: tuple[str, ...] = ()  # other EPs that serve it
    torch: TorchDevice | None = None  # PyTorch itself runs on it (`runtime: torch`): how
    precisions: tuple[str, ...] = ("fp32",)  # what `run --benchmark -p all` measures
    targets: str = "gpux.runtimes.onnxruntime_plan:onnx_targets"  # (project, provider, inputs) -> artifacts it needs
    torch_targets: str = ""  # (project, provider, source format) -> its own targets from a PyTorch source
    # kinds of artifact its runtime adds: (name, a gpux.runtimes.ArtifactKind: a room above, which checks it)
    kinds: tuple[tuple[str, object], ...] = ()
    probe_with: str = ""  # its own probe (name -> Availability) where gpux has none for its runtime
    gpu_resource: str | None = None  # the Kubernetes extended resource of its device
    title: str = ""  # what its gpux.yml block is (the schema's description of providers.<name>)
    image: ImageRow | None = None  # its container image (gpux package); None: no image, see no_container
    no_container: str = ""  # why a Linux container cannot run it at all
    triton: tuple[tuple[str, Flavor], ...] = ()  # (runtime it runs with, how Triton serves that artifact)
    # `gpux tune` on its own runtime: (precision label, option fields) rows, and the int8 refinements: (the
    # fields that mark its plain int8 row, [(what a refinement changes, its build time in the plain one's)])
    tune: TuneRows = field(default=(), compare=False)
    refine: Refinements | None = field(default=None, compare=False)

    @property
    def option_model(self) -> type[Options]:
        """Its block's option model, the class `options` names."""
        from gpux.providers.options import Options

        model = resolve_name(self.options if ":" in self.options else f"gpux.providers.options:{self.options}")
        if not (isinstance(model, type) and issubclass(model, Options)):
            raise TypeError(f"provider {self.name}: options {self.options!r} is not a gpux.providers.options.Options")
        return model

    def image_for(self, runtime: str) -> ImageRow | None:
        """Its image when it runs with `runtime`: PyTorch's own for runtime torch where the row has one."""
        if self.torch is not None and self.torch.image is not None and runtime == "torch":
            return replace(self.torch.image, torch_index=self.torch.index)
        return self.image
