"""Cleaning the train split: read aligned pairs, drop invalid, empty and duplicate ones, write text.

Train is streamed once line by line, so memory stays flat as the corpus grows; the cleaned text is
cut into byte ranges of a fixed number of pairs that encoding workers read independently.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from nmt.errors import NmtError
from nmt.textio import decode_line, open_binary

DROP_REASONS = ("invalid_utf8", "empty", "duplicate", "too_long", "ratio")


def resolve_input(prefix: str | Path, lang: str) -> Path:
    """PREFIX.<lang>, else PREFIX.<lang>.gz; neither is a missing-file error naming both."""
    plain = Path(f"{prefix}.{lang}")
    gz = Path(f"{prefix}.{lang}.gz")
    if plain.is_file():
        return plain
    if gz.is_file():
        return gz
    raise NmtError(f"{plain}: file not found (nor {gz.name})")


def read_pairs(src: Path, tgt: Path) -> Iterator[tuple[int, bytes, bytes]]:
    """Yield (line number, source bytes, target bytes) in lockstep; unequal line counts are an error."""
    with open_binary(src) as fs, open_binary(tgt) as ft:
        n = 0
        for a, b in itertools.zip_longest(fs, ft):
            if a is None or b is None:
                ns = n + (a is not None) + sum(1 for _ in fs)
                nt = n + (b is not None) + sum(1 for _ in ft)
                raise NmtError(f"line counts differ: {src} has {ns} lines, {tgt} has {nt} lines")
            n += 1
            yield n, a, b


@dataclass
class Chunk:
    """A byte range of the cleaned train files holding `n` aligned lines, encoded by one worker."""

    src: tuple[int, int]
    tgt: tuple[int, int]
    n: int


@dataclass
class _PairFilter:
    """The per-pair cleaning rules, counting what each rule drops."""

    paths: tuple[Path, Path]
    dedupe: bool
    skip_invalid: bool
    lowercase: bool = False
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DROP_REASONS, 0))
    seen: set[int] = field(default_factory=set)

    def __call__(self, n: int, a: bytes, b: bytes) -> tuple[bytes, bytes] | None:
        """The trimmed pair, or None when a rule drops it."""
        try:
            decode_line(a, self.paths[0], n)
            decode_line(b, self.paths[1], n)
        except NmtError as e:
            if not self.skip_invalid:
                raise NmtError(f"{e}; --skip-invalid drops such pairs") from None
            self.counts["invalid_utf8"] += 1
            return None
        a, b = a.strip(), b.strip()
        if self.lowercase:  # bytes.lower() would touch ASCII only
            a, b = (
                a.decode("utf-8").lower().encode("utf-8"),
                b.decode("utf-8").lower().encode("utf-8"),
            )
        if not a or not b:
            self.counts["empty"] += 1
            return None
        if self.dedupe:
            key = hash((a, b))  # 64 bits per unique pair: ~70 bytes of memory each
            if key in self.seen:
                self.counts["duplicate"] += 1
                return None
            self.seen.add(key)
        return a, b


@dataclass
class _Chunker:
    """Tracks byte positions in the cleaned files and closes a chunk every `size` pairs."""

    size: int
    chunks: list[Chunk] = field(default_factory=list)
    pos: tuple[int, int] = (0, 0)
    start: tuple[int, int] = (0, 0)
    n: int = 0

    def add(self, a: bytes, b: bytes) -> None:
        """Account for one written pair (each line plus its newline)."""
        self.pos = (self.pos[0] + len(a) + 1, self.pos[1] + len(b) + 1)
        self.n += 1
        if self.n == self.size:
            self.close()

    def close(self) -> list[Chunk]:
        """Close the pending chunk, if any; return all chunks."""
        if self.n:
            src, tgt = (self.start[0], self.pos[0]), (self.start[1], self.pos[1])
            self.chunks.append(Chunk(src, tgt, self.n))
            self.start, self.n = self.pos, 0
        return self.chunks


def clean_train(
    inputs: tuple[Path, Path],
    outputs: tuple[Path, Path],
    dedupe: bool,
    skip_invalid: bool,
    chunk_pairs: int,
    report: Callable[[int], None],
    lowercase: bool = False,
) -> tuple[dict[str, int], list[Chunk]]:
    """Stream train once: check UTF-8, trim, lowercase if asked, drop empty sides and duplicates,
    write cleaned text.

    Returns the counts (drop reasons and `read`) and the byte ranges of `chunk_pairs`-line chunks.
    """
    keep = _PairFilter(inputs, dedupe, skip_invalid, lowercase)
    chunker = _Chunker(chunk_pairs)
    read = 0
    with open(outputs[0], "wb") as ws, open(outputs[1], "wb") as wt:
        for read, a, b in read_pairs(*inputs):
            if read % 100_000 == 0:
                report(read)
            if (pair := keep(read, a, b)) is not None:
                ws.write(pair[0] + b"\n")
                wt.write(pair[1] + b"\n")
                chunker.add(*pair)
    report(read)
    return {**keep.counts, "read": read}, chunker.close()


def no_pairs_message(train_in: tuple[Path, Path], counts: dict[str, int]) -> str:
    """Explain an empty training set by the drop reasons that emptied it."""
    reasons = ", ".join(f"{k} {counts[k]}" for k in DROP_REASONS if counts[k])
    return (
        f"no training pairs left after cleaning {train_in[0]} / {train_in[1]} "
        f"({counts['read']} read; dropped: {reasons or 'none'})"
    )
