"""Weights packed once for CPU decoding: the vocabulary projection in fp32, every product in bf16.

PyTorch runs an fp32 `nn.Linear` on a CPU through MKL's sgemm, which repacks the weight at
every call. A translator's weights never change, so its vocabulary projection (the largest
matrix product of a decoder step: rows x d_model x 8k) can be packed once into oneDNN's
blocked layout and run through oneDNN's matmul instead. Replaying the projections of a real
test_2016_flickr run (d_model 128, 8k vocabulary, 1 thread, AMD EPYC with AVX-512) took 0.36 s
against MKL's 0.54 s in greedy search and 1.75 against 2.43 s at beam 5, with the same outputs;
the decoder layers' small products stayed faster in MKL. bf16 products already run in
oneDNN, which reorders the plain weight at every call: packed, the same replay's products
took 1.93 against 2.05 s.

Only `nmt.engines.translator.Translator` packs (its model is for inference only); training, validation
and export see plain `nn.Linear` modules.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from nmt.models import Model

ROWS_HINT = 64  # oneDNN's expected row count for the packed layout (16-640 timed alike)


def _pack(weight: torch.Tensor) -> torch.Tensor | None:
    """The weight (out, in) in oneDNN's layout, or None where this PyTorch cannot run it
    (built without oneDNN, or the private operators changed): then MKL it stays."""
    if not torch.backends.mkldnn.is_available():
        return None
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(weight, ROWS_HINT)
        # a fixed probe: loading a model must not draw from the global random stream
        probe = torch.linspace(-1.0, 1.0, 3 * weight.size(1)).view(3, -1).to(weight.dtype)
        got = torch.ops.mkldnn._linear_pointwise(probe, packed, None, "none", [], "")
    except (AttributeError, RuntimeError):
        return None
    tol = 1e-4 if weight.dtype == torch.float32 else 2e-2
    if not torch.allclose(got.float(), F.linear(probe, weight).float(), rtol=tol, atol=tol):
        return None
    return packed


class PackedLinear(nn.Linear):
    """An `nn.Linear` for inference whose weight is also held packed for oneDNN. It shares the
    original's parameters (tied embeddings stay tied, state_dict keys do not change); input
    that needs gradients, another dtype or device, or a weight changed since packing takes
    the plain path."""

    def __init__(self, linear: nn.Linear, packed: torch.Tensor) -> None:
        nn.Module.__init__(self)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias = linear.weight, linear.bias
        self.packed = packed
        # What the packed copy was made from, held so that its storage cannot be freed and its
        # address reused: a weight changed in place (version), or replaced by a cast or move
        # (model.to() swaps .data without bumping the version), takes the plain path.
        self.source = linear.weight.detach()
        self.version = linear.weight._version

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        if (
            x.dtype != w.dtype
            or x.device != w.device
            or (torch.is_grad_enabled() and (x.requires_grad or w.requires_grad))
            or w.data_ptr() != self.source.data_ptr()
            or w.dtype != self.source.dtype
            or w._version != self.version
            # under autocast an fp32 product must become a bf16 one: leave that to F.linear
            or (w.dtype == torch.float32 and torch.is_autocast_enabled(x.device.type))
        ):
            return F.linear(x, w, self.bias)
        bias = None if self.bias is None else self.bias.detach()
        flat = x.reshape(-1, x.size(-1))
        y = torch.ops.mkldnn._linear_pointwise(flat, self.packed, bias, "none", [], "")
        return y.view(*x.shape[:-1], y.size(-1))


def pack_for_decoding(model: Model) -> int:
    """Pack a CPU model's products for decoding; how many. fp32: only `model.output` (the
    vocabulary projection of both architectures: MKL ran the decoder layers' small products
    faster than oneDNN); bf16 weights: every `nn.Linear`, since oneDNN runs bf16 products
    anyway and packing spares it reordering the weight at every call (1.06-1.10x). The packed
    copies are held beside the weights (for the plain path): twice their memory. A model that
    decodes under autocast with fp32 weights (Seq2Seq in bf16) gains nothing: its products take
    the plain path, so `Translator.from_dir` does not pack it."""
    out = model.output
    targets: list[tuple[nn.Module, str, nn.Linear]]
    if type(out) is nn.Linear and out.weight.dtype == torch.float32:
        targets = [(model, "output", out)]
    else:
        targets = [
            (parent, name, child)
            for parent in model.modules()
            for name, child in parent.named_children()
            if type(child) is nn.Linear and child.weight.dtype == torch.bfloat16
        ]
    done = 0
    for parent, name, linear in targets:
        if linear.weight.device.type != "cpu":
            continue
        with torch.no_grad():
            packed = _pack(linear.weight.detach())
        if packed is None:
            return done
        setattr(parent, name, PackedLinear(linear, packed))
        done += 1
    return done
