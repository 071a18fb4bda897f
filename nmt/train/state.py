"""What `--resume` carries over and what it must agree on.

The saved data position counts batches of an epoch whose order is a function of the batching
settings (max_tokens, accumulate, seed, world size, data directory): with any of them changed it
would point at other batches, so resuming refuses (or, opted in, starts the epoch over). The
optimizer's settings (lr, betas, weight_decay) may change: they are applied to the loaded state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from nmt.config import TrainingConfig
from nmt.dirs.data import DataDir
from nmt.dirs.state import SavedState
from nmt.errors import NmtError


@dataclass
class TrainState:
    """Counters that a resumed run must continue from exactly."""

    step: int = 0
    epoch: int = 1
    position: int = 0  # batches of this epoch already consumed (per rank)
    elapsed: float = 0.0  # seconds of this run and the runs it resumes
    best_score: float | None = None
    best_step: int = 0
    bad_validations: int = 0
    last_valid_step: int = 0
    nonfinite_streak: int = 0
    tokens: int = 0  # target tokens trained on, all ranks
    cooldown_end: float | None = None  # share of the budget where a run out of patience stops


# The batching settings a data position depends on, as saved in the trainer state.
POSITION_KEYS = ("max_tokens", "accumulate", "seed", "data_dir", "subword_alpha")
OPTIMIZER_KEYS = ("lr", "betas", "weight_decay")


def make_optimizer(
    model: nn.Module, tc: TrainingConfig, device: torch.device
) -> torch.optim.Optimizer:
    """Adam with decoupled weight decay (identical to Adam when weight_decay is 0)."""
    params = [p for p in model.parameters() if p.requires_grad]
    kwargs: dict[str, Any] = {}
    if device.type in ("cuda", "cpu"):
        kwargs["fused"] = True
    betas = (tc.betas[0], tc.betas[1])
    return torch.optim.AdamW(params, lr=tc.lr, betas=betas, weight_decay=tc.weight_decay, **kwargs)


def run_settings(tc: TrainingConfig, data: DataDir) -> dict[str, Any]:
    """The settings a resumed run is compared against (saved in the trainer state)."""
    return {
        "max_tokens": tc.max_tokens,
        "accumulate": tc.accumulate,
        "seed": tc.seed,
        "subword_alpha": tc.subword_alpha,
        "data_dir": str(data.path.resolve()),
        "lr": tc.lr,
        "betas": list(tc.betas),
        "weight_decay": tc.weight_decay,
        "early_stop_metric": tc.early_stop_metric,
    }


def check_metric(saved: SavedState, now: dict[str, Any]) -> None:
    """Refuse another early_stop_metric: the best score, patience and kept checkpoints were
    judged by the saved one (BLEU and loss ranks cannot be mixed)."""
    old = saved.settings.get("early_stop_metric")
    if old is not None and old != now["early_stop_metric"]:
        raise NmtError(
            f"--resume: training.early_stop_metric changed ({old} -> {now['early_stop_metric']}); "
            f"the best checkpoint and patience were judged by {old}: resume with {old}, or train "
            "into a new directory"
        )


def position_changes(saved: SavedState, now: dict[str, Any], world_size: int) -> list[str]:
    """'training.KEY changed (old -> new)' for each batching setting that differs.

    `saved` is a loaded trainer state; keys it lacks (older states) are not compared."""
    old = saved.settings
    label = {"data_dir": "data directory"}
    changes = [
        f"{label.get(k, 'training.' + k)} changed ({old[k]} -> {now[k]})"
        for k in POSITION_KEYS
        if k in old and old[k] != now[k]
    ]
    old_ws = saved.world_size
    if old_ws is not None and old_ws != world_size:
        changes.append(f"world size changed ({old_ws} -> {world_size})")
    return changes


def check_position(changes: list[str], position: int, reset: bool) -> bool:
    """Whether the epoch must start over; refuses when it would and the user did not opt in."""
    if not changes or position == 0:
        return False  # at an epoch boundary the position means the same under any settings
    if reset:
        return True
    raise NmtError(
        f"--resume: {', '.join(changes)}; the saved data position would point at different "
        "batches (set training.reset_data_position=true to start the epoch over)"
    )


def retune_optimizer(
    optimizer: torch.optim.Optimizer, saved: SavedState, tc: TrainingConfig
) -> list[str]:
    """Apply betas and weight_decay to the loaded optimizer; return what changed (lr included).

    The schedule sets each step's lr from training.lr, so only the report needs the old one."""
    groups = optimizer.param_groups
    betas: tuple[float, float] = groups[0]["betas"]
    old: dict[str, Any] = {
        "betas": [float(b) for b in betas],
        "weight_decay": float(groups[0]["weight_decay"]),
    }
    if "lr" in saved.settings:
        old["lr"] = saved.settings["lr"]
    new_betas = [float(b) for b in tc.betas]
    new: dict[str, Any] = {"lr": tc.lr, "betas": new_betas, "weight_decay": tc.weight_decay}
    for g in groups:
        g["betas"] = (new_betas[0], new_betas[1])
        g["weight_decay"] = tc.weight_decay
    return [
        f"training.{k} {old[k]} -> {new[k]}"
        for k in OPTIMIZER_KEYS
        if k in old and old[k] != new[k]
    ]
