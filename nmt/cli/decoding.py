"""`nmt translate`, `nmt rescore` and `nmt attention`: a model (or an `nmt export`) over text
files (nmt.decode.translate_files, nmt.decode.rescore) or one sentence's attention (nmt.plots.heatmaps).
Every input and option is checked before the model loads."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import typer

from nmt.cli.errors import user_errors
from nmt.cli.flags import (
    BatchTokensOpt,
    BeamSizeOpt,
    CheckpointOpt,
    DeviceOpt,
    GreedyOpt,
    LengthPenaltyOpt,
    MaxLenAOpt,
    MaxLenBOpt,
    MinLenOpt,
    ModelDirOpt,
    ModelDirsOpt,
    NbestOpt,
    NoProgressOpt,
    PrecisionOpt,
    QuietOpt,
    SamplingOpt,
    SamplingSeedOpt,
    StopOpt,
    TargetLangOpt,
    TemperatureOpt,
    TopKOpt,
    TopPOpt,
    decode_options,
)
from nmt.cli.progress import count_progress, note_to_stderr

if TYPE_CHECKING:
    from nmt.decode.engine import Engine
    from nmt.decode.options import DecodeOptions

commands = typer.Typer()


@commands.command("translate")
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
    beam_size: BeamSizeOpt = None,
    greedy: GreedyOpt = False,
    length_penalty: LengthPenaltyOpt = None,
    stop: StopOpt = None,
    nbest: NbestOpt = 1,
    max_len_a: MaxLenAOpt = None,
    max_len_b: MaxLenBOpt = None,
    min_len: MinLenOpt = None,
    batch_tokens: BatchTokensOpt = None,
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
    sampling: SamplingOpt = False,
    temperature: TemperatureOpt = None,
    topk: TopKOpt = None,
    topp: TopPOpt = None,
    seed: SamplingSeedOpt = None,
    split_sentences: bool = typer.Option(
        None,
        "--split-sentences/--whole-lines",
        help="Split every line into sentences (in the model's source language), translate them "
        "in the same batches, and join each line's translations into its one output line "
        "(JSONL keeps them under 'sentences'); or translate whole lines. Default: split the "
        "lines that hold several sentences unless --nbest, --with-attention or --sampling is "
        "asked for. A line over the model's source limit is cut at punctuation or spaces into "
        "pieces (with a warning), never truncated.",
        show_default=False,
    ),
    input_format: str = typer.Option(
        "text",
        "--input-format",
        help='text: one sentence per line; jsonl: one object per line, {"text": "...", '
        '"constraints": ["target phrase", ...]}: phrases its translation must contain '
        "(beam search; the line is not split into sentences).",
    ),
    glossary: str = typer.Option(
        None,
        "--glossary",
        help="TSV file of 'source term<TAB>target term': where a source term occurs in a line "
        "(as whole words; the longest where two start at one place), its translation must "
        "contain the target term (beam search; model directories, not exports).",
    ),
    target_lang: TargetLangOpt = None,
) -> None:
    """Translate text: exactly one output line per input line, in order (N lines with --nbest
    N in text format). Empty lines give empty lines; --split-sentences for paragraphs;
    --glossary and --input-format jsonl for terminology."""
    from nmt.decode.lines import check_inputs, check_model_dirs, check_output

    check_inputs(inputs, fmt, errors, with_attention, nbest, buffer_size)  # before the model loads
    check_output(output)
    check_model_dirs(model_dir)
    from nmt.decode.constraints import (
        CONSTRAINTS_REFUSED,
        INPUT_FORMATS,
        Glossary,
        check_constraint_options,
    )
    from nmt.decode.loading import checked_export  # model directories, or an export
    from nmt.decode.options import check_search
    from nmt.dirs import open_dirs
    from nmt.errors import NmtError

    if input_format not in INPUT_FORMATS:
        raise NmtError(f"--input-format must be text or jsonl, got {input_format!r}")
    terms = Glossary.load(glossary) if glossary is not None else None
    export = checked_export(model_dir, checkpoint, precision)  # options an export refuses, first
    dirs = [export] if export is not None else open_dirs(model_dir)  # each read once, here
    check_target_lang(dirs[0], target_lang, model_dir[0])
    if terms is not None and export is not None:
        raise NmtError(f"--glossary: {CONSTRAINTS_REFUSED}")
    options = decode_options(
        beam_size=beam_size, greedy=greedy, length_penalty=length_penalty, nbest=nbest,
        max_len_a=max_len_a, max_len_b=max_len_b, min_len=min_len, batch_tokens=batch_tokens,
        stop=stop, with_attention=with_attention, sampling=sampling, temperature=temperature,
        top_k=topk, top_p=topp, seed=seed,
    )  # fmt: skip
    resolved = check_search(dirs[0], options)  # an ensemble: its first one's defaults
    if terms is not None:
        check_constraint_options(resolved, "--glossary:")
    from nmt.decode.paragraphs import check_split_options
    from nmt.decode.translate_files import translate_files

    if split_sentences is True:
        check_split_options(options)

    translator = open_for(model_dir, options, device, checkpoint, precision, workers, dirs)
    with translator:  # its worker processes end with the command
        translate_files(
            translator, inputs, output, options, fmt=fmt, errors=errors,
            buffer_size=buffer_size, progress=None if quiet else count_progress,
            split_sentences=split_sentences, input_format=input_format, glossary=terms,
            on_notice=None if quiet else note_to_stderr, target_lang=target_lang,
        )  # fmt: skip


def open_for(
    model_dir: list[str],
    options: DecodeOptions,
    device: str,
    checkpoint: str,
    precision: str,
    workers: int,
    opened: list[Any] | None = None,
) -> Any:
    """The engine of `model_dir` (nmt.decode.loading.open_translator; `opened`: its directories
    already opened), refused at once when it cannot decode as `options` ask (attention from a
    model without any; sampling from an `nmt export`)."""
    from nmt.decode.loading import open_translator
    from nmt.dirs import open_dirs
    from nmt.errors import NmtError

    translator = open_translator(
        opened or open_dirs(model_dir), device, checkpoint, precision, workers
    )
    if options.with_attention:
        require_attention(translator, ", ".join(model_dir))
    if options.sampling is not None and not translator.capabilities.sampling:
        raise NmtError(
            f"{model_dir[0]}: --sampling needs a model directory (an `nmt export` directory "
            "decodes with CTranslate2's search)"
        )
    return translator


def check_target_lang(opened: Any, target_lang: str | None, model_dir: str) -> str | None:
    """The token of `--target-lang` for the opened directory `opened` (a multilingual model
    needs one, any other takes none), checked before the model loads."""
    from nmt.decode.paragraphs import source_languages, target_token

    return target_token(source_languages(opened.tokenizers[0]), target_lang, model_dir)


def require_attention(translator: Engine, model_dir: str) -> None:
    """One line instead of a failed search when the model has no attention to show."""
    from nmt.errors import NmtError

    if not translator.capabilities.with_attention:
        raise NmtError(f"{model_dir}: this model has no attention (model.attention: none)")


@commands.command("rescore")
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
    batch_tokens: BatchTokensOpt = None,
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
    from nmt.decode.loading import open_translator  # a model directory, or an `nmt export` of one
    from nmt.decode.rescore import rescore_files
    from nmt.dirs import open_dirs

    with open_translator(open_dirs(model_dir), device, checkpoint, precision) as translator:
        rescore_files(
            translator, source, target, output, fmt=fmt, average=average,
            batch_tokens=batch_tokens, on_warning=warn_to_stderr(f"{source}, {target}"),
            progress=None if quiet else lambda stack, n: count_progress(stack, n, "scoring"),
        )  # fmt: skip


@commands.command("attention")
@user_errors
def attention_cmd(
    *,
    source: str = typer.Argument(..., help="The source sentence (raw text)."),
    model_dir: ModelDirOpt,
    output: str = typer.Option(
        ..., "--output", "-o", help="Image to write: PNG, or SVG / PDF by its name; - for stdout."
    ),
    kind: str = typer.Option(
        "cross",
        "--kind",
        help="cross: source-target attention; self: the encoder's self-attention (source x "
        "source); decoder: the decoder's masked self-attention (target x target). Transformer "
        "models have all three, Seq2Seq only cross.",
    ),
    layer: str = typer.Option(
        "last",
        "--layer",
        help="Layer (0-based; of the encoder for --kind self, else of the decoder), 'last', or "
        "'all' (layer x head grid).",
    ),
    head: str = typer.Option(
        "mean", "--head", help="Attention head (0-based), 'mean', or 'all' (one panel per head)."
    ),
    target: str = typer.Option(
        None, "--target", help="Force-decode this translation instead of searching for one."
    ),
    beam_size: BeamSizeOpt = None,
    checkpoint: CheckpointOpt = "default",
    device: DeviceOpt = "auto",
    precision: PrecisionOpt = "auto",
    quiet: QuietOpt = False,
    target_lang: TargetLangOpt = None,
) -> None:
    """Draw the attention of one sentence as a PNG heatmap (subword pieces on both axes):
    Seq2Seq's attention, or a Transformer layer's encoder-decoder attention (or with --kind its
    encoder or decoder self-attention) per head."""
    from nmt.decode.lines import check_model_dirs
    from nmt.errors import NmtError

    if kind not in ("cross", "self", "decoder"):
        raise NmtError(f"--kind must be cross, self or decoder, got {kind!r}")
    check_model_dirs(model_dir)
    from nmt.decode.paragraphs import prefixed
    from nmt.decode.translator import Translator
    from nmt.dirs.model import ModelDir
    from nmt.plots.heatmaps import plot_attention

    opened = ModelDir(model_dir)
    (text,) = prefixed([source], check_target_lang(opened, target_lang, model_dir))
    translator = Translator.from_dir(opened, device, checkpoint, precision)
    require_attention(translator, model_dir)
    weights, columns, rows, translation = translator.attention(
        text, target=target, options=decode_options(beam_size=beam_size), kind=kind
    )
    path = plot_attention(
        weights, columns, rows, output, layer=layer, head=head,
        title=f"{source}\n{translation}", kind=kind,
    )  # fmt: skip
    if not quiet:  # on stderr when the image itself goes to stdout
        print(f"{translation}\nwrote {path}", file=sys.stderr if output == "-" else sys.stdout)
