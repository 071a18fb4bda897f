#!/usr/bin/env python3
"""Attention on naturally long sentences: the consolidated Acts and Regulations of Canada, en->fr
(justice-laws-en-fr), learnt by a fixed-vector RNN, an attentional RNN and a Transformer, each
trained until its validation curve is flat, scored whole and by source length
(docs/attention-experiment.md, "Real long sentences: Canadian law").

    python scripts/justice_experiment.py                  # the three systems, then the report
    python scripts/justice_experiment.py --smoke --work /tmp/jl   # tiny models, a few minutes
    python scripts/justice_experiment.py --prepare-only           # the data alone
    python scripts/justice_experiment.py --max-steps 3200 --kept work/justice-kept --no-recipe
                                      # the page's runs, their outputs kept; trained only where missing

Data: train is a seeded sample of --subset pairs of the 425,473 (0: all of them), so that a
system sees several epochs in a few hours of one CPU thread; valid is a seeded sample of 1,000
dev lines across all 47 dev documents (`nmt preprocess --valid-sample`); test is the 4,701 lines
of the 37 test documents. One joint SentencePiece model; `--max-len 400` and max_positions 512
keep every line of up to 400 subwords (the longest is 248 words), and the report counts what
was dropped.

Systems (scripts/flatrun.py trains each to a flat curve: validation every 400 updates, the rule
checked every 800 from 4,000 on, at most its cap in updates: 12,000 for both RNNs, so they end at
the same count unless flat first, 9,600 for the Transformer; --max-steps sets one cap for all):
seq2seq-noattn, seq2seq-bahdanau and transformer-small on an inverse-square-root schedule (its
preset's linear decay would end with whatever budget the chunks had reached). Then each
translates test (beam 5), and the report (scripts/justice_report.py) gives BLEU and chrF whole
and in 10-word source-length bins out to 70+ with 95% intervals from a bootstrap by document,
BLEU relative to the 10-20 bin, the train/test near-duplicate rate and the by-length table
without those lines, the length ratio, the share of translations cut by the length limit, and
the figures.
Last, the system with the best validation BLEU is measured as a model to use: its best checkpoint
against the average of its last five, with and without sentence splitting, and its CTranslate2
exports, each timed on --recipe-threads threads (scripts/justice_recipe.py)."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import expt_outputs  # noqa: E402
import flatrun  # noqa: E402
import justice_recipe  # noqa: E402
import justice_report  # noqa: E402
from expt_corpus import fetch, preprocess, sample_pairs  # noqa: E402
from flatrun import SMOKE_RULE, FlatRule, Job, Runner  # noqa: E402
from justice_systems import BUCKETS, CAPS, SMOKE, SRC, SYSTEMS, TGT  # noqa: E402


@dataclasses.dataclass
class Settings:
    """Where things go and how the systems train."""

    work: Path
    docs: Path
    mirror: Path | None
    runner: Runner
    rule: FlatRule
    subset: int
    vocab: int = 16000
    smoke: bool = False
    kept: Path | None = None  # where finished systems' outputs are kept and taken from
    caps: dict[str, int] = dataclasses.field(default_factory=lambda: dict(CAPS))


def prepare(cfg: Settings) -> None:
    """Fetch the corpus from the mirror, draw the train subset, preprocess (reused when done)."""
    corpus = cfg.work / "corpus"
    fetch(cfg.runner, "justice-laws-en-fr", corpus, cfg.mirror)
    data = cfg.work / "data"
    if (data / "manifest.json").exists():
        return
    train = corpus / "train"
    if cfg.subset:
        train = cfg.work / "train-subset"
        sample_pairs(corpus / f"train.{SRC}", corpus / f"train.{TGT}", train, cfg.subset, 1)
    test = corpus / "test"
    if cfg.smoke:  # a short test set too, under the same split name
        test = cfg.work / "smoke" / "test"
        test.parent.mkdir(exist_ok=True)
        sample_pairs(corpus / f"test.{SRC}", corpus / f"test.{TGT}", test, 120, 1)
    splits = {"train": train, "valid": corpus / "dev", "test": test}
    sample = ["--valid-sample", 120 if cfg.smoke else 1000]
    vocab = ["--vocab-size", cfg.vocab, "--max-len", 400]
    preprocess(cfg.runner, (SRC, TGT), splits, data, *sample, *vocab)


def rule_of(cfg: Settings, name: str) -> FlatRule:
    """How system `name` trains: the flat rule, up to its cap in updates (smoke: the smoke rule's)."""
    return cfg.rule if cfg.smoke else dataclasses.replace(cfg.rule, max_steps=cfg.caps[name])


def system_job(cfg: Settings, name: str) -> None:
    """Train one system to flat, then translate test with beam 5; with `cfg.kept`, take its
    outputs from there when they were made under the same rule, and keep them there after."""
    preset, sets = (SMOKE if cfg.smoke else SYSTEMS)[name]
    model, rule = cfg.work / name, rule_of(cfg, name)
    if cfg.kept and expt_outputs.restore(cfg.kept / name, model, dataclasses.asdict(rule)):
        cfg.runner.say(f"   {name}: outputs taken from {cfg.kept / name}, not trained")
    job = Job(name, preset, cfg.work / "data", model, sets)
    flatrun.train_to_flat(cfg.runner, rule, job, cfg.work / f"{name}.log")
    src, hyp = cfg.work / "data" / f"test.{SRC}.txt", model / f"test.hyp.{TGT}"
    flatrun.translate(cfg.runner, model, src, hyp, 2 if cfg.smoke else 5, cfg.work / f"{name}.log")
    cfg.runner.say(f"   {name}: translated test")
    if cfg.kept:
        expt_outputs.keep(model, cfg.kept / name, [hyp.name])


def main(argv: list[str] | None = None) -> int:
    """Prepare, train, translate, report."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--work", type=Path, default=ROOT / "work/justice", help="outputs")
    p.add_argument("--docs", type=Path, default=ROOT / "docs", help="where the figures go")
    p.add_argument(
        "--mirror",
        type=Path,
        default=None,
        help="a justice-laws-en-fr mirror "
        "(default: NMT_CORPUS_MIRROR or ../shared/corpora/justice-laws-en-fr)",
    )
    p.add_argument("--subset", type=int, default=150_000, help="train pairs sampled (0: all)")
    p.add_argument(
        "--max-steps", type=int, default=0, help="most updates any system trains (0: each its cap)"
    )
    p.add_argument(
        "--kept",
        type=Path,
        default=None,
        help="keep each finished system's outputs (no weights) in KEPT/NAME, and take them from "
        "there for a system WORK lacks (the report without training)",
    )
    p.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=list(SYSTEMS))
    p.add_argument("--jobs", type=int, default=2, help="systems trained at once")
    p.add_argument("--threads", type=int, default=1, help="CPU threads per system")
    p.add_argument("--smoke", action="store_true", help="tiny models and data (a few minutes)")
    p.add_argument(
        "--prepare-only", action="store_true", help="fetch, sample and preprocess, then stop"
    )
    p.add_argument("--no-recipe", action="store_true", help="stop after the report")
    p.add_argument(
        "--recipe-threads", type=int, default=2, help="CPU threads for the best model's timings"
    )
    args = p.parse_args(argv)
    mirror = flatrun.corpus_mirror(args.mirror, ROOT.parent / "shared/corpora/justice-laws-en-fr")
    rule = FlatRule(valid_every=400, chunk=800, min_steps=4000)
    cfg = Settings(args.work, args.docs, mirror, Runner(args.threads), rule, args.subset)
    cfg.kept = args.kept
    if args.max_steps:
        cfg.caps = dict.fromkeys(SYSTEMS, args.max_steps)
    if args.smoke:
        cfg.rule = SMOKE_RULE
        cfg.smoke, cfg.subset, cfg.vocab = True, 600, 1000
    cfg.work.mkdir(parents=True, exist_ok=True)
    print(f"== corpus and data in {cfg.work}", flush=True)
    prepare(cfg)
    if args.prepare_only:
        return 0
    jobs = {n: functools.partial(system_job, cfg, n) for n in args.systems}
    status = flatrun.run_all(cfg.runner, jobs, args.jobs)
    if cfg.runner.children.stopping.is_set():
        return status
    print("== report", flush=True)
    results = justice_report.write_report(cfg.work, cfg.docs, list(SYSTEMS), BUCKETS)
    (cfg.work / "justice_results.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    if args.no_recipe:
        return status
    print("== the best system as a model to use", flush=True)
    best = justice_recipe.recipe(
        cfg.work,
        list(SYSTEMS),
        Runner(args.recipe_threads, cfg.runner.children),
        2 if cfg.smoke else 5,
    )
    if best:
        md = justice_recipe.markdown(best)
        (cfg.work / "recipe_table.md").write_text(md, encoding="utf-8")
        print(md)
    return status


if __name__ == "__main__":
    sys.exit(flatrun.exit_status(main))
