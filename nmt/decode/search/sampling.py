"""How sampling draws a token: the `Sampling` settings (nmt.decode.options) applied to one step's
log-probabilities, at uniforms that are a function of (seed, key, step, sample) only."""

from __future__ import annotations

from typing import Any

import torch

from nmt.decode.options import Sampling
from nmt.decode.search.topk import topk_rows


def draw(sampling: Sampling, lp: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Token ids (n,) drawn from the rows of lp (n, V) by inverse CDF at uniforms u (n,)."""
    temperature, top_k, top_p = sampling.temperature, sampling.top_k, sampling.top_p
    logits = lp.float() / temperature if temperature != 1.0 else lp.float()
    vocab = logits.size(1)
    if 0 < top_k < vocab:  # the k best, renormalized (then top-p among them)
        values, idx = topk_rows(logits, top_k)
        return _inverse_cdf(torch.softmax(values, 1), idx, u, top_p)
    if top_p >= 1.0:
        return _inverse_cdf(torch.softmax(logits, 1), None, u, 1.0)
    return _nucleus(logits, u, top_p)


def _nucleus(logits: torch.Tensor, u: torch.Tensor, top_p: float) -> torch.Tensor:
    """Top-p over the whole row without sorting it: the best 8 tokens, then 64, then all,
    each row stopping at the first set that holds top_p of its probability (a full sort of
    (rows, 8k) costs ~60x a top-8 on a CPU, and most rows need only a few tokens)."""
    vocab, n = logits.size(1), logits.size(0)
    lse = torch.logsumexp(logits, 1, keepdim=True)  # (n, 1)
    tok = torch.empty(n, dtype=torch.long, device=logits.device)
    rows = torch.arange(n, device=logits.device)
    for k in (8, 64, vocab):
        sub = logits[rows]
        values, idx = topk_rows(sub, k) if k < vocab else sub.sort(1, descending=True)
        probs = (values - lse[rows]).exp()  # of the whole row
        held = probs.sum(1) >= top_p if k < vocab else torch.ones_like(rows, dtype=torch.bool)
        done = rows[held]
        if done.numel():
            tok[done] = _inverse_cdf(probs[held], idx[held], u[done], top_p)
        rows = rows[~held]
        if not rows.numel():
            break
    return tok


def _inverse_cdf(
    probs: torch.Tensor, idx: torch.Tensor | None, u: torch.Tensor, top_p: float
) -> torch.Tensor:
    """The token (n,) where the cumulative probability first passes u (scaled to the mass
    kept); probs (n, k) best first when cut to the top-p nucleus; idx (n, k) their ids."""
    if top_p < 1.0:  # keep the best tokens until their mass reaches top_p
        probs = probs * ((probs.cumsum(1) - probs) < top_p)
    cdf = probs.double().cumsum(1)  # (n, k)
    target = (u.to(cdf) * cdf[:, -1]).unsqueeze(1)  # (n, 1) within the kept mass
    pos = torch.searchsorted(cdf, target, right=True).clamp(max=cdf.size(1) - 1)  # (n, 1)
    return (pos if idx is None else idx.gather(1, pos)).squeeze(1)


MASK32 = 0xFFFFFFFF


def _hash32(x: Any) -> Any:
    """A 32-bit integer mix (an int, or an int64 tensor of values below 2**32): every input bit
    moves every output bit; products stay under 2**59, so int64 never overflows."""
    x = ((x >> 16) ^ x) * 0x45D9F3B & MASK32
    x = ((x >> 16) ^ x) * 0x45D9F3B & MASK32
    return (x >> 16) ^ x


def uniforms(
    seed: int, keys: torch.Tensor, t: int, samples: torch.Tensor | None = None
) -> torch.Tensor:
    """One uniform in (0, 1) per key (n,) at step t: a function of (seed, key, t, sample) only;
    sample 0 (or none) draws as a single sample of that key does (hash32(0) is 0)."""
    salt = _hash32(_hash32(seed & MASK32) ^ (t & MASK32))
    x = _hash32(keys.long() & MASK32) ^ salt
    if samples is not None:
        x = x ^ _hash32(samples.long() & MASK32)
    return (_hash32(x).double() + 0.5) / 2.0**32
