"""Teacher-forced scoring of given target ids: the log-probability of each token and of eos.

One pass per batch of pairs, no search, in the layout training and validation use; equal to the
search's log-probability of the same tokens (tested). `nmt rescore` reads it through an engine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from nmt.data.batching import collate, source_batches
from nmt.models.base import Decoder


def score_ids(
    model: Decoder,
    device: torch.device,
    autocast: Callable[[], Any],
    src: list[list[int]],
    tgt: list[list[int]],
    batch_tokens: int,
) -> list[list[float]]:
    """Per pair of subword ids (no eos), the log-probability of each target token and of eos,
    in input order; pairs are batched longest first by padded tokens."""
    width = np.array([max(len(s), len(t)) for s, t in zip(src, tgt, strict=True)])
    results: list[list[float]] = [[] for _ in src]
    for batch in source_batches(width, batch_tokens):  # longest first, rows x (longest + 1) tokens
        rows = batch.tolist()
        for i, lp in zip(rows, _score_batch(model, device, autocast, src, tgt, rows), strict=True):
            results[i] = lp
    return results


def _score_batch(
    model: Decoder,
    device: torch.device,
    autocast: Callable[[], Any],
    src: list[list[int]],
    tgt: list[list[int]],
    batch: list[int],
) -> list[list[float]]:
    """Per pair of the batch, the log-probability of each target token and of eos."""
    b = collate(src, tgt, batch, ids=model.vocab).to(device)  # training's layout, the model's ids
    with torch.inference_mode(), autocast():
        logits = model.forward(b.src, b.src_lengths, b.tgt_in).float()  # (B, T, V)
        gold = logits.gather(2, b.tgt_out.unsqueeze(2)).squeeze(2)  # (B, T)
        lp = (gold - torch.logsumexp(logits, 2)).tolist()
    return [row[: len(tgt[i]) + 1] for i, row in zip(batch, lp, strict=True)]
