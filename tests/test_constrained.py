"""Lexically constrained beam search: a hand-set toy where the best constrained output puts the
constraint first, constraints split across subwords and overlapping ones, n-best, eos blocked
until every constraint is in, the length limit, batching, and equality with beam search when a
sentence has no constraints, on both architectures."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_search import (
    A,
    B,
    C,
    ToyDecoder,
    dist,
    lp,
    random_batch,
    random_table,
    tiny_model,
    toy_src,
)

from nmt.decode.options import ResolvedOptions
from nmt.decode.search.beam import beam_search
from nmt.decode.search.constrained import Progress, SentenceConstraints, constrained_beam_search


def holds(tokens: list[int], phrase: list[int]) -> bool:
    n = len(phrase)
    return any(tokens[i : i + n] == phrase for i in range(len(tokens) - n + 1))


def first_table(sid, prefix):
    """Unconstrained best: "a b". With the constraint c, "c a" (.25 x .9 x .9 = .2025) beats
    every output that adds c after "a" ("a c": .6 x .05 x .5 = .015; "a b c": .6 x .7 x .02 x
    .9 = .0076), so a search that appends constraints (or only places them late) loses."""
    return {
        (): dist(0.05, 0.6, 0.1, 0.25),
        (A,): dist(0.2, 0.05, 0.7, 0.05),
        (A, B): dist(0.9, 0.05, 0.03, 0.02),
        (A, C): dist(0.5, 0.2, 0.2, 0.1),
        (A, B, C): dist(0.9, 0.05, 0.05, 0.0),
        (C,): dist(0.05, 0.9, 0.05, 0.0),
        (C, A): dist(0.9, 0.05, 0.05, 0.0),
    }.get(prefix, dist(0.9, 0.05, 0.05, 0.0))


def test_the_best_constrained_output_puts_the_constraint_first():
    model = ToyDecoder(first_table)
    src, lens = toy_src([0])
    opts = ResolvedOptions(beam_size=2, length_penalty=0.0, nbest=2, stop="exact")
    (free,) = beam_search(model, src, lens, opts)
    assert free[0].tokens == [A, B]
    (hyps,) = constrained_beam_search(model, src, lens, [[[C]]], opts)
    assert [h.tokens for h in hyps] == [[C, A], [C, A, A]]  # "a c" left the beam for "a b"
    assert hyps[0].log_prob == pytest.approx(math.log(0.25 * 0.9 * 0.9), rel=1e-6)
    assert all(C in h.tokens for h in hyps)  # n-best: every hypothesis holds the constraint


def test_eos_waits_for_the_constraints_and_the_length_penalty_normalizes():
    """eos is the toy's favourite everywhere; the constraint a b must come first."""
    model = ToyDecoder(lambda sid, p: dist(0.9, 0.04, 0.03, 0.03))
    src, lens = toy_src([0])
    for alpha in (0.0, 1.0):
        opts = ResolvedOptions(beam_size=3, length_penalty=alpha, stop="exact")
        (hyps,) = constrained_beam_search(model, src, lens, [[[A, B]]], opts)
        assert hyps[0].tokens == [A, B]
        raw = math.log(0.04 * 0.03 * 0.9)
        assert hyps[0].log_prob == pytest.approx(raw, rel=1e-6)
        assert hyps[0].score == pytest.approx(raw / lp(3, alpha), rel=1e-6)


def test_overlapping_constraints_are_each_held():
    """b c and a b overlap in "a b c"; a and a b share a start; both pairs are held once each."""
    model = ToyDecoder(lambda sid, p: dist(0.7, 0.1, 0.1, 0.1))
    src, lens = toy_src([0])
    opts = ResolvedOptions(beam_size=4, length_penalty=0.0, stop="exact")
    for phrases in ([[B, C], [A, B]], [[A], [A, B]], [[C], [A, B, C]]):
        (hyps,) = constrained_beam_search(model, src, lens, [phrases], opts)
        assert all(holds(hyps[0].tokens, p) for p in phrases), (phrases, hyps[0].tokens)
        assert len(hyps[0].tokens) == max(3, *(len(p) for p in phrases)) - (phrases[0] == [A])


def test_progress_gives_back_an_abandoned_phrase():
    cons = SentenceConstraints([[A, B, C], [B], [A, B, C]])  # duplicates count once
    assert cons.phrases == [(A, B, C), (B,)] and cons.total == 4
    p = cons.start
    assert cons.wanted(p) == {A, B} and p.bank == 0
    p = cons.after(p, A)
    assert p.bank == 1 and cons.wanted(p) == {A, B}
    p = cons.after(p, B)  # b held; a b begun
    assert p.met == frozenset({1}) and p.bank == 3 and cons.wanted(p) == {A, C}
    p = cons.after(p, A)  # a b c abandoned, a begun again
    assert p.bank == 2 and not cons.done(p)
    p = cons.after(p, 3)  # a token of no phrase gives back the started one
    assert p.bank == 1 and cons.wanted(p) == {A}
    for tok in (A, B, C):
        p = cons.after(p, tok)
    assert cons.done(p) and p.bank == 4 and cons.wanted(p) == set()
    assert SentenceConstraints([]).done(Progress(frozenset()))


def test_a_constraint_longer_than_the_limit_ends_without_it_and_ranks_last():
    model = ToyDecoder(lambda sid, p: dist(0.5, 0.2, 0.2, 0.1))
    src, lens = toy_src([0])
    opts = ResolvedOptions(beam_size=2, nbest=2, max_len_a=0.0, max_len_b=2)
    (hyps,) = constrained_beam_search(model, src, lens, [[[C, C, C]]], opts)
    assert all(len(h.tokens) == 2 for h in hyps)  # forced to end at the maximum length
    assert all(not holds(h.tokens, [C, C, C]) for h in hyps)


@pytest.mark.parametrize("kind", ["transformer", "seq2seq"])
def test_without_constraints_it_is_beam_search(kind):
    model = tiny_model(kind)
    src, lens = random_batch(3)
    for stop in ("early", "exact"):
        opts = ResolvedOptions(beam_size=4, nbest=3, max_len_a=1.0, max_len_b=4, stop=stop)
        plain = beam_search(model, src, lens, opts)
        free = constrained_beam_search(model, src, lens, [[] for _ in lens], opts)
        assert [[h.tokens for h in s] for s in free] == [[h.tokens for h in s] for s in plain]
        for a, b in zip(free, plain, strict=True):
            assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-5)


@pytest.mark.parametrize("kind", ["transformer", "seq2seq"])
def test_multi_token_constraints_reach_every_hypothesis_batched_as_alone(kind):
    """Phrases of 1-3 subwords the model would not write, 1-3 a sentence; n-best of 3; the
    batch gives what each sentence gives alone; attention follows each hypothesis."""
    model = tiny_model(kind)
    src, lens = random_batch(5, n=8)
    g = torch.Generator().manual_seed(7)
    phrases = [
        [torch.randint(4, 40, (int(torch.randint(1, 4, (1,), generator=g)),), generator=g).tolist()
         for _ in range(i % 3 + 1)]
        for i in range(len(lens))
    ]  # fmt: skip
    opts = ResolvedOptions(beam_size=6, nbest=3, max_len_a=1.0, max_len_b=10, with_attention=True)
    batch = constrained_beam_search(model, src, lens, phrases, opts)
    for i, m in enumerate(lens.tolist()):
        assert 1 <= len(batch[i]) <= 3
        for h in batch[i]:
            assert all(holds(h.tokens, p) for p in phrases[i]), (phrases[i], h.tokens)
            assert h.attention.shape[0] == len(h.tokens) + 1 and h.attention.shape[-1] == m
        (alone,) = constrained_beam_search(
            model, src[i : i + 1, :m], lens[i : i + 1], [phrases[i]], opts
        )
        assert [h.tokens for h in alone] == [h.tokens for h in batch[i]]
        assert [h.score for h in alone] == pytest.approx([h.score for h in batch[i]], abs=1e-4)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    k=st.integers(2, 4),
    alpha=st.sampled_from([0.0, 0.6, 1.0, 2.0]),
    stop=st.sampled_from(["early", "exact"]),
    lengths=st.lists(st.integers(2, 6), min_size=1, max_size=4),
)
def test_no_constraints_equals_beam_search_on_random_tables(seed, k, alpha, stop, lengths):
    model = ToyDecoder(random_table(seed))
    src, lens = toy_src(list(range(len(lengths))), lengths)
    opts = ResolvedOptions(beam_size=k, length_penalty=alpha, max_len_a=1.0, max_len_b=2,
                           nbest=k, stop=stop)  # fmt: skip
    plain = beam_search(model, src, lens, opts)
    free = constrained_beam_search(model, src, lens, [[] for _ in lengths], opts)
    assert [[(h.tokens, round(h.score, 5)) for h in s] for s in free] == [
        [(h.tokens, round(h.score, 5)) for h in s] for s in plain
    ]
