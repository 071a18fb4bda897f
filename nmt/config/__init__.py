"""Typed configuration: a dataclass per section, from presets / YAML, strict `--set` overrides.

`schema` declares the sections and what each key accepts, `strict` sets keys with their checks,
`presets` and `load` resolve the layers (defaults < preset < CONFIG.yaml < --set) into a checked
`Config`, `durations` parses the time budgets. Torch-free, so the CLI reads configs before torch.
"""

from nmt.config.durations import parse_duration
from nmt.config.load import (
    apply_flags,
    apply_overrides,
    config_from_dict,
    load_config,
    parse_override,
    read_saved_config,
    resolve_train_config,
)
from nmt.config.presets import load_preset, preset_names
from nmt.config.schema import (
    COOLDOWN_SCHEDULES,
    DURATIONS,
    INIT_CHECKPOINTS,
    MODEL_CONFIGS,
    SECTIONS,
    UNIT,
    Config,
    DecodingConfig,
    ModelConfig,
    Range,
    Seq2SeqConfig,
    TrainingConfig,
    TransformerConfig,
    choice,
    duration,
    num,
    prob,
)
from nmt.config.strict import all_keys, model_config, set_value

__all__ = [
    "COOLDOWN_SCHEDULES",
    "DURATIONS",
    "INIT_CHECKPOINTS",
    "MODEL_CONFIGS",
    "SECTIONS",
    "UNIT",
    "Config",
    "DecodingConfig",
    "ModelConfig",
    "Range",
    "Seq2SeqConfig",
    "TrainingConfig",
    "TransformerConfig",
    "all_keys",
    "apply_flags",
    "apply_overrides",
    "choice",
    "config_from_dict",
    "duration",
    "load_config",
    "load_preset",
    "model_config",
    "num",
    "parse_duration",
    "parse_override",
    "preset_names",
    "prob",
    "read_saved_config",
    "resolve_train_config",
    "set_value",
]
