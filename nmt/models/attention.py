"""Attention: additive (Bahdanau), Luong dot / general for the RNN model, multi-head for the
Transformer. Every variant gives padded source positions exactly zero weight."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from nmt.models.dropout import dropout


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Softmax in float32 where masked-out (False) positions get exactly zero weight."""
    scores = scores.float()
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(dim=-1)


class RNNAttention(nn.Module):
    """Shared shape of the RNN attentions: keys are prepared once per sentence, then each
    decoder step scores one query against them.

        proj = attn.project_keys(keys)                     # keys (B, S, K) -> proj (B, S, *)
        context, weights = attn(query, proj, values, mask)  # query (B, Q), values (B, S, K)
                                                            # -> context (B, K), weights (B, S)
    """

    def project_keys(self, keys: torch.Tensor) -> torch.Tensor:
        """Per-sentence key preparation, hoisted out of the decoder loop."""
        raise NotImplementedError

    def score(self, query: torch.Tensor, proj_keys: torch.Tensor) -> torch.Tensor:
        """Unnormalised scores (B, S) of one query per row."""
        raise NotImplementedError

    def forward(
        self,
        query: torch.Tensor,
        proj_keys: torch.Tensor,
        values: torch.Tensor,
        mask: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Context vector and attention weights; `mask` (B, S) is True on real tokens."""
        weights = masked_softmax(self.score(query, proj_keys), mask)  # (B, S) float32
        context = torch.bmm(weights.to(values.dtype).unsqueeze(1), values).squeeze(1)  # (B, K)
        return context, weights


class AdditiveAttention(RNNAttention):
    """Bahdanau et al. (2015): score(q, k) = v^T tanh(W_q q + W_k k)."""

    def __init__(self, query_dim: int, key_dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.query_proj = nn.Linear(query_dim, hidden_dim, bias=False)
        self.key_proj = nn.Linear(key_dim, hidden_dim, bias=True)
        self.v = nn.Linear(hidden_dim, 1, bias=False)

    def project_keys(self, keys: torch.Tensor) -> torch.Tensor:
        """W_k k for every source position, once per sentence."""
        return self.key_proj(keys)  # (B, S, A)

    def score(self, query: torch.Tensor, proj_keys: torch.Tensor) -> torch.Tensor:
        """v^T tanh(W_q q + W_k k)."""
        q = self.query_proj(query).unsqueeze(1)  # (B, 1, A)
        return self.v(torch.tanh(q + proj_keys)).squeeze(-1)  # (B, S)


class DotAttention(RNNAttention):
    """Luong et al. (2015) dot: score(q, k) = q^T k; query and key sizes must match."""

    def __init__(self, query_dim: int, key_dim: int) -> None:
        super().__init__()
        if query_dim != key_dim:
            raise ValueError(f"dot attention needs equal sizes, got {query_dim} and {key_dim}")

    def project_keys(self, keys: torch.Tensor) -> torch.Tensor:
        """Dot attention scores the raw keys."""
        return keys  # (B, S, K)

    def score(self, query: torch.Tensor, proj_keys: torch.Tensor) -> torch.Tensor:
        """q^T k."""
        return torch.bmm(proj_keys, query.unsqueeze(-1)).squeeze(-1)  # (B, S)


class GeneralAttention(DotAttention):
    """Luong et al. (2015) general: score(q, k) = q^T W k, with W k computed once per sentence."""

    def __init__(self, query_dim: int, key_dim: int) -> None:
        nn.Module.__init__(self)
        self.key_proj = nn.Linear(key_dim, query_dim, bias=False)

    def project_keys(self, keys: torch.Tensor) -> torch.Tensor:
        """W k for every source position."""
        return self.key_proj(keys)  # (B, S, Q)


def make_rnn_attention(kind: str, query_dim: int, key_dim: int) -> RNNAttention:
    """The attention named by `model.attention`."""
    if kind == "bahdanau":
        return AdditiveAttention(query_dim, key_dim, query_dim)
    if kind == "dot":
        return DotAttention(query_dim, key_dim)
    if kind == "general":
        return GeneralAttention(query_dim, key_dim)
    raise ValueError(f"unknown attention {kind!r} (choices: bahdanau, dot, general)")


def dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    causal: bool = False,
    dropout_p: float = 0.0,
    need_weights: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Scaled dot-product attention over heads; fused SDPA unless the weights are wanted or
    plain matmuls train faster (CPU training: `plain_matmuls_train_faster`).

    q (B, H, T, D), k / v (B, H, S, D), mask broadcastable to (B, H, T, S), True = may attend.
    `causal` aligns the query and key ends as in training (T == S); not for single steps.
    """
    single = q.size(-2) == 1 and dropout_p == 0.0
    if single and not need_weights:
        # Decoder steps: at one query the fused kernel's setup costs more than plain matmuls.
        return step_attention(q, k, v, mask), None  # (B, H, 1, D)
    if not need_weights and not plain_matmuls_train_faster(q, k, dropout_p):
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=causal
        )
        return out, None  # (B, H, T, D)
    scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(q.size(-1)))  # (B, H, T, S)
    if causal:
        t, s = scores.shape[-2:]
        future = torch.ones(t, s, dtype=torch.bool, device=q.device).tril(s - t)  # (T, S)
        mask = future if mask is None else mask & future
    weights = masked_softmax(scores, mask)  # (B, H, T, S) float32
    out = torch.matmul(dropout(weights, dropout_p).to(v.dtype), v)  # (B, H, T, D)
    return out, weights if need_weights else None


# Up to this many query x key positions per head, CPU training runs attention faster as plain
# matmuls than through SDPA's fused kernel (forward + backward, fp32, torch 2.13, AMD EPYC: 2.4x
# at 16 tokens x Dh 32, 1.3-1.8x at 16-32 tokens x Dh 64, 1.1-1.2x at 64; SDPA wins from 128).
SMALL_ATTENTION = 64 * 64


def plain_matmuls_train_faster(q: torch.Tensor, k: torch.Tensor, dropout_p: float) -> bool:
    """Whether attention with grad on a CPU should skip SDPA: its backward in bf16 / fp16 runs
    5-6x slower than in fp32 (258 x 4 heads x 17 tokens: 70 ms against 13), with dropout it
    falls back to matmuls anyway (with dearer masks than nmt's dropout), and in fp32 its fused
    kernel is slower on short sequences (SMALL_ATTENTION). Elsewhere SDPA is kept."""
    if not (q.requires_grad and q.device.type == "cpu"):
        return False
    short = q.size(-2) * k.size(-2) <= SMALL_ATTENTION
    return q.dtype != torch.float32 or dropout_p > 0.0 or short


# Below this many multiply-adds per (row, head), PyTorch's CPU bmm leaves BLAS for a scalar loop
# (aten's small-matrix path; 400 in torch 2.13), which ran 2-3x slower than elementwise products
# and sums for one query: 640 rows x 4 heads x Dh 32 at 12 cached positions, 2.4 ms against 0.8.
SMALL_PRODUCT = 400


def step_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None
) -> torch.Tensor:
    """Attention for a few queries per row (decoder steps), as plain matmuls: (B, H, Q, D);
    for one query over few keys, as elementwise products and sums (see SMALL_PRODUCT)."""
    scale = 1.0 / math.sqrt(q.size(-1))
    small = q.size(-2) == 1 and k.size(-2) * q.size(-1) < SMALL_PRODUCT
    if small and q.device.type == "cpu" and q.dtype == torch.float32:
        scores = (k * q).sum(-1).unsqueeze(-2).mul_(scale)  # (B, H, 1, S)
        if mask is not None:
            scores.masked_fill_(~mask, float("-inf"))
        weights = last_dim_softmax(scores)  # (B, H, 1, S)
        return (v * weights.transpose(-1, -2)).sum(-2, keepdim=True)  # (B, H, 1, D)
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale  # (B, H, Q, S)
    if mask is not None:
        scores.masked_fill_(~mask, float("-inf"))
    return torch.matmul(last_dim_softmax(scores), v)


# Below this many columns PyTorch's CPU softmax (torch 2.13) leaves its vectorised kernel for a
# path ~5x slower than max, exp, sum and divide as four vectorised passes: (128, 4, 5, 15) took
# 660 us against 125 (1 thread, AMD EPYC); from 16 columns on, the fused kernel is faster.
SHORT_SOFTMAX = 16


def last_dim_softmax(scores: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension, row by row (a row's result never depends on the others);
    short rows on a CPU as separate vectorised passes (see SHORT_SOFTMAX). Consumes `scores`."""
    if (
        scores.size(-1) >= SHORT_SOFTMAX
        or scores.device.type != "cpu"
        or scores.dtype != torch.float32
    ):
        return scores.softmax(dim=-1)
    e = scores.sub_(scores.amax(-1, keepdim=True)).exp_()
    return e.div_(e.sum(-1, keepdim=True))


def time_major_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """One query per row (B, H, 1, Dh) over a time-major cache, keys / values (T, B, H, Dh), as
    elementwise products and sums (accumulated in fp32): (B, H, 1, Dh). For bf16 on a
    CPU: PyTorch's bf16 matmul copies the strided (B, H, T, Dh) view of the cache at every step,
    and 640 rows x 4 heads x Dh 32 at 10 / 20 / 35 positions took 2.2 / 5.1 / 13.5 ms that way
    against 1.2 / 1.7 / 4.4 ms here (1 thread, AMD EPYC with avx512_bf16). fp32
    stays with matmuls, which read the view in place."""
    scale = 1.0 / math.sqrt(q.size(-1))
    # PyTorch's CPU sums of bf16 accumulate in fp32 (a dtype= argument would copy the products)
    scores = (keys * q[:, :, 0]).sum(-1).float().mul_(scale)  # (T, B, H)
    weights = scores.softmax(dim=0).to(values.dtype)
    return (values * weights.unsqueeze(-1)).sum(0).unsqueeze(2)  # (B, H, 1, Dh)


class MultiHeadAttention(nn.Module):
    """Multi-head attention with fused projections: one (d, 3d) matmul for self-attention,
    and for encoder-decoder attention a (d, 2d) key/value projection done once per sentence."""

    def __init__(self, d_model: int, heads: int, dropout: float = 0.0, cross: bool = False):
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model {d_model} is not divisible by heads {heads}")
        self.heads, self.head_dim, self.dropout, self.cross = (
            heads,
            d_model // heads,
            dropout,
            cross,
        )
        if cross:
            self.q_proj = nn.Linear(d_model, d_model)
            self.kv_proj = nn.Linear(d_model, 2 * d_model)
        else:
            self.qkv_proj = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier on each of the q, k, v, out blocks separately (as if they were unfused)."""
        fused = [self.q_proj, self.kv_proj] if self.cross else [self.qkv_proj]
        with torch.no_grad():
            for lin in [*fused, self.out_proj]:
                for block in lin.weight.split(lin.in_features, dim=0):
                    nn.init.xavier_uniform_(block)
                nn.init.zeros_(lin.bias)

    def _split(self, x: torch.Tensor, n: int) -> tuple[torch.Tensor, ...]:
        """(B, T, n*d) -> n tensors (B, H, T, Dh)."""
        b, t, _ = x.shape
        return x.view(b, t, n, self.heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)

    def _merge(self, x: torch.Tensor) -> torch.Tensor:
        """(B, H, T, Dh) -> (B, T, d) through the output projection."""
        b, _, t, _ = x.shape
        return self.out_proj.forward(x.transpose(1, 2).reshape(b, t, -1))  # no hooks: cheaper

    def project_kv(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Encoder-decoder keys and values (B, H, S, Dh), computed once per sentence."""
        k, v = self._split(self.kv_proj(memory), 2)
        # Contiguous once here, or attention would copy them again at every decoder step.
        return k.contiguous(), v.contiguous()

    def forward(
        self,
        x: torch.Tensor,
        kv: tuple[torch.Tensor, torch.Tensor] | None = None,
        mask: torch.Tensor | None = None,
        causal: bool = False,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend from x (B, T, d): over itself, or over precomputed cross keys/values `kv`."""
        if self.cross:
            if kv is None:
                raise ValueError("cross-attention needs the encoder keys and values (kv)")
            (q,) = self._split(self.q_proj.forward(x), 1)
            k, v = kv
        else:
            q, k, v = self._split(self.qkv_proj.forward(x), 3)
        p = self.dropout if self.training else 0.0
        out, weights = dot_product_attention(q, k, v, mask, causal, p, need_weights)
        return self._merge(out), weights

    def step_cross(
        self,
        x: torch.Tensor,
        kv: tuple[torch.Tensor, torch.Tensor],
        mask: torch.Tensor | None,
        group: int,
        need_weights: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One decoder step of encoder-decoder attention from x (n * group, 1, d) over keys /
        values (n, H, S, Dh) that each `group` consecutive rows share: their queries are
        scored together, (n, H, group, S), one product per sentence instead of per row."""
        if group == 1:
            return self.forward(x, kv=kv, mask=mask, need_weights=need_weights)
        rows, d = x.size(0), x.size(-1)
        q = self.q_proj.forward(x).view(rows // group, group, self.heads, self.head_dim)
        q = q.transpose(1, 2)
        k, v = kv  # (n, H, S, Dh)
        if not need_weights:
            out = step_attention(q, k, v, mask)  # (n, H, group, Dh)
            return self.out_proj.forward(out.transpose(1, 2).reshape(rows, 1, d)), None
        out, weights = dot_product_attention(q, k, v, mask, need_weights=True)
        assert weights is not None  # (n, H, group, S)
        weights = weights.transpose(1, 2).reshape(rows, self.heads, 1, -1)  # (rows, H, 1, S)
        return self.out_proj.forward(out.transpose(1, 2).reshape(rows, 1, d)), weights

    def step(self, x: torch.Tensor, cache: torch.Tensor, t: int) -> torch.Tensor:
        """One incremental self-attention step from x (B, 1, d) at position t.

        `cache` (capacity, 2, B, H, Dh) is a preallocated position-major cache, keys at [:, 0]
        and values at [:, 1]: this step's key and value are written in place at position t (one
        copy), and attention reads positions 0..t as (B, H, t + 1, Dh) views (no copy, no
        growing tensor).
        """
        b = x.size(0)
        qkv = self.qkv_proj.forward(x).view(b, 3, self.heads, self.head_dim)
        cache[t] = qkv[:, 1:].transpose(0, 1)  # (2, B, H, Dh)
        q = qkv[:, 0].unsqueeze(2)  # (B, H, 1, Dh)
        keys, values = cache[: t + 1].unbind(1)  # (t + 1, B, H, Dh) each
        if q.device.type == "cpu" and q.dtype == torch.bfloat16:
            return self._merge(time_major_attention(q, keys, values))
        out, _ = dot_product_attention(q, keys.permute(1, 2, 0, 3), values.permute(1, 2, 0, 3))
        return self._merge(out)
