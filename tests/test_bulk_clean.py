"""Bulk cleaning and the block-drawn vocabulary sample give the bytes the pair-by-pair code gives."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from nmt.data import bulk_clean
from nmt.data.bulk_clean import clean_files
from nmt.data.cleaning import PairFilter, clean_train, read_pairs
from nmt.data.vocab import SAMPLE_SEED, _sampled_input
from nmt.errors import NmtError

SRC = b"a b\r\n  lead\ntrail  \t\n\n   \n" + b" " * 40 + b"x" + b" " * 40 + b"\nlast"
TGT = b"one\ntwo\nthree\nfour\nfive\nsix\n seven \n"


def _both(tmp_path: Path, src: bytes, tgt: bytes, skip: bool = False, size: int = 3) -> list:
    """(counts, chunks, cleaned bytes) from the pair-by-pair and the bulk cleaner, or errors."""
    paths = (tmp_path / "in.de", tmp_path / "in.en")
    paths[0].write_bytes(src)
    paths[1].write_bytes(tgt)
    results = []
    for name in ("pairs", "bulk"):
        outs = (tmp_path / f"{name}.de", tmp_path / f"{name}.en")
        keep = PairFilter(paths, False, skip)
        try:
            if name == "pairs":
                counts, chunks = clean_train(read_pairs(*paths), keep, outs, size, lambda n: None)
            else:
                counts, chunks = clean_files(paths, keep, outs, size, lambda n: None)
        except NmtError as e:
            results.append(str(e))
            continue
        results.append((counts, chunks, outs[0].read_bytes(), outs[1].read_bytes()))
    return results


@pytest.mark.parametrize("read", [1, 5, 1 << 22])
def test_bulk_cleaning_trims_drops_and_chunks_like_pair_by_pair(tmp_path, monkeypatch, read):
    monkeypatch.setattr(bulk_clean, "_READ", read)
    pairs, bulk = _both(tmp_path, SRC, TGT)
    assert bulk == pairs
    counts, chunks, src, _ = bulk
    assert src == b"a b\nlead\ntrail\nx\nlast\n"
    assert (counts["read"], counts["empty"], [c.n for c in chunks]) == (7, 2, [3, 2])


def test_bulk_cleaning_reports_invalid_utf8_and_uneven_files_like_pair_by_pair(tmp_path):
    bad = TGT.replace(b"four", b"f\xc3ur")
    strict = _both(tmp_path, SRC, bad)
    assert strict[0] == strict[1]
    assert "in.en:4: invalid UTF-8" in strict[1]
    skipped = _both(tmp_path, SRC, bad, skip=True)
    assert skipped[0] == skipped[1] and skipped[1][0]["invalid_utf8"] == 1
    uneven = _both(tmp_path, SRC, TGT + b"eight\n")
    assert uneven[0] == uneven[1] and "has 7 lines" in uneven[1] and "has 8 lines" in uneven[1]


def _reference_sample(files: list[Path], size: int) -> bytes:
    """Selection sampling one line at a time with random.Random (the definition of the sample)."""
    total = sum(len(p.read_bytes().splitlines()) for p in files)
    rng, wanted, left, out = random.Random(SAMPLE_SEED), size, total, []
    for path in files:
        for line in path.read_bytes().split(b"\n"):
            if not line and path.read_bytes().endswith(b"\n"):
                continue  # the empty piece after the final newline is no line
            if rng.random() * left < wanted:
                out.append(line + b"\n")
                wanted -= 1
            left -= 1
    return b"".join(out)


def test_vocabulary_sample_draws_the_lines_random_random_draws(tmp_path):
    rnd = random.Random(4)
    files = []
    for i, end in enumerate((b"\n", b"")):
        lines = [b"w" * rnd.choice([0, 3, 300]) + str(j).encode() for j in range(3000)]
        files.append(tmp_path / f"text{i}")
        files[-1].write_bytes(b"\n".join(lines) + end)
    got, tmp = _sampled_input([str(f) for f in files], 700, tmp_path)
    assert tmp is not None and got == [tmp]
    sample = Path(tmp).read_bytes()
    assert sample == _reference_sample(files, 700) and sample.count(b"\n") == 700
