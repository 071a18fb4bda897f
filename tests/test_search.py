"""Greedy and beam search: exact n-best on a hand-set toy decoder, the exact stopping rule against
a search that never stops early, beam 1 == greedy, batched == one at a time, cached == uncached."""

from __future__ import annotations

import math
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nmt.config import model_config
from nmt.data.vocab import BOS_ID, EOS_ID, PAD_ID, VocabInfo
from nmt.decode.engine import gnmt_length_penalty
from nmt.decode.options import NO_LENGTH_CAP, ResolvedOptions
from nmt.decode.search.beam import beam_search
from nmt.decode.search.greedy import greedy_search
from nmt.decode.search.rows import BeamRows, GreedyRows, max_lengths
from nmt.decode.search.stop import EarlyStop, ExactStop, stop_rule
from nmt.errors import NmtError
from nmt.models import build

A, B, C = 4, 5, 6  # the toy's word ids
NEG_INF = float("-inf")


class ToyDecoder:
    """Implements the decoding contract from a table: (sentence id, prefix) -> probabilities.

    The sentence id is the first source token. State is the prefix of each row, so a wrong
    reorder shows up as wrong probabilities; attention is one-hot on (last token % S).
    """

    def __init__(self, table, vocab_size: int = 7, max_positions: int = 1000) -> None:
        self.table = table
        self.vocab = VocabInfo(vocab_size, vocab_size)
        self.max_positions = max_positions
        self.steps: list[int] = []  # rows per decode_step call

    def encode(self, src, src_lengths):
        return (src[:, 0].clone(), src.size(1))

    def init_state(self, enc):
        return [() for _ in range(enc[0].numel())]

    def log_probs(self, sid: int, prefix: tuple) -> torch.Tensor:
        return torch.tensor(self.table(sid, prefix), dtype=torch.float32).log()  # (V,)

    def decode_step(self, prev, enc, state, need_attn=False, normalize=True):
        ids, s = enc
        self.steps.append(prev.numel())
        state = [
            p if tok == BOS_ID else p + (tok,) for p, tok in zip(state, prev.tolist(), strict=True)
        ]
        lp = torch.stack(
            [self.log_probs(i, p) for i, p in zip(ids.tolist(), state, strict=True)]
        )  # (B, V)
        attn = None
        if need_attn:
            attn = torch.zeros(len(state), 1, 1, s)
            for r, p in enumerate(state):
                attn[r, 0, 0, (p[-1] if p else 0) % s] = 1.0
        if not normalize:  # logits: log-probs shifted by a different constant per row and step
            lp = lp + torch.arange(1.0, lp.size(0) + 1).unsqueeze(1) * (len(self.steps) + 0.5)
        return lp, state, attn

    def reorder_encoder_out(self, enc, order):
        return (enc[0].index_select(0, order), enc[1])

    def repeat_encoder_out(self, enc, k):
        return self.reorder_encoder_out(enc, torch.arange(enc[0].size(0)).repeat_interleave(k))

    def reorder_state(self, state, order):
        return [state[i] for i in order.tolist()]


def dist(eos: float, a: float, b: float, c: float = 0.0) -> list[float]:
    """A distribution over the toy vocabulary (pad, unk, bos never predicted)."""
    return [0.0, 0.0, 0.0, eos, a, b, c]


def toy_src(ids: list[int], lengths: list[int] | None = None):
    """Sources whose first token is the sentence id, padded, ending in eos."""
    lengths = lengths or [2] * len(ids)
    s = max(lengths)
    src = torch.full((len(ids), s), PAD_ID, dtype=torch.long)
    for r, (i, n) in enumerate(zip(ids, lengths, strict=True)):
        src[r, : n - 1] = i + 7
        src[r, n - 1] = EOS_ID
    return src, torch.tensor(lengths)


def lp(n: int, alpha: float) -> float:
    return ((5 + n) / 6) ** alpha


# ---- hand-set cases ------------------------------------------------------------------------


def late_table(sid, prefix):
    """eos first is best by log-prob; "a a a a" + eos wins once normalized with alpha = 1."""
    return {
        (): dist(0.45, 0.35, 0.2),
        (A,): dist(0.002, 0.995, 0.003),
        (A, A): dist(0.002, 0.995, 0.003),
        (A, A, A): dist(0.002, 0.995, 0.003),
        (A, A, A, A): dist(0.995, 0.002, 0.003),
    }.get(prefix, dist(0.9, 0.06, 0.04))


def test_length_penalty_searches_on_after_the_best_hypothesis_ended():
    """The exact rule (the default is early: see test_early_stop_trades_exactness_for_steps)."""
    model = ToyDecoder(late_table)
    src, lens = toy_src([0])
    aaaa = math.log(0.35) + 4 * math.log(0.995)
    empty = math.log(0.45)
    for nbest in (1, 2):
        opts = ResolvedOptions(beam_size=2, length_penalty=1.0, nbest=nbest, stop="exact")
        (hyps,) = beam_search(model, src, lens, opts)
        assert [h.tokens for h in hyps] == [[A, A, A, A], []][:nbest]
        assert hyps[0].log_prob == pytest.approx(aaaa, rel=1e-6)
        assert hyps[0].score == pytest.approx(aaaa / lp(5, 1.0), rel=1e-6)
        assert hyps[-1].score == pytest.approx([aaaa / lp(5, 1.0), empty][nbest - 1], rel=1e-6)
    # After step 1 the finished "" beats the live "a" by raw log-prob and even with "a"
    # normalized at its current length; only the bound over all future lengths searches on.
    assert math.log(0.35) / lp(2, 1.0) < empty < aaaa / lp(5, 1.0)
    # Without a length penalty "" wins and the search stops right after the first step.
    model.steps.clear()
    (hyps,) = beam_search(
        model, src, lens, ResolvedOptions(beam_size=2, length_penalty=0.0, nbest=1)
    )
    assert [h.tokens for h in hyps] == [[]] and hyps[0].score == pytest.approx(empty, rel=1e-6)
    assert len(model.steps) == 1
    # Greedy stops at eos.
    assert greedy_search(model, src, lens)[0].tokens == []


def test_early_stop_trades_exactness_for_steps():
    """stop="early" ends where the exact rule searches on, and equals it without a penalty."""
    model = ToyDecoder(late_table)
    src, lens = toy_src([0])
    (hyps,) = beam_search(
        model, src, lens, ResolvedOptions(beam_size=2, length_penalty=1.0, stop="early")
    )
    assert [h.tokens for h in hyps] == [[]]  # "a a a a" would have won
    assert len(model.steps) == 1
    model.steps.clear()
    beam_search(model, src, lens, ResolvedOptions(beam_size=2, length_penalty=1.0, stop="exact"))
    assert len(model.steps) == 5
    model.steps.clear()
    beam_search(model, src, lens, ResolvedOptions(beam_size=2, length_penalty=1.0))
    assert len(model.steps) == 1  # early by default
    for stop in ("exact", "early"):
        (hyps,) = beam_search(
            model, src, lens, ResolvedOptions(beam_size=2, length_penalty=0.0, stop=stop)
        )
        assert [h.tokens for h in hyps] == [[]]
    with pytest.raises(ValueError, match="stop must be"):
        beam_search(model, src, lens, ResolvedOptions(beam_size=2, stop="soon"))


def nbest_table(sid, prefix):
    return {
        (): dist(0.1, 0.6, 0.3),
        (A,): dist(0.5, 0.1, 0.4),
        (B,): dist(0.7, 0.25, 0.05),
        (A, B): dist(0.8, 0.15, 0.05),
        (A, A): dist(0.3, 0.3, 0.4),
    }.get(prefix, dist(0.6, 0.25, 0.15))


def test_exact_nbest_and_scores_beam_2():
    model = ToyDecoder(nbest_table)
    src, lens = toy_src([0])
    (hyps,) = beam_search(
        model, src, lens, ResolvedOptions(beam_size=2, length_penalty=0.0, nbest=2)
    )
    # step 1: a .6, b .3, eos .1 -> no eos in the top 2; beam {a, b}
    # step 2: a-eos .30, a-b .24, b-eos .21, b-a .075, a-a .06 -> a-eos finished (top 2);
    #         b-eos is third, so not finished; beam {a-b, b-a}
    # step 3: a-b-eos .192, b-a-eos .045, a-b-a .036 -> both eos finished; best live .036 < .192
    assert [h.tokens for h in hyps] == [[A], [A, B]]
    assert [h.log_prob for h in hyps] == pytest.approx([math.log(0.3), math.log(0.192)])
    assert [h.score for h in hyps] == pytest.approx([math.log(0.3), math.log(0.192)])
    (alpha_hyps,) = beam_search(
        model, src, lens, ResolvedOptions(beam_size=2, length_penalty=2.0, nbest=2)
    )
    assert [h.score for h in alpha_hyps] == pytest.approx(
        sorted([math.log(0.3) / lp(2, 2.0), math.log(0.192) / lp(3, 2.0)], reverse=True)
    )


def test_min_len_forbids_eos_and_max_len_forces_it():
    model = ToyDecoder(lambda sid, p: dist(0.97, 0.02, 0.01))
    src, lens = toy_src([0])
    for search in (greedy_search, lambda *a: beam_search(*a)[0][0]):
        out = search(model, src, lens, ResolvedOptions(beam_size=3, min_len=3))
        h = out[0] if isinstance(out, list) else out
        assert h.tokens == [A, A, A]
        assert h.log_prob == pytest.approx(3 * math.log(0.02) + math.log(0.97), rel=1e-6)
    model = ToyDecoder(lambda sid, p: dist(0.01, 0.98, 0.01))
    src, lens = toy_src([0], [5])  # 4 source tokens: max = floor(0.5 * 4 + 1) = 3
    h = greedy_search(model, src, lens, ResolvedOptions(max_len_a=0.5, max_len_b=1))[0]
    assert h.tokens == [A, A, A]
    assert h.log_prob == pytest.approx(3 * math.log(0.98) + math.log(0.01), rel=1e-6)
    (hyps,) = beam_search(
        model, src, lens, ResolvedOptions(beam_size=2, max_len_a=0.5, max_len_b=1, nbest=2)
    )
    assert all(len(h.tokens) <= 3 for h in hyps) and hyps[0].tokens == [A, A, A]
    # min_len beyond the maximum length: forced eos still ends the hypothesis
    h = greedy_search(model, src, lens, ResolvedOptions(max_len_a=0.5, max_len_b=1, min_len=10))[0]
    assert h.tokens == [A, A, A] and h.log_prob > NEG_INF


def test_max_positions_caps_length():
    model = ToyDecoder(lambda sid, p: dist(0.01, 0.98, 0.01), max_positions=4)
    src, lens = toy_src([0], [9])
    assert len(greedy_search(model, src, lens)[0].tokens) == 3
    assert len(beam_search(model, src, lens, ResolvedOptions(beam_size=2))[0][0].tokens) == 3


@pytest.mark.parametrize(("a", "b"), [(math.inf, 10), (1e300, 10), (1.2, 1e30), (1e18, 1e18)])
def test_huge_length_limits_cap_at_the_model_instead_of_wrapping(a, b):
    # floor(a * n + b) in int64 wrapped to INT64_MIN, and the floor of 1 cut output to 1 token
    model = ToyDecoder(lambda sid, p: dist(0.01, 0.98, 0.01), max_positions=6)
    src, lens = toy_src([0], [3])
    assert max_lengths(model, lens, a, b).tolist() == [5]
    opts = ResolvedOptions(beam_size=2, max_len_a=a, max_len_b=b)
    assert len(greedy_search(model, src, lens, opts)[0].tokens) == 5
    (hyps,) = beam_search(model, src, lens, opts)
    assert len(hyps[0].tokens) == 5
    model.max_positions = 0  # no position limit (Seq2Seq): a finite cap all the same
    assert max_lengths(model, lens, a, b).tolist() == [NO_LENGTH_CAP]
    assert opts.output_limit(3, None) == NO_LENGTH_CAP == opts.output_limit(3, 0)


def test_the_output_limit_floors_and_keeps_one_token():
    limits = ResolvedOptions(max_len_a=1.2, max_len_b=10)
    assert [limits.output_limit(n, 512) for n in (0, 1, 9, 10, 500)] == [10, 11, 20, 22, 511]
    assert ResolvedOptions(max_len_a=0.5, max_len_b=0).output_limit(1, 512) == 1  # not 0


def test_attention_follows_each_hypothesis():
    model = ToyDecoder(nbest_table)
    src, lens = toy_src([0, 1], [9, 8])
    hyps = beam_search(model, src, lens, ResolvedOptions(beam_size=2, nbest=2, with_attention=True))
    for sent, n in zip(hyps, [9, 8], strict=True):
        for h in sent:
            assert h.attention.shape == (len(h.tokens) + 1, 1, 1, n)
            prefix = [0] + h.tokens  # attention row t is one-hot on (last token before t) % S
            assert [int(a[0, 0].argmax()) for a in h.attention] == [p % 9 for p in prefix]
    g = greedy_search(model, src, lens, ResolvedOptions(with_attention=True))[0]
    assert g.attention.shape == (len(g.tokens) + 1, 1, 1, 9)


# ---- the stopping rule against a search that never stops early -----------------------------


def random_table(seed: int):
    def table(sid, prefix):
        r = random.Random(f"{seed}-{sid}-{prefix}")
        w = [r.random() ** 2 for _ in range(4)]
        w[0] *= 0.2 + 0.6 * len(prefix)  # eos grows likelier with length
        total = sum(w)
        return [0.0, 0.0, 0.0] + [x / total for x in w]

    return table


def reference_beam(model, sid, n_src, k, alpha, a, b, min_len, nbest):
    """Per sentence, no early stop: run to the maximum length, collect every finished one."""
    max_len = max(1, math.floor(a * (n_src - 1) + b))
    beams, finished = [((), 0.0)], []
    for t in range(max_len + 1):
        cands = []
        for bi, (p, s) in enumerate(beams):
            lps = model.log_probs(sid, p).tolist()
            for v, x in enumerate(lps):
                if (t < min_len and v == EOS_ID and t != max_len) or (t == max_len and v != EOS_ID):
                    x = NEG_INF
                cands.append((s + x, bi, v, p))
        cands.sort(key=lambda c: -c[0])
        top = cands[: 2 * k]
        for s, _, v, p in top[:k]:
            if v == EOS_ID and s > NEG_INF:
                finished.append((list(p), s / lp(len(p) + 1, alpha), s))
        beams = [(p + (v,), s) for s, _, v, p in top if not (v == EOS_ID and s > NEG_INF)][:k]
        beams += [((), NEG_INF)] * (k - len(beams))
    finished.sort(key=lambda f: -f[1])
    return finished[:nbest]


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    k=st.integers(1, 4),
    alpha=st.sampled_from([0.0, 0.6, 1.0, 2.0, -0.5]),
    min_len=st.integers(0, 3),
    lengths=st.lists(st.integers(2, 6), min_size=1, max_size=4),
    data=st.data(),
)
def test_beam_equals_never_stopping_reference(seed, k, alpha, min_len, lengths, data):
    nbest = data.draw(st.integers(1, k))
    model = ToyDecoder(random_table(seed))
    src, lens = toy_src(list(range(len(lengths))), lengths)
    opts = ResolvedOptions(
        beam_size=k, length_penalty=alpha, max_len_a=1.0, max_len_b=2, min_len=min_len,
        nbest=nbest, stop="exact",  # the default (early) is not exact under a length penalty
    )  # fmt: skip
    got = beam_search(model, src, lens, opts)
    for i, n in enumerate(lengths):
        ref = reference_beam(model, i + 7, n, k, alpha, 1.0, 2, min_len, nbest)
        assert [h.tokens for h in got[i]] == [r[0] for r in ref]
        assert [h.score for h in got[i]] == pytest.approx([r[1] for r in ref], rel=1e-5)
        assert [h.log_prob for h in got[i]] == pytest.approx([r[2] for r in ref], rel=1e-5)
    # one at a time gives the same
    for i in range(len(lengths)):
        one = beam_search(model, src[i : i + 1, : lengths[i]], lens[i : i + 1], opts)
        assert [(h.tokens, h.score) for h in one[0]] == [(h.tokens, h.score) for h in got[i]]


def test_finished_sentences_leave_the_batch():
    # sentence 0 ends at once, sentence 1 runs to its maximum length
    model = ToyDecoder(lambda sid, p: dist(0.99, 0.01, 0.0) if sid == 7 else dist(0.0, 0.9, 0.1))
    src, lens = toy_src([0, 1])
    greedy_search(model, src, lens, ResolvedOptions(max_len_a=0, max_len_b=5))
    assert model.steps == [2, 1, 1, 1, 1, 1]
    model.steps.clear()
    beam_search(
        model, src, lens, ResolvedOptions(beam_size=3, length_penalty=0.0, max_len_a=0, max_len_b=5)
    )
    assert model.steps == [2, 3, 3, 3, 3, 3]  # step 0: one row per sentence, then k each
    # eos has probability 0 for sentence 1, yet forced eos still gives it a hypothesis
    hyps = beam_search(model, src, lens, ResolvedOptions(beam_size=3, max_len_a=0, max_len_b=5))
    assert hyps[1][0].tokens == [A] * 5 and hyps[1][0].log_prob > NEG_INF


# ---- real models: beam 1 == greedy, batched == one at a time, cached == uncached --------------


class Uncached:
    """The same model behind the contract, recomputing the whole prefix every step."""

    def __init__(self, model) -> None:
        self.model, self.vocab, self.max_positions = model, model.vocab, model.max_positions

    def encode(self, src, src_lengths):
        return (src, src_lengths)

    def init_state(self, enc):
        return torch.empty(enc[0].size(0), 0, dtype=torch.long)

    def decode_step(self, prev, enc, prefix, need_attn=False, normalize=True):
        prefix = torch.cat([prefix, prev.unsqueeze(1)], 1)  # (B, t)
        logits = self.model(enc[0], enc[1], prefix)[:, -1].float()  # (B, V)
        return torch.log_softmax(logits, -1) if normalize else logits, prefix, None

    def reorder_encoder_out(self, enc, order):
        return (enc[0].index_select(0, order), enc[1].index_select(0, order))

    def repeat_encoder_out(self, enc, k):
        return tuple(x.repeat_interleave(k, 0) for x in enc)

    def reorder_state(self, prefix, order):
        return prefix.index_select(0, order)


def tiny_model(kind: str, seed: int = 0):
    """A random tiny model with peaky output distributions (no near-ties between candidates)."""
    torch.manual_seed(seed)
    sizes = {
        "transformer": dict(d_model=32, heads=4, ff_dim=64),
        "seq2seq": dict(embed_dim=24, hidden_size=32),
    }[kind]
    cfg = model_config(
        type=kind, **sizes, encoder_layers=2, decoder_layers=2, dropout=0.0, max_positions=64,
    )  # fmt: skip
    model = build(cfg, VocabInfo(40, 40)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "embed" in name or "output" in name:
                p.mul_(6.0)
    return model


def random_batch(seed: int, n: int = 6):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, 12, (n,), generator=g)
    src = torch.full((n, int(lengths.max())), PAD_ID, dtype=torch.long)
    for i, m in enumerate(lengths.tolist()):
        src[i, : m - 1] = torch.randint(4, 40, (m - 1,), generator=g)
        src[i, m - 1] = EOS_ID
    return src, lengths


@pytest.mark.parametrize("kind", ["transformer", "seq2seq"])
def test_real_model_beam1_batched_cached(kind):
    model = tiny_model(kind)
    src, lens = random_batch(1)
    kw = dict(max_len_a=1.0, max_len_b=4)
    greedy = greedy_search(model, src, lens, ResolvedOptions(length_penalty=0.0, **kw))
    beam1 = beam_search(model, src, lens, ResolvedOptions(beam_size=1, length_penalty=0.0, **kw))
    assert [h.tokens for h in greedy] == [b[0].tokens for b in beam1]
    assert [h.log_prob for h in greedy] == [b[0].log_prob for b in beam1]
    assert any(len(h.tokens) > 2 for h in greedy)  # the test is not vacuous

    beam = beam_search(
        model, src, lens, ResolvedOptions(beam_size=4, nbest=3, with_attention=True, **kw)
    )
    for i, m in enumerate(lens.tolist()):
        one = beam_search(
            model, src[i : i + 1, :m], lens[i : i + 1], ResolvedOptions(beam_size=4, nbest=3, **kw)
        )
        assert [h.tokens for h in one[0]] == [h.tokens for h in beam[i]]
        assert [h.score for h in one[0]] == pytest.approx([h.score for h in beam[i]], abs=1e-4)
        g1 = greedy_search(model, src[i : i + 1, :m], lens[i : i + 1], ResolvedOptions(**kw))[0]
        assert g1.tokens == greedy[i].tokens
        for h in beam[i]:
            assert h.attention.shape[0] == len(h.tokens) + 1 and h.attention.shape[-1] == m
            assert torch.allclose(h.attention.sum(-1), torch.ones(()), atol=1e-4)

    uncached = beam_search(Uncached(model), src, lens, ResolvedOptions(beam_size=4, nbest=3, **kw))
    for a, b in zip(beam, uncached, strict=True):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-4)
    g_unc = greedy_search(Uncached(model), src, lens, ResolvedOptions(length_penalty=0.0, **kw))
    assert [h.tokens for h in g_unc] == [h.tokens for h in greedy]


@pytest.mark.parametrize("kind", ["transformer", "seq2seq"])
def test_greedy_without_scores_picks_the_same_tokens(kind):
    """scores=False decodes from raw logits: the same tokens (min_len and forced eos too),
    NaN scores."""
    model = tiny_model(kind)
    src, lens = random_batch(2, n=8)
    for kw in (dict(max_len_a=1.0, max_len_b=4), dict(max_len_a=0.5, max_len_b=1, min_len=2)):
        scored = greedy_search(model, src, lens, ResolvedOptions(**kw))
        bare = greedy_search(model, src, lens, ResolvedOptions(scores=False, **kw))
        assert [h.tokens for h in bare] == [h.tokens for h in scored]
        assert all(math.isnan(h.score) and math.isnan(h.log_prob) for h in bare)
        assert all(math.isfinite(h.log_prob) for h in scored)
    assert any(len(h.tokens) > 2 for h in scored)  # not vacuous


def test_greedy_without_scores_ignores_the_normalization():
    """Logits shifted by a different constant per row and step give the same choices,
    eos forbidden before min_len and forced at the maximum length."""
    model = ToyDecoder(lambda sid, p: dist(0.01, 0.98, 0.01) if sid == 8 else dist(0.6, 0.3, 0.1))
    src, lens = toy_src([0, 1], [5, 5])
    for kw in (dict(), dict(min_len=2), dict(max_len_a=0.5, max_len_b=1)):
        scored = greedy_search(model, src, lens, ResolvedOptions(**kw))
        bare = greedy_search(model, src, lens, ResolvedOptions(scores=False, **kw))
        assert [h.tokens for h in bare] == [h.tokens for h in scored]
    assert [h.tokens for h in scored] == [[], [A, A, A]]


def test_length_penalty_formula():
    assert gnmt_length_penalty(1, 1.0) == 1.0
    assert gnmt_length_penalty(7, 0.6) == pytest.approx(2**0.6)
    assert gnmt_length_penalty(9, 0.0) == 1.0


def test_pad_and_bos_are_never_produced():
    model = ToyDecoder(lambda sid, p: [0.4, 0.0, 0.4, 0.15, 0.05, 0.0, 0.0])
    src, lens = toy_src([0])
    assert greedy_search(model, src, lens).pop().tokens == []
    (hyps,) = beam_search(
        model, src, lens, ResolvedOptions(beam_size=2, nbest=2, length_penalty=0.0)
    )
    assert [h.tokens for h in hyps] == [[], [A]]


# ---- the parts: stopping rules and the active-row bookkeeping ------------------------------


def beam_rows(best_live: list[float], worst_kept: list[float], max_len: list[int], alpha: float):
    """BeamRows with one live hypothesis per sentence and one finished score each."""
    n = len(best_live)
    return BeamRows(
        origin=torch.arange(n),
        max_len=torch.tensor(max_len),
        scores=torch.tensor(best_live).unsqueeze(1),
        lp_max=gnmt_length_penalty(torch.tensor(max_len) + 1, alpha),
        top_fin=torch.tensor(worst_kept).unsqueeze(1),
        retired=torch.zeros(n, dtype=torch.bool),
        next_beam=torch.zeros(n, 1, dtype=torch.long),
        next_tok=torch.zeros(n, 1, dtype=torch.long),
    )


def test_stop_rules_bound_the_best_live_hypothesis():
    alpha, t = 1.0, 1  # after 1 token; the next length is 2, the longest 10 + 1
    # live -2.0: ended next it scores -2 / lp(2); at its longest -2 / lp(11), its best
    assert -2.0 / lp(2, alpha) < -1.7 < -1.0 < -0.8 < -2.0 / lp(11, alpha) < -0.74
    rows = beam_rows([-2.0] * 3, [-1.7, -1.0, -0.8], [10] * 3, alpha)
    assert ExactStop().done(rows, t, alpha).tolist() == [False, False, False]
    assert EarlyStop().done(rows, t, alpha).tolist() == [True, True, True]
    rows = beam_rows([-2.0], [-0.74], [10], alpha)
    assert ExactStop().done(rows, t, alpha).tolist() == [True]
    # without a length penalty both rules compare raw log-probs
    rows = beam_rows([-2.0, -2.0], [-2.1, -1.9], [10, 10], 0.0)
    for rule in (ExactStop(), EarlyStop()):
        assert rule.done(rows, t, 0.0).tolist() == [False, True]


def test_stop_rule_factory():
    assert isinstance(stop_rule("exact"), ExactStop) and stop_rule("exact").name == "exact"
    assert isinstance(stop_rule("early"), EarlyStop) and stop_rule("early").name == "early"
    with pytest.raises(
        NmtError, match=r"stop must be 'exact', 'early' or 'transformers', got 'soon'"
    ):
        stop_rule("soon")
    # a rule object is accepted as well as its name
    model = ToyDecoder(late_table)
    src, lens = toy_src([0])
    by_name = beam_search(model, src, lens, ResolvedOptions(beam_size=2, stop="early"))
    by_rule = beam_search(model, src, lens, ResolvedOptions(beam_size=2), stop=EarlyStop())
    assert [h.tokens for h in by_name[0]] == [h.tokens for h in by_rule[0]] == [[]]


def test_active_rows_select_keeps_rows_of_every_tensor_field():
    rows = GreedyRows(
        origin=torch.arange(4),
        max_len=torch.tensor([5, 2, 7, 3]),
        scores=torch.tensor([-1.0, -2.0, -3.0, -4.0]),
        history=torch.arange(8).view(4, 2),
        alive=torch.tensor([True, False, True, True]),
    )
    assert rows.first_max == 2 and rows.attn is None
    kept = rows.select(torch.tensor([3, 0, 2]))
    assert isinstance(kept, GreedyRows)
    assert kept.origin.tolist() == [3, 0, 2]
    assert kept.max_len.tolist() == [3, 5, 7] and kept.first_max == 3  # recomputed
    assert kept.scores.tolist() == [-4.0, -1.0, -3.0]
    assert kept.history.tolist() == [[6, 7], [0, 1], [4, 5]]
    assert kept.alive.tolist() == [True, True, True] and kept.attn is None
    assert rows.origin.tolist() == [0, 1, 2, 3]  # the original is unchanged
    assert kept.at_max(2, 1) is None  # no row can be at its maximum before first_max
    assert kept.at_max(3, 2).tolist() == [True, True, False, False, False, False]
