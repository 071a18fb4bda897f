"""A bidirectional GRU over a padded batch of unequal lengths, without packing.

A packed sequence runs each time step on a slice of one (tokens, gates) tensor, and autograd
gives every slice's gradient as a zero-filled tensor of the whole size: training time grows with
the square of the source length. Here each direction runs over the padded batch, its time steps
unbound (one stacked gradient), and the backward direction reads each sentence reversed within its
own length, so the padding always comes after the real tokens and never reaches them. Outputs
and final states are those of the packed run (to float rounding); outputs at padding are zero.
An LSTM keeps the packed run: its final cell state at each sentence's own length is not among
its outputs.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
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
