"""Sampling (`nmt translate --sampling`): draws follow the model's distribution as tempered and cut
(top-k, top-p), top-k 1 is greedy, scores are the model's own log-probabilities, and a line's
samples depend on (seed, line number) only: not on batching, workers, buffers or other lines."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_search import random_batch, tiny_model
from test_translate import build_tiny_model_dir, synthetic_lines

from nmt.data.vocab import BOS_ID
from nmt.decode.options import ResolvedOptions, Sampling
from nmt.decode.search.greedy import greedy_search, sample_search
from nmt.decode.search.sampling import draw, uniforms
from nmt.dirs import ModelDir
from nmt.engines.translator import Translator
from nmt.errors import NmtError

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A random tiny Transformer model directory (its draws are diverse: nothing is peaked)."""
    return build_tiny_model_dir(tmp_path_factory.mktemp("sampling"))


def _frequencies(lp: torch.Tensor, sampling: Sampling, n: int = 40_000) -> torch.Tensor:
    """Empirical distribution of n draws from one row of log-probs (V,)."""
    rows = lp.unsqueeze(0).expand(n, -1).contiguous()
    tok = draw(sampling, rows, uniforms(sampling.seed, torch.arange(n), 0))
    return torch.bincount(tok, minlength=lp.numel()).double() / n


def test_draws_follow_the_tempered_and_cut_distribution():
    p = torch.tensor([0.0, 0.05, 0.1, 0.15, 0.3, 0.4])  # one impossible token
    lp = p.log()
    got = _frequencies(lp, Sampling(seed=3))
    assert got[0] == 0 and torch.allclose(got, p.double(), atol=0.01)
    tempered = p.double() ** 2 / (p.double() ** 2).sum()  # temperature 0.5: p^(1/T)
    assert torch.allclose(_frequencies(lp, Sampling(temperature=0.5, seed=4)), tempered, atol=0.01)
    top2 = torch.tensor([0, 0, 0, 0, 0.3, 0.4], dtype=torch.float64) / 0.7
    assert torch.allclose(_frequencies(lp, Sampling(top_k=2, seed=5)), top2, atol=0.01)
    # top-p 0.65: 0.4 alone is short of it, 0.4 + 0.3 reaches it: the same two tokens.
    assert torch.allclose(_frequencies(lp, Sampling(top_p=0.65, seed=6)), top2, atol=0.01)
    # top-k 3, renormalized, then top-p 0.5: 0.4 / 0.85 alone is short, + 0.3 reaches it.
    both = _frequencies(lp, Sampling(top_k=3, top_p=0.5, seed=7))
    assert torch.allclose(both, top2, atol=0.01)
    assert _frequencies(lp, Sampling(top_p=0.1, seed=8))[5] == 1.0  # the best token alone


def test_nucleus_without_a_full_sort_draws_what_a_full_sort_draws():
    """Rows from peaked (nucleus within 8 tokens) to flat (within 64, or beyond): the same
    tokens as the textbook method (sort the row, keep the prefix reaching top_p, invert its CDF)."""
    g = torch.Generator().manual_seed(0)
    scale = torch.tensor([8.0, 4.0, 2.0, 1.0, 0.3, 0.05]).repeat_interleave(50)  # (300,)
    lp = (torch.randn(300, 500, generator=g) * scale.unsqueeze(1)).log_softmax(1)
    u = uniforms(9, torch.arange(300), 0)
    for top_p, temperature in ((0.9, 1.0), (0.5, 0.7), (0.99, 1.5)):
        sampling = Sampling(temperature=temperature, top_p=top_p)
        values, idx = (lp / temperature).sort(1, descending=True)
        probs = torch.softmax(values, 1).double()
        probs = probs * ((probs.cumsum(1) - probs) < top_p)
        cdf = probs.cumsum(1)
        pos = torch.searchsorted(cdf, (u * cdf[:, -1]).unsqueeze(1), right=True)
        expected = idx.gather(1, pos.clamp(max=499)).squeeze(1)
        assert torch.equal(draw(sampling, lp, u), expected)
    sizes = ((probs > 0).sum(1)).tolist()  # the last case needs every rung of the ladder
    assert min(sizes) <= 8 and any(8 < n <= 64 for n in sizes) and max(sizes) > 64


def test_uniforms_are_a_function_of_seed_key_and_step():
    keys = torch.arange(100_000)
    u = uniforms(1, keys, 0)
    assert bool(((u > 0) & (u < 1)).all()) and abs(float(u.mean()) - 0.5) < 0.005
    assert u.unique().numel() == u.numel()  # distinct keys, distinct draws
    assert torch.equal(uniforms(1, keys[5:9], 0), u[5:9])  # whatever else is in the batch
    assert torch.equal(uniforms(1, keys, 0, torch.zeros_like(keys)), u)  # sample 0 = a single one
    later = uniforms(1, keys, 0, torch.ones_like(keys))
    assert abs(float(torch.corrcoef(torch.stack([u, later]))[0, 1])) < 0.02
    assert not torch.equal(uniforms(2, keys, 0), u) and not torch.equal(uniforms(1, keys, 1), u)
    # Neighbouring keys and steps are not correlated.
    assert abs(float(torch.corrcoef(torch.stack([u[:-1], u[1:]]))[0, 1])) < 0.02
    assert abs(float(torch.corrcoef(torch.stack([u, uniforms(1, keys, 1)]))[0, 1])) < 0.02


@pytest.mark.parametrize("kind", ["transformer", "seq2seq"])
def test_top_k_1_is_greedy_and_scores_are_the_models_log_probs(kind):
    model = tiny_model(kind)
    src, lens = random_batch(3, n=8)
    kw = dict(max_len_a=1.0, max_len_b=4)
    greedy = greedy_search(model, src, lens, ResolvedOptions(**kw))
    one = sample_search(
        model, src, lens, torch.arange(8), ResolvedOptions(sampling=Sampling(top_k=1), **kw)
    )
    assert [h.tokens for h in greedy] == [s[0].tokens for s in one]
    samples = sample_search(
        model, src, lens, torch.arange(8), ResolvedOptions(sampling=Sampling(seed=1), nbest=3, **kw)
    )
    assert any(s[0].tokens != g.tokens for s, g in zip(samples, greedy, strict=True))  # not greedy
    for i, group in enumerate(samples):
        assert [h.score for h in group] == sorted((h.score for h in group), reverse=True)
        for h in group:  # log_prob is the teacher-forced sum over tokens + eos (forced or not)
            m = int(lens[i])
            tgt = torch.tensor([[BOS_ID, *h.tokens]])
            with torch.no_grad():
                logits = model(src[i : i + 1, :m], lens[i : i + 1], tgt)
            lp = torch.log_softmax(logits.float(), -1)[0]
            gold = h.tokens + [3]
            forced = len(h.tokens) == int(1.0 * (m - 1) + 4)  # at the maximum length
            total = sum(float(lp[t, g]) for t, g in enumerate(gold[:-1]))
            total += max(float(lp[len(gold) - 1, 3]), -1000.0) if forced else float(lp[-1, 3])
            assert h.log_prob == pytest.approx(total, abs=1e-3)


def test_samples_do_not_depend_on_batching_or_other_lines():
    model = tiny_model("transformer", seed=1)
    src, lens = random_batch(4, n=10)
    kw = dict(max_len_a=1.5, max_len_b=5)
    sampling = Sampling(temperature=1.3, seed=11)
    keys = torch.arange(100, 110)
    whole = sample_search(model, src, lens, keys, ResolvedOptions(sampling=sampling, nbest=2, **kw))
    for i in (0, 4, 9):  # alone, with its own key
        m = int(lens[i])
        alone = sample_search(model, src[i : i + 1, :m], lens[i : i + 1], keys[i : i + 1],
                              ResolvedOptions(sampling=sampling, nbest=2, **kw))  # fmt: skip
        assert [h.tokens for h in alone[0]] == [h.tokens for h in whole[i]]
    one_each = ResolvedOptions(sampling=sampling, **kw)
    single = sample_search(model, src, lens, keys, one_each)  # = sample 0 of each line
    assert all(s[0].tokens in [h.tokens for h in w] for s, w in zip(single, whole, strict=True))
    other = sample_search(
        model, src, lens, keys, ResolvedOptions(sampling=Sampling(temperature=1.3, seed=12), **kw)
    )
    assert any(a[0].tokens != b[0].tokens for a, b in zip(other, whole, strict=True))


@pytest.mark.slow
def test_translator_samples_are_the_same_whatever_the_batches(tiny_model_dir):
    tr = Translator.from_dir(ModelDir(tiny_model_dir), device="cpu", workers=1)
    lines = synthetic_lines(40, seed=5)
    lines[7] = ""  # an empty line stays empty
    s = Sampling(top_p=0.95, seed=2)
    base = tr.translate(lines, sampling=s, nbest=3, batch_tokens=4096)
    assert len(base) == 40 and all(len(t.hypotheses) == 3 for t in base if t.source)
    assert base[7].hypotheses[0].text == ""
    small = tr.translate(lines, sampling=s, nbest=3, batch_tokens=40)
    two = Translator.from_dir(ModelDir(tiny_model_dir), device="cpu", workers=2)
    threaded = two.translate(lines, sampling=s, nbest=3, batch_tokens=40)
    streamed = list(tr.translate_stream(lines, buffer_size=7, sampling=s, nbest=3))
    texts = [[h.text for h in t.hypotheses] for t in base]
    for other in (small, threaded, streamed):
        assert [[h.text for h in t.hypotheses] for t in other] == texts
    # A line's samples depend on its number: the same line at another number draws anew.
    shifted = tr.translate(lines[1:], sampling=s, nbest=3, first_line=2)
    assert [[h.text for h in t.hypotheses] for t in shifted] == texts[1:]
    with pytest.raises(NmtError, match="^sampling draws its own tokens"):
        tr.translate(lines, sampling=s, beam_size=4)
    with pytest.raises(NmtError, match="^nbest must be between 1 and 200 with sampling"):
        tr.translate(lines, sampling=s, nbest=201)
    for bad, message in (
        (dict(temperature=0.0), "temperature must be > 0, got 0.0"),
        (dict(top_k=-1), "top-k must be >= 0"),
        (dict(top_p=1.5), r"top-p must be in \(0, 1\], got 1.5"),
    ):
        with pytest.raises(NmtError, match=message):
            Sampling(**bad)


@pytest.mark.slow
def test_cli_sampling_writes_n_lines_per_input_and_refuses_stray_options(tiny_model_dir, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("\n".join(synthetic_lines(6, seed=9)) + "\n\n", encoding="utf-8")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}

    def nmt(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "nmt", "translate", "-m", str(tiny_model_dir),
                               str(src), "-q", *args], cwd=REPO, env=env, capture_output=True,
                              text=True)  # fmt: skip

    a = nmt("--sampling", "--nbest", "2", "--seed", "5", "--sampling-topk", "20")
    assert a.returncode == 0, a.stderr
    assert len(a.stdout.splitlines()) == 7 * 2
    again = nmt(
        "--sampling", "--nbest", "2", "--seed", "5", "--sampling-topk", "20", "--workers", "2"
    )
    assert again.stdout == a.stdout
    stray = nmt("--temperature", "0.7")
    assert stray.returncode == 2 and stray.stderr == (
        "error: --temperature, --sampling-topk, --sampling-topp and --seed need --sampling\n"
    )
    beam = nmt("--sampling", "-b", "4")  # refused before the model loads
    assert beam.returncode == 2 and beam.stderr == (
        "error: --sampling draws its own tokens: drop --beam-size / --greedy\n"
    )
    bad = nmt("--sampling", "--sampling-topp", "0")
    assert bad.returncode == 2 and bad.stderr == "error: top-p must be in (0, 1], got 0.0\n"
