"""Valid and test splits held out of the one corpus a user has (`--split-valid`, `--split-test`),
and the sample of a valid file kept by `--valid-sample`.

The pairs are drawn by seed among train's usable pairs (valid UTF-8, no empty side), so the same
corpus and seed give the same splits. Train is read twice more for it, streamed each time: once to
count the usable pairs, once to write the drawn ones; memory holds only the drawn ranks and the test
sources, which the cleaning step then keeps out of train.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from nmt.data.cleaning import PairFilter
from nmt.errors import NmtError

Pairs = Iterable[tuple[int, bytes, bytes]]
SPLITS = ("valid", "test")


@dataclass(frozen=True)
class HoldOut:
    """How many usable train pairs go to valid and to test, and the seed that draws them."""

    valid: int = 0
    test: int = 0
    seed: int = 1

    def __bool__(self) -> bool:
        return bool(self.valid or self.test)

    def check(self) -> None:
        """Raise NmtError on a negative size, with the CLI's option names."""
        if self.valid < 0 or self.test < 0:
            raise NmtError(
                f"--split-valid and --split-test must be >= 0 (got {self.valid}, {self.test})"
            )


@dataclass
class Held:
    """What was held out: each split's files, the ranks drawn, and the test sources as train's
    cleaning compares them (trimmed, lowercased with --lowercase)."""

    files: dict[str, tuple[Path, Path]]
    ranks: dict[int, str]
    test_sources: set[bytes] = field(default_factory=set)


def draw(total: int, h: HoldOut, corpus: Path) -> dict[int, str]:
    """Rank of a usable pair -> the split it goes to; the same total and seed draw the same."""
    if total <= h.valid + h.test:
        raise NmtError(
            f"--split-valid {h.valid} and --split-test {h.test} leave no training pairs: "
            f"{corpus} has {total:,} usable pairs"
        )
    chosen = random.Random(h.seed).sample(range(total), h.valid + h.test)
    return {rank: SPLITS[i >= h.valid] for i, rank in enumerate(chosen)}


def hold_out(
    pairs: Callable[[], Pairs],
    usable: Callable[[], PairFilter],
    h: HoldOut,
    out: Path,
    langs: tuple[str, str],
    corpus: Path,
) -> Held:
    """Draw the held-out pairs of the corpus `pairs()` reads and write them trimmed as
    `out/.held.<split>.<lang>`, line-aligned; `usable()` is a filter whose counts are thrown away."""
    keep = usable()
    total = sum(1 for n, a, b in pairs() if keep.usable_pair(n, a, b) is not None)
    ranks = draw(total, h, corpus)
    files = {
        split: (out / f".held.{split}.{langs[0]}", out / f".held.{split}.{langs[1]}")
        for split, n in zip(SPLITS, (h.valid, h.test), strict=True)
        if n
    }
    held = Held(files, ranks)
    last = max(ranks, default=-1)
    keep = usable()
    writers = {s: (open(f[0], "wb"), open(f[1], "wb")) for s, f in files.items()}
    try:
        rank = -1
        for n, a, b in pairs():
            if rank >= last:
                break
            if (pair := keep.usable_pair(n, a, b)) is None:
                continue
            rank += 1
            if (split := ranks.get(rank)) is not None:
                writers[split][0].write(pair[0] + b"\n")
                writers[split][1].write(pair[1] + b"\n")
                if split == "test":
                    held.test_sources.add(keep.cased(pair[0]))
    finally:
        for ws, wt in writers.values():
            ws.close()
            wt.close()
    return held


@dataclass(frozen=True)
class ValidSample:
    """The valid lines kept by --valid-sample: a seeded draw without replacement, kept in file
    order, so a dev set ordered by document is validated on all its documents, not its first."""

    lines: frozenset[int]  # 1-based line numbers
    of: int
    seed: int

    @staticmethod
    def check(k: int, has_valid: bool) -> None:
        """Refuse a negative --valid-sample, and one without --valid files to sample."""
        if k < 0:
            raise NmtError(f"--valid-sample must be >= 0, got {k}")
        if k and not has_valid:
            raise NmtError("--valid-sample samples the --valid files: give --valid")

    @classmethod
    def draw(cls, n: int, k: int, seed: int) -> ValidSample | None:
        """k of the lines 1..n, drawn with random.Random(seed); None when k is 0 or keeps all."""
        if not 0 < k < n:
            return None
        return cls(frozenset(random.Random(seed).sample(range(1, n + 1), k)), n, seed)

    def entry(self) -> dict[str, int]:
        """What the manifest records of the sample."""
        return {"lines": len(self.lines), "of": self.of, "seed": self.seed}
