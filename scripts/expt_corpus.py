"""Corpora for the experiment scripts: fetching from a mirror, seeded samples of line pairs,
`nmt preprocess`, the documents of a test set, and the train/test near-duplicate check.

Not run on its own: the experiment scripts import it.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from flatrun import BIN, Runner

ROOT = Path(__file__).resolve().parent.parent


def fetch(runner: Runner, name: str, dest: Path, mirror: Path | None) -> None:
    """scripts/fetch_corpus.py NAME into `dest` (from `mirror` when given); a no-op when done."""
    cmd: list[object] = [BIN / "python", ROOT / "scripts/fetch_corpus.py", name, "--dest", dest]
    runner.run(cmd + ["--quiet"] + (["--mirror", mirror] if mirror else []))


def preprocess(
    runner: Runner, langs: tuple[str, str], splits: dict[str, object], out: Path, *opts: object
) -> None:
    """`nmt preprocess` of the train and valid prefixes (and every test prefix) in `splits`
    into `out`; `opts` are further options (vocabulary, valid sample)."""
    cmd: list[object] = [BIN / "nmt", "preprocess", "--src-lang", langs[0], "--tgt-lang", langs[1]]
    cmd += ["--train", splits["train"], "--valid", splits["valid"]]
    tests = splits.get("test", [])
    for test in tests if isinstance(tests, list) else [tests]:
        cmd += ["--test", test]
    runner.run(cmd + ["-o", out, *opts, "--force", "--quiet"])


def sample_pairs(src: Path, tgt: Path, out: Path, n: int, seed: int) -> int:
    """Write a seeded sample of n line pairs (in file order) to OUT.SRC / OUT.TGT, the languages
    being the files' suffixes; return how many were written."""
    a = src.read_text(encoding="utf-8").splitlines()
    b = tgt.read_text(encoding="utf-8").splitlines()
    if len(a) != len(b):
        raise SystemExit(f"error: {src} and {tgt} differ in line count ({len(a)}, {len(b)})")
    keep = sorted(random.Random(seed).sample(range(len(a)), min(n, len(a))))
    for lines, lang in ((a, src.suffix[1:]), (b, tgt.suffix[1:])):
        tmp = out.with_name(f"{out.name}.{lang}.tmp")
        tmp.write_text("".join(lines[i] + "\n" for i in keep), encoding="utf-8")
        tmp.replace(out.with_name(f"{out.name}.{lang}"))
    return len(keep)


def documents(lines: int, ids: Path | None, blocks: int) -> tuple[list[str], str]:
    """Each test line's document, and how they were found: one id a line from `ids` where that
    file exists, else `blocks` runs of consecutive lines (a test set in document order, cut into
    as many pieces of equal size as it has documents)."""
    if ids is not None and ids.is_file():
        found = ids.read_text(encoding="utf-8").splitlines()
        if len(found) != lines:
            raise SystemExit(f"error: {ids}: {len(found)} document ids for {lines} test lines")
        return found, f"document ids from {ids.name}"
    n = max(1, min(blocks, lines))
    return [f"block{i * n // lines}" for i in range(lines)], f"{n} blocks of consecutive lines"


def ngrams(line: str, n: int) -> set[tuple[str, ...]]:
    """The line's word n-grams (lowercased); a line shorter than n words is its one n-gram."""
    words = line.lower().split()
    if len(words) < n:
        return {tuple(words)} if words else set()
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def near_duplicates(
    test: Sequence[str], train: Sequence[str], n: int = 8, share: float = 0.5
) -> list[bool]:
    """Which test lines have a training line that holds more than `share` of their n-grams (a
    short line: the whole line)."""
    grams = [ngrams(line, n) for line in test]
    wanted = set().union(*grams) if grams else set()
    holders: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for i, line in enumerate(train):
        for g in ngrams(line, n) & wanted:
            holders[g].append(i)
    out = []
    for mine in grams:
        counts: dict[int, int] = defaultdict(int)
        for g in mine:
            for i in holders.get(g, ()):
                counts[i] += 1
        out.append(bool(mine) and max(counts.values(), default=0) > share * len(mine))
    return out
