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

Systems (--systems takes names, `core`, `all`, `capacity` or `extra`):
  core:  noattn, bahdanau, transformer (seq2seq-noattn, seq2seq-bahdanau, transformer-multi30k
         presets, trained on K=6 lines)
  all:   core + noattn-plain, bahdanau-plain (trained on plain Multi30k for at most the updates
         their K=6 counterparts took, the same budget: the k1 reference) +
         noattn-K4, bahdanau-K4, transformer-K4 (trained on K=4 lines: tested past the longest
         training caption count)
  capacity: noattn-512 (the fixed vector at twice the width, 512/512, on K=6 lines, at most
         9,600 updates: is it the one vector or its size?)
  extra: noattn-seed2, bahdanau-seed2 (a second seed of the K=6 runs)

Training to flat (scripts/flatrun.py): every system validates every 200 updates (greedy BLEU and
loss on the joined val set) and trains in chunks of 400 updates from 2,000 on, on its preset's
inverse-square-root schedule (fixed in updates, so the budget never shapes the curve). After a
chunk ending at update S, the curve is flat when the best validation BLEU after 0.75 S is within
max(0.1, 2% of the best) of the best up to 0.75 S and the validation loss has not improved by 1%
in the last 3 validations; a system still rising at 16,000 updates is reported as not flat. A run
judged under an earlier rule is judged again on its curve, and trains on where it is not flat.
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
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import joined_report  # noqa: E402
from expt_corpus import fetch, preprocess  # noqa: E402
from flatrun import (  # noqa: E402
    BIN,
    SMOKE_RULE,
    FlatRule,
    Job,
    Runner,
    corpus_mirror,
    exit_status,
    run_all,
    train_to_flat,
    translate,
)
from joined_systems import (  # noqa: E402
    CORPORA,
    SMOKE_PRESETS,
    SRC,
    SYSTEMS,
    TEST_K,
    TGT,
    System,
    choose,
)


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


def make_corpus(cfg: Settings, m30k: Path, corpus: str) -> None:
    """One joined corpus (WORK/corpus-CORPUS) and its preprocessed data (WORK/data-CORPUS), one
    SentencePiece model learnt on K=6 and reused by the others."""
    data, text = cfg.work / f"data-{corpus}", cfg.work / f"corpus-{corpus}"
    make: list[object] = [BIN / "python", ROOT / "scripts/make_joined_corpus.py", m30k]
    make += ["--dest", text, "--max-k", CORPORA[corpus]]
    cfg.runner.run(make + (["--limit", cfg.limit] if cfg.limit else []))
    tests = [text / f"test.k{i}" for i in range(1, TEST_K + 1)]
    vocab = ["--spm-from", cfg.work / "data-k6"] if corpus != "k6" else ["--vocab-size", 8000]
    if cfg.smoke and corpus == "k6":
        vocab = ["--vocab-size", 1000]
    splits = {"train": text / "train", "valid": text / "val", "test": tests}
    # --max-len 1000: no joined line is dropped (the longest is about 150 subwords)
    preprocess(cfg.runner, (SRC, TGT), splits, data, *vocab, "--max-len", 1000)


def prepare(cfg: Settings, corpora: set[str]) -> None:
    """Fetch Multi30k and make the joined corpora `corpora` names (and K=6, whose SentencePiece
    model the others reuse); each step is skipped when done."""
    m30k = cfg.work / "multi30k"
    fetch(cfg.runner, "multi30k", m30k, cfg.mirror)
    for corpus in CORPORA:
        if corpus in corpora | {"k6"} and not (cfg.work / f"data-{corpus}/manifest.json").exists():
            make_corpus(cfg, m30k, corpus)


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
    if s.max_steps:
        return dataclasses.replace(cfg.rule, max_steps=s.max_steps)
    if not s.budget_of:
        return cfg.rule
    outcome = cfg.work / s.budget_of / "flat.json"
    if not outcome.exists():
        raise RuntimeError(
            f"{s.name} trains for {s.budget_of}'s updates: train {s.budget_of} first"
        )
    done = json.loads(outcome.read_text(encoding="utf-8"))
    return dataclasses.replace(cfg.rule, max_steps=int(done.get("trained", done["steps"])))


def system_job(cfg: Settings, s: System) -> None:
    """Train one system to flat and translate its test sets."""
    train_to_flat(cfg.runner, rule_of(cfg, s), job_of(cfg, s), cfg.work / f"{s.name}.log")
    translate_tests(cfg, s)
    cfg.runner.say(f"   {s.name}: translated test.k1 .. test.k{TEST_K}")


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
    p.add_argument(
        "--systems", nargs="+", default=["core"], help="names, core, all, capacity or extra"
    )
    p.add_argument("--jobs", type=int, default=2, help="systems trained at once")
    p.add_argument("--threads", type=int, default=1, help="CPU threads per system")
    p.add_argument("--report-only", action="store_true", help="only score what is translated")
    p.add_argument("--smoke", action="store_true", help="tiny models and data (a few minutes)")
    args = p.parse_args(argv)
    default = ROOT.parent / "shared/corpora/multi30k"
    cfg = Settings(args.work, args.docs, corpus_mirror(args.mirror, default), Runner(args.threads))
    if args.smoke:
        cfg.rule = SMOKE_RULE
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
    print("== report", flush=True)
    joined_report.write_report(cfg.work, cfg.docs, [(s.name, s.corpus) for s in SYSTEMS])
    return status


if __name__ == "__main__":
    sys.exit(exit_status(main))
