"""`no_repeat_ngram_size`: the token that would write an n-gram a hypothesis already holds is
never chosen, by every search (greedy, beam, sampling, constrained), batched or not, and the
option reaches the command line, the config and its range check."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_search import A, B, C, ToyDecoder, dist, random_batch, tiny_model, toy_src

from nmt.config import DecodingConfig
from nmt.decode.options import DecodeOptions, OptionError, ResolvedOptions, Sampling
from nmt.decode.search.beam import beam_search
from nmt.decode.search.constrained import constrained_beam_search
from nmt.decode.search.greedy import greedy_search, sample_search
from nmt.decode.search.rows import ban_repeats


def banned_by_definition(history: list[int], n: int) -> set[int]:
    """The tokens that would complete an n-gram `history` already holds, from the definition."""
    if n == 0 or len(history) < n:
        return set()
    grams = {tuple(history[i : i + n]) for i in range(len(history) - n + 1)}
    suffix = tuple(history[len(history) - n + 1 :]) if n > 1 else ()
    return {g[-1] for g in grams if g[:-1] == suffix}


def repeats(tokens: list, n: int) -> bool:
    """Whether some n-gram occurs twice in `tokens`."""
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(grams) != len(set(grams))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 5), min_size=6, max_size=6), min_size=1, max_size=4),
    st.integers(0, 6),
    st.integers(0, 6),
)
def test_banned_tokens_are_exactly_those_that_complete_a_written_ngram(rows, t, n):
    history = torch.tensor([r[:t] for r in rows], dtype=torch.long).view(len(rows), t)
    lp = torch.zeros(len(rows), 6)
    ban_repeats(lp, history, n)
    for r, row in enumerate(rows):
        got = {v for v in range(6) if lp[r, v] == -math.inf}
        assert got == banned_by_definition(row[:t], n)


def loop_table(sid, prefix):
    """A model caught in a loop: a -> b -> a -> b ... is always likeliest; c then eos is the way
    out, and eos directly after a is less likely than c."""
    last = prefix[-1] if prefix else None
    if last is None:
        return dist(0.04, 0.9, 0.03, 0.03)
    if last == A:
        return dist(0.04, 0.0, 0.9, 0.06)
    if last == B:
        return dist(0.06, 0.9, 0.0, 0.04)
    return dist(0.9, 0.05, 0.05, 0.0)


def test_a_loop_is_left_where_it_would_repeat_a_bigram():
    model = ToyDecoder(loop_table)
    src, lens = toy_src([0], [8])  # 7 source tokens: at most floor(1.2 * 7 + 10) = 18 out
    plain = greedy_search(model, src, lens, ResolvedOptions())[0]
    assert plain.tokens[:6] == [A, B, A, B, A, B] and len(plain.tokens) == 18  # the loop runs on
    opts = ResolvedOptions(no_repeat_ngram_size=2)
    h = greedy_search(model, src, lens, opts)[0]
    assert h.tokens == [A, B, A, C]  # a b a, then b would write "a b" again: c, then eos
    want = math.log(0.9) * 3 + math.log(0.06) + math.log(0.9)  # the ban does not renormalize
    assert h.log_prob == pytest.approx(want, rel=1e-6)
    (beam,) = beam_search(model, src, lens, ResolvedOptions(beam_size=3, no_repeat_ngram_size=2))
    assert beam[0].tokens == [A, B, A, C]
    h3 = greedy_search(model, src, lens, ResolvedOptions(no_repeat_ngram_size=3))[0]
    assert h3.tokens == [A, B, A, B]  # then a would write "a b a" again, and eos beats c


@pytest.mark.parametrize("kind", ["transformer", "seq2seq"])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_no_search_repeats_an_ngram_and_batching_changes_nothing(kind, n):
    model = tiny_model(kind)
    src, lens = random_batch(3, n=8)
    kw = dict(max_len_a=2.0, max_len_b=10, no_repeat_ngram_size=n)
    plain = greedy_search(model, src, lens, ResolvedOptions(max_len_a=2.0, max_len_b=10))
    assert any(repeats(h.tokens, n) for h in plain)  # the random model repeats itself
    greedy = greedy_search(model, src, lens, ResolvedOptions(**kw))
    beam = beam_search(model, src, lens, ResolvedOptions(beam_size=4, nbest=4, **kw))
    keys = torch.arange(src.size(0))
    sampled = sample_search(
        model, src, lens, keys, ResolvedOptions(nbest=3, sampling=Sampling(seed=1), **kw)
    )
    constrained = constrained_beam_search(
        model, src, lens, [[[7, 8]] for _ in range(8)], ResolvedOptions(beam_size=4, **kw)
    )
    outputs = [h.tokens for h in greedy] + [h.tokens for sent in beam for h in sent]
    outputs += [h.tokens for sent in sampled for h in sent]
    outputs += [h.tokens for sent in constrained for h in sent]
    assert outputs and not any(repeats(t, n) for t in outputs)
    for i, m in enumerate(lens.tolist()):
        one = beam_search(
            model, src[i : i + 1, :m], lens[i : i + 1], ResolvedOptions(beam_size=4, nbest=4, **kw)
        )
        assert [h.tokens for h in one[0]] == [h.tokens for h in beam[i]]
        g1 = greedy_search(model, src[i : i + 1, :m], lens[i : i + 1], ResolvedOptions(**kw))[0]
        assert g1.tokens == greedy[i].tokens


def test_the_option_defaults_to_off_and_is_range_checked():
    assert DecodingConfig().no_repeat_ngram_size == 0
    assert ResolvedOptions().no_repeat_ngram_size == 0
    resolved = DecodeOptions().resolve(DecodingConfig(no_repeat_ngram_size=4))
    assert resolved.no_repeat_ngram_size == 4  # a model's default applies
    assert DecodeOptions(no_repeat_ngram_size=0).resolve(DecodingConfig(no_repeat_ngram_size=4)) \
        .no_repeat_ngram_size == 0  # fmt: skip
    with pytest.raises(OptionError) as e:
        DecodeOptions(no_repeat_ngram_size=-1).resolve(DecodingConfig())
    assert e.value.render(lambda f: f"--{f.replace('_', '-')}") == (
        "--no-repeat-ngram-size must be >= 0, got -1"
    )


def test_the_command_line_flag_reaches_the_search(tmp_path):
    """`nmt translate --no-repeat-ngram-size 1`: no piece twice in a line's output, where the
    same random model without it repeats pieces; a negative size is a one-line error."""
    import json

    from test_translate import build_tiny_model_dir, run_cli

    model = build_tiny_model_dir(tmp_path)
    data = b"a man in a blue shirt .\nzwei kinder spielen im park .\n"
    args = ("translate", "-m", str(model), "--format", "jsonl", "-q", "--max-len-b", "20")

    def tokens(*flags: str) -> list[list[str]]:
        r = run_cli(*args, *flags, input=data)
        assert r.exit_code == 0, r.output
        return [json.loads(x)["hypotheses"][0]["tokens"] for x in r.stdout.splitlines()]

    assert any(len(t) > len(set(t)) for t in tokens())
    banned = tokens("--no-repeat-ngram-size", "1")
    assert len(banned) == 2 and all(len(t) == len(set(t)) for t in banned)
    r = run_cli(*args, "--no-repeat-ngram-size", "-1", input=data)
    assert r.exit_code == 2
    assert r.stderr.strip() == "error: --no-repeat-ngram-size must be >= 0, got -1"
