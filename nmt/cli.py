"""The `nmt` command line: a thin Typer layer over the library (nmt.data, nmt.trainer,
nmt.translate, nmt.scoring). Each command parses options and calls one library function."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import typer

from nmt.errors import NmtError

app = typer.Typer(
    name="nmt",
    help="Neural machine translation: preprocess, train, translate, score.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _fail(message: str, code: int = 2) -> None:
    """Print a one-line error on stderr and exit, without a traceback."""
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()
    raise SystemExit(code)


def user_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn NmtError (bad input) into a one-line message and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except NmtError as e:
            _fail(str(e), e.exit_code)
        except BrokenPipeError:
            sys.stderr.close()
            raise SystemExit(141) from None

    return wrapper


@app.callback()
def main() -> None:
    """Neural machine translation: preprocess, train, translate, score."""


# ---- preprocess (nmt.data) -------------------------------------------------------------------
# ---- train / average (nmt.trainer, nmt.checkpoint) -------------------------------------------
# ---- translate / attention (nmt.translate, nmt.viz) ------------------------------------------
# ---- score / evaluate (nmt.scoring) ----------------------------------------------------------
