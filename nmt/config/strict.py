"""Setting config keys strictly: an unknown key is an error naming the closest valid key; a bad
value names the key and what it accepts (its type, choices or range, from the field's metadata)."""

from __future__ import annotations

import dataclasses
import difflib
import re
import typing
from typing import Any

from nmt.config.durations import parse_duration
from nmt.config.schema import MODEL_CONFIGS, SECTIONS, Config, ModelConfig
from nmt.errors import NmtError


def _section_classes() -> dict[str, type]:
    """Each section's declared class (the model section's base: any architecture fits it)."""
    hints = typing.get_type_hints(Config)
    return {name: hints[name] for name in SECTIONS}


def _fields(obj_or_cls: Any) -> dict[str, dataclasses.Field[Any]]:
    """A dataclass's fields by name, so a key's metadata is one lookup away."""
    return {f.name: f for f in dataclasses.fields(obj_or_cls)}


def all_keys(model_type: str | None = None) -> list[str]:
    """Every valid `section.key` (model keys of `model_type` only, if given), for suggestions."""
    classes = [MODEL_CONFIGS[model_type]] if model_type else list(MODEL_CONFIGS.values())
    model = dict.fromkeys(k for cls in classes for k in _fields(cls))
    sections = _section_classes().items()
    other = [f"{s}.{k}" for s, cls in sections if s != "model" for k in _fields(cls)]
    return [f"model.{k}" for k in model] + other


def suggest(key: str, candidates: list[str]) -> str:
    """The `; did you mean X?` tail naming the closest candidate, so a typo shows its fix."""
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


def apply_sections(cfg: Config, data: dict[str, Any], origin: str) -> None:
    """Apply a nested {section: {key: value}} mapping to `cfg`, strictly (`model.type` first).

    Saved configs of the older flat format (which always name `model.type`) carry the other
    architecture's keys at their defaults: those are skipped; any other value of a foreign key
    is an error. A model section without `type` gets no such pass (seq2seq keys at their
    defaults without `type: seq2seq` silently built a Transformer)."""
    if not isinstance(data, dict):
        raise NmtError(f"{origin}: expected a mapping of sections (model, training, decoding)")
    for section, values in data.items():
        if section not in SECTIONS:
            raise NmtError(f"{origin}: unknown section {section!r}{suggest(section, SECTIONS)}")
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
    return NmtError(f"{origin}: unknown key {dotted!r}{suggest(dotted, keys)}")


def set_value(cfg: Config, dotted: str, value: Any, origin: str = "--set") -> None:
    """Set `section.key` to `value` after checking the key exists and the value fits its field."""
    section, _, key = dotted.partition(".")
    if section not in SECTIONS or not key:
        raise NmtError(f"{origin}: unknown key {dotted!r}{suggest(dotted, all_keys())}")
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
