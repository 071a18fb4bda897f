"""Top-k and argmax over vocabulary-wide rows, in two stages on CPU (block maxima first): what
beam search ranks with, greedy search picks with and sampling cuts with."""

from __future__ import annotations

import torch

BLOCK = 64  # columns per block of the two-stage top-k / argmax over a vocabulary-wide row


def _blocks(x: torch.Tensor) -> int:
    """How many whole BLOCK-column blocks the two-stage search uses on x (0: not worth it)."""
    if x.device.type != "cpu" or x.dim() != 2 or x.stride(1) != 1 or x.size(1) < 8 * BLOCK:
        return 0
    return x.size(1) // BLOCK


def topk_rows(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x.topk(k, dim=1) (values sorted, best first) for x (rows, N), in two stages on CPU.

    torch.topk and max-with-index scan every element through a heap or an index compare; a
    plain max per 64-column block is several times cheaper. Every one of the k best elements
    lies in a block whose maximum is among the k best block maxima, so topk over those k blocks
    (and the ragged tail) is exact; only the order of exactly equal values may differ.
    """
    m = _blocks(x)
    if m < 2 * k:
        return x.topk(k, dim=1)
    rows, n = x.shape
    block_max = x[:, : m * BLOCK].view(rows, m, BLOCK).amax(-1)  # (rows, m)
    best = block_max.topk(k, dim=1).indices  # (rows, k)
    cols = torch.arange(BLOCK, device=x.device)
    idx = (best.unsqueeze(-1) * BLOCK + cols).view(rows, k * BLOCK)  # (rows, k*BLOCK)
    if m * BLOCK < n:  # the ragged tail always competes
        tail = torch.arange(m * BLOCK, n, device=x.device).expand(rows, -1)
        idx = torch.cat([idx, tail], 1)
    values, pos = x.gather(1, idx).topk(k, dim=1)
    return values, idx.gather(1, pos)


def max_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x.max(dim=1) for x (rows, N): the same values and first-occurrence indices, found
    through block maxima on CPU (see topk_rows)."""
    m = _blocks(x)
    if not m:
        return x.max(dim=1)
    rows, n = x.shape
    block_max = x[:, : m * BLOCK].view(rows, m, BLOCK).amax(-1)  # (rows, m)
    block = block_max.argmax(-1, keepdim=True)  # (rows, 1) the first best block
    idx = block * BLOCK + torch.arange(BLOCK, device=x.device)  # (rows, BLOCK)
    values, pos = x.gather(1, idx).max(dim=1)
    index = idx.gather(1, pos.unsqueeze(1)).squeeze(1)
    if m * BLOCK < n:  # a ragged tail wins only when strictly greater (first occurrence)
        tail_values, tail_pos = x[:, m * BLOCK :].max(dim=1)
        later = tail_values > values
        values = torch.where(later, tail_values, values)
        index = torch.where(later, tail_pos + m * BLOCK, index)
    return values, index
