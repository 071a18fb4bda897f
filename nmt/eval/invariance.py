"""Batch-composition invariance: a line's translation must not depend on which other lines share
its batch. Padding and batch size change the order of floating-point sums, so scores move in the
last bits; only a near-tie between two hypotheses can then flip, and `check` says which lines did."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from nmt.decode.options import DecodeOptions
from nmt.engines.translator import Translator


@dataclass
class Difference:
    """One line whose batched and one-at-a-time translations differ, with both scores."""

    line: int  # 1-based
    alone: str
    batched: str
    score_alone: float
    score_batched: float

    @property
    def gap(self) -> float:
        """How far apart the two winners score: a near-tie when tiny."""
        return abs(self.score_alone - self.score_batched)


@dataclass
class InvarianceReport:
    """Identical lines out of all, and each difference."""

    lines: int
    identical: int
    differences: list[Difference] = field(default_factory=list)

    @property
    def fraction(self) -> float:
        """Share of identical lines (1.0 for no lines)."""
        return self.identical / self.lines if self.lines else 1.0

    def to_json(self) -> dict[str, Any]:
        """The report for --json."""
        out = asdict(self)
        out["fraction"] = round(self.fraction, 6)
        return out


def check(
    translator: Translator,
    lines: Sequence[str],
    options: DecodeOptions | None = None,
    **kwargs: Any,
) -> InvarianceReport:
    """Translate `lines` one at a time and in the translator's normal batches with the same
    `options` (`kwargs`: `translate`'s, DecodeOptions fields among them); compare. Each line
    keeps its number alone too: sampling keys and warnings follow it."""
    batched = translator.translate(list(lines), options=options, **kwargs)
    report = InvarianceReport(len(lines), 0)
    for i, (line, b) in enumerate(zip(lines, batched, strict=True), start=1):
        (alone,) = translator.translate([line], options=options, first_line=i, **kwargs)
        if alone.text == b.text:
            report.identical += 1
            continue
        ha, hb = alone.hypotheses[0], b.hypotheses[0]
        report.differences.append(Difference(i, alone.text, b.text, ha.score, hb.score))
    return report
