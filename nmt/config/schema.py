"""The configuration's shape: a dataclass per section, each field's type, default and what it
accepts (choices or range, declared in its metadata by `choice`, `num`, `prob`, `duration`).

The model section is typed per architecture (`MODEL_CONFIGS`, picked by `model.type`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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


def choice(default: str, *choices: str) -> Any:
    """A string field restricted to `choices` (checked on load)."""
    return field(default=default, metadata={"choices": (default, *choices)})


def num(default: Any, lo: float, hi: float | None = None, *, lo_open: bool = False) -> Any:
    """A numeric field in [lo, hi] (`lo_open`: lo excluded), checked on load and on --set."""
    return field(default=default, metadata={"range": Range(lo, hi, lo_open=lo_open)})


UNIT = Range(0, 1, hi_open=True)  # probabilities that must leave something: [0, 1)


def prob(default: float) -> Any:
    """A probability-like float field in [0, 1)."""
    return field(default=default, metadata={"range": UNIT})


def duration(default: str) -> Any:
    """A duration field ("25m", "1h30m"; a bare number is seconds; "" or 0: none), parsed by
    Config.check; unlike other text fields it takes a number as well."""
    return field(default=default, metadata={"duration": True})


@dataclass
class ModelConfig:
    """Keys every architecture reads; one subclass per architecture adds its own."""

    type: str = field(default="", init=False)  # fixed by each subclass; see MODEL_CONFIGS
    encoder_layers: int = num(3, 1)
    decoder_layers: int = num(3, 1)
    max_positions: int = num(512, 2)  # Transformer: longest source or target; seq2seq: no limit
    tie_embeddings: bool = True
    dropout: float = prob(0.1)

    def check(self) -> None:
        """Cross-field checks that single-key ranges cannot express."""


@dataclass
class TransformerConfig(ModelConfig):
    """Transformer sizes and variants (nmt.models.transformer)."""

    type: str = field(default="transformer", init=False)
    d_model: int = num(256, 1)
    heads: int = num(4, 1)
    ff_dim: int = num(1024, 1)
    norm: str = choice("pre", "post")
    positions: str = choice("sinusoidal", "learned")
    activation: str = choice("relu", "gelu")
    attention_dropout: float = prob(0.0)

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
    rnn_type: str = choice("gru", "lstm")
    embed_dim: int = num(256, 1)
    hidden_size: int = num(256, 1)
    attention: str = choice("bahdanau", "dot", "general", "none")


# model.type -> its config class; nmt.models.MODELS maps the same names to the model classes.
MODEL_CONFIGS: dict[str, type[ModelConfig]] = {
    "transformer": TransformerConfig,
    "seq2seq": Seq2SeqConfig,
}


@dataclass
class TrainingConfig:
    """Optimisation, batching, validation, stopping and checkpointing."""

    max_tokens: int = num(4096, 1)
    accumulate: int = num(1, 1)
    lr: float = num(7e-4, 0, lo_open=True)
    betas: list[float] = field(  # Adam's (beta1, beta2): exactly two
        default_factory=lambda: [0.9, 0.98], metadata={"range": UNIT, "length": 2}
    )
    weight_decay: float = num(0.0, 0)
    schedule: str = choice("inverse_sqrt", "cosine", "linear", "constant")
    warmup: int = num(4000, 0)
    min_lr: float = num(0.0, 0)
    cooldown: float = prob(0.0)  # inverse_sqrt/constant: last share of the budget decayed to min_lr
    # (and out of patience, a run cools down over that share from where it is before stopping)
    label_smoothing: float = prob(0.1)
    subword_alpha: float = prob(0.0)  # subword regularisation: a new SentencePiece segmentation
    # sampled every epoch (unigram smoothing alpha, or BPE-dropout probability); 0: off
    ema_decay: float = prob(0.0)  # exponential moving average of the weights, used for validation
    # and every checkpoint (e.g. 0.9995); 0: off
    clip_norm: float = num(1.0, 0)
    precision: str = choice("auto", "fp32", "bf16", "fp16")
    compile: bool = False
    valid_every: int = num(1000, 0)
    log_every: int = num(100, 1)
    patience: int = num(10, 0)
    early_stop_metric: str = choice("bleu", "loss")
    keep_best: int = num(3, 1)
    keep_last: int = num(5, 0)
    average_last: int = num(0, 0)  # at the end, average the N newest step checkpoints; 0: off
    average_best: int = num(0, 0)  # or the N best on validation (kept by keep_best); 0: off
    valid_max_sentences: int = num(0, 0)
    max_steps: int = num(0, 0)
    max_epochs: int = num(0, 0)
    max_time: str = duration("")  # the run's wall-clock budget
    seed: int = num(1, 0, 2**32 - 1)  # seeds every generator (numpy takes no negative seed)
    save_every: int = num(0, 0)  # steps between saves of last + trainer state; 0: off
    save_every_time: str = duration("10m")  # between such saves; "" or 0: off
    reset_data_position: bool = False  # --resume with other batching: start the epoch over
    init_from: str = ""  # MODEL_DIR whose weights start this run (fine-tuning); "": random init
    init_checkpoint: str = "default"  # which of its checkpoints: default, best, last, averaged, or
    # a .safetensors path


@dataclass
class DecodingConfig:
    """Search defaults used by `nmt translate` (CLI options override them)."""

    beam_size: int = num(5, 1, 200)
    length_penalty: float = num(1.0, 0, 10)  # GNMT alpha; ((5 + L) / 6) ** alpha stays finite
    max_len_a: float = num(1.2, 0)
    max_len_b: int = num(10, 0)
    min_len: int = num(0, 0)
    batch_tokens: int = num(4096, 1)
    stop: str = choice("early", "exact")


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
INIT_CHECKPOINTS = ("default", "best", "last", "averaged")  # nmt.modeldir's names


SECTIONS = [f.name for f in dataclasses.fields(Config)]
