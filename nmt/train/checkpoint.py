"""Checkpoints: safetensors weights for translation, a weights_only trainer state for exact resume.

MODEL_DIR/checkpoints/
    last.safetensors, last.state.pt   newest weights; trainer state (model, optimizer, RNGs,
                                      data position ...) in one file so the pair is never torn
    best.safetensors                  best validation score so far
    step-N.safetensors                kept when among the `keep_best` best or `keep_last` newest
    index.json                        step, metric and score of every kept step-N file
    averaged.safetensors, default.json   averaged weights, and which of best / averaged
                                      `--checkpoint default` loads (nmt.train.selection)

Every file is written to a temporary name and renamed, so a crash mid-write leaves the previous
file intact. State is loaded with `torch.load(weights_only=True)`: tensors and plain types only,
which is why RNG states are converted to tensors before saving.
"""

from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nmt.dirs.model import ModelDir
from nmt.dirs.state import SavedState, read_state
from nmt.dirs.weights import save_weights, tensor_bytes, weights_step
from nmt.errors import NmtError
from nmt.textio import atomic_write, publishing

_STEP = re.compile(r"^step-(\d+)\.safetensors$")


def rng_state() -> dict[str, Any]:
    """Every RNG a training run draws from, as tensors and plain values (weights_only-safe)."""
    np_name, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    py_version, py_keys, py_gauss = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "name": str(np_name),
            "keys": torch.from_numpy(np.asarray(np_keys, dtype=np.int64)),
            "pos": int(np_pos),
            "has_gauss": int(np_has_gauss),
            "gauss": float(np_gauss),
        },
        "python": {
            "version": int(py_version),
            "keys": torch.tensor(py_keys, dtype=torch.int64),
            "gauss": py_gauss,
        },
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what `rng_state` captured."""
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state(
        (n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"])
    )
    p = state["python"]
    random.setstate((p["version"], tuple(int(k) for k in p["keys"].tolist()), p["gauss"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_state(path: str | Path, state: dict[str, Any]) -> None:
    """torch.save to a temporary file beside `path`, then publish it (fsync, rename, mode); a
    full disk is one line naming `path` (torch reports it as a RuntimeError of its zip writer)."""
    with publishing(path, needed=tensor_bytes(state)) as tmp, open(tmp, "wb") as f:
        torch.save(state, f)


def capture(
    model: Any, optimizer: Any, scaler: Any, train_state: dict[str, Any], world_size: int
) -> SavedState:
    """Everything `--resume` needs, as tensors and plain types."""
    return SavedState(
        model=model.state_dict(),
        optimizer=optimizer.state_dict(),
        scaler=scaler.state_dict() if scaler is not None else {},
        train_state=train_state,
        rng=rng_state(),
        world_size=world_size,
    )


def restore(path: Path, model: Any, optimizer: Any, scaler: Any) -> SavedState:
    """Load a saved state into the live model, optimizer and scaler; return it (counters, RNGs)."""
    st = read_state(path, "cpu")
    try:
        model.load_state_dict(st.model)
    except RuntimeError:
        raise NmtError(
            f"{path}: the saved model does not match this config's model section; "
            "resume with the same model settings (omit --preset/CONFIG to reuse the saved ones)"
        ) from None
    optimizer.load_state_dict(st.optimizer)
    if scaler is not None and st.scaler:
        scaler.load_state_dict(st.scaler)
    return st


class Checkpoints:
    """The checkpoints folder of one model directory: write, rank, prune."""

    def __init__(self, model_dir: ModelDir, keep_best: int = 3, keep_last: int = 5) -> None:
        self.model_dir = model_dir
        self.dir = model_dir.checkpoints
        self.keep_best = keep_best
        self.keep_last = keep_last

    @property
    def state_path(self) -> Path:
        """Where the resumable trainer state lives."""
        return self.model_dir.state_path

    def exists(self) -> bool:
        """Whether a previous run left anything here."""
        return self.model_dir.has_checkpoints()

    def save_last(self, model: Any, state: SavedState) -> None:
        """Write last.safetensors and the full trainer state (which embeds the weights too)."""
        save_state(self.state_path, state.to_saved())
        step = state.train_state.get("step")
        save_weights(model, self.model_dir.weights("last"), step)

    def read_index(self) -> list[dict[str, Any]]:
        """Kept step checkpoints with their scores, oldest first."""
        path = self.model_dir.index_path
        if not path.exists():
            return []
        try:
            entries = json.loads(path.read_text(encoding="utf-8"))
            return sorted(entries, key=lambda e: e["step"])
        except (ValueError, TypeError, KeyError) as e:  # UnicodeDecodeError is a ValueError
            raise NmtError(f"{path}: not a checkpoint index ({type(e).__name__}: {e})") from None

    def _write_index(self, entries: list[dict[str, Any]]) -> None:
        with atomic_write(self.model_dir.index_path) as f:
            json.dump(sorted(entries, key=lambda e: e["step"]), f, indent=1)

    def save_step(self, model: Any, step: int, metric: str, score: float, is_best: bool) -> None:
        """Save step-N (and best when it is), then drop step files no longer worth keeping."""
        save_weights(model, self.model_dir.step_weights(step), step)
        if is_best:
            save_weights(model, self.model_dir.weights("best"), step)
        entries = [e for e in self.read_index() if e["step"] != step]
        entries.append({"step": step, "metric": metric, "score": score})
        keep = {e["step"] for e in ranked(entries)[: self.keep_best]}
        keep |= {e["step"] for e in entries[-self.keep_last :]} if self.keep_last > 0 else set()
        kept = [e for e in entries if e["step"] in keep]
        self._write_index(kept)
        for path in self.model_dir.kept_steps():
            m = _STEP.match(path.name)
            if m and int(m.group(1)) not in keep:
                path.unlink(missing_ok=True)

    def truncate_after(self, step: int, best_step: int = 0) -> None:
        """Forget what a run that died after the resumed state wrote: newer step files (indexed
        or not) and a best.safetensors newer than the state (re-pointed to `best_step`)."""
        entries = self.read_index()
        for path in self.model_dir.kept_steps():
            m = _STEP.match(path.name)
            if m and int(m.group(1)) > step:
                path.unlink(missing_ok=True)
        if any(e["step"] > step for e in entries):
            self._write_index([e for e in entries if e["step"] <= step])
        best = self.model_dir.weights("best")
        best_at = weights_step(best) if best.exists() else None
        if best_at is not None and best_at > step:
            kept = self.model_dir.step_weights(best_step)
            if best_step > 0 and kept.exists():
                with publishing(best, needed=kept.stat().st_size) as tmp:
                    shutil.copyfile(kept, tmp)
            else:
                best.unlink()


def is_better(metric: str, score: float, best: float | None) -> bool:
    """Whether `score` beats the best so far on `metric` (higher BLEU, lower loss); the first
    score always does."""
    return best is None or _merit(metric, score) > _merit(metric, best)


def ranked(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Best first: higher BLEU, or lower loss; ties go to the later step."""
    return sorted(
        entries, key=lambda e: (_merit(e["metric"], float(e["score"])), e["step"]), reverse=True
    )


def _merit(metric: str, score: float) -> float:
    """A score on a scale where higher is better: BLEU as it is, loss negated."""
    return -score if metric == "loss" else score
