"""Resolving a run's configuration, layer by layer, into a checked `Config`.

Layering: dataclass defaults < preset (``--preset NAME``) < CONFIG.yaml < ``--set section.key=v``;
a saved MODEL_DIR/config.yaml (of today's or the older flat format) is read back the same strict way.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from nmt.config.presets import load_preset
from nmt.config.schema import Config
from nmt.config.strict import apply_sections, set_value
from nmt.config.yamlio import load_yaml, read_yaml
from nmt.errors import NmtError


def parse_override(text: str) -> tuple[str, Any]:
    """Split `section.key=value`; the value is parsed as YAML (so 1e-3, true, [0.9, 0.98] work)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise NmtError(f"--set {text!r}: expected section.key=value")
    try:
        value = load_yaml(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.strip(), value


def apply_overrides(cfg: Config, overrides: list[str] | tuple[str, ...]) -> None:
    """Apply `--set` texts in order, except that `model.type` goes first (it picks the keys)."""
    pairs = [parse_override(text) for text in overrides]
    for key, value in sorted(pairs, key=lambda kv: kv[0] != "model.type"):
        set_value(cfg, key, value)


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
        apply_sections(cfg, load_preset(preset), f"preset {preset}")
    if path:
        path = Path(path)
        if not path.exists():
            raise NmtError(f"{path}: file not found")
        apply_sections(cfg, read_yaml(path.read_text(encoding="utf-8"), str(path)), str(path))
    apply_overrides(cfg, overrides)
    return cfg


def config_from_dict(data: dict[str, Any], origin: str = "config") -> Config:
    """Rebuild a Config from a saved dict (MODEL_DIR/config.yaml, of today's or the flat format)."""
    cfg = Config()
    apply_sections(cfg, data, origin)
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
    data = read_yaml(text, str(path))
    if not isinstance(data, dict):
        raise NmtError(f"{path}: invalid config (expected a mapping of sections)")
    return config_from_dict(data, str(path))


def resolve_train_config(
    config_path: str | Path | None,
    preset: str | None,
    overrides: list[str] | tuple[str, ...],
    flags: dict[str, Any],
    base: Config | None = None,
) -> Config:
    """The run's config: `base` (a resumed run's or an initial model's own config, copied) when
    neither CONFIG nor --preset is given, else the layers; then `--set` and the flags.

    `flags` are the `nmt train` shortcuts (max_steps, max_epochs, max_time, seed, init_from;
    None: unset)."""
    if base is not None and not config_path and not preset:
        cfg = copy.deepcopy(base)
        apply_overrides(cfg, overrides)
    else:  # checked once the flags are in: `--set training.cooldown=0.2 --max-steps N` is valid
        cfg = _layered(config_path, preset, overrides)
    apply_flags(cfg, flags)
    cfg.check()
    return cfg


def apply_flags(cfg: Config, flags: dict[str, Any]) -> None:
    """Set the `nmt train` shortcuts that were given (None: unset), named as flags in errors."""
    for key, value in flags.items():
        if value is not None:
            set_value(cfg, f"training.{key}", value, f"--{key.replace('_', '-')}")
