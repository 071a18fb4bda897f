"""Attention: weights are a distribution over the real source positions, zero on padding;
the fused and explicit multi-head paths agree; incremental self-attention equals causal;
`nmt attention --kind` draws a Transformer's encoder and decoder self-attention."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from nmt.dirs import ModelDir
from nmt.errors import NmtError
from nmt.models.attention import (
    AdditiveAttention,
    DotAttention,
    GeneralAttention,
    MultiHeadAttention,
    dot_product_attention,
    make_rnn_attention,
    time_major_attention,
)

LENGTHS = torch.tensor([5, 3, 1, 4])


def _mask(lengths: torch.Tensor, s: int) -> torch.Tensor:
    return torch.arange(s) < lengths.unsqueeze(1)  # (B, S)


@pytest.mark.parametrize("kind", ["bahdanau", "dot", "general"])
def test_rnn_attention_is_a_distribution_over_real_positions(kind):
    torch.manual_seed(0)
    b, s, d = 4, 5, 8
    attn = make_rnn_attention(kind, d, d)
    keys, query = torch.randn(b, s, d), torch.randn(b, d)
    mask = _mask(LENGTHS, s)
    context, weights = attn(query, attn.project_keys(keys), keys, mask)
    assert weights.shape == (b, s) and context.shape == (b, d)
    torch.testing.assert_close(weights.sum(-1), torch.ones(b))
    assert (weights[~mask] == 0).all()
    assert (weights[mask] > 0).all()
    torch.testing.assert_close(context, torch.einsum("bs,bsd->bd", weights, keys))

    # Whatever sits in the padded positions cannot change the result.
    noisy = keys.clone()
    noisy[~mask] = 1e3 * torch.randn(int((~mask).sum()), d)
    context2, weights2 = attn(query, attn.project_keys(noisy), noisy, mask)
    torch.testing.assert_close(weights2, weights)
    torch.testing.assert_close(context2, context)


def test_additive_score_formula():
    torch.manual_seed(0)
    attn = AdditiveAttention(query_dim=6, key_dim=10, hidden_dim=7)
    q, k = torch.randn(2, 6), torch.randn(2, 3, 10)
    wq, wk, bk, v = attn.query_proj.weight, attn.key_proj.weight, attn.key_proj.bias, attn.v.weight
    expected = (torch.tanh((q @ wq.T)[:, None] + k @ wk.T + bk) @ v.T).squeeze(-1)
    torch.testing.assert_close(attn.score(q, attn.project_keys(k)), expected)


def test_dot_and_general_scores():
    torch.manual_seed(0)
    q, k = torch.randn(2, 6), torch.randn(2, 3, 6)
    dot = DotAttention(6, 6)
    torch.testing.assert_close(dot.score(q, dot.project_keys(k)), torch.einsum("bd,bsd->bs", q, k))
    gen = GeneralAttention(query_dim=6, key_dim=10)
    k10 = torch.randn(2, 3, 10)
    w = gen.key_proj.weight  # (6, 10)
    expected = torch.einsum("bq,qk,bsk->bs", q, w, k10)
    torch.testing.assert_close(gen.score(q, gen.project_keys(k10)), expected)
    with pytest.raises(ValueError, match="equal sizes"):
        DotAttention(6, 10)


def test_multihead_weights_path_matches_fused_path_and_masks_padding():
    torch.manual_seed(0)
    b, h, t, s, d = 4, 2, 3, 5, 8
    q, k, v = torch.randn(b, h, t, d), torch.randn(b, h, s, d), torch.randn(b, h, s, d)
    mask = _mask(LENGTHS, s)[:, None, None]  # (B, 1, 1, S)
    fused, none = dot_product_attention(q, k, v, mask)
    explicit, weights = dot_product_attention(q, k, v, mask, need_weights=True)
    assert none is None and weights.shape == (b, h, t, s)
    torch.testing.assert_close(explicit, fused)
    torch.testing.assert_close(weights.sum(-1), torch.ones(b, h, t))
    assert (weights.masked_select(~mask) == 0).all()
    assert (weights.masked_select(mask.expand_as(weights)) > 0).all()


def test_multihead_causal_weights_are_zero_on_the_future():
    torch.manual_seed(0)
    q = k = v = torch.randn(2, 2, 4, 8)
    fused, _ = dot_product_attention(q, k, v, causal=True)
    explicit, weights = dot_product_attention(q, k, v, causal=True, need_weights=True)
    torch.testing.assert_close(explicit, fused)
    future = torch.ones(4, 4, dtype=torch.bool).triu(1)
    assert (weights[..., future] == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 2, 4))


def test_incremental_self_attention_equals_causal_pass():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4).eval()
    x = torch.randn(3, 6, 16)
    full, _ = mha(x, causal=True)
    cache = torch.zeros(8, 2, 3, 4, 4)  # (capacity, keys / values, B, H, Dh)
    steps = [mha.step(x[:, i : i + 1], cache, i) for i in range(6)]
    assert cache[6:].abs().sum().item() == 0.0  # written in place, only positions 0..5
    assert cache[:6].abs().min(dim=-1).values.gt(0).all()  # every key and value of 0..5
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-6, rtol=1e-5)


def test_cross_attention_weights_over_precomputed_keys():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, cross=True).eval()
    memory, x = torch.randn(4, 5, 16), torch.randn(4, 2, 16)
    mask = _mask(LENGTHS, 5)[:, None, None]
    kv = mha.project_kv(memory)
    out, weights = mha(x, kv=kv, mask=mask, need_weights=True)
    fast, _ = mha(x, kv=kv, mask=mask)
    torch.testing.assert_close(out, fast)
    assert weights.shape == (4, 4, 2, 5)
    assert (weights.masked_select(~mask) == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(4, 4, 2))


@pytest.mark.parametrize("causal", [False, True])
def test_bf16_training_path_matches_fp32_sdpa(causal, monkeypatch):
    """bf16 with grad on CPU takes plain matmuls (SDPA's backward is slow there): same values."""
    import torch.nn.functional as F

    sdpa = F.scaled_dot_product_attention

    def fp32_only(q, *args, **kwargs):
        assert q.dtype == torch.float32, "bf16 training attention must not go through SDPA"
        return sdpa(q, *args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", fp32_only)
    torch.manual_seed(0)
    b, h, t, d = 4, 2, 6, 16
    mask = None if causal else _mask(torch.tensor([6, 3, 1, 4]), t)[:, None, None]
    base = [torch.randn(b, h, t, d) for _ in range(3)]
    q32, k32, v32 = (x.clone().requires_grad_() for x in base)
    ref, _ = dot_product_attention(q32, k32, v32, mask, causal)
    ref.sum().backward()
    q16, k16, v16 = (x.to(torch.bfloat16).requires_grad_() for x in base)
    out, weights = dot_product_attention(q16, k16, v16, mask, causal)
    out.float().sum().backward()
    assert weights is None and out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref.detach(), atol=3e-2, rtol=3e-2)
    for got, want in ((q16, q32), (k16, k32), (v16, v32)):
        torch.testing.assert_close(got.grad.float(), want.grad, atol=5e-2, rtol=5e-2)


@pytest.mark.parametrize("causal", [False, True])
def test_cpu_training_takes_plain_matmuls_on_short_sequences_with_sdpa_values(causal, monkeypatch):
    """fp32 with grad on CPU: up to SMALL_ATTENTION positions (and with any dropout) plain
    matmuls, beyond it SDPA; the values and gradients are SDPA's either way."""
    import torch.nn.functional as F

    from nmt.models.attention import SMALL_ATTENTION

    sdpa, calls = F.scaled_dot_product_attention, []

    def counted(*args, **kwargs):
        calls.append(args[0].size(-2))
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", counted)
    torch.manual_seed(0)
    for t in (12, 65):  # 12 x 12 and 65 x 65 positions: both sides of SMALL_ATTENTION
        b, h, d = 3, 2, 8
        mask = None if causal else _mask(torch.tensor([t, t - 5, 1]), t)[:, None, None]
        base = [torch.randn(b, h, t, d) for _ in range(3)]
        q, k, v = (x.clone().requires_grad_() for x in base)
        out, _ = dot_product_attention(q, k, v, mask, causal)
        out.sum().backward()
        rq, rk, rv = (x.clone().requires_grad_() for x in base)
        ref = sdpa(rq, rk, rv, attn_mask=mask, is_causal=causal)
        ref.sum().backward()
        torch.testing.assert_close(out, ref)
        for got, want in ((q, rq), (k, rk), (v, rv)):
            torch.testing.assert_close(got.grad, want.grad)
    assert 12 * 12 <= SMALL_ATTENTION < 65 * 65 and calls == [65]
    q = torch.randn(2, 2, 65, 8, requires_grad=True)
    dot_product_attention(q, q, q, dropout_p=0.1)  # dropout: plain matmuls at any length
    assert calls == [65]


@pytest.mark.parametrize("keys", [1, 5, 12, 13, 40])  # both sides of SMALL_PRODUCT at Dh 32
def test_step_attention_elementwise_and_matmul_paths_agree(keys):
    """One query per row: the elementwise path (few keys) and the matmul path give the
    reference softmax(q k^T / sqrt(d)) v, masked keys included, on a permuted cache view."""
    from nmt.models.attention import step_attention

    g = torch.Generator().manual_seed(keys)
    q = torch.randn(6, 4, 1, 32, generator=g)
    cache = torch.randn(keys, 6, 4, 32, generator=g)  # time-major, as the decoder's cache
    k, v = cache.permute(1, 2, 0, 3), cache.flip(0).permute(1, 2, 0, 3)
    mask = torch.ones(6, 1, 1, keys, dtype=torch.bool)
    mask[0, ..., keys // 2 + 1 :] = False
    ref = (q @ k.transpose(-1, -2) / 32**0.5).masked_fill(~mask, float("-inf")).softmax(-1) @ v
    out = step_attention(q, k, v, mask)
    assert out.shape == (6, 4, 1, 32)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_time_major_attention_matches_matmul_attention_over_the_cache_view(dtype):
    torch.manual_seed(0)
    t, b, h, dh = 9, 5, 4, 8
    keys, values = torch.randn(t, b, h, dh).to(dtype), torch.randn(t, b, h, dh).to(dtype)
    q = torch.randn(b, h, 1, dh).to(dtype)
    got = time_major_attention(q, keys, values)
    k, v = keys.permute(1, 2, 0, 3).float(), values.permute(1, 2, 0, 3).float()
    want = torch.softmax(q.float() @ k.transpose(-1, -2) / math.sqrt(dh), -1) @ v
    assert got.shape == (b, h, 1, dh) and got.dtype == dtype
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(got.float(), want, rtol=tol, atol=tol)


SENTENCE = "a man in a blue shirt is riding his bike ."


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    """The tiny random Transformer of test_translate and a tiny Seq2Seq (Bahdanau attention)."""
    from test_translate import build_tiny_model_dir, synthetic_lines

    from nmt.config import load_config
    from nmt.data.vocab import Tokenizer, VocabInfo, train_spm
    from nmt.dirs.model import ModelDir
    from nmt.dirs.weights import save_weights
    from nmt.models import build

    root = tmp_path_factory.mktemp("kinds")
    transformer = build_tiny_model_dir(root)
    spm = train_spm(synthetic_lines(300), root / "spm2", vocab_size=200)
    tok = Tokenizer.load(spm)
    vocab = VocabInfo(tok.vocab_size, tok.vocab_size, joint=True)
    cfg = load_config(preset="seq2seq-tiny")
    cfg.decoding.max_len_b = 5
    torch.manual_seed(0)
    seq2seq = root / "seq2seq"
    ModelDir.at(seq2seq).write_meta(cfg, ("en", "de"), (spm, spm), vocab)
    save_weights(build(cfg.model, vocab), seq2seq / "checkpoints" / "best.safetensors")
    return transformer, seq2seq


def test_translator_attention_kinds_have_the_right_shapes_and_pieces(model_dirs):
    """cross: target x source; self: source x source per encoder layer; decoder: (bos + target)
    squared, lower-triangular; searched or force-decoded, the same translation each time."""
    from nmt.engines.translator import Translator

    tr = Translator.from_dir(ModelDir(model_dirs[0]), device="cpu")
    cross, src, tgt, text = tr.attention(SENTENCE)
    assert cross.shape == (2, 2, len(tgt), len(src)) and src[-1] == tgt[-1] == "</s>"
    enc, cols, rows, text2 = tr.attention(SENTENCE, kind="self")
    assert (cols, rows, text2) == (src, src, text)
    assert enc.shape == (1, 2, len(src), len(src))  # one encoder layer, two heads
    np.testing.assert_allclose(enc.sum(-1), 1.0, rtol=1e-5)
    dec, cols, rows, text3 = tr.attention(SENTENCE, kind="decoder")
    assert cols == rows == ["<s>"] + tgt[:-1] and text3 == text
    assert dec.shape == (2, 2, len(tgt), len(tgt))
    n = len(tgt)
    assert (np.triu(dec, 1) == 0).all()  # the mask: no position sees a later one
    assert (np.tril(dec) > 0).sum() == 2 * 2 * n * (n + 1) // 2  # every allowed one has weight
    np.testing.assert_allclose(dec.sum(-1), 1.0, rtol=1e-5)
    target = "zwei kinder spielen im park ."
    forced, cols, rows, text4 = tr.attention(SENTENCE, target=target, kind="decoder")
    assert text4 == target and forced.shape[2:] == (len(rows), len(rows)) and rows[0] == "<s>"
    with pytest.raises(NmtError, match="^kind must be cross, self or decoder, got 'x'$"):
        tr.attention(SENTENCE, kind="x")


@pytest.mark.slow
def test_cli_attention_kind_self_and_decoder_write_pngs(model_dirs, tmp_path):
    from test_translate import png_size, run_cli

    from nmt.engines.translator import Translator
    from nmt.plots.heatmaps import DPI, figure_size

    tr = Translator.from_dir(ModelDir(model_dirs[0]), device="cpu")
    for kind in ("self", "decoder"):
        out = tmp_path / f"{kind}.png"
        r = run_cli("attention", "-m", str(model_dirs[0]), SENTENCE, "--kind", kind, "-o", str(out))
        assert r.exit_code == 0, r.output
        _, cols, rows, text = tr.attention(SENTENCE, kind=kind)
        w, h = figure_size(cols, rows)
        assert png_size(out) == pytest.approx((w * DPI, h * DPI), abs=2) and text in r.stdout
    grid = tmp_path / "grid.png"
    r = run_cli("attention", "-m", str(model_dirs[0]), SENTENCE, "--kind", "self", "-o", str(grid),
                "--head", "all", "-q")  # fmt: skip
    assert r.exit_code == 0 and r.stdout == ""
    _, cols, rows, _ = tr.attention(SENTENCE, kind="self")
    w, h = figure_size(cols, rows, rows=1, cols=2)
    assert png_size(grid) == pytest.approx((w * DPI, h * DPI), abs=2)
    r = run_cli("attention", "-m", str(model_dirs[0]), SENTENCE, "--kind", "self", "-o",
                str(grid), "--layer", "1")  # fmt: skip
    assert r.exit_code == 2 and "layer 1 is out of range: the model has 1 layers" in r.output


@pytest.mark.slow
def test_cli_attention_kinds_a_seq2seq_model_lacks_are_one_line(model_dirs, tmp_path):
    from test_translate import run_cli

    out = tmp_path / "att.png"
    for kind in ("self", "decoder"):
        r = run_cli("attention", "-m", str(model_dirs[1]), SENTENCE, "--kind", kind, "-o", str(out))
        assert (r.exit_code, r.output) == (
            2, f"error: a seq2seq model has only source-target attention (kind 'cross'), "
            f"no {kind!r} attention\n",
        )  # fmt: skip
        assert not out.exists()
    r = run_cli("attention", "-m", str(model_dirs[1]), SENTENCE, "--kind", "cross", "-o", str(out))
    assert r.exit_code == 0 and out.read_bytes()[:4] == b"\x89PNG"
    r = run_cli("attention", "-m", "/nonexistent", SENTENCE, "--kind", "both", "-o", str(out))
    assert (r.exit_code, r.output) == (
        2,
        "error: --kind must be cross, self or decoder, got 'both'\n",
    )
