"""The weight average: its update rule, tied weights, and that it leaves the live model alone."""

from __future__ import annotations

import torch
from torch import nn

from nmt.config import load_config
from nmt.data.vocab import VocabInfo
from nmt.models import build
from nmt.train.ema import WeightAverage


def test_update_follows_the_ramped_decay():
    live = nn.Linear(3, 2)
    avg = WeightAverage(live, decay=0.5)
    w0 = live.weight.detach().clone()
    assert avg.rate(0) == 0.1 and avg.rate(1) == 2 / 11 and avg.rate(100) == 0.5
    with torch.no_grad():
        live.weight.add_(1.0)
    avg.update(0)  # avg = 0.1 * w0 + 0.9 * w1
    w1 = live.weight.detach().clone()
    torch.testing.assert_close(avg.model.weight, 0.1 * w0 + 0.9 * w1)
    with torch.no_grad():
        live.weight.add_(1.0)
    avg.update(100)  # the decay itself once the ramp passes it
    torch.testing.assert_close(avg.model.weight, 0.5 * (0.1 * w0 + 0.9 * w1) + 0.5 * live.weight)
    # The live weights are untouched and the average needs no gradients.
    assert torch.equal(live.weight, w1 + 1.0)
    assert not any(p.requires_grad for p in avg.model.parameters())


def test_tied_weights_stay_tied_in_the_average():
    cfg = load_config(preset="transformer-tiny")
    model = build(cfg.model, VocabInfo(src_size=40, tgt_size=40))
    assert model.output.weight is model.tgt_embed.weight
    avg = WeightAverage(model, decay=0.9)
    assert avg.model.output.weight is avg.model.tgt_embed.weight
    with torch.no_grad():
        model.tgt_embed.weight.mul_(2.0)
    avg.update(50)
    torch.testing.assert_close(avg.model.output.weight, avg.model.tgt_embed.weight)
    assert not torch.equal(avg.model.output.weight, model.output.weight)


def test_state_round_trip():
    live = nn.Linear(4, 4)
    a, b = WeightAverage(live, 0.99), WeightAverage(nn.Linear(4, 4), 0.99)
    b.load_state_dict(a.state_dict())
    pairs = zip(a.model.parameters(), b.model.parameters(), strict=True)
    assert all(torch.equal(x, y) for x, y in pairs)
