"""Cleaning two line-aligned train files a block of bytes at a time, with numpy instead of a
Python step per pair: the same cleaned text, counts and chunks as `nmt.data.cleaning.clean_train`.

It applies when only the UTF-8, trimming and empty-side rules run (no dedupe, held-out pairs,
test sources or lowercasing); a block holding invalid UTF-8 goes through `PairFilter` pair by pair,
so its error or its `--skip-invalid` counts are the same too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from nmt.data.cleaning import Chunk, Chunker, PairFilter
from nmt.errors import NmtError
from nmt.textio import open_binary

_READ = 1 << 22  # bytes read at a time
_RUN = 16  # whitespace bytes trimmed a numpy step at a time before Python trims the rest
_REPORT_EVERY = 100_000  # progress is reported each time this many more lines are read
_SPACE = np.zeros(256, dtype=bool)
_SPACE[list(b" \t\n\r\x0b\x0c")] = True  # what bytes.strip() removes


def _newlines(data: bytes) -> np.ndarray:
    """Offsets of the newlines in `data`."""
    return np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)


Block = tuple[int, bytes, bytes, tuple[bool, bool]]


def aligned_blocks(paths: tuple[Path, Path]) -> Iterator[Block]:
    """(lines, source bytes, target bytes, added): the next lines of both files, each ending in a
    newline; `added` says on which side the file's last line had none and was given one. Unequal
    line counts are an error naming both."""
    with open_binary(paths[0]) as fs, open_binary(paths[1]) as ft:
        files, bufs, lines, eof, done = (fs, ft), [b"", b""], [0, 0], [False, False], 0
        added = [False, False]
        while not all(eof):
            side = 0 if (lines[0] <= lines[1] or eof[1]) and not eof[0] else 1
            block = files[side].read(_READ)
            if not block:
                eof[side] = True
                if bufs[side] and not bufs[side].endswith(b"\n"):
                    block, added[side] = b"\n", True
            bufs[side] += block
            lines[side] += block.count(b"\n")
            if k := min(lines):
                cuts = [int(_newlines(buf)[k - 1]) + 1 for buf in bufs]
                last = (added[0] and cuts[0] == len(bufs[0]), added[1] and cuts[1] == len(bufs[1]))
                yield k, bufs[0][: cuts[0]], bufs[1][: cuts[1]], last
                bufs = [buf[cut:] for buf, cut in zip(bufs, cuts, strict=True)]
                lines, done = [lines[0] - k, lines[1] - k], done + k
    if lines[0] != lines[1]:
        raise NmtError(
            f"line counts differ: {paths[0]} has {done + lines[0]} lines, "
            f"{paths[1]} has {done + lines[1]} lines"
        )


def _trim(data: bytes, pos: np.ndarray, stop: np.ndarray, step: int) -> None:
    """Move each `pos` by `step` (1: forwards over the bytes at pos, -1: backwards over those
    before it) while it is on whitespace and short of `stop`: a numpy step per whitespace byte
    for the few lines that have any, then a Python step per line past a long run of it."""
    buf, back = np.frombuffer(data, dtype=np.uint8), int(step < 0)
    idx = np.flatnonzero((pos != stop) & _SPACE[buf[pos - back]])
    for _ in range(_RUN):
        if not len(idx):
            return
        pos[idx] += step
        idx = idx[(pos[idx] != stop[idx]) & _SPACE[buf[pos[idx] - back]]]
    for i in idx.tolist():
        a, b = sorted((int(pos[i]), int(stop[i])))
        line = data[a:b]
        pos[i] += step * (len(line) - len((line.rstrip if back else line.lstrip)()))


def _spans(data: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each line's first byte, its trimmed text as [start, end) offsets, and its newline."""
    newline = _newlines(data)
    first = np.concatenate(([0], newline[:-1] + 1))
    start, end = first.copy(), newline.copy()
    _trim(data, start, newline, 1)
    _trim(data, end, start, -1)
    return first, start, end, newline


def _gather(data: bytes, lines: tuple[np.ndarray, ...], kept: np.ndarray) -> bytes:
    """The kept lines' trimmed text, each with a newline: the block as it is, but for the lines
    dropped or trimmed (copied one by one)."""
    first, start, end, newline = lines
    changed = np.flatnonzero(~kept | (start != first) | (end != newline))
    parts, at = [], 0
    for f, s, e, n, k in zip(*(x[changed].tolist() for x in (*lines, kept)), strict=True):
        parts.append(data[at:f])
        if k:
            parts.append(data[s:e] + b"\n")
        at = n + 1
    parts.append(data[at:])
    return b"".join(parts)


def _valid(data: bytes) -> bool:
    """Whether the bytes are UTF-8 (lines end with newlines, so exactly when each line is)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _lines(data: bytes, added: bool) -> list[bytes]:
    """The lines as a binary line iterator read them (the file's last without a newline added)."""
    lines = [line + b"\n" for line in data.split(b"\n")[:-1]]
    if added:
        lines[-1] = lines[-1][:-1]
    return lines


def _by_pair(keep: PairFilter, first: int, block: Block) -> tuple[bytes, bytes]:
    """A block as `PairFilter` keeps it one pair at a time: (source text, target text)."""
    k, src, tgt, added = block
    sides = (_lines(src, added[0]), _lines(tgt, added[1]))
    kept = keep.block(list(zip(range(first, first + k), *sides, strict=True)))
    return b"".join(a + b"\n" for a, _ in kept), b"".join(b + b"\n" for _, b in kept)


def clean_files(
    paths: tuple[Path, Path],
    keep: PairFilter,
    outputs: tuple[Path, Path],
    chunk_pairs: int,
    report: Callable[[int], None],
) -> tuple[dict[str, int], list[Chunk]]:
    """`clean_train` of two line-aligned files under the UTF-8, trimming and empty rules only."""
    chunker, read = Chunker(chunk_pairs), 0
    with open(outputs[0], "wb") as ws, open(outputs[1], "wb") as wt:
        for block in aligned_blocks(paths):
            k, src, tgt, _ = block
            if not (_valid(src) and _valid(tgt)):
                out_s, out_t = _by_pair(keep, read + 1, block)
                lengths = [np.diff(_newlines(out), prepend=-1) for out in (out_s, out_t)]
            else:
                spans = _spans(src), _spans(tgt)
                kept = (spans[0][2] > spans[0][1]) & (spans[1][2] > spans[1][1])
                keep.counts["empty"] += k - int(kept.sum())
                keep.usable += int(kept.sum())
                out_s, out_t = _gather(src, spans[0], kept), _gather(tgt, spans[1], kept)
                lengths = [(x[2] - x[1] + 1)[kept] for x in spans]
            ws.write(out_s)
            wt.write(out_t)
            chunker.add_lengths(*lengths)
            if (read + k) // _REPORT_EVERY > read // _REPORT_EVERY:
                report(read + k)
            read += k
    report(read)
    return {**keep.counts, "read": read}, chunker.close()
