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
    tasks: dict[str, Any] = {}

    def report(step: str, done: int, total: int | None) -> None:
        if not tasks:  # started on first use, so an early error prints nothing but itself
            stack.enter_context(bars)
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
    max_len: int = typer.Option(
        250, "--max-len", help="Drop train pairs with a side longer than this (subwords)."
    ),
    max_ratio: float = typer.Option(
        3.0, "--max-ratio", help="Drop train pairs whose longer/shorter side ratio is higher."
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
def _train_config(
    config: str | None,
    preset: str | None,
    overrides: list[str],
    model_dir: str,
    resume: bool,
    flags: dict[str, Any],
) -> Any:
    """Resolve the run's config; `--resume` without CONFIG/--preset starts from MODEL_DIR's own."""
    from pathlib import Path

    import yaml

    from nmt.config import (
        config_from_dict,
        load_config,
        parse_duration,
        parse_override,
        set_value,
    )

    saved = Path(model_dir) / "config.yaml"
    if resume and not config and not preset and saved.exists():
        cfg = config_from_dict(yaml.safe_load(saved.read_text(encoding="utf-8")) or {}, str(saved))
        for text in overrides:
            key, value = parse_override(text)
            set_value(cfg, key, value)
    else:
        cfg = load_config(config, preset, overrides)
    for key, value in flags.items():
        if value is not None:
            set_value(cfg, f"training.{key}", value, f"--{key.replace('_', '-')}")
    try:
        parse_duration(cfg.training.max_time)  # fail before anything starts
    except NmtError as e:
        raise NmtError(f"training.max_time: {e}") from None
    return cfg


@app.command("train")
@user_errors
def train_cmd(
    config: str = typer.Argument(None, metavar="[CONFIG.yaml]", help="YAML config (optional)."),
    data_dir: str = typer.Option(..., "--data", "-d", help="DATA_DIR from nmt preprocess."),
    model_dir: str = typer.Option(..., "--output", "-o", help="MODEL_DIR to train into."),
    preset: str = typer.Option(None, "--preset", "-p", help="Start from a shipped preset."),
    overrides: list[str] = typer.Option(
        None, "--set", help="Override a config key: section.key=value (repeatable)."
    ),
    max_steps: int = typer.Option(None, "--max-steps", help="Stop after N updates in total."),
    max_epochs: int = typer.Option(None, "--max-epochs", help="Stop after N epochs."),
    max_time: str = typer.Option(None, "--max-time", help="Wall-clock budget, e.g. 25m, 1h30m."),
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or mps."),
    seed: int = typer.Option(None, "--seed", help="Random seed (training.seed)."),
    resume: bool = typer.Option(False, "--resume", help="Continue from MODEL_DIR's last state."),
    force: bool = typer.Option(False, "--force", help="Discard MODEL_DIR's checkpoints."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only errors."),
    nproc: int = typer.Option(
        None, "--nproc", help="Run N DDP processes on this machine (launches torchrun)."
    ),
) -> None:
    """Train a model on DATA_DIR into MODEL_DIR (config: preset < CONFIG.yaml < --set)."""
    import os

    overrides = overrides or []
    if nproc is not None and nproc > 1 and int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        from nmt import distributed

        args = ["train", *([config] if config else []), "--data", data_dir, "-o", model_dir]
        args += ["--preset", preset] if preset else []
        for text in overrides:
            args += ["--set", text]
        for opt, value in (
            ("--max-steps", max_steps), ("--max-epochs", max_epochs),
            ("--max-time", max_time), ("--seed", seed),
        ):  # fmt: skip
            args += [opt, str(value)] if value is not None else []
        args += ["--device", device]
        switches = (("--resume", resume), ("--force", force), ("--quiet", quiet))
        args += [flag for flag, on in switches if on]
        raise SystemExit(distributed.launch(nproc, args))
    from nmt.trainer import train

    flags = {"max_steps": max_steps, "max_epochs": max_epochs, "max_time": max_time, "seed": seed}
    cfg = _train_config(config, preset, overrides, model_dir, resume, flags)
    summary = train(cfg, data_dir, model_dir, device, resume=resume, force=force, quiet=quiet)
    if summary["exit_code"]:
        raise SystemExit(summary["exit_code"])


@app.command("average")
@user_errors
def average_cmd(
    model_dir: str = typer.Option(..., "--model", "-m", help="A trained MODEL_DIR."),
    last: int = typer.Option(0, "--last", help="Average the N newest step checkpoints."),
    best: int = typer.Option(0, "--best", help="Average the N best step checkpoints."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only errors."),
) -> None:
    """Average checkpoints into MODEL_DIR/checkpoints/averaged.safetensors."""
    from nmt.checkpoint import average

    path, steps = average(model_dir, last=last, best=best)
    if not quiet:
        sys.stderr.write(f"averaged steps {', '.join(map(str, steps))} -> {path}\n")


# ---- translate / attention (nmt.translate, nmt.viz) ------------------------------------------


def _translate_progress(stack: Any, total: int) -> Callable[[int], None]:
    """A rich progress bar on stderr for file inputs; returns `advance(n)`."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bars = Progress(
        TextColumn("translating"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
    )
    stack.enter_context(bars)
    task = bars.add_task("translating", total=total)
    return lambda n: bars.advance(task, n)


def _warn_to_stderr(name: str) -> Callable[[str], None]:
    """Warnings as `warning: FILE: line N: ...` lines on stderr."""

    def warn(message: str) -> None:
        sys.stderr.write(f"warning: {name}: {message}\n")
        sys.stderr.flush()

    return warn


@app.command("translate")
@user_errors
def translate_cmd(
    inputs: list[str] = typer.Argument(
        None, help="Input files, one sentence per line (plain or .gz); '-' or none: stdin."
    ),
    model_dir: str = typer.Option(..., "--model", "-m", help="MODEL_DIR written by nmt train."),
    output: str = typer.Option(
        None, "--output", "-o", help="Write translations here (atomically) instead of stdout."
    ),
    beam_size: int = typer.Option(
        None, "--beam-size", "-b", help="Beam width (default: model config, 5); 1 = greedy."
    ),
    greedy: bool = typer.Option(False, "--greedy", help="Greedy search (same as --beam-size 1)."),
    length_penalty: float = typer.Option(
        None, "--length-penalty", help="GNMT length penalty alpha (default: model config, 1.0)."
    ),
    stop: str = typer.Option(
        None,
        "--stop",
        help="Beam stopping rule: exact (no live hypothesis can still win under the length "
        "penalty) or early (faster; assumes live hypotheses end next step). Default: model "
        "config, exact.",
    ),
    nbest: int = typer.Option(
        1,
        "--nbest",
        help="Hypotheses per input. Text format: N lines per input line, best first "
        "(empty lines when fewer were found); jsonl: N entries in 'hypotheses'.",
    ),
    max_len_a: float = typer.Option(
        None, "--max-len-a", help="Max output length a*|source|+b: a (default: model config, 1.2)."
    ),
    max_len_b: float = typer.Option(
        None, "--max-len-b", help="Max output length a*|source|+b: b (default: model config, 10)."
    ),
    min_len: int = typer.Option(
        None, "--min-len", help="Minimum output length in subwords (default: model config, 0)."
    ),
    batch_tokens: int = typer.Option(
        None, "--batch-tokens", help="Padded source tokens per batch (default: model config)."
    ),
    fmt: str = typer.Option(
        "text",
        "--format",
        "-f",
        help="text: one line per input line; jsonl: one object per input line "
        '{"source", "hypotheses": [{"translation", "score", "log_prob", "tokens"}]}.',
    ),
    with_attention: bool = typer.Option(
        False,
        "--with-attention",
        help="jsonl only: add 'source_tokens' and per hypothesis 'attention' (target x source, "
        "last layer, mean over heads; eos row and column included).",
    ),
    checkpoint: str = typer.Option(
        "best", "--checkpoint", help="best, last, averaged, or a .safetensors path."
    ),
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or mps."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
    buffer_size: int = typer.Option(
        None,
        "--buffer-size",
        help="Lines read and sorted per chunk (bounds memory) (default: 10000; stdin from a "
        "terminal: 1). 1 translates each line as it arrives and flushes it.",
    ),
    errors: str = typer.Option(
        "strict", "--errors", help="Invalid UTF-8: strict (error naming the line) or replace."
    ),
) -> None:
    """Translate text, one sentence per line: exactly one output line per input line, in order
    (N lines with --nbest N in text format). Empty lines give empty lines."""
    import contextlib
    import os

    from nmt.textio import atomic_write

    if fmt not in ("text", "jsonl"):
        raise NmtError(f"--format must be text or jsonl, got {fmt!r}")
    if errors not in ("strict", "replace"):
        raise NmtError(f"--errors must be strict or replace, got {errors!r}")
    if with_attention and fmt != "jsonl":
        raise NmtError("--with-attention needs --format jsonl")
    if nbest < 1:
        raise NmtError(f"--nbest must be at least 1, got {nbest}")
    if buffer_size is not None and buffer_size < 1:
        raise NmtError(f"--buffer-size must be at least 1, got {buffer_size}")
    paths = list(inputs or ["-"])
    for path in paths:
        if path != "-" and not os.path.isfile(path):
            raise NmtError(f"{path}: file not found")
    interactive = "-" in paths and (sys.stdin.isatty() or buffer_size == 1)
    chunk = 1 if interactive else (buffer_size or 10_000)

    from nmt.translate import Translator, count_lines, format_translation, read_input

    translator = Translator.from_dir(model_dir, device=device, checkpoint=checkpoint)
    search = dict(
        beam_size=beam_size, greedy=greedy, length_penalty=length_penalty, nbest=nbest,
        max_len_a=max_len_a, max_len_b=max_len_b, min_len=min_len, batch_tokens=batch_tokens,
        with_attention=with_attention, stop=stop,
    )  # fmt: skip
    translator.options(**search)  # bad options fail before any input is read
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(atomic_write(output)) if output else sys.stdout
        progress = None
        if not quiet and "-" not in paths:
            progress = _translate_progress(stack, sum(count_lines(p) for p in paths))
        for path in paths:
            name = "<stdin>" if path == "-" else path
            results = translator.translate_stream(
                read_input(path, errors), buffer_size=chunk, on_warning=_warn_to_stderr(name),
                progress=progress, **search,
            )  # fmt: skip
            for i, tr in enumerate(results, start=1):
                out.write(format_translation(tr, fmt, nbest, with_attention))
                if interactive or i % chunk == 0:
                    out.flush()
        out.flush()


@app.command("attention")
@user_errors
def attention_cmd(
    source: str = typer.Argument(..., help="The source sentence (raw text)."),
    model_dir: str = typer.Option(..., "--model", "-m", help="MODEL_DIR written by nmt train."),
    output: str = typer.Option(..., "--output", "-o", help="PNG file to write."),
    layer: str = typer.Option(
        "last", "--layer", help="Decoder layer (0-based), 'last', or 'all' (layer x head grid)."
    ),
    head: str = typer.Option(
        "mean", "--head", help="Attention head (0-based), 'mean', or 'all' (one panel per head)."
    ),
    target: str = typer.Option(
        None, "--target", help="Force-decode this translation instead of searching for one."
    ),
    beam_size: int = typer.Option(
        None, "--beam-size", "-b", help="Beam width (default: model config)."
    ),
    checkpoint: str = typer.Option(
        "best", "--checkpoint", help="best, last, averaged, or a .safetensors path."
    ),
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or mps."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print nothing on success."),
) -> None:
    """Draw the source-target attention of one sentence as a PNG heatmap (subword pieces on both
    axes): Seq2Seq's attention, or a Transformer layer's encoder-decoder attention per head."""
    from nmt.translate import Translator
    from nmt.viz import plot_attention

    translator = Translator.from_dir(model_dir, device=device, checkpoint=checkpoint)
    weights, src_pieces, tgt_pieces, translation = translator.attention(
        source, target=target, beam_size=beam_size
    )
    path = plot_attention(
        weights, src_pieces, tgt_pieces, output, layer=layer, head=head,
        title=f"{source}\n{translation}",
    )  # fmt: skip
    if not quiet:
        print(f"{translation}\nwrote {path}")


# ---- score / evaluate (nmt.scoring) ----------------------------------------------------------


def _score_options(
    tokenize: str | None, lowercase: bool, chrf_word_order: int | None, ter_case_sensitive: bool
) -> Any:
    """Map the shared metric flags to nmt.scoring.Options."""
    from nmt.scoring import Options

    return Options(tokenize, lowercase, chrf_word_order, ter_case_sensitive)


def _print_scores(rows: list[tuple[str, list[Any]]], as_json: bool, width: int) -> None:
    """JSON list, a rich table on a terminal, else sacrebleu's own text lines (signature always)."""
    import json

    from nmt import scoring

    if as_json:
        objs = [{"system": name, **r.to_dict(width)} for name, results in rows for r in results]
        print(json.dumps(objs, indent=1, ensure_ascii=False))
    elif sys.stdout.isatty():
        from rich.console import Console

        console = Console()
        console.print(scoring.rich_table(rows, width))
        for line in scoring.signature_lines(r for _, results in rows for r in results):
            console.print(line, soft_wrap=True, highlight=False)
    elif len(rows) == 1:
        print("\n".join(scoring.format_lines(rows[0][1], width)))
    else:
        for name, results in rows:
            for r in results:
                print(f"{name}\t{r.line(width)}")


@app.command("score")
@user_errors
def score_cmd(
    hyps: list[str] = typer.Argument(
        None, help="Hypothesis files, one per system (plain or .gz); '-' or none reads stdin."
    ),
    refs: list[str] = typer.Option(..., "--ref", "-r", help="Reference file; repeat for more."),
    metric: list[str] = typer.Option(
        ["bleu"], "--metric", "-m", help="bleu, chrf, chrf++ or ter; repeat or comma-separate."
    ),
    tokenize: str = typer.Option(
        None, "--tokenize", help="BLEU tokenizer: 13a (default), intl, zh, char, none."
    ),
    lowercase: bool = typer.Option(False, "--lowercase", help="Case-insensitive BLEU and chrF."),
    chrf_word_order: int = typer.Option(
        None, "--chrf-word-order", help="chrF word n-gram order (2 = chrF++)."
    ),
    ter_case_sensitive: bool = typer.Option(
        False, "--ter-case-sensitive", help="Case-sensitive TER (Tercom's default is not)."
    ),
    as_json: bool = typer.Option(False, "--json", help="A JSON list of score objects."),
    sentence: bool = typer.Option(False, "--sentence", help="Per-line scores as JSONL."),
    paired_bs: bool = typer.Option(False, "--paired-bs", help="Paired bootstrap resampling."),
    paired_ar: bool = typer.Option(False, "--paired-ar", help="Paired approximate randomization."),
    paired_n: int = typer.Option(
        0, "--paired-n", help="Resamples (bs, default 1000) or trials (ar, default 10000)."
    ),
    width: int = typer.Option(1, "--width", "-w", help="Decimals printed, as sacrebleu's -w."),
) -> None:
    """Score hypotheses against references with sacrebleu's BLEU, chrF(++) and TER.

    Piped output is exactly the lines of `sacrebleu -f text`; a terminal gets a table.

    Several HYP files are several systems; --paired-bs / --paired-ar compare them to the first.

    As in sacrebleu, --tokenize applies to BLEU and TER ignores case (--ter-case-sensitive).
    """
    from nmt import scoring

    if paired_bs and paired_ar:
        raise NmtError("--paired-bs and --paired-ar are mutually exclusive")
    paired = "bs" if paired_bs else "ar" if paired_ar else None
    if sentence and paired:
        raise NmtError("--sentence cannot be combined with a paired test")
    if width < 0:
        raise NmtError(f"--width must be >= 0, got {width}")
    metrics = scoring.parse_metrics(metric)
    opts = _score_options(tokenize, lowercase, chrf_word_order, ter_case_sensitive)
    scoring.make_metric("bleu", opts)  # validates --tokenize before any file is read
    names = list(hyps or ["-"])
    if names.count("-") > 1:
        raise NmtError("stdin ('-') can be given only once")
    ref_lines = [scoring.read_text(p) for p in refs]
    systems = []
    for name in names:
        lines = scoring.read_stream(sys.stdin.buffer) if name == "-" else scoring.read_text(name)
        label = "<stdin>" if name == "-" else name
        scoring.check_lengths(lines, ref_lines, hyp_name=label, ref_names=refs)
        systems.append((label, lines))
    if sentence:
        _print_sentence_scores(systems, ref_lines, metrics, opts, width)
    elif paired:
        _print_paired(systems, ref_lines, metrics, opts, paired, paired_n, as_json, width)
    else:
        results = scoring.score_systems([s for _, s in systems], ref_lines, metrics, opts)
        rows = [(name, r) for (name, _), r in zip(systems, results, strict=True)]
        _print_scores(rows, as_json, width)


def _print_sentence_scores(
    systems: list[tuple[str, list[str]]],
    refs: list[list[str]],
    metrics: list[str],
    opts: Any,
    width: int,
) -> None:
    """JSONL on stdout, one object per line ({"line", metric: score}); signatures on stderr."""
    import json

    from nmt import scoring

    if len(systems) != 1:
        raise NmtError("--sentence scores one system at a time")
    per_line = scoring.sentence_scores(systems[0][1], refs, metrics, opts)
    for r in per_line[0] if per_line else []:
        sys.stderr.write(f"signature: {r.name}|{r.signature}\n")
    for i, results in enumerate(per_line, start=1):
        obj = {"line": i, **{r.name: scoring.round_score(r.score, width) for r in results}}
        sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")


def _print_paired(
    systems: list[tuple[str, list[str]]],
    refs: list[list[str]],
    metrics: list[str],
    opts: Any,
    test: str,
    n: int,
    as_json: bool,
    width: int,
) -> None:
    """Run sacrebleu's paired test (first system = baseline) and print it."""
    import json

    from nmt import scoring

    table = scoring.paired_test(systems, refs, metrics, test, n, opts)
    if as_json:
        n_used = n if n > 0 else scoring.DEFAULT_SAMPLES[test]
        objs = [
            {**r.to_dict(width), "test": test, "n_samples": n_used} for row in table for r in row
        ]
        print(json.dumps(objs, indent=1, ensure_ascii=False))
    elif sys.stdout.isatty():
        from rich.console import Console

        console = Console()
        console.print(scoring.rich_paired_table(table, test, n, width))
        for line in scoring.signature_lines(table[0]):
            console.print(line, soft_wrap=True, highlight=False)
    else:
        print("\n".join(scoring.format_paired_lines(table, width)))


@app.command("evaluate")
@user_errors
def evaluate_cmd(
    model_dir: str = typer.Option(..., "--model", "-m", help="Model directory (nmt train)."),
    src: str = typer.Option(..., "--src", help="Source file to translate."),
    refs: list[str] = typer.Option(..., "--ref", "-r", help="Reference file; repeat for more."),
    output: str = typer.Option(None, "--output", "-o", help="Also write the hypotheses here."),
    metric: list[str] = typer.Option(
        ["bleu"], "--metric", help="bleu, chrf, chrf++ or ter; repeat or comma-separate."
    ),
    beam_size: int = typer.Option(None, "--beam-size", help="Beam width [default: model config]."),
    greedy: bool = typer.Option(False, "--greedy", help="Greedy search instead of beam."),
    length_penalty: float = typer.Option(
        None, "--length-penalty", help="GNMT length penalty [default: model config]."
    ),
    batch_tokens: int = typer.Option(
        None, "--batch-tokens", help="Source tokens per batch [default: model config]."
    ),
    checkpoint: str = typer.Option("best", "--checkpoint", help="best, last, averaged or PATH."),
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or mps."),
    tokenize: str = typer.Option(None, "--tokenize", help="BLEU tokenizer (default 13a)."),
    lowercase: bool = typer.Option(False, "--lowercase", help="Case-insensitive BLEU and chrF."),
    chrf_word_order: int = typer.Option(None, "--chrf-word-order", help="2 = chrF++."),
    as_json: bool = typer.Option(False, "--json", help="A JSON list of score objects."),
    width: int = typer.Option(1, "--width", "-w", help="Decimals printed."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
) -> None:
    """Translate a test set and score it in one call (inputs checked before the model loads)."""
    import contextlib

    from nmt import scoring

    opts = _score_options(tokenize, lowercase, chrf_word_order, False)
    with contextlib.ExitStack() as stack:
        progress = None if quiet else _translation_progress(stack)
        results = scoring.evaluate(
            model_dir, src, refs, hyp_out=output, metrics=metric, options=opts,
            device=device, checkpoint=checkpoint, progress=progress, beam_size=beam_size,
            greedy=greedy, length_penalty=length_penalty, batch_tokens=batch_tokens,
        )  # fmt: skip
    _print_scores([(output or src, results)], as_json, width)


def _translation_progress(stack: Any) -> Any:
    """A rich progress bar on stderr for the translation step; returns the (n, total) callback."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    bars = Progress(
        "translating", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=Console(stderr=True), transient=True,
    )  # fmt: skip
    task: list[Any] = []

    def advance(n: int, total: int) -> None:
        if not task:  # started on the first batch: a bad input prints nothing but its error
            stack.enter_context(bars)
            task.append(bars.add_task("translating", total=total))
        bars.advance(task[0], n)

    return advance
