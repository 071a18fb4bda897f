"""Cleaning the train split: read aligned pairs, drop invalid, empty and duplicate ones, write text.

Train is streamed once line by line, so memory stays flat as the corpus grows; the cleaned text is
cut into byte ranges of a fixed number of pairs that encoding workers read independently.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nmt.errors import NmtError
from nmt.textio import decode_line, open_binary

DROP_REASONS = ("invalid_utf8", "empty", "duplicate", "too_long", "ratio")
# reported where they can happen: a TSV train's malformed lines; with --split-test, train pairs
# whose source is a test source
EXTRA_REASONS = ("malformed", "test_source")
ALL_REASONS = DROP_REASONS + EXTRA_REASONS


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


_BLOCK_PAIRS = 8192  # pairs cleaned at a time
_REPORT_EVERY = 100_000  # progress is reported each time this many more lines are read
_U64 = (1 << 64) - 1
_PAD = 1024  # slots past the last home slot, where probes run on instead of wrapping round
_STEP = 1 << 16  # keys laid out per numpy step: bounds the temporary arrays of a doubling


def _layout(keys: np.ndarray, bits: int) -> np.ndarray | None:
    """Sorted keys placed as one-by-one linear probing would place them, or None when a run of
    them would reach the table's last slot (which stays empty so that every probe stops)."""
    table = np.zeros((1 << bits) + _PAD, dtype=np.uint64)
    carry = np.int64(-1)
    for c in range(0, len(keys), _STEP):
        k = keys[c : c + _STEP]
        at = np.arange(c, c + len(k))
        # each key goes to its home or right after the key before it, whichever is later
        behind = np.maximum.accumulate(np.maximum((k >> (64 - bits)).astype(np.int64) - at, carry))
        if behind[-1] + at[-1] >= len(table) - 1:
            return None
        table[behind + at] = k
        carry = behind[-1]
    return table


class HashSet64:
    """Seen 64-bit hashes in a linear-probing table of 8-byte slots kept 40-80% full: 10-20 bytes
    a pair, where a Python set of ints takes ~70 (700 MB at 10M pairs).

    A key's home slot is its top bits, so keys sorted as unsigned numbers are in home order and
    a doubled table is laid out with numpy alone. Zero marks an empty slot and is kept apart."""

    def __init__(self, bits: int = 10) -> None:
        self.zero = False
        self._build(bits, np.zeros(0, dtype=np.uint64))

    def _build(self, bits: int, keys: np.ndarray) -> None:
        """Lay out the sorted, distinct, non-zero `keys` in a table of at least 2**bits homes."""
        while (table := _layout(keys, bits)) is None:
            bits += 1
        self.table, self.slots, self.shift = table, table.data, 64 - bits
        self.n, self.limit = len(keys), (8 << bits) // 10

    def _find(self, u: int) -> int:
        """The slot holding `u`, else the empty slot that ends its probe."""
        slots, i = self.slots, u >> self.shift
        while (v := slots[i]) and v != u:
            i += 1
        return i

    def add(self, key: int) -> bool:
        """Remember `key` (a Python hash); False when it was there already."""
        u = key & _U64
        if not u:
            seen, self.zero = self.zero, True
            return not seen
        i = self._find(u)  # no reference to the table is left here when it grows
        if self.slots[i]:
            return False
        if i == len(self.slots) - 1:
            self._grow()
            return self.add(key)
        self.slots[i] = u
        self.n += 1
        if self.n > self.limit:
            self._grow()
        return True

    def _grow(self) -> None:
        """Double the home slots (their number, not the keys, sets a probe's length)."""
        keys = self.table[self.table != 0]
        del self.slots, self.table  # the old table goes before the new one is allocated
        keys.sort()
        self._build(64 - self.shift + 1, keys)

    @property
    def nbytes(self) -> int:
        """Bytes the table holds."""
        return self.table.nbytes


@dataclass
class PairFilter:
    """The per-pair cleaning rules, counting what each rule drops; with `held`, the usable pairs
    (valid UTF-8, no empty side) of those ranks go to valid/test instead, and with `test_sources`
    a pair whose source is a test split's source is dropped too."""

    paths: tuple[Path, Path]
    dedupe: bool
    skip_invalid: bool
    lowercase: bool = False
    held: Mapping[int, str] = field(default_factory=dict)
    test_sources: set[bytes] = field(default_factory=set)
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ALL_REASONS, 0))
    seen: HashSet64 = field(default_factory=HashSet64)
    usable: int = 0

    @property
    def simple(self) -> bool:
        """Whether only the UTF-8, trimming and empty-side rules apply (no rule needs the pair's
        text as a Python object)."""
        return not (self.dedupe or self.held or self.test_sources or self.lowercase)

    def usable_pair(self, n: int, a: bytes, b: bytes) -> tuple[bytes, bytes] | None:
        """The trimmed pair, or None when it is invalid UTF-8 or has an empty side."""
        try:
            decode_line(a, self.paths[0], n)
            decode_line(b, self.paths[1], n)
        except NmtError as e:
            if not self.skip_invalid:
                raise NmtError(f"{e}; --skip-invalid drops such pairs") from None
            self.counts["invalid_utf8"] += 1
            return None
        a, b = a.strip(), b.strip()
        if not a or not b:
            self.counts["empty"] += 1
            return None
        return a, b

    def cased(self, text: bytes) -> bytes:
        """The text as the model sees it (bytes.lower() would touch ASCII only)."""
        return text.decode("utf-8").lower().encode("utf-8") if self.lowercase else text

    def __call__(self, n: int, a: bytes, b: bytes) -> tuple[bytes, bytes] | None:
        """The trimmed (lowercased) pair, or None when a rule drops it or it is held out."""
        if (pair := self.usable_pair(n, a, b)) is None:
            return None
        rank, self.usable = self.usable, self.usable + 1
        if rank in self.held:
            return None
        a, b = self.cased(pair[0]), self.cased(pair[1])
        if a in self.test_sources:
            self.counts["test_source"] += 1
            return None
        if self.dedupe and not self.seen.add(hash((a, b))):
            self.counts["duplicate"] += 1
            return None
        return a, b

    def block(self, pairs: list[tuple[int, bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        """The kept pairs of a block, as `self` keeps them one by one; a block of valid UTF-8
        with no held-out, test-source or lowercase rule is trimmed and filtered in bulk."""
        _, src, tgt = zip(*pairs, strict=True)
        if self.held or self.test_sources or self.lowercase or not _utf8(src) or not _utf8(tgt):
            return [p for n, a, b in pairs if (p := self(n, a, b)) is not None]
        stripped = zip([a.strip() for a in src], [b.strip() for b in tgt], strict=True)
        kept = [(a, b) for a, b in stripped if a and b]
        self.counts["empty"] += len(pairs) - len(kept)
        self.usable += len(kept)
        if self.dedupe:
            seen, distinct = self.seen, len(kept)
            kept = [p for p in kept if seen.add(hash(p))]
            self.counts["duplicate"] += distinct - len(kept)
        return kept


def _utf8(lines: tuple[bytes, ...]) -> bool:
    """Whether every line is valid UTF-8 (newlines between them: a cut sequence cannot join the
    next line's bytes, so the whole is valid exactly when each line is)."""
    try:
        b"\n".join(lines).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@dataclass
class Chunker:
    """Tracks byte positions in the cleaned files and closes a chunk every `size` pairs."""

    size: int
    chunks: list[Chunk] = field(default_factory=list)
    pos: tuple[int, int] = (0, 0)
    start: tuple[int, int] = (0, 0)
    n: int = 0

    def add_lengths(self, src: np.ndarray, tgt: np.ndarray) -> None:
        """Account for written pairs by their lines' bytes (newline included), closing a chunk
        every `size` pairs."""
        ends = (np.cumsum(src, dtype=np.int64), np.cumsum(tgt, dtype=np.int64))
        base, done = self.pos, 0
        while len(src) - done >= self.size - self.n:
            done += self.size - self.n
            self.pos = (base[0] + int(ends[0][done - 1]), base[1] + int(ends[1][done - 1]))
            self.n = self.size
            self.close()
        if done < len(src):
            self.pos = (base[0] + int(ends[0][-1]), base[1] + int(ends[1][-1]))
            self.n += len(src) - done

    def close(self) -> list[Chunk]:
        """Close the pending chunk, if any; return all chunks."""
        if self.n:
            src, tgt = (self.start[0], self.pos[0]), (self.start[1], self.pos[1])
            self.chunks.append(Chunk(src, tgt, self.n))
            self.start, self.n = self.pos, 0
        return self.chunks


def clean_train(
    pairs: Iterable[tuple[int, bytes, bytes]],
    keep: PairFilter,
    outputs: tuple[Path, Path],
    chunk_pairs: int,
    report: Callable[[int], None],
) -> tuple[dict[str, int], list[Chunk]]:
    """Stream train once through `keep` (check UTF-8, trim, lowercase if asked, drop empty sides,
    duplicates and held-out pairs), writing cleaned text.

    Returns the counts (drop reasons and `read`) and the byte ranges of `chunk_pairs`-line chunks.
    """
    chunker = Chunker(chunk_pairs)
    read = 0
    with open(outputs[0], "wb") as ws, open(outputs[1], "wb") as wt:
        while block := list(itertools.islice(pairs, _BLOCK_PAIRS)):
            kept = keep.block(block)
            if kept:
                src, tgt = map(list, zip(*kept, strict=True))
                ws.write(b"\n".join(src) + b"\n")
                wt.write(b"\n".join(tgt) + b"\n")
                chunker.add_lengths(*(_line_bytes(side) for side in (src, tgt)))
            if block[-1][0] // _REPORT_EVERY > read // _REPORT_EVERY:
                report(block[-1][0])
            read = block[-1][0]
    read = max(read, keep.counts.get("read", 0))  # a TSV reader counts lines it left out too
    report(read)
    return {**keep.counts, "read": read}, chunker.close()


def _line_bytes(lines: list[bytes]) -> np.ndarray:
    """Bytes each line takes in a cleaned file (its newline included)."""
    return np.fromiter(map(len, lines), dtype=np.int64, count=len(lines)) + 1


def no_pairs_message(train_in: tuple[Path, Path], counts: dict[str, int]) -> str:
    """Explain an empty training set by the drop reasons that emptied it."""
    reasons = ", ".join(f"{k} {counts[k]}" for k in ALL_REASONS if counts.get(k))
    files = str(train_in[0]) if train_in[0] == train_in[1] else f"{train_in[0]} / {train_in[1]}"
    return (
        f"no training pairs left after cleaning {files} "
        f"({counts['read']} read; dropped: {reasons or 'none'})"
    )
