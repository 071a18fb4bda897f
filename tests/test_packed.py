"""The packed vocabulary projection (nmt.engines.packed): the same numbers as nn.Linear, the
plain path wherever packing would be wrong, and translations that do not change."""

from __future__ import annotations

import pytest
import torch
from test_translate import build_tiny_model_dir, synthetic_lines
from torch import nn

from nmt.dirs import ModelDir
from nmt.engines.packed import PackedLinear, _pack, pack_for_decoding
from nmt.engines.translator import Translator

needs_onednn = pytest.mark.skipif(
    _pack(torch.randn(8, 4)) is None, reason="this PyTorch cannot run oneDNN's packed matmul"
)


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    """test_translate's tiny random Transformer."""
    return build_tiny_model_dir(tmp_path_factory.mktemp("packed"))


class Tied(nn.Module):
    """The shape both architectures have: an output projection tied to the embeddings."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.output = nn.Linear(16, 50, bias=False)
        self.output.weight = self.embed.weight


@needs_onednn
def test_packed_projection_matches_linear_and_keeps_the_tie():
    torch.manual_seed(0)
    model = Tied()
    plain = model.output
    keys = list(model.state_dict())
    assert pack_for_decoding(model)
    assert isinstance(model.output, PackedLinear) and model.output.weight is model.embed.weight
    assert list(model.state_dict()) == keys
    x = torch.randn(7, 3, 16)
    with torch.inference_mode():
        got, want = model.output(x), plain(x)
    assert got.shape == (7, 3, 50)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert not pack_for_decoding(model)  # packed once


@needs_onednn
def test_packed_projection_takes_the_plain_path_when_packing_would_be_wrong():
    torch.manual_seed(0)
    model = Tied()
    pack_for_decoding(model)
    x = torch.randn(4, 16)
    y = model.output(x)  # grad enabled, weight requires grad: autograd must see the product
    y.sum().backward()
    assert model.embed.weight.grad is not None
    with torch.no_grad():
        model.embed.weight.mul_(2.0)  # changed after packing: the packed copy is stale
        torch.testing.assert_close(model.output(x), x @ model.embed.weight.t())
    model.to(torch.float64)  # swaps .data: the packed fp32 copy must not be used
    with torch.inference_mode():
        y = model.output(x.double())
    assert y.dtype == torch.float64
    torch.testing.assert_close(y, x.double() @ model.embed.weight.t())


def test_what_gets_packed():
    class Two(Tied):
        def __init__(self) -> None:
            super().__init__()
            self.inner = nn.Sequential(nn.Linear(16, 16), nn.ReLU())

    assert pack_for_decoding(Two().double()) == 0  # neither fp32 nor bf16
    if _pack(torch.randn(8, 4)) is None:
        return
    fp32 = Two()
    assert pack_for_decoding(fp32) == 1  # fp32: the vocabulary projection only
    assert type(fp32.inner[0]) is nn.Linear
    bf16 = Two().to(torch.bfloat16)
    if _pack(torch.randn(8, 4).to(torch.bfloat16)) is not None:
        assert pack_for_decoding(bf16) == 2  # bf16: every product
        assert isinstance(bf16.inner[0], PackedLinear)


@needs_onednn
@pytest.mark.filterwarnings("ignore:this CPU has no native bf16")
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_translations_are_those_of_the_plain_products(tiny_model_dir, monkeypatch, precision):
    if precision == "bf16" and _pack(torch.randn(8, 4).to(torch.bfloat16)) is None:
        pytest.skip("this PyTorch cannot run oneDNN's packed bf16 matmul here")
    lines = synthetic_lines(40, seed=5)
    packed = Translator.from_dir(
        ModelDir(tiny_model_dir), device="cpu", workers=1, precision=precision
    )
    assert isinstance(packed.model.output, PackedLinear)
    monkeypatch.setattr("nmt.engines.translator.pack_for_decoding", lambda model: 0)
    plain = Translator.from_dir(
        ModelDir(tiny_model_dir), device="cpu", workers=1, precision=precision
    )
    assert type(plain.model.output) is nn.Linear
    for opts in ({"greedy": True}, {"beam_size": 4, "nbest": 2}):
        a, b = packed.translate(lines, **opts), plain.translate(lines, **opts)
        assert [t.text for t in a] == [t.text for t in b]
        for s, t in zip(a, b, strict=True):
            assert [h.score for h in s.hypotheses] == pytest.approx(
                [h.score for h in t.hypotheses], abs=1e-4
            )


@needs_onednn
def test_packing_draws_nothing_from_the_global_random_stream():
    model = Tied()
    torch.manual_seed(5)
    assert pack_for_decoding(model) == 1
    drawn = torch.rand(3)
    torch.manual_seed(5)
    assert torch.equal(torch.rand(3), drawn)
