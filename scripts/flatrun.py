"""Training systems until their validation curves are flat, resumably, several at once: what the
experiment scripts (joined_experiment.py, justice_experiment.py) share.

The flatness rule: after a chunk of updates ending at update S, the curve is flat when the best
validation BLEU after 0.75 S is less than `margin` above the best up to 0.75 S. Each system trains
in chunks from `min_steps` on (`nmt train --resume` between chunks, bitwise equal to an
uninterrupted run) on its preset's schedule, which is fixed in updates, so the budget never
shapes the curve; one still rising at `max_steps` is reported as not flat. SIGTERM or Ctrl-C
reaches every `nmt train` (which saves and stops), and running the script again resumes."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from nmt.plots.curves import read_events

BIN = Path(sys.executable).parent


class ChildFailed(RuntimeError):
    """A child command that exited non-zero: what it was, its status, where its output went."""

    def __init__(self, args: Sequence[str], code: int, log: Path | None) -> None:
        where = f" (its output: {log})" if log else ""
        super().__init__(f"{shlex.join(args)} exited with status {code}{where}")
        self.code = code


class Children:
    """The child processes running now, so that a signal to the script reaches them."""

    def __init__(self) -> None:
        self.procs: set[subprocess.Popen] = set()
        self.lock = threading.Lock()
        self.stopping = threading.Event()

    def run(self, cmd: Sequence[object], env: dict[str, str], log: Path | None = None) -> None:
        """Run a command to its end; its output goes to `log` (appended) when given. A failure,
        or a stop asked for before it starts, raises."""
        args = [str(c) for c in cmd]
        out = open(log, "a", encoding="utf-8") if log else None  # noqa: SIM115
        try:
            if out:
                out.write("$ " + " ".join(args) + "\n")
                out.flush()
            with self.lock:
                if self.stopping.is_set():
                    raise RuntimeError("stopped")
                proc = subprocess.Popen(args, env=env, stdout=out, stderr=out and subprocess.STDOUT)
                self.procs.add(proc)
            code = proc.wait()
            with self.lock:
                self.procs.discard(proc)
            if code:
                raise ChildFailed(args, code, log)
        finally:
            if out:
                out.close()

    def stop(self, signum: int, frame: object) -> None:
        """Signal handler: pass SIGTERM on to every child and start nothing new."""
        with self.lock:
            self.stopping.set()
            for proc in self.procs:
                proc.terminate()


def corpus_mirror(given: Path | None, default: Path) -> Path | None:
    """The corpus mirror to fetch from: the one given, else NMT_CORPUS_MIRROR, else `default`
    where it exists (None: the fetcher downloads, or says in one line why it cannot). A mirror
    named on purpose is passed on even when missing, so the fetcher names it instead of
    falling back to a download."""
    if given is not None:
        return given
    env = os.environ.get("NMT_CORPUS_MIRROR")
    if env:
        return Path(env)
    return default if default.exists() else None


def exit_status(main: Callable[[], int]) -> int:
    """`main`'s exit status, where a failed child command ends the script with one line naming it
    (the child said why just above it, or in its log) instead of a traceback."""
    try:
        return main()
    except ChildFailed as error:
        print(f"error: {error}", file=sys.stderr)
        return error.code if 0 < error.code < 256 else 1


@dataclass
class Runner:
    """How the children run: threads each, their processes, one lock for printed lines."""

    threads: int = 1
    children: Children = field(default_factory=Children)
    log_lock: threading.Lock = field(default_factory=threading.Lock)

    def say(self, text: str) -> None:
        """Print a line whole, whichever job prints it."""
        with self.log_lock:
            print(text, flush=True)

    @property
    def env(self) -> dict[str, str]:
        """The environment of a child limited to `threads` CPU threads."""
        env = dict(os.environ)
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = str(self.threads)
        return env

    def run(self, cmd: Sequence[object], log: Path | None = None) -> None:
        """A child command with this runner's environment."""
        self.children.run(cmd, self.env, log)


@dataclass(frozen=True)
class FlatRule:
    """When a curve counts as flat, and how training gets there."""

    valid_every: int = 200
    chunk: int = 400
    min_steps: int = 2000
    max_steps: int = 16000
    margin: float = 0.5


@dataclass(frozen=True)
class Job:
    """One system to train: `nmt train --preset PRESET -d DATA -o MODEL --set ...`."""

    name: str
    preset: str
    data: Path
    model: Path
    sets: tuple[str, ...] = ()


def flat_at(points: Sequence[tuple[int, float]], step: int, margin: float) -> bool:
    """Whether the validation curve up to `step` is flat: the best BLEU after 0.75 * step is less
    than `margin` above the best up to it (both parts must hold a validation)."""
    cut = 0.75 * step
    before = [b for s, b in points if s <= cut]
    after = [b for s, b in points if cut < s <= step]
    return bool(before and after) and max(after) < max(before) + margin


def valid_points(model_dir: Path) -> list[tuple[int, float]]:
    """(update, validation BLEU) of a run, one per update (a resumed run's last word kept)."""
    if not (model_dir / "metrics.jsonl").is_file():
        return []
    points: dict[int, float] = {}
    for e in read_events(model_dir):
        if e.get("event") == "valid" and e.get("bleu") is not None:
            points[int(e["step"])] = float(e["bleu"])
    return sorted(points.items())


def train_command(job: Job, rule: FlatRule, steps: int, resume: bool) -> list[object]:
    """`nmt train` for `job` up to `steps` updates (no time limit, no patience)."""
    cmd: list[object] = [
        BIN / "nmt",
        "train",
        "--preset",
        job.preset,
        "-d",
        job.data,
        "-o",
        job.model,
        "--max-time",
        "0",
        "--quiet",
    ]
    for o in (
        f"training.valid_every={rule.valid_every}",
        "training.patience=0",
        f"training.max_steps={steps}",
        *job.sets,
    ):
        cmd += ["--set", o]
    return cmd + (["--resume"] if resume else ["--force"])


def train_to_flat(runner: Runner, rule: FlatRule, job: Job, log: Path) -> dict:
    """Train `job` in chunks until its curve is flat or max_steps is reached; return the outcome
    (also written to MODEL/flat.json). Resumes where an earlier call stopped."""
    outcome_file = job.model / "flat.json"
    if outcome_file.exists():
        return json.loads(outcome_file.read_text(encoding="utf-8"))
    job.model.mkdir(parents=True, exist_ok=True)
    steps = min(rule.min_steps, rule.max_steps)
    while True:
        points = valid_points(job.model)
        done = points[-1][0] if points else 0
        while steps <= done and not flat_at(points, steps, rule.margin) and steps < rule.max_steps:
            steps = min(steps + rule.chunk, rule.max_steps)
        if steps > done:
            resume = (job.model / "checkpoints" / "last.state.pt").exists()
            runner.say(
                f"   {job.name}: training to update {steps:,}" + (" (resumed)" if resume else "")
            )
            runner.run(train_command(job, rule, steps, resume), log)
            points = valid_points(job.model)
        flat = flat_at(points, steps, rule.margin)
        if flat or steps >= rule.max_steps:
            break
        best = max(b for _, b in points)
        runner.say(f"   {job.name}: not flat at update {steps:,} (best valid BLEU {best:.2f})")
        steps = min(steps + rule.chunk, rule.max_steps)
    outcome = {"flat": flat, "steps": steps, "margin": rule.margin, "points": points}
    outcome_file.write_text(json.dumps(outcome), encoding="utf-8")
    runner.say(f"   {job.name}: {'flat' if flat else 'NOT flat'} at update {steps:,}")
    return outcome


def translate(
    runner: Runner, model: Path, src: Path, hyp: Path, beam: int, log: Path, split: bool = False
) -> None:
    """`nmt translate` of `src` into `hyp` with beam search on one decoding worker, unless `hyp`
    is already there (written atomically, so it is whole). Each line is translated whole
    (`--whole-lines`) unless `split`: by default `nmt translate` splits a line holding several
    sentences and translates them one by one, which would hide the very length these experiments
    measure; `split` asks for that on purpose (`--split-sentences`), as a control."""
    if not hyp.exists():
        cmd: list[object] = [BIN / "nmt", "translate", "-m", model, src, "-o", hyp]
        how = "--split-sentences" if split else "--whole-lines"
        runner.run(cmd + ["--beam-size", beam, "--workers", 1, how, "--quiet"], log)


def run_all(runner: Runner, jobs: Mapping[str, Callable[[], object]], at_once: int) -> int:
    """Run the jobs, `at_once` at a time, in order; SIGTERM / Ctrl-C stop them after a save.
    Returns the exit status: 0, or 1 when stopped or when a job failed (each named)."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, runner.children.stop)
    with ThreadPoolExecutor(at_once) as pool:
        futures = {name: pool.submit(job) for name, job in jobs.items()}
    if runner.children.stopping.is_set():
        print("stopped: run the same command again to resume", file=sys.stderr)
        return 1
    failed = {name: f.exception() for name, f in futures.items() if f.exception() is not None}
    for name, error in failed.items():
        print(f"error: {name}: {error}", file=sys.stderr)
    return 1 if failed else 0
