"""The bodies of `POST /translate` and `POST /score` as pydantic models: they check a request and
describe it in the OpenAPI docs. Every mistake gets one line that names the field: a field's
validator (nmt.serve.fields) raises `Refused`, `DecodeOptions.resolve` an `OptionError` (the
decoding ranges are the model config's), and `parse` answers the first as {"detail": line} with
its status (400 / 413 / 422)."""

from __future__ import annotations

import json
from dataclasses import replace
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

from nmt.config import DecodingConfig, Range
from nmt.decode.constraints import CONSTRAINTS_REFUSED, Glossary, check_constraint_options
from nmt.decode.options import DecodeOptions, OptionError, ResolvedOptions, Sampling
from nmt.decode.paragraphs import check_split_options
from nmt.errors import NmtError
from nmt.serve.fields import (
    Context,
    Flag,
    Lines,
    Refused,
    bad,
    body_context,
    boolean_or_settings,
    constraint_lists,
    decoding_number,
    glossary_pairs,
    integer,
    json_type,
    language,
    number,
    sampling_value,
    spell,
    true_or_false,
)

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
    max_len_a: Annotated[float | None, decoding_number("max_len_a")] = Field(
        None,
        description="Output limit: max_len_a x source subwords + max_len_b (default: model's).",
    )
    max_len_b: Annotated[float | None, decoding_number("max_len_b")] = Field(
        None, description="Output limit's constant, in subwords (default: model's)."
    )
    no_repeat_ngram_size: Annotated[int | None, integer()] = Field(
        None,
        description="No n-gram of this many subwords twice in one output; 0: off (default: "
        "model's).",
    )
    with_attention: Flag = Field(
        False, description="Add source_tokens and per hypothesis attention (target x source)."
    )
    sampling: Annotated[SamplingBody | None, BeforeValidator(sampling_value)] = Field(
        None,
        description="Draw tokens instead of searching (no beam_size): true for the defaults or "
        "the settings. A line's samples depend on the seed and its place in the request only.",
        json_schema_extra=boolean_or_settings,
    )
    split_sentences: Annotated[bool | None, BeforeValidator(true_or_false)] = Field(
        None,
        description="true: translate each line's sentences and join them into the line's one "
        "entry (its pieces under 'sentences'; one hypothesis a line, no attention or sampling); "
        "false: whole lines; default: split the lines of several sentences when one hypothesis "
        "a line, without attention or sampling, is asked for (as nmt translate).",
    )
    constraints: Annotated[
        list[str] | list[list[str]] | None, BeforeValidator(constraint_lists)
    ] = Field(
        None,
        description="Target phrases the translations must contain (beam search; model "
        "directories, not exports): a list of strings for one line, or one list per line. "
        "A line with constraints is not split into sentences.",
    )
    glossary: Annotated[list[tuple[str, str]] | None, BeforeValidator(glossary_pairs)] = Field(
        None,
        description="[[source term, target term], ...]: where a source term occurs in a line "
        "(or sentence) as whole words, its translation must contain the target term.",
    )
    target_lang: Annotated[str | None, BeforeValidator(language)] = Field(
        None,
        description="A multilingual model's target language (fra or >>fra<<; /info lists "
        "them as target_languages): its token starts every line and sentence. Required by "
        "such a model unless the server has a --target-lang; refused by any other.",
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
        resolved = self.options(context.defaults).resolve(context.defaults)
        if self.constraints is not None or self.glossary:
            self._constrainable(context, resolved)
        return self

    def _constrainable(self, context: Context, resolved: ResolvedOptions) -> None:
        """Constraints need nmt's beam search, and one list per line."""
        field = "'constraints'" if self.constraints is not None else "'glossary'"
        if not context.constraints_ok:
            raise Refused(f"{field}: {CONSTRAINTS_REFUSED}")
        try:
            check_constraint_options(resolved, f"{field}:")
        except NmtError as e:
            raise Refused(str(e)) from None
        many = isinstance(self.text, list)
        shaped = self.constraints is None or (
            all(isinstance(c, list) for c in self.constraints)
            if many
            else all(isinstance(c, str) for c in self.constraints)
        )
        if not shaped or (many and len(self.constraints or self.text) != len(self.text)):
            raise Refused(
                "'constraints' must be a list of strings for a string 'text', or one list of "
                "strings per line for a list"
            )

    def line_constraints(self) -> list[list[str]] | None:
        """Each line's target phrases (None: none given)."""
        given: Any = self.constraints
        if given is None:
            return None
        return [given] if isinstance(self.text, str) else given

    def glossary_terms(self) -> Glossary | None:
        """The request's glossary (None: none given)."""
        return Glossary(tuple(self.glossary)) if self.glossary else None

    def lines(self) -> list[str]:
        """The lines to translate, in order."""
        return [self.text] if isinstance(self.text, str) else self.text

    def options(self, defaults: DecodingConfig) -> DecodeOptions:
        """The decoding options, the model's defaults written in (so requests that ask for the
        same search are batched together whether they name the defaults or not)."""
        penalty = defaults.length_penalty if self.length_penalty is None else self.length_penalty
        common = DecodeOptions(
            nbest=self.nbest,
            length_penalty=penalty,
            max_len_a=defaults.max_len_a if self.max_len_a is None else self.max_len_a,
            max_len_b=defaults.max_len_b if self.max_len_b is None else self.max_len_b,
            no_repeat_ngram_size=defaults.no_repeat_ngram_size
            if self.no_repeat_ngram_size is None
            else self.no_repeat_ngram_size,
            with_attention=self.with_attention,
        )
        if self.sampling is not None:
            return replace(common, sampling=Sampling(**self.sampling.model_dump()))
        beam = defaults.beam_size if self.beam_size is None else self.beam_size
        return replace(common, beam_size=beam)


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
