"""The options several commands share, each declared once as an `Annotated` alias (one spelling,
one help text everywhere), and `decode_options`, which turns the decoding flags into the
library's `DecodeOptions`. Imports typer alone: `nmt --help` loads no model code."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from nmt.decode.options import DecodeOptions

# ---- models and where they run --------------------------------------------------------------

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
        help="auto (= fp32: a line translates the same whatever it is batched with), fp32, or "
        "bf16 / fp16 (GPU only): faster, but a line may translate differently next to other lines.",
    ),
]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="Print only errors.")]
NoProgressOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")]

# ---- decoding (nmt.decode.options.DecodeOptions; None: the model's `decoding` config) -------

BeamSizeOpt = Annotated[
    int | None,
    typer.Option("--beam-size", "-b", help="Beam width \\[default: model config]. 1 = greedy."),
]
GreedyOpt = Annotated[bool, typer.Option("--greedy", help="Greedy search (same as --beam-size 1).")]
LengthPenaltyOpt = Annotated[
    float | None,
    typer.Option("--length-penalty", help="GNMT length penalty \\[default: model config]."),
]
StopOpt = Annotated[
    str | None,
    typer.Option(
        "--stop",
        help="Beam rule: early (a sentence ends when its best live hypothesis, ended at the "
        "next step, could not win), exact (no live hypothesis can still win under the length "
        "penalty; slower, docs/benchmarks.md), or transformers (generate's ranking by "
        "log-prob / length ** penalty and its stop; an imported model's default). "
        "Default: model config, early.",
    ),
]
NbestOpt = Annotated[
    int,
    typer.Option(
        "--nbest",
        help="Hypotheses per input. Text format: N lines per input line, best first "
        "(empty lines when fewer were found); jsonl: N entries in 'hypotheses'.",
    ),
]
MaxLenAOpt = Annotated[
    float | None,
    typer.Option(
        "--max-len-a", help="Max output length a*|source|+b: a (default: model config, 1.2)."
    ),
]
MaxLenBOpt = Annotated[
    float | None,
    typer.Option(
        "--max-len-b", help="Max output length a*|source|+b: b (default: model config, 10)."
    ),
]
MinLenOpt = Annotated[
    int | None,
    typer.Option("--min-len", help="Minimum output length in subwords (default: model config, 0)."),
]
NoRepeatNgramOpt = Annotated[
    int | None,
    typer.Option(
        "--no-repeat-ngram-size",
        help="No n-gram of N subwords twice in one output: 3-4 stop a translation that repeats a "
        "phrase until the length limit (default: model config, 0: off).",
    ),
]
BatchTokensOpt = Annotated[
    int | None,
    typer.Option("--batch-tokens", help="Padded tokens per batch \\[default: model config]."),
]
SamplingOpt = Annotated[
    bool,
    typer.Option(
        "--sampling",
        help="Draw each token from the model's distribution instead of searching (sampled "
        "back-translation); --nbest N: N samples per line, best score first.",
    ),
]
TemperatureOpt = Annotated[
    float | None,
    typer.Option(
        "--temperature", help="--sampling: divide log-probs by T (<1 sharper). Default 1."
    ),
]
TopKOpt = Annotated[
    int | None,
    typer.Option(
        "--sampling-topk", help="--sampling: only from the K most likely tokens (0: all)."
    ),
]
TopPOpt = Annotated[
    float | None,
    typer.Option(
        "--sampling-topp",
        help="--sampling: only from the fewest tokens holding P of the probability (1: all).",
    ),
]
SamplingSeedOpt = Annotated[
    int | None,
    typer.Option(
        "--seed",
        help="--sampling: seed (default 0). A line's samples depend on the seed, its line "
        "number in its file and the model, not on batching or --workers.",
    ),
]

TargetLangOpt = Annotated[
    str | None,
    typer.Option(
        "--target-lang",
        help="The target language of a multilingual model (one whose vocabulary holds >>xx<< "
        "tokens, as some OPUS-MT models): fra or >>fra<<. Its token starts every source line "
        "and every sentence or piece of one. Required by such a model, refused by any other.",
    ),
]

# ---- scores -----------------------------------------------------------------------------------

JsonOpt = Annotated[bool, typer.Option("--json", help="A JSON list of score objects.")]


def decode_options(
    *,
    beam_size: int | None = None,
    greedy: bool = False,
    length_penalty: float | None = None,
    nbest: int = 1,
    max_len_a: float | None = None,
    max_len_b: float | None = None,
    min_len: int | None = None,
    no_repeat_ngram_size: int | None = None,
    batch_tokens: int | None = None,
    stop: str | None = None,
    with_attention: bool = False,
    sampling: bool = False,
    temperature: float | None = None,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
) -> DecodeOptions:
    """The decoding flags of a command as the library's options, the sampling ones checked
    before any model loads (nmt.decode.options.sampling_options; the model's own defaults are
    checked once its directory is opened)."""
    from nmt.decode.options import DecodeOptions, sampling_options

    sampled = sampling_options(sampling, temperature, top_k, top_p, seed, beam_size, greedy)
    return DecodeOptions(
        beam_size=beam_size,
        greedy=greedy,
        length_penalty=length_penalty,
        nbest=nbest,
        max_len_a=max_len_a,
        max_len_b=max_len_b,
        min_len=min_len,
        no_repeat_ngram_size=no_repeat_ngram_size,
        batch_tokens=batch_tokens,
        stop=stop,
        with_attention=with_attention,
        sampling=sampled,
    )


def options_of(given: Mapping[str, Any]) -> DecodeOptions:
    """`decode_options` of the decoding flags among a command's parameters (its `locals()`,
    taken first thing in its body): those named as `decode_options` names them."""
    names = inspect.signature(decode_options).parameters
    return decode_options(**{k: v for k, v in given.items() if k in names})
