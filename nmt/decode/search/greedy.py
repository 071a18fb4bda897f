"""Greedy search and sampling: one token per row a step, the best one or a drawn one, through one
loop (`token_by_token`); one result per row."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from nmt.decode.engine import gnmt_length_penalty
from nmt.decode.options import OptionError, ResolvedOptions
from nmt.decode.search.rows import (
    RETIRE_EVERY,
    GreedyRows,
    Hypothesis,
    Start,
    append_attention,
    make_hypothesis,
    mask_step,
    start_search,
)
from nmt.decode.search.sampling import draw, uniforms
from nmt.decode.search.topk import max_rows
from nmt.models.base import Decoder


@torch.inference_mode()
def greedy_search(
    model: Decoder,
    src: torch.Tensor,
    src_lengths: torch.Tensor,
    options: ResolvedOptions | None = None,
) -> list[Hypothesis]:
    """Pick the most likely token each step; one Hypothesis per sentence, in input order.

    The length penalty only normalizes the reported score; it never changes the choice.
    `options.scores` False picks from raw logits (the same tokens without a log-softmax pass
    over the vocabulary each step) and reports NaN scores: for output that prints none.
    """
    opts = options or ResolvedOptions()

    def best(lp: torch.Tensor, origin: torch.Tensor, t: int) -> tuple[torch.Tensor, torch.Tensor]:
        return max_rows(lp)

    start = start_search(model, src, src_lengths, opts)
    return token_by_token(model, start, best, opts, opts.scores)


@torch.inference_mode()
def sample_search(
    model: Decoder,
    src: torch.Tensor,
    src_lengths: torch.Tensor,
    keys: torch.Tensor,
    options: ResolvedOptions,
) -> list[list[Hypothesis]]:
    """`options.nbest` sampled translations per sentence, drawn as `options.sampling` says (keys
    (B,): one per sentence; sample j of sentence i draws with (keys[i], j), so sample 0 is what
    one sample draws), best score first. Scores are the model's own log-probabilities of the
    drawn tokens (before temperature and cuts)."""
    sampling, nsamples = options.sampling, options.nbest
    if sampling is None:
        raise OptionError("sample_search needs {sampling} settings")
    if nsamples < 1:
        raise OptionError("{nbest} samples must be at least 1, got {got}", got=nsamples)
    if nsamples > 1:  # each sample is a row of its own (the encoder runs once per row)
        src, src_lengths = (
            src.repeat_interleave(nsamples, 0),
            src_lengths.repeat_interleave(nsamples),
        )
    row_keys = keys.to(src.device).long().repeat_interleave(nsamples)  # (B * nsamples,)
    row_samples = torch.arange(nsamples, device=src.device).repeat(keys.numel())

    def pick(lp: torch.Tensor, origin: torch.Tensor, t: int) -> tuple[torch.Tensor, torch.Tensor]:
        u = uniforms(sampling.seed, row_keys[origin], t, row_samples[origin])
        tok = draw(sampling, lp, u)
        return lp.gather(1, tok.unsqueeze(1)).squeeze(1), tok

    start = start_search(model, src, src_lengths, options)
    hyps = token_by_token(model, start, pick, options, True)
    grouped = [hyps[i : i + nsamples] for i in range(0, len(hyps), nsamples)]
    return [sorted(g, key=lambda h: -h.score) for g in grouped]


# (lp (n, V), origin (n,), step t) -> (chosen log-probs (n,), chosen tokens (n,))
Pick = Callable[[torch.Tensor, torch.Tensor, int], tuple[torch.Tensor, torch.Tensor]]


def token_by_token(
    model: Decoder, start: Start, pick: Pick, options: ResolvedOptions, scores: bool
) -> list[Hypothesis]:
    """Greedy's loop: one token per row per step, chosen by `pick`; one Hypothesis per row
    (`scores` False: no log-probabilities, NaN scores)."""
    need_attn = options.with_attention
    bsz, device = start.prev.size(0), start.prev.device
    rows = GreedyRows(
        origin=torch.arange(bsz, device=device),
        max_len=start.max_len,
        scores=torch.full((bsz,), 0.0 if scores else math.nan, device=device),
        history=torch.empty(bsz, 0, dtype=torch.long, device=device),
        alive=torch.ones(bsz, dtype=torch.bool, device=device),
    )
    results: list[Hypothesis | None] = [None] * bsz
    enc, state, prev, src_len, t = start.enc, start.state, start.prev, start.src_len, 0
    while True:
        lp, state, attn = model.decode_step(prev, enc, state, need_attn, normalize=scores)
        # lp: (n, V) log-probs or logits
        mask_step(lp, t, options, start, rows.at_max(t, 1), rows.history)
        tok_lp, tok = pick(lp, rows.origin, t)  # (n,), (n,)
        if scores:
            rows.scores = rows.scores + tok_lp
        rows.history = torch.cat([rows.history, tok.unsqueeze(1)], 1)
        rows.attn = append_attention(rows.attn, attn if need_attn else None)
        t += 1
        prev = tok
        done = (tok == start.eos) & rows.alive  # (n,)
        if not bool(done.any()):
            continue
        origin, final, toks = rows.origin.tolist(), rows.scores.tolist(), rows.history.tolist()
        lp_norm = gnmt_length_penalty(t, options.length_penalty)
        for r in done.nonzero().squeeze(1).tolist():  # rows that just produced eos
            i = origin[r]
            results[i] = make_hypothesis(
                toks[r][:-1], final[r], lp_norm, rows.attn, r, t, src_len[i]
            )
        rows.alive &= ~done
        n, n_alive = rows.alive.numel(), int(rows.alive.sum())
        if n_alive == 0:
            break
        if (n - n_alive) * RETIRE_EVERY < n:
            continue  # finished rows ride along until enough of them are dropped at once
        keep = rows.alive.nonzero().squeeze(1)  # (n',)
        rows = rows.select(keep)
        enc = model.reorder_encoder_out(enc, keep)
        state = model.reorder_state(state, keep)
        prev = tok[keep]
    return [h for h in results if h is not None]
