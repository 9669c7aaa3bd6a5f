"""Click commands: parse options, call the core, render, and map errors to exit codes."""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any

import click

from gpux import __version__
from gpux.errors import ExitCode, GpuxError

PROVIDER_HELP = "auto, one of tensorrt, cuda, rocm, coreml, directml, openvino, cpu, or a comma list"
JSON = click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
STORE = click.option("--store", type=click.Path(file_okay=False), default=None,
                     help="Artifact store (default: .gpux/ beside gpux.yml, or $GPUX_STORE).")
PROVIDER = click.option("--provider", "-p", default=None, help=f"Provider: {PROVIDER_HELP}. "
                        "Overrides $GPUX_PROVIDER and runtime.backend.")
STRICT = click.option("--strict", is_flag=True, help="Never fall back: exit 4 if the provider cannot run.")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", "-V", prog_name="gpux")
@click.option("--debug", is_flag=True, envvar="GPUX_DEBUG", help="Show tracebacks for every error.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """gpux: declare a model in gpux.yml, build optimized artifacts per provider, run them anywhere.

    \b
    Exit codes: 0 ok, 1 build/run/verification/benchmark gate failed, 2 usage,
    3 config error, 4 provider unavailable (strict) or every fallback exhausted,
    70 internal error, 130 interrupted.
    """
    ctx.obj = {"debug": debug}


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
    from gpux.validate import validate_paths

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
    from gpux.validate import schema_text

    text = schema_text()
    if output is None:
        click.echo(text, nl=False)
        return
    from pathlib import Path

    p = Path(output)
    if check:
        if not p.is_file() or p.read_text(encoding="utf-8") != text:
            raise GpuxError(f"{output} is out of date with the config models", hint="run `make schema`")
        click.echo(f"{output} is up to date")
        return
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, encoding="utf-8")
    click.echo(f"wrote {output}")


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
def build(path: str, provider: str | None, strict: bool, force: bool, no_verify: bool, dry_run: bool,
          shapes: tuple[str, ...], store: str | None, as_json: bool) -> None:
    """Validate gpux.yml, then build (or reuse) the provider's optimized artifacts."""
    from gpux.commands import build_command

    sizes = None
    if shapes:
        from gpux.inputs import parse_shapes

        sizes = parse_shapes(shapes)
    sys.exit(build_command(path, provider, strict, force, not no_verify, dry_run, store, as_json, sizes))


@cli.command()
@click.argument("target", default=".")
@click.option("--input", "-i", "input_json", default=None, help="Inputs as JSON: '{\"x\": [[1.0, 2.0]]}'.")
@click.option("--file", "-f", "input_file", type=click.Path(dir_okay=False), default=None,
              help="Inputs from .json, .npy (single input) or .npz (one array per input).")
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None, help="Write outputs to .npz.")
@PROVIDER
@STRICT
@STORE
@JSON
@click.option("--placement", is_flag=True, help="Report which execution provider ran each node (ONNX Runtime).")
@click.option("--benchmark", is_flag=True, help="Measure latency and throughput instead of printing outputs.")
@click.option("--runs", type=click.IntRange(min=1), default=None, help="Least measured runs.")
@click.option("--warmup", type=click.IntRange(min=0), default=None, help="Least warm-up runs.")
@click.option("--duration", type=click.FloatRange(min=0), default=None, help="Least measured seconds.")
@click.option("--batch", type=click.IntRange(min=1), default=None, help="Size of the 'batch' dim.")
@click.option("--shape", "shapes", multiple=True, help="Symbolic dim size, e.g. --shape seq=128.")
@click.option("--concurrency", type=click.IntRange(min=1), default=None, help="Parallel requests.")
@click.option("--csv", "as_csv", is_flag=True, help="Benchmark rows as CSV.")
@click.option("--baseline", type=click.Path(dir_okay=False), default=None, help="Benchmark JSON to gate on.")
@click.option("--max-regression", type=float, default=10.0, show_default=True,
              help="Percent a figure may regress against --baseline before exit 1.")
def run(target: str, **kwargs: Any) -> None:
    """Run a model (name, project folder, gpux.yml or .onnx) on the best working provider."""
    from gpux.commands import run_command

    sys.exit(run_command(target, **kwargs))


@cli.command()
@click.argument("target", default=".")
@STORE
@JSON
def inspect(target: str, store: str | None, as_json: bool) -> None:
    """Show a model's I/O, the providers on this machine and the built artifacts."""
    from gpux.commands import inspect_command

    sys.exit(inspect_command(target, store, as_json))


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
@STORE
@JSON
def package(path: str, provider: str | None, tag: str | None, out_dir: str | None, base_image: str | None,
            run_args: str | None, store: str | None, as_json: bool) -> None:
    """Build a container image that runs the model with `gpux run` (Docker engine from $DOCKER_HOST)."""
    from gpux.package import package_command

    sys.exit(package_command(path, provider, tag, out_dir, base_image, run_args, store, as_json))


@cli.group()
def cache() -> None:
    """Manage the artifact store."""


@cache.command("ls")
@click.argument("path", default=".")
@STORE
@JSON
def cache_ls(path: str, store: str | None, as_json: bool) -> None:
    """List built artifacts."""
    from gpux.commands import cache_command

    sys.exit(cache_command("ls", path, store, as_json))


@cache.command("verify")
@click.argument("path", default=".")
@STORE
@JSON
def cache_verify(path: str, store: str | None, as_json: bool) -> None:
    """Re-hash every artifact against its manifest; exit 1 if any is damaged."""
    from gpux.commands import cache_command

    sys.exit(cache_command("verify", path, store, as_json))


@cache.command("prune")
@click.argument("path", default=".")
@click.option("--all", "everything", is_flag=True, help="Remove every artifact, not only stale ones.")
@STORE
@JSON
def cache_prune(path: str, everything: bool, store: str | None, as_json: bool) -> None:
    """Remove damaged, superseded and half-built artifacts."""
    from gpux.commands import cache_command

    sys.exit(cache_command("prune-all" if everything else "prune", path, store, as_json))


def main(argv: list[str] | None = None) -> None:
    debug = os.environ.get("GPUX_DEBUG", "") not in ("", "0", "false") or "--debug" in (argv or sys.argv[1:])
    try:
        cli.main(args=argv, prog_name="gpux", standalone_mode=False)
    except GpuxError as exc:
        if debug:
            traceback.print_exc()
        for line in exc.lines():
            click.echo(f"error: {line}", err=True)
        sys.exit(int(exc.exit_code))
    except click.exceptions.Abort:
        click.echo("interrupted", err=True)
        sys.exit(int(ExitCode.INTERRUPTED))
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(int(ExitCode.INTERRUPTED))
    except SystemExit:
        raise
    except BaseException:
        traceback.print_exc()
        click.echo(f"error: internal error in gpux {__version__}: please report it with the traceback above",
                   err=True)
        sys.exit(int(ExitCode.INTERNAL))
