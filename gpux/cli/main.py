"""Click commands: parse options, call the core, render, and map errors to exit codes."""

from __future__ import annotations

import sys
from typing import Any

import click

from gpux.cli.groups import GROUPS
from gpux.cli.options import JSON, PROVIDER, REPORT, STORE, STRICT
from gpux.errors import ExitCode, debugging
from gpux.sources.ref import TASKS
from gpux.version import __version__


def command_line() -> str:
    """The command line as typed (what a --report page shows)."""
    import shlex

    from gpux.report import invocation

    args = invocation().args
    return shlex.join(["gpux", *(sys.argv[1:] if args is None else args)])


def _verbose(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        from gpux.report import Invocation

        ctx.ensure_object(Invocation).verbose = True


# Accepted before or after the subcommand (`gpux --debug run ...` and `gpux run ... --debug`); main() reads
# --debug from argv itself so that errors raised while parsing show their traceback too.
COMMON = [
    click.Option(["--debug"], is_flag=True, expose_value=False,
                 help="Show tracebacks for every error ($GPUX_DEBUG=1)."),
    click.Option(["--verbose", "-v"], is_flag=True, expose_value=False, callback=_verbose,
                 help="Every progress line, and why each provider absent from this machine was skipped."),
]


class _Invoked(click.Group):
    """The group whose commands run with their command line's Invocation in force (`report.invoked`): the one
    `main` hands click as the context's object, or one of its own (click's CliRunner)."""

    def invoke(self, ctx: click.Context) -> Any:
        from gpux.report import Invocation, invoked

        with invoked(ctx.ensure_object(Invocation)):
            return super().invoke(ctx)


@click.group(cls=_Invoked, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", "-V", prog_name="gpux")
def cli() -> None:
    """gpux: declare a model in gpux.yml, build optimized artifacts per provider, run them anywhere.

    \b
    Exit codes: 0 ok, 1 build/run/verification/benchmark gate failed, 2 usage,
    3 config error, 4 provider unavailable (strict) or every fallback exhausted,
    70 internal error, 130 interrupted.
    """


@cli.command()
@click.argument("paths", nargs=-1)
@click.option("--format", "fmt", type=click.Choice(["text", "json", "github"]), default="text",
              help="Report style; github prints workflow annotations.")
@click.option("--check-model", is_flag=True,
              help="Also require the model and check it: onnx checker, IR version and opsets against the "
                   "installed runtimes, external data (imports onnx).")
@click.option("--no-model", is_flag=True,
              help="Check the config alone (for models fetched later); by default declared inputs/outputs "
                   "are compared with the model file when it is present.")
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
def validate(paths: tuple[str, ...], fmt: str, check_model: bool, no_model: bool, as_json: bool) -> None:
    """Check gpux.yml files (paths, folders or globs; default: ./gpux.yml)."""
    from gpux.cli.validate import validate_paths

    if check_model and no_model:
        raise click.UsageError("--check-model and --no-model exclude each other")
    if as_json and fmt not in ("text", "json"):
        raise click.UsageError(f"--json and --format {fmt} exclude each other")
    fmt = "json" if as_json else fmt
    code = validate_paths(list(paths) or ["."], fmt, check_model, not no_model)
    sys.exit(code)


@cli.command()
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None, help="Write to a file.")
@click.option("--check", is_flag=True, help="Exit 1 if --output differs from the models (drift check).")
def schema(output: str | None, check: bool) -> None:
    """Print the JSON Schema of gpux.yml."""
    from gpux.cli.validate import schema_command

    schema_command(output, check)


@cli.command()
@click.argument("path", default=".")
@PROVIDER
@STRICT
@click.option("--force", is_flag=True, help="Rebuild even when the cache is valid.")
@click.option("--no-verify", is_flag=True, help="Skip accuracy verification against the FP32 reference.")
@click.option("--dry-run", is_flag=True, help="Print the plan (targets, resolved options) without building.")
@click.option("--shape", "shapes", multiple=True,
              help="Symbolic dim size for verification, calibration and static shapes, e.g. --shape seq=128.")
@STORE
@JSON
def build(no_verify: bool, shapes: tuple[str, ...], **kwargs: Any) -> None:
    """Validate gpux.yml, then build (or reuse) the provider's optimized artifacts."""
    from gpux.cli.build import BuildRequest, build_command, parse_sizes

    sys.exit(build_command(BuildRequest(verify=not no_verify, shapes=parse_sizes(shapes), **kwargs)))


@cli.command()
@click.argument("target", default=".")
@click.argument("files", nargs=-1, type=click.Path())
@click.option("--input", "-i", "input_json", default=None, help="Inputs as JSON: '{\"x\": [[1.0, 2.0]]}'.")
@click.option("--file", "-f", "input_file", type=click.Path(dir_okay=False), default=None,
              help="Inputs from .json, .npy (single input) or .npz (one array per input).")
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None,
              help="Write outputs to .npz; with --on ray, the answers to .jsonl or .parquet.")
@PROVIDER
@STRICT
@STORE
@JSON
@click.option("--placement", is_flag=True, help="Report which execution provider ran each node (ONNX Runtime).")
@click.option("--save", type=click.Path(file_okay=False), default=None, metavar="DIR",
              help="With FILES: write each image with its answers drawn (boxes and labels; a class or text in a "
                   "band below) into DIR, under the file's name.")
@click.option("--benchmark", is_flag=True, help="Measure latency and throughput instead of printing outputs.")
@click.option("--runs", type=click.IntRange(min=1), default=None, help="Least measured runs.")
@click.option("--warmup", type=click.IntRange(min=0), default=None, help="Least warm-up runs.")
@click.option("--duration", type=click.FloatRange(min=0), default=None, help="Least measured seconds.")
@click.option("--batch", type=click.IntRange(min=1), default=None,
              help="Size of the 'batch' dim; with FILES, files per inference (default 8 where the batch dim is free).")
@click.option("--shape", "shapes", multiple=True, help="Symbolic dim size, e.g. --shape seq=128.")
@click.option("--concurrency", type=click.IntRange(min=1), default=None,
              help="Parallel requests; with --on ray, actors (default: as many as the cluster holds).")
@click.option("--csv", "as_csv", is_flag=True, help="Benchmark rows as CSV.")
@click.option("--baseline", type=click.Path(dir_okay=False), default=None, help="Benchmark JSON to gate on.")
@click.option("--max-regression", type=float, default=10.0, show_default=True,
              help="Percent a figure may regress against --baseline before exit 1.")
@REPORT
@click.option("--on", default="local", show_default=True, metavar="local|ray[://ADDRESS]",
              help="With FILES: where they are answered. ray: on Ray Data (a local Ray, or the cluster $RAY_ADDRESS "
                   "names); ray://HOST:PORT through Ray Client; ray:ADDRESS joins a cluster (auto, HOST:PORT).")
@click.option("--resume", is_flag=True, help="With --on ray and --output: skip the files that output already answers.")
@click.option("--actor-cpus", type=click.FloatRange(min=0), default=None,
              help="With --on ray: CPUs per actor (default: deploy.ray.batch, else 1).")
@click.option("--actor-gpus", type=click.FloatRange(min=0), default=None,
              help="With --on ray: GPUs per actor (default: deploy.ray.batch, else 1 for a GPU provider).")
def run(target: str, **kwargs: Any) -> None:
    """Run a model (name, project folder, gpux.yml or .onnx) on the best working provider.

    FILES (images, sound files, texts or any files, as the input's preprocess declares; folders of them) are
    answered through the model's declared preprocess and postprocess: one answer per file (one JSON line each
    with --json); --save DIR draws them on the images. For a text input, an argument that names no file or
    folder, has no / and does not end in .txt is the text itself: gpux run NAME "a sentence".
    """
    from gpux.cli.run import RunRequest, run_command

    sys.exit(run_command(RunRequest(target=target, command_line=command_line(), **kwargs)))


@cli.command()
@click.argument("target", default=".")
@STORE
@JSON
def inspect(target: str, store: str | None, as_json: bool) -> None:
    """Show a model's I/O, the providers on this machine and the built artifacts."""
    from gpux.cli.inspect import inspect_command

    sys.exit(inspect_command(target, store, as_json))


@cli.command()
@click.argument("model", required=False)
@click.option("--folder", default=".", show_default=True, help="Where to look for the model when none is named.")
@click.option("--force", is_flag=True, help="Replace an existing gpux.yml.")
@click.option("--input", "declared", multiple=True, metavar="NAME=DTYPE[DIMS]",
              help="A TorchScript module's input, e.g. image=float32[batch,3,32,32] (it records none).")
@click.option("--shape", "shapes", multiple=True, metavar="NAME=SIZE",
              help="The size of a symbolic input dim the model runs at, e.g. height=48 (written under shapes:).")
@click.option("--task", type=click.Choice(TASKS), default=None,
              help="MODEL is a transformers checkpoint (hf://ORG/NAME or a save_pretrained folder): export it for "
              "this task; gpux.yml goes into --folder.")
@JSON
def init(model: str | None, folder: str, force: bool, declared: tuple[str, ...], shapes: tuple[str, ...],
         task: str | None, as_json: bool) -> None:
    """Write a commented gpux.yml beside MODEL (.onnx, TorchScript, .pt2), its I/O read from the model; for a hub id
    (hf://ORG/NAME[/file.onnx]) or a checkpoint, into --folder."""
    from gpux.cli.init_hub import init_hub, wants_hub

    if wants_hub(model, task):  # a hub id or a transformers checkpoint: gpux.yml from the checkpoint's files
        sys.exit(init_hub(str(model), task, folder, force, as_json))
    from gpux.cli.init import init_command

    sys.exit(init_command(model, folder, force, as_json, declared, shapes))


@cli.command()
@click.argument("path", default=".")
@click.option("--provider", "-p", default=None,
              help="Provider the image runs: cpu, openvino, cuda, tensorrt or rocm (default: $GPUX_PROVIDER, "
                   "runtime.backend, else cpu).")
@click.option("--tag", "-t", default=None, help="Image tag (default: gpux/NAME:VERSION-PROVIDER).")
@click.option("--dockerfile-only", "out_dir", type=click.Path(file_okay=False), default=None, metavar="OUT_DIR",
              help="Write the build context (Dockerfile, model, artifacts, gpux wheel) to OUT_DIR; no engine.")
@click.option("--base-image", default=None, help="Base image (default: package.base_image, else per provider).")
@click.option("--run", "run_args", default=None, metavar="ARGS",
              help="Run the image once after building, with these `gpux run` arguments, e.g. --run '--benchmark'.")
@click.option("--ca-bundle", type=click.Path(dir_okay=False), default=None,
              help="PEM bundle pip inside the image trusts (default: package.ca_bundle, else the base image's).")
@click.option("--serve", is_flag=True,
              help="Entry point `gpux serve` (REST + gRPC on serve: ports, all container interfaces) with a "
                   "readiness healthcheck, instead of `gpux run`.")
@STORE
@JSON
def package(**kwargs: Any) -> None:
    """Build a container image that runs the model with `gpux run` (Docker engine from $DOCKER_HOST)."""
    from gpux.deploy.package import PackageRequest, package_command

    sys.exit(package_command(PackageRequest(**kwargs)))


@cli.command()
@click.argument("targets", nargs=-1)
@click.option("--host", default=None, help="Address to bind (default: serve.host, 127.0.0.1).")
@click.option("--port", type=click.IntRange(0, 65535), default=None, help="REST port (default: serve.http_port, 8000).")
@click.option("--grpc-port", type=click.IntRange(0, 65535), default=None,
              help="gRPC port (default: serve.grpc_port, 8001).")
@click.option("--no-grpc", is_flag=True, help="Serve REST only.")
@PROVIDER
@STRICT
@STORE
@click.option("--api-key", envvar="GPUX_API_KEY", default=None,
              help="Require 'Authorization: Bearer KEY' (or $GPUX_API_KEY); health routes stay open.")
@click.option("--max-batch-size", type=click.IntRange(min=0), default=None,
              help="Dynamic batching: rows per merged batch, 0 = off (overrides serve.max_batch_size).")
@click.option("--max-queue-delay-us", type=click.IntRange(min=0), default=None,
              help="How long a batch waits for more requests (overrides serve.max_queue_delay_us).")
@click.option("--instances", type=click.IntRange(min=1), default=None, help="Sessions per model.")
@click.option("--request-timeout", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Seconds a request may take before 408 (overrides serve.request_timeout_s).")
@click.option("--no-access-log", is_flag=True, help="No JSON access line per request on stderr.")
def serve(targets: tuple[str, ...], no_grpc: bool, no_access_log: bool, **options: Any) -> None:
    """Serve models (names, folders, gpux.yml or .onnx) over the Open Inference Protocol (REST and gRPC).

    Projects with the same name and different versions are served as versions of one model.
    SIGTERM drains accepted requests, then exits 0.
    """
    from gpux.serve.command import ServeCommand, serve_command

    overrides = {k: options.pop(k) for k in ("max_batch_size", "max_queue_delay_us", "instances")}
    overrides["request_timeout_s"] = options.pop("request_timeout")
    sys.exit(serve_command(ServeCommand(targets=list(targets), grpc=not no_grpc, access_log=not no_access_log,
                                        overrides=overrides, **options)))  # host, port, grpc_port, provider, ...


@cli.command()
@click.argument("target", default=".")
@click.option("--objective", type=click.Choice(["latency", "throughput"]), default="latency", show_default=True,
              help="latency: lowest median at one request at a time; throughput: most answers per second.")
@click.option("--precisions", default="fp32,fp16,bf16,int8", show_default=True,
              help="Precisions the search may use (comma list).")
@click.option("--providers", default=None, help="Providers to try (comma list; default: every one available).")
@click.option("--seconds", type=click.FloatRange(min=0.05), default=1.0, show_default=True,
              help="Measured seconds per candidate.")
@click.option("--budget", "budget_s", type=click.FloatRange(min=1), default=300.0, show_default=True,
              help="Seconds for the whole search; candidates past it are listed, not measured.")
@click.option("--concurrency", type=click.IntRange(min=1), default=None,
              help="Parallel requests for --objective throughput (default 4).")
@click.option("--allow-unverified", is_flag=True,
              help="Let an unverified candidate be locked (lossy on generated data only, or on rows too few "
                   "to show its floors).")
@click.option("--table", is_flag=True,
              help="Print the accuracy-gated table (every provider x precision, verified or not, the row tune "
                   "would lock marked) and write no lock.")
@click.option("--csv", "as_csv", is_flag=True, help="With --table: the table as CSV on stdout.")
@STORE
@JSON
@REPORT
def tune(target: str, precisions: str, providers: str | None, report: str | None, **kwargs: Any) -> None:
    """Build, verify and benchmark the candidates this machine runs; lock the fastest in gpux.lock.json."""
    from gpux import report as out
    from gpux.bench.report_html import check_report_path, write_report
    from gpux.bench.table import render_table, to_csv
    from gpux.bench.tune import TuneRequest, render
    from gpux.bench.tune import tune as run_tune

    if report:
        check_report_path(report)
    if kwargs["as_csv"] and not kwargs["table"]:
        raise click.UsageError("--csv writes the table: add --table")
    if kwargs["as_csv"] and kwargs["as_json"]:
        raise click.UsageError("--csv and --json both given: pick the one to write on stdout")
    lock = run_tune(TuneRequest(target=target, precisions=tuple(precisions.split(",")),
                                providers=tuple(providers.split(",")) if providers else None, **kwargs))
    if kwargs["as_json"]:
        out.emit_json(lock)
    elif kwargs["as_csv"]:
        sys.stdout.write(to_csv(lock["table"]))
    else:
        render_table(lock) if kwargs["table"] else render(lock)
    if report:
        write_report(lock, report, kind="tune", command=command_line(), name=str(lock.get("name")))
    sys.exit(0 if lock["choice"] else int(ExitCode.FAILED))


@cli.command()
@click.argument("provider")
@click.argument("target", default=".")
@STORE
@JSON
def use(provider: str, target: str, store: str | None, as_json: bool) -> None:
    """Save the provider build, run, serve and package use for a project or workspace on this machine
    (auto: forget it). Refused while a run, benchmark or server of it is in progress."""
    from gpux.workspace.commands import use_command

    sys.exit(use_command(provider, target, store, as_json))

for group in GROUPS:
    cli.add_command(group)


def _add_common(group: click.Group) -> None:
    for cmd in [group, *group.commands.values()]:
        if isinstance(cmd, click.Group) and cmd is not group:
            _add_common(cmd)
        else:
            cmd.params.extend(COMMON)


_add_common(cli)


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; an error ends it with its exit code (gpux.cli.failure: stderr, and a JSON document with
    --json)."""
    from gpux.report import Invocation

    args = sys.argv[1:] if argv is None else list(argv)
    invocation = Invocation(args=args)
    debug = debugging() or "--debug" in args
    try:
        cli.main(args=args, prog_name="gpux", standalone_mode=False, obj=invocation)
    except SystemExit:
        raise
    except BaseException as exc:  # every error ends here: one line (or a traceback for a gpux bug) and its code
        from gpux.cli.failure import exit_with

        exit_with(exc, args, debug, invocation.emitted)
