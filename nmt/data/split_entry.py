"""The manifest's record of one split: its files, input checksums, token counts and length
statistics (the numbers `nmt preprocess` reports per split)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from nmt.data.corpus import sha256_file
from nmt.errors import NmtError

PERCENTILES = (50, 90, 95, 99)
_BLOCK = 1 << 16  # lengths counted per bincount call
POSITION_LIMITS = (256, 512)  # common model.max_positions, reported for valid/test as over_limits


def length_histogram(lengths: np.ndarray) -> np.ndarray:
    """Sentences of each length, counted a block at a time so no full-size copy is made."""
    counts = np.zeros(1, dtype=np.int64)
    for c in range(0, len(lengths), _BLOCK):
        block = np.bincount(lengths[c : c + _BLOCK])
        if len(block) > len(counts):
            counts = np.pad(counts, (0, len(block) - len(counts)))
        counts[: len(block)] += block
    return counts


def _percentiles(counts: np.ndarray, n: int) -> np.ndarray:
    """np.percentile's default (linear) estimates at PERCENTILES, with its very float operations
    on the two ranked values each reads, the ranked values read off the histogram instead."""
    virtual = (n - 1) * np.true_divide(PERCENTILES, 100)
    below = np.minimum(np.floor(virtual).astype(np.int64), n - 1)
    gamma = virtual - below
    cum = np.cumsum(counts)
    lo = np.searchsorted(cum, below, side="right").astype(np.int64)
    hi = np.searchsorted(cum, np.minimum(below + 1, n - 1), side="right").astype(np.int64)
    diff = hi - lo
    out = np.add(lo, diff * gamma)
    np.subtract(hi, diff * (1 - gamma), out=out, where=gamma >= 0.5)
    return out


def lengths_stats(lengths: np.ndarray, counts: np.ndarray | None = None) -> dict[str, Any]:
    """Mean, percentiles and max of sentence lengths in tokens (for the manifest and summary),
    from their histogram (`counts`, made here when not given)."""
    if len(lengths) == 0:
        return {"mean": 0.0, **{f"p{p}": 0 for p in PERCENTILES}, "max": 0}
    counts = length_histogram(lengths) if counts is None else counts
    n, total = len(lengths), int(counts @ np.arange(len(counts)))
    pct = _percentiles(counts, n)
    return {
        "mean": round(total / n, 2),  # the sum is exact in float64, so this is np.mean's value
        **{f"p{p}": int(round(v)) for p, v in zip(PERCENTILES, pct, strict=True)},
        "max": int(np.flatnonzero(counts)[-1]),
    }


def over_limits(src: np.ndarray, tgt: np.ndarray) -> dict[str, int]:
    """Lines a model with each common position limit cannot take whole (never filtered in
    valid/test, so training must cut them): a side's subwords plus its eos/bos exceed the limit."""
    longest = np.maximum(src, tgt) + 1
    return {str(limit): int((longest > limit).sum()) for limit in POSITION_LIMITS}


def split_entry(
    langs: tuple[str, str],
    inputs: tuple[Path, Path],
    lengths: tuple[np.ndarray, np.ndarray],
    text: bool,
    split: str,
    sums: Mapping[Path, str] | None = None,
) -> dict[str, Any]:
    """The manifest record of one split: files, input checksums (`sums`, else computed here),
    token counts, length stats."""
    files: dict[str, dict[str, str]] = {}
    if sums is None:
        sums = {path: sha256_file(path) for path in set(inputs)}  # a TSV file holds both sides
    for lang, path in zip(langs, inputs, strict=True):
        files[lang] = {
            "input": str(path),
            "sha256": sums[path],
            "ids": f"{split}.{lang}.ids",
            "idx": f"{split}.{lang}.idx",
        }
        if text:
            files[lang]["text"] = f"{split}.{lang}.txt"
    counts = [length_histogram(x) for x in lengths]
    return {
        "files": files,
        "tokens": {lang: int(c @ np.arange(len(c))) for lang, c in zip(langs, counts, strict=True)},
        "lengths": {
            lang: lengths_stats(x, c) for lang, x, c in zip(langs, lengths, counts, strict=True)
        },
    }


def test_names(tests: Sequence[str | Path]) -> list[str]:
    """Split names from test prefixes' basenames; they must be distinct and not train/valid."""
    names = [Path(t).name for t in tests]
    for name in names:
        if name in ("train", "valid") or names.count(name) > 1:
            raise NmtError(
                f"test prefix name {name!r} is ambiguous (test names must be distinct "
                "and not 'train' or 'valid')"
            )
    return names


def check_inputs_outside(out_dir: Path, inputs: Mapping[str, tuple[Path, Path]]) -> None:
    """Refuse --force when replacing `out_dir` would delete an input file (the user's corpus)."""
    root = out_dir.resolve()
    for pair in inputs.values():
        for path in pair:
            if path.resolve().is_relative_to(root):
                raise NmtError(
                    f"--force would delete {out_dir}, which holds the input {path}; "
                    "choose another --out"
                )
