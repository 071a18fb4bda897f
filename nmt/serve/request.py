"""The body of `POST /translate`, checked by hand so every mistake gets one line that names the
field (a framework's validation lists every alternative of a union; clients need one sentence)."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any

from fastapi import HTTPException

from nmt.config import DecodingConfig

FIELDS = ("text", "beam_size", "nbest", "length_penalty", "with_attention")
_RANGES = {f.name: f.metadata.get("range") for f in dataclasses.fields(DecodingConfig)}


@dataclass(frozen=True)
class Limits:
    """What one request may hold (`--max-request-lines`, `--max-line-chars`)."""

    max_lines: int = 256
    max_chars: int = 2000

    @property
    def max_body_bytes(self) -> int:
        """A body bound that no request within the limits reaches (\\uXXXX escapes included)."""
        return self.max_lines * (6 * self.max_chars + 8) + 4096


@dataclass(frozen=True)
class TranslateRequest:
    """A checked request: its lines and fully resolved decoding options."""

    lines: list[str]
    options: dict[str, Any]  # beam_size, nbest, length_penalty, with_attention


def bad(status: int, message: str) -> HTTPException:
    """An HTTP error whose body is {"detail": message}."""
    return HTTPException(status_code=status, detail=message)


def json_type(value: Any) -> str:
    """The JSON name of a parsed value's type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    names: dict[type, str] = {str: "string", list: "array", dict: "object"}
    return names.get(type(value), type(value).__name__)


def parse_request(body: bytes, limits: Limits, defaults: DecodingConfig) -> TranslateRequest:
    """Decode and check a /translate body; 400 for broken JSON, 413 over a limit, 422 otherwise."""
    try:
        data = json.loads(body)
    except UnicodeDecodeError:
        raise bad(400, "the body is not valid UTF-8") from None
    except json.JSONDecodeError as e:
        msg = f"the body is not valid JSON ({e.msg}: line {e.lineno} column {e.colno})"
        raise bad(400, msg) from None
    if not isinstance(data, dict):
        raise bad(
            422, f'the body must be a JSON object like {{"text": "..."}}, got {json_type(data)}'
        )
    for key in data:
        if key not in FIELDS:
            raise bad(422, f"unknown field {key!r} (expected {', '.join(FIELDS)})")
    lines = _lines(data, limits)
    beam = _integer(data, "beam_size", defaults.beam_size)
    nbest = _integer(data, "nbest", 1)
    if not 1 <= nbest <= beam:
        raise bad(422, f"'nbest' must be between 1 and the beam size ({beam}), got {nbest}")
    penalty = _number(data, "length_penalty", defaults.length_penalty)
    attention = data.get("with_attention", False)
    if not isinstance(attention, bool):
        raise bad(422, f"'with_attention' must be true or false, got {json_type(attention)}")
    options = {"beam_size": beam, "nbest": nbest, "length_penalty": penalty}
    return TranslateRequest(lines, {**options, "with_attention": attention})


def _lines(data: dict[str, Any], limits: Limits) -> list[str]:
    """`text` as a list of single-line strings within the limits."""
    if "text" not in data:
        raise bad(422, "'text' is required: a string or a list of strings")
    text = data["text"]
    if isinstance(text, str):
        lines, names = [text], ["'text'"]
    elif isinstance(text, list):
        lines, names = text, [f"'text'[{i}]" for i in range(len(text))]
    else:
        raise bad(422, f"'text' must be a string or a list of strings, got {json_type(text)}")
    if text in ("", []):
        raise bad(422, "'text' is empty")
    if len(lines) > limits.max_lines:
        raise bad(
            413,
            f"'text' has {len(lines)} lines; the limit is {limits.max_lines} (--max-request-lines)",
        )
    for name, line in zip(names, lines, strict=True):
        if not isinstance(line, str):
            raise bad(422, f"{name} must be a string, got {json_type(line)}")
        if len(line) > limits.max_chars:
            raise bad(
                413,
                f"{name} has {len(line)} characters; the limit is {limits.max_chars} "
                "(--max-line-chars)",
            )
        if "\n" in line or "\r" in line:
            raise bad(422, f"{name} contains a line break; send one sentence per list item")
    return lines


def _integer(data: dict[str, Any], key: str, default: int) -> int:
    """An optional integer field, in its `decoding` config range when it has one."""
    value = data.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad(422, f"{key!r} must be an integer, got {json_type(value)}")
    bounds = _RANGES.get(key)
    if bounds is not None and value not in bounds:
        raise bad(422, f"{key!r} must be {bounds}, got {value}")
    return value


def _number(data: dict[str, Any], key: str, default: float) -> float:
    """An optional finite number field, in its `decoding` config range."""
    value = data.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise bad(422, f"{key!r} must be a number, got {json_type(value)}")
    bounds = _RANGES[key]
    if not math.isfinite(value) or (bounds is not None and value not in bounds):
        raise bad(422, f"{key!r} must be a finite number {bounds}, got {value}")
    return float(value)
