#!/usr/bin/env python3
"""Multi30k joined: a corpus whose lines hold 1..K consecutive captions, for measuring what length
alone does to a translation model (docs/attention-experiment.md).

Train and val are cut, in order, into lines of k consecutive pairs with k drawn uniformly from
1..K (seeded); source and target captions are joined with a space, so every line is still a real
human translation and every caption appears exactly once. The test captions are written six times
over, `test.k1` (each alone) to `test.kN` (in consecutive groups of N, the last group holding what
is left), so every test set holds the same words and a change of score from k1 to kN comes from
length. `--max-k 1` writes plain Multi30k under the same names (the reference corpus).

    python scripts/make_joined_corpus.py corpora/multi30k --dest work/joined/corpus --max-k 6

Prints the length histogram (source words per line) of train and the test sets; writes
`joined.json` beside the text with the seed, K and every split's group sizes."""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from nmt.textio import atomic_write, read_lines

SPLITS = {"train": "train", "val": "val", "test": "test_2016_flickr"}


def random_groups(n: int, max_k: int, rng: random.Random) -> list[int]:
    """Sizes of consecutive groups covering n lines, each drawn uniformly from 1..max_k; the last
    is cut to what is left, so the sizes add up to n exactly."""
    sizes: list[int] = []
    left = n
    while left > 0:
        k = min(rng.randint(1, max_k), left)
        sizes.append(k)
        left -= k
    return sizes


def fixed_groups(n: int, k: int) -> list[int]:
    """Sizes of consecutive groups of k covering n lines (the last holds the remainder)."""
    return [min(k, n - i) for i in range(0, n, k)]


def join(lines: Sequence[str], sizes: Sequence[int]) -> list[str]:
    """Consecutive lines joined with a space, sizes[i] of them into output line i."""
    if sum(sizes) != len(lines):
        raise ValueError(f"group sizes add up to {sum(sizes)}, not {len(lines)} lines")
    out, i = [], 0
    for k in sizes:
        out.append(" ".join(line.strip() for line in lines[i : i + k]))
        i += k
    return out


def read_pair(folder: Path, split: str, langs: Sequence[str], limit: int = 0) -> list[list[str]]:
    """One split's line-aligned files (plain or .gz), checked to have the same number of lines;
    with a limit, only their first `limit` lines."""
    sides = []
    for lang in langs:
        path = folder / f"{split}.{lang}"
        if not path.exists() and path.with_name(path.name + ".gz").exists():
            path = path.with_name(path.name + ".gz")
        sides.append(list(read_lines(path)))
    if len({len(s) for s in sides}) != 1:
        counts = ", ".join(f"{lang} {len(s)}" for lang, s in zip(langs, sides, strict=True))
        raise ValueError(f"{folder}/{split}: the languages differ in line count ({counts})")
    return [side[:limit] for side in sides] if limit else sides


def histogram(lines: Sequence[str], width: int = 10) -> str:
    """Source words per line in bins of `width`, as 'lo-hi: count' rows with a bar."""
    counts = Counter(len(line.split()) // width for line in lines)
    top = max(counts.values())
    rows = []
    for b in range(max(counts) + 1):
        c = counts.get(b, 0)
        rows.append(
            f"  {b * width:3d}-{b * width + width - 1:3d} words: {c:6,d} {'#' * round(40 * c / top)}"
        )
    return "\n".join(rows)


def write_split(
    dest: Path, name: str, langs: Sequence[str], sides: Sequence[Sequence[str]]
) -> None:
    """Write NAME.LANG for each language, each file atomically."""
    for lang, lines in zip(langs, sides, strict=True):
        with atomic_write(dest / f"{name}.{lang}") as f:
            f.writelines(line + "\n" for line in lines)


def make(
    source: Path,
    dest: Path,
    langs: Sequence[str],
    max_k: int,
    test_k: int,
    seed: int,
    limit: int = 0,
) -> dict[str, list[int]]:
    """Write the joined corpus into dest; return every output split's group sizes."""
    dest.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    groups: dict[str, list[int]] = {}
    for name in ("train", "val"):
        sides = read_pair(source, SPLITS[name], langs, limit)
        groups[name] = random_groups(len(sides[0]), max_k, rng)
        write_split(dest, name, langs, [join(s, groups[name]) for s in sides])
    test = read_pair(source, SPLITS["test"], langs, limit)
    for k in range(1, test_k + 1):
        groups[f"test.k{k}"] = fixed_groups(len(test[0]), k)
        write_split(dest, f"test.k{k}", langs, [join(s, groups[f"test.k{k}"]) for s in test])
    meta = {
        "source": str(source),
        "langs": list(langs),
        "max_k": max_k,
        "seed": seed,
        "groups": groups,
    }
    with atomic_write(dest / "joined.json") as f:
        json.dump(meta, f)
    return groups


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, write the corpus, print its histograms."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("source", type=Path, help="a Multi30k folder (train, val, test_2016_flickr)")
    p.add_argument("--dest", type=Path, required=True, help="folder for the joined corpus")
    p.add_argument("--langs", default="en,de", help="languages to write, comma-separated (en,de)")
    p.add_argument("--max-k", type=int, default=6, help="most captions a train/val line joins (K)")
    p.add_argument("--test-k", type=int, default=6, help="test sets test.k1 .. test.kN (N)")
    p.add_argument("--seed", type=int, default=1, help="seed of the train and val group sizes")
    p.add_argument("--limit", type=int, default=0, help="only the first N pairs of each split")
    args = p.parse_args(argv)
    if args.max_k < 1 or args.test_k < 1:
        p.error("--max-k and --test-k must be at least 1")
    langs = args.langs.split(",")
    try:
        groups = make(args.source, args.dest, langs, args.max_k, args.test_k, args.seed, args.limit)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for name in ["train"] + [f"test.k{k}" for k in range(1, args.test_k + 1)]:
        lines = (args.dest / f"{name}.{langs[0]}").read_text(encoding="utf-8").splitlines()
        words = [len(line.split()) for line in lines]
        print(
            f"{name}: {len(lines):,} lines, mean {sum(words) / len(words):.1f} words, "
            f"longest {max(words)} ({langs[0]})"
        )
        if name == "train":
            print(histogram(lines))
    print(f"wrote {args.dest} ({sum(len(g) for g in groups.values()):,} lines in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
