"""The vectorised batching reproduces the plain per-sentence algorithm exactly: the same batches,
in the same order, for the same seed, so training runs and --resume stay bitwise the same."""

from __future__ import annotations

import numpy as np
import pytest

from nmt.data import batching


def ref_bucket(indices, src_lengths, tgt_lengths, max_tokens, rng=None):
    """The per-sentence greedy bucketing the vectorised one must reproduce."""
    indices = np.asarray(indices, dtype=np.int64)
    if rng is not None:
        indices = indices[rng.permutation(len(indices))]
    s_len = np.asarray(src_lengths)[indices] + 1
    t_len = np.asarray(tgt_lengths)[indices] + 1
    order = np.lexsort((s_len, t_len, np.maximum(s_len, t_len)))
    indices, s_len, t_len = indices[order], s_len[order], t_len[order]
    batches = []
    start, max_s, max_t = 0, 0, 0
    for i in range(len(indices)):
        ms, mt = max(max_s, int(s_len[i])), max(max_t, int(t_len[i]))
        if i > start and (i - start + 1) * max(ms, mt) > max_tokens:
            batches.append(indices[start:i])
            start, ms, mt = i, int(s_len[i]), int(t_len[i])
        max_s, max_t = ms, mt
    if start < len(indices):
        batches.append(indices[start:])
    return batches


def ref_epoch_batches(src, tgt, max_tokens, seed, epoch, keep=None, rank=0, world_size=1):
    """The reference epoch: seeded bucketing, shuffled batches, the rank's shard."""
    rng = np.random.default_rng([seed, epoch])
    indices = np.arange(len(src)) if keep is None else np.flatnonzero(keep)
    batches = ref_bucket(indices, src, tgt, max_tokens, rng)
    batches = [batches[i] for i in rng.permutation(len(batches))]
    if world_size > 1:
        usable = len(batches) - len(batches) % world_size
        batches = batches[rank:usable:world_size]
    return batches


def ref_padding_ratio(batches, src_lengths, tgt_lengths):
    """The per-batch padding measure."""
    real = padded = 0
    for b in batches:
        s, t = np.asarray(src_lengths)[b] + 1, np.asarray(tgt_lengths)[b] + 1
        real += int(s.sum() + t.sum())
        padded += len(b) * int(s.max() + t.max())
    return 1.0 - real / padded if padded else 0.0


def _distribution(kind: str, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Source and target lengths of one shape: typical, near the budget, many ties, long tails."""
    rng = np.random.default_rng(seed)
    if kind == "normal":
        src = np.clip(rng.normal(14, 5, n), 0, 60).astype(np.int64)
        tgt = np.clip(src + rng.integers(-3, 4, n), 0, 60).astype(np.int64)
    elif kind == "near_budget":  # 200 tokens: lengths up to and past the budget
        src, tgt = rng.integers(90, 230, n), rng.integers(0, 210, n)
    elif kind == "ties":
        src, tgt = rng.integers(0, 3, n), rng.integers(0, 3, n)
    elif kind == "zipf":
        src, tgt = np.minimum(rng.zipf(1.6, n), 500), np.minimum(rng.zipf(1.6, n), 500)
    else:  # one sentence longer than the budget among short ones
        src, tgt = rng.integers(1, 10, n), rng.integers(1, 10, n)
        src[n // 2] = 5000
    return src.astype(np.int64), tgt.astype(np.int64)


KINDS = ("normal", "near_budget", "ties", "zipf", "one_too_long")


def _same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    """Equal batch lists: the same batches, members in the same order."""
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("chunk", [1 << 20, 7])  # 7: every chunked pass crosses chunk edges
@pytest.mark.parametrize("kind", KINDS)
def test_epoch_batches_equal_the_reference(kind, chunk, monkeypatch):
    monkeypatch.setattr(batching, "_CHUNK", chunk)
    src, tgt = _distribution(kind, 1500, seed=len(kind))
    for max_tokens in (1, 37, 200, 4096):
        for world_size, seed, epoch in ((1, 1, 1), (1, 1, 2), (3, 5, 1), (4, 2, 7)):
            for rank in range(world_size):
                got = batching.epoch_batches(
                    src, tgt, max_tokens, seed, epoch, None, rank, world_size
                )
                want = ref_epoch_batches(src, tgt, max_tokens, seed, epoch, None, rank, world_size)
                assert _same(got, want), (max_tokens, world_size, seed, epoch, rank)
                assert batching.padding_ratio(got, src, tgt) == ref_padding_ratio(want, src, tgt)


@pytest.mark.parametrize("kind", KINDS)
def test_bucket_with_a_keep_mask_and_without_shuffle_equals_the_reference(kind, monkeypatch):
    monkeypatch.setattr(batching, "_CHUNK", 64)
    src, tgt = _distribution(kind, 1000, seed=7)
    keep = batching.keep_mask(src, tgt, max_tokens=200, max_positions=150)
    got = batching.epoch_batches(src, tgt, 200, 3, 4, keep)
    assert _same(got, ref_epoch_batches(src, tgt, 200, 3, 4, keep))
    indices = np.flatnonzero(keep)[::-1]  # an unsorted selection, kept in its own tie order
    assert _same(batching.bucket(indices, src, tgt, 200), ref_bucket(indices, src, tgt, 200))


def test_empty_and_single_inputs_equal_the_reference():
    src, tgt = np.array([3, 9000]), np.array([4, 2])
    for idx in ([], [0], [1], [1, 0]):
        assert _same(batching.bucket(idx, src, tgt, 100), ref_bucket(idx, src, tgt, 100))
    keep = np.zeros(2, dtype=bool)
    assert batching.epoch_batches(src, tgt, 100, 1, 1, keep) == []
    assert batching.padding_ratio([], src, tgt) == 0.0


def test_lengths_too_long_to_pack_fall_back_to_the_same_order():
    rng = np.random.default_rng(4)
    src = rng.integers(1 << 30, (1 << 30) + 4, 300)  # 31-bit lengths: the packed key would overflow
    tgt = rng.integers(1 << 30, (1 << 30) + 4, 300)
    got = batching.epoch_batches(src, tgt, 1 << 33, seed=2, epoch=3)
    assert _same(got, ref_epoch_batches(src, tgt, 1 << 33, seed=2, epoch=3))
    assert len(got) > 1 and max(len(b) for b in got) > 1  # real batches, not one per sentence
