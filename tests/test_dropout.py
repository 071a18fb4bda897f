"""Dropout with 16-bit CPU masks: the rate, the scale, the gradient, every lane unbiased,
seeded like any torch RNG, the identity in eval mode."""

from __future__ import annotations

import pytest
import torch

from nmt.models.dropout import Dropout, dropout


@pytest.mark.parametrize("p", [0.1, 0.3])
def test_rate_and_scale(p):
    torch.manual_seed(0)
    x = torch.rand(200_003) + 0.5  # odd size: the last int64 draw is used in part
    y = dropout(x, p)
    kept = y != 0
    assert float(kept.float().mean()) == pytest.approx(1 - p, abs=0.005)
    torch.testing.assert_close(y[kept], x[kept] / (1 - p))


def test_each_of_the_four_lanes_is_unbiased():
    """Elements 4i, 4i+1, 4i+2, 4i+3 share one int64 draw; each must drop at rate p."""
    torch.manual_seed(1)
    kept = dropout(torch.ones(400_000), 0.5) != 0
    rates = kept.view(-1, 4).float().mean(0)
    torch.testing.assert_close(rates, torch.full((4,), 0.5), atol=0.006, rtol=0)


def test_gradient_is_the_same_mask_and_scale():
    torch.manual_seed(2)
    x = torch.randn(64, 33, requires_grad=True)
    y = dropout(x, 0.25)
    y.backward(torch.ones_like(y))
    expected = (y.detach() != 0).float() / 0.75
    torch.testing.assert_close(x.grad, expected)


def test_seeded_and_bf16():
    x = torch.randn(1000).to(torch.bfloat16)
    torch.manual_seed(3)
    a = dropout(x, 0.1)
    torch.manual_seed(3)
    b = dropout(x, 0.1)
    assert a.dtype == torch.bfloat16 and torch.equal(a, b)


def test_module_eval_identity_and_edges():
    layer = Dropout(0.3)
    x = torch.randn(10, 10)
    layer.eval()
    assert layer(x) is x
    layer.train()
    assert not torch.equal(layer(x), x)
    assert torch.equal(dropout(x, 0.0), x)
    assert (dropout(x, 1.0) == 0).all()
    assert "p=0.3" in repr(layer)
    with pytest.raises(ValueError, match="dropout probability 1.5 is not in"):
        Dropout(1.5)
