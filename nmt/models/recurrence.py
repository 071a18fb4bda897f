"""A bidirectional GRU over a padded batch of unequal lengths, without packing.

A packed sequence runs each time step on a slice of one (tokens, gates) tensor, and autograd
gives every slice's gradient as a zero-filled tensor of the whole size: training time grows with
the square of the source length. Here each direction runs over the padded batch, its time steps
unbound (one stacked gradient), and the backward direction reads each sentence reversed within its
own length, so the padding always comes after the real tokens and never reaches them. Outputs
and final states are those of the packed run (to float rounding); outputs at padding are zero.
An LSTM keeps the packed run: its final cell state at each sentence's own length is not among
its outputs.

A GRU whose input is [x_t; c] with c the same at every step (the attention-free decoder: its
context is one vector per sentence) computes c's share of the input gates once per sentence, not
once per step: fixed_input_gru.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn


def reverse_within(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Each row of x (B, S, ...) with its first lengths[b] positions reversed, the rest kept."""
    s = x.size(1)
    t = torch.arange(s, device=x.device)
    real = t < lengths.unsqueeze(1)  # (B, S)
    order = torch.where(real, lengths.unsqueeze(1) - 1 - t, t)  # (B, S)
    index = order.view(*order.shape, *([1] * (x.dim() - 2))).expand_as(x)
    return x.gather(1, index)


def _direction(rnn: nn.GRU, x: torch.Tensor, weights: Sequence[torch.Tensor]) -> torch.Tensor:
    """One direction of one layer over x (B, S, I), from a zero state: outputs (B, S, H)."""
    h0 = x.new_zeros(1, x.size(0), rnn.hidden_size)
    # torch._VF.gru: the kernel nn.GRU calls itself (one layer, one direction, batch first)
    out, _ = torch._VF.gru(x, h0, list(weights), rnn.bias, 1, 0.0, rnn.training, False, True)
    return out


def bidirectional(
    rnn: nn.GRU, x: torch.Tensor, lengths: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """`rnn` (bidirectional, batch_first) over x (B, S, I) whose rows hold lengths[b] real
    tokens: outputs (B, S, 2H), zero at padding, and the final states as nn.GRU gives them,
    (layers * 2, B, H)."""
    b, s, _ = x.shape
    lengths = lengths.to(x.device)
    real = (torch.arange(s, device=x.device) < lengths.unsqueeze(1)).unsqueeze(-1)  # (B, S, 1)
    last = (lengths - 1).view(b, 1, 1).expand(b, 1, rnn.hidden_size)
    weights = rnn.all_weights  # per layer and direction: w_ih, w_hh (, b_ih, b_hh)
    finals: list[torch.Tensor] = []
    layer_in = x
    for layer in range(rnn.num_layers):
        forward = _direction(rnn, layer_in, weights[2 * layer])
        backward = _direction(rnn, reverse_within(layer_in, lengths), weights[2 * layer + 1])
        finals += [o.gather(1, last).squeeze(1) for o in (forward, backward)]
        out = torch.cat([forward, reverse_within(backward, lengths)], dim=-1) * real
        if layer < rnn.num_layers - 1 and rnn.dropout:
            out = nn.functional.dropout(out, rnn.dropout, rnn.training)
        layer_in = out
    return layer_in, torch.stack(finals)


def _gru_cell(
    gates_in: torch.Tensor, h: torch.Tensor, w_hh: torch.Tensor, b_hh: torch.Tensor
) -> torch.Tensor:
    """One GRU step from its input gates (B, 3H), already W_ih x + b_ih: the new state (B, H)."""
    i_r, i_z, i_n = gates_in.chunk(3, 1)
    h_r, h_z, h_n = F.linear(h, w_hh, b_hh).chunk(3, 1)
    r = torch.sigmoid(i_r + h_r)
    z = torch.sigmoid(i_z + h_z)
    n = torch.tanh(i_n + r * h_n)
    return n + z * (h - n)  # (1 - z) n + z h


def fixed_input_gru(
    rnn: nn.GRU, x: torch.Tensor, fixed: torch.Tensor, h0: torch.Tensor
) -> torch.Tensor:
    """`rnn` (one direction, batch_first, with biases) over the inputs [x_t; fixed] for x (B, T, X)
    and fixed (B, F), the same at every step, from h0 (layers, B, H): the top layer's outputs
    (B, T, H), those of rnn(cat([x, fixed repeated T times], -1), h0) to float rounding. The first
    layer's input gates are W_x x_t + (W_f fixed + b_ih): the fixed share is one product per
    sentence; the layers above run as nn.GRU runs them."""
    w_ih, w_hh, b_ih, b_hh = rnn.all_weights[0]
    width = x.size(-1)
    gates = F.linear(x, w_ih[:, :width]) + F.linear(fixed, w_ih[:, width:], b_ih).unsqueeze(1)
    h, outs = h0[0], []
    for gates_t in gates.unbind(1):  # unbind: one stacked gradient, not T zero-filled ones
        h = _gru_cell(gates_t, h, w_hh, b_hh)
        outs.append(h)
    out = torch.stack(outs, 1)  # (B, T, H)
    if rnn.num_layers == 1:
        return out
    out = F.dropout(out, rnn.dropout, rnn.training)  # nn.GRU's dropout between layers
    upper: list[torch.Tensor] = [w for layer in rnn.all_weights[1:] for w in layer]
    layers, drop = rnn.num_layers - 1, rnn.dropout
    h_up = h0[1:].contiguous()
    return torch._VF.gru(out, h_up, upper, True, layers, drop, rnn.training, False, True)[0]
