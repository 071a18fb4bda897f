"""Durations in config values: "25m", "1h30m", a bare number of seconds."""

from __future__ import annotations

import re

from nmt.errors import NmtError

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
