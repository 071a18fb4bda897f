"""What the fields of `nmt serve`'s request bodies may hold, and how a mistake in one is told:
`Refused` carries one line naming the field (pydantic's own errors list each alternative of a
union; clients need one sentence), the validators below raise it, and `Context` holds what a
body is checked against (the server's limits, the model's decoding defaults and abilities)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import HTTPException
from pydantic import BeforeValidator, ValidationInfo
from pydantic_core import PydanticUseDefault

from nmt.config import DecodingConfig, Range
from nmt.decode.options import CONFIG_FIELDS

SAMPLING_EXAMPLE = '{"temperature": 0.8, "top_p": 0.9, "seed": 1}'
Loc = tuple[str | int, ...]  # where pydantic found a value: field names and list indices


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
class Context:
    """What a body is checked against: the server's limits, the model's decoding defaults, and
    whether its engine samples (an export's CTranslate2 does not draw nmt's keyed samples)."""

    limits: Limits
    defaults: DecodingConfig
    sampling_ok: bool = True
    constraints_ok: bool = True  # the engine searches with constraints (not an export)


class Refused(ValueError):
    """A field's one-line error: `template` names the field as {name}, spelled from where
    pydantic found it and `at` (deeper: a list item, an unknown key); `values` fill the rest."""

    def __init__(self, template: str, status: int = 422, at: Loc = (), **values: Any) -> None:
        super().__init__(template)
        self.template, self.status, self.at, self.values = template, status, at, values

    def message(self, loc: Loc) -> str:
        """The line a client reads."""
        return self.template.format(name=spell(loc + self.at), **self.values)


def spell(loc: Loc) -> str:
    """A field as messages name it: 'text', 'sampling.temperature', 'text'[1]."""
    keys = ".".join(str(part) for part in loc if isinstance(part, str))
    return repr(keys) + "".join(f"[{part}]" for part in loc if isinstance(part, int))


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


# ---- field validators -------------------------------------------------------------------------


def body_context(info: ValidationInfo) -> Context:
    """The `Context` a body is validated with (`parse` gives it)."""
    if not isinstance(info.context, Context):
        raise TypeError("request bodies are validated with context=Context(...)")
    return info.context


def line_list(value: Any, info: ValidationInfo) -> Any:
    """`text`, `source`, `target`: a string or a non-empty list of strings, within the limits."""
    if not isinstance(value, str | list):
        got = json_type(value)
        raise Refused("{name} must be a string or a list of strings, got {got}", got=got)
    if value in ("", []):
        raise Refused("{name} is empty")
    limits = body_context(info).limits
    if isinstance(value, str):
        check_line(value, (), limits)
        return value
    if len(value) > limits.max_lines:
        template = "{name} has {n} lines; the limit is {limit} (--max-request-lines)"
        raise Refused(template, 413, n=len(value), limit=limits.max_lines)
    for i, line in enumerate(value):
        check_line(line, (i,), limits)
    return value


def check_line(line: Any, at: Loc, limits: Limits) -> None:
    """One line: a string within --max-line-chars, without line breaks, encodable as UTF-8."""
    if not isinstance(line, str):
        raise Refused("{name} must be a string, got {got}", at=at, got=json_type(line))
    if len(line) > limits.max_chars:
        template = "{name} has {n} characters; the limit is {limit} (--max-line-chars)"
        raise Refused(template, 413, at, n=len(line), limit=limits.max_chars)
    if "\n" in line or "\r" in line:
        raise Refused("{name} contains a line break; send one sentence per list item", at=at)
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        raise Refused("{name} is not valid Unicode (an unpaired surrogate escape)", at=at) from None


def integer(bounds: Range | None = None, requirement: str = "") -> BeforeValidator:
    """An integer (not a boolean, not 2.0) within `bounds` (`requirement`: how they read); null
    takes the field's default."""

    def check(value: Any) -> Any:
        if value is None:
            raise PydanticUseDefault
        if isinstance(value, bool) or not isinstance(value, int):
            raise Refused("{name} must be an integer, got {got}", got=json_type(value))
        if bounds is not None and value not in bounds:
            raise Refused(
                "{name} must be {requirement}, got {got}", requirement=requirement, got=value
            )
        return value

    return BeforeValidator(check)


def number(bounds: Range, always_finite: bool = False) -> BeforeValidator:
    """A JSON number as a finite float within `bounds`; null takes the field's default. Its error
    says "a finite number" when the value is not one (`always_finite`: whatever failed, as a
    decoding option's does)."""

    def check(value: Any) -> Any:
        if value is None:
            raise PydanticUseDefault
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise Refused("{name} must be a number, got {got}", got=json_type(value))
        try:
            x = float(value)
        except OverflowError:  # an integer beyond any float
            x = math.inf
        if x not in bounds:
            requirement = f"a finite number {bounds}" if always_finite else bounds.requirement(x)
            overflow = isinstance(value, int) and math.isinf(x)
            got = f"an integer of {len(str(value))} digits" if overflow else x
            raise Refused(
                "{name} must be {requirement}, got {got}", requirement=requirement, got=got
            )
        return x

    return BeforeValidator(check)


def decoding_number(key: str) -> BeforeValidator:
    """A float decoding option, in the range its `decoding` config key declares."""
    return number(CONFIG_FIELDS[key]["range"], always_finite=True)


def true_or_false(value: Any) -> Any:
    """true or false (null is neither)."""
    if not isinstance(value, bool):
        raise Refused("{name} must be true or false, got {got}", got=json_type(value))
    return value


def language(value: Any) -> Any:
    """A target language: a string (null: none asked for)."""
    if value is not None and not isinstance(value, str):
        raise Refused('{name} must be a string such as "fra", got {got}', got=json_type(value))
    return value


def sampling_value(value: Any) -> Any:
    """`sampling`: true (`nmt translate --sampling`'s settings), false or null (search), or an
    object of settings."""
    if value is True:
        return {}
    if value is False or value is None:
        return None
    if not isinstance(value, dict):
        template = "{name} must be true, false or an object like {example}, got {got}"
        raise Refused(template, example=SAMPLING_EXAMPLE, got=json_type(value))
    return value


def boolean_or_settings(schema: dict[str, Any]) -> None:
    """The docs of `sampling` as clients send it: a boolean or the settings, false by default."""
    settings = [s for s in schema.pop("anyOf") if s.get("type") != "null"]
    schema.update(anyOf=[{"type": "boolean"}, *settings], default=False)


def phrase_list(value: Any, at: Loc = ()) -> list[str]:
    """A list of non-empty target phrases."""
    if not isinstance(value, list):
        raise Refused("{name} must be a list of strings, got {got}", at=at, got=json_type(value))
    for i, phrase in enumerate(value):
        if not isinstance(phrase, str) or not phrase.strip():
            got = json_type(phrase) if not isinstance(phrase, str) else "an empty string"
            raise Refused("{name} must be a non-empty string, got {got}", at=(*at, i), got=got)
    return [p.strip() for p in value]


def constraint_lists(value: Any) -> Any:
    """`constraints`: a list of phrases (for one line), or a list of such lists (one per line)."""
    if value is None:
        return None
    if isinstance(value, list) and value and all(isinstance(v, list) for v in value):
        return [phrase_list(v, (i,)) for i, v in enumerate(value)]
    return phrase_list(value)


def glossary_pairs(value: Any) -> Any:
    """`glossary`: [[source term, target term], ...]."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise Refused(
            "{name} must be a list of [source term, target term] pairs, got {got}",
            got=json_type(value),
        )
    for i, pair in enumerate(value):
        if not (
            isinstance(pair, list)
            and len(pair) == 2
            and all(isinstance(t, str) and t.strip() for t in pair)
        ):
            raise Refused(
                "{name} must be a [source term, target term] pair of non-empty strings", at=(i,)
            )
    return [(s.strip(), t.strip()) for s, t in value]


Lines = Annotated[str | list[str], BeforeValidator(line_list)]
Flag = Annotated[bool, BeforeValidator(true_or_false)]
