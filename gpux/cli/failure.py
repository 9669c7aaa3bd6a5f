"""How a command that failed ends: the error on stderr, its exit code, and with `--json` (or `--format json`)
also one JSON document on stdout, `{"error": {...}}`, unless the command already printed its own."""

from __future__ import annotations

import itertools
import sys
import traceback
from collections.abc import Sequence
from typing import Any

import click

from gpux.errors import ConfigError, ExitCode, GpuxError
from gpux.version import __version__

INTERNAL = f"internal error in gpux {__version__}: please report it with the traceback above"


def wants_json(args: Sequence[str]) -> bool:
    """Whether the command line asks for machine output: `--json`, `--format json` (before any `--`)."""
    words = list(itertools.takewhile(lambda a: a != "--", args))
    return "--json" in words or "--format=json" in words or \
        any(a == "--format" and b == "json" for a, b in itertools.pairwise(words))


def fail(exc: BaseException, as_json: bool, debug: bool, emitted: bool = False) -> int:
    """Say what went wrong on stderr (and as a document on stdout with `as_json`, unless the command already
    printed its document: `emitted`); the exit code."""
    from gpux import report

    if debug and isinstance(exc, GpuxError):
        traceback.print_exception(exc)
    if isinstance(exc, GpuxError):
        lines, code, hint = exc.lines(), int(exc.exit_code), exc.hint
        for line in lines:
            click.echo(f"error: {line}", err=True)
    elif isinstance(exc, (click.exceptions.Abort, KeyboardInterrupt)):
        lines, code, hint = ["interrupted"], int(ExitCode.INTERRUPTED), None
        click.echo("interrupted", err=True)
    elif isinstance(exc, click.ClickException):
        exc.show()
        lines, code = [exc.format_message()], exc.exit_code
        ctx = getattr(exc, "ctx", None)
        hint = f"see '{ctx.command_path} --help'" if ctx is not None else None
    elif machine_said(exc):  # the machine's: a full disk, a file not writable
        if debug:
            traceback.print_exception(exc)
        lines, code, hint = [str(exc) or type(exc).__name__], int(ExitCode.FAILED), \
            "free space or memory, or fix the permissions, then run it again"
        click.echo(f"error: {lines[0]}", err=True)
    else:
        traceback.print_exception(exc)
        lines, code, hint = [f"{type(exc).__name__}: {exc}", INTERNAL], int(ExitCode.INTERNAL), None
        click.echo(f"error: {INTERNAL}", err=True)
    if as_json and not emitted:
        report.emit_json(error_doc(exc, lines, hint, code))
    return code


MACHINE_ERRNOS = ("ENOSPC", "EDQUOT", "EACCES", "EPERM", "EROFS", "EMFILE", "ENFILE", "ENOMEM")


def machine_said(exc: BaseException) -> bool:
    """Out of memory, or an OSError the machine gives whatever the code (no space, no permission, a read-only disk,
    no descriptors)."""
    import errno

    said = {getattr(errno, n, None) for n in MACHINE_ERRNOS} - {None}
    return isinstance(exc, MemoryError) or (isinstance(exc, OSError) and exc.errno in said)


def error_doc(exc: BaseException, lines: list[str], hint: str | None, code: int) -> dict[str, Any]:
    """`{"error": {"type", "message", "hint", "lines", "exit_code"}}`; a config error adds its problems."""
    message = exc.message if isinstance(exc, GpuxError) else lines[0]
    doc: dict[str, Any] = {"type": type(exc).__name__, "message": message, "hint": hint, "lines": lines,
                           "exit_code": code}
    if isinstance(exc, ConfigError):
        doc["problems"] = [{"file": p.file, "line": p.line, "column": p.col, "field": p.field,
                            "message": p.message} for p in exc.problems]
    return {"error": doc}


def exit_with(exc: BaseException, args: Sequence[str], debug: bool, emitted: bool = False) -> None:
    sys.exit(fail(exc, wants_json(args), debug, emitted))
