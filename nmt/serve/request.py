"""The bodies of `POST /translate` and `POST /score` as pydantic models: they check a request and
describe it in the OpenAPI docs. Every mistake gets one line that names the field (pydantic's own
errors list each alternative of a union; clients need one sentence): a field's validator raises
`Refused`, `DecodeOptions.resolve` an `OptionError` (the decoding ranges are the model config's),
and `parse` answers the first as {"detail": line} with its status (400 / 413 / 422)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, TypeVar

from fastapi import HTTPException
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic_core import PydanticUseDefault

from nmt.config import DecodingConfig, Range
from nmt.decode.options import CONFIG_FIELDS, DecodeOptions, OptionError, Sampling
from nmt.decode.paragraphs import check_split_options
from nmt.errors import NmtError

Loc = tuple[str | int, ...]  # where pydantic found a value: field names and list indices
SAMPLING_EXAMPLE = '{"temperature": 0.8, "top_p": 0.9, "seed": 1}'


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


def _lines(value: Any, info: ValidationInfo) -> Any:
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


def _boolean(value: Any) -> Any:
    """true or false (null is neither)."""
    if not isinstance(value, bool):
        raise Refused("{name} must be true or false, got {got}", got=json_type(value))
    return value


def _sampling(value: Any) -> Any:
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


def _boolean_or_settings(schema: dict[str, Any]) -> None:
    """The docs of `sampling` as clients send it: a boolean or the settings, false by default."""
    settings = [s for s in schema.pop("anyOf") if s.get("type") != "null"]
    schema.update(anyOf=[{"type": "boolean"}, *settings], default=False)


Lines = Annotated[str | list[str], BeforeValidator(_lines)]
Flag = Annotated[bool, BeforeValidator(_boolean)]


# ---- the bodies -------------------------------------------------------------------------------


class Body(BaseModel):
    """A JSON object holding only the fields its model declares, checked in their order."""

    model_config = ConfigDict(extra="forbid")
    EXAMPLE: ClassVar[str] = "{}"
    REQUIRED: ClassVar[str] = "{name} is required: a string or a list of strings"

    @model_validator(mode="before")
    @classmethod
    def _known_fields(cls, data: Any) -> Any:
        """An object first, then no unknown field, before any field is read."""
        if not isinstance(data, dict):
            template = "the body must be a JSON object like {example}, got {got}"
            raise Refused(template, example=cls.EXAMPLE, got=json_type(data))
        for key in data:
            if key not in cls.model_fields:
                expected = ", ".join(cls.model_fields)
                raise Refused(
                    "unknown field {name} (expected {expected})", at=(key,), expected=expected
                )
        return data


class SamplingBody(Body):
    """`nmt translate --sampling`'s settings."""

    temperature: Annotated[float, number(Range(0, lo_open=True))] = Field(
        1.0, description="Softmax temperature, > 0."
    )
    top_k: Annotated[int, integer(Range(0), ">= 0 (0: all tokens)")] = Field(
        0, description="Draw among the k most likely tokens (0: all)."
    )
    top_p: Annotated[float, number(Range(0, 1, lo_open=True))] = Field(
        1.0, description="Nucleus: the smallest set holding top_p (1: all)."
    )
    seed: Annotated[int, integer(Range(0, 2**63, hi_open=True), "in [0, 2**63)")] = Field(
        0, description="Same seed, same request: same samples."
    )


class TranslateBody(Body):
    """One sentence or a list of sentences, and optional decoding options."""

    EXAMPLE = '{"text": "..."}'

    text: Lines = Field(description="One line, or a list of lines (no line breaks).")
    beam_size: Annotated[int | None, integer()] = Field(
        None, description="Beam width; 1 = greedy (default: model's)."
    )
    nbest: Annotated[int, integer()] = Field(
        1, description="Hypotheses per line, 1..beam_size (with sampling: samples, 1..200)."
    )
    length_penalty: Annotated[float | None, decoding_number("length_penalty")] = Field(
        None, description="GNMT alpha (default: model's)."
    )
    with_attention: Flag = Field(
        False, description="Add source_tokens and per hypothesis attention (target x source)."
    )
    sampling: Annotated[SamplingBody | None, BeforeValidator(_sampling)] = Field(
        None,
        description="Draw tokens instead of searching (no beam_size): true for the defaults or "
        "the settings. A line's samples depend on the seed and its place in the request only.",
        json_schema_extra=_boolean_or_settings,
    )
    split_sentences: Annotated[bool | None, BeforeValidator(_boolean)] = Field(
        None,
        description="true: translate each line's sentences and join them into the line's one "
        "entry (its pieces under 'sentences'; one hypothesis a line, no attention or sampling); "
        "false: whole lines; default: split the lines of several sentences when one hypothesis "
        "a line, without attention or sampling, is asked for (as nmt translate).",
    )

    @model_validator(mode="after")
    def _decodable(self, info: ValidationInfo) -> TranslateBody:
        """Sampling only where the engine samples, never beside a beam; then the ranges of
        `DecodeOptions.resolve` (an `OptionError`)."""
        context = body_context(info)
        if self.sampling is not None and not context.sampling_ok:
            raise Refused(
                "'sampling' needs a model directory: this server runs an `nmt export` "
                "(CTranslate2 does not draw nmt's keyed samples)"
            )
        if self.sampling is not None and self.beam_size is not None:
            raise Refused("'sampling' draws its own tokens: drop 'beam_size'")
        if self.split_sentences is True:
            try:
                check_split_options(self.options(context.defaults), "'split_sentences'")
            except NmtError as e:
                raise Refused(str(e)) from None
        self.options(context.defaults).resolve(context.defaults)
        return self

    def lines(self) -> list[str]:
        """The lines to translate, in order."""
        return [self.text] if isinstance(self.text, str) else self.text

    def options(self, defaults: DecodingConfig) -> DecodeOptions:
        """The decoding options, the model's defaults written in (so requests that ask for the
        same search are batched together whether they name the defaults or not)."""
        penalty = defaults.length_penalty if self.length_penalty is None else self.length_penalty
        if self.sampling is not None:
            settings = Sampling(**self.sampling.model_dump())
            return DecodeOptions(
                nbest=self.nbest,
                length_penalty=penalty,
                with_attention=self.with_attention,
                sampling=settings,
            )
        return DecodeOptions(
            beam_size=defaults.beam_size if self.beam_size is None else self.beam_size,
            nbest=self.nbest,
            length_penalty=penalty,
            with_attention=self.with_attention,
        )


class ScoreBody(Body):
    """Pairs to score: both strings, or both lists of the same length."""

    EXAMPLE = '{"source": "...", "target": "..."}'

    source: Lines = Field(description="Source line(s).")
    target: Lines = Field(description="One translation per source line.")

    @model_validator(mode="after")
    def _paired(self) -> ScoreBody:
        """One target per source line."""
        if isinstance(self.source, str) != isinstance(self.target, str):
            raise Refused("'source' and 'target' must both be strings or both be lists")
        if isinstance(self.source, list) and len(self.source) != len(self.target):
            template = "'source' has {n} lines but 'target' has {m} (one target per source line)"
            raise Refused(template, n=len(self.source), m=len(self.target))
        return self

    def pairs(self) -> list[tuple[str, str]]:
        """The (source, target) pairs, in order."""
        if isinstance(self.source, str) and isinstance(self.target, str):
            return [(self.source, self.target)]
        return list(zip(self.source, self.target, strict=True))


# ---- parsing ----------------------------------------------------------------------------------

B = TypeVar("B", bound=Body)


def parse(model: type[B], body: bytes, context: Context) -> B:
    """A body decoded and checked by `model`: 400 for broken JSON, else 413 over a limit, 422."""
    data = read_json(body)
    try:
        return model.model_validate(data, context=context)
    except ValidationError as e:
        raise problem(e, model.REQUIRED) from None


def read_json(body: bytes) -> Any:
    """The body's JSON value; 400 when it is not JSON this server reads."""
    try:
        return json.loads(body)
    except UnicodeDecodeError:
        raise bad(400, "the body is not valid UTF-8") from None
    except json.JSONDecodeError as e:
        msg = f"the body is not valid JSON ({e.msg}: line {e.lineno} column {e.colno})"
        raise bad(400, msg) from None
    except (RecursionError, ValueError) as e:  # nested too deeply; an integer too long
        raise bad(400, f"the body is not JSON this server reads ({type(e).__name__})") from None


def problem(error: ValidationError, required: str = Body.REQUIRED) -> HTTPException:
    """The first thing wrong with a body, as one line: what the field's check said (`required`:
    the line for a missing field, which names it as {name})."""
    first = error.errors(include_url=False)[0]
    loc, cause = first["loc"], first.get("ctx", {}).get("error")
    if isinstance(cause, Refused):
        return bad(cause.status, cause.message(loc))
    if isinstance(cause, OptionError):
        return bad(422, cause.render(repr))
    if first["type"] == "missing":
        return bad(422, required.format(name=spell(loc)))
    return bad(422, f"{spell(loc)}: {first['msg']}")
