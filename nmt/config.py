"""Typed configuration: dataclasses per section, loaded from presets / YAML, strict `--set` overrides.

Layering: dataclass defaults < preset (``--preset NAME``) < CONFIG.yaml < ``--set section.key=value``.
An unknown key is an error naming the closest valid key; a bad value names the key and what it accepts.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import typing
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from nmt.errors import NmtError


def choice(default: str, *choices: str) -> Any:
    """A string field restricted to `choices` (checked on load)."""
    return field(default=default, metadata={"choices": (default, *choices)})


@dataclass
class ModelConfig:
    """Architecture and sizes; one flat section shared by every model type."""

    type: str = choice("transformer", "seq2seq")
    # Transformer
    d_model: int = 256
    heads: int = 4
    ff_dim: int = 1024
    encoder_layers: int = 3
    decoder_layers: int = 3
    norm: str = choice("pre", "post")
    positions: str = choice("sinusoidal", "learned")
    activation: str = choice("relu", "gelu")
    max_positions: int = 512
    tie_embeddings: bool = True
    # Seq2Seq (RNN)
    rnn_type: str = choice("gru", "lstm")
    embed_dim: int = 256
    hidden_size: int = 256
    attention: str = choice("bahdanau", "dot", "general")
    # Both
    dropout: float = 0.1
    attention_dropout: float = 0.0


@dataclass
class TrainingConfig:
    """Optimisation, batching, validation, stopping and checkpointing."""

    max_tokens: int = 4096
    accumulate: int = 1
    lr: float = 7e-4
    betas: list[float] = field(default_factory=lambda: [0.9, 0.98])
    weight_decay: float = 0.0
    schedule: str = choice("inverse_sqrt", "cosine", "linear", "constant")
    warmup: int = 4000
    min_lr: float = 0.0
    label_smoothing: float = 0.1
    clip_norm: float = 1.0
    precision: str = choice("fp32", "bf16", "fp16")
    compile: bool = False
    valid_every: int = 1000
    log_every: int = 100
    patience: int = 10
    early_stop_metric: str = choice("bleu", "loss")
    keep_best: int = 3
    keep_last: int = 5
    valid_max_sentences: int = 0
    max_steps: int = 0
    max_epochs: int = 0
    max_time: str = ""
    seed: int = 1


@dataclass
class DecodingConfig:
    """Search defaults used by `nmt translate` (CLI options override them)."""

    beam_size: int = 5
    length_penalty: float = 1.0
    max_len_a: float = 1.2
    max_len_b: int = 10
    min_len: int = 0
    batch_tokens: int = 4096
    stop: str = choice("exact", "early")


@dataclass
class Config:
    """The whole resolved configuration, written to MODEL_DIR/config.yaml."""

    model: ModelConfig = field(default_factory=ModelConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    decoding: DecodingConfig = field(default_factory=DecodingConfig)

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict, ready for YAML."""
        return dataclasses.asdict(self)

    def save(self, path: str | Path) -> None:
        """Write the resolved config as YAML, atomically."""
        from nmt.textio import atomic_write

        with atomic_write(path) as f:
            yaml.safe_dump(self.to_dict(), f, sort_keys=False)


SECTIONS = {f.name: f.type for f in dataclasses.fields(Config)}


def _section_classes() -> dict[str, type]:
    hints = typing.get_type_hints(Config)
    return {name: hints[name] for name in SECTIONS}


def all_keys() -> list[str]:
    """Every valid `section.key`, for suggestions and help."""
    return [
        f"{s}.{f.name}" for s, cls in _section_classes().items() for f in dataclasses.fields(cls)
    ]


def _suggest(key: str, candidates: list[str]) -> str:
    close = difflib.get_close_matches(key, candidates, n=1, cutoff=0.5)
    return f"; did you mean {close[0]}?" if close else ""


_FLOAT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")


def _coerce(key: str, value: Any, hint: Any, meta: Any) -> Any:
    """Check `value` against the field's type (and choices); return it converted where lossless."""
    origin = typing.get_origin(hint)
    if origin is list:
        (item,) = typing.get_args(hint)
        if not isinstance(value, list):
            raise NmtError(f"{key}: expected a list of {item.__name__}, got {value!r}")
        return [_coerce(key, v, item, {}) for v in value]
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
        value = "" if value is None else value
        if not isinstance(value, str):
            value = str(value)
        choices = meta.get("choices")
        if choices and value not in choices:
            raise NmtError(f"{key}: expected one of {', '.join(choices)}, got {value!r}")
        return value
    raise NmtError(f"{key}: unsupported type {hint}")


def _apply(cfg: Config, data: dict[str, Any], origin: str) -> None:
    """Apply a nested {section: {key: value}} mapping to `cfg`, strictly."""
    if not isinstance(data, dict):
        raise NmtError(f"{origin}: expected a mapping of sections (model, training, decoding)")
    classes = _section_classes()
    for section, values in data.items():
        if section not in classes:
            raise NmtError(
                f"{origin}: unknown section {section!r}{_suggest(section, list(classes))}"
            )
        if values is None:
            continue
        if not isinstance(values, dict):
            raise NmtError(f"{origin}: section {section!r} must be a mapping")
        for key, value in values.items():
            set_value(cfg, f"{section}.{key}", value, origin)


def set_value(cfg: Config, dotted: str, value: Any, origin: str = "--set") -> None:
    """Set `section.key` to `value` after checking the key exists and the value fits its type."""
    section, _, key = dotted.partition(".")
    classes = _section_classes()
    if section not in classes or not key:
        raise NmtError(f"{origin}: unknown key {dotted!r}{_suggest(dotted, all_keys())}")
    obj = getattr(cfg, section)
    fields = {f.name: f for f in dataclasses.fields(obj)}
    if key not in fields:
        raise NmtError(f"{origin}: unknown key {dotted!r}{_suggest(dotted, all_keys())}")
    hint = typing.get_type_hints(type(obj))[key]
    setattr(obj, key, _coerce(dotted, value, hint, fields[key].metadata))


def parse_override(text: str) -> tuple[str, Any]:
    """Split `section.key=value`; the value is parsed as YAML (so 1e-3, true, [0.9, 0.98] work)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise NmtError(f"--set {text!r}: expected section.key=value")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.strip(), value


def preset_names() -> list[str]:
    """Names of the presets shipped inside the package."""
    files = resources.files("nmt") / "presets"
    return sorted(p.name[: -len(".yaml")] for p in files.iterdir() if p.name.endswith(".yaml"))


def _read_yaml(text: str, origin: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text)
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
    cfg = Config()
    if preset:
        _apply(cfg, load_preset(preset), f"preset {preset}")
    if path:
        path = Path(path)
        if not path.exists():
            raise NmtError(f"{path}: file not found")
        _apply(cfg, _read_yaml(path.read_text(encoding="utf-8"), str(path)), str(path))
    for text in overrides:
        key, value = parse_override(text)
        set_value(cfg, key, value)
    return cfg


def config_from_dict(data: dict[str, Any], origin: str = "config") -> Config:
    """Rebuild a Config from a saved dict (e.g. MODEL_DIR/config.yaml)."""
    cfg = Config()
    _apply(cfg, data, origin)
    return cfg


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")


def parse_duration(text: str) -> float | None:
    """'25m' -> 1500.0 seconds; '' -> None; bare numbers are seconds."""
    if not text:
        return None
    parts = re.findall(r"\d+(?:\.\d+)?\s*[smhd]?", text)
    if not parts or "".join(p.replace(" ", "") for p in parts) != text.replace(" ", ""):
        raise NmtError(f"bad duration {text!r}: expected e.g. 90s, 25m, 1h30m")
    unit = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
    total = 0.0
    for p in parts:
        m = _DURATION.match(p)
        total += float(m.group(1)) * unit[m.group(2)]
    return total
