#!/usr/bin/env python3
"""Terminology the way the papers measure it (Post and Vilar 2018; Hu et al. 2019): 1, 2 and 3
phrases of 1-3 words drawn (seeded) from each reference of test_2016_flickr, given as
constraints. Per beam size (5, 10, 20): the share of outputs holding every constraint, BLEU and
chrF against the references beside the unconstrained run's, and the seconds each took (the
median of `--repeats` runs, unconstrained and constrained alternating).

    python scripts/bench_constraints.py -m work/demo/model

Reads the fetched Multi30k (benchlib.multi30k)."""

from __future__ import annotations

import argparse
import random
import statistics
import string
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from sacrebleu.metrics import BLEU, CHRF

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from benchlib import machine_line, multi30k  # noqa: E402

from nmt.dirs import ModelDir  # noqa: E402

BEAMS = (5, 10, 20)
COUNTS = (1, 2, 3)


def draw_phrases(reference: str, n: int, rng: random.Random) -> list[str]:
    """Up to n phrases of 1-3 consecutive words of `reference`, not overlapping, punctuation
    stripped from their ends, in the order drawn."""
    words = reference.split()
    taken: set[int] = set()
    out: list[str] = []
    for _ in range(20 * n):
        if len(out) == n:
            break
        size = rng.randint(1, 3)
        if size > len(words):
            continue
        start = rng.randrange(len(words) - size + 1)
        span = range(start, start + size)
        phrase = " ".join(words[i] for i in span).strip(string.punctuation + "„“”")
        if phrase and not taken.intersection(span):
            taken.update(span)
            out.append(phrase)
    return out


def coverage(outputs: Sequence[str], phrases: Sequence[Sequence[str]]) -> float:
    """The share of outputs that contain every one of their phrases (as text)."""
    held = [all(p in out for p in ps) for out, ps in zip(outputs, phrases, strict=True)]
    return 100.0 * sum(held) / len(held)


def main(argv: list[str] | None = None) -> int:
    """Translate test_2016_flickr without and with 1-3 reference phrases at each beam size."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("-m", "--model", type=Path, default=ROOT / "work/demo/model")
    p.add_argument("--src", default="en")
    p.add_argument("--tgt", default="de")
    p.add_argument("--corpus", type=Path, default=None, help="Multi30k folder (default: corpora/)")
    p.add_argument("--lines", type=int, default=1000, help="first N test lines")
    p.add_argument("--beams", type=int, nargs="+", default=list(BEAMS))
    p.add_argument("--repeats", type=int, default=3, help="timed runs per cell (the median)")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    from nmt.engines.translator import Translator

    folder = multi30k(args.corpus)
    src = (folder / f"test_2016_flickr.{args.src}").read_text(encoding="utf-8").splitlines()
    ref = (folder / f"test_2016_flickr.{args.tgt}").read_text(encoding="utf-8").splitlines()
    src, ref = src[: args.lines], ref[: args.lines]
    rng = random.Random(args.seed)
    phrases = {n: [draw_phrases(r, n, rng) for r in ref] for n in COUNTS}
    print(machine_line(0))
    print(f"{len(src)} lines of test_2016_flickr; model {args.model}")
    print("| beam | constraints | BLEU | chrF | all held | seconds | x unconstrained |")
    print("|---|---|---|---|---|---|---|")
    with Translator.from_dir(ModelDir(args.model)) as tr:
        tr.translate(src[:50], beam_size=5, constraints=phrases[1][:50])  # warm up
        for beam in args.beams:
            runs: dict[int, list[float]] = {n: [] for n in (0, *COUNTS)}
            texts: dict[int, list[str]] = {}
            for _ in range(args.repeats):
                for n in (0, *COUNTS):
                    given = phrases[n] if n else None
                    t0 = time.perf_counter()
                    out = tr.translate(src, beam_size=beam, constraints=given)
                    runs[n].append(time.perf_counter() - t0)
                    texts[n] = [t.text for t in out]
            base = statistics.median(runs[0])
            for n in (0, *COUNTS):
                bleu = BLEU().corpus_score(texts[n], [ref]).score
                chrf = CHRF().corpus_score(texts[n], [ref]).score
                held = f"{coverage(texts[n], phrases[n]):.1f}%" if n else "-"
                seconds = statistics.median(runs[n])
                print(
                    f"| {beam} | {n or 'none'} | {bleu:.1f} | {chrf:.1f} | {held} | "
                    f"{seconds:.1f} | {seconds / base:.2f} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
