#!/usr/bin/env python3
"""Sentence splitting accuracy: paragraphs made by joining consecutive lines of real corpora
(2-5 lines each, seeded), split again by each segmenter; a join point it recovers is a hit.

    python scripts/bench_segment.py            # sentencex, and nmt's splitter built on it
    pip install pysbd sentence-splitter && python scripts/bench_segment.py   # the others too

Sets: newstest2014 de and en (news: each line is about one sentence, so every join point is a
sentence boundary, and a split elsewhere is an extra one), justice-laws test en and fr (one
provision can hold several sentences and many lines are headings without a final period: only
the join points are scored), and test_2016_flickr en, de, fr, cs (captions, often without a
final period). Reads corpora/ (fetch them first: corpora/README.md)."""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SETS = [
    ("newstest2014", "wmt-news-de-en/newstest2014", ("de", "en")),
    ("justice-laws test", "justice-laws-en-fr/test", ("en", "fr")),
    ("test_2016_flickr", "multi30k/test_2016_flickr", ("en", "de", "fr", "cs")),
]


def paragraphs(lines: Sequence[str], seed: int) -> list[list[str]]:
    """Consecutive non-blank lines in groups of 2-5 (seeded)."""
    rng, out, i = random.Random(seed), [], 0
    lines = [x.strip() for x in lines if x.strip()]
    while i < len(lines):
        k = rng.randint(2, 5)
        out.append(lines[i : i + k])
        i += k
    return out


def ends(pieces: Sequence[str]) -> set[int]:
    """Where each piece but the last ends, counted in non-space characters."""
    pos, out = 0, set()
    for p in pieces[:-1]:
        pos += len(p.replace(" ", ""))
        out.add(pos)
    return out


def measure(split: Callable[[str], list[str]], groups: list[list[str]]) -> dict[str, float]:
    """Join points recovered (%), splits that are not join points, and seconds."""
    hit = miss = extra = 0
    t0 = time.perf_counter()
    for g in groups:
        gold = ends(g)
        got = ends([p for p in split(" ".join(g)) if p.strip()])
        hit, miss, extra = hit + len(gold & got), miss + len(gold - got), extra + len(got - gold)
    return {
        "recall": 100 * hit / max(1, hit + miss),
        "extra": extra,
        "joins": hit + miss,
        "seconds": time.perf_counter() - t0,
    }


def segmenters(lang: str) -> dict[str, Callable[[str], list[str]]]:
    """nmt's splitter, sentencex alone, and pysbd and Moses' rules where installed."""
    from sentencex import segment

    from nmt.data.sentences import Segmenter

    out = {"nmt": Segmenter(lang).sentences, "sentencex": lambda t: list(segment(lang, t))}
    try:
        import pysbd

        seg = pysbd.Segmenter(language=lang if lang in ("en", "de", "fr") else "en", clean=False)
        out["pysbd"] = seg.segment
    except ImportError:
        pass
    try:
        from sentence_splitter import SentenceSplitter

        out["moses (sentence-splitter)"] = SentenceSplitter(language=lang).split
    except ImportError:
        pass
    return out


def main(argv: list[str] | None = None) -> int:
    """Print the table."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--corpora", type=Path, default=ROOT / "corpora", help="fetched corpora")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    print("| set | language | join points | segmenter | recovered | extra splits | seconds |")
    print("|---|---|---|---|---|---|---|")
    for name, prefix, langs in SETS:
        for lang in langs:
            path = args.corpora / f"{prefix}.{lang}"
            if not path.exists():
                print(f"skipped {name} {lang}: no {path}", file=sys.stderr)
                continue
            groups = paragraphs(path.read_text(encoding="utf-8").splitlines(), args.seed)
            for seg, split in segmenters(lang).items():
                m = measure(split, groups)
                print(
                    f"| {name} | {lang} | {m['joins']:,} | {seg} | {m['recall']:.1f}% | "
                    f"{m['extra']:,} | {m['seconds']:.2f} |"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
