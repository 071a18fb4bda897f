"""Label-smoothed cross entropy against a hand computation, and learning-rate schedules."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from nmt.train.loss import label_smoothed_nll
from nmt.train.schedule import lr_at


def test_label_smoothed_loss_by_hand():
    logits = torch.tensor([[[1.0, 2.0, 0.5, -1.0], [0.0, 0.0, 3.0, 1.0], [2.0, 1.0, 1.0, 1.0]]])
    target = torch.tensor([[1, 2, 0]])  # the last position is padding
    eps = 0.1
    loss, nll, n = label_smoothed_nll(logits, target, eps, pad_id=0)
    expected_loss = expected_nll = 0.0
    for t, y in ((0, 1), (1, 2)):
        row = logits[0, t].tolist()
        log_z = math.log(sum(math.exp(v) for v in row))
        logp = [v - log_z for v in row]
        expected_nll += -logp[y]
        # (1 - eps) on the reference, eps spread uniformly over the 4 classes
        expected_loss += -sum(((1 - eps) * (i == y) + eps / 4) * lp for i, lp in enumerate(logp))
    assert n == 2
    assert float(nll) == pytest.approx(expected_nll, rel=1e-6)
    assert float(loss) == pytest.approx(expected_loss, rel=1e-6)


def test_matches_torch_cross_entropy_and_ignores_padding():
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 11)
    target = torch.randint(1, 11, (3, 5))
    target[0, 3:] = 0
    target[2, 1:] = 0
    loss, nll, n = label_smoothed_nll(logits, target, 0.2, pad_id=0)
    ref = F.cross_entropy(
        logits.view(-1, 11), target.view(-1), ignore_index=0, label_smoothing=0.2, reduction="sum"
    )
    assert n == int((target != 0).sum())
    assert float(loss) == pytest.approx(float(ref), rel=1e-5)
    # Changing the logits at padded positions changes nothing.
    logits2 = logits.clone()
    logits2[target == 0] = 100.0
    assert float(label_smoothed_nll(logits2, target, 0.2, 0)[0]) == pytest.approx(float(loss))
    assert float(label_smoothed_nll(logits, target, 0.0, 0)[0]) == pytest.approx(float(nll))


def test_gradient_matches_autograd_reference():
    torch.manual_seed(1)
    logits = torch.randn(4, 6, 13, requires_grad=True)
    target = torch.randint(0, 13, (4, 6))
    target[1, 4:] = 0
    ref_logits = logits.detach().clone().requires_grad_()
    loss, _, _ = label_smoothed_nll(logits, target, 0.1, 0)
    (2.5 * loss).backward()
    ref = F.cross_entropy(
        ref_logits.view(-1, 13), target.view(-1), ignore_index=0, label_smoothing=0.1,
        reduction="sum",
    )  # fmt: skip
    (2.5 * ref).backward()
    assert torch.allclose(logits.grad, ref_logits.grad, atol=1e-6)
    assert torch.all(logits.grad[target == 0] == 0)


def test_loss_is_float32_under_bf16_logits():
    logits = torch.randn(2, 3, 7).to(torch.bfloat16).requires_grad_()
    loss, _, _ = label_smoothed_nll(logits, torch.tensor([[1, 2, 3], [4, 0, 0]]), 0.1, 0)
    assert loss.dtype == torch.float32
    loss.backward()
    assert logits.grad is not None and logits.grad.dtype == torch.bfloat16


def test_inverse_sqrt_schedule_values():
    assert lr_at("inverse_sqrt", 1, 1e-3, 100) == pytest.approx(1e-5)
    assert lr_at("inverse_sqrt", 50, 1e-3, 100) == pytest.approx(5e-4)
    assert lr_at("inverse_sqrt", 100, 1e-3, 100) == pytest.approx(1e-3)
    assert lr_at("inverse_sqrt", 400, 1e-3, 100) == pytest.approx(5e-4)
    assert lr_at("inverse_sqrt", 10000, 1e-3, 100) == pytest.approx(1e-4)


def test_cooldown_anneals_inverse_sqrt_and_constant_over_the_budget_end():
    # Before the last `cooldown` share of the budget the schedule is untouched ...
    plain = lr_at("inverse_sqrt", 400, 1e-3, 100)
    assert lr_at("inverse_sqrt", 400, 1e-3, 100, 0.0, progress=0.8, cooldown=0.2) == plain
    # ... then it falls linearly from the schedule's own value to min_lr at the end.
    assert lr_at("inverse_sqrt", 400, 1e-3, 100, 0.0, progress=0.9, cooldown=0.2) == (
        pytest.approx(plain / 2)
    )
    assert lr_at("inverse_sqrt", 400, 1e-3, 100, 1e-5, progress=1.0, cooldown=0.2) == (
        pytest.approx(1e-5)
    )
    assert lr_at("inverse_sqrt", 400, 1e-3, 100, 0.0, progress=1.7, cooldown=0.2) == 0.0
    # constant + cooldown is warmup-stable-decay; without a budget nothing cools.
    assert lr_at("constant", 50, 1e-3, 10, 0.0, progress=0.95, cooldown=0.1) == pytest.approx(5e-4)
    assert lr_at("constant", 50, 1e-3, 10, 0.0, progress=None, cooldown=0.1) == 1e-3
    assert lr_at("inverse_sqrt", 400, 1e-3, 100, progress=0.95) == plain  # cooldown 0: off
    # A run out of patience at 30% of its budget cools down over [0.3, 0.5] instead.
    assert lr_at("constant", 50, 1e-3, 10, 0.0, 0.3, 0.2, cooldown_end=0.5) == 1e-3
    assert lr_at("constant", 50, 1e-3, 10, 0.0, 0.45, 0.2, cooldown_end=0.5) == (
        pytest.approx(2.5e-4)
    )
    assert lr_at("constant", 50, 1e-3, 10, 1e-5, 0.6, 0.2, cooldown_end=0.5) == pytest.approx(1e-5)


def test_cosine_linear_constant_schedules():
    # warmup 10, then decay with the share of the budget used
    assert lr_at("cosine", 5, 1e-3, 10, 0.0, progress=0.05) == pytest.approx(5e-4)
    assert lr_at("cosine", 50, 1e-3, 10, 1e-4, progress=0.5) == pytest.approx(5.5e-4)
    assert lr_at("cosine", 100, 1e-3, 10, 1e-4, progress=1.0) == pytest.approx(1e-4)
    assert lr_at("linear", 75, 1e-3, 10, 0.0, progress=0.75) == pytest.approx(2.5e-4)
    assert lr_at("linear", 200, 1e-3, 10, 0.0, progress=2.0) == pytest.approx(0.0)
    assert lr_at("constant", 5, 1e-3, 10) == pytest.approx(5e-4)
    assert lr_at("constant", 5000, 1e-3, 10, progress=0.9) == pytest.approx(1e-3)
    # Without a known budget, decaying schedules hold the peak after warmup.
    assert lr_at("cosine", 500, 1e-3, 10, progress=None) == pytest.approx(1e-3)


@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("chunk", [3, 1024])
def test_fused_projection_loss_equals_logits_path(monkeypatch, eps, chunk):
    """Loss, NLL, count and both gradients match the unfused path, padding skipped, any chunking."""
    import nmt.train.loss as loss_mod
    from nmt.train.loss import linear_smoothed_nll

    monkeypatch.setattr(loss_mod, "CHUNK_ROWS", chunk)
    torch.manual_seed(0)
    hidden = torch.randn(3, 5, 8, dtype=torch.float64)
    weight = torch.randn(13, 8, dtype=torch.float64)
    target = torch.randint(1, 13, (3, 5))
    target[0, 2:] = 0
    target[2, 4:] = 0
    h1, w1 = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    ref_loss, ref_nll, ref_n = label_smoothed_nll(h1 @ w1.t(), target, eps, 0)
    (2.0 * ref_loss).backward()
    h2, w2 = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    loss, nll, n = linear_smoothed_nll(h2, w2, target, eps, 0)
    (2.0 * loss).backward()
    assert n == ref_n == int((target != 0).sum())
    assert loss.item() == pytest.approx(ref_loss.item(), rel=1e-6)
    assert float(nll) == pytest.approx(float(ref_nll), rel=1e-6)
    assert torch.allclose(h2.grad, h1.grad, atol=1e-6)
    assert torch.allclose(w2.grad, w1.grad, atol=1e-6)
    assert float(h2.grad[0, 3].abs().sum()) == 0.0  # a padding row gets no gradient


def test_fused_loss_computes_in_the_autocast_dtype():
    """Under bf16 autocast the projection runs in bf16 (close to fp32), gradients stay fp32."""
    from nmt.train.loss import linear_smoothed_nll

    torch.manual_seed(1)
    hidden = torch.randn(4, 6, 16, requires_grad=True)
    weight = torch.randn(50, 16, requires_grad=True)
    target = torch.randint(1, 50, (4, 6))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, _, _ = linear_smoothed_nll(hidden, weight, target, 0.1, 0)
    loss.backward()
    ref, _, _ = label_smoothed_nll(hidden.detach() @ weight.detach().t(), target, 0.1, 0)
    assert hidden.grad.dtype == weight.grad.dtype == torch.float32
    assert loss.item() == pytest.approx(ref.item(), rel=2e-2)
    assert loss.item() != pytest.approx(ref.item(), rel=1e-7)  # it really ran in bf16


@pytest.mark.parametrize("arch", ["seq2seq", "transformer"])
def test_real_models_fused_loss_and_grads_equal_the_logits_path(arch):
    """Both architectures expose `features`: the fused loss and its gradients match the logits."""
    from nmt.config import model_config
    from nmt.data.vocab import VocabInfo
    from nmt.models import build
    from nmt.train.loss import LossHead

    sizes = {"seq2seq": dict(embed_dim=16, hidden_size=24), "transformer": dict(d_model=16)}
    cfg = model_config(type=arch, dropout=0.0, encoder_layers=1, decoder_layers=1, **sizes[arch])
    torch.manual_seed(4)
    model = build(cfg, VocabInfo(30, 30, joint=True))
    src, tgt_in, tgt_out = (torch.randint(4, 30, (3, 6)) for _ in range(3))
    lengths = torch.tensor([6, 6, 6])
    tgt_out[2, 4:] = 0
    fused, nll, n = LossHead(model, 0.1, 0)(src, lengths, tgt_in, tgt_out)
    (g_fused,) = torch.autograd.grad(fused, model.output.weight)
    ref, ref_nll, ref_n = label_smoothed_nll(model(src, lengths, tgt_in), tgt_out, 0.1, 0)
    (g_ref,) = torch.autograd.grad(ref, model.output.weight)
    assert n == ref_n == 16
    assert float(fused.detach()) == pytest.approx(float(ref.detach()), rel=1e-5)
    assert float(nll) == pytest.approx(float(ref_nll), rel=1e-5)
    torch.testing.assert_close(g_fused, g_ref, rtol=1e-4, atol=1e-6)


def test_chunked_nll_equals_the_whole_logits_nll():
    """Validation's chunked loss is the full (B, T, V) loss's NLL, padding skipped, over more rows
    than one chunk holds, in float32 and under bf16 autocast (the dtype the model runs in)."""
    from nmt.train.loss import CHUNK_ROWS, chunked_nll

    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(3, CHUNK_ROWS // 2 + 7, 16, generator=g)  # 3 * 263 rows: 2 chunks
    weight = torch.randn(50, 16, generator=g)
    target = torch.randint(1, 50, (3, hidden.size(1)), generator=g)
    target[0, -5:] = 0
    target[2, -100:] = 0
    _, want, want_n = label_smoothed_nll(hidden @ weight.t(), target, 0.0, pad_id=0)
    got, n = chunked_nll(hidden, weight, target, pad_id=0)
    assert n == want_n == target.numel() - 105
    assert torch.allclose(got, want, rtol=1e-5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = F.linear(hidden, weight)
        got16, _ = chunked_nll(hidden, weight, target, pad_id=0)
    _, want16, _ = label_smoothed_nll(logits, target, 0.0, pad_id=0)
    assert logits.dtype == torch.bfloat16 and got16.dtype == torch.float32
    assert torch.allclose(got16, want16, rtol=1e-5)
