"""Greedy and beam search over the decoding contract of nmt/models/base.py.

Both searches are batched over sentences (beam search flattens batch x beam into rows), advance
one token a step through `decode_step` and its cache (the prefix is never recomputed), and drop
finished sentences from the active batch (in groups: see RETIRE_EVERY). They never ask which
architecture they drive.

Conventions shared by both:
- A hypothesis of n tokens costs n + 1 predictions (its tokens and eos); its length for the GNMT
  length penalty lp(L) = ((5 + L) / 6) ** alpha is L = n + 1, and `score = log_prob / lp(L)`.
- The maximum length of sentence i is n <= floor(a * |src_i| + b) tokens, where |src_i| is the
  source length without its eos, capped so every position fits `model.max_positions`; at that
  length eos is forced (with the log-probability the model gives it).
- pad and bos are never produced.
- eos is forbidden while fewer than `min_len` tokens have been produced (min_len is capped at
  the maximum length, so forced eos wins).
- `attention` (when asked) is (n + 1, layers, heads, |src_i| + 1): one row per prediction, eos
  included, one column per source token, eos included.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

NEG_INF = float("-inf")
# Dropping finished sentences copies the whole encoder output and cache, so it waits until 1/N
# of the active sentences are finished (they ride along meanwhile; results are unchanged).
RETIRE_EVERY = 5
FORCED_FLOOR = -1000.0  # floor for a forced eos the model calls (near) impossible


@dataclass
class Hypothesis:
    """One search result: token ids without eos, normalized score, raw log-probability."""

    tokens: list[int]
    score: float
    log_prob: float
    attention: torch.Tensor | None = None  # (len(tokens) + 1, layers, heads, S)


def gnmt_length_penalty(length: int | torch.Tensor, alpha: float) -> Any:
    """GNMT length penalty ((5 + L) / 6) ** alpha (Wu et al. 2016)."""
    return ((5.0 + length) / 6.0) ** alpha


def max_lengths(model: Any, src_lengths: torch.Tensor, a: float, b: float) -> torch.Tensor:
    """Per-sentence maximum number of output tokens (B,), so the eos position still fits."""
    n = torch.floor(a * (src_lengths - 1).to(torch.float64) + b).long().clamp(min=1)
    cap = getattr(model, "max_positions", None)
    if cap:
        n = n.clamp(max=int(cap) - 1)
    return n


def _forced_eos_lp(lp: torch.Tensor, eos: int) -> torch.Tensor:
    """eos log-probs before min_len masks them, kept finite so a forced end always yields a result."""
    return lp[:, eos].clamp(min=FORCED_FLOOR)  # (n,)


def _finish_attention(
    attn: torch.Tensor | None, row: int, n_steps: int, src_len: int
) -> torch.Tensor | None:
    """Cut one row's attention history to its own predictions and source columns."""
    if attn is None:
        return None
    return attn[row, :n_steps, :, :, :src_len].clone()  # (T, L, H, S)


@torch.inference_mode()
def greedy_search(
    model: Any,
    src: torch.Tensor,
    src_lengths: torch.Tensor,
    max_len_a: float = 1.2,
    max_len_b: float = 10,
    min_len: int = 0,
    need_attn: bool = False,
    length_penalty_alpha: float = 1.0,
) -> list[Hypothesis]:
    """Pick the most likely token each step; one Hypothesis per sentence, in input order.

    `length_penalty_alpha` only normalizes the reported score; it never changes the choice.
    """
    vocab = model.vocab
    eos = vocab.eos_id
    bsz = src.size(0)
    device = src.device
    enc = model.encode(src, src_lengths)
    state = model.init_state(enc)
    max_len = max_lengths(model, src_lengths, max_len_a, max_len_b).to(device)  # (B,)
    first_max = int(max_len.min())  # first step at which some row must end
    banned = torch.tensor([vocab.pad_id, vocab.bos_id], device=device)
    rows = torch.arange(bsz, device=device)  # original sentence of each active row
    prev = torch.full((bsz,), vocab.bos_id, dtype=torch.long, device=device)
    scores = torch.zeros(bsz, device=device)
    history = torch.empty(bsz, 0, dtype=torch.long, device=device)  # (n, t)
    attn_hist: torch.Tensor | None = None  # (n, t, L, H, S)
    results: list[Hypothesis | None] = [None] * bsz
    alive = torch.ones(bsz, dtype=torch.bool, device=device)  # rows still searching
    src_len_list = src_lengths.tolist()
    t = 0
    while True:
        lp, state, attn = model.decode_step(prev, enc, state, need_attn=need_attn)  # (n, V)
        lp.index_fill_(1, banned, NEG_INF)  # pad and bos are never outputs
        eos_lp = _forced_eos_lp(lp, eos) if t >= first_max else None  # (n,)
        if t < min_len:
            lp[:, eos] = NEG_INF
        tok_lp, tok = lp.max(-1)  # (n,), (n,)
        if eos_lp is not None:
            forced = max_len == t  # (n,)
            tok = torch.where(forced, eos, tok)
            tok_lp = torch.where(forced, eos_lp, tok_lp)
        scores = scores + tok_lp
        history = torch.cat([history, tok.unsqueeze(1)], 1)
        if need_attn:
            step = attn.unsqueeze(1).float()  # (n, 1, L, H, S)
            attn_hist = step if attn_hist is None else torch.cat([attn_hist, step], 1)
        t += 1
        done = (tok == eos) & alive  # (n,)
        if not bool(done.any()):
            prev = tok
            continue
        done_idx = done.nonzero().squeeze(1).tolist()
        origin, final, toks = rows.tolist(), scores.tolist(), history.tolist()
        lp_norm = gnmt_length_penalty(t, length_penalty_alpha)
        for r in done_idx:
            i = origin[r]
            results[i] = Hypothesis(
                tokens=toks[r][:-1],
                score=final[r] / lp_norm,
                log_prob=final[r],
                attention=_finish_attention(attn_hist, r, t, src_len_list[i]),
            )
        alive &= ~done
        n_alive = int(alive.sum())
        if n_alive == 0:
            break
        if (len(origin) - n_alive) * RETIRE_EVERY < len(origin):
            prev = tok  # finished rows ride along until enough of them are dropped at once
            continue
        keep = alive.nonzero().squeeze(1)  # (n',)
        alive = alive[keep]
        enc = model.reorder_encoder_out(enc, keep)
        state = model.reorder_state(state, keep)
        rows, scores, history, max_len = rows[keep], scores[keep], history[keep], max_len[keep]
        first_max = int(max_len.min())
        if attn_hist is not None:
            attn_hist = attn_hist[keep]
        prev = tok[keep]
    return results  # type: ignore[return-value]


@torch.inference_mode()
def beam_search(
    model: Any,
    src: torch.Tensor,
    src_lengths: torch.Tensor,
    beam_size: int = 5,
    length_penalty: float = 1.0,
    max_len_a: float = 1.2,
    max_len_b: float = 10,
    min_len: int = 0,
    nbest: int = 1,
    need_attn: bool = False,
    stop: str = "exact",
) -> list[list[Hypothesis]]:
    """Beam search; per sentence the `nbest` best finished hypotheses by normalized score.

    Each step the 2k best continuations of the k live hypotheses are ranked; those among the
    top k that end in eos are finished, and the k best others form the next beam (so eos never
    starves the beam). A sentence stops only when no live hypothesis can still beat the worst
    of its n best finished ones, or at its maximum length, so the result is the same as
    searching on to the maximum length. The bound: a live hypothesis with log-prob s <= 0 after
    t tokens can only finish with s' <= s at a length L in [t + 1, max + 1], so its normalized
    score is at most s / max(lp(t + 1), lp(max + 1)) (lp is monotonic in L for any alpha).

    `stop="early"` trades exactness for speed, as most toolkits do by default: the bound assumes
    a live hypothesis would end at its next step, s / lp(t + 1). With length_penalty 0 both
    rules are the same.
    """
    if stop not in ("exact", "early"):
        raise ValueError(f"stop must be 'exact' or 'early', got {stop!r}")
    if beam_size < 1:
        raise ValueError(f"beam_size must be at least 1, got {beam_size}")
    if not 1 <= nbest <= beam_size:
        raise ValueError(f"nbest must be between 1 and beam_size ({beam_size}), got {nbest}")
    alpha = float(length_penalty)
    vocab = model.vocab
    eos = vocab.eos_id
    k = beam_size
    bsz = src.size(0)
    device = src.device

    enc = model.encode(src, src_lengths)
    state = model.init_state(enc)
    max_len = max_lengths(model, src_lengths, max_len_a, max_len_b).to(device)  # (B,)
    first_max = int(max_len.min())  # first step at which some sentence must end
    banned = torch.tensor([vocab.pad_id, vocab.bos_id], device=device)
    # Largest length penalty any finished hypothesis can still get, per sentence.
    lp_far = gnmt_length_penalty(max_len + 1, alpha)  # (B,)
    if stop == "early":  # never above the next step's penalty: the clamp below picks lp(t + 1)
        lp_far = torch.full_like(lp_far, float("-inf"))

    sents = torch.arange(bsz, device=device)  # original index of each active sentence
    beam_scores = torch.full((bsz, k), NEG_INF, device=device)
    beam_scores[:, 0] = 0.0  # only one live hypothesis at the start: no duplicates
    # All k beams of a sentence start identical: step 0 runs on one row per sentence, and the
    # encoder output and state are expanded to k rows per sentence only afterwards.
    prev = torch.full((bsz,), vocab.bos_id, dtype=torch.long, device=device)
    expand: torch.Tensor | None = torch.arange(bsz, device=device).repeat_interleave(k)  # (B*k,)
    history = torch.empty(bsz * k, 0, dtype=torch.long, device=device)  # (n*k, t)
    attn_hist: torch.Tensor | None = None  # (n*k, t, L, H, S)
    finished: list[list[Hypothesis]] = [[] for _ in range(bsz)]
    top_fin = torch.full((bsz, nbest), NEG_INF, device=device)  # best normalized, sorted
    cand_pos = torch.arange(2 * k, device=device)  # (2k,)
    retired = torch.zeros(bsz, dtype=torch.bool, device=device)  # done, rows not yet dropped
    src_len = src_lengths.tolist()
    t = 0
    while True:
        n = sents.numel()
        lp, state, attn = model.decode_step(prev, enc, state, need_attn=need_attn)  # (n*k, V)
        if expand is not None:  # first step: (n, V) -> (n*k, V), the k rows equal
            enc = model.reorder_encoder_out(enc, expand)
            state = model.reorder_state(state, expand)
            lp = lp.index_select(0, expand)
            attn = None if attn is None else attn.index_select(0, expand)
            expand = None
        vsize = lp.size(1)
        lp.index_fill_(1, banned, NEG_INF)  # pad and bos are never outputs
        eos_lp = _forced_eos_lp(lp, eos) if t >= first_max else None  # (n*k,)
        if t < min_len:
            lp[:, eos] = NEG_INF
        if eos_lp is not None:
            forced = (max_len == t).repeat_interleave(k).nonzero().squeeze(1)  # rows at max
            if forced.numel():
                lp.index_fill_(0, forced, NEG_INF)
                lp[forced, eos] = eos_lp[forced]
        cand = lp.add_(beam_scores.view(-1, 1)).view(n, k * vsize)  # (n, k*V), lp is spent
        top_s, top_i = cand.topk(2 * k, dim=1)  # (n, 2k)
        top_beam = torch.div(top_i, vsize, rounding_mode="floor")  # (n, 2k)
        top_tok = top_i - top_beam * vsize  # (n, 2k)
        is_eos = (top_tok == eos) & (top_s > NEG_INF)  # (n, 2k)
        if need_attn:
            step = attn.unsqueeze(1).float()  # (n*k, 1, L, H, S)
            attn_hist = step if attn_hist is None else torch.cat([attn_hist, step], 1)
        t += 1

        fin_mask = is_eos[:, :k] & ~retired.unsqueeze(1)  # (n, k) eos among the top k
        if bool(fin_mask.any()):
            lp_now = gnmt_length_penalty(t, alpha)
            norm = torch.where(fin_mask, top_s[:, :k] / lp_now, NEG_INF)  # (n, k)
            top_fin = torch.cat([top_fin, norm], 1).topk(nbest, dim=1).values  # (n, nbest)
            _collect(
                finished, fin_mask, top_s, top_beam, sents, history, attn_hist, t, lp_now, src_len
            )

        # The k best non-eos candidates, in rank order, form the next beam.
        key = is_eos.long() * (2 * k) + cand_pos  # eos candidates sort last
        sel = key.topk(k, dim=1, largest=False).indices  # (n, k)
        beam_scores = top_s.gather(1, sel)  # (n, k)
        sel_beam = top_beam.gather(1, sel)  # (n, k)
        sel_tok = top_tok.gather(1, sel)  # (n, k)

        # Exact stop: no live hypothesis can reach a score above the n-th best finished one.
        best_live = beam_scores[:, 0]  # (n,) ranks are sorted, dead beams are -inf
        bound = best_live / lp_far.clamp(min=gnmt_length_penalty(t + 1, alpha))  # (n,)
        done = retired | (top_fin[:, -1] >= bound) | (max_len < t)  # (n,)
        n_done = int(done.sum())
        if n_done == n:
            break
        if n_done * RETIRE_EVERY >= n:
            keep_s = (~done).nonzero().squeeze(1)  # (n',)
            keep_rows = (keep_s.unsqueeze(1) * k + torch.arange(k, device=device)).view(-1)
            enc = model.reorder_encoder_out(enc, keep_rows)
            sents, max_len, lp_far, top_fin = (
                sents[keep_s],
                max_len[keep_s],
                lp_far[keep_s],
                top_fin[keep_s],
            )
            beam_scores, sel_beam, sel_tok = beam_scores[keep_s], sel_beam[keep_s], sel_tok[keep_s]
            base = keep_s.unsqueeze(1) * k  # (n', 1) old row offset of each kept sentence
            first_max = int(max_len.min())
            retired = done[keep_s]
        else:
            base = torch.arange(n, device=device).unsqueeze(1) * k  # (n, 1)
            retired = done
        order = (base + sel_beam).view(-1)  # (n'*k,) old row of each new hypothesis
        state = model.reorder_state(state, order)
        history = torch.cat([history.index_select(0, order), sel_tok.view(-1, 1)], 1)
        if attn_hist is not None:
            attn_hist = attn_hist.index_select(0, order)
        prev = sel_tok.reshape(-1)

    out = []
    for hyps in finished:
        hyps.sort(key=lambda h: -h.score)
        out.append(hyps[:nbest])
    return out


def _collect(
    finished: list[list[Hypothesis]],
    fin_mask: torch.Tensor,
    top_s: torch.Tensor,
    top_beam: torch.Tensor,
    sents: torch.Tensor,
    history: torch.Tensor,
    attn_hist: torch.Tensor | None,
    t: int,
    lp_now: float,
    src_len: list[int],
) -> None:
    """Move the hypotheses that just produced eos into their sentence's finished list."""
    k = top_beam.size(1) // 2
    pos = fin_mask.nonzero().tolist()  # [(sentence row, candidate rank)]
    raw = top_s.tolist()
    beams = top_beam.tolist()
    origin = sents.tolist()
    for j, c in pos:
        row = j * k + beams[j][c]
        finished[origin[j]].append(
            Hypothesis(
                tokens=history[row].tolist(),
                score=raw[j][c] / lp_now,
                log_prob=raw[j][c],
                attention=_finish_attention(attn_hist, row, t, src_len[origin[j]]),
            )
        )
