"""The training loop: token-bucketed batches, label-smoothed loss, validation, early stopping,
exact resume, and DDP when started by torchrun.

`train(cfg, data_dir, model_dir)` is the whole job; `nmt train` is a thin wrapper around it.
The step loop does one host sync per update (the gradient norm, needed to skip non-finite
updates); everything else that costs time (validation, checkpoints, logging) runs on intervals.
What a run prints and records lives in nmt.train.log, validation in nmt.train.validation, the
learning-rate schedule and budget in nmt.train.schedule, the MODEL_DIR lock and checks in nmt.modeldir.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import random
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from nmt import modeldir
from nmt.config import Config, parse_duration
from nmt.data import batching
from nmt.data.resegment import Resegmenter, Segmentation
from nmt.device import (
    VALID_BF16_MIN_WIDTH,
    autocast_for,
    cpu_threads,
    emulated_bf16_warning,
    inference_precision,
    keep_freed_memory,
    resolve_device,
    resolve_precision,
)
from nmt.errors import NmtError
from nmt.runtime import KERNEL_CACHE_VARIABLES, peak_rss_mb, size_kernel_caches
from nmt.train import checkpoint, distributed
from nmt.train.checkpoint import Checkpoints, set_rng_state
from nmt.train.ema import WeightAverage
from nmt.train.finetune import check_init_outside, init_weights
from nmt.train.log import Log, Metrics, Reporter, TrainSummary, summarize
from nmt.train.loss import LossHead
from nmt.train.schedule import Budget, SaveClock, Stop, lr_at, stop_signals
from nmt.train.state import (
    TrainState,
    check_metric,
    check_position,
    make_optimizer,
    position_changes,
    retune_optimizer,
    run_settings,
)
from nmt.train.validation import ValidResult, evaluate, load_data, over_limit

__all__ = ["TrainState", "TrainSummary", "Trainer", "train"]

MAX_NONFINITE = 10


class Trainer:
    """One training run. Every piece of its state is built in __init__; `run()` trains."""

    def __init__(
        self,
        cfg: Config,
        data_dir: Path,
        model_dir: Path,
        device: torch.device,
        dist: distributed.DistInfo,
        resume: bool,
        quiet: bool,
    ) -> None:
        from nmt.models import build, count_parameters

        tc = cfg.training
        self.cfg, self.tc = cfg, tc
        self.data_dir, self.model_dir, self.device, self.dist = data_dir, model_dir, device, dist
        self.resume = resume
        self.log = Log(quiet or not dist.is_main)
        self.precision = resolve_precision(tc.precision, device)  # auto -> fp32/bf16/fp16
        self.autocast = autocast_for(self.precision, device)
        # Validation decodes as `nmt translate` does by default, except that on a CPU it keeps
        # fp32 below d_model 256 (`nmt translate` from 128): its decoding shapes, new at every
        # validation, would otherwise fill oneDNN's kernel cache by GBs over a run (DESIGN.md).
        width = getattr(cfg.model, "d_model", None)
        self.valid_precision = inference_precision(
            tc.precision, device, width, min_width=VALID_BF16_MIN_WIDTH
        )
        self.valid_autocast = autocast_for(self.valid_precision, device)
        if device.type == "cpu":
            keep_freed_memory()  # a step's large activations reuse heap memory, no page faults
        self.budget = Budget(
            tc.max_steps, tc.max_epochs, parse_duration(tc.max_time), tc.accumulate
        )
        _seed_all(tc.seed)
        self.data = load_data(data_dir, tc.valid_max_sentences)
        self.model = build(cfg.model, self.data.vocab).to(device)  # unwrapped: validation, ckpts
        self.init: dict[str, Any] | None = None  # fine-tuning: the weights this run started from
        if tc.init_from and not resume:  # a resumed run continues from its own weights
            self.init = init_weights(
                self.model, cfg.model, tc.init_from, tc.init_checkpoint, data_dir,
                (self.data.src_spm, self.data.tgt_spm),
            )  # fmt: skip
        self.n_params = count_parameters(self.model)
        self.optimizer = make_optimizer(self.model, tc, device)
        self.scaler = torch.amp.GradScaler("cuda") if self.precision == "fp16" else None
        self.src_len = np.asarray(self.data.train.src.lengths)
        self.tgt_len = np.asarray(self.data.train.tgt.lengths)
        self.keep = self._keep_mask()
        self.segmentation = Segmentation(self.data.train.src, self.data.train.tgt)
        self.resegmenter = (
            Resegmenter(
                data_dir, self.data.train, tc.subword_alpha, background=device.type != "cpu"
            )
            if tc.subword_alpha
            else None
        )
        self.state = TrainState()
        self.saved_rng: dict[str, Any] | None = None  # RNG states to restore when the run starts
        self.saved_ranks_rng: list[torch.Tensor] | None = None
        self.settings = run_settings(tc, data_dir)  # saved with the state, checked on resume
        self.valid_seconds = 0.0  # the last validation's duration (max_time keeps room for it)
        saved_average = self._restore() if resume else None
        self.average = WeightAverage(self.model, tc.ema_decay) if tc.ema_decay else None
        if self.average is not None and saved_average is not None:
            self.average.load_state_dict(saved_average)
        # What the update step calls: the model with its fused loss, under compile / DDP.
        self.step_model = self._wrap(LossHead(self.model, tc.label_smoothing))
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.ckpt = Checkpoints(model_dir, tc.keep_best, tc.keep_last)
        self.save_clock = SaveClock(tc.save_every, parse_duration(tc.save_every_time))
        self.report = Reporter(self.log, Metrics(model_dir, dist.is_main))
        self.stop_code: int = Stop.NONE  # the largest any process asked for
        self.train_seconds = 0.0  # time in update steps, this process
        self.tokens_at_start = self.state.tokens
        self.final: tuple[str, float | None] = ("best", None)  # `default` checkpoint, its score

    def _keep_mask(self) -> np.ndarray:
        """Which training pairs fit max_tokens and the model's positions; warn about the rest
        (and about valid pairs that validation will cut)."""
        tc = self.tc
        max_pos = self.model.max_positions
        keep = batching.keep_mask(self.src_len, self.tgt_len, tc.max_tokens, max_pos)
        dropped = int((~keep).sum())
        if dropped:
            self.log.warn(
                f"{dropped} training pairs are longer than training.max_tokens or "
                "model.max_positions allow and are skipped"
            )
        valid = self.data.valid
        over = over_limit(valid, max_pos) if valid is not None else 0
        if over:
            self.log.warn(
                f"valid: {over} sentences over model.max_positions {max_pos} "
                "truncated for validation"
            )
        bf16_warning = emulated_bf16_warning(self.precision, self.device)
        if bf16_warning:
            self.log.warn(bf16_warning)
        if keep.sum() == 0:
            raise NmtError(f"{self.data_dir}: no training pair fits training.max_tokens")
        return keep

    def _wrap(self, model: nn.Module) -> nn.Module:
        """torch.compile and DDP wrappers around the model, as the config and launch ask."""
        wrapped = model
        if self.tc.compile:
            wrapped = cast(nn.Module, torch.compile(wrapped, dynamic=True))
        if self.dist.enabled:
            ids = [self.device.index] if self.device.type == "cuda" else None
            wrapped = DistributedDataParallel(wrapped, device_ids=ids)
        return wrapped

    @property
    def eval_model(self) -> nn.Module:
        """What validation scores and checkpoints hold: the weight average when there is one."""
        return self.average.model if self.average is not None else self.model

    def _restore(self) -> dict[str, Any] | None:
        """Load the saved state; refuse a data position that now means other batches. Returns
        the saved weight average, if the run kept one."""
        path = modeldir.state_path(self.model_dir)
        saved = checkpoint.restore(path, self.model, self.optimizer, self.scaler)
        self.state, self.saved_rng = TrainState(**saved["train_state"]), saved["rng"]
        self.saved_ranks_rng = saved.get("ranks_rng")  # DDP: every rank's dropout stream
        check_metric(saved, self.settings)
        changes = position_changes(saved, self.settings, self.dist.world_size)
        if check_position(changes, self.state.position, self.tc.reset_data_position):
            self.log.info(f"{'; '.join(changes)}: epoch {self.state.epoch} starts over")
            self.state.position = 0
        retuned = retune_optimizer(self.optimizer, saved, self.tc)
        if retuned:
            self.log.info(f"optimizer settings changed: {', '.join(retuned)}")
        self.valid_seconds = float(saved.get("valid_seconds", 0.0))  # max_time's room, as before
        average = saved.get("weight_average")
        if self.tc.ema_decay and average is None:
            self.log.info("the saved state has no weight average: it starts from these weights")
        return average

    def trainer_state(self) -> dict[str, Any]:
        """Everything `--resume` needs, as tensors and plain types."""
        st, ws = asdict(self.state), self.dist.world_size
        state = checkpoint.capture(self.model, self.optimizer, self.scaler, st, ws)
        if self.average is not None:
            state["weight_average"] = self.average.state_dict()
        return {**state, "settings": self.settings, "valid_seconds": self.valid_seconds}

    def save_last(self) -> None:
        """Write last + the trainer state (main process) and restart the save clock."""
        self.state.elapsed = self.budget.elapsed()
        ranks_rng = distributed.gather_rng(self.dist, self.device)  # every process takes part
        if self.dist.is_main:
            state = self.trainer_state()
            if ranks_rng is not None:
                state["ranks_rng"] = ranks_rng
            self.ckpt.save_last(self.eval_model, state)
        self.save_clock.saved()

    # -- the run --

    def run(self) -> TrainSummary:
        """Train until a limit, early stopping or a signal; return the summary."""
        st = self.state
        self._begin()
        with stop_signals(self._request_stop, self._interrupted), self.report.live():
            self._loop()
            if not self._interrupted():
                if self._can_validate() and st.last_valid_step != st.step and st.step > 0:
                    self.validate()
            if st.step > 0:
                self.save_last()
            if self.dist.is_main and st.step > 0 and not self._can_validate():
                # nothing to rank by: the newest is the best
                modeldir.save_weights(self.eval_model, self.ckpt.dir / "best.safetensors")
            if self.dist.is_main and st.step > 0 and not self._interrupted():
                self.average_and_choose()
        summary = self._summary()
        self.report.end_event(summary)
        self.report.metrics.close()
        return summary

    def average_and_choose(self) -> None:
        """Average the newest `average_last` (or the `average_best` best) step checkpoints,
        validate the average, and make it what `--checkpoint default` loads when it beats best on
        the early-stopping metric."""
        tc = self.tc
        n = min(tc.average_last or tc.average_best, len(self.ckpt.read_index()))
        if n < 2 or self.data.valid is None:
            return
        t0 = time.monotonic()
        rule = {"best": n} if tc.average_best else {"last": n}
        path, steps = checkpoint.average(self.model_dir, **rule)
        averaged = copy.deepcopy(self.model)
        modeldir.load_weights(averaged, path, device=str(self.device))
        dec = self.cfg.decoding
        result = evaluate(
            averaged, self.data.valid, self.device, self.valid_autocast, self.tc.max_tokens,
            dec.max_len_a, dec.max_len_b,
        )  # fmt: skip
        if result is None:
            return
        st, metric = self.state, self.tc.early_stop_metric
        score = result.bleu if metric == "bleu" else result.loss
        better = st.best_score is None or (
            score > st.best_score if metric == "bleu" else score < st.best_score
        )
        chosen = "averaged" if better else "best"
        self.final = (chosen, float(score) if better else st.best_score)
        modeldir.write_default(
            self.model_dir,
            {"checkpoint": chosen, "metric": metric, "score": self.final[1], "steps": steps,
             "best_step": st.best_step, "best_score": st.best_score, "averaged_score": score},
        )  # fmt: skip
        self.report.averaged_event(st, steps, result, chosen, time.monotonic() - t0)

    def _begin(self) -> None:
        """Tidy MODEL_DIR for a resumed state, write its metadata, announce, set RNGs and clock."""
        tc, st, dist = self.tc, self.state, self.dist
        if dist.is_main and self.resume:
            self.ckpt.truncate_after(st.step, st.best_step)
        if dist.is_main:
            modeldir.clear_default(self.model_dir)  # chosen again at the end of this run
        self.report.metrics.open(st.step if self.resume else None)
        if dist.is_main:
            d = self.data
            modeldir.write_meta(
                self.model_dir, self.cfg, d.src_lang, d.tgt_lang, d.src_spm, d.tgt_spm, d.vocab
            )
        self._announce()
        caches = {k: os.environ.get(k) for k in KERNEL_CACHE_VARIABLES}
        self.report.start_event(
            st, str(self.device), self.precision, tc.precision, self.valid_precision, self.init,
            caches if self.device.type == "cpu" else None,
        )  # fmt: skip
        if self.saved_rng is not None:
            set_rng_state(self.saved_rng)
            ranks = self.saved_ranks_rng
            if ranks is not None and len(ranks) == dist.world_size:
                distributed.set_rng(ranks[dist.rank], self.device)  # this rank's own stream
            elif dist.rank > 0:  # a state saved by a single process or another world size
                torch.manual_seed(tc.seed * 1000 + dist.rank + st.step)
        elif dist.rank > 0:
            torch.manual_seed(tc.seed * 1000 + dist.rank)
        self.budget.start = time.monotonic() - st.elapsed

    def _loop(self) -> None:
        """Epochs of accumulated steps until something says stop."""
        tc, st = self.tc, self.state
        code = self._limits_reached()
        if not code and tc.max_epochs and st.epoch > tc.max_epochs:
            code = Stop.EPOCHS  # a resumed run whose epochs were already trained
        self.stop_code = distributed.agree_max(code, self.dist, self.device)  # clocks differ
        if self.stop_code:
            return
        while self.stop_code == Stop.NONE:
            src_len, tgt_len, keep = self._epoch_data(st.epoch)
            batches = batching.epoch_batches(
                src_len, tgt_len, tc.max_tokens, tc.seed, st.epoch, keep,
                self.dist.rank, self.dist.world_size,
            )  # fmt: skip
            if not batches:
                raise NmtError(f"{self.data_dir}: not enough training data for one batch per rank")
            if st.position == 0:
                ratio = batching.padding_ratio(batches, src_len, tgt_len)
                self.report.epoch_event(st, batches, ratio)
            self.budget.steps_per_epoch = math.ceil(len(batches) / max(1, tc.accumulate))
            while st.position < len(batches) and self.stop_code == Stop.NONE:
                group = batches[st.position : st.position + max(1, tc.accumulate)]
                self.train_step(group)
                st.position += len(group)
                st.step += 1
                self._after_step()
            if st.position >= len(batches):
                st.epoch += 1
                st.position = 0
                if tc.max_epochs and st.epoch > tc.max_epochs and self.stop_code == Stop.NONE:
                    self.stop_code = distributed.agree_max(Stop.EPOCHS, self.dist, self.device)

    def _epoch_data(self, epoch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(source lengths, target lengths, pairs kept) of the epoch's segmentation; with
        subword sampling a new one every epoch, filtered by the same limits."""
        if self.resegmenter is None:
            return self.src_len, self.tgt_len, self.keep
        self.segmentation = seg = self.resegmenter.epoch(self.tc.seed, epoch)
        src_len, tgt_len = seg.src_len, seg.tgt_len
        keep = batching.keep_mask(src_len, tgt_len, self.tc.max_tokens, self.model.max_positions)
        return src_len, tgt_len, keep

    def train_step(self, group: list[np.ndarray]) -> None:
        """One update from `len(group)` accumulated batches; non-finite updates are skipped."""
        tc, st = self.tc, self.state
        t0 = time.monotonic()
        lr = self.current_lr()
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        seg = self.segmentation
        batches = [batching.collate(seg.src, seg.tgt, idx) for idx in group]
        tokens = sum(b.n_tgt_tokens for b in batches)
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
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        clip = tc.clip_norm if tc.clip_norm > 0 else float("inf")
        gnorm = float(torch.nn.utils.clip_grad_norm_(self.params, clip))
        loss_v, nll_v = float(loss_sum) / tokens, float(nll_sum) / tokens
        finite = math.isfinite(loss_v) and (self.scaler is not None or math.isfinite(gnorm))
        if self.dist.enabled:  # all replicas skip or none: fp16's scalers would drift apart
            finite = distributed.agree_max(int(not finite), self.dist, self.device) == 0
        if finite:
            st.nonfinite_streak = 0
            if self.scaler is not None:
                self.scaler.step(self.optimizer)
                self.scaler.update()
            else:
                self.optimizer.step()
            if self.average is not None:
                self.average.update(st.step)
        else:
            self._skip_update(loss_v)
        self.optimizer.zero_grad(set_to_none=True)
        world_tokens = tokens * self.dist.world_size
        st.tokens += world_tokens
        dt = time.monotonic() - t0
        self.train_seconds += dt
        self.report.window.add(
            world_tokens, loss_v if finite else 0.0, nll_v if finite else 0.0, dt, lr
        )

    def _no_sync(self, skip: bool) -> contextlib.AbstractContextManager[Any]:
        """DDP's no_sync for all but the last accumulated batch (gradients sync once)."""
        if skip and isinstance(self.step_model, DistributedDataParallel):
            return self.step_model.no_sync()
        return contextlib.nullcontext()

    def _skip_update(self, loss: float) -> None:
        """Warn about a non-finite loss; too many in a row means training has diverged."""
        st = self.state
        st.nonfinite_streak += 1
        what = (
            f"loss is {loss} (non-finite)"
            if not math.isfinite(loss)
            else "gradients are non-finite (on this or another process)"
        )
        self.log.warn(
            f"step {st.step + 1}: {what}; update skipped ({st.nonfinite_streak} in a row)"
        )
        if st.nonfinite_streak >= MAX_NONFINITE:
            raise NmtError(
                f"training diverged: {MAX_NONFINITE} non-finite losses in a row at step "
                f"{st.step + 1}; lower training.lr, raise training.warmup or use fp32"
            )

    def current_lr(self) -> float:
        """The schedule's rate for the coming update."""
        tc, st = self.tc, self.state
        progress, end = self.budget.progress(st.step), st.cooldown_end or 1.0
        return lr_at(
            tc.schedule, st.step + 1, tc.lr, tc.warmup, tc.min_lr, progress, tc.cooldown, end
        )

    def _after_step(self) -> None:
        """Log, validate and decide whether to stop, every process agreeing."""
        tc, st = self.tc, self.state
        self.report.update_bar(st, self.budget)
        if st.step % max(1, tc.log_every) == 0:
            self.report.train_event(st, self.budget)
        if self._can_validate() and tc.valid_every > 0 and st.step % tc.valid_every == 0:
            self.validate()
        elif self._save_due():  # saves between validations, or without any
            self.save_last()
        code = max(self.stop_code, self._limits_reached())
        self.stop_code = distributed.agree_max(code, self.dist, self.device)

    def _limits_reached(self) -> int:
        """Which budget, if any, is spent (max_time keeps room for the final validation and
        for validating the end-of-training average)."""
        st = self.state
        room = self.valid_seconds if st.last_valid_step != st.step else 0.0
        if max(self.tc.average_last, self.tc.average_best) > 1:
            room += self.valid_seconds
        spent = self.budget.spent(st.step, room)
        if not spent and st.cooldown_end is not None:
            if (self.budget.progress(st.step, room) or 0.0) >= st.cooldown_end:
                self.log.info("early stopping: the cooldown after the plateau is over")
                return Stop.EARLY
        return spent

    def _save_due(self) -> bool:
        """Whether to save now; processes agree (each has its own clock, and every one takes
        part in a save)."""
        due = self.save_clock.due(self.state.step)
        return distributed.agree_max(int(due), self.dist, self.device) > 0

    def _request_stop(self, code: Stop) -> None:
        """A signal asked the run to stop after the current step."""
        self.stop_code = code
        self.log.info(f"{code.name}: saving last checkpoint and stopping")

    def _interrupted(self) -> bool:
        """Whether SIGINT or SIGTERM asked the run to stop."""
        return self.stop_code in (Stop.SIGINT, Stop.SIGTERM)

    # -- validation --

    def _can_validate(self) -> bool:
        """Whether DATA_DIR has a valid split with references."""
        return self.data.valid is not None

    def validate(self) -> None:
        """Loss, perplexity and BLEU on the valid set (main process); checkpoint and early-stop."""
        st, tc, dec = self.state, self.tc, self.cfg.decoding
        st.last_valid_step = st.step
        stop: int = Stop.NONE
        if self.dist.is_main and self.data.valid is not None:
            t0 = time.monotonic()
            result = evaluate(
                self.eval_model, self.data.valid, self.device, self.valid_autocast, tc.max_tokens,
                dec.max_len_a, dec.max_len_b, should_stop=self._interrupted,
            )  # fmt: skip
            self.valid_seconds = time.monotonic() - t0
            if result is not None:
                stop = self._record_validation(result)
        # Every process learns whether to stop early, and where a cooldown begun here ends.
        self.stop_code = distributed.agree_max(max(self.stop_code, stop), self.dist, self.device)
        st.cooldown_end = distributed.share_from_main(st.cooldown_end, self.dist, self.device)
        self.save_last()  # every process: each contributes its RNG state

    def _record_validation(self, result: ValidResult) -> int:
        """Write metrics and checkpoints; count validations without improvement."""
        st, tc = self.state, self.tc
        metric = tc.early_stop_metric
        score = result.bleu if metric == "bleu" else result.loss
        better = st.best_score is None or (
            score > st.best_score if metric == "bleu" else score < st.best_score
        )
        if better:
            st.best_score, st.best_step, st.bad_validations = score, st.step, 0
        else:
            st.bad_validations += 1
        st.elapsed = self.budget.elapsed()
        self.report.valid_event(st, result, better, self.valid_seconds)
        stop: int = Stop.NONE
        if tc.patience > 0 and st.bad_validations >= tc.patience and st.cooldown_end is None:
            stop = self._out_of_patience()  # before saving: a resumed run cools down the same
        self.ckpt.save_step(self.eval_model, st.step, metric, float(score), better)
        return stop

    def _out_of_patience(self) -> int:
        """Stop now, or with a cooldown first anneal over its share of the budget (a plateaued
        run still gains from the anneal; cut before it, it would not have one)."""
        st, tc = self.state, self.tc
        progress = self.budget.progress(st.step)
        if tc.cooldown > 0 and progress is not None:
            st.cooldown_end = min(1.0, progress + tc.cooldown)
            self.log.info(
                f"{tc.patience} validations without improvement: cooling down until "
                f"{st.cooldown_end:.0%} of the budget, then stopping"
            )
            return Stop.NONE
        self.log.info(f"early stopping: {tc.patience} validations without improvement")
        return Stop.EARLY

    # -- first and last lines --

    def _announce(self) -> None:
        """The first line: what trains, where, on what, and until when."""
        st, tc = self.state, self.tc
        what = f"resuming at step {st.step} (epoch {st.epoch})" if self.resume else "training"
        limits = [
            f"{k} {v}" for k, v in (("max_steps", tc.max_steps), ("max_epochs", tc.max_epochs)) if v
        ] + ([f"max_time {tc.max_time}"] if self.budget.max_time else [])
        precision = self.precision + (" (auto)" if tc.precision == "auto" else "")
        if self.valid_precision != self.precision:
            precision += f" (validation {self.valid_precision})"
        if tc.subword_alpha:
            precision += f", subword sampling alpha {tc.subword_alpha:g}"
        if tc.ema_decay:
            precision += f", weight average decay {tc.ema_decay:g}"
        if self.init is not None:
            step = self.init["step"]
            what += f" from {self.init['checkpoint']}" + (f" (step {step})" if step else "")
            if rows := self.init.get("new_rows"):
                what += f" + {max(rows.values()):,} new vocabulary rows (mean-initialised)"
        self.log.info(
            f"{what} {self.cfg.model.type} ({self.n_params:,} parameters) on {self.device}"
            f" x{self.dist.world_size}, {precision}, {int(self.keep.sum()):,} training pairs"
            + (f", {', '.join(limits)}" if limits else "")
            + f" -> {self.model_dir}"
        )

    def _summary(self) -> TrainSummary:
        """The run's outcome, also printed as the last line."""
        peak = None
        if self.device.type == "cuda":
            peak = round(torch.cuda.max_memory_allocated(self.device) / 2**20)
        st, metric, where = self.state, self.tc.early_stop_metric, str(self.model_dir)
        run_tokens = st.tokens - self.tokens_at_start
        summary = summarize(
            st, run_tokens, self.train_seconds, metric, self.stop_code, where, peak, peak_rss_mb()
        )
        summary.final_checkpoint = self.final[0]
        summary.final_score = self.final[1] if self.final[1] is not None else st.best_score
        self.log.summary(summary)
        return summary


def _seed_all(seed: int) -> None:
    """Seed every RNG a run draws from (initialisation, dropout)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def train(
    cfg: Config,
    data_dir: str | Path,
    model_dir: str | Path,
    device: str = "auto",
    resume: bool = False,
    force: bool = False,
    quiet: bool = False,
    threads: int | None = None,
) -> TrainSummary:
    """Train `cfg` on DATA_DIR into MODEL_DIR; returns the summary (steps, time, best score ...).

    Under torchrun this runs DDP: every process calls train(), only rank 0 writes and prints.
    `threads` (CPU) defaults to all cores shared among the local processes.
    """
    data_dir, model_dir = Path(data_dir), Path(model_dir)
    if not data_dir.is_dir():
        raise NmtError(f"{data_dir}: data directory not found (run nmt preprocess first)")
    size_kernel_caches()  # for library callers; `nmt train` set it before torch loaded
    dist = distributed.from_env()
    dev = resolve_device(device, dist.local_rank)
    autocast_for(resolve_precision(cfg.training.precision, dev), dev)  # fail early: fp16 on cpu
    old_threads = torch.get_num_threads()
    if dev.type == "cpu":
        n = threads or max(1, cpu_threads() // dist.local_world_size)
        torch.set_num_threads(n)
    distributed.init(dist, dev)
    try:
        warn = Log(quiet or not dist.is_main).warn
        if not (resume and modeldir.state_path(model_dir).exists()):  # the init weights load
            check_init_outside(cfg.training, model_dir)
        has_state = modeldir.check_model_dir(model_dir, resume, force, cfg.model, warn)
        distributed.barrier(dist)
        lock = modeldir.model_dir_lock(model_dir) if dist.is_main else contextlib.nullcontext()
        with lock:
            if dist.is_main and (force or resume and not has_state):  # no state: from scratch
                modeldir.reset_model_dir(model_dir)
            trainer = Trainer(cfg, data_dir, model_dir, dev, dist, has_state, quiet)
            distributed.barrier(dist)
            summary = trainer.run()
            distributed.barrier(dist)
            return summary
    finally:
        distributed.cleanup(dist)
        torch.set_num_threads(old_threads)
        sys.stderr.flush()
