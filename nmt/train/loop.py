"""The training loop: token-bucketed batches, label-smoothed loss, validation, early stopping,
exact resume, and DDP when started by torchrun.

`train(cfg, data, out)` is the whole job; `nmt train` is a thin wrapper around it.
The step loop does one host sync per update (nmt.train.update); everything else that costs time
(validation, checkpoints, logging) runs on intervals. How a run is assembled lives in
nmt.train.setup, what it prints and records in nmt.train.log, validation in nmt.train.validation,
the learning-rate schedule and budget in nmt.train.schedule, the end-of-training average and the
`default` checkpoint in nmt.train.selection, the MODEL_DIR's files, lock and checks in nmt.dirs.model.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict

import numpy as np
import torch
from torch import nn

from nmt.config import Config, parse_duration
from nmt.data import batching
from nmt.data.resegment import Segmentation
from nmt.device import autocast_for, resolve_device, resolve_precision
from nmt.dirs.data import DataDir
from nmt.dirs.model import ModelDir
from nmt.dirs.weights import save_weights
from nmt.errors import NmtError
from nmt.runtime import (
    KERNEL_CACHE_VARIABLES,
    peak_rss_mb,
    release_freed_memory,
    retain_freed_memory,
    size_kernel_caches,
)
from nmt.train import checkpoint, distributed, selection, setup
from nmt.train.checkpoint import Checkpoints
from nmt.train.finetune import with_initial
from nmt.train.log import Log, Metrics, Reporter, TrainSummary, summarize
from nmt.train.loss import LossHead
from nmt.train.schedule import SaveClock, Stop, lr_at, out_of_patience, stop_signals
from nmt.train.state import TrainState, make_optimizer, run_settings
from nmt.train.update import Updater
from nmt.train.validation import ValidResult, load_data, validate

__all__ = ["TrainState", "TrainSummary", "Trainer", "train"]


class Trainer:
    """One training run: built in the order nmt.train.setup gives; `run()` trains."""

    def __init__(
        self,
        cfg: Config,
        data: DataDir,
        out: ModelDir,
        device: torch.device,
        dist: distributed.DistInfo,
        resume: bool,
        quiet: bool,
        init: ModelDir | None = None,
    ) -> None:
        from nmt.models import count_parameters

        tc = cfg.training
        self.cfg, self.tc, self.out = cfg, tc, out
        self.device, self.dist, self.resume = device, dist, resume
        self.log = Log(quiet or not dist.is_main)
        self.prec = setup.precisions(cfg, device)
        self.autocast = self.prec.autocast
        if device.type == "cpu":
            retain_freed_memory()  # a step's large activations reuse heap memory, no page faults
        self.budget = setup.run_budget(tc)
        setup.seed_all(tc.seed)
        self.data = load_data(data, tc.valid_max_sentences)
        self.model, self.init = setup.build_model(cfg, self.data, device, resume, init)
        self.n_params = count_parameters(self.model)
        self.optimizer = make_optimizer(self.model, tc, device)
        scaler = setup.grad_scaler(self.prec.train)
        train = self.data.train
        self.src_len, self.tgt_len = np.asarray(train.src.lengths), np.asarray(train.tgt.lengths)
        self.context = setup.Run(cfg, self.prec, self.data, out, device, dist, self.log, resume)
        self.keep = setup.keep_mask(
            self.context, self.src_len, self.tgt_len, self.model.max_positions
        )
        self.segmentation = Segmentation(train.src, train.tgt)
        self.resegmenter = setup.resegmenter(self.data, tc, device)
        self.settings = run_settings(tc, data)  # saved with the state, checked on resume
        self.resumed = setup.Resumed()
        if resume:
            self.resumed = setup.restore(
                self.context, self.model, self.optimizer, scaler, self.settings
            )
        self.state, self.valid_seconds = self.resumed.state, self.resumed.valid_seconds
        self.average = setup.weight_average(self.model, tc, self.resumed.average)
        ids = self.data.vocab  # a model's own special ids with --tokenizer-from data
        keep_pad = self.data.source.tokenizer_from is not None
        head = LossHead(self.model, tc.label_smoothing, ids.pad_id, keep_pad)
        step_model = setup.wrap_for_training(head, tc, dist, device)
        self.update = Updater(
            step_model,
            self.optimizer,
            scaler,
            self.average,
            self.autocast,
            tc.clip_norm,
            dist,
            device,
        )
        self.ckpt = Checkpoints(out, tc.keep_best, tc.keep_last)
        self.save_clock = SaveClock(tc.save_every, parse_duration(tc.save_every_time))
        self.report = Reporter(self.log, Metrics(out, dist.is_main))
        self.stop_code: int = Stop.NONE  # the largest any process asked for
        self.train_seconds = 0.0  # time in update steps, this process
        self.tokens_at_start = self.state.tokens
        self.final: tuple[str, float | None] = ("best", None)  # `default` checkpoint, its score

    @property
    def eval_model(self) -> nn.Module:
        """What validation scores and checkpoints hold: the weight average when there is one."""
        return self.average.model if self.average is not None else self.model

    def save_last(self) -> None:
        """Write last + the trainer state (main process) and restart the save clock."""
        self.state.elapsed = self.budget.elapsed()
        ranks_rng = distributed.gather_rng(self.dist, self.device)  # every process takes part
        if self.dist.is_main:
            state = checkpoint.capture(
                self.model,
                self.optimizer,
                self.update.scaler,
                asdict(self.state),
                self.dist.world_size,
            )
            if self.average is not None:
                state.weight_average = self.average.state_dict()
            state.settings, state.valid_seconds = self.settings, self.valid_seconds
            state.ranks_rng = ranks_rng
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
                save_weights(self.eval_model, self.out.weights("best"))
            if self.dist.is_main and st.step > 0 and not self._interrupted():
                self._average_and_choose()
        summary = self._summary()
        self.report.end_event(summary)
        self.report.metrics.close()
        return summary

    def _average_and_choose(self) -> None:
        """Average the kept step checkpoints as the config asks, and choose `default`."""
        if self._can_validate():
            chosen = selection.average_and_choose(
                self.model,
                self.out,
                self.tc,
                self.state,
                self.device,
                self._score,
                self.report,
            )
            self.final = chosen or self.final

    def _score(
        self, model: nn.Module, should_stop: Callable[[], bool] = lambda: False
    ) -> ValidResult | None:
        """Validate `model` on the valid set, decoding as `nmt translate` would (None: no valid
        set, or interrupted)."""
        valid, dec = self.data.valid, self.cfg.decoding
        if valid is None:
            return None
        how = (
            self.device,
            self.prec.valid_autocast,
            self.tc.max_tokens,
            dec.max_len_a,
            dec.max_len_b,
        )
        return validate(model, valid, *how, should_stop=should_stop)

    def _begin(self) -> None:
        """Tidy MODEL_DIR for a resumed state, write its metadata, announce, set RNGs and clock."""
        tc, st, dist, device = self.tc, self.state, self.dist, self.device
        setup.prepare_model_dir(self.context, self.ckpt, self.report.metrics, st)
        pairs = int(self.keep.sum())
        self.log.info(setup.announce(self.context, st, self.init, self.n_params, pairs))
        caches = {k: os.environ.get(k) for k in KERNEL_CACHE_VARIABLES}
        self.report.start_event(
            st,
            str(device),
            self.prec.train,
            tc.precision,
            self.prec.valid,
            self.init,
            caches if device.type == "cpu" else None,
        )
        setup.set_rngs(self.resumed, tc.seed, st.step, dist, device)
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
                src_len,
                tgt_len,
                tc.max_tokens,
                tc.seed,
                st.epoch,
                keep,
                self.dist.rank,
                self.dist.world_size,
            )
            if not batches:
                raise NmtError(
                    f"{self.data.source.path}: not enough training data for one batch per rank"
                )
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
        t0 = time.monotonic()
        lr = self.current_lr()
        seg = self.segmentation
        ids = self.data.vocab
        batches = [batching.collate(seg.src, seg.tgt, idx, ids=ids) for idx in group]
        done = self.update(batches, lr, self.state, self.log.warn)
        world_tokens = done.tokens * self.dist.world_size
        self.state.tokens += world_tokens
        dt = time.monotonic() - t0
        self.train_seconds += dt
        loss, nll = (done.loss, done.nll) if done.finite else (0.0, 0.0)
        self.report.window.add(world_tokens, loss, nll, dt, lr)

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
            release_freed_memory()  # rss_mb below: what the run holds, not its past shapes
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
        st = self.state
        st.last_valid_step = st.step
        stop: int = Stop.NONE
        if self.dist.is_main and self.data.valid is not None:
            t0 = time.monotonic()
            result = self._score(self.eval_model, should_stop=self._interrupted)
            self.valid_seconds = time.monotonic() - t0
            if result is not None:
                stop = self._record_validation(result)
        # Every process learns whether to stop early, and where a cooldown begun here ends.
        self.stop_code = distributed.agree_max(max(self.stop_code, stop), self.dist, self.device)
        st.cooldown_end = distributed.share_from_main(st.cooldown_end, self.dist, self.device)
        self.save_last()  # every process: each contributes its RNG state
        release_freed_memory()  # decoding's buffers and the checkpoint's serialization

    def _record_validation(self, result: ValidResult) -> int:
        """Write metrics and checkpoints; count validations without improvement."""
        st, tc = self.state, self.tc
        metric = tc.early_stop_metric
        better = selection.record(st, metric, result)
        st.elapsed = self.budget.elapsed()
        self.report.valid_event(st, result, better, self.valid_seconds)
        stop: int = Stop.NONE
        if tc.patience > 0 and st.bad_validations >= tc.patience and st.cooldown_end is None:
            # before saving: a resumed run cools down the same
            stop, st.cooldown_end, line = out_of_patience(
                self.budget, st.step, tc.patience, tc.cooldown
            )
            self.log.info(line)
        self.ckpt.save_step(self.eval_model, st.step, metric, float(result.score(metric)), better)
        return stop

    def _summary(self) -> TrainSummary:
        """The run's outcome, also printed as the last line."""
        peak = None
        if self.device.type == "cuda":
            peak = round(torch.cuda.max_memory_allocated(self.device) / 2**20)
        st, metric, where = self.state, self.tc.early_stop_metric, str(self.out.path)
        run_tokens = st.tokens - self.tokens_at_start
        summary = summarize(
            st, run_tokens, self.train_seconds, metric, self.stop_code, where, peak, peak_rss_mb()
        )
        summary.final_checkpoint = self.final[0]
        summary.final_score = self.final[1] if self.final[1] is not None else st.best_score
        self.log.summary(summary)
        return summary


def train(
    cfg: Config,
    data: DataDir,
    out: ModelDir,
    device: str = "auto",
    *,
    init: ModelDir | None = None,
    resume: bool = False,
    force: bool = False,
    quiet: bool = False,
    threads: int | None = None,
) -> TrainSummary:
    """Train `cfg` on `data` into `out`; returns the summary (steps, time, best score ...).

    Fine-tuning starts from `init` (else from the directory training.init_from names). Under
    torchrun this runs DDP: every process calls train(), only rank 0 writes and prints.
    `threads` (CPU) defaults to all cores shared among the local processes.
    """
    if not data.path.is_dir():
        raise NmtError(f"{data.path}: data directory not found (run nmt preprocess first)")
    cfg = with_initial(cfg, init)
    size_kernel_caches()  # for library callers; `nmt train` set it before torch loaded
    dist = distributed.from_env()
    dev = resolve_device(device, dist.local_rank)
    autocast_for(resolve_precision(cfg.training.precision, dev), dev)  # fail early: fp16 on cpu
    with setup.process(dev, dist, threads):
        warn = Log(quiet or not dist.is_main).warn
        has_state = setup.check_dirs(cfg, out, resume, force, warn)
        if distributed.agree_max(int(has_state), dist, dev) != -distributed.agree_max(
            -int(has_state), dist, dev
        ):  # a resumed run where some processes find no state would start them afresh
            raise NmtError(
                f"{out.state_path}: not every node sees it; --resume across "
                "machines needs MODEL_DIR on a shared file system"
            )
        distributed.barrier(dist)
        lock = out.lock() if dist.is_main else contextlib.nullcontext()
        with lock:
            if dist.is_main and (force or resume and not has_state):  # no state: from scratch
                out.reset()
            trainer = Trainer(cfg, data, out, dev, dist, has_state, quiet, init)
            distributed.barrier(dist)
            summary = trainer.run()
            distributed.barrier(dist)
            return summary
