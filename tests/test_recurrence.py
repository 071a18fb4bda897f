"""The unpacked bidirectional GRU (nmt/models/recurrence.py) against nn.GRU on packed sequences:
the same outputs, final states and gradients, and padding that never reaches a real token; the
GRU over [x_t; fixed] against nn.GRU on the concatenated input."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from nmt.models.recurrence import bidirectional, fixed_input_gru, reverse_within


def _packed(rnn: nn.GRU, x: torch.Tensor, lengths: torch.Tensor):
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    out, final = rnn(packed)
    return pad_packed_sequence(out, batch_first=True, total_length=x.size(1))[0], final


def _batch(seed: int, b: int = 9, s: int = 13, i: int = 8):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, s + 1, (b,), generator=g)
    lengths[0] = s  # the longest fills the batch, as in a real one
    return torch.randn(b, s, i, generator=g), lengths


def test_reverse_within_reverses_each_row_up_to_its_length():
    x = torch.arange(10.0).view(2, 5)
    out = reverse_within(x, torch.tensor([5, 3]))
    assert out.tolist() == [[4.0, 3.0, 2.0, 1.0, 0.0], [7.0, 6.0, 5.0, 8.0, 9.0]]
    assert torch.equal(reverse_within(out, torch.tensor([5, 3])), x)  # its own inverse


@pytest.mark.parametrize("layers", [1, 2])
def test_outputs_finals_and_gradients_equal_the_packed_run(layers):
    torch.manual_seed(layers)
    rnn = nn.GRU(8, 6, layers, batch_first=True, bidirectional=True).eval()
    x, lengths = _batch(layers)
    x.requires_grad_(True)
    want_out, want_final = _packed(rnn, x, lengths)
    out, final = bidirectional(rnn, x, lengths)
    torch.testing.assert_close(out, want_out, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(final, want_final, rtol=1e-5, atol=1e-6)
    weights = torch.randn(out.shape)  # a loss that weighs every output and final state
    params = [x, *rnn.parameters()]
    want = torch.autograd.grad((want_out * weights).sum() + want_final.sum(), params)
    got = torch.autograd.grad((out * weights).sum() + final.sum(), params)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def test_padding_never_reaches_a_real_token():
    rnn = nn.GRU(8, 6, 2, batch_first=True, bidirectional=True).eval()
    x, lengths = _batch(3)
    real = (torch.arange(x.size(1)) < lengths.unsqueeze(1)).unsqueeze(-1)
    noisy = torch.where(real, x, torch.randn(x.shape) * 100)  # other values at padding
    out, final = bidirectional(rnn, x, lengths)
    out2, final2 = bidirectional(rnn, noisy, lengths)
    assert torch.equal(out, out2) and torch.equal(final, final2)
    assert not out.masked_select(~real).any()  # zero at padding


@pytest.mark.parametrize("layers", [1, 3])
def test_fixed_input_gru_equals_the_gru_on_the_concatenated_input(layers):
    torch.manual_seed(layers)
    rnn = nn.GRU(8 + 5, 6, layers, batch_first=True, dropout=0.2 if layers > 1 else 0.0).eval()
    x, _ = _batch(layers + 10)
    fixed = torch.randn(x.size(0), 5, requires_grad=True)
    h0 = torch.randn(layers, x.size(0), 6, requires_grad=True)
    x.requires_grad_(True)
    want, _ = rnn(torch.cat([x, fixed.unsqueeze(1).expand(-1, x.size(1), -1)], -1), h0)
    got = fixed_input_gru(rnn, x, fixed, h0)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    weights = torch.randn(want.shape)
    params = [x, fixed, h0, *rnn.parameters()]
    want_grads = torch.autograd.grad((want * weights).sum(), params)
    got_grads = torch.autograd.grad((got * weights).sum(), params)
    for g, w in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def test_fixed_input_gru_drops_out_between_layers_in_training_only():
    rnn = nn.GRU(8 + 5, 6, 2, batch_first=True, dropout=0.5).train()
    x, _ = _batch(4)
    fixed, h0 = torch.randn(x.size(0), 5), torch.zeros(2, x.size(0), 6)
    torch.manual_seed(0)
    a = fixed_input_gru(rnn, x, fixed, h0)
    torch.manual_seed(1)
    b = fixed_input_gru(rnn, x, fixed, h0)
    assert not torch.allclose(a, b)  # a different dropout mask between the layers
    rnn.eval()
    torch.testing.assert_close(
        fixed_input_gru(rnn, x, fixed, h0), fixed_input_gru(rnn, x, fixed, h0)
    )
