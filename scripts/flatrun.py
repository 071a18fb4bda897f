"""Training systems until their validation curves are flat, resumably, several at once: what the
experiment scripts (joined_experiment.py, justice_experiment.py) share.

The flatness rule: after a chunk of updates ending at update S, the curve is flat when the best
validation BLEU after 0.75 S is within max(0.1, 2% of the best) of the best up to 0.75 S, and the
validation loss has not improved by 1% in the last 3 validations (whichever stops later, so a weak
system whose BLEU sits near the floor while its loss still falls trains on). Each system trains
in chunks from `min_steps` on (`nmt train --resume` between chunks, bitwise equal to an
uninterrupted run) on its preset's schedule, which is fixed in updates, so the budget never
shapes the curve; one still rising at `max_steps` is reported as not flat. SIGTERM or Ctrl-C
reaches every `nmt train` (which saves and stops), and running the script again resumes.

Run on its own, it says where the earlier rule (the best after 0.75 S less than 0.5 BLEU above
the best before, loss not looked at) and this one call finished runs flat:

    python scripts/flatrun.py work/joined/noattn work/joined/bahdanau
    python scripts/flatrun.py work/justice/noattn --chunk 800 --min-steps 4000 --max-steps 12000"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
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
        """The environment of a child limited to `threads` CPU threads, with oneDNN's kernel
        cache bounded unless the caller's environment sets it."""
        env = dict(os.environ)
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = str(self.threads)
        # oneDNN keeps a compiled kernel for every new batch shape (1,024 by default), which grows
        # a long CPU run's resident memory by gigabytes; a smaller cache gives the same weights
        env.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "64")
        return env

    def run(self, cmd: Sequence[object], log: Path | None = None) -> None:
        """A child command with this runner's environment."""
        self.children.run(cmd, self.env, log)


@dataclass(frozen=True)
class FlatRule:
    """When a curve counts as flat, and how training gets there: validation every `valid_every`
    updates, the rule checked every `chunk` from `min_steps` on, at most `max_steps`."""

    valid_every: int = 200
    chunk: int = 400
    min_steps: int = 2000
    max_steps: int = 16000
    bleu_share: float = 0.02  # BLEU: within max(bleu_floor, bleu_share * best) of the best before
    bleu_floor: float = 0.1
    loss_share: float = 0.01  # loss: no gain of loss_share in the last loss_window validations
    loss_window: int = 3  # 0: BLEU alone


# Smoke runs: a few updates, checked often, to see that everything runs.
SMOKE_RULE = FlatRule(valid_every=10, chunk=10, min_steps=20, max_steps=40)
# The rule the first runs stopped by: 0.5 BLEU absolute, no loss.
EARLIER = {"bleu_share": 0.0, "bleu_floor": 0.5, "loss_window": 0}


@dataclass(frozen=True)
class Job:
    """One system to train: `nmt train --preset PRESET -d DATA -o MODEL --set ...`."""

    name: str
    preset: str
    data: Path
    model: Path
    sets: tuple[str, ...] = ()


Point = tuple[int, float, float | None]  # update, validation BLEU, validation loss (if logged)


def bleu_flat(points: Sequence[Point], step: int, rule: FlatRule) -> bool:
    """Whether BLEU has stopped rising at update S = `step`: the best after 0.75 S is within
    max(bleu_floor, bleu_share of the best) of the best up to 0.75 S (both parts must hold a
    validation), so a weak system is held to a margin its own size."""
    cut = 0.75 * step
    before = [b for s, b, _ in points if s <= cut]
    after = [b for s, b, _ in points if cut < s <= step]
    if not (before and after):
        return False
    best = max(before + after)
    return max(after) - max(before) < max(rule.bleu_floor, rule.bleu_share * best)


def loss_flat(points: Sequence[Point], step: int, rule: FlatRule) -> bool:
    """Whether validation loss has stopped falling at `step`: none of the last `loss_window`
    validations is `loss_share` below the best loss before them. A run that logs no loss, or a
    rule with no loss window, is judged by BLEU alone."""
    losses = [x for s, _, x in points if s <= step and x is not None]
    if not losses or rule.loss_window == 0:
        return True
    if len(losses) <= rule.loss_window:
        return False
    best_before = min(losses[: -rule.loss_window])
    return min(losses[-rule.loss_window :]) > (1 - rule.loss_share) * best_before


def flat_at(points: Sequence[Point], step: int, rule: FlatRule) -> bool:
    """Whether the curve up to `step` is flat: BLEU and loss both, whichever stops later."""
    return bleu_flat(points, step, rule) and loss_flat(points, step, rule)


def valid_points(model_dir: Path) -> list[Point]:
    """(update, validation BLEU, validation loss) of a run, one per update (a resumed run's last
    word kept)."""
    if not (model_dir / "metrics.jsonl").is_file():
        return []
    points: dict[int, Point] = {}
    for e in read_events(model_dir):
        if e.get("event") == "valid" and e.get("bleu") is not None:
            loss = e.get("valid_loss")
            step = int(e["step"])
            points[step] = (step, float(e["bleu"]), None if loss is None else float(loss))
    return [points[s] for s in sorted(points)]


def train_command(job: Job, rule: FlatRule, steps: int, resume: bool) -> list[object]:
    """`nmt train` for `job` up to `steps` updates (no time limit, no patience)."""
    cmd: list[object] = [BIN / "nmt", "train", "--preset", job.preset, "-d", job.data]
    cmd += ["-o", job.model, "--max-time", "0", "--quiet"]
    sets = [f"training.valid_every={rule.valid_every}", "training.patience=0"]
    for o in [*sets, f"training.max_steps={steps}", *job.sets]:
        cmd += ["--set", o]
    return cmd + (["--resume"] if resume else ["--force"])


def next_check(points: Sequence[Point], rule: FlatRule, steps: int) -> int:
    """The first update from `steps` on, chunk by chunk, where the rule has to be checked: past
    the curve so far, or where the curve so far is flat, or the cap."""
    done = points[-1][0] if points else 0
    while steps <= done and not flat_at(points, steps, rule) and steps < rule.max_steps:
        steps = min(steps + rule.chunk, rule.max_steps)
    return steps


def train_chunk(runner: Runner, rule: FlatRule, job: Job, steps: int, log: Path) -> None:
    """Train (or resume) `job` up to `steps` updates."""
    resume = (job.model / "checkpoints" / "last.state.pt").exists()
    runner.say(f"   {job.name}: training to update {steps:,}" + (" (resumed)" if resume else ""))
    runner.run(train_command(job, rule, steps, resume), log)


def train_to_flat(runner: Runner, rule: FlatRule, job: Job, log: Path) -> dict:
    """Train `job` in chunks until its curve is flat or max_steps is reached; return the outcome
    (also written to MODEL/flat.json). Resumes where an earlier call stopped; an outcome found
    under another rule is checked again on the curve, and training goes on where it is not flat."""
    outcome_file = job.model / "flat.json"
    if outcome_file.exists():
        outcome = json.loads(outcome_file.read_text(encoding="utf-8"))
        if outcome.get("rule") == asdict(rule):
            return outcome
    job.model.mkdir(parents=True, exist_ok=True)
    steps = min(rule.min_steps, rule.max_steps)
    while True:
        points = valid_points(job.model)
        steps = next_check(points, rule, steps)
        if steps > (points[-1][0] if points else 0):
            train_chunk(runner, rule, job, steps, log)
            points = valid_points(job.model)
        flat = flat_at(points, steps, rule)
        if flat or steps >= rule.max_steps:
            break
        best = max(b for _, b, _ in points)
        runner.say(f"   {job.name}: not flat at update {steps:,} (best valid BLEU {best:.2f})")
        steps = min(steps + rule.chunk, rule.max_steps)
    trained = points[-1][0] if points else 0
    outcome = {"flat": flat, "steps": steps, "trained": trained, "rule": asdict(rule)}
    outcome["points"] = points
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


def first_flat(points: Sequence[Point], rule: FlatRule) -> int | None:
    """The first check (min_steps, then every chunk, to max_steps) at which the curve so far is
    flat, or None when it is not flat anywhere it reaches."""
    last = points[-1][0] if points else 0
    step = min(rule.min_steps, rule.max_steps)
    while step <= last:
        if flat_at(points, step, rule):
            return step
        if step >= rule.max_steps:
            break
        step = min(step + rule.chunk, rule.max_steps)
    return None


def compare(models: Sequence[Path], rule: FlatRule) -> list[str]:
    """For each run, where the earlier rule and this one call its curve flat."""
    earlier = replace(rule, **EARLIER)
    lines = []
    for model in models:
        points = valid_points(model)
        last = points[-1][0] if points else 0
        at = [first_flat(points, r) for r in (earlier, rule)]
        said = [f"flat at {s:,}" if s else f"not flat by {last:,}" for s in at]
        change = "same" if at[0] == at[1] else "CHANGED"
        lines.append(f"{model}: earlier rule {said[0]}, this rule {said[1]} ({change})")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Compare the rules on finished runs' curves."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("models", type=Path, nargs="+", help="MODEL_DIRs with a metrics.jsonl")
    p.add_argument("--chunk", type=int, default=FlatRule.chunk, help="updates between checks")
    p.add_argument("--min-steps", type=int, default=FlatRule.min_steps, help="the first check")
    p.add_argument("--max-steps", type=int, default=FlatRule.max_steps, help="the cap")
    args = p.parse_args(argv)
    rule = FlatRule(chunk=args.chunk, min_steps=args.min_steps, max_steps=args.max_steps)
    print("\n".join(compare(args.models, rule)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
