"""What a training run prints (on stderr, so stdout stays data) and records: log lines, the live
bar and ETA, metrics.jsonl and the end-of-run summary.

The trainer decides what happened; this module decides how it reads.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from nmt.dirs.model import ModelDir
from nmt.runtime import code_version, rss_mb
from nmt.textio import naming_output

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from nmt.train.schedule import Budget
    from nmt.train.state import TrainState
    from nmt.train.validation import ValidResult


def hms(seconds: float) -> str:
    """`m:ss`, or `h:mm:ss` from an hour on."""
    s = int(max(0, seconds))
    return (
        f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
    )


@dataclass
class TrainSummary:
    """What `train()` returns and the last log line reports."""

    steps: int
    epochs_completed: int
    seconds: float
    tgt_tokens: int
    tok_s: float
    best_metric: str
    best_score: float | None
    best_step: int
    stopped: str
    exit_code: int  # 0, or 130 / 143 after SIGINT / SIGTERM
    model_dir: str
    gpu_peak_mb: int | None = None
    peak_rss_mb: int | None = None  # this process's resident memory at its peak (CPU side)
    final_checkpoint: str = "best"  # what `--checkpoint default` loads: best or averaged
    final_score: float | None = None  # its validation score (best_metric)


def summarize(
    st: TrainState,
    run_tokens: int,
    train_seconds: float,
    metric: str,
    stop_code: int,
    model_dir: str,
    gpu_peak_mb: int | None,
    peak_rss_mb: int | None = None,
) -> TrainSummary:
    """The summary of a run from its final counters and why it stopped."""
    from nmt.train.schedule import STOP_REASONS, Stop

    tok_s = run_tokens / train_seconds if train_seconds else 0.0
    return TrainSummary(
        steps=st.step,
        epochs_completed=st.epoch - 1,
        seconds=round(st.elapsed, 1),
        tgt_tokens=st.tokens,
        tok_s=round(tok_s, 1),
        best_metric=metric,
        best_score=st.best_score,
        best_step=st.best_step,
        stopped=STOP_REASONS.get(stop_code, "finished"),
        exit_code=int(stop_code) if stop_code in (Stop.SIGINT, Stop.SIGTERM) else 0,
        model_dir=model_dir,
        gpu_peak_mb=gpu_peak_mb,
        peak_rss_mb=peak_rss_mb,
    )


class Log:
    """Progress and messages on stderr; quiet prints nothing (errors surface as exceptions)."""

    def __init__(self, quiet: bool) -> None:
        from rich.console import Console

        self.quiet = quiet
        self.console = None if quiet else Console(stderr=True, highlight=False)

    def info(self, msg: str) -> None:
        """One plain line."""
        if self.console is not None:
            self.console.print(msg, markup=False, soft_wrap=True)

    def warn(self, msg: str) -> None:
        """One `warning:` line in yellow."""
        if self.console is not None:
            self.console.print(f"warning: {msg}", markup=False, soft_wrap=True, style="yellow")

    @contextlib.contextmanager
    def progress(self) -> Iterator[LiveBar | None]:
        """A live bar on a terminal; None otherwise (log lines carry the information)."""
        if self.console is None or not self.console.is_terminal:
            yield None
            return
        from rich.progress import BarColumn, Progress, TextColumn

        bar = Progress(
            BarColumn(bar_width=20), TextColumn("{task.description}"), console=self.console
        )
        with bar:
            yield LiveBar(bar, bar.add_task("starting", total=1000))

    def summary(self, s: TrainSummary) -> None:
        """The `done:` line."""
        best = (
            f"best {s.best_metric} {s.best_score:.2f} at step {s.best_step}"
            if s.best_score is not None
            else "no validation"
        )
        final = ""
        if s.final_checkpoint != "best" and s.final_score is not None:
            final = f"; translate uses {s.final_checkpoint} ({s.best_metric} {s.final_score:.2f})"
        self.info(
            f"done: {s.steps} steps in {hms(s.seconds)}, {s.tok_s:,.0f} tgt tok/s, "
            f"{best}{final}; {s.stopped}; model in {s.model_dir}"
            + (f"; GPU peak {s.gpu_peak_mb:,} MB" if s.gpu_peak_mb is not None else "")
            + (f"; peak RSS {s.peak_rss_mb:,} MB" if s.peak_rss_mb is not None else "")
        )


class LiveBar:
    """One task of a rich display, so the trainer updates it without knowing rich."""

    def __init__(self, progress: Progress, task: TaskID) -> None:
        self.progress = progress
        self.task = task

    def update(self, description: str, completed: float) -> None:
        """New text and position (rich throttles the rendering)."""
        self.progress.update(self.task, description=description, completed=completed)


class Metrics:
    """metrics.jsonl (one JSON object per event) and TensorBoard when it is installed."""

    def __init__(self, model_dir: ModelDir, enabled: bool) -> None:
        self.model_dir = model_dir
        self.path = model_dir.metrics_path
        self.enabled = enabled
        self.tb: Any = None

    def open(self, resume_step: int | None) -> None:
        """Drop events a resumed state never saw; start TensorBoard's writer if available."""
        if not self.enabled:
            return
        if resume_step is not None and self.path.exists():
            self._truncate_after(resume_step)
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(self.model_dir.tensorboard))
        except Exception:  # noqa: BLE001 - TensorBoard is optional
            self.tb = None

    def _truncate_after(self, step: int) -> None:
        """Drop events newer than the resumed state (written by a run that died later)."""
        from nmt.textio import atomic_write

        lines = self.path.read_text(encoding="utf-8", errors="replace").splitlines()
        kept = [
            ln for ln in lines if (row := _event(ln)) is not None and row.get("step", 0) <= step
        ]
        with atomic_write(self.path) as f:
            f.write("".join(ln + "\n" for ln in kept))

    def write(self, row: dict[str, Any]) -> None:
        """Append one event."""
        if not self.enabled:
            return
        with naming_output(self.path), open(self.path, "a", encoding="utf-8") as f:
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


def _event(line: str) -> dict[str, Any] | None:
    """One metrics.jsonl event; None for a blank or torn line (disk full, power loss)."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError:
        return None
    return row if isinstance(row, dict) else None


@dataclass
class Window:
    """Running sums of the current log interval."""

    tokens: int = 0
    loss: float = 0.0
    nll: float = 0.0
    steps: int = 0
    seconds: float = 0.0
    lr: float = 0.0

    def add(self, tokens: int, loss: float, nll: float, seconds: float, lr: float) -> None:
        """Count one update."""
        self.tokens += tokens
        self.loss += loss
        self.nll += nll
        self.steps += 1
        self.seconds += seconds
        self.lr = lr

    def tok_s(self) -> float:
        """Target tokens per second of update time."""
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


class Reporter:
    """Everything a training run prints or records, fed by the trainer's counters."""

    def __init__(self, log: Log, metrics: Metrics) -> None:
        self.log = log
        self.metrics = metrics
        self.window = Window()
        self.bar: LiveBar | None = None

    @contextlib.contextmanager
    def live(self) -> Iterator[None]:
        """Show the live bar (on a terminal) for the duration of the block."""
        with self.log.progress() as bar:
            self.bar = bar
            try:
                yield
            finally:
                self.bar = None

    def update_bar(self, st: TrainState, budget: Budget) -> None:
        """Refresh the live display (cheap; rich throttles rendering)."""
        if self.bar is None:
            return
        w = self.window
        eta = budget.eta(st.step, st.epoch, st.position)
        loss = w.loss / w.steps if w.steps else float("nan")
        text = (
            f"step {st.step} · epoch {st.epoch} · loss {loss:.3f} · lr {w.lr:.2e} · "
            f"{w.tok_s():,.0f} tok/s · {hms(budget.elapsed())}"
            + (f" · ETA {hms(eta)}" if eta is not None else "")
        )
        self.bar.update(text, budget.fraction(st.step, st.epoch, st.position) * 1000)

    def start_event(
        self,
        st: TrainState,
        device: str,
        precision: str,
        configured: str,
        valid: str,
        init: dict[str, Any] | None = None,
        kernel_caches: dict[str, str | None] | None = None,
    ) -> None:
        """The run's start in metrics.jsonl: the code (nmt.runtime.code_version), where it runs,
        the precisions `auto` chose, the kernel cache sizes (bf16 on CPU: most of its memory),
        and the weights it started from (`init`: fine-tuning's initial model, checkpoint and
        step)."""
        self.metrics.write(
            {
                "event": "start",
                "step": st.step,
                "code": code_version(),
                "device": device,
                "precision": precision,
                "precision_config": configured,
                "valid_precision": valid,
                **({"kernel_caches": kernel_caches} if kernel_caches else {}),
                **({"init": init} if init else {}),
            }
        )

    def train_event(self, st: TrainState, budget: Budget) -> None:
        """One log line and one metrics event for the last interval, then a new interval."""
        w = self.window
        if w.steps == 0:
            return
        elapsed = budget.elapsed()
        row = {
            "event": "train",
            "step": st.step,
            "epoch": st.epoch,
            "loss": round(w.loss / w.steps, 4),
            "ppl": round(math.exp(min(w.nll / w.steps, 50.0)), 2),
            "lr": w.lr,
            "tok_s": round(w.tok_s(), 1),
            "elapsed": round(elapsed, 1),
        }
        rss = rss_mb()
        if rss is not None:
            row["rss_mb"] = rss  # growth here is kernel caches and heap (docs/benchmarks.md)
        self.metrics.write(row)
        eta = budget.eta(st.step, st.epoch, st.position)
        self.log.info(
            f"step {st.step} | epoch {st.epoch} | loss {row['loss']:.3f} | ppl {row['ppl']:.1f} "
            f"| lr {w.lr:.2e} | {w.tok_s():,.0f} tgt tok/s | {hms(elapsed)}"
            + (f" | ETA {hms(eta)}" if eta is not None else "")
        )
        self.window = Window()

    def averaged_event(
        self, st: TrainState, steps: list[int], result: ValidResult, chosen: str, seconds: float
    ) -> None:
        """The end-of-training average's validation, and which checkpoint `default` now means."""
        self.metrics.write(
            {
                "event": "averaged",
                "step": st.step,
                "steps": steps,
                "valid_loss": round(result.loss, 4),
                "valid_ppl": round(result.ppl, 2),
                "bleu": round(result.bleu, 2),
                "valid_seconds": round(seconds, 1),
                "chosen": chosen,
                "bleu_signature": result.signature,
            }
        )
        self.log.info(
            f"averaged steps {', '.join(map(str, steps))} | loss {result.loss:.3f} | "
            f"BLEU {result.bleu:.2f} | {seconds:.0f}s | default checkpoint: {chosen}"
        )

    def end_event(self, summary: TrainSummary) -> None:
        """The run's summary as the last metrics event (what sweeps read back)."""
        self.metrics.write({"event": "end", "step": summary.steps, **asdict(summary)})

    def epoch_event(self, st: TrainState, batches: list[Any], ratio: float) -> None:
        """Padding waste of this epoch's batches: the price of the bucketing."""
        sents = sum(len(b) for b in batches)
        self.log.info(
            f"epoch {st.epoch}: {len(batches)} batches of {sents / len(batches):.0f} "
            f"pairs on average, padding {100 * ratio:.1f}% of batch tokens"
        )
        self.metrics.write(
            {
                "event": "epoch",
                "step": st.step,
                "epoch": st.epoch,
                "batches": len(batches),
                "padding": round(ratio, 4),
            }
        )

    def valid_event(
        self, st: TrainState, result: ValidResult, better: bool, valid_seconds: float
    ) -> None:
        """The validation line (with sacreBLEU's signature) and its metrics event."""
        self.metrics.write(
            {
                "event": "valid",
                "step": st.step,
                "epoch": st.epoch,
                "valid_loss": round(result.loss, 4),
                "valid_ppl": round(result.ppl, 2),
                "bleu": round(result.bleu, 2),
                "elapsed": round(st.elapsed, 1),
                "valid_seconds": round(valid_seconds, 1),
                "best": better,
                "bleu_signature": result.signature,
            }
        )
        self.log.info(
            f"valid step {st.step} | loss {result.loss:.3f} | ppl {result.ppl:.2f} | "
            f"BLEU {result.bleu:.2f}"
            + (" | new best" if better else "")
            + f" | {valid_seconds:.0f}s | {result.signature}"
        )
