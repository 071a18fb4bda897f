"""The configuration's shape: a dataclass per section, each field's type, default and what it
accepts (choices or range, declared in its metadata by `choice`, `num`, `prob`, `duration`).

The model section is typed per architecture (`MODEL_CONFIGS`, picked by `model.type`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import yaml

from nmt.config.durations import parse_duration
from nmt.errors import NmtError

COOLDOWN_SCHEDULES = ("inverse_sqrt", "constant")  # the others already decay over the budget


@dataclass(frozen=True)
class Range:
    """Allowed interval of a numeric field (or of each item of a list field)."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False

    def __contains__(self, x: float) -> bool:
        if isinstance(x, float) and not math.isfinite(x):
            return False  # inf passes `>= lo`: as max_len_a it cut every translation to 1 token
        above = self.lo is None or (x > self.lo if self.lo_open else x >= self.lo)
        below = self.hi is None or (x < self.hi if self.hi_open else x <= self.hi)
        return above and below

    def __str__(self) -> str:
        if self.hi is None:
            return f"{'>' if self.lo_open else '>='} {self.lo}"
        if self.lo is None:
            return f"{'<' if self.hi_open else '<='} {self.hi}"
        left, right = "(" if self.lo_open else "[", ")" if self.hi_open else "]"
        return f"in {left}{self.lo}, {self.hi}{right}"

    def requirement(self, x: float) -> str:
        """What `x` failed, for its error: the range, saying "finite" when x is inf or NaN."""
        finite = not isinstance(x, float) or math.isfinite(x)
        return str(self) if finite else f"a finite number {self}"


def choice(default: str, *choices: str, doc: str) -> Any:
    """A string field restricted to `choices` (checked on load); `doc` is its one-line meaning
    in the configuration reference (docs/config.md), as for every helper below."""
    return field(default=default, metadata={"choices": (default, *choices), "doc": doc})


def num(
    default: Any, lo: float, hi: float | None = None, *, lo_open: bool = False, doc: str
) -> Any:
    """A numeric field in [lo, hi] (`lo_open`: lo excluded), checked on load and on --set."""
    return field(default=default, metadata={"range": Range(lo, hi, lo_open=lo_open), "doc": doc})


UNIT = Range(0, 1, hi_open=True)  # probabilities that must leave something: [0, 1)


def prob(default: float, *, doc: str) -> Any:
    """A probability-like float field in [0, 1)."""
    return field(default=default, metadata={"range": UNIT, "doc": doc})


def duration(default: str, *, doc: str) -> Any:
    """A duration field ("25m", "1h30m"; a bare number is seconds; "" or 0: none), parsed by
    Config.check; unlike other text fields it takes a number as well."""
    return field(default=default, metadata={"duration": True, "doc": doc})


def plain(default: Any, *, doc: str) -> Any:
    """A boolean or free-text field."""
    return field(default=default, metadata={"doc": doc})


@dataclass
class ModelConfig:
    """Keys every architecture reads; one subclass per architecture adds its own."""

    # the `nmt export --format` targets that can compute this architecture exactly
    exports: ClassVar[tuple[str, ...]] = ()

    type: str = field(  # fixed by each subclass; see MODEL_CONFIGS
        default="", init=False, metadata={"doc": "architecture: transformer or seq2seq"}
    )
    encoder_layers: int = num(3, 1, doc="encoder layers (Transformer blocks or RNN layers)")
    decoder_layers: int = num(3, 1, doc="decoder layers (Transformer blocks or RNN layers)")
    max_positions: int = num(
        512, 2, doc="Transformer: longest source or target in subwords (with eos); seq2seq: unused"
    )
    tie_embeddings: bool = plain(
        True, doc="one matrix for source and target embeddings and the output (joint vocabulary)"
    )
    dropout: float = prob(0.1, doc="dropout on embeddings, residuals and hidden states")

    def check(self) -> None:
        """Cross-field checks that single-key ranges cannot express."""


@dataclass
class TransformerConfig(ModelConfig):
    """Transformer sizes and variants (nmt.models.transformer)."""

    exports: ClassVar[tuple[str, ...]] = ("ctranslate2", "huggingface")

    type: str = field(default="transformer", init=False)
    d_model: int = num(256, 1, doc="embedding and hidden size (a multiple of heads)")
    heads: int = num(4, 1, doc="attention heads per layer")
    ff_dim: int = num(1024, 1, doc="inner size of the position-wise feed-forward layer")
    norm: str = choice("pre", "post", doc="layer norm before each sublayer (pre) or after (post)")
    positions: str = choice(
        "sinusoidal",
        "learned",
        "sinusoidal-halves",
        doc="position encoding: sinusoidal (sin and cos interleaved), learned, or sinusoidal-halves "
        "(sin in the first half of the channels, cos in the second: Marian's table)",
    )
    activation: str = choice("relu", "gelu", "swish", doc="feed-forward non-linearity")
    scale_embeddings: bool = plain(True, doc="multiply token embeddings by sqrt(d_model)")
    output_bias: bool = plain(
        False, doc="a fixed (not trained) bias on the output logits (Marian's final_logits_bias)"
    )
    attention_dropout: float = prob(0.0, doc="dropout on attention weights")

    def check(self) -> None:
        """Heads split d_model evenly."""
        if self.d_model % self.heads:
            raise NmtError(
                f"model.d_model {self.d_model} is not divisible by model.heads {self.heads}"
            )


@dataclass
class Seq2SeqConfig(ModelConfig):
    """RNN encoder-decoder sizes and variants (nmt.models.seq2seq)."""

    type: str = field(default="seq2seq", init=False)
    rnn_type: str = choice("gru", "lstm", doc="recurrent cell")
    embed_dim: int = num(256, 1, doc="embedding size (also the readout size)")
    hidden_size: int = num(256, 1, doc="RNN size per direction (encoder states are twice as wide)")
    attention: str = choice(
        "bahdanau",
        "dot",
        "general",
        "none",
        doc="additive (Bahdanau), Luong dot or general, or none: the final encoder states only",
    )


# model.type -> its config class; nmt.models.MODELS maps the same names to the model classes.
MODEL_CONFIGS: dict[str, type[ModelConfig]] = {
    "transformer": TransformerConfig,
    "seq2seq": Seq2SeqConfig,
}


@dataclass
class TrainingConfig:
    """Optimisation, batching, validation, stopping and checkpointing."""

    max_tokens: int = num(4096, 1, doc="target tokens per batch (per process under DDP)")
    accumulate: int = num(1, 1, doc="batches per optimizer step")
    lr: float = num(7e-4, 0, lo_open=True, doc="peak learning rate, reached at the end of warmup")
    betas: list[float] = field(  # Adam's (beta1, beta2): exactly two
        default_factory=lambda: [0.9, 0.98],
        metadata={"range": UNIT, "length": 2, "doc": "Adam's (beta1, beta2)"},
    )
    weight_decay: float = num(0.0, 0, doc="decoupled (AdamW) weight decay")
    schedule: str = choice(
        "inverse_sqrt",
        "cosine",
        "linear",
        "constant",
        doc="after warmup: decay with 1/sqrt(step), or over the budget (cosine, linear), or none",
    )
    warmup: int = num(4000, 0, doc="updates of linear warmup")
    min_lr: float = num(0.0, 0, doc="floor of the decayed learning rate")
    cooldown: float = prob(
        0.0,
        doc="inverse_sqrt, constant: last share of the budget annealed to min_lr (and, out of "
        "patience, the share to cool down over before stopping); 0: off",
    )
    label_smoothing: float = prob(0.1, doc="label smoothing of the cross-entropy")
    subword_alpha: float = prob(
        0.0,
        doc="subword regularisation: a new SentencePiece segmentation every epoch (unigram "
        "alpha, or BPE-dropout probability); 0: off",
    )
    ema_decay: float = prob(
        0.0, doc="moving average of the weights, for validation and every checkpoint; 0: off"
    )
    clip_norm: float = num(1.0, 0, doc="gradient-norm clipping; 0: off")
    precision: str = choice(
        "auto",
        "fp32",
        "bf16",
        "fp16",
        doc="auto: bf16 on GPUs and CPUs with native bf16, fp16 on older GPUs, else fp32",
    )
    compile: bool = plain(False, doc="torch.compile the model")
    valid_every: int = num(
        1000, 0, doc="updates between validations (each saves a step checkpoint)"
    )
    log_every: int = num(100, 1, doc="updates between training log lines")
    patience: int = num(10, 0, doc="validations without improvement before stopping; 0: off")
    early_stop_metric: str = choice("bleu", "loss", doc="what improvement means")
    keep_best: int = num(3, 1, doc="best step checkpoints kept")
    keep_last: int = num(5, 0, doc="newest step checkpoints kept")
    average_last: int = num(
        0, 0, doc="at the end, average the N newest step checkpoints into averaged; 0: off"
    )
    average_best: int = num(0, 0, doc="or the N best on validation (kept by keep_best); 0: off")
    valid_max_sentences: int = num(
        0, 0, doc="validate on the first N valid lines only; 0: all of them"
    )
    max_steps: int = num(0, 0, doc="stop after N updates; 0: no limit")
    max_epochs: int = num(0, 0, doc="stop after N epochs; 0: no limit")
    max_time: str = duration("", doc="wall-clock budget of the run (25m, 1h30m); empty: none")
    seed: int = num(  # numpy takes no negative seed
        1, 0, 2**32 - 1, doc="seeds initialisation, dropout and batch order"
    )
    save_every: int = num(0, 0, doc="updates between saves of last + trainer state; 0: off")
    save_every_time: str = duration(
        "10m", doc="wall-clock time between such saves; empty or 0: off"
    )
    reset_data_position: bool = plain(
        False, doc="--resume with other batching settings: start the epoch over"
    )
    init_from: str = plain(
        "", doc="fine-tuning: MODEL_DIR whose weights start the run; empty: none"
    )
    init_checkpoint: str = plain(
        "default",
        doc="which of its checkpoints: default, best, last, averaged, or a .safetensors path",
    )


@dataclass
class DecodingConfig:
    """Search defaults used by `nmt translate` (CLI options override them)."""

    beam_size: int = num(5, 1, 200, doc="beam width; 1: greedy")
    length_penalty: float = num(  # ((5 + L) / 6) ** alpha stays finite
        1.0,
        0,
        10,
        doc="length penalty exponent alpha for finished hypotheses: GNMT's ((5 + L) / 6) ** alpha "
        "(stop early or exact) or L ** alpha (stop transformers)",
    )
    max_len_a: float = num(1.2, 0, doc="output length limit: a * source length + b (subwords)")
    max_len_b: int = num(10, 0, doc="output length limit: a * source length + b (subwords)")
    min_len: int = num(0, 0, doc="shortest output in subwords")
    no_repeat_ngram_size: int = num(
        0,
        0,
        doc="no n-gram of this many subwords twice in one output: the token that would repeat one "
        "is never chosen (0: off; 3-4 stop a loop that repeats a phrase to the length limit)",
    )
    batch_tokens: int = num(4096, 1, doc="source tokens per translation batch")
    stop: str = choice(
        "early",
        "exact",
        "transformers",
        doc="beam rule: early (GNMT-normalised; a sentence ends when its best live hypothesis, "
        "ended at the next step, could not win), exact (GNMT-normalised; no live hypothesis can "
        "still win), or transformers (generate's rule: sum log-prob / length ** length_penalty "
        "with eos counted, beam_size finished kept, its stopping heuristic)",
    )
    forced_eos: bool = plain(
        False,
        doc="transformers rule: a hypothesis at the length limit ends in a forced eos that scores "
        "0 and counts in its length (forced_eos_token_id); else it ends there without one",
    )


@dataclass
class Config:
    """The whole resolved configuration, written to MODEL_DIR/config.yaml."""

    model: ModelConfig = field(default_factory=TransformerConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    decoding: DecodingConfig = field(default_factory=DecodingConfig)

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict, ready for YAML; the model section has its architecture's keys only."""
        return dataclasses.asdict(self)

    def save(self, path: str | Path) -> None:
        """Write the resolved config as YAML, atomically."""
        from nmt.textio import atomic_write

        with atomic_write(path) as f:
            yaml.safe_dump(self.to_dict(), f, sort_keys=False)

    def check(self) -> None:
        """Cross-field checks, run once every layer is applied; durations parse."""
        self.model.check()
        tc = self.training
        if tc.average_last and tc.average_best:
            raise NmtError(
                "training.average_last and training.average_best are two rules for one average: "
                "set one of them to 0"
            )
        if tc.average_best > tc.keep_best:
            raise NmtError(
                f"training.average_best {tc.average_best} needs training.keep_best >= "
                f"{tc.average_best} (the step checkpoints it averages), got {tc.keep_best}"
            )
        if tc.average_last > tc.keep_last:
            raise NmtError(
                f"training.average_last {tc.average_last} needs training.keep_last >= "
                f"{tc.average_last} (the step checkpoints it averages), got {tc.keep_last}"
            )
        if tc.cooldown > 0 and tc.schedule not in COOLDOWN_SCHEDULES:
            raise NmtError(
                f"training.cooldown applies to the inverse_sqrt and constant schedules; "
                f"{tc.schedule} already decays over the whole budget"
            )
        if tc.init_checkpoint not in INIT_CHECKPOINTS and not tc.init_checkpoint.endswith(
            ".safetensors"
        ):
            raise NmtError(
                f"training.init_checkpoint must be {', '.join(INIT_CHECKPOINTS)} or a .safetensors "
                f"path, got {tc.init_checkpoint!r}"
            )
        for key in DURATIONS:
            try:
                parse_duration(getattr(self.training, key))
            except NmtError as e:
                raise NmtError(f"training.{key}: {e}") from None
        if tc.cooldown > 0 and not (tc.max_steps or parse_duration(tc.max_time)):
            raise NmtError(
                "training.cooldown needs a budget to end on: training.max_steps or training.max_time"
            )


DURATIONS = tuple(f.name for f in dataclasses.fields(TrainingConfig) if f.metadata.get("duration"))
INIT_CHECKPOINTS = ("default", "best", "last", "averaged")  # nmt.dirs.model's names


SECTIONS = [f.name for f in dataclasses.fields(Config)]
