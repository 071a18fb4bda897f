"""Token-bucketed batches: every sentence once per epoch, max_tokens respected, little padding,
an order that depends only on (seed, epoch), disjoint shards per rank."""

from __future__ import annotations

import numpy as np
import pytest

from nmt.data import batching
from nmt.data.vocab import BOS_ID, EOS_ID, PAD_ID


def _lengths(n: int = 3000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Correlated source/target lengths shaped like Multi30k (about 13 +- 5 subwords)."""
    rng = np.random.default_rng(seed)
    src = np.clip(rng.normal(14, 5, n), 1, 60).astype(np.int64)
    tgt = np.clip(src + rng.integers(-3, 4, n), 1, 60).astype(np.int64)
    return src, tgt


def test_every_sentence_exactly_once_and_max_tokens_respected():
    src, tgt = _lengths()
    batches = batching.epoch_batches(src, tgt, max_tokens=1000, seed=3, epoch=1)
    flat = np.concatenate(batches)
    assert np.array_equal(np.sort(flat), np.arange(len(src)))
    for b in batches:
        assert len(b) * max(src[b].max() + 1, tgt[b].max() + 1) <= 1000
    # Batches are full: in length order, adding the next sentence would break the budget.
    ordered = batching.bucket(np.arange(len(src)), src, tgt, 1000)
    for b, nxt in zip(ordered, ordered[1:], strict=False):
        c = np.append(b, nxt[0])
        assert len(c) * max(src[c].max() + 1, tgt[c].max() + 1) > 1000


def test_padding_ratio_is_measured_and_small():
    src, tgt = _lengths(29000)  # Multi30k's size
    batches = batching.epoch_batches(src, tgt, max_tokens=4096, seed=1, epoch=1)
    ratio = batching.padding_ratio(batches, src, tgt)
    real = int((src + 1).sum() + (tgt + 1).sum())
    padded = sum(len(b) * int(src[b].max() + tgt[b].max() + 2) for b in batches)
    assert ratio == pytest.approx(1 - real / padded)
    assert ratio < 0.10
    # Unsorted batches of the same sizes waste far more: bucketing is what keeps padding low.
    rng = np.random.default_rng(0)
    perm = rng.permutation(len(src))
    cuts = np.cumsum([len(b) for b in batches])[:-1]
    assert batching.padding_ratio(np.split(perm, cuts), src, tgt) > 2 * ratio


def test_order_depends_only_on_seed_and_epoch():
    src, tgt = _lengths()
    a = batching.epoch_batches(src, tgt, 2000, seed=7, epoch=2)
    b = batching.epoch_batches(src, tgt, 2000, seed=7, epoch=2)
    c = batching.epoch_batches(src, tgt, 2000, seed=7, epoch=3)
    d = batching.epoch_batches(src, tgt, 2000, seed=8, epoch=2)
    assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not np.array_equal(np.concatenate(a), np.concatenate(c))
    assert not np.array_equal(np.concatenate(a), np.concatenate(d))


def test_ranks_get_disjoint_equal_shards():
    src, tgt = _lengths()
    full = batching.epoch_batches(src, tgt, 2000, seed=1, epoch=1)
    shards = [batching.epoch_batches(src, tgt, 2000, 1, 1, rank=r, world_size=3) for r in range(3)]
    assert len({len(s) for s in shards}) == 1
    assert len(shards[0]) == len(full) // 3
    seen = np.concatenate([np.concatenate(s) for s in shards])
    assert len(seen) == len(set(seen.tolist()))


def test_keep_mask_drops_what_cannot_fit():
    src = np.array([3, 100, 5, 10])
    tgt = np.array([4, 5, 300, 10])
    keep = batching.keep_mask(src, tgt, max_tokens=200, max_positions=64)
    assert keep.tolist() == [True, False, False, True]
    batches = batching.epoch_batches(src, tgt, 200, seed=1, epoch=1, keep=keep)
    assert sorted(np.concatenate(batches).tolist()) == [0, 3]


def test_collate_layout():
    src = [np.array([5, 6, 7]), np.array([8])]
    tgt = [np.array([9]), np.array([10, 11])]
    b = batching.collate(src, tgt, [0, 1])
    assert b.src.tolist() == [[5, 6, 7, EOS_ID], [8, EOS_ID, PAD_ID, PAD_ID]]
    assert b.src_lengths.tolist() == [4, 2]
    assert b.tgt_in.tolist() == [[BOS_ID, 9, PAD_ID], [BOS_ID, 10, 11]]
    assert b.tgt_out.tolist() == [[9, EOS_ID, PAD_ID], [10, 11, EOS_ID]]
    assert b.n_tgt_tokens == 5


def test_source_batches_cover_everything_longest_first():
    lengths = np.array([3, 9, 1, 7, 7, 2])
    batches = batching.source_batches(lengths, max_tokens=20)
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(6))
    assert lengths[flat].tolist() == sorted(lengths.tolist(), reverse=True)
    assert all(len(b) * (lengths[b].max() + 1) <= 20 for b in batches)


def test_decoding_runs_fill_the_budget_for_one_worker():
    lengths = [10, 9, 9, 8, 5, 5, 5, 2]
    runs = batching.decoding_runs(lengths, max_tokens=30)
    assert runs == [(0, 3), (3, 6), (6, 8)]  # 3 x 10, 3 x 8, 2 x 5: the last run is small
    assert batching.decoding_runs(lengths, max_tokens=30, max_rows=2)[0] == (0, 2)
    assert batching.decoding_runs([50, 3], max_tokens=20) == [(0, 1), (1, 2)]  # too long: alone


def test_decoding_runs_are_even_and_a_multiple_of_the_workers():
    rng = np.random.default_rng(1)
    lengths = sorted(rng.integers(3, 40, size=1000).tolist(), reverse=True)
    one = batching.decoding_runs(lengths, max_tokens=4096)
    two = batching.decoding_runs(lengths, max_tokens=4096, parts=2)
    assert len(one) % 2 == 1 and len(two) == len(one) + 1
    assert [s for s, _ in two] == [0] + [e for _, e in two[:-1]] and two[-1][1] == 1000
    sizes = [(e - s) * lengths[s] for s, e in two]  # padded tokens
    assert max(sizes) <= 4096
    assert min(sizes) > 0.8 * max(sizes)  # filled to the budget, the last run held a fraction
    assert min((e - s) * lengths[s] for s, e in one) < 0.6 * max(sizes)
    assert batching.decoding_runs([5], 4096, parts=4) == [(0, 1)]
    assert len(batching.decoding_runs([5, 4, 3], 4096, parts=2)) == 2
