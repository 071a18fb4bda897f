"""What every translation engine returns and offers, whether it runs our PyTorch models
(`Translator`) or a CTranslate2 export (`CT2Translator`). Torch-free."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

FORCED_FLOOR = -1000.0  # floor for a forced eos the model calls (near) impossible


def gnmt_length_penalty(length: Any, alpha: float) -> Any:
    """GNMT length penalty ((5 + L) / 6) ** alpha (Wu et al. 2016), of an int or a tensor."""
    return ((5.0 + length) / 6.0) ** alpha


@dataclass
class TextHypothesis:
    """One translation candidate: detokenized text, target pieces (no eos), scores."""

    text: str
    tokens: list[str]
    score: float
    log_prob: float
    attention: np.ndarray | None = None  # (len(tokens) + 1, layers, heads, len(source_tokens))


@dataclass
class Translation:
    """The result for one input line; `hypotheses` best first (empty input: one empty one)."""

    source: str
    hypotheses: list[TextHypothesis]
    source_tokens: list[str] = field(default_factory=list)  # pieces the model saw, eos last

    @property
    def text(self) -> str:
        """The best translation."""
        return self.hypotheses[0].text if self.hypotheses else ""

    def to_json(self, with_attention: bool = False) -> dict[str, Any]:
        """The JSONL record; attention is the last layer's head mean, target x source rows."""
        record: dict[str, Any] = {"source": self.source, "hypotheses": []}
        if with_attention:
            record["source_tokens"] = self.source_tokens
        for h in self.hypotheses:
            item: dict[str, Any] = {
                "translation": h.text,
                "score": round(h.score, 6),
                "log_prob": round(h.log_prob, 6),
                "tokens": h.tokens,
            }
            if with_attention:
                att = None if h.attention is None else h.attention[:, -1].mean(1)  # (T, S)
                item["attention"] = [] if att is None else np.round(att, 4).tolist()
            record["hypotheses"].append(item)
        return record


class Engine(Protocol):
    """The calls `nmt translate`, `nmt rescore`, `nmt serve` and the library make of an engine."""

    def translate(self, lines: Sequence[str], **options: Any) -> list[Translation]: ...

    def translate_stream(
        self, batches: Iterable[Sequence[str]], **options: Any
    ) -> Iterator[list[Translation]]: ...

    def options(self, **given: Any) -> dict[str, Any]: ...

    def describe(self) -> dict[str, Any]: ...

    def close(self) -> None: ...
