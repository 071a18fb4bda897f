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


def _rich_progress(stack: Any) -> Any:
    """A rich progress display on stderr, one bar per step; returns the `progress` callback."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bars = Progress(
        TextColumn("{task.description:<24}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
    )
    stack.enter_context(bars)
    tasks: dict[str, Any] = {}

    def report(step: str, done: int, total: int | None) -> None:
        if step not in tasks:
            tasks[step] = bars.add_task(step, total=total)
        bars.update(tasks[step], completed=done, total=total)

    return report


def _print_summary(manifest: dict) -> None:
    """The per-split table users check before training: kept, dropped by reason, token lengths."""
    from rich.console import Console
    from rich.table import Table

    src, tgt = manifest["src_lang"], manifest["tgt_lang"]
    sizes = manifest["vocab_size"]
    vocab = f"joint {sizes['src']}" if manifest["joint"] else f"{sizes['src']} / {sizes['tgt']}"
    title = f"{src}->{tgt}, vocabulary {vocab}, {manifest['dtype']}"
    table = Table(title=title, title_justify="left")
    table.add_column("split")
    for col in ("read", "kept", "dropped", f"tokens {src}", f"tokens {tgt}"):
        table.add_column(col, justify="right")
    for lang in (src, tgt):
        table.add_column(f"{lang} p50/p99/max", justify="right")
    notes = []
    for name, s in manifest["splits"].items():
        lens = [s["lengths"][lang] for lang in (src, tgt)]
        table.add_row(
            name,
            f"{s['lines_read']:,}",
            f"{s['kept']:,}",
            f"{s['lines_read'] - s['kept']:,}",
            *(f"{s['tokens'][lang]:,}" for lang in (src, tgt)),
            *(f"{x['p50']}/{x['p99']}/{x['max']}" for x in lens),
        )
        if any(s["dropped"].values()):
            reasons = ", ".join(f"{k} {v:,}" for k, v in s["dropped"].items() if v)
            notes.append(f"{name} dropped: {reasons}")
    console = Console()
    if not console.is_terminal:
        console = Console(width=120)  # a log file should not wrap the table at 80 columns
    console.print(table)
    for note in notes:
        console.print(note, highlight=False)


@app.command("preprocess")
@user_errors
def preprocess_cmd(
    src_lang: str = typer.Option(..., "--src-lang", help="Source language suffix, e.g. en."),
    tgt_lang: str = typer.Option(..., "--tgt-lang", help="Target language suffix, e.g. de."),
    train: str = typer.Option(..., "--train", help="Train prefix: PREFIX.<lang> (plain or .gz)."),
    valid: str = typer.Option(None, "--valid", help="Validation prefix (never cleaned)."),
    test: list[str] = typer.Option(None, "--test", help="Test prefix; repeat for more."),
    out_dir: str = typer.Option(..., "--out", "-o", help="DATA_DIR to create."),
    vocab_size: int = typer.Option(8000, "--vocab-size", help="SentencePiece vocabulary size."),
    spm_type: str = typer.Option("unigram", "--spm-type", help="unigram or bpe."),
    joint: bool = typer.Option(
        True, "--joint/--separate", help="One shared vocabulary, or one per language."
    ),
    max_len: int = typer.Option(250, "--max-len", help="Drop train pairs longer (subwords)."),
    max_ratio: float = typer.Option(
        3.0, "--max-ratio", help="Drop train pairs whose length ratio is higher."
    ),
    dedupe: bool = typer.Option(False, "--dedupe", help="Drop duplicate train pairs."),
    threads: int = typer.Option(None, "--threads", help="Worker processes (default: all cores)."),
    force: bool = typer.Option(False, "--force", help="Replace an existing non-empty DATA_DIR."),
    skip_invalid: bool = typer.Option(
        False, "--skip-invalid", help="Drop train pairs with invalid UTF-8 instead of failing."
    ),
    character_coverage: float = typer.Option(
        1.0, "--character-coverage", help="SentencePiece character coverage (0.9995 for CJK)."
    ),
    spm_sample: int = typer.Option(
        500_000, "--spm-sample", help="Sentences sampled to learn SentencePiece (bounds memory)."
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only errors."),
) -> None:
    """Clean a parallel corpus, learn SentencePiece, and encode every split into DATA_DIR."""
    import contextlib

    from nmt import data

    if threads is not None and threads < 1:
        raise NmtError(f"--threads must be >= 1, got {threads}")
    if spm_type not in ("unigram", "bpe"):
        raise NmtError(f"--spm-type must be unigram or bpe, got {spm_type!r}")
    with contextlib.ExitStack() as stack:
        progress = None if quiet else _rich_progress(stack)
        manifest = data.preprocess(
            src_lang,
            tgt_lang,
            train,
            out_dir,
            valid=valid,
            tests=test or (),
            vocab_size=vocab_size,
            spm_type=spm_type,
            joint=joint,
            max_len=max_len,
            max_ratio=max_ratio,
            dedupe=dedupe,
            threads=threads,
            force=force,
            skip_invalid=skip_invalid,
            quiet=quiet,
            progress=progress,
            character_coverage=character_coverage,
            spm_sample=spm_sample,
        )
    if not quiet:
        _print_summary(manifest)


# ---- train / average (nmt.trainer, nmt.checkpoint) -------------------------------------------
# ---- translate / attention (nmt.translate, nmt.viz) ------------------------------------------
# ---- score / evaluate (nmt.scoring) ----------------------------------------------------------
