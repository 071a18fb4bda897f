"""The training loop: token-bucketed batches, label-smoothed loss, validation BLEU, early stopping,
exact resume, and DDP when started by torchrun.

`train(cfg, data_dir, model_dir)` is the whole job; `nmt train` is a thin wrapper around it.
The step loop does one host sync per update (the gradient norm, needed to skip non-finite
updates); everything else that costs time (validation, checkpoints, logging) runs on intervals.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from nmt import batching, distributed
from nmt.checkpoint import Checkpoints, load_state, rng_state, set_rng_state
from nmt.config import Config, parse_duration
from nmt.device import autocast_for, emulated_bf16_warning, resolve_device
from nmt.errors import NmtError
from nmt.loss import label_smoothed_nll, lr_at
from nmt.modeldir import save_weights, write_meta

MAX_NONFINITE = 10
STOP_NONE, STOP_STEPS, STOP_EPOCHS, STOP_TIME, STOP_EARLY = 0, 1, 2, 3, 4
STOP_SIGINT, STOP_SIGTERM = 130, 143
STOP_REASONS = {
    STOP_STEPS: "max_steps reached",
    STOP_EPOCHS: "max_epochs reached",
    STOP_TIME: "max_time reached",
    STOP_EARLY: "early stopping",
    STOP_SIGINT: "interrupted (SIGINT)",
    STOP_SIGTERM: "terminated (SIGTERM)",
}


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


@dataclass
class Data:
    """What training reads from DATA_DIR."""

    train: Any
    valid: Any | None
    refs: list[str]
    tgt_tok: Any
    vocab: Any
    src_lang: str
    tgt_lang: str
    src_spm: Path
    tgt_spm: Path


# ---- model directory: lock, refusal, metrics --------------------------------------------------


@contextlib.contextmanager
def model_dir_lock(model_dir: Path) -> Iterator[None]:
    """Refuse a second process training into the same MODEL_DIR (stale locks are taken over)."""
    model_dir.mkdir(parents=True, exist_ok=True)
    lock = model_dir / ".lock"
    me = f"{socket.gethostname()} {os.getpid()}"
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            if _lock_is_live(lock):
                owner = lock.read_text(encoding="utf-8", errors="replace").strip()
                raise NmtError(
                    f"{model_dir}: another process is training into this directory "
                    f"(lock {lock} held by {owner or 'unknown'})"
                ) from None
            lock.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(me + "\n")
        break
    else:
        raise NmtError(f"{lock}: cannot take the lock")
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)


def _lock_is_live(lock: Path) -> bool:
    """A lock is live when its process still runs on this host (other hosts: assume live)."""
    try:
        host, pid = lock.read_text(encoding="utf-8").split()
        pid_n = int(pid)
    except (OSError, ValueError):
        return False
    if host != socket.gethostname():
        return True
    try:
        os.kill(pid_n, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def check_model_dir(model_dir: Path, resume: bool, force: bool) -> None:
    """Refuse to overwrite a trained MODEL_DIR by accident, or to resume nothing."""
    if resume and force:
        raise NmtError("--resume and --force exclude each other")
    ckpt = Checkpoints(model_dir)
    if resume:
        if not ckpt.state_path.exists():
            raise NmtError(f"{ckpt.state_path}: nothing to resume (no trainer state)")
    elif ckpt.exists() and not force:
        raise NmtError(
            f"{model_dir} already has checkpoints; use --resume to continue or --force to "
            "start over"
        )


def reset_model_dir(model_dir: Path) -> None:
    """--force: remove what a previous run wrote (checkpoints, metrics), keep anything else."""
    import shutil

    shutil.rmtree(model_dir / "checkpoints", ignore_errors=True)
    shutil.rmtree(model_dir / "tensorboard", ignore_errors=True)
    (model_dir / "metrics.jsonl").unlink(missing_ok=True)


class Metrics:
    """metrics.jsonl (one JSON object per event) and TensorBoard when it is installed."""

    def __init__(self, model_dir: Path, enabled: bool, resume_step: int | None) -> None:
        self.path = model_dir / "metrics.jsonl"
        self.enabled = enabled
        self.tb = None
        if not enabled:
            return
        if resume_step is not None and self.path.exists():
            self._truncate_after(resume_step)
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(model_dir / "tensorboard"))
        except Exception:  # noqa: BLE001 - TensorBoard is optional
            self.tb = None

    def _truncate_after(self, step: int) -> None:
        """Drop events newer than the resumed state (written by a run that died later)."""
        from nmt.textio import atomic_write

        lines = self.path.read_text(encoding="utf-8").splitlines()
        kept = [ln for ln in lines if ln.strip() and json.loads(ln).get("step", 0) <= step]
        with atomic_write(self.path) as f:
            f.write("".join(ln + "\n" for ln in kept))

    def write(self, row: dict[str, Any]) -> None:
        """Append one event."""
        if not self.enabled:
            return
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        if self.tb is not None:
            kind = row.get("event", "train")
            for k, v in row.items():
                if isinstance(v, (int, float)) and k not in ("step", "epoch"):
                    self.tb.add_scalar(f"{kind}/{k}", v, row["step"])
            self.tb.flush()

    def close(self) -> None:
        """Release TensorBoard's writer."""
        if self.tb is not None:
            self.tb.close()


# ---- data ---------------------------------------------------------------------------------------


def load_data(data_dir: Path, valid_max: int = 0) -> Data:
    """Train split, valid split with its raw references, target tokenizer and vocabulary facts."""
    from nmt import data as nmt_data

    manifest = nmt_data.read_manifest(data_dir)
    src_lang, tgt_lang = _langs(manifest, data_dir)
    train = nmt_data.load(data_dir, "train")
    src_tok, tgt_tok = nmt_data.tokenizers(data_dir)
    vocab = nmt_data.vocab_info(data_dir)
    spm = [data_dir / manifest["spm"][side] for side in ("src", "tgt")]
    valid, refs = None, []
    try:
        valid = nmt_data.load(data_dir, "valid")
    except NmtError:
        valid = None
    if valid is not None:
        refs = _references(data_dir, tgt_lang, valid, tgt_tok)
        if valid_max > 0 and len(refs) > valid_max:
            refs = refs[:valid_max]
    return Data(train, valid, refs, tgt_tok, vocab, src_lang, tgt_lang, spm[0], spm[1])


def _langs(manifest: dict[str, Any], data_dir: Path) -> tuple[str, str]:
    """Source and target language codes from the manifest."""
    src, tgt = manifest.get("src_lang"), manifest.get("tgt_lang")
    if not src or not tgt:
        raise NmtError(f"{data_dir}/manifest.json: no source/target languages")
    return src, tgt


def _references(data_dir: Path, tgt_lang: str, valid: Any, tgt_tok: Any) -> list[str]:
    """Raw valid references (what BLEU is computed against), or detokenized ids as fallback."""
    from nmt.textio import read_lines

    path = data_dir / f"valid.{tgt_lang}.txt"
    if path.exists():
        refs = list(read_lines(path))
        if len(refs) == len(valid.tgt):
            return refs
    return [tgt_tok.decode(valid.tgt[i].tolist()) for i in range(len(valid.tgt))]


# ---- the trainer ----------------------------------------------------------------------------


class Trainer:
    """One training run; `run()` returns the summary."""

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
        self.cfg, self.tc = cfg, cfg.training
        self.data_dir, self.model_dir, self.device, self.dist = data_dir, model_dir, device, dist
        self.resume = resume
        self.log = Log(quiet or not dist.is_main)
        self.max_time = parse_duration(self.tc.max_time)
        self.autocast = autocast_for(self.tc.precision, device)
        self.state = TrainState()
        self.stop_code = STOP_NONE
        self.valid_seconds = 0.0
        self.start = time.monotonic()
        self.window = _Window(self.start, 0, 0.0, 0.0, 0)
        self.train_seconds = 0.0
        self.tokens_at_start = 0
        self.steps_per_epoch = 0
        self.bar: Any = None

    # -- setup --

    def setup(self) -> None:
        """Data, model, optimizer; restore a resumed state."""
        tc = self.tc
        _seed_all(tc.seed)
        self.data = load_data(self.data_dir, tc.valid_max_sentences)
        from nmt.models import build, count_parameters

        model = build(self.cfg.model, self.data.vocab).to(self.device)
        self.model = model  # unwrapped: validation, checkpoints
        self.n_params = count_parameters(model)
        self.optimizer = _optimizer(model, tc, self.device)
        self.scaler = torch.amp.GradScaler("cuda") if tc.precision == "fp16" else None
        train = self.data.train
        self.src_len = np.asarray(train.src.lengths)
        self.tgt_len = np.asarray(train.tgt.lengths)
        max_pos = int(getattr(model, "max_positions", 0) or 0)
        self.keep = batching.keep_mask(self.src_len, self.tgt_len, tc.max_tokens, max_pos)
        dropped = int((~self.keep).sum())
        if dropped:
            self.log.warn(
                f"{dropped} training pairs are longer than training.max_tokens or "
                "model.max_positions allow and are skipped"
            )
        bf16_warning = emulated_bf16_warning(tc.precision, self.device)
        if bf16_warning:
            self.log.warn(bf16_warning)
        if self.keep.sum() == 0:
            raise NmtError(f"{self.data_dir}: no training pair fits training.max_tokens")
        if self.resume:
            self._restore()
        wrapped: nn.Module = model
        if tc.compile:
            wrapped = torch.compile(wrapped, dynamic=True)
        if self.dist.enabled:
            from torch.nn.parallel import DistributedDataParallel as DDP

            ids = [self.device.index] if self.device.type == "cuda" else None
            wrapped = DDP(wrapped, device_ids=ids)
        self.step_model = wrapped
        self.params = [p for p in model.parameters() if p.requires_grad]

    def _restore(self) -> None:
        """Continue exactly where the saved state stopped."""
        ckpt = Checkpoints(self.model_dir)
        st = load_state(ckpt.state_path, "cpu")
        try:
            self.model.load_state_dict(st["model"])
        except RuntimeError:
            raise NmtError(
                f"{ckpt.state_path}: the saved model does not match this config's model section; "
                "resume with the same model settings (omit --preset/CONFIG to reuse the saved ones)"
            ) from None
        self.optimizer.load_state_dict(st["optimizer"])
        if self.scaler is not None and st.get("scaler"):
            self.scaler.load_state_dict(st["scaler"])
        self.state = TrainState(**st["train_state"])
        self._rng = st["rng"]

    def trainer_state(self) -> dict[str, Any]:
        """Everything `--resume` needs, as tensors and plain types."""
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler is not None else {},
            "train_state": asdict(self.state),
            "rng": rng_state(),
            "world_size": self.dist.world_size,
        }

    # -- the loop --

    def run(self) -> dict[str, Any]:
        """Train until a limit, early stopping or a signal; return the summary."""
        tc, st = self.tc, self.state
        is_main = self.dist.is_main
        self.ckpt = Checkpoints(self.model_dir, tc.keep_best, tc.keep_last)
        if is_main and self.resume:
            self.ckpt.truncate_after(st.step)
        self.metrics = Metrics(self.model_dir, is_main, st.step if self.resume else None)
        if is_main:
            write_meta(
                self.model_dir,
                self.cfg,
                self.data.src_lang,
                self.data.tgt_lang,
                self.data.src_spm,
                self.data.tgt_spm,
                self.data.vocab,
            )
        self._announce()
        if self.resume:
            set_rng_state(self._rng)
            if self.dist.rank > 0:
                torch.manual_seed(tc.seed * 1000 + self.dist.rank + st.step)
        elif self.dist.rank > 0:
            torch.manual_seed(tc.seed * 1000 + self.dist.rank)
        self.start = time.monotonic() - st.elapsed
        self.window = _Window(time.monotonic(), 0, 0.0, 0.0, 0)
        self.train_seconds = 0.0
        self.tokens_at_start = st.tokens
        with _signals(self) as _, self.log.progress() as bar:
            self.bar = bar
            self._loop()
            if self.stop_code not in (STOP_SIGINT, STOP_SIGTERM):
                if self._can_validate() and st.last_valid_step != st.step and st.step > 0:
                    self.validate()
            st.elapsed = time.monotonic() - self.start
            if is_main and st.step > 0:
                self.ckpt.save_last(self.model, self.trainer_state())
                if not self._can_validate():  # nothing to rank by: the newest is the best
                    save_weights(self.model, self.ckpt.dir / "best.safetensors")
        self.metrics.close()
        return self._summary()

    def _loop(self) -> None:
        """Epochs of accumulated steps until something says stop."""
        tc, st = self.tc, self.state
        if self._limits_reached():
            self.stop_code = self._limits_reached()
            return
        while self.stop_code == STOP_NONE:
            batches = batching.epoch_batches(
                self.src_len,
                self.tgt_len,
                tc.max_tokens,
                tc.seed,
                st.epoch,
                self.keep,
                self.dist.rank,
                self.dist.world_size,
            )
            if not batches:
                raise NmtError(f"{self.data_dir}: not enough training data for one batch per rank")
            if st.position == 0:
                self._log_padding(batches)
            self.steps_per_epoch = math.ceil(len(batches) / max(1, tc.accumulate))
            while st.position < len(batches) and self.stop_code == STOP_NONE:
                group = batches[st.position : st.position + max(1, tc.accumulate)]
                self.train_step(group)
                st.position += len(group)
                st.step += 1
                self._after_step()
            if st.position >= len(batches):
                st.epoch += 1
                st.position = 0
                if tc.max_epochs and st.epoch > tc.max_epochs and self.stop_code == STOP_NONE:
                    self.stop_code = distributed.agree_max(STOP_EPOCHS, self.dist, self.device)

    def _log_padding(self, batches: list[np.ndarray]) -> None:
        """Padding waste of this epoch's batches: the price of the bucketing."""
        ratio = batching.padding_ratio(batches, self.src_len, self.tgt_len)
        sents = sum(len(b) for b in batches)
        self.log.info(
            f"epoch {self.state.epoch}: {len(batches)} batches of {sents / len(batches):.0f} "
            f"pairs on average, padding {100 * ratio:.1f}% of batch tokens"
        )
        self.metrics.write(
            {"event": "epoch", "step": self.state.step, "epoch": self.state.epoch,
             "batches": len(batches), "padding": round(ratio, 4)}
        )  # fmt: skip

    def train_step(self, group: list[np.ndarray]) -> None:
        """One update from `len(group)` accumulated batches; non-finite updates are skipped."""
        tc, st = self.tc, self.state
        t0 = time.monotonic()
        lr = self.current_lr()
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        train = self.data.train
        batches = [batching.collate(train.src, train.tgt, idx) for idx in group]
        tokens = sum(b.n_tgt_tokens for b in batches)
        loss_sum = nll_sum = 0.0
        for i, batch in enumerate(batches):
            batch = batch.to(self.device)
            sync = self.dist.enabled and i < len(batches) - 1
            with self.step_model.no_sync() if sync else contextlib.nullcontext():
                with self.autocast():
                    logits = self.step_model(batch.src, batch.src_lengths, batch.tgt_in)
                    loss, nll, _ = label_smoothed_nll(logits, batch.tgt_out, tc.label_smoothing)
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
        if finite:
            st.nonfinite_streak = 0
            if self.scaler is not None:
                self.scaler.step(self.optimizer)
                self.scaler.update()
            else:
                self.optimizer.step()
        else:
            self._skip_update(loss_v)
        self.optimizer.zero_grad(set_to_none=True)
        world_tokens = tokens * self.dist.world_size
        st.tokens += world_tokens
        dt = time.monotonic() - t0
        self.train_seconds += dt
        self.window.add(world_tokens, loss_v if finite else 0.0, nll_v if finite else 0.0, dt, lr)

    def _skip_update(self, loss: float) -> None:
        """Warn about a non-finite loss; too many in a row means training has diverged."""
        st = self.state
        st.nonfinite_streak += 1
        self.log.warn(
            f"step {st.step + 1}: loss is {loss} (non-finite); update skipped "
            f"({st.nonfinite_streak} in a row)"
        )
        if st.nonfinite_streak >= MAX_NONFINITE:
            raise NmtError(
                f"training diverged: {MAX_NONFINITE} non-finite losses in a row at step "
                f"{st.step + 1}; lower training.lr, raise training.warmup or use fp32"
            )

    def current_lr(self) -> float:
        """The schedule's rate for the coming update."""
        tc = self.tc
        return lr_at(
            tc.schedule, self.state.step + 1, tc.lr, tc.warmup, tc.min_lr, self._progress()
        )

    def _progress(self) -> float | None:
        """Share of the budget used (steps or time, whichever is further); None if unbounded."""
        parts = []
        if self.tc.max_steps > 0:
            parts.append(self.state.step / self.tc.max_steps)
        if self.max_time:
            elapsed = time.monotonic() - self.start
            parts.append(elapsed / self.max_time)
        return max(parts) if parts else None

    def _after_step(self) -> None:
        """Log, validate and decide whether to stop, every process agreeing."""
        tc, st = self.tc, self.state
        self._update_bar()
        if st.step % max(1, tc.log_every) == 0:
            self._log_train()
        if self._can_validate() and tc.valid_every > 0 and st.step % tc.valid_every == 0:
            self.validate()
        code = max(self.stop_code, self._limits_reached())
        self.stop_code = distributed.agree_max(code, self.dist, self.device)

    def _limits_reached(self) -> int:
        """Which budget, if any, is spent (max_time keeps room for the final validation)."""
        tc, st = self.tc, self.state
        if tc.max_steps > 0 and st.step >= tc.max_steps:
            return STOP_STEPS
        if self.max_time:
            room = self.valid_seconds if st.last_valid_step != st.step else 0.0
            if time.monotonic() - self.start + room >= self.max_time:
                return STOP_TIME
        return STOP_NONE

    def _log_train(self) -> None:
        """One log line and one metrics event for the last interval."""
        st, w = self.state, self.window
        if w.steps == 0:
            return
        elapsed = time.monotonic() - self.start
        tok_s = w.tokens / w.seconds if w.seconds > 0 else 0.0
        row = {
            "event": "train",
            "step": st.step,
            "epoch": st.epoch,
            "loss": round(w.loss / w.steps, 4),
            "ppl": round(math.exp(min(w.nll / w.steps, 50.0)), 2),
            "lr": w.lr,
            "tok_s": round(tok_s, 1),
            "elapsed": round(elapsed, 1),
        }
        self.metrics.write(row)
        eta = self._eta()
        self.log.info(
            f"step {st.step} | epoch {st.epoch} | loss {row['loss']:.3f} | ppl {row['ppl']:.1f} "
            f"| lr {w.lr:.2e} | {tok_s:,.0f} tgt tok/s | {_hms(elapsed)}"
            + (f" | ETA {_hms(eta)}" if eta is not None else "")
        )
        self.window = _Window(time.monotonic(), 0, 0.0, 0.0, 0)

    def _eta(self) -> float | None:
        """Seconds left by the nearest budget (steps, epochs or time)."""
        tc, st = self.tc, self.state
        if st.step == 0:
            return None
        elapsed = time.monotonic() - self.start
        per_step = elapsed / st.step
        etas = []
        if tc.max_steps > 0:
            etas.append((tc.max_steps - st.step) * per_step)
        if self.max_time:
            etas.append(self.max_time - elapsed)
        if tc.max_epochs > 0 and self.steps_per_epoch:
            done = (st.epoch - 1) * self.steps_per_epoch + st.position / max(1, tc.accumulate)
            etas.append((tc.max_epochs * self.steps_per_epoch - done) * per_step)
        return max(0.0, min(etas)) if etas else None

    def _update_bar(self) -> None:
        """Refresh the live display (cheap; rich throttles rendering)."""
        if self.bar is None:
            return
        st, w = self.state, self.window
        eta = self._eta()
        tok_s = w.tokens / w.seconds if w.seconds > 0 else 0.0
        loss = w.loss / w.steps if w.steps else float("nan")
        text = (
            f"step {st.step} · epoch {st.epoch} · loss {loss:.3f} · lr {w.lr:.2e} · "
            f"{tok_s:,.0f} tok/s · {_hms(time.monotonic() - self.start)}"
            + (f" · ETA {_hms(eta)}" if eta is not None else "")
        )
        frac = self._progress()
        if frac is None and self.tc.max_epochs > 0 and self.steps_per_epoch:
            frac = st.epoch - 1 + st.position / max(1, self.steps_per_epoch * self.tc.accumulate)
            frac /= self.tc.max_epochs
        self.bar.update(description=text, completed=min(frac or 0.0, 1.0) * 1000)

    # -- validation --

    def _can_validate(self) -> bool:
        return self.data.valid is not None and len(self.data.refs) > 0

    def validate(self) -> None:
        """Loss, perplexity and BLEU on the valid set (main process); checkpoint and early-stop."""
        st, tc = self.state, self.tc
        st.last_valid_step = st.step
        stop = STOP_NONE
        if self.dist.is_main:
            t0 = time.monotonic()
            result = evaluate(
                self.model,
                self.data,
                self.device,
                self.autocast,
                tc.max_tokens,
                self.cfg.decoding.max_len_a,
                self.cfg.decoding.max_len_b,
                should_stop=lambda: self.stop_code in (STOP_SIGINT, STOP_SIGTERM),
            )
            self.valid_seconds = time.monotonic() - t0
            if result is not None:
                stop = self._record_validation(result)
        # Every process learns whether to stop early.
        self.stop_code = distributed.agree_max(max(self.stop_code, stop), self.dist, self.device)

    def _record_validation(self, result: dict[str, float]) -> int:
        """Write metrics and checkpoints; count validations without improvement."""
        st, tc = self.state, self.tc
        metric = tc.early_stop_metric
        score = result["bleu"] if metric == "bleu" else result["loss"]
        better = st.best_score is None or (
            score > st.best_score if metric == "bleu" else score < st.best_score
        )
        if better:
            st.best_score, st.best_step, st.bad_validations = score, st.step, 0
        else:
            st.bad_validations += 1
        st.elapsed = time.monotonic() - self.start
        row = {
            "event": "valid",
            "step": st.step,
            "epoch": st.epoch,
            "valid_loss": round(result["loss"], 4),
            "valid_ppl": round(result["ppl"], 2),
            "bleu": round(result["bleu"], 2),
            "elapsed": round(st.elapsed, 1),
            "valid_seconds": round(self.valid_seconds, 1),
            "best": better,
        }
        self.metrics.write(row)
        self.log.info(
            f"valid step {st.step} | loss {result['loss']:.3f} | ppl {result['ppl']:.2f} | "
            f"BLEU {result['bleu']:.2f}"
            + (" | new best" if better else "")
            + f" | {self.valid_seconds:.0f}s"
        )
        self.ckpt.save_step(self.model, st.step, metric, float(score), better)
        self.ckpt.save_last(self.model, self.trainer_state())
        if tc.patience > 0 and st.bad_validations >= tc.patience:
            self.log.info(f"early stopping: {tc.patience} validations without improvement")
            return STOP_EARLY
        return STOP_NONE

    # -- reporting --

    def _announce(self) -> None:
        st, tc = self.state, self.tc
        what = f"resuming at step {st.step} (epoch {st.epoch})" if self.resume else "training"
        limits = [
            f"{k} {v}" for k, v in (("max_steps", tc.max_steps), ("max_epochs", tc.max_epochs)) if v
        ] + ([f"max_time {tc.max_time}"] if self.max_time else [])
        self.log.info(
            f"{what} {self.cfg.model.type} ({self.n_params:,} parameters) on {self.device}"
            f" x{self.dist.world_size}, {tc.precision}, {int(self.keep.sum()):,} training pairs"
            + (f", {', '.join(limits)}" if limits else "")
            + f" -> {self.model_dir}"
        )

    def _summary(self) -> dict[str, Any]:
        st = self.state
        run_tokens = st.tokens - self.tokens_at_start
        tok_s = run_tokens / self.train_seconds if self.train_seconds else 0.0
        summary = {
            "steps": st.step,
            "epochs_completed": st.epoch - 1,
            "seconds": round(st.elapsed, 1),
            "tgt_tokens": st.tokens,
            "tok_s": round(tok_s, 1),
            "best_metric": self.tc.early_stop_metric,
            "best_score": st.best_score,
            "best_step": st.best_step,
            "stopped": STOP_REASONS.get(self.stop_code, "finished"),
            "exit_code": self.stop_code if self.stop_code in (130, 143) else 0,
            "model_dir": str(self.model_dir),
        }
        if self.device.type == "cuda":
            summary["gpu_peak_mb"] = round(torch.cuda.max_memory_allocated(self.device) / 2**20)
        self.log.summary(summary)
        return summary


@dataclass
class _Window:
    """Running sums of the current log interval."""

    t0: float
    tokens: int
    loss: float
    nll: float
    steps: int
    seconds: float = 0.0
    lr: float = 0.0

    def add(self, tokens: int, loss: float, nll: float, seconds: float, lr: float) -> None:
        self.tokens += tokens
        self.loss += loss
        self.nll += nll
        self.steps += 1
        self.seconds += seconds
        self.lr = lr


@torch.no_grad()
def evaluate(
    model: nn.Module,
    data: Data,
    device: torch.device,
    autocast: Callable[[], Any],
    max_tokens: int,
    max_len_a: float,
    max_len_b: float,
    should_stop: Callable[[], bool] = lambda: False,
) -> dict[str, float] | None:
    """Teacher-forced loss/perplexity and greedy sacreBLEU on the valid set; None if interrupted."""
    import sacrebleu

    from nmt.search import greedy_search

    valid = data.valid
    n = len(data.refs)
    src_len = np.asarray(valid.src.lengths)[:n]
    was_training = model.training
    model.eval()
    hyps: list[str] = [""] * n
    nll_sum, tokens = 0.0, 0
    try:
        for idx in batching.source_batches(src_len, max_tokens):
            if should_stop():
                return None
            batch = batching.collate(valid.src, valid.tgt, idx).to(device)
            with autocast():
                logits = model(batch.src, batch.src_lengths, batch.tgt_in)
                out = greedy_search(model, batch.src, batch.src_lengths, max_len_a, max_len_b)
            _, nll, count = label_smoothed_nll(logits, batch.tgt_out, 0.0)
            nll_sum += float(nll)
            tokens += count
            for i, hyp in zip(idx.tolist(), out, strict=True):
                hyps[i] = data.tgt_tok.decode(hyp.tokens)
    finally:
        model.train(was_training)
    loss = nll_sum / max(1, tokens)
    bleu = sacrebleu.corpus_bleu(hyps, [data.refs]).score
    return {"loss": loss, "ppl": math.exp(min(loss, 50.0)), "bleu": bleu}


def _optimizer(model: nn.Module, tc: Any, device: torch.device) -> torch.optim.Optimizer:
    """Adam with decoupled weight decay (identical to Adam when weight_decay is 0)."""
    params = [p for p in model.parameters() if p.requires_grad]
    kwargs: dict[str, Any] = {}
    if device.type in ("cuda", "cpu"):
        kwargs["fused"] = True
    return torch.optim.AdamW(
        params, lr=tc.lr, betas=tuple(tc.betas), weight_decay=tc.weight_decay, **kwargs
    )


def _seed_all(seed: int) -> None:
    """Seed every RNG a run draws from (initialisation, dropout)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _hms(seconds: float) -> str:
    s = int(max(0, seconds))
    return (
        f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
    )


@contextlib.contextmanager
def _signals(trainer: Trainer) -> Iterator[None]:
    """SIGINT/SIGTERM ask the loop to stop after the current step (a second SIGINT is immediate)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        code = STOP_SIGINT if signum == signal.SIGINT else STOP_SIGTERM
        if trainer.stop_code in (STOP_SIGINT, STOP_SIGTERM) and signum == signal.SIGINT:
            raise KeyboardInterrupt
        trainer.stop_code = code
        trainer.log.info(f"{signal.Signals(signum).name}: saving last checkpoint and stopping")

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


class Log:
    """Progress and messages on stderr; quiet prints nothing (errors surface as exceptions)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.console = None
        if not quiet:
            from rich.console import Console

            self.console = Console(stderr=True, highlight=False)

    def info(self, msg: str) -> None:
        if self.console is not None:
            self.console.print(msg, markup=False, soft_wrap=True)

    def warn(self, msg: str) -> None:
        if self.console is not None:
            self.console.print(f"warning: {msg}", markup=False, soft_wrap=True, style="yellow")

    @contextlib.contextmanager
    def progress(self) -> Iterator[Any]:
        """A live bar on a terminal; None otherwise (log lines carry the information)."""
        if self.console is None or not self.console.is_terminal:
            yield None
            return
        from rich.progress import BarColumn, Progress, TextColumn

        bar = Progress(
            BarColumn(bar_width=20), TextColumn("{task.description}"), console=self.console
        )
        with bar:
            bar.bar_task = bar.add_task("starting", total=1000)
            yield _Bar(bar)

    def summary(self, s: dict[str, Any]) -> None:
        best = (
            f"best {s['best_metric']} {s['best_score']:.2f} at step {s['best_step']}"
            if s["best_score"] is not None
            else "no validation"
        )
        self.info(
            f"done: {s['steps']} steps in {_hms(s['seconds'])}, {s['tok_s']:,.0f} tgt tok/s, "
            f"{best}; {s['stopped']}; model in {s['model_dir']}"
            + (f"; GPU peak {s['gpu_peak_mb']:,} MB" if "gpu_peak_mb" in s else "")
        )


class _Bar:
    """Adapter so the trainer updates one task without knowing rich."""

    def __init__(self, progress: Any) -> None:
        self.progress = progress
        self.task = progress.bar_task

    def update(self, description: str, completed: float) -> None:
        self.progress.update(self.task, description=description, completed=completed)


def train(
    cfg: Config,
    data_dir: str | Path,
    model_dir: str | Path,
    device: str = "auto",
    resume: bool = False,
    force: bool = False,
    quiet: bool = False,
    threads: int | None = None,
) -> dict[str, Any]:
    """Train `cfg` on DATA_DIR into MODEL_DIR; returns the summary (steps, time, best score ...).

    Under torchrun this runs DDP: every process calls train(), only rank 0 writes and prints.
    `threads` (CPU) defaults to all cores shared among the local processes.
    """
    data_dir, model_dir = Path(data_dir), Path(model_dir)
    if not data_dir.is_dir():
        raise NmtError(f"{data_dir}: data directory not found (run nmt preprocess first)")
    dist = distributed.from_env()
    dev = resolve_device(device, dist.local_rank)
    autocast_for(cfg.training.precision, dev)  # fail early on fp16 + cpu
    old_threads = torch.get_num_threads()
    if dev.type == "cpu":
        n = threads or max(1, (os.cpu_count() or 1) // dist.local_world_size)
        torch.set_num_threads(n)
    distributed.init(dist, dev)
    try:
        check_model_dir(model_dir, resume, force)
        distributed.barrier(dist)
        lock = model_dir_lock(model_dir) if dist.is_main else contextlib.nullcontext()
        with lock:
            if dist.is_main and force:
                reset_model_dir(model_dir)
            trainer = Trainer(cfg, data_dir, model_dir, dev, dist, resume, quiet)
            trainer.setup()
            distributed.barrier(dist)
            summary = trainer.run()
            distributed.barrier(dist)
            return summary
    finally:
        distributed.cleanup(dist)
        torch.set_num_threads(old_threads)
        sys.stderr.flush()
