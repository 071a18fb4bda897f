"""`nmt translate`, `nmt rescore` and `nmt attention`: a model (or an `nmt export`) over text
files (nmt.decode.translate_files, nmt.decode.rescore) or one sentence's attention (nmt.plots.heatmaps).
Every input and option is checked before the model loads (by the library's checks, which its
functions run too), save what only the loaded engine's capabilities tell."""

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
    NoRepeatNgramOpt,
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
    options_of,
)
from nmt.cli.progress import count_progress, note_to_stderr

if TYPE_CHECKING:
    from nmt.decode.constraints import Glossary
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
    no_repeat_ngram_size: NoRepeatNgramOpt = None,
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
    top_k: TopKOpt = None,
    top_p: TopPOpt = None,
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
    from nmt.decode.constraints import Glossary, check_input_format
    from nmt.decode.lines import check_inputs, check_model_dirs, check_output
    from nmt.decode.options import check_search
    from nmt.decode.translate_files import check_target, translate_files
    from nmt.dirs import open_dirs
    from nmt.engines.loading import checked_export  # model directories, or an export

    check_inputs(inputs, fmt, errors, with_attention, nbest, buffer_size)  # before the model loads
    check_output(output)
    check_model_dirs(model_dir)
    check_input_format(input_format)
    terms = Glossary.load(glossary) if glossary is not None else None
    export = checked_export(model_dir, checkpoint, precision)  # options an export refuses, first
    dirs = [export] if export is not None else open_dirs(model_dir)  # each read once, here
    check_target(dirs[0], model_dir[0], target_lang)
    options = options_of(locals())  # the decoding flags among the parameters
    check_search(dirs[0], options)  # an ensemble: its first one's defaults
    engine = open_for(model_dir, options, device, checkpoint, precision, workers, dirs, terms)
    with engine as translator:
        translate_files(
            translator,
            inputs,
            output,
            options,
            fmt=fmt,
            errors=errors,
            buffer_size=buffer_size,
            input_format=input_format,
            progress=None if quiet else count_progress,
            split_sentences=split_sentences,
            glossary=terms,
            on_notice=None if quiet else note_to_stderr,
            target_lang=target_lang,
        )


def open_for(
    model_dir: list[str],
    options: DecodeOptions,
    device: str,
    checkpoint: str,
    precision: str,
    workers: int,
    opened: list[Any] | None = None,
    glossary: Glossary | None = None,
) -> Engine:
    """The engine of `model_dir` (nmt.engines.loading.open_translator; `opened`: its directories
    already opened), refused at once when it cannot decode as `options` ask, with `glossary`
    (nmt.decode.translate_files.check_engine)."""
    from nmt.decode.translate_files import check_engine
    from nmt.dirs import open_dirs
    from nmt.engines.loading import open_translator

    dirs = opened or open_dirs(model_dir)
    translator = open_translator(dirs, device, checkpoint, precision, workers)
    check_engine(translator, options, ", ".join(model_dir), glossary is not None)
    return translator


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
    from nmt.decode.rescore import rescore_files
    from nmt.dirs import open_dirs
    from nmt.engines.loading import open_translator  # a model directory, or an `nmt export` of one

    with open_translator(open_dirs(model_dir), device, checkpoint, precision) as translator:
        rescore_files(
            translator,
            source,
            target,
            output,
            fmt=fmt,
            average=average,
            batch_tokens=batch_tokens,
            on_warning=warn_to_stderr(f"{source}, {target}"),
            progress=None if quiet else lambda stack, n: count_progress(stack, n, "scoring"),
        )


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
    from nmt.decode.engine import check_attention_kind
    from nmt.decode.lines import check_model_dirs

    check_attention_kind(kind)
    check_model_dirs(model_dir)
    from nmt.decode.paragraphs import prefixed, source_languages, target_token
    from nmt.decode.translate_files import require_attention
    from nmt.dirs.model import ModelDir
    from nmt.engines.translator import Translator
    from nmt.plots.heatmaps import plot_attention

    opened = ModelDir(model_dir)
    token = target_token(source_languages(opened.tokenizers[0]), target_lang, model_dir)
    (text,) = prefixed([source], token)
    translator = Translator.from_dir(opened, device, checkpoint, precision)
    require_attention(translator, model_dir)
    weights, columns, rows, translation = translator.attention(
        text, target=target, options=decode_options(beam_size=beam_size), kind=kind
    )
    path = plot_attention(
        weights,
        columns,
        rows,
        output,
        layer=layer,
        head=head,
        title=f"{source}\n{translation}",
        kind=kind,
    )
    if not quiet:  # on stderr when the image itself goes to stdout
        print(f"{translation}\nwrote {path}", file=sys.stderr if output == "-" else sys.stdout)
