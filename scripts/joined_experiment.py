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
  all:   core + noattn-plain, bahdanau-plain (trained on plain Multi30k for at most the updates
         their K=6 counterparts took, the same budget: the k1 reference) +
         noattn-K4, bahdanau-K4, transformer-K4 (trained on K=4 lines: tested past the longest
         training line)
  extra: noattn-seed2, bahdanau-seed2 (a second seed of the K=6 runs)

Training to flat (scripts/flatrun.py): every system validates every 200 updates (greedy BLEU on
the joined val set) and trains in chunks of 400 updates from 2,000 on, on its preset's
inverse-square-root schedule (fixed in updates, so the budget never shapes the curve). After a
chunk ending at update S, the curve is flat when the best validation BLEU after 0.75 S is less than
0.5 above the best up to 0.75 S; a system still rising at 16,000 updates is reported as not flat.
Every stage is resumable: a finished system is reused, an interrupted one resumes from its last
save (`nmt train --resume`, bitwise equal to an uninterrupted run), finished translations are
kept, and SIGTERM stops the running systems after a save. Two systems train at once (--jobs), one
thread each (--threads)."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from flatrun import (  # noqa: E402
    BIN,
    FlatRule,
    Job,
    Runner,
    corpus_mirror,
    exit_status,
    run_all,
    train_to_flat,
    translate,
)

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
    budget_of: str = ""  # a reference trains for this system's updates (the same budget)


SYSTEMS = [
    System("noattn", "seq2seq-noattn", "k6"),
    System("bahdanau", "seq2seq-bahdanau", "k6"),
    System("transformer", "transformer-multi30k", "k6"),
    System("noattn-plain", "seq2seq-noattn", "k1", group="all", budget_of="noattn"),
    System("bahdanau-plain", "seq2seq-bahdanau", "k1", group="all", budget_of="bahdanau"),
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


@dataclass
class Settings:
    """Where things go, how the systems train and translate."""

    work: Path
    docs: Path
    mirror: Path | None
    runner: Runner
    rule: FlatRule = FlatRule()
    beam: int = 5
    smoke: bool = False
    limit: int = 0  # smoke: the first N captions of each split


def prepare(cfg: Settings, corpora: set[str]) -> None:
    """Fetch Multi30k, write the joined corpora and preprocess them with one SentencePiece model
    (learnt on the K=6 corpus, reused by the others); only the corpora `corpora` names (and K=6)
    are made. Each step is skipped when done."""
    py, m30k = BIN / "python", cfg.work / "multi30k"
    fetch: list[object] = [
        py,
        ROOT / "scripts/fetch_corpus.py",
        "multi30k",
        "--dest",
        m30k,
        "--quiet",
    ]
    cfg.runner.run(fetch + (["--mirror", cfg.mirror] if cfg.mirror else []))
    for corpus, k in CORPORA.items():
        data, text = cfg.work / f"data-{corpus}", cfg.work / f"corpus-{corpus}"
        if corpus not in corpora | {"k6"} or (data / "manifest.json").exists():
            continue
        make: list[object] = [
            py,
            ROOT / "scripts/make_joined_corpus.py",
            m30k,
            "--dest",
            text,
            "--max-k",
            k,
        ]
        cfg.runner.run(make + (["--limit", cfg.limit] if cfg.limit else []))
        tests = [a for i in range(1, TEST_K + 1) for a in ("--test", text / f"test.k{i}")]
        vocab = ["--spm-from", cfg.work / "data-k6"] if corpus != "k6" else ["--vocab-size", 8000]
        if cfg.smoke and corpus == "k6":
            vocab = ["--vocab-size", 1000]
        # --max-len 1000: no joined line is dropped (the longest is about 150 subwords)
        cfg.runner.run(
            [
                BIN / "nmt",
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
            ]
        )


def job_of(cfg: Settings, s: System) -> Job:
    """The `nmt train` job of a system (tiny presets in smoke mode)."""
    preset, sets = s.preset, s.sets
    if cfg.smoke:
        preset, extra = SMOKE_PRESETS[s.preset]
        sets = extra + sets
    return Job(s.name, preset, cfg.work / f"data-{s.corpus}", cfg.work / s.name, sets)


def translate_tests(cfg: Settings, s: System) -> None:
    """Beam-search translations of test.k1 .. test.kN, each line whole, into
    MODEL_DIR/test.kN.hyp.de, and of test.kN split into sentences (the control of what sentence
    splitting gives back) into MODEL_DIR/test.kN.split.hyp.de."""
    model, log = cfg.work / s.name, cfg.work / f"{s.name}.log"
    for k in range(1, TEST_K + 1):
        src = cfg.work / f"corpus-{s.corpus}" / f"test.k{k}.{SRC}"
        translate(cfg.runner, model, src, model / f"test.k{k}.hyp.{TGT}", cfg.beam, log)
    split = model / f"test.k{TEST_K}.split.hyp.{TGT}"
    translate(cfg.runner, model, src, split, cfg.beam, log, split=True)


def rule_of(cfg: Settings, s: System) -> FlatRule:
    """How `s` trains: to a flat curve, or, for a reference, to a flat curve within the updates
    its joined counterpart took (the same budget, so the two k1 scores compare)."""
    if not s.budget_of:
        return cfg.rule
    outcome = cfg.work / s.budget_of / "flat.json"
    if not outcome.exists():
        raise RuntimeError(
            f"{s.name} trains for {s.budget_of}'s updates: train {s.budget_of} first"
        )
    steps = int(json.loads(outcome.read_text(encoding="utf-8"))["steps"])
    return dataclasses.replace(cfg.rule, max_steps=steps)


def system_job(cfg: Settings, s: System) -> None:
    """Train one system to flat and translate its test sets."""
    train_to_flat(cfg.runner, rule_of(cfg, s), job_of(cfg, s), cfg.work / f"{s.name}.log")
    translate_tests(cfg, s)
    cfg.runner.say(f"   {s.name}: translated test.k1 .. test.k{TEST_K}")


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
            known = ", ".join(s.name for s in SYSTEMS)
            raise SystemExit(f"error: unknown system {n!r} (choose from core, all, extra, {known})")
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
    default = ROOT.parent / "shared/corpora/multi30k"
    cfg = Settings(args.work, args.docs, corpus_mirror(args.mirror, default), Runner(args.threads))
    if args.smoke:
        cfg.rule = FlatRule(valid_every=10, chunk=10, min_steps=20, max_steps=40)
        cfg.smoke, cfg.limit, cfg.beam = True, 120, 2
    systems = choose(args.systems)
    cfg.work.mkdir(parents=True, exist_ok=True)
    status = 0
    if not args.report_only:
        print(f"== corpora and data in {cfg.work}", flush=True)
        prepare(cfg, {s.corpus for s in systems})
        print(
            f"== {len(systems)} systems, {args.jobs} at a time, {args.threads} thread(s) each",
            flush=True,
        )
        for phase in (False, True):  # references after the systems whose budget they take
            jobs = {
                s.name: functools.partial(system_job, cfg, s)
                for s in systems
                if bool(s.budget_of) == phase
            }
            status = max(status, run_all(cfg.runner, jobs, args.jobs))
            if cfg.runner.children.stopping.is_set():
                return status
    import joined_report

    print("== report", flush=True)
    joined_report.write_report(cfg.work, cfg.docs, [(s.name, s.corpus) for s in SYSTEMS])
    return status


if __name__ == "__main__":
    sys.exit(exit_status(main))
