"""Encoded splits are written as they come and summarised from a length histogram: the same
`.idx` bytes and the same manifest numbers as offsets and statistics taken from all lengths at once."""

from __future__ import annotations

import numpy as np
import pytest

from nmt.data import split_entry as se
from nmt.data.encoding import SplitWriter


def ref_lengths_stats(lengths: np.ndarray) -> dict:
    """The statistics taken from the full int64 lengths, as np.percentile and np.mean give them."""
    if len(lengths) == 0:
        return {"mean": 0.0, **{f"p{p}": 0 for p in se.PERCENTILES}, "max": 0}
    pct = np.percentile(lengths, se.PERCENTILES)
    return {
        "mean": round(float(lengths.mean()), 2),
        **{f"p{p}": int(round(v)) for p, v in zip(se.PERCENTILES, pct, strict=True)},
        "max": int(lengths.max()),
    }


def _samples():
    """Lengths of many sizes and shapes: tiny, with zeros, few distinct values, long tails."""
    rng = np.random.default_rng(0)
    for n in [*range(1, 60), 101, 201, 1001, 20_001, 200_000]:
        yield rng.integers(0, 4, n)
        yield rng.integers(1, 300, n)
        yield np.minimum(rng.zipf(1.5, n), 5000)


def test_stats_from_the_histogram_equal_the_full_array_ones(monkeypatch):
    monkeypatch.setattr(se, "_BLOCK", 1000)  # histograms summed over several blocks
    halves = 0
    for lengths in _samples():
        compact = lengths.astype(np.uintc)  # what SplitWriter keeps
        assert se.lengths_stats(compact) == ref_lengths_stats(lengths.astype(np.int64))
        pct = np.percentile(lengths, se.PERCENTILES)
        halves += int(np.any(pct % 1 == 0.5))
    assert halves > 10  # ties at .5, where rounding is most fragile, were compared
    assert se.lengths_stats(np.zeros(0, np.uintc)) == ref_lengths_stats(np.zeros(0, np.int64))


def test_percentile_matches_numpy_on_awkward_values():
    for lengths in ([5], [0, 7], [1, 2, 3, 4, 1000], [3] * 17 + [4] * 3, list(range(11))):
        x = np.array(lengths)
        got = se._percentiles(se.length_histogram(x), len(x))
        assert got.tolist() == np.percentile(x, se.PERCENTILES).tolist()


def test_split_writer_writes_offsets_as_blocks_come(tmp_path):
    rng = np.random.default_rng(1)
    blocks = [rng.integers(0, 50, n) for n in (7, 0, 1, 300, 2)]
    writer = SplitWriter(tmp_path, "train", "de", "<u2")
    for lengths in blocks:
        writer.append(rng.integers(4, 9000, int(lengths.sum())).astype(np.int64), lengths)
    n, got = writer.close()
    every = np.concatenate(blocks)
    offsets = np.zeros(len(every) + 1, dtype="<i8")
    np.cumsum(every, out=offsets[1:])
    assert n == len(every) and got.tolist() == every.tolist()
    assert (tmp_path / "train.de.idx").read_bytes() == offsets.tobytes()
    assert (tmp_path / "train.de.ids").stat().st_size == 2 * int(every.sum())


@pytest.mark.parametrize("n", [0, 5])
def test_split_entry_counts_tokens(tmp_path, n):
    src, tgt = tmp_path / "a.de", tmp_path / "a.en"
    src.write_text("x\n")
    tgt.write_text("y\n")
    ls, lt = np.arange(n, dtype=np.uintc), np.full(n, 3, dtype=np.uintc)
    entry = se.split_entry(("de", "en"), (src, tgt), (ls, lt), False, "train")
    assert entry["tokens"] == {"de": int(ls.sum()), "en": 3 * n}
    assert entry["lengths"]["en"] == ref_lengths_stats(lt.astype(np.int64))
