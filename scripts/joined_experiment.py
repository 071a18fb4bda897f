#!/usr/bin/env python3
"""The joined-caption attention experiment (docs/attention-experiment.md): does a model's BLEU fall
as its input gets longer, when the content stays the same?

Multi30k en->de is joined into lines of 1..K captions (scripts/make_joined_corpus.py); each system
trains until its validation curve is flat, then translates the 1,000 test_2016_flickr captions
alone (test.k1) and joined in groups of 2 to 6 (test.k2 .. test.k6). The report scores each set
with BLEU and chrF (95% bootstrap intervals over the caption groups), the split oracle (the
system's own test.k1 translations joined in groups of k), the output/reference length ratio and
the share of translations cut by the length limit, and draws BLEU against k.

    python scripts/joined_experiment.py                    # the core systems, then the report
    python scripts/joined_experiment.py --systems all      # also the references and K=4 runs
    python scripts/joined_experiment.py --smoke --work /tmp/j --docs /tmp/j   # a few minutes

Systems (--systems takes names, `core`, `all` or `extra`):
  core:  noattn, bahdanau, transformer (seq2seq-noattn, seq2seq-bahdanau, transformer-multi30k
         presets, trained on K=6 lines)
  all:   core + noattn-plain, bahdanau-plain (trained on plain Multi30k: the k1 reference) +
         noattn-K4, bahdanau-K4, transformer-K4 (trained on K=4 lines: tested past the longest
         training line)
  extra: noattn-seed2, bahdanau-seed2 (a second seed of the K=6 runs)

Training to flat: every system validates every 200 updates (greedy BLEU on the joined val set)
and trains in chunks of 400 updates from 2,000 on, on its preset's inverse-square-root schedule
(fixed in updates, so the budget never shapes the curve). After a chunk ending at update S, the
curve is flat when the best validation BLEU after 0.75 S is less than 0.5 above the best up to
0.75 S; a system still rising at 16,000 updates is reported as not flat. Every stage is
resumable: a finished system is reused, an interrupted one resumes from its last save (`nmt train
--resume`, bitwise equal to an uninterrupted run), finished translations are kept, and SIGTERM
stops the running systems after a save. Two systems train at once (--jobs), one thread each
(--threads)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from nmt.plots.curves import read_events  # noqa: E402

SRC, TGT = "en", "de"
TEST_K = 6


@dataclass(frozen=True)
class System:
    """One trained model: its name, preset, corpus (by K) and extra `--set` overrides."""

    name: str
    preset: str
    corpus: str  # k6, k4 or k1
    sets: tuple[str, ...] = ()
    group: str = "core"


SYSTEMS = [
    System("noattn", "seq2seq-noattn", "k6"),
    System("bahdanau", "seq2seq-bahdanau", "k6"),
    System("transformer", "transformer-multi30k", "k6"),
    System("noattn-plain", "seq2seq-noattn", "k1", group="all"),
    System("bahdanau-plain", "seq2seq-bahdanau", "k1", group="all"),
    System("noattn-K4", "seq2seq-noattn", "k4", group="all"),
    System("bahdanau-K4", "seq2seq-bahdanau", "k4", group="all"),
    System("transformer-K4", "transformer-multi30k", "k4", group="all"),
    System("noattn-seed2", "seq2seq-noattn", "k6", ("training.seed=2",), group="extra"),
    System("bahdanau-seed2", "seq2seq-bahdanau", "k6", ("training.seed=2",), group="extra"),
]
SMOKE_PRESETS = {
    "seq2seq-noattn": ("seq2seq-tiny", ("model.attention=none",)),
    "seq2seq-bahdanau": ("seq2seq-tiny", ("model.attention=bahdanau",)),
    "transformer-multi30k": ("transformer-tiny", ()),
}
CORPORA = {"k6": 6, "k4": 4, "k1": 1}


class Children:
    """The child processes running now, so that a signal to the script reaches them: `nmt train`
    saves its state and stops on SIGTERM, and the next run resumes it."""

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
                raise subprocess.CalledProcessError(code, args)
        finally:
            if out:
                out.close()

    def stop(self, signum: int, frame: object) -> None:
        """Signal handler: pass SIGTERM on to every child and start nothing new."""
        with self.lock:
            self.stopping.set()
            for proc in self.procs:
                proc.terminate()


@dataclass
class Settings:
    """Where things go and how long each system trains."""

    work: Path
    docs: Path
    mirror: Path | None
    threads: int = 1
    valid_every: int = 200
    chunk: int = 400
    min_steps: int = 2000
    max_steps: int = 16000
    margin: float = 0.5
    beam: int = 5
    smoke: bool = False
    limit: int = 0  # smoke: the first N captions of each split
    log_lock: threading.Lock = field(default_factory=threading.Lock)
    children: Children = field(default_factory=Children)

    @property
    def bin(self) -> Path:
        return Path(sys.executable).parent

    def say(self, text: str) -> None:
        with self.log_lock:
            print(text, flush=True)


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


def thread_env(threads: int) -> dict[str, str]:
    """The environment of a child process limited to `threads` CPU threads."""
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(threads)
    return env


def prepare(cfg: Settings, corpora: set[str]) -> None:
    """Fetch Multi30k, write the three joined corpora and preprocess them with one SentencePiece
    model (learnt on the K=6 corpus, reused by the others); only the corpora `corpora` names
    (and K=6) are made. Each step is skipped when done."""
    py, nmt, env = cfg.bin / "python", cfg.bin / "nmt", thread_env(2)
    m30k = cfg.work / "multi30k"
    fetch = [py, ROOT / "scripts/fetch_corpus.py", "multi30k", "--dest", m30k, "--quiet"]
    cfg.children.run(fetch + (["--mirror", cfg.mirror] if cfg.mirror else []), env)
    for corpus, k in CORPORA.items():
        data = cfg.work / f"data-{corpus}"
        if corpus not in corpora | {"k6"} or (data / "manifest.json").exists():
            continue
        text = cfg.work / f"corpus-{corpus}"
        make = [py, ROOT / "scripts/make_joined_corpus.py", m30k, "--dest", text, "--max-k", k]
        cfg.children.run(make + (["--limit", cfg.limit] if cfg.limit else []), env)
        tests = [a for i in range(1, TEST_K + 1) for a in ("--test", text / f"test.k{i}")]
        vocab = ["--spm-from", cfg.work / "data-k6"] if corpus != "k6" else ["--vocab-size", 8000]
        if cfg.smoke and corpus == "k6":
            vocab = ["--vocab-size", 1000]
        # --max-len 1000: no joined line is dropped (the longest is about 150 subwords)
        cfg.children.run(
            [
                nmt,
                "preprocess",
                "--src-lang",
                SRC,
                "--tgt-lang",
                TGT,
                "--train",
                text / "train",
                "--valid",
                text / "val",
                *tests,
                "-o",
                data,
                *vocab,
                "--max-len",
                1000,
                "--force",
                "--quiet",
            ],
            env,
        )


def train_command(cfg: Settings, s: System, steps: int, resume: bool) -> list[object]:
    """`nmt train` for system s up to `steps` updates (no time limit, no patience)."""
    preset, sets = s.preset, s.sets
    if cfg.smoke:
        preset, extra = SMOKE_PRESETS[s.preset]
        sets = extra + sets
    overrides = [
        f"training.valid_every={cfg.valid_every}",
        "training.patience=0",
        f"training.max_steps={steps}",
        *sets,
    ]
    cmd: list[object] = [
        cfg.bin / "nmt",
        "train",
        "--preset",
        preset,
        "-d",
        cfg.work / f"data-{s.corpus}",
        "-o",
        cfg.work / s.name,
        "--max-time",
        "0",
        "--quiet",
    ]
    for o in overrides:
        cmd += ["--set", o]
    return cmd + (["--resume"] if resume else ["--force"])


def train_to_flat(cfg: Settings, s: System) -> dict:
    """Train s in chunks until its curve is flat or max_steps is reached; return the outcome
    (also written to MODEL_DIR/flat.json). Resumes where an earlier call stopped."""
    model = cfg.work / s.name
    outcome_file = model / "flat.json"
    if outcome_file.exists():
        return json.loads(outcome_file.read_text(encoding="utf-8"))
    model.mkdir(parents=True, exist_ok=True)
    log = cfg.work / f"{s.name}.log"
    env = thread_env(cfg.threads)
    steps = cfg.min_steps
    while True:
        points = valid_points(model)
        done = points[-1][0] if points else 0
        while steps <= done and not flat_at(points, steps, cfg.margin) and steps < cfg.max_steps:
            steps += cfg.chunk
        if steps > done:
            resume = (model / "checkpoints" / "last.state.pt").exists()
            cfg.say(f"   {s.name}: training to update {steps:,}" + (" (resumed)" if resume else ""))
            cfg.children.run(train_command(cfg, s, steps, resume), env, log)
            points = valid_points(model)
        flat = flat_at(points, steps, cfg.margin)
        if flat or steps >= cfg.max_steps:
            break
        best = max(b for _, b in points)
        cfg.say(f"   {s.name}: not flat at update {steps:,} (best valid BLEU {best:.2f})")
        steps += cfg.chunk
    outcome = {"flat": flat, "steps": steps, "margin": cfg.margin, "points": points}
    outcome_file.write_text(json.dumps(outcome), encoding="utf-8")
    cfg.say(f"   {s.name}: {'flat' if flat else 'NOT flat'} at update {steps:,}")
    return outcome


def translate_tests(cfg: Settings, s: System) -> None:
    """Beam-search translations of test.k1 .. test.kN into MODEL_DIR/test.kN.hyp.de."""
    model = cfg.work / s.name
    env = thread_env(cfg.threads)
    for k in range(1, TEST_K + 1):
        hyp = model / f"test.k{k}.hyp.{TGT}"
        if hyp.exists():
            continue
        src = cfg.work / f"corpus-{s.corpus}" / f"test.k{k}.{SRC}"
        cfg.children.run(
            [
                cfg.bin / "nmt",
                "translate",
                "-m",
                model,
                src,
                "-o",
                hyp,
                "--beam-size",
                cfg.beam,
                "--workers",
                1,
                "--quiet",
            ],
            env,
            cfg.work / f"{s.name}.log",
        )


def system_job(cfg: Settings, s: System) -> None:
    """Train one system to flat and translate its test sets."""
    train_to_flat(cfg, s)
    translate_tests(cfg, s)
    cfg.say(f"   {s.name}: translated test.k1 .. test.k{TEST_K}")


def choose(names: Sequence[str]) -> list[System]:
    """The systems --systems names, in the table's order."""
    wanted: set[str] = set()
    for n in names:
        if n in ("core", "all", "extra"):
            groups = {"core": {"core"}, "all": {"core", "all"}, "extra": {"extra"}}[n]
            wanted |= {s.name for s in SYSTEMS if s.group in groups}
        elif n in {s.name for s in SYSTEMS}:
            wanted.add(n)
        else:
            raise SystemExit(
                f"error: unknown system {n!r} (choose from core, all, extra, "
                + ", ".join(s.name for s in SYSTEMS)
                + ")"
            )
    return [s for s in SYSTEMS if s.name in wanted]


def main(argv: list[str] | None = None) -> int:
    """Prepare, train and translate the chosen systems, then write the report."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--work", type=Path, default=ROOT / "work/joined", help="outputs")
    p.add_argument("--docs", type=Path, default=ROOT / "docs", help="where the figures go")
    p.add_argument(
        "--mirror",
        type=Path,
        default=None,
        help="a Multi30k mirror (default: NMT_CORPUS_MIRROR or ../shared/corpora/multi30k)",
    )
    p.add_argument("--systems", nargs="+", default=["core"], help="names, core, all or extra")
    p.add_argument("--jobs", type=int, default=2, help="systems trained at once")
    p.add_argument("--threads", type=int, default=1, help="CPU threads per system")
    p.add_argument("--report-only", action="store_true", help="only score what is translated")
    p.add_argument("--smoke", action="store_true", help="tiny models and data (a few minutes)")
    args = p.parse_args(argv)
    mirror = args.mirror or Path(
        os.environ.get("NMT_CORPUS_MIRROR", ROOT.parent / "shared/corpora/multi30k")
    )
    cfg = Settings(args.work, args.docs, mirror if mirror.exists() else None, threads=args.threads)
    if args.smoke:
        cfg.valid_every, cfg.chunk, cfg.min_steps, cfg.max_steps = 10, 10, 20, 40
        cfg.smoke, cfg.limit, cfg.beam = True, 120, 2
    systems = choose(args.systems)
    cfg.work.mkdir(parents=True, exist_ok=True)
    failed: list[str] = []
    if not args.report_only:
        print(f"== corpora and data in {cfg.work}", flush=True)
        prepare(cfg, {s.corpus for s in systems})
        print(
            f"== {len(systems)} systems, {args.jobs} at a time, {args.threads} thread(s) each",
            flush=True,
        )
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, cfg.children.stop)
        with ThreadPoolExecutor(args.jobs) as pool:
            jobs = {s.name: pool.submit(system_job, cfg, s) for s in systems}
        failed = [name for name, job in jobs.items() if job.exception() is not None]
        if cfg.children.stopping.is_set():
            print("stopped: run the same command again to resume", file=sys.stderr)
            return 1
        for name in failed:
            print(
                f"error: {name}: {jobs[name].exception()} (see {cfg.work / name}.log)",
                file=sys.stderr,
            )
    import joined_report

    print("== report", flush=True)
    joined_report.write_report(cfg.work, cfg.docs, [(s.name, s.corpus) for s in SYSTEMS])
    return 1 if not args.report_only and failed else 0


if __name__ == "__main__":
    sys.exit(main())
