"""One optimizer update: accumulated batches through the model and its fused loss, gradients
clipped, and the update skipped (every process agreeing) when its loss or gradients are not
finite; too many skipped in a row means the run has diverged.

The step does one host sync (the gradient norm, needed to skip non-finite updates).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from nmt.data.batching import Batch
from nmt.errors import NmtError
from nmt.train import distributed
from nmt.train.ema import WeightAverage
from nmt.train.state import TrainState

MAX_NONFINITE = 10


@dataclass
class Update:
    """What one update trained on (target tokens, this process) and its loss per token."""

    tokens: int
    loss: float
    nll: float
    finite: bool


class Updater:
    """The parts an update touches: the wrapped model with its loss, the optimizer, the fp16
    grad scaler and the weight average."""

    def __init__(
        self,
        step_model: nn.Module,
        optimizer: torch.optim.Optimizer,
        scaler: torch.amp.GradScaler | None,
        average: WeightAverage | None,
        autocast: Callable[[], Any],
        clip_norm: float,
        dist: distributed.DistInfo,
        device: torch.device,
    ) -> None:
        self.step_model, self.optimizer, self.scaler = step_model, optimizer, scaler
        self.average, self.autocast, self.dist, self.device = average, autocast, dist, device
        self.clip = clip_norm if clip_norm > 0 else float("inf")
        self.params = [p for g in optimizer.param_groups for p in g["params"]]

    def __call__(
        self, batches: list[Batch], lr: float, st: TrainState, warn: Callable[[str], None]
    ) -> Update:
        """Update at learning rate `lr` from `batches` (still on the host), or skip the update."""
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        tokens = sum(b.n_tgt_tokens for b in batches)
        loss_sum, nll_sum = self._backward(batches, tokens)
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        gnorm = float(torch.nn.utils.clip_grad_norm_(self.params, self.clip))
        loss, nll = float(loss_sum) / tokens, float(nll_sum) / tokens
        finite = math.isfinite(loss) and (self.scaler is not None or math.isfinite(gnorm))
        if self.dist.enabled:  # all replicas skip or none: fp16's scalers would drift apart
            finite = distributed.agree_max(int(not finite), self.dist, self.device) == 0
        if finite:
            st.nonfinite_streak = 0
            self._apply(st.step)
        else:
            skip(st, loss, warn)
        self.optimizer.zero_grad(set_to_none=True)
        return Update(tokens, loss, nll, finite)

    def _backward(
        self, batches: list[Batch], tokens: int
    ) -> tuple[torch.Tensor | float, torch.Tensor | float]:
        """Gradients of the summed loss over `tokens`; returns the loss and NLL sums."""
        loss_sum: torch.Tensor | float = 0.0
        nll_sum: torch.Tensor | float = 0.0
        for i, batch in enumerate(batches):
            batch = batch.to(self.device)
            with self._no_sync(i < len(batches) - 1):
                with self.autocast():
                    loss, nll, _ = self.step_model(
                        batch.src, batch.src_lengths, batch.tgt_in, batch.tgt_out
                    )
                scaled = loss / tokens
                (self.scaler.scale(scaled) if self.scaler else scaled).backward()
            loss_sum = loss_sum + loss.detach()
            nll_sum = nll_sum + nll
        return loss_sum, nll_sum

    def _apply(self, step: int) -> None:
        """The optimizer step (through the scaler under fp16), then the weight average's."""
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        if self.average is not None:
            self.average.update(step)

    def _no_sync(self, skip: bool) -> contextlib.AbstractContextManager[Any]:
        """DDP's no_sync for all but the last accumulated batch (gradients sync once)."""
        if skip and isinstance(self.step_model, DistributedDataParallel):
            return self.step_model.no_sync()
        return contextlib.nullcontext()


def skip(st: TrainState, loss: float, warn: Callable[[str], None]) -> None:
    """Warn about a skipped update; too many in a row means training has diverged."""
    st.nonfinite_streak += 1
    what = (
        f"loss is {loss} (non-finite)"
        if not math.isfinite(loss)
        else "gradients are non-finite (on this or another process)"
    )
    warn(f"step {st.step + 1}: {what}; update skipped ({st.nonfinite_streak} in a row)")
    if st.nonfinite_streak >= MAX_NONFINITE:
        raise NmtError(
            f"training diverged: {MAX_NONFINITE} non-finite losses in a row at step "
            f"{st.step + 1}; lower training.lr, raise training.warmup or use fp32"
        )
