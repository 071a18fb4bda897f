"""When beam search may end a sentence before its maximum length: the exact rule (the result is
that of searching on) and the early one (faster, not exact)."""

from __future__ import annotations

from typing import Protocol

import torch

from nmt.decode.engine import gnmt_length_penalty
from nmt.decode.options import OptionError
from nmt.decode.search.rows import BeamRows


class StopRule(Protocol):
    """Decides when a sentence's beam search may end before its maximum length."""

    name: str

    def done(self, rows: BeamRows, t: int, alpha: float) -> torch.Tensor:
        """(n,) bool: after t tokens no live hypothesis can still beat the n-th best finished."""
        ...


class ExactStop:
    """Exact under the length penalty: a live hypothesis with log-prob s <= 0 after t tokens can
    only finish with s' <= s at a length L in [t + 1, max + 1], so its normalized score is at
    most s / max(lp(t + 1), lp(max + 1)) (lp is monotonic in L for any alpha)."""

    name = "exact"

    def done(self, rows: BeamRows, t: int, alpha: float) -> torch.Tensor:
        """Stop when even the most favourable future length cannot lift the best live one."""
        lp_far = rows.lp_max.clamp(min=gnmt_length_penalty(t + 1, alpha))  # (n,)
        return rows.top_fin[:, -1] >= rows.best_live() / lp_far


class EarlyStop:
    """Trades exactness for speed, as most toolkits do by default: the bound assumes a live
    hypothesis would end at its next step, s / lp(t + 1). Without a length penalty it is exact."""

    name = "early"

    def done(self, rows: BeamRows, t: int, alpha: float) -> torch.Tensor:
        """Stop when the best live one, ended at the next step, cannot win."""
        lp_next = torch.full_like(rows.lp_max, gnmt_length_penalty(t + 1, alpha))  # (n,)
        return rows.top_fin[:, -1] >= rows.best_live() / lp_next


class TransformersStop:
    """transformers' `generate` (early_stopping=False): once a sentence holds beam_size finished
    hypotheses (scored sum log-prob / L ** alpha, eos counted in L), it ends when its best live
    one, scored at its current length t, cannot beat the worst of them."""

    name = "transformers"

    def done(self, rows: BeamRows, t: int, alpha: float) -> torch.Tensor:
        """Stop when the best live one at its present length cannot win."""
        return rows.top_fin[:, -1] >= rows.best_live() / float(t) ** alpha


STOP_RULES: dict[str, type[ExactStop] | type[EarlyStop] | type[TransformersStop]] = {
    "exact": ExactStop,
    "early": EarlyStop,
    "transformers": TransformersStop,
}


def stop_rule(name: str) -> StopRule:
    """The stopping rule called `name` ('exact', 'early' or 'transformers')."""
    if name not in STOP_RULES:
        raise OptionError(
            "{stop} must be 'exact', 'early' or 'transformers', got {got!r}", got=name
        )
    return STOP_RULES[name]()
