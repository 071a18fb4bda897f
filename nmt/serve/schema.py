"""The OpenAPI description of the answers and of the request bodies, whose models
`nmt.serve.request` checks them with. Answers are built without a second validation pass; the
answer models forbid fields they do not name, and tests/test_serve.py validates real answers
against them, so the description cannot drift from what is sent."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from nmt.serve.attention_query import AttentionBody
from nmt.serve.request import ScoreBody, TranslateBody


class Answer(BaseModel):
    """An answer model: exactly the fields an answer carries."""

    model_config = ConfigDict(extra="forbid")


class PairScore(Answer):
    """One pair's log-probabilities (natural log; eos is the last token)."""

    log_prob: float
    per_token: float
    tokens: list[str]
    token_log_probs: list[float]


class ScoreAnswer(Answer):
    """The scores in input order, and timings."""

    scores: list[PairScore]
    model: str
    elapsed_ms: float
    decode_ms: float
    batch: dict[str, int]


class Hypothesis(Answer):
    """One candidate, best first."""

    translation: str
    score: float
    log_prob: float
    tokens: list[str]
    at_limit: bool  # stopped at the length limit, not at its end: may be cut short
    attention: list[list[float]] | None = None


class LineResult(Answer):
    """One input line's record, as `nmt translate --format jsonl` writes it."""

    source: str
    source_tokens: list[str] | None = None
    hypotheses: list[Hypothesis]
    sentences: list[LineResult] | None = None  # a line split into pieces: each one's record


class TranslateAnswer(Answer):
    """The translations in input order, and timings."""

    translations: list[LineResult]
    model: str
    elapsed_ms: float
    decode_ms: float
    batch: dict[str, int]


class AttentionAnswer(Answer):
    """One sentence's attention: `weights` is rows x columns, each row a distribution over the
    columns (kind decoder: 0 above the diagonal)."""

    kind: str
    layer: int
    head: int | str
    layers: int
    heads: int
    rows: list[str]
    columns: list[str]
    weights: list[list[float]]
    translation: str
    model: str
    elapsed_ms: float
    decode_ms: float


class Problem(Answer):
    """Every error: one line."""

    detail: str


def inline_schema(model: type[BaseModel]) -> dict[str, Any]:
    """A model's JSON schema with its nested models written in place (a request body given
    through `openapi_extra` cannot point into pydantic's own `$defs`)."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/"):
                return resolve(defs[ref.removeprefix("#/$defs/")])
            return {k: resolve(v) for k, v in node.items()}
        if isinstance(node, list):
            return [resolve(v) for v in node]
        return node

    return resolve(schema)


def request_body(model: type[BaseModel]) -> dict[str, Any]:
    """`openapi_extra` for an endpoint that reads `model` as its JSON body."""
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": inline_schema(model)}},
        }
    }


OPENAPI_BODY = request_body(TranslateBody)
RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"model": TranslateAnswer, "description": "One record per input line, in order."},
    400: {"model": Problem, "description": "The body is not JSON."},
    413: {"model": Problem, "description": "Too many lines or characters."},
    422: {"model": Problem, "description": "A missing, unknown or mistyped field."},
    503: {"model": Problem, "description": "The model is still loading."},
    504: {"model": Problem, "description": "No decoder time within --timeout."},
}

SCORE_BODY = request_body(ScoreBody)
SCORE_RESPONSES: dict[int | str, dict[str, Any]] = {
    **RESPONSES,
    200: {"model": ScoreAnswer, "description": "One record per pair, in order."},
}

ATTENTION_BODY = request_body(AttentionBody)
ATTENTION_RESPONSES: dict[int | str, dict[str, Any]] = {
    **RESPONSES,
    200: {"model": AttentionAnswer, "description": "The chosen layer's matrix and its labels."},
    400: {
        "model": Problem,
        "description": "The body is not JSON, or the model has no such attention (an export, "
        "attention none, Seq2Seq beside cross).",
    },
    413: {"model": Problem, "description": "A line over --max-line-chars."},
    422: {
        "model": Problem,
        "description": "A missing, unknown or mistyped field; no such layer or head.",
    },
}
