"""Label-smoothed cross entropy that ignores padding (learning-rate schedules: nmt.train.schedule).

Training uses `LossHead`: the output projection and the loss fused and chunked over non-pad rows,
so neither the (N, V) logits nor their float32 copy exists for the whole batch (on an 8k
vocabulary that was the largest tensor of a step, and in bf16 the cast and the float32
log-softmax were much of the time outside matrix products).

Smoothing spreads `eps` uniformly over the whole vocabulary (as torch's
`cross_entropy(label_smoothing=eps)` does): loss = (1 - eps) * nll + eps * mean_v(-log p_v).
Both sums are returned so training can log the true NLL (perplexity) next to the loss.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import nn

from nmt.models.base import Trainable

# Rows of logits alive at once: (512, 8k) float32 is 16 MB. Over 32 MB, glibc's malloc maps every
# block afresh and the first touch of each page faults (1024 rows was slower).
CHUNK_ROWS = 512


class _SmoothedNLL(torch.autograd.Function):
    """Fused loss: one log-softmax pass forward, one (softmax - q) pass backward.

    Autograd through log_softmax, gather and mean makes about six passes over the (N, V)
    logits; on CPU that was ~10% of a transformer-small step.
    """

    @staticmethod
    def forward(ctx, logits, target, mask, eps):  # logits (N, V) float32; target, mask (N,)
        lprobs = torch.log_softmax(logits, dim=-1)  # (N, V)
        nll = -lprobs.gather(1, target.unsqueeze(1)).squeeze(1)  # (N,)
        nll = nll.masked_fill(~mask, 0.0)
        loss = (1.0 - eps) * nll.sum()
        if eps > 0:
            smooth = lprobs.sum(dim=-1).masked_fill(~mask, 0.0)  # (N,)
            loss = loss - eps / logits.size(-1) * smooth.sum()
        ctx.save_for_backward(lprobs, target, mask)
        ctx.eps, ctx.done = eps, False
        return loss, nll.sum()

    @staticmethod
    def backward(ctx, grad_loss, _grad_nll):
        if ctx.done:
            raise RuntimeError("label_smoothed_nll: backward through the same loss twice")
        ctx.done = True
        lprobs, target, mask = ctx.saved_tensors
        eps = ctx.eps
        grad = lprobs.exp_()  # (N, V) softmax, reusing the saved buffer
        if eps > 0:
            grad.sub_(eps / grad.size(-1))
        grad.scatter_add_(
            1, target.unsqueeze(1), torch.full_like(grad[:, :1], -(1.0 - eps))
        )  # softmax - q, q = (1 - eps) onehot + eps / V
        grad.mul_((mask.to(grad.dtype) * grad_loss).unsqueeze(1))
        return grad, None, None, None


def label_smoothed_nll(
    logits: torch.Tensor, target: torch.Tensor, eps: float, pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Summed smoothed loss and summed NLL over non-pad targets, and their count.

    logits: (B, T, V) any float dtype (computed in float32); target: (B, T) long.
    """
    flat = logits.float().reshape(-1, logits.size(-1))  # (N, V)
    target = target.reshape(-1)  # (N,)
    mask = target != pad_id  # (N,)
    loss, nll_sum = _SmoothedNLL.apply(flat, target, mask, float(eps))
    return loss, nll_sum.detach(), int(mask.sum())


class _Workspace:
    """The (chunk, V) buffers of one loss call, allocated once and reused by every chunk: a
    fresh 16 MB tensor per chunk cost page faults that took longer than the softmax itself."""

    def __init__(self, rows: int, weight: torch.Tensor, dtype: torch.dtype) -> None:
        (vocab, d), device, f32 = weight.shape, weight.device, torch.float32
        self.logits = torch.empty(rows, vocab, dtype=dtype, device=device)
        self.p = self.logits if dtype == f32 else torch.empty(rows, vocab, dtype=f32, device=device)
        self.g = self.p if dtype == f32 else self.logits  # logits are dead once p is made
        self.grad_w = None if dtype == f32 else torch.empty(vocab, d, dtype=dtype, device=device)

    def views(self, rows: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Logits (compute dtype), probabilities (float32) and gradient (compute dtype)."""
        return self.logits[:rows], self.p[:rows], self.g[:rows]


class _LinearSmoothedNLL(torch.autograd.Function):
    """Projection + smoothed loss, chunk by chunk; the gradients are made in the forward pass.

    Per chunk: logits = h W^T in the compute dtype, softmax in float32, then the gradient
    (p - q) projected back at once, so only (chunk, V) floats live at a time. With
    q = (1 - eps) onehot + eps / V, only p and the onehot part touch (chunk, V) tensors: the
    uniform eps / V part and the smoothing term of the loss are rank-one, done on (d,) vectors
    (sum_v log p_v = h . sum_v w_v - V lse). The log-normaliser comes from the softmax itself:
    lse = max logit - log max p (max p >= 1 / V, so it never underflows). That leaves four
    passes over each (chunk, V) block besides the two matmuls that read it (a log-softmax and
    its gradient made about twelve, and they were 40% of a bf16 step on CPU).
    Backward just scales the stored gradients by the incoming one (the loss is a sum).
    """

    @staticmethod
    def forward(
        ctx, hidden, weight, target, eps, dtype, bias, frozen
    ):  # hidden (N, d); weight (V, d); target (N,); bias (V,) or None; frozen: a row or None
        with torch.autocast(hidden.device.type, enabled=False):
            h_all, w = hidden.to(dtype), weight.to(dtype)
            b = None if bias is None else bias.to(dtype)
            vocab = weight.size(0)
            w_sum = weight.float().sum(0)  # (d,): sum_v w_v, for the rank-one terms
            h32 = hidden.float()  # (N, d); a no-op when hidden is already float32
            sum_logits = h32 @ w_sum if eps > 0 else None  # (N,): sum_v logits_v per row
            if sum_logits is not None and bias is not None:
                sum_logits += bias.float().sum()
            grad_h = torch.empty(hidden.shape, dtype=torch.float32, device=hidden.device)
            grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
            loss = torch.zeros((), dtype=torch.float32, device=hidden.device)
            nll = torch.zeros_like(loss)
            work = _Workspace(min(CHUNK_ROWS, hidden.size(0)), weight, dtype)
            for s in range(0, hidden.size(0), CHUNK_ROWS):
                h, t = h_all[s : s + CHUNK_ROWS], target[s : s + CHUNK_ROWS, None]
                logits, p, g = work.views(h.size(0))
                torch.mm(h, w.t(), out=logits)  # (c, V) in the compute dtype
                if b is not None:
                    logits.add_(b)  # the fixed output bias (an imported model's)
                top = logits.amax(dim=-1).float()  # (c,)
                chunk_nll = -logits.gather(1, t).squeeze(1).float()  # (c,), lse added below
                if p is not logits:
                    p.copy_(logits)
                torch.ops.aten._softmax.out(p, -1, False, out=p)  # in place, float32
                lse = top - p.amax(dim=-1).log()  # (c,)
                chunk_nll = (chunk_nll + lse).sum()
                nll += chunk_nll
                loss += (1.0 - eps) * chunk_nll
                if sum_logits is not None:  # eps * mean_v(-log p_v), summed over rows
                    loss += eps / vocab * (vocab * lse - sum_logits[s : s + CHUNK_ROWS]).sum()
                p.scatter_add_(1, t, torch.full_like(p[:, :1], -(1.0 - eps)))  # p - onehot part
                if g is not p:
                    g.copy_(p)
                if dtype == torch.float32:
                    torch.mm(g, w, out=grad_h[s : s + CHUNK_ROWS])
                    grad_w.addmm_(g.t(), h)
                else:
                    grad_h[s : s + CHUNK_ROWS] = torch.mm(g, w)
                    grad_w.add_(torch.mm(g.t(), h, out=work.grad_w))
            if eps > 0:  # the uniform eps / V part of q, rank one
                grad_h -= eps / vocab * w_sum
                grad_w -= eps / vocab * h32.sum(0)
            if frozen is not None:  # the <pad> row: never a target, never emitted, kept as it is
                grad_w[frozen] = 0.0
        ctx.save_for_backward(grad_h.to(hidden.dtype), grad_w.to(weight.dtype))
        ctx.done = False
        return loss, nll

    @staticmethod
    def backward(ctx, grad_loss, _grad_nll):
        if ctx.done:
            raise RuntimeError("linear_smoothed_nll: backward through the same loss twice")
        ctx.done = True
        grad_h, grad_w = ctx.saved_tensors
        return grad_h.mul_(grad_loss), grad_w.mul_(grad_loss), None, None, None, None, None


def compute_dtype_now(device_type: str, fallback: torch.dtype) -> torch.dtype:
    """The dtype autocast would run a matmul in here, or `fallback` outside autocast."""
    if torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return fallback


def linear_smoothed_nll(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    eps: float,
    pad_id: int,
    bias: torch.Tensor | None = None,
    freeze_pad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """`label_smoothed_nll(hidden @ weight.T + bias, target, eps)` without the whole logits tensor.

    hidden: (B, T, d) decoder features; weight: (V, d) output matrix; bias: a fixed (V,) output
    bias (no gradient) or None; padding rows are skipped before the projection (no FLOPs on
    them). `freeze_pad`: no gradient for weight's `pad_id` row, so a `<pad>` embedding tied to
    the output stays zero. Matmuls run in the autocast dtype, softmax in fp32.
    """
    flat = hidden.reshape(-1, hidden.size(-1))
    target = target.reshape(-1)
    mask = target != pad_id
    rows = flat[mask]  # (N, d) non-pad rows only
    dtype = compute_dtype_now(hidden.device.type, weight.dtype)
    frozen = pad_id if freeze_pad else None
    fixed = None if bias is None else bias.detach()
    loss, nll = _LinearSmoothedNLL.apply(
        rows, weight, target[mask], float(eps), dtype, fixed, frozen
    )
    return loss, nll.detach(), int(rows.size(0))


def chunked_nll(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    pad_id: int,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, int]:
    """Summed NLL of the non-pad targets and their count, CHUNK_ROWS rows of logits at a time
    (with a fixed output `bias`, an imported model's):
    validation's loss without gradients or the whole (B, T, V) logits (with their float32 copy
    and log-softmax, about 400 MB a batch of 4,096 tokens at 8k vocabulary)."""
    target = target.reshape(-1)
    mask = target != pad_id
    rows, gold = hidden.reshape(-1, hidden.size(-1))[mask], target[mask]
    total = torch.zeros((), dtype=torch.float32, device=hidden.device)
    for s in range(0, rows.size(0), CHUNK_ROWS):
        logits = nn.functional.linear(rows[s : s + CHUNK_ROWS], weight)  # autocast dtype
        logits = (logits if bias is None else logits + bias.to(logits.dtype)).float()
        picked = logits.gather(1, gold[s : s + CHUNK_ROWS, None]).squeeze(1)
        total += (torch.logsumexp(logits, dim=-1) - picked).sum()
    return total, int(rows.size(0))


class LossHead(nn.Module):
    """The training forward: model features -> fused projection + loss, in one module.

    The model's pad id is ignored as a target, its fixed `output_bias` (an imported model's)
    added to the logits. Wrapping the model (no copy of it) lets DDP and torch.compile see one forward that ends in
    the loss. The model is a `Trainable` (nmt.models.base): every registered architecture.
    """

    def __init__(self, model: nn.Module, eps: float, pad_id: int, keep_pad: bool = False) -> None:
        super().__init__()
        self.model, self.eps, self.pad_id = model, eps, pad_id
        net = cast(Trainable, model)  # every registered model has what training needs
        # `keep_pad`: an output matrix tied to the embeddings keeps their <pad> row at zero
        # (padding_idx gives it no gradient through the embeddings; the softmax would)
        tied = net.output.weight is net.tgt_embed.weight
        self.freeze_pad = keep_pad and tied

    def forward(
        self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor, tgt_out: Any
    ) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Summed smoothed loss, summed NLL (detached) and the target token count."""
        model = cast(Trainable, self.model)
        hidden = model.features(src, src_lengths, tgt_in)  # (B, T, d)
        bias = model.output_bias
        extra: dict[str, Any] = {} if bias is None else {"bias": bias}
        if self.freeze_pad:
            extra["freeze_pad"] = True
        weight = model.output.weight
        return linear_smoothed_nll(hidden, weight, tgt_out, self.eps, self.pad_id, **extra)
