"""The presets shipped inside the package (nmt/presets/NAME.yaml)."""

from __future__ import annotations

from importlib import resources
from typing import Any

from nmt.config.strict import suggest
from nmt.config.yamlio import read_yaml
from nmt.errors import NmtError


def preset_names() -> list[str]:
    """Names of the presets shipped inside the package."""
    files = resources.files("nmt") / "presets"
    return sorted(p.name[: -len(".yaml")] for p in files.iterdir() if p.name.endswith(".yaml"))


def load_preset(name: str) -> dict[str, Any]:
    """The raw mapping of a shipped preset."""
    names = preset_names()
    if name not in names:
        raise NmtError(
            f"unknown preset {name!r}{suggest(name, names)} (available: {', '.join(names)})"
        )
    text = (resources.files("nmt") / "presets" / f"{name}.yaml").read_text(encoding="utf-8")
    return read_yaml(text, f"preset {name}")
