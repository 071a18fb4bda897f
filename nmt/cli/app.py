"""The `nmt` command line: a thin Typer layer over the library. Each group of commands lives in
its own module (nmt.cli.data, training, decoding, deploy, scoring) with the options they share in
nmt.cli.flags; this module registers them on `app` and runs it."""

from __future__ import annotations

import sys
from typing import Any

import typer

from nmt.cli import data, decoding, deploy, scoring, training

app = typer.Typer(
    name="nmt",
    help="Neural machine translation: preprocess, train, translate, score.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# The commands in the order `nmt --help` lists them.
ORDER = tuple(
    "preprocess train average translate rescore attention serve export import score evaluate "
    "plot".split()
)


def register(target: typer.Typer, groups: list[typer.Typer]) -> None:
    """The commands of every group on `target`, in ORDER (each group declares its own)."""
    found = {info.name: info for group in groups for info in group.registered_commands}
    if set(found) != set(ORDER):
        raise RuntimeError(f"commands not both declared and in ORDER: {set(found) ^ set(ORDER)}")
    target.registered_commands.extend(found[name] for name in ORDER)


register(app, [m.commands for m in (data, training, decoding, deploy, scoring)])


def run() -> None:
    """The `nmt` command (console script and `python -m nmt`): the app, then a quick exit once
    the command has returned (nmt.runtime.exit_quickly: 0.35 s less per command)."""
    from nmt.runtime import exit_quickly

    try:
        code = app(standalone_mode=False)  # usage errors come back here (usage_error)
    except SystemExit as e:
        exit_quickly(e.code)
    except Exception as e:  # click's exceptions (typer vendors its own copy of click)
        kinds = {k.__name__ for k in type(e).__mro__}
        if "UsageError" in kinds:
            exit_quickly(usage_error(e))
        if "Abort" in kinds:  # Ctrl-C while click parsed or prompted
            sys.stderr.write("error: interrupted\n")
            exit_quickly(130)
        raise
    exit_quickly(code if isinstance(code, int) else 0)


def usage_error(e: Any) -> int:
    """A mistyped command line as one line on stderr, like every other error (typer would draw
    a box over five lines); `nmt` alone or `nmt CMD` without arguments still shows the help."""
    if type(e).__name__ == "NoArgsIsHelpError":
        if e.format_message():  # typer's rich help is already printed; click's is the message
            e.show()
        return e.exit_code
    where = f"{e.ctx.command_path}: " if e.ctx is not None else ""
    hint = f" (see {e.ctx.command_path} --help)" if e.ctx is not None else ""
    message = " ".join(e.format_message().split())
    sys.stderr.write(f"error: {where}{message}{hint}\n")
    return e.exit_code


def show_version(value: bool) -> None:
    """--version: print `nmt VERSION` and stop."""
    if value:
        from nmt import __version__

        print(f"nmt {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(
        False, "--version", callback=show_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Neural machine translation: preprocess, train, translate, score."""
    from nmt.runtime import retain_freed_memory

    retain_freed_memory()  # every command: decoding reuses its large buffers without page faults
