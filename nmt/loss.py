"""Label-smoothed cross entropy that ignores padding (learning-rate schedules: nmt.schedule).

Smoothing spreads `eps` uniformly over the whole vocabulary (as torch's
`cross_entropy(label_smoothing=eps)` does): loss = (1 - eps) * nll + eps * mean_v(-log p_v).
Both sums are returned so training can log the true NLL (perplexity) next to the loss.
"""

from __future__ import annotations

import torch

from nmt.models.base import PAD_ID


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
    logits: torch.Tensor, target: torch.Tensor, eps: float, pad_id: int = PAD_ID
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Summed smoothed loss and summed NLL over non-pad targets, and their count.

    logits: (B, T, V) any float dtype (computed in float32); target: (B, T) long.
    """
    flat = logits.float().reshape(-1, logits.size(-1))  # (N, V)
    target = target.reshape(-1)  # (N,)
    mask = target != pad_id  # (N,)
    loss, nll_sum = _SmoothedNLL.apply(flat, target, mask, float(eps))
    return loss, nll_sum.detach(), int(mask.sum())
