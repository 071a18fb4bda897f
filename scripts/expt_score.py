"""Scoring for the experiment scripts: BLEU and chrF with bootstrap intervals, by lines or by
documents, and paired differences between two outputs on the same resamples.

Each line's sufficient statistics are extracted once (sacrebleu); a resample is a weight per line
(how often it was drawn), so its score comes from the weighted sum of the statistics, and every
system scored on the same lines with the same weights is paired with every other. A document
bootstrap draws whole documents (all their lines at once), for test sets whose lines are not
independent. Not run on its own: the experiment scripts import it.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from sacrebleu.metrics import BLEU

from nmt.dirs.data import DataDir

SAMPLES = 1000
SEED = 12345


def line_weights(lines: int, samples: int = SAMPLES, seed: int = SEED) -> np.ndarray:
    """(samples, lines) draw counts of a bootstrap over lines: each resample draws `lines` lines
    with replacement (seeded, so equal-sized sets are resampled alike)."""
    idx = np.random.RandomState(seed).randint(0, lines, size=(samples, lines))
    return np.stack([np.bincount(row, minlength=lines) for row in idx]).astype(float)


def document_weights(
    docs: Sequence[Hashable], samples: int = SAMPLES, seed: int = SEED
) -> np.ndarray:
    """(samples, lines) draw counts of a bootstrap over documents: each resample draws as many
    documents as there are, with replacement, and a line counts as often as its document."""
    code = {d: i for i, d in enumerate(dict.fromkeys(docs))}
    of_line = np.array([code[d] for d in docs])
    idx = np.random.RandomState(seed).randint(0, len(code), size=(samples, len(code)))
    drawn = np.stack([np.bincount(row, minlength=len(code)) for row in idx]).astype(float)
    return drawn[:, of_line]


def line_stats(metric: Any, hyps: Sequence[str], refs: Sequence[str]) -> np.ndarray:
    """(lines, statistics) of one output against one reference per line."""
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} translations for {len(refs)} references")
    return np.array(metric._extract_corpus_statistics(list(hyps), [list(refs)]), dtype=float)


def score_of(metric: Any, sums: np.ndarray) -> Any:
    """A corpus score from summed statistics (BLEU: sacrebleu's compute_bleu)."""
    if isinstance(metric, BLEU):
        n = metric.max_ngram_order
        return BLEU.compute_bleu(
            sums[2 : 2 + n].astype(int).tolist(),
            sums[2 + n : 2 + 2 * n].astype(int).tolist(),
            int(sums[0]),
            int(sums[1]),
            smooth_method=metric.smooth_method,
            smooth_value=metric.smooth_value,
            effective_order=metric.effective_order,
            max_ngram_order=n,
        )
    return metric._compute_score_from_stats(sums.tolist())


def resampled(metric: Any, stats: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The score of every resample (rows of `weights`) of lines with these statistics."""
    return np.array([score_of(metric, s).score for s in weights @ stats])


def interval(values: np.ndarray) -> tuple[float, float]:
    """The 95% percentile interval of resampled values."""
    ordered = np.sort(values)
    n = len(ordered)
    return float(ordered[int(0.025 * n)]), float(ordered[int(0.975 * n) - 1])


def bootstrap(
    metric: Any, hyps: Sequence[str], refs: Sequence[str], weights: np.ndarray | None = None
) -> dict[str, float]:
    """The corpus score, its 95% interval over the resamples `weights` (default: over lines),
    and for BLEU the output/reference length ratio."""
    stats = line_stats(metric, hyps, refs)
    weights = line_weights(len(hyps)) if weights is None else weights
    score = score_of(metric, stats.sum(0))
    lo, hi = interval(resampled(metric, stats, weights))
    out = {"score": score.score, "lo": lo, "hi": hi}
    if hasattr(score, "sys_len"):
        out["ratio"] = score.sys_len / max(score.ref_len, 1)
    return out


def paired(
    metric: Any,
    hyps: Sequence[str],
    base: Sequence[str],
    refs: Sequence[str],
    weights: np.ndarray | None = None,
    base_refs: Sequence[str] | None = None,
) -> dict[str, float]:
    """`hyps`' score minus `base`'s, with the 95% interval of the difference over the same
    resamples of the lines (each resample scores both on the same lines). `base_refs`: the
    base's own references when they are cut differently (the same lines, whole or split)."""
    ours, theirs = line_stats(metric, hyps, refs), line_stats(metric, base, base_refs or refs)
    weights = line_weights(len(hyps)) if weights is None else weights
    diff = score_of(metric, ours.sum(0)).score - score_of(metric, theirs.sum(0)).score
    lo, hi = interval(resampled(metric, ours, weights) - resampled(metric, theirs, weights))
    return {"score": diff, "lo": lo, "hi": hi}


def read(path: Path) -> list[str]:
    """A text file's lines."""
    return path.read_text(encoding="utf-8").splitlines()


def cut_flags(model: Path, data: Path, sources: Sequence[str], hyps: Sequence[str]) -> list[bool]:
    """Which translations are at least as long (re-encoded subwords) as the decoder's length
    limit, floor(max_len_a * source subwords + max_len_b): those ended at the limit, not at eos."""
    dec = yaml.safe_load((model / "config.yaml").read_text(encoding="utf-8"))["decoding"]
    src_tok, tgt_tok = DataDir(data).tokenizers
    flags = []
    for s, h in zip(sources, hyps, strict=True):
        limit = max(1, math.floor(dec["max_len_a"] * len(src_tok.encode(s)) + dec["max_len_b"]))
        flags.append(len(tgt_tok.encode(h)) >= limit)
    return flags


def cut_share(model: Path, data: Path, sources: Sequence[str], hyps: Sequence[str]) -> float:
    """% of translations that ran to the decoder's length limit (`cut_flags`)."""
    return 100 * sum(cut_flags(model, data, sources, hyps)) / max(1, len(hyps))
