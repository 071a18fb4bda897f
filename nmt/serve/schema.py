"""The OpenAPI description of POST /translate (documentation only: `nmt.serve.request` checks
bodies by hand for one-line errors, and answers are built without a second validation pass)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class TranslateBody(BaseModel):
    """One sentence or a list of sentences, and optional decoding options."""

    text: str | list[str] = Field(description="One line, or a list of lines (no line breaks).")
    beam_size: int | None = Field(None, description="Beam width; 1 = greedy (default: model's).")
    nbest: int = Field(1, description="Hypotheses per line, 1..beam_size.")
    length_penalty: float | None = Field(None, description="GNMT alpha (default: model's).")
    with_attention: bool = Field(
        False, description="Add source_tokens and per hypothesis attention (target x source)."
    )


class Hypothesis(BaseModel):
    """One candidate, best first."""

    translation: str
    score: float
    log_prob: float
    tokens: list[str]
    attention: list[list[float]] | None = None


class LineResult(BaseModel):
    """One input line's record, as `nmt translate --format jsonl` writes it."""

    source: str
    source_tokens: list[str] | None = None
    hypotheses: list[Hypothesis]


class TranslateAnswer(BaseModel):
    """The translations in input order, and timings."""

    translations: list[LineResult]
    model: str
    elapsed_ms: float
    decode_ms: float
    batch: dict[str, int]


class Problem(BaseModel):
    """Every error: one line."""

    detail: str


OPENAPI_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": TranslateBody.model_json_schema()}},
    }
}
RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"model": TranslateAnswer, "description": "One record per input line, in order."},
    400: {"model": Problem, "description": "The body is not JSON."},
    413: {"model": Problem, "description": "Too many lines or characters."},
    422: {"model": Problem, "description": "A missing, unknown or mistyped field."},
    503: {"model": Problem, "description": "The model is still loading."},
    504: {"model": Problem, "description": "No decoder time within --timeout."},
}
