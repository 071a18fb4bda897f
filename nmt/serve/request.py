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
from nmt.decode.options import MAX_SAMPLES, DecodeOptions, Sampling

FIELDS = ("text", "beam_size", "nbest", "length_penalty", "with_attention", "sampling")
SAMPLING_FIELDS = ("temperature", "top_k", "top_p", "seed")
SCORE_FIELDS = ("source", "target")
_RANGES = {f.name: f.metadata.get("range") for f in dataclasses.fields(DecodingConfig)}


@dataclass(frozen=True)
class Limits:
    """What one request may hold (`--max-request-lines`, `--max-line-chars`)."""

    max_lines: int = 256
    max_chars: int = 2000

    @property
    def max_body_bytes(self) -> int:
        """A body bound that no request within the limits reaches (\\uXXXX escapes included)."""
        return self.max_lines * (12 * self.max_chars + 8) + 4096  # astral: two escapes


@dataclass(frozen=True)
class TranslateRequest:
    """A checked request: its lines and decoding options (beam_size or sampling, nbest,
    length_penalty, with_attention; the others the model's)."""

    lines: list[str]
    options: DecodeOptions


@dataclass(frozen=True)
class ScoreRequest:
    """A checked /score request: (source, target) pairs."""

    pairs: list[tuple[str, str]]


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


def parse_request(
    body: bytes, limits: Limits, defaults: DecodingConfig, sampling_ok: bool = True
) -> TranslateRequest:
    """Decode and check a /translate body; 400 for broken JSON, 413 over a limit, 422 otherwise
    (`sampling_ok` False: the engine cannot sample, an export's CTranslate2)."""
    data = _object(body, '{"text": "..."}', FIELDS)
    lines = _lines(data, "text", limits)
    sampling = _sampling(data.get("sampling", False))
    nbest = _integer(data, "nbest", 1)
    if sampling is not None:
        if not sampling_ok:
            raise bad(
                422,
                "'sampling' needs a model directory: this server runs an `nmt export` "
                "(CTranslate2 does not draw nmt's keyed samples)",
            )
        if data.get("beam_size") is not None:
            raise bad(422, "'sampling' draws its own tokens: drop 'beam_size'")
        if not 1 <= nbest <= MAX_SAMPLES:
            raise bad(
                422, f"'nbest' must be between 1 and {MAX_SAMPLES} with 'sampling', got {nbest}"
            )
        search: dict[str, Any] = {"sampling": Sampling(*sampling)}
    else:
        beam = _integer(data, "beam_size", defaults.beam_size)
        if not 1 <= nbest <= beam:
            raise bad(422, f"'nbest' must be between 1 and the beam size ({beam}), got {nbest}")
        search = {"beam_size": beam}
    penalty = _number(data, "length_penalty", defaults.length_penalty)
    attention = data.get("with_attention", False)
    if not isinstance(attention, bool):
        raise bad(422, f"'with_attention' must be true or false, got {json_type(attention)}")
    options = DecodeOptions(nbest=nbest, length_penalty=penalty, with_attention=attention, **search)
    return TranslateRequest(lines, options)


def parse_score_request(body: bytes, limits: Limits) -> ScoreRequest:
    """Decode and check a /score body: `source` and `target`, both a string or both a list of
    the same length."""
    data = _object(body, '{"source": "...", "target": "..."}', SCORE_FIELDS)
    source, target = _lines(data, "source", limits), _lines(data, "target", limits)
    if isinstance(data["source"], str) != isinstance(data["target"], str):
        raise bad(422, "'source' and 'target' must both be strings or both be lists")
    if len(source) != len(target):
        raise bad(
            422,
            f"'source' has {len(source)} lines but 'target' has {len(target)} "
            "(one target per source line)",
        )
    return ScoreRequest(list(zip(source, target, strict=True)))


def _object(body: bytes, example: str, fields: tuple[str, ...]) -> dict[str, Any]:
    """The body as a JSON object with only known fields; 400 for broken JSON, 422 otherwise."""
    try:
        data = json.loads(body)
    except UnicodeDecodeError:
        raise bad(400, "the body is not valid UTF-8") from None
    except json.JSONDecodeError as e:
        msg = f"the body is not valid JSON ({e.msg}: line {e.lineno} column {e.colno})"
        raise bad(400, msg) from None
    except (RecursionError, ValueError) as e:  # nested too deeply; an integer too long
        raise bad(400, f"the body is not JSON this server reads ({type(e).__name__})") from None
    if not isinstance(data, dict):
        raise bad(422, f"the body must be a JSON object like {example}, got {json_type(data)}")
    for key in data:
        if key not in fields:
            raise bad(422, f"unknown field {key!r} (expected {', '.join(fields)})")
    return data


def _sampling(value: Any) -> tuple[float, int, float, int] | None:
    """`sampling` (false, true or an object of settings) as (temperature, top_k, top_p, seed),
    or None; the defaults are `nmt translate --sampling`'s."""
    if value is False or value is None:
        return None
    if value is True:
        value = {}
    if not isinstance(value, dict):
        raise bad(
            422,
            "'sampling' must be true, false or an object like "
            f'{{"temperature": 0.8, "top_p": 0.9, "seed": 1}}, got {json_type(value)}',
        )
    for key in value:
        if key not in SAMPLING_FIELDS:
            expected = ", ".join(SAMPLING_FIELDS)
            raise bad(422, f"unknown field 'sampling.{key}' (expected {expected})")
    named = {f"sampling.{k}": v for k, v in value.items()}
    temperature = _number(named, "sampling.temperature", 1.0, bounds="> 0")
    top_k = _integer(named, "sampling.top_k", 0)
    top_p = _number(named, "sampling.top_p", 1.0, bounds="in (0, 1]")
    seed = _integer(named, "sampling.seed", 0)
    checks = [
        (temperature > 0, "'sampling.temperature' must be > 0", temperature),
        (top_k >= 0, "'sampling.top_k' must be >= 0 (0: all tokens)", top_k),
        (0 < top_p <= 1, "'sampling.top_p' must be in (0, 1]", top_p),
        (0 <= seed < 2**63, "'sampling.seed' must be in [0, 2**63)", seed),
    ]
    for ok, message, got in checks:
        if not ok:
            raise bad(422, f"{message}, got {got}")
    return temperature, top_k, top_p, seed


def _lines(data: dict[str, Any], field: str, limits: Limits) -> list[str]:
    """A field (`text`, `source`, `target`) as a list of single-line strings within the limits."""
    if field not in data:
        raise bad(422, f"{field!r} is required: a string or a list of strings")
    text = data[field]
    if isinstance(text, str):
        lines, names = [text], [repr(field)]
    elif isinstance(text, list):
        lines, names = text, [f"{field!r}[{i}]" for i in range(len(text))]
    else:
        raise bad(422, f"{field!r} must be a string or a list of strings, got {json_type(text)}")
    if text in ("", []):
        raise bad(422, f"{field!r} is empty")
    if len(lines) > limits.max_lines:
        raise bad(
            413,
            f"{field!r} has {len(lines)} lines; the limit is {limits.max_lines} "
            "(--max-request-lines)",
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
        try:
            line.encode("utf-8")
        except UnicodeEncodeError:
            raise bad(422, f"{name} is not valid Unicode (an unpaired surrogate escape)") from None
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


def _number(data: dict[str, Any], key: str, default: float, bounds: str = "") -> float:
    """An optional finite number field, in its `decoding` config range (`bounds`: how the
    caller's own range reads, for the message)."""
    value = data.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise bad(422, f"{key!r} must be a number, got {json_type(value)}")
    limits = _RANGES.get(key)
    try:
        number = float(value)
    except OverflowError:  # an integer beyond any float
        raise bad(
            422,
            f"{key!r} must be a finite number {bounds or limits}, got an integer of "
            f"{len(str(value))} digits",
        ) from None
    if not math.isfinite(number) or (limits is not None and number not in limits):
        raise bad(422, f"{key!r} must be a finite number {bounds or limits}, got {number}")
    return number
