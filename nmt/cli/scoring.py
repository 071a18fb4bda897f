"""`nmt score` and `nmt evaluate`: hypothesis files against references (nmt.eval.score_files), or a
model's translation of a test set scored in one call (nmt.eval.evaluate)."""

from __future__ import annotations

import typer

from nmt.cli.errors import user_errors
from nmt.cli.flags import (
    BatchTokensOpt,
    BeamSizeOpt,
    CheckpointOpt,
    DeviceOpt,
    GreedyOpt,
    JsonOpt,
    LengthPenaltyOpt,
    MaxLenAOpt,
    MaxLenBOpt,
    ModelDirsOpt,
    NoProgressOpt,
    NoRepeatNgramOpt,
    PrecisionOpt,
    StopOpt,
    TargetLangOpt,
    options_of,
)
from nmt.cli.progress import batch_progress, note_to_stderr

commands = typer.Typer()


@commands.command("score")
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
    as_json: JsonOpt = False,
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
    plot_relative: str = typer.Option(
        None,
        "--plot-relative",
        help="--by-length: also draw it as % of each system's score on the shortest bucket.",
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
    from nmt.eval.score_files import ScoreRequest, score_files
    from nmt.eval.scoring import Options

    check_output(None)  # the scores go to stdout: a closed one fails before any file is read
    request = ScoreRequest(
        refs=refs,
        hyps=hyps or ["-"],
        metrics=metric,
        options=Options(tokenize, lowercase, chrf_word_order, ter_case_sensitive),
        sentence=sentence,
        paired_bs=paired_bs,
        paired_ar=paired_ar,
        paired_n=paired_n,
        by_length=by_length,
        buckets=buckets,
        length_unit=length_unit,
        spm=spm,
        plot=plot,
        plot_relative=plot_relative,
        labels=label,
        as_json=as_json,
        width=width,
    )
    score_files(request)


@commands.command("evaluate")
@user_errors
def evaluate_cmd(
    model_dir: ModelDirsOpt,
    src: str = typer.Option(..., "--src", help="Source file to translate."),
    refs: list[str] = typer.Option(..., "--ref", "-r", help="Reference file; repeat for more."),
    output: str = typer.Option(None, "--output", "-o", help="Also write the hypotheses here."),
    metric: list[str] = typer.Option(
        ["bleu"], "--metric", help="bleu, chrf, chrf++ or ter; repeat or comma-separate."
    ),
    beam_size: BeamSizeOpt = None,
    greedy: GreedyOpt = False,
    length_penalty: LengthPenaltyOpt = None,
    stop: StopOpt = None,
    max_len_a: MaxLenAOpt = None,
    max_len_b: MaxLenBOpt = None,
    no_repeat_ngram_size: NoRepeatNgramOpt = None,
    batch_tokens: BatchTokensOpt = None,
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
    as_json: JsonOpt = False,
    width: int = typer.Option(1, "--width", "-w", help="Decimals printed."),
    quiet: NoProgressOpt = False,
    split_sentences: bool = typer.Option(
        None,
        "--split-sentences/--whole-lines",
        help="As nmt translate (default: split the lines that hold several sentences).",
        show_default=False,
    ),
    target_lang: TargetLangOpt = None,
) -> None:
    """Translate a test set and score it in one call (inputs checked before the model loads)."""
    import contextlib

    from nmt.decode.lines import check_output
    from nmt.eval.evaluate import evaluate
    from nmt.eval.printing import check_width, print_scores
    from nmt.eval.scoring import Options

    check_width(width)  # as `nmt score`, before anything is translated
    check_output(None)  # the scores go to stdout, whether or not -o keeps the translations
    decoding = options_of(locals())  # the decoding flags among the parameters
    notes: list[str] = []
    with contextlib.ExitStack() as stack:
        results = evaluate(
            model_dir,
            src,
            refs,
            hyp_out=output,
            metrics=metric,
            options=Options(tokenize, lowercase, chrf_word_order, False),
            decoding=decoding,
            device=device,
            checkpoint=checkpoint,
            precision=precision,
            on_notice=notes.append,
            progress=None if quiet else batch_progress(stack),
            split_sentences=split_sentences,
            target_lang=target_lang,
        )
    if notes and not quiet:  # after the progress bar has closed
        note_to_stderr(notes[0])
    print_scores([(output or src, results)], as_json, width)
