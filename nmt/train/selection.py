"""Which weights translation loads: the best on validation, averages of the kept step
checkpoints, and the choice of what `--checkpoint default` means.

MODEL_DIR/checkpoints/
    averaged.safetensors   written by `nmt average`, or at the end of training (training.average_last
                           N: the N newest step-N files; training.average_best N: the N best on
                           validation)
    default.json           which of best / averaged `--checkpoint default` loads: training
                           validates the average and picks it when it beats best (else best)
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from nmt.dirs.model import ModelDir
from nmt.dirs.weights import load_weights, tensor_bytes
from nmt.errors import NmtError
from nmt.textio import publishing
from nmt.train.checkpoint import Checkpoints, is_better, ranked

if TYPE_CHECKING:
    from nmt.config import TrainingConfig
    from nmt.train.log import Reporter
    from nmt.train.state import TrainState
    from nmt.train.validation import ValidResult


def record(st: TrainState, metric: str, result: ValidResult) -> bool:
    """Count a validation: a new best resets patience, any other uses it up. Returns whether it
    was the best so far (what best.safetensors then holds)."""
    score = result.score(metric)
    better = is_better(metric, score, st.best_score)
    if better:
        st.best_score, st.best_step, st.bad_validations = score, st.step, 0
    else:
        st.bad_validations += 1
    return better


def average_and_choose(
    model: nn.Module,
    model_dir: ModelDir,
    tc: TrainingConfig,
    st: TrainState,
    device: torch.device,
    validate: Callable[[nn.Module], ValidResult | None],
    report: Reporter,
) -> tuple[str, float | None] | None:
    """Average the newest `average_last` (or the `average_best` best) step checkpoints, validate
    the average, and make it what `--checkpoint default` loads when it beats best on the
    early-stopping metric. Returns the default checkpoint and its score; None when there was
    nothing to average (or the validation was interrupted)."""
    n = min(tc.average_last or tc.average_best, len(Checkpoints(model_dir).read_index()))
    if n < 2:
        return None
    t0 = time.monotonic()
    rule = {"best": n} if tc.average_best else {"last": n}
    path, steps = average(model_dir, **rule)
    averaged = copy.deepcopy(model)
    load_weights(averaged, path, device=str(device))
    result = validate(averaged)
    if result is None:
        return None
    metric = tc.early_stop_metric
    score = result.score(metric)
    better = is_better(metric, score, st.best_score)
    chosen = "averaged" if better else "best"
    final = (chosen, float(score) if better else st.best_score)
    model_dir.write_default(
        {
            "checkpoint": chosen,
            "metric": metric,
            "score": final[1],
            "steps": steps,
            "best_step": st.best_step,
            "best_score": st.best_score,
            "averaged_score": score,
        },
    )
    report.averaged_event(st, steps, result, chosen, time.monotonic() - t0)
    return final


def average(model_dir: ModelDir, last: int = 0, best: int = 0) -> tuple[Path, list[int]]:
    """Average the newest `last` or the `best` best step checkpoints into averaged.safetensors."""
    from safetensors.torch import save_file

    for flag, value in (("--last", last), ("--best", best)):
        if value < 0:
            raise NmtError(f"{flag} must be at least 1, got {value}")
    if (last > 0) == (best > 0):
        raise NmtError("choose one of --last N or --best N (N >= 1)")
    ckpt = Checkpoints(model_dir)
    if not ckpt.dir.is_dir():
        raise NmtError(
            f"{ckpt.dir}: no checkpoints (is {model_dir.path} a trained model directory?)"
        )
    entries = [e for e in ckpt.read_index() if model_dir.step_weights(e["step"]).exists()]
    n = last or best
    if len(entries) < n:
        raise NmtError(
            f"{ckpt.dir}: asked to average {n} checkpoints but only {len(entries)} are kept "
            f"(steps: {', '.join(str(e['step']) for e in entries) or 'none'}); "
            "raise training.keep_last / training.keep_best when training"
        )
    cfg = model_dir.saved_config()
    if last and cfg is not None and n > cfg.training.keep_last:
        raise NmtError(
            f"{ckpt.dir}: --last {n}: training kept only the {cfg.training.keep_last} newest step "
            "checkpoints (training.keep_last); the older ones kept are the best, not the next "
            f"newest: use --last {cfg.training.keep_last} or fewer, or --best N"
        )
    chosen = entries[-n:] if last else ranked(entries)[:n]
    steps = sorted(e["step"] for e in chosen)
    total: dict[str, torch.Tensor] = {}
    dtypes: dict[str, torch.dtype] = {}
    metadata: dict[str, str] | None = None
    for step in steps:
        metadata = _accumulate(model_dir.step_weights(step), total, dtypes)
    averaged = {
        k: (v / len(steps)).to(dtypes[k]).contiguous() if v.is_floating_point() else v
        for k, v in total.items()
    }
    out = model_dir.weights("averaged")
    with publishing(out, needed=tensor_bytes(averaged)) as tmp:
        save_file(averaged, tmp, metadata=metadata)
    model_dir.clear_default(only="averaged")  # the new average has not been validated
    return out, steps


def _accumulate(
    path: Path, total: dict[str, torch.Tensor], dtypes: dict[str, torch.dtype]
) -> dict[str, str] | None:
    """Add one checkpoint's tensors to `total` (float64 sums); returns its metadata. A damaged
    file, or one of another model, is a one-line error naming it."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            names = set(f.keys())
            if total and names != set(total):
                raise NmtError(f"{path}: tensors differ from the other checkpoints")
            for name in names:
                t = f.get_tensor(name)
                if name in total and total[name].shape != t.shape:
                    raise NmtError(
                        f"{path}: tensors differ from the other checkpoints ({name} has shape "
                        f"{tuple(t.shape)}, not {tuple(total[name].shape)})"
                    )
                dtypes.setdefault(name, t.dtype)
                acc = t.to(torch.float64) if t.is_floating_point() else t
                total[name] = total[name] + acc if name in total and t.is_floating_point() else acc
            return f.metadata()
    except SafetensorError as e:
        raise NmtError(f"{path}: damaged or not a safetensors file ({e})") from None
