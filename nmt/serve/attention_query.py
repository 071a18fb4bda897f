"""`POST /attention`: one sentence's attention of a kind the page's selector names: "cross"
(target x source), the encoder's "self" (source x source) or the decoder's masked "decoder"
self-attention (bos + target x the same, 0 above the diagonal), one layer's matrix for one head or
the mean of its heads. The body is checked here; the weights come from `Translator.attention`
on the batcher's worker thread, like every other decoder call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, NamedTuple

from pydantic import BeforeValidator, Field, ValidationInfo, model_validator
from pydantic_core import PydanticUseDefault

from nmt.config import DecodingConfig
from nmt.decode.engine import Engine
from nmt.decode.options import DecodeOptions
from nmt.errors import NmtError
from nmt.serve.fields import Refused, body_context, check_line, integer, json_type
from nmt.serve.request import Body

KINDS = ("cross", "self", "decoder")
EXPORT = (
    "POST /attention needs a model directory: this server runs an `nmt export` (CTranslate2 "
    "gives only the cross attention of POST /translate's with_attention)"
)
NO_ATTENTION = "this model has no attention (model.attention: none)"
STACKS = {"cross": "decoder", "self": "encoder", "decoder": "decoder"}  # whose layers a kind has


def _one_line(value: Any, info: ValidationInfo) -> Any:
    """`text`, `target`: one non-empty line within --max-line-chars."""
    if not isinstance(value, str):
        raise Refused("{name} must be a string, got {got}", got=json_type(value))
    if not value:
        raise Refused("{name} is empty")
    check_line(value, (), body_context(info).limits)
    return value


def _kind(value: Any) -> Any:
    """One of KINDS; null takes the default (cross)."""
    if value is None:
        raise PydanticUseDefault
    if value not in KINDS:
        got = repr(value) if isinstance(value, str) else json_type(value)
        raise Refused("{name} must be cross, self or decoder, got {got}", got=got)
    return value


def _head(value: Any) -> Any:
    """A head's index or "mean"; null takes the default (mean)."""
    if value is None:
        raise PydanticUseDefault
    if value == "mean" or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    got = repr(value) if isinstance(value, str) else json_type(value)
    raise Refused("{name} must be an integer or 'mean', got {got}", got=got)


Line = Annotated[str, BeforeValidator(_one_line)]


class AttentionBody(Body):
    """One sentence, optionally its translation, and which attention to show."""

    EXAMPLE = '{"text": "...", "target": "...", "kind": "decoder"}'
    REQUIRED = "{name} is required: a string"

    text: Line = Field(description="The source sentence (one line).")
    target: Line | None = Field(
        None, description="Force-decode this translation (default: search for one)."
    )
    kind: Annotated[str, BeforeValidator(_kind)] = Field(
        "cross",
        description="cross: target x source; self: the encoder's source x source; decoder: the "
        "decoder's masked self-attention, bos + target x the same (Seq2Seq: cross only).",
    )
    layer: Annotated[int | None, integer()] = Field(
        None,
        description="Layer, 0-based (negative: from the end), of the encoder for kind self, "
        "else of the decoder (default: the last).",
    )
    head: Annotated[int | str, BeforeValidator(_head)] = Field(
        "mean", description="Head, 0-based (negative: from the end), or 'mean' over the heads."
    )
    beam_size: Annotated[int | None, integer()] = Field(
        None, description="Beam width of the search without a target (default: model's)."
    )

    @model_validator(mode="after")
    def _searchable(self, info: ValidationInfo) -> AttentionBody:
        """The search's beam within the model config's range (an `OptionError`)."""
        defaults = body_context(info).defaults
        self.query(defaults).options.resolve(defaults)
        return self

    def query(self, defaults: DecodingConfig) -> AttentionQuery:
        """What the worker computes and selects (hashable: a batcher options group)."""
        beam = defaults.beam_size if self.beam_size is None else self.beam_size
        return AttentionQuery(self.kind, self.layer, self.head, DecodeOptions(beam_size=beam))


@dataclass(frozen=True)
class AttentionQuery:
    """A checked /attention request, less its sentence."""

    kind: str
    layer: int | None  # None: the last
    head: int | str  # an index or "mean"
    options: DecodeOptions  # the search when there is no target


class Refusal(NamedTuple):
    """A request the model cannot answer: its HTTP status and one line."""

    status: int
    detail: str


def attention_kinds(translator: Engine) -> list[str]:
    """The kinds POST /attention gives for this model (its engine's capabilities): all three for
    Transformers, cross for Seq2Seq (or an ensemble with one), none for an export or a model
    without attention."""
    return list(translator.capabilities.attention)


def unavailable(translator: Engine) -> str | None:
    """Why this model gives no attention at all through POST /attention, or None: an engine
    that gives cross-attention with its translations but answers no query is an export."""
    caps = translator.capabilities
    if caps.attention:
        return None
    return EXPORT if caps.with_attention else NO_ATTENTION


def attention_records(
    translator: Engine, items: list[tuple[str, str | None]], query: AttentionQuery
) -> list[dict[str, Any] | Refusal]:
    """The worker's job: per (source, target), the answer or why there is none (one refused
    sentence does not fail the others in its group)."""
    return [_record(translator, source, target, query) for source, target in items]


def _record(
    translator: Engine, source: str, target: str | None, query: AttentionQuery
) -> dict[str, Any] | Refusal:
    """One sentence's selected matrix with its labels (a user's mistake: a `Refusal`)."""
    try:
        weights, columns, rows, text = translator.attention(
            source, target, query.options, kind=query.kind
        )
        layer = _index(query.layer, weights.shape[0], "layer", STACKS[query.kind])
        heads = weights[-1 if layer is None else layer]  # (heads, rows, columns)
        head = query.head if query.head == "mean" else _index(query.head, len(heads), "head")
    except _OutOfRange as e:
        return Refusal(422, str(e))
    except NmtError as e:  # a kind the model does not have, a source with no pieces
        return Refusal(400, str(e))
    matrix = heads.mean(axis=0) if head == "mean" else heads[head]
    return {
        "kind": query.kind,
        "layer": weights.shape[0] - 1 if layer is None else layer,
        "head": head,
        "layers": int(weights.shape[0]),
        "heads": int(weights.shape[1]),
        "rows": list(rows),
        "columns": list(columns),
        "weights": matrix.astype("float64").round(4).tolist(),  # 4 decimals, as /translate
        "translation": text,
    }


class _OutOfRange(ValueError):
    """A layer or head the model does not have."""


def _index(value: Any, count: int, what: str, stack: str = "") -> Any:
    """`value` (None, or an index; negative counts from the end) as a non-negative index."""
    if value is None:
        return None
    if not -count <= value < count:
        owner = f"the model's {stack}" if stack else "each layer"
        raise _OutOfRange(
            f"'{what}' {value} is out of range: {owner} has {count} {what}"
            f"{'s' if count != 1 else ''} (0 to {count - 1}, or negative from the end)"
        )
    return value % count
