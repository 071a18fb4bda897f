"""The `nmt` command line: a thin Typer layer over the library (nmt.data.preprocess, nmt.train.loop,
nmt.decode.translator, nmt.eval.scoring). Each command parses options and calls one library function."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from nmt.cli.errors import user_errors
from nmt.cli.progress import batch_progress, count_progress, step_progress

if TYPE_CHECKING:
    from nmt.decode.options import Sampling

app = typer.Typer(
    name="nmt",
    help="Neural machine translation: preprocess, train, translate, score.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Options shared by several commands: one spelling and one help text everywhere.
ModelDirOpt = Annotated[str, typer.Option("--model", "-m", help="MODEL_DIR written by nmt train.")]
ModelDirsOpt = Annotated[
    list[str],
    typer.Option(
        "--model",
        "-m",
        help="MODEL_DIR written by nmt train; repeat for an ensemble (the models' probabilities "
        "averaged; they must share the SentencePiece models).",
    ),
]
DeviceOpt = Annotated[str, typer.Option("--device", help="auto, cpu, cuda or mps.")]
CheckpointOpt = Annotated[
    str,
    typer.Option(
        "--checkpoint",
        help="default (averaged when it beat best on valid at the end of training, else best), "
        "best, last, averaged, or a .safetensors path.",
    ),
]
PrecisionOpt = Annotated[
    str,
    typer.Option(
        "--precision",
        help="auto (bf16 on GPUs, and on native-bf16 CPUs for d_model >= 128; else fp32), fp32, "
        "bf16 or fp16 (GPU).",
    ),
]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="Print only errors.")]
NoProgressOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")]


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


@app.callback()
def main() -> None:
    """Neural machine translation: preprocess, train, translate, score."""
    from nmt.runtime import retain_freed_memory

    retain_freed_memory()  # every command: decoding reuses its large buffers without page faults


# ---- preprocess (nmt.data.preprocess) ---------------------------------------------------------------


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
    spm_from: str = typer.Option(
        None,
        "--spm-from",
        help="Reuse the SentencePiece models of this MODEL_DIR or DATA_DIR instead of learning "
        "new ones (for nmt train --init-from); --vocab-size, --spm-type and --joint are theirs.",
    ),
    extend_vocab: int = typer.Option(
        0,
        "--extend-vocab",
        help="With --spm-from: append up to N pieces for the characters its models cannot "
        "encode (a new language's letters), learnt from this corpus; existing ids keep "
        "their pieces and text without new characters encodes as before.",
    ),
    extend_all: bool = typer.Option(
        False,
        "--extend-all",
        help="With --extend-vocab: offer every piece this corpus wants (the new language's "
        "words in old letters too), less those that would change how its text in the reused "
        "models' own languages encodes.",
    ),
    lowercase: bool = typer.Option(
        False,
        "--lowercase",
        help="Lowercase every split (most Multi30k papers' setting): the model then sees and "
        "writes lowercased text, translate lowercases its input, and BLEU is case-insensitive.",
    ),
    quiet: QuietOpt = False,
) -> None:
    """Clean a parallel corpus, learn SentencePiece, and encode every split into DATA_DIR."""
    import contextlib

    from nmt.data.preprocess import PreprocessConfig, preprocess

    cfg = PreprocessConfig(
        src_lang,
        tgt_lang,
        train,
        valid=valid,
        tests=test or (),
        vocab_size=vocab_size,
        spm_type=spm_type,
        joint=joint,
        max_len=max_len,
        max_ratio=max_ratio,
        dedupe=dedupe,
        threads=threads,
        skip_invalid=skip_invalid,
        character_coverage=character_coverage,
        spm_sample=spm_sample,
        spm_from=spm_from,
        extend_vocab=extend_vocab,
        extend_all=extend_all,
        lowercase=lowercase,
    )
    with contextlib.ExitStack() as stack:
        progress = None if quiet else step_progress(stack)
        manifest = preprocess(cfg, out_dir, force=force, quiet=quiet, progress=progress)
    if not quiet:
        from nmt.data.report import print_summary

        print_summary(manifest)


# ---- train / average (nmt.train.loop, nmt.train.checkpoint) -------------------------------------------
@app.command("train")
@user_errors
def train_cmd(
    ctx: typer.Context,
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
    device: DeviceOpt = "auto",
    seed: int = typer.Option(None, "--seed", help="Random seed (training.seed)."),
    init_from: str = typer.Option(
        None,
        "--init-from",
        help="Fine-tune: start from this MODEL_DIR's weights (training.init_from; its config is "
        "the base without CONFIG/--preset). DATA_DIR must be preprocessed with --spm-from it.",
    ),
    resume: bool = typer.Option(False, "--resume", help="Continue from MODEL_DIR's last state."),
    force: bool = typer.Option(False, "--force", help="Discard MODEL_DIR's checkpoints."),
    quiet: QuietOpt = False,
    nproc: int = typer.Option(
        None, "--nproc", help="Run N DDP processes on this machine (launches torchrun)."
    ),
) -> None:
    """Train a model on DATA_DIR into MODEL_DIR (config: preset < CONFIG.yaml < --set)."""
    from nmt.runtime import size_kernel_caches

    size_kernel_caches()  # before torch loads; torchrun's workers inherit it
    from nmt.train import distributed

    if distributed.needs_launch(nproc):  # every option but --nproc goes to the torchrun workers
        raise SystemExit(distributed.launch(nproc, distributed.relaunch_args(ctx, skip={"nproc"})))
    from nmt.config import resolve_train_config
    from nmt.train.loop import train

    overrides = overrides or []
    flags = {
        "max_steps": max_steps, "max_epochs": max_epochs, "max_time": max_time, "seed": seed,
        "init_from": init_from,
    }  # fmt: skip
    cfg = resolve_train_config(config, preset, overrides, model_dir, resume, flags)
    summary = train(cfg, data_dir, model_dir, device, resume=resume, force=force, quiet=quiet)
    if summary.exit_code:
        raise SystemExit(summary.exit_code)


@app.command("average")
@user_errors
def average_cmd(
    model_dir: ModelDirOpt,
    last: int = typer.Option(0, "--last", help="Average the N newest step checkpoints."),
    best: int = typer.Option(0, "--best", help="Average the N best step checkpoints."),
    quiet: QuietOpt = False,
) -> None:
    """Average checkpoints into MODEL_DIR/checkpoints/averaged.safetensors."""
    from nmt.train.selection import average

    path, steps = average(model_dir, last=last, best=best)
    if not quiet:
        sys.stderr.write(f"averaged steps {', '.join(map(str, steps))} -> {path}\n")


# ---- translate / attention (nmt.decode.translator, nmt.plots.attention) ------------------------------------------


@app.command("translate")
@user_errors
def translate_cmd(
    *,
    inputs: list[str] = typer.Argument(
        None, help="Input files, one sentence per line (plain or .gz); '-' or none: stdin."
    ),
    model_dir: ModelDirsOpt,
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
    checkpoint: CheckpointOpt = "default",
    device: DeviceOpt = "auto",
    precision: PrecisionOpt = "auto",
    quiet: NoProgressOpt = False,
    buffer_size: int = typer.Option(
        None,
        "--buffer-size",
        help="Most lines read and sorted per batch (bounds memory) (default: 10000). From a "
        "pipe or terminal, what has arrived is translated and flushed when the input pauses.",
    ),
    errors: str = typer.Option(
        "strict", "--errors", help="Invalid UTF-8: strict (error naming the line) or replace."
    ),
    workers: int = typer.Option(
        0,
        "--workers",
        help="Batches decoded at once, the CPU threads split between them (same output; "
        "worker processes on Linux). 0: one per thread, at most 4, on a CPU; 1 on a GPU.",
    ),
    sampling: bool = typer.Option(
        False,
        "--sampling",
        help="Draw each token from the model's distribution instead of searching (sampled "
        "back-translation); --nbest N: N samples per line, best score first.",
    ),
    temperature: float = typer.Option(
        None, "--temperature", help="--sampling: divide log-probs by T (<1 sharper). Default 1."
    ),
    topk: int = typer.Option(
        None, "--sampling-topk", help="--sampling: only from the K most likely tokens (0: all)."
    ),
    topp: float = typer.Option(
        None,
        "--sampling-topp",
        help="--sampling: only from the fewest tokens holding P of the probability (1: all).",
    ),
    seed: int = typer.Option(
        None,
        "--seed",
        help="--sampling: seed (default 0). A line's samples depend on the seed, its line "
        "number in its file and the model, not on batching or --workers.",
    ),
) -> None:
    """Translate text, one sentence per line: exactly one output line per input line, in order
    (N lines with --nbest N in text format). Empty lines give empty lines."""
    from nmt.decode.lines import check_inputs, check_model_dirs, check_output

    check_inputs(inputs, fmt, errors, with_attention, nbest, buffer_size)  # before the model loads
    check_output(output)
    check_model_dirs(model_dir)
    from nmt.decode.engines import (  # a model directory, or an `nmt export`
        checked_export,
        open_translator,
    )
    from nmt.decode.options import DecodeOptions, check_search

    checked_export(model_dir, checkpoint, precision)  # options an export refuses, named first
    options = DecodeOptions(
        beam_size=beam_size, greedy=greedy, length_penalty=length_penalty, nbest=nbest,
        max_len_a=max_len_a, max_len_b=max_len_b, min_len=min_len, batch_tokens=batch_tokens,
        stop=stop, with_attention=with_attention,
        sampling=sampling_options(sampling, temperature, topk, topp, seed, beam_size, greedy),
    )  # fmt: skip
    check_search(model_dir[0], options)  # an ensemble decodes with its first one's defaults
    from nmt.decode.files import translate_files
    from nmt.decode.translator import Translator

    translator = open_translator(model_dir, device, checkpoint, precision, workers)
    if with_attention:
        require_attention(translator, ", ".join(model_dir))
    if options.sampling is not None and not isinstance(translator, Translator):
        from nmt.errors import NmtError

        raise NmtError(
            f"{model_dir[0]}: --sampling needs a model directory (an `nmt export` directory "
            "decodes with CTranslate2's search)"
        )
    with translator:  # its worker processes end with the command
        translate_files(
            translator, inputs, output, options, fmt=fmt, errors=errors,
            buffer_size=buffer_size, progress=None if quiet else count_progress,
        )  # fmt: skip


@app.command("rescore")
@user_errors
def rescore_cmd(
    *,
    source: str = typer.Argument(..., help="Source file, one sentence per line (plain or .gz)."),
    target: str = typer.Argument(..., help="Target file: one translation per source line."),
    model_dir: ModelDirsOpt,
    output: str = typer.Option(
        None, "--output", "-o", help="Write the scores here (atomically) instead of stdout."
    ),
    fmt: str = typer.Option(
        "text",
        "--format",
        "-f",
        help='text: one log-probability per line; jsonl: {"log_prob", "per_token", '
        '"tokens", "token_log_probs"} per line.',
    ),
    average: bool = typer.Option(
        False, "--average", help="text: the mean log-probability per token (eos included)."
    ),
    batch_tokens: int = typer.Option(
        None, "--batch-tokens", help="Padded tokens per batch (default: model config)."
    ),
    checkpoint: CheckpointOpt = "default",
    device: DeviceOpt = "auto",
    precision: PrecisionOpt = "auto",
    quiet: NoProgressOpt = False,
) -> None:
    """Score given translations (forced decoding): the log-probability of each target line given
    its source line, one line per pair (n-best reranking, corpus filtering, model comparison)."""
    from nmt.decode.lines import check_inputs, check_model_dirs, check_output, warn_to_stderr

    check_inputs([source, target], fmt)  # a bad format or missing file fails before the model loads
    check_output(output)
    check_model_dirs(model_dir)
    from nmt.decode.engines import open_translator  # a model directory, or an `nmt export` of one
    from nmt.decode.rescore import rescore_files

    with open_translator(model_dir, device, checkpoint, precision) as translator:
        rescore_files(
            translator, source, target, output, fmt=fmt, average=average,
            batch_tokens=batch_tokens, on_warning=warn_to_stderr(f"{source}, {target}"),
            progress=None if quiet else lambda stack, n: count_progress(stack, n, "scoring"),
        )  # fmt: skip


def sampling_options(
    on: bool,
    temperature: float | None,
    topk: int | None,
    topp: float | None,
    seed: int | None,
    beam_size: int | None = None,
    greedy: bool = False,
) -> Sampling | None:
    """The `--sampling` settings, checked before the model loads (a search, `beam_size` or
    `greedy`, refused first), or None."""
    from nmt.decode.options import check_sampling
    from nmt.errors import NmtError

    check_sampling(beam_size, greedy, on)
    if not on:
        if (temperature, topk, topp, seed) != (None, None, None, None):
            raise NmtError(
                "--temperature, --sampling-topk, --sampling-topp and --seed need --sampling"
            )
        return None
    from nmt.decode.options import Sampling

    default = Sampling()
    return Sampling(
        temperature=default.temperature if temperature is None else temperature,
        top_k=default.top_k if topk is None else topk,
        top_p=default.top_p if topp is None else topp,
        seed=default.seed if seed is None else seed,
    )


def require_attention(translator: object, model_dir: str) -> None:
    """One line instead of a failed search when the model has no attention to show."""
    from nmt.errors import NmtError

    if not getattr(getattr(translator, "model", None), "has_attention", True):
        raise NmtError(f"{model_dir}: this model has no attention (model.attention: none)")


@app.command("attention")
@user_errors
def attention_cmd(
    *,
    source: str = typer.Argument(..., help="The source sentence (raw text)."),
    model_dir: ModelDirOpt,
    output: str = typer.Option(
        ..., "--output", "-o", help="Image to write: PNG, or SVG / PDF by its name; - for stdout."
    ),
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
    checkpoint: CheckpointOpt = "default",
    device: DeviceOpt = "auto",
    precision: PrecisionOpt = "auto",
    quiet: QuietOpt = False,
) -> None:
    """Draw the source-target attention of one sentence as a PNG heatmap (subword pieces on both
    axes): Seq2Seq's attention, or a Transformer layer's encoder-decoder attention per head."""
    from nmt.decode.lines import check_model_dirs

    check_model_dirs(model_dir)
    from nmt.decode.options import DecodeOptions
    from nmt.decode.translator import Translator
    from nmt.plots.attention import plot_attention

    translator = Translator.from_dir(model_dir, device, checkpoint, precision)
    require_attention(translator, model_dir)
    weights, src_pieces, tgt_pieces, translation = translator.attention(
        source, target=target, options=DecodeOptions(beam_size=beam_size)
    )
    path = plot_attention(
        weights, src_pieces, tgt_pieces, output, layer=layer, head=head,
        title=f"{source}\n{translation}",
    )  # fmt: skip
    if not quiet:  # on stderr when the image itself goes to stdout
        print(f"{translation}\nwrote {path}", file=sys.stderr if output == "-" else sys.stdout)


# ---- serve (nmt.serve) -----------------------------------------------------------------------


@app.command("serve")
@user_errors
def serve_cmd(
    *,
    model_dir: ModelDirsOpt,
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: int = typer.Option(8080, "--port", help="TCP port (0: any free one)."),
    max_batch_tokens: int = typer.Option(
        None,
        "--max-batch-tokens",
        help="Padded source tokens per decoder call \\[default: model's].",
    ),
    max_wait_ms: float = typer.Option(
        10.0, "--max-wait-ms", help="How long a request waits for others to share its batch."
    ),
    max_request_lines: int = typer.Option(256, "--max-request-lines", help="Lines per request."),
    max_line_chars: int = typer.Option(2000, "--max-line-chars", help="Characters per line."),
    timeout: float = typer.Option(
        60.0, "--timeout", help="Seconds a request may wait for its translation (then 504)."
    ),
    precision: str = typer.Option("auto", "--precision", help="auto, fp32, bf16 or fp16."),
    checkpoint: CheckpointOpt = "default",
    device: DeviceOpt = "auto",
    quiet: QuietOpt = False,
) -> None:
    """Serve MODEL_DIR over HTTP: POST /translate (micro-batched), GET /health, GET /info, the
    OpenAPI docs at /docs, and a page at / with translations and attention heatmaps."""
    from nmt.serve import Settings, serve

    settings = Settings(
        model_dir=model_dir[0], members=tuple(model_dir) if len(model_dir) > 1 else (),
        checkpoint=checkpoint, max_batch_tokens=max_batch_tokens,
        max_wait_ms=max_wait_ms, max_request_lines=max_request_lines,
        max_line_chars=max_line_chars, timeout=timeout,
    )  # fmt: skip
    serve(model_dir, host, port, settings, device=device, precision=precision, quiet=quiet)


# ---- export (nmt.export.ctranslate2) ---------------------------------------------------------------------


@app.command("export")
@user_errors
def export_cmd(
    *,
    model_dir: ModelDirOpt,
    out_dir: str = typer.Option(..., "--output", "-o", help="EXPORT_DIR to create."),
    fmt: str = typer.Option("ctranslate2", "--format", help="Export format: ctranslate2."),
    quantization: str = typer.Option(
        "float32", "--quantization", help="Weights: float32, int8, int8_float32 or bfloat16."
    ),
    checkpoint: CheckpointOpt = "default",
    force: bool = typer.Option(False, "--force", help="Replace an existing non-empty EXPORT_DIR."),
    quiet: QuietOpt = False,
) -> None:
    """Export a Transformer to a self-contained CTranslate2 directory (needs the ct2 extra);
    `nmt translate -m EXPORT_DIR` translates with it."""
    from nmt.errors import NmtError
    from nmt.export.ctranslate2 import FORMATS, export_ctranslate2

    if fmt not in FORMATS:
        raise NmtError(f"--format must be {' or '.join(FORMATS)}, got {fmt!r}")
    export_ctranslate2(model_dir, out_dir, quantization, checkpoint, force=force, quiet=quiet)


# ---- score / evaluate (nmt.eval.scoring) ----------------------------------------------------------


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
    by_length: str = typer.Option(
        None,
        "--by-length",
        metavar="SRC_FILE",
        help="Score per bucket of this source file's line lengths (Bahdanau et al. 2015, Fig. 2).",
    ),
    buckets: str = typer.Option(
        None,
        "--buckets",
        help="--by-length buckets, LO-HI holds LO <= n < HI "
        "\\[default: 0-10,10-20,20-30,30-40,40-50,50+].",
    ),
    length_unit: str = typer.Option(
        "word", "--length-unit", help="--by-length: word, or subword (pieces of --spm)."
    ),
    spm: str = typer.Option(
        None, "--spm", help="--length-unit subword: a SentencePiece .model, DATA_DIR or MODEL_DIR."
    ),
    plot: str = typer.Option(
        None, "--plot", help="--by-length: also draw the first metric by length to this PNG."
    ),
    label: list[str] = typer.Option(
        None,
        "--label",
        help="--by-length: system name per HYP file, in order \\[default: file name].",
    ),
) -> None:
    """Score hypotheses against references with sacrebleu's BLEU, chrF(++) and TER.

    Piped output is exactly the lines of `sacrebleu -f text`; a terminal gets a table.

    Several HYP files are several systems; --paired-bs / --paired-ar compare them to the first.

    As in sacrebleu, --tokenize applies to BLEU and TER ignores case (--ter-case-sensitive).
    """
    from nmt.decode.lines import check_output
    from nmt.errors import NmtError
    from nmt.eval import report as scoring_report
    from nmt.eval import scoring

    check_output(None)  # the scores go to stdout: a closed one fails before any file is read
    paired = scoring_report.report_kind(paired_bs, paired_ar, sentence, width)
    metrics = scoring.parse_metrics(metric)
    opts = scoring.Options(tokenize, lowercase, chrf_word_order, ter_case_sensitive)
    scoring.make_metric("bleu", opts)  # validates --tokenize before any file is read
    scoring.check_options(metrics, opts, paired_n)
    if by_length is None and (plot or label or buckets or spm):
        raise NmtError("--buckets, --spm, --plot and --label go with --by-length SRC_FILE")
    if by_length is not None and (paired or sentence):
        raise NmtError("--by-length cannot be combined with --sentence or --paired-bs/--paired-ar")
    systems, ref_lines = scoring.read_systems(list(hyps or ["-"]), refs)
    if by_length is not None:
        from nmt.eval import bylength

        names = bylength.system_labels(list(hyps or ["-"]), label)
        report = bylength.score_by_length(
            scoring.read_text(by_length), [(n, s) for n, (_, s) in zip(names, systems, strict=True)],
            ref_lines, bylength.parse_buckets(buckets), metrics, opts, length_unit, spm, by_length,
        )  # fmt: skip
        bylength.print_report(report, as_json, width)
        if plot:
            bylength.plot_by_length(report, plot)
        return
    if sentence:
        scoring_report.print_sentence_scores(systems, ref_lines, metrics, opts, width)
    elif paired:
        scoring_report.print_paired(
            systems, ref_lines, metrics, opts, paired, paired_n, as_json, width
        )
    else:
        results = scoring.score_systems([s for _, s in systems], ref_lines, metrics, opts)
        rows = [(name, r) for (name, _), r in zip(systems, results, strict=True)]
        scoring_report.print_scores(rows, as_json, width)


@app.command("evaluate")
@user_errors
def evaluate_cmd(
    model_dir: ModelDirsOpt,
    src: str = typer.Option(..., "--src", help="Source file to translate."),
    refs: list[str] = typer.Option(..., "--ref", "-r", help="Reference file; repeat for more."),
    output: str = typer.Option(None, "--output", "-o", help="Also write the hypotheses here."),
    metric: list[str] = typer.Option(
        ["bleu"], "--metric", help="bleu, chrf, chrf++ or ter; repeat or comma-separate."
    ),
    beam_size: int = typer.Option(
        None, "--beam-size", help="Beam width \\[default: model config]."
    ),
    greedy: bool = typer.Option(False, "--greedy", help="Greedy search instead of beam."),
    length_penalty: float = typer.Option(
        None, "--length-penalty", help="GNMT length penalty \\[default: model config]."
    ),
    batch_tokens: int = typer.Option(
        None, "--batch-tokens", help="Source tokens per batch \\[default: model config]."
    ),
    checkpoint: CheckpointOpt = "default",
    device: DeviceOpt = "auto",
    precision: PrecisionOpt = "auto",
    tokenize: str = typer.Option(None, "--tokenize", help="BLEU tokenizer (default 13a)."),
    lowercase: bool = typer.Option(
        False,
        "--lowercase",
        help="Case-insensitive BLEU and chrF (always for a model preprocessed with --lowercase).",
    ),
    chrf_word_order: int = typer.Option(None, "--chrf-word-order", help="2 = chrF++."),
    as_json: bool = typer.Option(False, "--json", help="A JSON list of score objects."),
    width: int = typer.Option(1, "--width", "-w", help="Decimals printed."),
    quiet: NoProgressOpt = False,
) -> None:
    """Translate a test set and score it in one call (inputs checked before the model loads)."""
    import contextlib

    from nmt.errors import NmtError
    from nmt.eval.evaluate import evaluate
    from nmt.eval.report import print_scores
    from nmt.eval.scoring import Options

    if width < 0:  # as `nmt score`, before anything is translated
        raise NmtError(f"--width must be >= 0, got {width}")
    from nmt.decode.lines import check_output

    check_output(None)  # the scores go to stdout, whether or not -o keeps the translations
    opts = Options(tokenize, lowercase, chrf_word_order, False)
    with contextlib.ExitStack() as stack:
        progress = None if quiet else batch_progress(stack)
        results = evaluate(
            model_dir, src, refs, hyp_out=output, metrics=metric, options=opts,
            device=device, checkpoint=checkpoint, precision=precision, progress=progress,
            beam_size=beam_size,
            greedy=greedy, length_penalty=length_penalty, batch_tokens=batch_tokens,
        )  # fmt: skip
    print_scores([(output or src, results)], as_json, width)


# ---- plot (nmt.plots.curves) -----------------------------------------------------------------------


@app.command("plot")
@user_errors
def plot_cmd(
    model_dirs: list[str] = typer.Argument(..., help="MODEL_DIRs written by nmt train."),
    output: str = typer.Option(None, "--output", "-o", help="PNG file to write."),
    x: str = typer.Option("minutes", "--x", help="minutes (wall clock), steps or epochs."),
    y: str = typer.Option(
        "bleu",
        "--y",
        help="bleu (validation), loss or ppl (training solid, validation dashed), tok_s "
        "(training speed) or rss (resident memory, MB).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the plotted series as JSON."),
    quiet: QuietOpt = False,
) -> None:
    """Training curves of one or several models in one figure, from their metrics.jsonl."""
    from nmt.errors import NmtError
    from nmt.plots.curves import check_axes, curves, plot_curves

    check_axes(x, y)
    if output is None and not as_json:
        raise NmtError("nothing to do: give -o FILE.png and/or --json")
    series = curves(model_dirs, x, y)
    if output is not None:
        path = plot_curves(series, output, x, y)
        if not quiet and not as_json:
            print(f"wrote {path}")
    if as_json:
        import json

        print(json.dumps([s.to_json() for s in series], indent=1))
