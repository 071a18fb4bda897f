"""Exponential moving average of the weights (Polyak averaging; Marian's exponential smoothing).

Training updates the raw weights; validation, the step / best / last checkpoints and so
translation use their average, which an optimizer's last steps shake less than the weights
themselves. The average lives in a second copy of the model (not in the live parameters swapped
back and forth), so the trainer state that `--resume` reads always holds the raw weights and the
average beside them.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn


class WeightAverage:
    """avg <- d * avg + (1 - d) * w after every update, d = min(decay, (1 + n) / (10 + n)) for
    the n-th update: the ramp lets early validations see recent weights, not the initial ones."""

    def __init__(self, model: nn.Module, decay: float) -> None:
        self.decay = decay
        self.model = copy.deepcopy(model).requires_grad_(False)
        self._live: list[torch.Tensor] = list(model.parameters())
        # The same order as _live (shared tensors are listed once in both).
        self._avg: list[torch.Tensor] = list(self.model.parameters())

    def rate(self, updates_done: int) -> float:
        """The decay used for update number `updates_done` (0-based)."""
        n = updates_done
        return min(self.decay, (1.0 + n) / (10.0 + n))

    @torch.no_grad()
    def update(self, updates_done: int) -> None:
        """Fold the live weights into the average (call after each optimizer step)."""
        weight = 1.0 - self.rate(updates_done)
        torch._foreach_lerp_(self._avg, [p.detach() for p in self._live], weight)

    def state_dict(self) -> dict[str, Any]:
        """The averaged weights, for the trainer state."""
        return self.model.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the averaged weights saved by `state_dict`."""
        self.model.load_state_dict(state)
