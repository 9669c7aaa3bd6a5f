"""`gpux run NAME SOURCE --on ray`: batch inference on Ray Data. The files are listed here (a folder, a glob, an
@list file, a URI prefix), the artifact is built here once, and a pool of actors (gpux.run.ray_answer) each opens
it and answers batches of files; the answers come back in input order and are written once, here."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpux import report
from gpux.errors import GpuxError, UsageError
from gpux.optional import require

if TYPE_CHECKING:
    from gpux.config.load import Project


@dataclass(frozen=True, kw_only=True)
class BatchRequest:
    """What `gpux run NAME SOURCE --on ray` was asked for."""

    sources: tuple[str, ...]
    on: str = "ray"
    output: str | None = None
    resume: bool = False
    provider: str | None = None
    strict: bool = False
    store: str | None = None
    batch: int | None = None  # files per inference, as `gpux run`
    concurrency: int | None = None
    num_cpus: float | None = None
    num_gpus: float | None = None
    quiet: bool = False  # no progress bars (--json)


@dataclass(frozen=True)
class Summary:
    files: int
    answered: int
    errors: int
    skipped: int
    seconds: float

    def line(self) -> str:
        rate = self.answered / self.seconds if self.seconds > 0 else 0.0
        skipped = f", {self.skipped} answered before (--resume)" if self.skipped else ""
        return (f"{self.files} files: {self.answered - self.errors} answered, {self.errors} failed{skipped}; "
                f"{self.seconds:.1f}s ({rate:.1f} files/s)")


def ray_address(on: str) -> str | None:
    """The Ray address `--on` names: `ray` (a running cluster $RAY_ADDRESS names, else a local Ray),
    `ray://HOST:PORT` (Ray Client), or `ray:ADDRESS` (`auto`, or a cluster's GCS HOST:PORT)."""
    if on == "ray":
        return None
    if on.startswith("ray://"):
        return on
    if on.startswith("ray:") and len(on) > 4:
        return on[4:]
    raise UsageError(f"--on {on}: expected local, ray, ray://HOST:PORT (Ray Client) or ray:ADDRESS "
                     "(auto, or the cluster's HOST:PORT)")


def list_files(sources: tuple[str, ...], kind: str | None) -> list[str]:
    """Local sources as `gpux run` lists them (a folder's files of the kind, globs, @list files); URIs (s3://...) of
    a file or a prefix through pyarrow's filesystems."""
    from gpux.answers.steps import expand_paths, input_files

    out: list[str] = []
    local: list[str] = []
    for s in expand_paths(sources):
        if "://" in s:
            out += input_files(local, kind) if local else []
            local = []
            out += _uri_files(s, kind)
        else:
            local.append(s)
    return out + (input_files(local, kind) if local else [])


def _uri_files(uri: str, kind: str | None) -> list[str]:
    from gpux.answers.steps import SUFFIXES

    fs, arrow = require("pyarrow.fs", extra="ray"), require("pyarrow", extra="ray")
    try:
        filesystem, path = fs.FileSystem.from_uri(uri)
        info = filesystem.get_file_info(path)
        if info.type == fs.FileType.File:
            return [uri]
        found = filesystem.get_file_info(fs.FileSelector(path, recursive=False))
    # pyarrow's declared errors: a missing filesystem library, credentials, a bad bucket, a scheme it does not know
    except (OSError, ValueError, arrow.ArrowException) as exc:
        raise UsageError(f"{uri}: cannot list: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
                         hint="install the filesystem's library (pyarrow's S3/GCS support) and credentials") from exc
    suffixes = SUFFIXES.get(kind or "image", ())
    scheme = uri.split("://", 1)[0]
    files = sorted(f"{scheme}://{f.path}" for f in found if f.type == fs.FileType.File and
                   (not suffixes or os.path.splitext(f.path)[1].lower() in suffixes))
    if not files:
        raise UsageError(f"{uri}: no {kind or 'image'} files there")
    return files


def actor_resources(project: Project, provider: str, req: BatchRequest) -> dict[str, float]:
    """CPUs and GPUs per actor: the command line, else deploy.ray.batch, else the provider's row (a GPU provider
    asks for a GPU)."""
    from gpux.providers import registry

    declared = project.config.deploy.ray.batch
    row = registry().get(provider)
    gpus = req.num_gpus if req.num_gpus is not None else declared.num_gpus
    if gpus is None:
        gpus = 1.0 if row is not None and row.gpu_resource else 0.0
    cpus = req.num_cpus if req.num_cpus is not None else declared.num_cpus
    return {"num_cpus": 1.0 if cpus is None else cpus, "num_gpus": gpus}


def concurrency(project: Project, req: BatchRequest, resources: dict[str, float], cluster: dict[str, float]) -> int:
    """Actors: the command line, else deploy.ray.batch, else as many as the cluster's CPUs (GPUs) hold."""
    asked = req.concurrency or project.config.deploy.ray.batch.concurrency
    if asked:
        return int(asked)
    fits = [cluster.get(k, 0.0) // v for k, v in (("CPU", resources["num_cpus"]), ("GPU", resources["num_gpus"]))
            if v > 0]
    return max(1, int(min(fits))) if fits else 1


def answer_on_ray(project: Project, req: BatchRequest) -> int:
    """List, build once, answer on Ray Data, write in input order; a summary line at the end. Exit 0, or 1 where
    any file was recorded with an error."""
    from gpux.answers.steps import Steps, file_kind
    from gpux.model.io import interface
    from gpux.run.inuse import holding
    from gpux.run.ray_output import Answers, check_output

    address = ray_address(req.on)
    check_output(req.output, req.resume)
    files = list_files(req.sources, file_kind(project))
    inputs, outputs = interface(project, req.store)
    Steps.of(project, inputs, outputs).file_input(files[0])  # a model that takes no files is refused here
    ray_modules()  # before an output is opened
    out = Answers(req.output, req.resume)
    todo = [(i, f) for i, f in enumerate(files) if f not in out.answered]
    started = time.perf_counter()
    try:
        with holding(project.name, project.root, req.store, "gpux run --on ray"):
            if todo:
                _run(project, req, address, todo, out)
    finally:
        out.close()
    summary = Summary(len(files), out.count, out.errors, len(files) - len(todo), time.perf_counter() - started)
    report.info(summary.line())
    return 1 if summary.errors else 0


def ray_modules() -> tuple[Any, Any]:
    """ray and ray.data, or a MissingDependency naming the extra (pandas and pyarrow are what Ray Data imports)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray = require("ray", extra="ray")
    for needed in ("pandas", "pyarrow"):
        require(needed, extra="ray")
    return ray, require("ray.data", extra="ray")


def _run(project: Project, req: BatchRequest, address: str | None, todo: list[tuple[int, str]], out: Any) -> None:
    from gpux.artifacts.build import build
    from gpux.plan.select import select
    from gpux.run.ray_answer import ActorSpec, FileAnswerer

    ray, data = ray_modules()
    selection = select(project, req.provider, req.strict, store_dir=req.store)
    chosen = selection.runs_on or selection.chain[-1]
    build(project, chosen, store_dir=req.store, log=report.progress(req.quiet))  # once, here; actors open it
    started_here = not ray.is_initialized()
    if started_here:  # a new local Ray only where no address is named: no dashboard then
        joining = address or os.environ.get("RAY_ADDRESS")
        ray.init(address=address, log_to_driver=False, **({} if joining else {"include_dashboard": False}))
    try:
        resources = actor_resources(project, chosen, req)
        actors = concurrency(project, req, resources, ray.cluster_resources())
        ctx = data.DataContext.get_current()
        ctx.execution_options.preserve_order = True  # answers come back in input order
        ctx.enable_progress_bars = not req.quiet
        per_call = min(project.config.deploy.ray.batch.files_per_call, -(-len(todo) // actors))  # every actor busy
        spec = ActorSpec(config=str(project.path), store=req.store, provider=req.provider, strict=req.strict,
                         batch=req.batch)
        report.info(f"answering {len(todo)} files on Ray Data: {actors} actor(s) of {_shown(resources)}, "
                    f"{per_call} files per call")
        items = [{"index": i, "file": f} for i, f in todo]
        ds = data.from_items(items, override_num_blocks=-(-len(items) // per_call))  # a block per call
        answered = ds.map_batches(FileAnswerer, fn_constructor_args=(spec,), batch_size=per_call,
                                  compute=data.ActorPoolStrategy(size=actors), batch_format="numpy", **resources)
        try:
            for batch in answered.iter_batches(batch_size=None, batch_format="numpy"):
                out.write([str(line) for line in batch["line"]])
        except ray.exceptions.RayError as exc:  # an actor that cannot open the model, a node lost for good
            raise RayJobFailed(f"Ray Data stopped after {out.count} of {len(todo)} files: {_last_line(exc)}",
                               hint="rerun with --resume to answer the rest" if req.output else None) from exc
    finally:
        if started_here:
            ray.shutdown()


class RayJobFailed(GpuxError):
    """The Ray job ended before every file was answered."""


def _last_line(exc: BaseException) -> str:
    """The root cause a Ray error ends its message with (`Type: message` of the exception raised in an actor)."""
    lines = [x.strip() for x in str(exc).splitlines() if x.strip()]
    return lines[-1][:300] if lines else type(exc).__name__


def _shown(resources: dict[str, float]) -> str:
    return ", ".join(f"{v:g} {k.removeprefix('num_')[:-1].upper()}" for k, v in resources.items() if v)
