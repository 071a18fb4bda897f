"""The configuration reference (docs/config.md), made from the schema: every key of every section,
its built-in default, what it accepts and what it means. The built-in defaults are what a key
takes when neither the preset, the config file nor `--set` names it; a preset sets most keys.

    python -m nmt.config.reference > docs/config.md
"""

from __future__ import annotations

import dataclasses
from typing import Any

from nmt.config.schema import (
    MODEL_CONFIGS,
    DecodingConfig,
    ModelConfig,
    TrainingConfig,
)

HEADER = """# Configuration reference

Every key of a config file (`nmt train CONFIG.yaml`, `--set section.key=value`), with its built-in
default, what it accepts and what it means. Layers apply in the order built-in default < preset
(`--preset`, [nmt/presets/](../nmt/presets/)) < CONFIG.yaml < `--set`; a preset sets most keys, so
its values, not the built-in defaults, are what a run gets unless it says otherwise. The resolved
configuration of a run is `MODEL_DIR/config.yaml`. An unknown key is an error naming the closest
valid one; a value outside its range is an error naming the range.

This page is generated from `nmt/config/schema.py` (`python -m nmt.config.reference >
docs/config.md`); a test fails when it is stale.
"""


def accepts(f: dataclasses.Field) -> str:
    """What a field takes: its choices, its range, a duration, or its type."""
    meta = f.metadata
    if "choices" in meta:
        return ", ".join(f"`{c}`" for c in meta["choices"])
    if "length" in meta:
        return f"{meta['length']} numbers, each {meta['range']}"
    if "range" in meta:
        return f"{'integer' if f.type == 'int' else 'number'} {meta['range']}"
    if meta.get("duration"):
        return "a duration (`90s`, `25m`, `1h30m`; a number is seconds)"
    return {"bool": "`true`, `false`", "str": "text"}.get(str(f.type), str(f.type))


def default(f: dataclasses.Field) -> str:
    """A field's built-in default as it would be written in YAML."""
    factory: Any = f.default_factory
    value = factory() if f.default is dataclasses.MISSING else f.default
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if value == "":
        return '`""`'
    return f"`{value}`"


def rows(cls: type, skip: frozenset[str] | set[str] = frozenset()) -> list[str]:
    """One Markdown table row per field of a config dataclass."""
    out = ["| key | default | accepts | meaning |", "|---|---|---|---|"]
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        meaning = f.metadata["doc"].replace("|", "\\|")
        out.append(f"| `{f.name}` | {default(f)} | {accepts(f)} | {meaning} |")
    return out


def reference_markdown() -> str:
    """docs/config.md."""
    common = {f.name for f in dataclasses.fields(ModelConfig)}
    parts = [
        HEADER,
        "## model",
        "",
        "Keys of every architecture (`model.type` picks one: "
        + ", ".join(f"`{t}`" for t in MODEL_CONFIGS)
        + "):",
        "",
    ]
    kinds = ", ".join(f"`{t}`" for t in MODEL_CONFIGS)
    parts += rows(ModelConfig, {"type"})[:2]
    parts.append(
        f"| `type` | `transformer` | {kinds} | {ModelConfig.__dataclass_fields__['type'].metadata['doc']} |"
    )
    parts += rows(ModelConfig, {"type"})[2:]
    for name, cls in MODEL_CONFIGS.items():
        parts += ["", f"`{name}` only:", ""] + rows(cls, common)
    parts += [
        "",
        "## training",
        "",
        "Optimisation, batching, validation, stopping and checkpoints:",
        "",
    ]
    parts += rows(TrainingConfig)
    parts += [
        "",
        "## decoding",
        "",
        "The defaults of `nmt translate` (its options override them):",
        "",
    ]
    parts += rows(DecodingConfig)
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    print(reference_markdown(), end="")
