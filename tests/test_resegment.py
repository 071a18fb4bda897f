"""Subword regularisation: each epoch's sampled segmentation is deterministic, decodes to the
same sentences, differs between epochs, and is the same whether prefetched or not (resume)."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from nmt.data.resegment import Ragged, Resegmenter
from nmt.dirs.data import DataDir

WORDS = "the cat sat on mat dog ran fast under table with red blue ball".split()


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """A small preprocessed corpus with a unigram vocabulary larger than its characters."""
    from nmt.data.preprocess import PreprocessConfig, preprocess

    root = tmp_path_factory.mktemp("reseg")
    rng = random.Random(0)
    lines = [" ".join(rng.choices(WORDS, k=rng.randint(4, 9))) for _ in range(400)]
    for lang in ("en", "de"):
        (root / f"train.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
        (root / f"valid.{lang}").write_text("\n".join(lines[:20]) + "\n", encoding="utf-8")
    out = root / "data"
    cfg = PreprocessConfig(
        "en", "de", root / "train", valid=root / "valid", vocab_size=60, threads=1
    )
    preprocess(cfg, out, quiet=True)
    return out


def _rows(r: Ragged) -> list[list[int]]:
    return [r[i].tolist() for i in range(len(r))]


def test_ragged_indexes_like_a_token_array():
    r = Ragged([[5, 6], [], [7, 8, 9]], np.dtype("<u2"))
    assert len(r) == 3 and r.lengths.tolist() == [2, 0, 3]
    assert _rows(r) == [[5, 6], [], [7, 8, 9]] and r.ids.dtype == np.dtype("<u2")


def test_samples_decode_to_the_corpus_and_change_every_epoch(data):
    train = DataDir(data).split("train")
    src_tok, tgt_tok = DataDir(data).tokenizers
    seg = Resegmenter(DataDir(data).tokenizers, train, alpha=0.2)
    e0, e1 = seg.epoch(3, 0), seg.epoch(3, 1)
    for side, tok, canon in (("src", src_tok, train.src), ("tgt", tgt_tok, train.tgt)):
        a, b = getattr(e0, side), getattr(e1, side)
        assert len(a) == len(b) == len(canon)
        texts = [tok.sp.decode(np.asarray(x).tolist()) for x in canon]
        assert [tok.sp.decode(x) for x in _rows(a)] == texts
        assert [tok.sp.decode(x) for x in _rows(b)] == texts
        changed = sum(x != np.asarray(y).tolist() for x, y in zip(_rows(a), canon, strict=True))
        assert changed > len(canon) // 4  # sampling, not the canonical segmentation
        assert _rows(a) != _rows(b)  # a new segmentation each epoch
    assert e0.src_len.tolist() == [len(x) for x in _rows(e0.src)]


def test_an_epoch_is_the_same_prefetched_fresh_or_out_of_order(data):
    train = DataDir(data).split("train")
    run = Resegmenter(DataDir(data).tokenizers, train, alpha=0.2, background=True)
    first = [run.epoch(7, e) for e in (0, 1, 2)]  # epochs 1 and 2 were sampled ahead
    resumed = Resegmenter(DataDir(data).tokenizers, train, alpha=0.2, background=True).epoch(
        7, 2
    )  # resumed in epoch 2
    assert _rows(resumed.src) == _rows(first[2].src)
    assert _rows(resumed.tgt) == _rows(first[2].tgt)
    jumped = run.epoch(7, 1)  # not the one prefetched (3): sampled afresh, still the same
    assert _rows(jumped.tgt) == _rows(first[1].tgt)
    inline = Resegmenter(DataDir(data).tokenizers, train, alpha=0.2).epoch(
        7, 2
    )  # no spare core: sampled on demand
    assert _rows(inline.src) == _rows(first[2].src)
    other_seed = Resegmenter(DataDir(data).tokenizers, train, alpha=0.2).epoch(8, 2)
    assert _rows(other_seed.tgt) != _rows(first[2].tgt)


def test_sentences_with_unknown_characters_keep_their_segmentation(tmp_path):
    # <unk> decodes to " ⁇ ", which encoded again made a word boundary and a piece of its own.
    from nmt.data.preprocess import PreprocessConfig, preprocess

    rng = random.Random(0)
    lines = [" ".join(rng.choices(WORDS, k=rng.randint(4, 9))) for _ in range(400)]
    lines[5] = "the cat\u017esat on \u017e mat"  # ž: too rare for 99.5% character coverage
    for lang in ("en", "de"):
        (tmp_path / f"train.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    cfg = PreprocessConfig(
        "en", "de", tmp_path / "train", vocab_size=60, threads=1, character_coverage=0.995
    )
    preprocess(cfg, tmp_path / "data", quiet=True)
    train = DataDir(tmp_path / "data").split("train")
    canon = train.src[5].tolist()
    assert canon.count(1) == 2  # UNK_ID twice
    for epoch in range(3):
        seg = Resegmenter(DataDir(tmp_path / "data").tokenizers, train, alpha=0.2).epoch(3, epoch)
        assert seg.src[5].tolist() == seg.tgt[5].tolist() == canon
        changed = sum(
            r != np.asarray(c).tolist() for r, c in zip(_rows(seg.src), train.src, strict=True)
        )
        assert changed > 0  # the other sentences are still sampled
