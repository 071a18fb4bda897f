"""The resumable trainer state (`MODEL_DIR/checkpoints/last.state.pt`): its versioned fields, and
reading it back with weights_only=True."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from nmt.errors import NmtError, check_format_version

STATE_FORMAT = 2  # 1: the states written before they carried their format (the same fields)
_STATE_NEEDS = ("model", "optimizer", "train_state", "rng", "world_size")


@dataclasses.dataclass
class SavedState:
    """The resumable trainer state (`last.state.pt`) as `--resume` reads it, versioned: a field
    added later gets a default here, and `from_saved` upgrades an older format in one place."""

    model: dict[str, Any]
    optimizer: dict[str, Any]
    train_state: dict[str, Any]  # TrainState's fields
    rng: dict[str, Any]  # this process's generators
    world_size: int
    scaler: dict[str, Any] = dataclasses.field(default_factory=dict)
    settings: dict[str, Any] = dataclasses.field(default_factory=dict)  # what resume compares
    valid_seconds: float = 0.0
    weight_average: dict[str, Any] | None = None
    ranks_rng: list[Any] | None = None  # DDP: every rank's dropout stream
    format: int = STATE_FORMAT

    def to_saved(self) -> dict[str, Any]:
        """What is written: plain types and tensors (read back with weights_only=True)."""
        fields = (f.name for f in dataclasses.fields(self))
        return {k: v for k in fields if (v := getattr(self, k)) is not None}

    @classmethod
    def from_saved(cls, raw: Any, path: str | Path) -> SavedState:
        """A loaded state checked and brought to today's format; a state from a newer nmt, or
        something else, is a one-line error naming the file."""
        if not isinstance(raw, dict) or (absent := [k for k in _STATE_NEEDS if k not in raw]):
            what = f"no {absent[0]!r}" if isinstance(raw, dict) else type(raw).__name__
            raise NmtError(f"{path}: not a trainer state ({what})")
        check_format_version(path, raw.get("format"), STATE_FORMAT, "trainer state")
        known = {f.name for f in dataclasses.fields(cls)}
        fields = {k: v for k, v in raw.items() if k in known and v is not None}
        return cls(**{**fields, "format": STATE_FORMAT})


def read_state(path: str | Path, device: Any = "cpu") -> SavedState:
    """MODEL_DIR's trainer state, loaded (`load_state`) and checked (`SavedState.from_saved`)."""
    return SavedState.from_saved(load_state(path, device), path)


def load_state(path: str | Path, device: Any = "cpu") -> dict[str, Any]:
    """Load a trainer state with weights_only=True; a damaged file is a one-line error."""
    import torch

    path = Path(path)
    if not path.exists():
        raise NmtError(f"{path}: trainer state not found (cannot resume)")
    try:
        return torch.load(path, map_location=device, weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means a bad file
        raise NmtError(f"{path}: cannot read trainer state ({type(e).__name__}: {e})") from None
