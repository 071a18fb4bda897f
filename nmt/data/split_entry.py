"""The manifest's record of one split: its files, input checksums, token counts and length
statistics (the numbers `nmt preprocess` reports per split)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from nmt.data.corpus import sha256_file

PERCENTILES = (50, 90, 95, 99)
POSITION_LIMITS = (256, 512)  # common model.max_positions, reported for valid/test as over_limits


def lengths_stats(lengths: np.ndarray) -> dict[str, Any]:
    """Mean, percentiles and max of sentence lengths in tokens (for the manifest and summary)."""
    if len(lengths) == 0:
        return {"mean": 0.0, **{f"p{p}": 0 for p in PERCENTILES}, "max": 0}
    pct = np.percentile(lengths, PERCENTILES)
    return {
        "mean": round(float(lengths.mean()), 2),
        **{f"p{p}": int(round(v)) for p, v in zip(PERCENTILES, pct, strict=True)},
        "max": int(lengths.max()),
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
) -> dict[str, Any]:
    """The manifest record of one split: files, input checksums, token counts, length stats."""
    files: dict[str, dict[str, str]] = {}
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
    return {
        "files": files,
        "tokens": {lang: int(x.sum()) for lang, x in zip(langs, lengths, strict=True)},
        "lengths": {lang: lengths_stats(x) for lang, x in zip(langs, lengths, strict=True)},
    }
