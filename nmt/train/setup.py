"""How a training run is assembled before its first step: the process's threads and group, the
directory checks, precisions, the model (fine-tuning's initial weights included), the pairs it
trains on, the resumed state, the weight average, the compile / DDP wrappers, its RNGs and
MODEL_DIR, and the line that announces it.

Each piece is a small function of the config and what came before, so `Trainer.__init__` reads
as the order in which a run is put together (the order the seeded RNGs are drawn in).
"""

from __future__ import annotations

import contextlib
import random
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from nmt.config import Config, TrainingConfig, parse_duration
from nmt.data import batching
from nmt.data.resegment import Resegmenter
from nmt.device import (
    VALID_BF16_MIN_WIDTH,
    autocast_for,
    denormals_flushed,
    emulated_bf16_warning,
    inference_precision,
    resolve_precision,
)
from nmt.dirs.model import ModelDir
from nmt.dirs.opening import open_initial
from nmt.errors import NmtError
from nmt.runtime import usable_cpus
from nmt.train import checkpoint, distributed
from nmt.train.ema import WeightAverage
from nmt.train.finetune import (
    check_init_outside,
    init_weights,
    initial_config,
    preset_over_initial,
    write_tokenizer,
)
from nmt.train.log import Log, Metrics
from nmt.train.schedule import Budget
from nmt.train.state import (
    TrainState,
    check_metric,
    check_position,
    position_changes,
    retune_optimizer,
)
from nmt.train.validation import Data, over_limit

if TYPE_CHECKING:
    from nmt.models import Model


@dataclass
class Precisions:
    """What training computes in and what validation decodes in, each with its autocast."""

    train: str
    autocast: Callable[[], Any]
    valid: str
    valid_autocast: Callable[[], Any]


@dataclass(frozen=True)
class Run:
    """What the setup steps of one run read, passed whole instead of as loose arguments: its
    config, precisions, directories, device and process group, data, log and whether it
    resumes."""

    cfg: Config
    prec: Precisions
    data: Data
    out: ModelDir
    device: torch.device
    dist: distributed.DistInfo
    log: Log
    resume: bool

    @property
    def tc(self) -> TrainingConfig:
        """The training section."""
        return self.cfg.training


def precisions(cfg: Config, device: torch.device) -> Precisions:
    """`auto` resolved for training; validation decodes in training's precision, except that on
    a CPU under `auto` it keeps fp32 below d_model 256: its decoding shapes, new at every
    validation, would otherwise fill oneDNN's kernel cache by GBs over a run."""
    configured = cfg.training.precision
    train = resolve_precision(configured, device)
    autocast = autocast_for(train, device)  # fp16 on a CPU: training's error comes first
    width = getattr(cfg.model, "d_model", None)
    valid = inference_precision(configured, device, width, min_width=VALID_BF16_MIN_WIDTH)
    return Precisions(train, autocast, valid, autocast_for(valid, device))


def run_budget(tc: TrainingConfig) -> Budget:
    """The run's limits in steps, epochs and time."""
    return Budget(tc.max_steps, tc.max_epochs, parse_duration(tc.max_time), tc.accumulate)


def seed_all(seed: int) -> None:
    """Seed every RNG a run draws from (initialisation, dropout)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def build_model(
    cfg: Config,
    data: Data,
    device: torch.device,
    resume: bool,
    init: ModelDir | None = None,
) -> tuple[Model, dict[str, Any] | None]:
    """The model on `device` (unwrapped: validation and checkpoints use it) and, when fine-tuning,
    what its initial weights were (a resumed run continues from its own weights instead): those of
    `init`, else of the directory training.init_from names."""
    from nmt.models import build

    built = build(cfg.model, data.vocab).to(device)
    tc = cfg.training
    if not tc.init_from or resume:
        return built, None
    initial = init if init is not None else open_initial(tc.init_from)
    return built, init_weights(built, cfg.model, initial, tc.init_checkpoint, data.source)


def grad_scaler(precision: str) -> torch.amp.GradScaler | None:
    """fp16 trains with a loss scaler; the other precisions need none."""
    return torch.amp.GradScaler("cuda") if precision == "fp16" else None


def keep_mask(run: Run, src_len: np.ndarray, tgt_len: np.ndarray, max_positions: int) -> np.ndarray:
    """Which training pairs fit max_tokens and the model's positions; warn about the rest (and
    about valid pairs that validation will cut, and about emulated bf16)."""
    data, log = run.data, run.log
    keep = batching.keep_mask(src_len, tgt_len, run.tc.max_tokens, max_positions)
    dropped = int((~keep).sum())
    if dropped:
        log.warn(
            f"{dropped} training pairs are longer than training.max_tokens or "
            "model.max_positions allow and are skipped"
        )
    over = over_limit(data.valid, max_positions) if data.valid is not None else 0
    if over:
        log.warn(
            f"valid: {over} sentences over model.max_positions {max_positions} "
            "truncated for validation"
        )
    bf16_warning = emulated_bf16_warning(run.prec.train, run.device)
    if bf16_warning:
        log.warn(bf16_warning)
    if keep.sum() == 0:
        raise NmtError(f"{run.data.source.path}: no training pair fits training.max_tokens")
    return keep


def resegmenter(data: Data, tc: TrainingConfig, device: torch.device) -> Resegmenter | None:
    """Subword sampling's segmenter (a new segmentation every epoch); None without sampling."""
    if not tc.subword_alpha:
        return None
    tokenizers = data.source.tokenizers
    return Resegmenter(tokenizers, data.train, tc.subword_alpha, background=device.type != "cpu")


@dataclass
class Resumed:
    """What a run continues from: its counters, RNG states, the last validation's duration
    (max_time keeps room for it) and the weight average. Fresh runs start from the defaults."""

    state: TrainState = field(default_factory=TrainState)
    rng: dict[str, Any] | None = None
    ranks_rng: list[torch.Tensor] | None = None  # DDP: every rank's dropout stream
    valid_seconds: float = 0.0
    average: dict[str, Any] | None = None


def restore(
    run: Run,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler | None,
    settings: dict[str, Any],
) -> Resumed:
    """Load the saved state into the model, optimizer and scaler; refuse a data position that now
    means other batches (or, opted in, start the epoch over)."""
    tc, log = run.tc, run.log
    saved = checkpoint.restore(run.out.state_path, model, optimizer, scaler)
    state = TrainState(**saved.train_state)
    check_metric(saved, settings)
    changes = position_changes(saved, settings, run.dist.world_size)
    if check_position(changes, state.position, tc.reset_data_position):
        log.info(f"{'; '.join(changes)}: epoch {state.epoch} starts over")
        state.position = 0
    retuned = retune_optimizer(optimizer, saved, tc)
    if retuned:
        log.info(f"optimizer settings changed: {', '.join(retuned)}")
    average = saved.weight_average
    if tc.ema_decay and average is None:
        log.info("the saved state has no weight average: it starts from these weights")
    return Resumed(state, saved.rng, saved.ranks_rng, float(saved.valid_seconds), average)


def weight_average(
    model: nn.Module, tc: TrainingConfig, saved: dict[str, Any] | None
) -> WeightAverage | None:
    """The moving average of the weights (training.ema_decay), continued from a resumed state."""
    if not tc.ema_decay:
        return None
    average = WeightAverage(model, tc.ema_decay)
    if saved is not None:
        average.load_state_dict(saved)
    return average


def wrap_for_training(
    model: nn.Module, tc: TrainingConfig, dist: distributed.DistInfo, device: torch.device
) -> nn.Module:
    """torch.compile and DDP wrappers around the model, as the config and launch ask."""
    wrapped = model
    if tc.compile:
        wrapped = cast(nn.Module, torch.compile(wrapped, dynamic=True))
    if dist.enabled:
        ids = [device.index] if device.type == "cuda" else None
        wrapped = DistributedDataParallel(wrapped, device_ids=ids)
    return wrapped


def prepare_model_dir(
    run: Run, ckpt: checkpoint.Checkpoints, metrics: Metrics, st: TrainState
) -> None:
    """Forget what a run that died after the resumed state wrote, clear the `default` choice
    (made again at the end), open metrics.jsonl and write the model's metadata."""
    is_main, d = run.dist.is_main, run.data
    if is_main and run.resume:
        ckpt.truncate_after(st.step, st.best_step)
    if is_main:
        run.out.clear_default()
    metrics.open(st.step if run.resume else None)
    if is_main:
        run.out.write_meta(run.cfg, d.source.languages, d.source.spm_paths, d.vocab)
        write_tokenizer(run.out, d.source)  # an imported model's vocabularies


def set_rngs(
    resumed: Resumed, seed: int, step: int, dist: distributed.DistInfo, device: torch.device
) -> None:
    """Continue the saved RNG streams (each rank its own); other ranks of a fresh run draw
    dropout from streams of their own."""
    if resumed.rng is not None:
        checkpoint.set_rng_state(resumed.rng)
        ranks = resumed.ranks_rng
        if ranks is not None and len(ranks) == dist.world_size:
            distributed.set_rng(ranks[dist.rank], device)  # this rank's own stream
        elif dist.rank > 0:  # a state saved by a single process or another world size
            torch.manual_seed(seed * 1000 + dist.rank + step)
    elif dist.rank > 0:
        torch.manual_seed(seed * 1000 + dist.rank)


def announce(
    run: Run, st: TrainState, init: dict[str, Any] | None, n_params: int, pairs: int
) -> str:
    """The first line: what trains, where (device and world size), in what precision, on how
    many pairs, until when, and into which directory."""
    cfg, tc, prec = run.cfg, run.tc, run.prec
    where = f"{run.device} x{run.dist.world_size}"
    what = f"resuming at step {st.step} (epoch {st.epoch})" if run.resume else "training"
    limits = [
        f"{k} {v}" for k, v in (("max_steps", tc.max_steps), ("max_epochs", tc.max_epochs)) if v
    ] + ([f"max_time {tc.max_time}"] if parse_duration(tc.max_time) else [])
    precision = prec.train + (" (auto)" if tc.precision == "auto" else "")
    if prec.valid != prec.train:
        precision += f" (validation {prec.valid})"
    if tc.subword_alpha:
        precision += f", subword sampling alpha {tc.subword_alpha:g}"
    if tc.ema_decay:
        precision += f", weight average decay {tc.ema_decay:g}"
    if init is not None:
        step = init["step"]
        what += f" from {init['checkpoint']}" + (f" (step {step})" if step else "")
        if rows := init.get("new_rows"):
            what += f" + {max(rows.values()):,} new vocabulary rows (mean-initialised)"
    return (
        f"{what} {cfg.model.type} ({n_params:,} parameters) on {where}, {precision}, "
        f"{pairs:,} training pairs"
        + (f", {', '.join(limits)}" if limits else "")
        + f" -> {run.out.path}"
    )


@contextlib.contextmanager
def process(
    device: torch.device, dist: distributed.DistInfo, threads: int | None
) -> Iterator[None]:
    """The process's CPU threads (by default the cores shared among the local processes), its
    subnormal floats flushed to zero (nmt.device.denormals_flushed) and its process group for the
    run; all undone afterwards. A collective that fails (another process died, or waited past
    NMT_DIST_TIMEOUT) ends the run with a one-line error."""
    old_threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(threads or max(1, usable_cpus() // dist.local_world_size))
    distributed.init(dist, device)
    try:
        with denormals_flushed(device):
            yield
    except RuntimeError as e:
        lost = distributed.lost_peer(e, dist) if dist.enabled else None
        if lost is None:
            raise
        raise lost from e
    finally:
        distributed.cleanup(dist)
        torch.set_num_threads(old_threads)
        sys.stderr.flush()


def run_config(
    config: str | None,
    preset: str | None,
    overrides: list[str],
    flags: dict[str, Any],
    resumed: ModelDir | None = None,
    init: ModelDir | None = None,
) -> Config:
    """`nmt train`'s config (preset < CONFIG.yaml < --set < flags): `--resume` without CONFIG or
    --preset continues the resumed run's own; `--init-from` without them starts from the initial
    model's, and with --preset alone lays the preset over it."""
    from nmt.config import resolve_train_config

    if init is not None:
        flags = {**flags, "init_from": str(init.path)}
        if preset and not config:
            return preset_over_initial(preset, overrides, init, flags)
    base = resumed.config if resumed is not None else None
    if base is None and init is not None:
        base = initial_config(init)
    return resolve_train_config(config, preset, overrides, flags, base)


def check_dirs(
    cfg: Config, out: ModelDir, resume: bool, force: bool, warn: Callable[[str], None]
) -> bool:
    """Refuse an output directory that would lose a trained run, or the initial weights; True
    when there is a state to resume."""
    if not (resume and out.state_path.exists()):  # the init weights load
        check_init_outside(cfg.training, out)
    return out.check_training(resume, force, cfg.model, warn)
