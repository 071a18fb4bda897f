"""--dedupe remembers pair hashes in a compact table: the same pairs dropped as a Python set of the
same hashes would drop, at no more than 20 bytes a pair."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from nmt.data import cleaning
from nmt.data.cleaning import HashSet64, PairFilter


def _reference(keys: list[int]) -> list[bool]:
    """New or not, key by key, as a Python set says."""
    seen: set[int] = set()
    out = []
    for k in keys:
        out.append(k not in seen)
        seen.add(k)
    return out


def test_hash_set_agrees_with_a_python_set_through_many_doublings():
    rng = random.Random(0)
    keys = [rng.getrandbits(64) - (1 << 63) for _ in range(30_000)]  # signed, like hash()
    keys += rng.choices(keys, k=20_000) + [0, 0, -1, 1, -(1 << 63), (1 << 63) - 1] * 3
    rng.shuffle(keys)
    table = HashSet64()
    assert [table.add(k) for k in keys] == _reference(keys)
    assert table.table.nbytes > 30_000 * 8  # it grew


def test_keys_sharing_one_home_run_past_the_end_and_stay_found(monkeypatch):
    monkeypatch.setattr(cleaning, "_STEP", 100)  # layouts cross step edges
    keys = list(range(1, 1500)) * 2  # top bits all zero: one run longer than the spare slots
    table = HashSet64()
    assert [table.add(k) for k in keys] == _reference(keys)
    assert table.table[-1] == 0  # the last slot stays empty, so every probe ends


@pytest.mark.parametrize("n", [110_000, 160_000, 210_000])
def test_at_most_20_bytes_a_pair(n):
    rng = np.random.default_rng(n)
    table = HashSet64()
    for k in rng.integers(-(1 << 63), (1 << 63) - 1, n, dtype=np.int64).tolist():
        table.add(k)
    assert table.table.nbytes / n <= 20.1  # 20 right after a doubling, plus the spare slots


def _corpus(tmp_path: Path) -> tuple[Path, Path, list[tuple[bytes, bytes]]]:
    """Aligned files with many exact, padded and case-only duplicates."""
    rng = random.Random(3)
    words = [b"a", b"b", b"Dog", b"dog", b"runs", b"\xc3\x9cber"]
    pairs = []
    for _ in range(4000):
        src = b" ".join(rng.choices(words, k=rng.randint(1, 3)))
        tgt = b" ".join(rng.choices(words, k=rng.randint(1, 2)))
        pairs.append((src + b" " * rng.randint(0, 1), tgt))
    paths = tmp_path / "c.de", tmp_path / "c.en"
    paths[0].write_bytes(b"".join(a + b"\n" for a, _ in pairs))
    paths[1].write_bytes(b"".join(b + b"\n" for _, b in pairs))
    return paths[0], paths[1], pairs


@pytest.mark.parametrize("lowercase", [False, True])
def test_pair_filter_drops_what_a_set_of_the_same_hashes_drops(tmp_path, lowercase):
    src, tgt, pairs = _corpus(tmp_path)
    keep = PairFilter((src, tgt), dedupe=True, skip_invalid=False, lowercase=lowercase)
    got = [keep(n, a + b"\n", b + b"\n") for n, (a, b) in enumerate(pairs, 1)]
    seen: set[int] = set()
    want = []
    for a, b in pairs:
        a, b = a.strip(), b.strip()
        if lowercase:
            a, b = a.decode().lower().encode(), b.decode().lower().encode()
        want.append(None if hash((a, b)) in seen else (a, b))
        seen.add(hash((a, b)))
    assert got == want
    assert keep.counts["duplicate"] == sum(w is None for w in want) > 1000
