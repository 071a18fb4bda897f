"""How the command line reports failures: one line on stderr and an exit code, never a traceback
(unless NMT_DEBUG=1 asks for one)."""

from __future__ import annotations

import errno
import functools
import os
import sys
import warnings
from collections.abc import Callable
from typing import Any, NoReturn

import typer
from typer.exceptions import TyperException

from nmt.errors import NmtError, install_hint
from nmt.textio import DISK_FULL

DEBUG_HINT = "(rerun with NMT_DEBUG=1 for the traceback)"
# errors a user fixes on their side, shown as `PATH: reason`, exit 2 like NmtError
OS_REASONS = {
    **DISK_FULL,
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EROFS: "read-only file system",
}


def fail(message: str, code: int = 2) -> NoReturn:
    """Print a one-line error on stderr and exit, without a traceback."""
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()
    raise SystemExit(code)


def debugging() -> bool:
    """NMT_DEBUG=1 (any value but empty or 0) shows tracebacks instead of one-line errors."""
    return os.environ.get("NMT_DEBUG", "") not in ("", "0")


def os_error_message(e: OSError) -> str | None:
    """`PATH: reason` for a file-system error the user can act on; None for anything else."""
    reason = OS_REASONS.get(e.errno) if e.errno is not None else None
    if reason is None and e.filename is not None and e.strerror:
        reason = e.strerror[0].lower() + e.strerror[1:]  # e.g. "not a directory"
    if reason is None:
        return None
    return f"{e.filename}: {reason}" if e.filename is not None else reason


def flag(field: str) -> str:
    """The command-line flag that sets a decoding option (`beam_size`: `--beam-size`)."""
    return "--" + field.replace("_", "-")


def cli_message(e: NmtError) -> str:
    """The error's line, the decoding options it names spelled as the flags that set them."""
    from nmt.decode.options import OptionError  # imported by whatever raised one

    return e.render(flag) if isinstance(e, OptionError) else str(e)


# optional packages, by the name a failed import carries: what needs it, and the extra with it
EXPORT_NOTE = " (an export from nmt export translates without it)"
OPTIONAL = {
    "torch": ("{command} needs PyTorch", "torch", EXPORT_NOTE),
    "matplotlib": ("plots need matplotlib", "torch", ""),
    "fastapi": ("{command} needs fastapi", "serve", ""),
    "uvicorn": ("{command} needs uvicorn", "serve", ""),
}


def missing_package(e: ModuleNotFoundError, command: str) -> str | None:
    """The line for an optional package that is not installed (which extra brings it), so a
    deploy-only install says what it lacks; None for any other missing module."""
    if e.name not in OPTIONAL:  # a missing package sets .name to its top-level name
        return None
    needs, extra, note = OPTIONAL[e.name]
    needs = needs.format(command=command)
    return f"{needs}, which is not installed: {install_hint(extra)}{note}"


def _warning_line(message: Warning | str, *_: Any, **__: Any) -> None:
    """Library warnings as one `warning: ...` line on stderr (no file:line, no source echo)."""
    sys.stderr.write(f"warning: {message}\n")


def user_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run a command: NmtError and file-system errors become one line (exit 2), a broken pipe
    exits 141, Ctrl-C 130, an optional package that is not installed one line naming its extra
    (exit 1), and anything else one line naming the exception (exit 1)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with warnings.catch_warnings():
                warnings.showwarning = _warning_line
                return fn(*args, **kwargs)
        except NmtError as e:
            fail(cli_message(e), e.exit_code)
        except BrokenPipeError:
            sys.stderr.close()
            raise SystemExit(141) from None
        except KeyboardInterrupt:
            fail("interrupted", 130)
        except (typer.Exit, typer.Abort, TyperException):
            raise  # typer reports these itself
        except Exception as e:
            if isinstance(e, ModuleNotFoundError):  # commands are named `<name>_cmd`
                missing = missing_package(e, "nmt " + fn.__name__.removesuffix("_cmd"))
                if missing is not None:
                    fail(missing, 1)
            if debugging():
                raise
            message = os_error_message(e) if isinstance(e, OSError) else None
            if message is not None:
                fail(message, 2)
            fail(f"{type(e).__name__}: {e} {DEBUG_HINT}", 1)

    return wrapper
