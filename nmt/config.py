"""Typed configuration: a dataclass per section, from presets / YAML, strict `--set` overrides.

Layering: dataclass defaults < preset (``--preset NAME``) < CONFIG.yaml < ``--set section.key=v``.
The model section is typed per architecture (`MODEL_CONFIGS`, picked by `model.type`). An unknown
key is an error naming the closest valid key; a bad value names the key and what it accepts (its
type, choices or range, all declared in the field's metadata).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import typing
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

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
    stop: str = choice("exact", "early")


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


def _section_classes() -> dict[str, type]:
    hints = typing.get_type_hints(Config)
    return {name: hints[name] for name in SECTIONS}


def _fields(obj_or_cls: Any) -> dict[str, dataclasses.Field[Any]]:
    return {f.name: f for f in dataclasses.fields(obj_or_cls)}


def all_keys(model_type: str | None = None) -> list[str]:
    """Every valid `section.key` (model keys of `model_type` only, if given), for suggestions."""
    classes = [MODEL_CONFIGS[model_type]] if model_type else list(MODEL_CONFIGS.values())
    model = dict.fromkeys(k for cls in classes for k in _fields(cls))
    sections = _section_classes().items()
    other = [f"{s}.{k}" for s, cls in sections if s != "model" for k in _fields(cls)]
    return [f"model.{k}" for k in model] + other


def _suggest(key: str, candidates: list[str]) -> str:
    close = difflib.get_close_matches(key, candidates, n=1, cutoff=0.5)
    return f"; did you mean {close[0]}?" if close else ""


_FLOAT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")


def _check_meta(key: str, value: Any, meta: Any) -> Any:
    """Check `value` against the field's declared choices or range; return it unchanged."""
    choices = meta.get("choices")
    if choices and value not in choices:
        raise NmtError(f"{key}: expected one of {', '.join(choices)}, got {value!r}")
    bounds = meta.get("range")
    if bounds is not None and value not in bounds:
        raise NmtError(f"{key}: must be {bounds.requirement(value)}, got {value!r}")
    return value


def _coerce(key: str, value: Any, hint: Any, meta: Any) -> Any:
    """Check `value` against the field's type and metadata; return it converted where lossless."""
    if typing.get_origin(hint) is list:
        (item,) = typing.get_args(hint)
        if not isinstance(value, list):
            raise NmtError(f"{key}: expected a list of {item.__name__}, got {value!r}")
        length = meta.get("length")
        if length is not None and len(value) != length:
            raise NmtError(f"{key}: expected {length} values, got {len(value)}: {value!r}")
        return [_coerce(key, v, item, meta) for v in value]
    if meta.get("choices"):  # before the type, so a number names the choices too
        return _check_meta(key, value, meta)
    if meta.get("duration"):
        return _coerce_duration(key, value)
    return _check_meta(key, _coerce_scalar(key, value, hint), meta)


def _coerce_duration(key: str, value: Any) -> str:
    """A duration field's text, parsed now so a bad one names its origin; a number is seconds."""
    text = str(value) if _is_number(value) else _coerce_scalar(key, value, str)
    try:
        parse_duration(text)
    except NmtError as e:
        raise NmtError(f"{key}: {e}") from None
    return text


def _is_number(value: Any) -> bool:
    """An int or float, not a bool (YAML's true is an int to Python)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _coerce_scalar(key: str, value: Any, hint: Any) -> Any:
    """Type check of one bool / int / float / str value (None: "" for text)."""
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise NmtError(f"{key}: expected true or false, got {value!r}")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise NmtError(f"{key}: expected an integer, got {value!r}")
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str) and _FLOAT.match(value.strip()):
            return float(value)  # YAML 1.1 reads 1e-3 (no dot) as a string
        raise NmtError(f"{key}: expected a number, got {value!r}")
    if hint is str:
        if value is None or isinstance(value, str):
            return value or ""
        kind = type(value).__name__  # YAML typed it: 010 is the int 8, 2024-05-01 a date
        raise NmtError(f"{key}: expected text, got {kind} {value} (quote the value)")
    raise NmtError(f"{key}: unsupported type {hint}")


def _foreign_default(model: ModelConfig, key: str, value: Any) -> bool:
    """True for a key of another architecture at that architecture's default (old flat configs)."""
    for cls in MODEL_CONFIGS.values():
        f = _fields(cls).get(key)
        if f is not None and f.default is not dataclasses.MISSING and f.default == value:
            return key not in _fields(model)
    return False


def _apply(cfg: Config, data: dict[str, Any], origin: str) -> None:
    """Apply a nested {section: {key: value}} mapping to `cfg`, strictly (`model.type` first).

    Saved configs of the older flat format (which always name `model.type`) carry the other
    architecture's keys at their defaults: those are skipped; any other value of a foreign key
    is an error. A model section without `type` gets no such pass (seq2seq keys at their
    defaults without `type: seq2seq` silently built a Transformer)."""
    if not isinstance(data, dict):
        raise NmtError(f"{origin}: expected a mapping of sections (model, training, decoding)")
    for section, values in data.items():
        if section not in SECTIONS:
            raise NmtError(f"{origin}: unknown section {section!r}{_suggest(section, SECTIONS)}")
        if values is None:
            continue
        if not isinstance(values, dict):
            raise NmtError(f"{origin}: section {section!r} must be a mapping")
        typed = section == "model" and "type" in values
        if typed:
            values = {"type": values["type"], **values}  # the type picks the valid keys
        for key, value in values.items():
            if typed and _foreign_default(cfg.model, key, value):
                continue
            set_value(cfg, f"{section}.{key}", value, origin)


def _set_model_type(cfg: Config, value: Any) -> None:
    """Switch the model section's class, carrying the keys every architecture shares."""
    name = _coerce("model.type", value, str, {"choices": tuple(MODEL_CONFIGS)})
    if name != cfg.model.type:
        shared = {k: getattr(cfg.model, k) for k, f in _fields(ModelConfig).items() if f.init}
        cfg.model = MODEL_CONFIGS[name](**shared)


def _unknown_key(cfg: Config, dotted: str, origin: str) -> NmtError:
    """The error for a key the section lacks: foreign architecture, or a typo with a suggestion."""
    section, _, key = dotted.partition(".")
    if section == "model" and key in {k for cls in MODEL_CONFIGS.values() for k in _fields(cls)}:
        valid = ", ".join(sorted(_fields(cfg.model)))
        return NmtError(f"{origin}: {dotted}: not a {cfg.model.type} key (valid: {valid})")
    keys = all_keys(cfg.model.type)
    return NmtError(f"{origin}: unknown key {dotted!r}{_suggest(dotted, keys)}")


def set_value(cfg: Config, dotted: str, value: Any, origin: str = "--set") -> None:
    """Set `section.key` to `value` after checking the key exists and the value fits its field."""
    section, _, key = dotted.partition(".")
    if section not in SECTIONS or not key:
        raise NmtError(f"{origin}: unknown key {dotted!r}{_suggest(dotted, all_keys())}")
    if dotted != "model.type" and key not in _fields(getattr(cfg, section)):
        raise _unknown_key(cfg, dotted, origin)
    try:
        _set_checked(cfg, dotted, value)
    except NmtError as e:  # a bad value names where it came from, as an unknown key does
        raise NmtError(f"{origin}: {e}") from None


def _set_checked(cfg: Config, dotted: str, value: Any) -> None:
    """Set an existing `section.key` once `value` fits its field (model.type: switch class)."""
    if dotted == "model.type":
        _set_model_type(cfg, value)
        return
    section, _, key = dotted.partition(".")
    obj = getattr(cfg, section)
    hint = typing.get_type_hints(type(obj))[key]
    setattr(obj, key, _coerce(dotted, value, hint, _fields(obj)[key].metadata))


def model_config(type: str = "transformer", **values: Any) -> ModelConfig:
    """A checked model section of architecture `type` (for code and tests; YAML goes via load)."""
    if type not in MODEL_CONFIGS:
        choices = ", ".join(sorted(MODEL_CONFIGS))
        raise NmtError(f"unknown model.type {type!r} (choices: {choices})")
    cfg = Config(model=MODEL_CONFIGS[type]())
    for key, value in values.items():
        set_value(cfg, f"model.{key}", value, "model_config")
    cfg.model.check()
    return cfg.model


class _YamlLoader(yaml.SafeLoader):
    """PyYAML's safe loader without YAML 1.1's base-60 numbers (YAML 1.2 has none either), so
    `max_time: 1:30` stays the text it looks like, refused as a duration, not 90 seconds."""


_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
# SafeLoader's resolvers, its number patterns refusing any text with a ':' (the base-60 forms)
_YamlLoader.yaml_implicit_resolvers = {
    first: [
        (tag, re.compile("(?!.*:)" + rx.pattern, rx.flags) if tag in _NUMBER_TAGS else rx)
        for tag, rx in resolvers
    ]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _load_yaml(text: str) -> Any:
    """YAML as configs read it: safe, and `1:30` is text (_YamlLoader)."""
    return yaml.load(text, Loader=_YamlLoader)


def parse_override(text: str) -> tuple[str, Any]:
    """Split `section.key=value`; the value is parsed as YAML (so 1e-3, true, [0.9, 0.98] work)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise NmtError(f"--set {text!r}: expected section.key=value")
    try:
        value = _load_yaml(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.strip(), value


def apply_overrides(cfg: Config, overrides: list[str] | tuple[str, ...]) -> None:
    """Apply `--set` texts in order, except that `model.type` goes first (it picks the keys)."""
    pairs = [parse_override(text) for text in overrides]
    for key, value in sorted(pairs, key=lambda kv: kv[0] != "model.type"):
        set_value(cfg, key, value)


def preset_names() -> list[str]:
    """Names of the presets shipped inside the package."""
    files = resources.files("nmt") / "presets"
    return sorted(p.name[: -len(".yaml")] for p in files.iterdir() if p.name.endswith(".yaml"))


def _read_yaml(text: str, origin: str) -> dict[str, Any]:
    try:
        data = _load_yaml(text)
    except yaml.YAMLError as e:
        raise NmtError(f"{origin}: invalid YAML ({str(e).splitlines()[0]})") from None
    return data or {}


def load_preset(name: str) -> dict[str, Any]:
    """The raw mapping of a shipped preset."""
    names = preset_names()
    if name not in names:
        raise NmtError(
            f"unknown preset {name!r}{_suggest(name, names)} (available: {', '.join(names)})"
        )
    text = (resources.files("nmt") / "presets" / f"{name}.yaml").read_text(encoding="utf-8")
    return _read_yaml(text, f"preset {name}")


def load_config(
    path: str | Path | None = None,
    preset: str | None = None,
    overrides: list[str] | tuple[str, ...] = (),
) -> Config:
    """Resolve defaults < preset < YAML file < overrides into a validated Config."""
    cfg = _layered(path, preset, overrides)
    cfg.check()
    return cfg


def _layered(
    path: str | Path | None, preset: str | None, overrides: list[str] | tuple[str, ...]
) -> Config:
    """defaults < preset < YAML file < overrides, not yet checked as a whole."""
    cfg = Config()
    if preset:
        _apply(cfg, load_preset(preset), f"preset {preset}")
    if path:
        path = Path(path)
        if not path.exists():
            raise NmtError(f"{path}: file not found")
        _apply(cfg, _read_yaml(path.read_text(encoding="utf-8"), str(path)), str(path))
    apply_overrides(cfg, overrides)
    return cfg


def config_from_dict(data: dict[str, Any], origin: str = "config") -> Config:
    """Rebuild a Config from a saved dict (MODEL_DIR/config.yaml, of today's or the flat format)."""
    cfg = Config()
    _apply(cfg, data, origin)
    cfg.check()
    return cfg


def read_saved_config(path: str | Path) -> Config:
    """A saved config.yaml (MODEL_DIR's own) as a checked Config; broken YAML, bytes that are
    not UTF-8 or a non-mapping are one-line errors naming the file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise NmtError(f"{path}: invalid YAML ({str(e).splitlines()[0]})") from None
    data = _read_yaml(text, str(path))
    if not isinstance(data, dict):
        raise NmtError(f"{path}: invalid config (expected a mapping of sections)")
    return config_from_dict(data, str(path))


def resolve_train_config(
    config_path: str | Path | None,
    preset: str | None,
    overrides: list[str] | tuple[str, ...],
    model_dir: str | Path,
    resume: bool,
    flags: dict[str, Any],
) -> Config:
    """The run's config; `--resume` without CONFIG/--preset starts from MODEL_DIR's own, and
    `--init-from` without them from the initial model's (its architecture is what the weights fit).

    `flags` are the `nmt train` shortcuts (max_steps, max_epochs, max_time, seed, init_from;
    None: unset)."""
    saved = Path(model_dir) / "config.yaml"
    init = flags.get("init_from")
    if resume and not config_path and not preset and saved.exists():
        cfg = read_saved_config(saved)
        apply_overrides(cfg, overrides)
    elif init and not config_path and not preset:  # fine-tuning: the initial model's own config
        cfg = _init_model_config(Path(init))
        apply_overrides(cfg, overrides)
    else:  # checked once the flags are in: `--set training.cooldown=0.2 --max-steps N` is valid
        cfg = _layered(config_path, preset, overrides)
    for key, value in flags.items():
        if value is not None:
            set_value(cfg, f"training.{key}", value, f"--{key.replace('_', '-')}")
    cfg.check()
    return cfg


def _init_model_config(init_dir: Path) -> Config:
    """MODEL_DIR's config.yaml, minus where it was itself initialised from, as a run's base."""
    saved = init_dir / "config.yaml"
    if not init_dir.is_dir():
        raise NmtError(f"{init_dir}: model directory not found")
    if not saved.is_file():
        raise NmtError(f"{saved}: file not found (--init-from takes a MODEL_DIR)")
    cfg = read_saved_config(saved)
    cfg.training.init_from, cfg.training.init_checkpoint = "", "default"
    return cfg


_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd]?)")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float | None:
    """'25m' -> 1500.0 seconds; '' -> None; bare numbers are seconds."""
    if not text:
        return None
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != re.sub(r"\s", "", text):
        raise NmtError(f"bad duration {text!r}: expected e.g. 90s, 25m, 1h30m")
    return sum(float(n) * _UNITS[u] for n, u in parts)
