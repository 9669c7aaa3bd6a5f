"""The GpuxError tree, the exit codes every command uses, and an exception's message in one line."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import Any

from gpux.documents import VerificationDoc


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1  # a build, run, verification or benchmark gate failed
    USAGE = 2  # command-line usage error (click's own)
    CONFIG = 3  # gpux.yml not found, YAML syntax, validation, unknown provider, model I/O mismatch
    UNAVAILABLE = 4  # provider unavailable with fallback off (--strict), or every fallback exhausted
    INTERNAL = 70  # a bug: traceback and "please report"
    INTERRUPTED = 130


def debugging() -> bool:
    """Whether $GPUX_DEBUG asks for details: tracebacks for every error, native libraries' own output left on
    stderr. Any value but empty, "0" and "false" turns it on (unset is off)."""
    return os.environ.get("GPUX_DEBUG", "") not in ("", "0", "false")


class GpuxError(Exception):
    """A user-facing error: printed as one line, no traceback."""

    exit_code: ExitCode = ExitCode.FAILED

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def lines(self) -> list[str]:
        return [self.message + (f" → {self.hint}" if self.hint else "")]


@dataclass(frozen=True)
class Problem:
    """One problem in a config file, located to its line and column: `FILE:LINE:COL FIELD: message`, else
    `FILE:LINE:COL: message` or `FILE: message`."""

    file: str
    line: int
    col: int
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}:{self.col}" if self.line else self.file
        return f"{where} {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


class ConfigError(GpuxError):
    exit_code = ExitCode.CONFIG

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(str(p) for p in problems))
        self.problems = problems

    def lines(self) -> list[str]:
        return [str(p) for p in self.problems]


class NotFound(GpuxError):
    """A model name or file that does not exist."""

    exit_code = ExitCode.CONFIG


class UsageError(GpuxError):
    exit_code = ExitCode.USAGE


class InputError(GpuxError):
    """Inputs given to `run` do not fit the model."""

    exit_code = ExitCode.USAGE


@contextlib.contextmanager
def reading_file(name: str, kind: str = "a file") -> Iterator[None]:
    """A user's file read within the block: missing, a folder (`kind` says what it should be) or unreadable is
    one InputError naming `name`."""
    try:
        yield
    except FileNotFoundError as exc:
        raise InputError(f"{name}: file not found") from exc
    except IsADirectoryError as exc:
        raise InputError(f"{name}: a folder, not {kind}") from exc
    except OSError as exc:
        raise InputError(f"{name}: cannot read the file: {exc.strerror or exc}") from exc


class StepError(GpuxError):
    """A Python step (`python: module:function` in gpux.yml) raised: the user's code, named at its file and line."""

    exit_code = ExitCode.FAILED


class DataError(GpuxError):
    """Declared sample data (verify.data, calibration) cannot be read or does not fit the model."""

    exit_code = ExitCode.CONFIG


class MissingDependency(GpuxError):
    exit_code = ExitCode.UNAVAILABLE


class ProviderUnavailable(GpuxError):
    exit_code = ExitCode.UNAVAILABLE


class BuildFailed(GpuxError):
    """A build that failed. `conversion` says whether it is the runtime's failure on this model, remembered for its
    key so later builds skip it at once: True (remembered), False (a setting or --strict, not the runtime: never
    remembered), None (not said: a build step's own BuildFailed counts as its conversion's failure)."""

    exit_code = ExitCode.FAILED

    def __init__(self, message: str, *, hint: str | None = None, conversion: bool | None = None) -> None:
        super().__init__(message, hint=hint)
        self.conversion = conversion


class VerificationFailed(BuildFailed):
    """An artifact that was built but failed verification; the build's record of it, where there is one."""

    verification: VerificationDoc | None = None  # the failing record: every metric, not only those failing
    info: dict[str, Any] | None = None  # what the build step reported (its artifact's info)


class TooSlow(VerificationFailed):
    """A lossy artifact built within a speed screen (gpux.quality.speed.screened) and left unverified, being far
    slower than a plain session: never published, never remembered (its speed is this machine's, at this moment)."""


class ModelError(GpuxError):
    """The model itself cannot be used as declared (not a provider problem: no fallback helps)."""

    exit_code = ExitCode.CONFIG


HOME = os.path.dirname(os.path.abspath(__file__))  # gpux's own source folder


def raised_by_gpux(exc: BaseException) -> bool:
    """Whether the innermost frame of `exc`'s traceback is under gpux's folder. Alone it cannot tell a bug: a C
    extension's error (a runtime's native call, numpy's) shows, as its last frame, gpux's line that called it."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(HOME + os.sep)


class Failure(StrEnum):
    """Whose failure an exception is (docs/design.md, "Errors: one way to fail")."""

    BUG = "bug"  # gpux's own code is wrong: exit 70 / a logged 500, its traceback; never remembered, never a fallback
    MACHINE = "machine"  # out of memory, a full disk, no permission: one line, exit 1; never remembered
    MODEL = "model"  # the runtime cannot take the model: remembered for its key, the next provider tried
    INPUT = "input"  # the user's (inputs, config, a python step): one named line, no other provider helps


# Python's own errors of code that is wrong. ValueError and RuntimeError are not among them: OpenVINO's and
# PyTorch's own errors are plain RuntimeErrors, and numpy's ValueErrors show gpux's calling line as their frame.
BUGS = (TypeError, AttributeError, LookupError, NameError, AssertionError)
# gpux's declared failures by whose they are, the first class that matches; any other GpuxError is the user's
DECLARED: tuple[tuple[type[GpuxError], Failure], ...] = (
    (BuildFailed, Failure.MODEL), (ProviderUnavailable, Failure.MACHINE), (MissingDependency, Failure.MACHINE))


def classify(exc: BaseException, runtime_rejects: tuple[type[BaseException], ...] = ()) -> Failure:
    """Whose failure `exc` is, the one policy every catch site asks. A GpuxError is as declared (DECLARED, else
    the user's); the runtime's own word that the inputs do not fit (`runtime_rejects`) is the input's; the
    machine's errors (MemoryError, OSError) are the machine's; one of Python's own error classes (BUGS, not a
    library's subclass of one) raised in gpux's code is a bug; anything else is the runtime's failure on the
    model (runtimes raise anything, with no common base class)."""
    if isinstance(exc, GpuxError):
        return next((f for cls, f in DECLARED if isinstance(exc, cls)), Failure.INPUT)
    if runtime_rejects and isinstance(exc, runtime_rejects):
        return Failure.INPUT
    if isinstance(exc, MemoryError | OSError):
        return Failure.MACHINE
    if isinstance(exc, BUGS) and type(exc).__module__ == "builtins" and raised_by_gpux(exc):
        return Failure.BUG
    return Failure.MODEL


@contextlib.contextmanager
def model_step(what: str, *, hint: str | None = None, reason: Callable[[BaseException], str] | None = None,
               conversion: bool | None = None) -> Iterator[None]:
    """A step whose failure is the model's: what the block raises that `classify` calls the model's is one
    BuildFailed, `what: reason(exc)` (default `first_line`), chained to it; a GpuxError, a gpux bug and the
    machine's errors go on as they are (exit 70 with the traceback / one line, never remembered)."""
    try:
        yield
    except GpuxError:
        raise
    except Exception as exc:  # broad: runtimes and converters raise anything on a model they cannot take
        if classify(exc) is not Failure.MODEL:
            raise
        raise BuildFailed(f"{what}: {(reason or first_line)(exc)}", hint=hint, conversion=conversion) from exc


def error_lines(exc: BaseException) -> list[str]:
    """The non-blank lines of an exception's message, stripped."""
    return [x.strip() for x in str(exc).splitlines() if x.strip()]


def first_line(exc: BaseException, text: str | None = None) -> str:
    """An error in one line of at most 300 characters: `Type: text`, where `text` defaults to the first
    non-blank line of the message."""
    if text is None:
        lines = error_lines(exc)
        text = lines[0] if lines else ""
    return f"{type(exc).__name__}: {text}"[:300]
