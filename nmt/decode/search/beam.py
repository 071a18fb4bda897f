"""Beam search: per sentence the `nbest` best finished hypotheses by normalized score, stopped by
a rule of `stop` or at the maximum length."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from nmt.decode.engine import gnmt_length_penalty
from nmt.decode.options import ResolvedOptions, check_rows
from nmt.decode.search.rows import (
    NEG_INF,
    RETIRE_EVERY,
    BeamRows,
    Hypothesis,
    Start,
    append_attention,
    make_hypothesis,
    mask_step,
    start_search,
)
from nmt.decode.search.stop import StopRule, stop_rule
from nmt.decode.search.topk import topk_rows
from nmt.models.base import Decoder


@dataclass
class _Candidates:
    """The 2k best continuations of each sentence's k live hypotheses, best first."""

    scores: torch.Tensor  # (n, 2k) raw log-probs
    beam: torch.Tensor  # (n, 2k) which live hypothesis each extends
    tok: torch.Tensor  # (n, 2k) the token it adds
    is_eos: torch.Tensor  # (n, 2k) ends in eos (and is possible)


@dataclass
class Hyps:
    """Per-hypothesis history, rows (n*k) in sentence-major order."""

    tokens: torch.Tensor  # (n*k, t)
    attn: torch.Tensor | None = None  # (n*k, t, L, H, S)


@torch.inference_mode()
def beam_search(
    model: Decoder,
    src: torch.Tensor,
    src_lengths: torch.Tensor,
    options: ResolvedOptions | None = None,
    stop: StopRule | None = None,
) -> list[list[Hypothesis]]:
    """Beam search; per sentence the `options.nbest` best finished hypotheses by normalized
    score, with a beam of `options.beam_size`.

    Each step the 2k best continuations of the k live hypotheses are ranked; those among the
    top k that end in eos are finished, and the k best others form the next beam (so eos never
    starves the beam). A sentence stops when its stopping rule (`stop`, else the one
    `options.stop` names) says no live hypothesis can still beat the worst of its n best
    finished ones (ExactStop: the result is the same as searching on to the maximum length;
    EarlyStop: faster, not exact), or at its maximum length.
    """
    opts = options or ResolvedOptions()
    rule = stop or stop_rule(opts.stop)
    need_attn, nbest = opts.with_attention, opts.nbest
    alpha, k = float(opts.length_penalty), opts.beam_size
    check_rows(k, False, nbest, False)  # sizes no beam can honour
    start = start_search(model, src, src_lengths, opts)
    rows = beam_rows(start.max_len, k, k if start.forced_free else nbest, alpha)
    norm = LengthNorm(alpha, start.forced_free, opts.forced_eos)
    bsz, ranked = src.size(0), start.forced_free  # ranked: transformers' bookkeeping
    loop = BeamLoop.begin(model, start, k)
    finished: list[list[Hypothesis]] = [[] for _ in range(bsz)]
    slots: list[list[Hypothesis | None]] = [[] for _ in range(bsz)]  # transformers' k kept
    prev, t = start.prev, 0
    while True:
        lp, loop.state, attn = model.decode_step(prev, loop.enc, loop.state, need_attn=need_attn)
        if t == 0:
            lp, attn = loop.widen(lp, attn, bsz, k)
        mask_step(lp, t, opts, start, rows.at_max(t, k), loop.hyps.tokens)
        cands = _rank(lp, rows.scores, k, start.eos, exact=ranked)
        loop.hyps.attn = append_attention(loop.hyps.attn, attn if need_attn else None)
        t += 1
        if ranked:
            _collect_ranked(slots, rows, cands, loop.hyps, t, norm, start.src_len)
            _next_ranked(rows, cands, k)
        else:
            _collect_beam(finished, rows, cands, loop.hyps, t, norm, start.src_len)
            _next_beam(rows, cands, k)
        done = rows.retired | rule.done(rows, t, alpha) | (rows.max_len < t)  # (n,)
        if bool(done.all()):
            break
        rows, _ = loop.advance(rows, done, k)
        prev = rows.next_tok.reshape(-1)
    if ranked:  # in transformers' order, equal scores included
        return [[h for h in kept if h is not None][:nbest] for kept in slots]
    return [sorted(sent, key=lambda h: -h.score)[:nbest] for sent in finished]


@dataclass
class BeamLoop:
    """What a beam search carries from step to step beside its rows: the encoder output, the
    decoder state and the hypotheses' history. Plain and constrained search widen, retire and
    reorder through it, so the two cannot drift apart."""

    model: Decoder
    enc: Any
    state: Any
    hyps: Hyps

    @classmethod
    def begin(cls, model: Decoder, start: Start, k: int) -> BeamLoop:
        """The loop before its first step: one row per sentence, no history yet."""
        empty = torch.empty(start.prev.numel() * k, 0, dtype=torch.long, device=start.prev.device)
        return cls(model, start.enc, start.state, Hyps(empty))

    def widen(
        self, lp: torch.Tensor, attn: torch.Tensor | None, bsz: int, k: int
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """After the first step: every sentence had one row (its k beams start identical), now
        it has k; returns the first step's scores and attention, repeated alike."""
        expand = torch.arange(bsz, device=lp.device).repeat_interleave(k)  # (B*k,)
        self.enc = self.model.repeat_encoder_out(self.enc, k)
        self.state = self.model.reorder_state(self.state, expand)
        return lp.index_select(0, expand), None if attn is None else attn.index_select(0, expand)

    def advance(
        self, rows: BeamRows, done: torch.Tensor, k: int
    ) -> tuple[BeamRows, torch.Tensor | None]:
        """Mark `done` sentences retired, drop them once they are a 1/RETIRE_EVERY share of the
        rows (the encoder output shrinks with them), and reorder the decoder state and history to
        the next beam. Returns the rows and the kept sentences (None when none were dropped)."""
        n, device = rows.origin.numel(), done.device
        rows.retired = done
        base = torch.arange(n, device=device).unsqueeze(1) * k  # (n, 1) old row offset
        keep = None
        if int(done.sum()) * RETIRE_EVERY >= n:
            keep = (~done).nonzero().squeeze(1)  # (n',)
            rows, base = rows.select(keep), base[keep]
            self.enc = self.model.reorder_encoder_out(
                self.enc, (base + torch.arange(k, device=device)).view(-1)
            )
        order = (base + rows.next_beam).view(-1)  # (n'*k,) old row of each new hypothesis
        self.state = self.model.reorder_state(self.state, order)
        self.hyps = reorder_hyps(self.hyps, order, rows.next_tok)
        return rows, keep


def beam_rows(max_len: torch.Tensor, k: int, nbest: int, alpha: float) -> BeamRows:
    """Every sentence active: one live hypothesis (score 0) and k - 1 dead ones (-inf)."""
    bsz, device = max_len.numel(), max_len.device
    scores = torch.full((bsz, k), NEG_INF, device=device)
    scores[:, 0] = 0.0  # only one live hypothesis at the start: no duplicates
    return BeamRows(
        origin=torch.arange(bsz, device=device),
        max_len=max_len,
        scores=scores,
        lp_max=gnmt_length_penalty(max_len + 1, alpha),
        top_fin=torch.full((bsz, nbest), NEG_INF, device=device),
        retired=torch.zeros(bsz, dtype=torch.bool, device=device),
        next_beam=torch.zeros(bsz, k, dtype=torch.long, device=device),
        next_tok=torch.zeros(bsz, k, dtype=torch.long, device=device),
    )


def _rank(
    lp: torch.Tensor, scores: torch.Tensor, k: int, eos: int, exact: bool = False
) -> _Candidates:
    """The 2k best (hypothesis, token) pairs per sentence; lp (n*k, V) is spent. `exact`: one
    torch.topk, as transformers ranks (equal values then come out in its order)."""
    vsize = lp.size(1)
    n = scores.size(0)
    cand = lp.add_(scores.view(-1, 1)).view(n, k * vsize)  # (n, k*V)
    top_s, top_i = cand.topk(2 * k, dim=1) if exact else topk_rows(cand, 2 * k)  # (n, 2k)
    top_beam = torch.div(top_i, vsize, rounding_mode="floor")  # (n, 2k)
    top_tok = top_i - top_beam * vsize  # (n, 2k)
    return _Candidates(top_s, top_beam, top_tok, (top_tok == eos) & (top_s > NEG_INF))


def _next_beam(rows: BeamRows, cands: _Candidates, k: int) -> None:
    """The k best non-eos candidates form the next beam, each in its parent's slot where it can
    (see stable_slots); a retired sentence's slots stay where they are."""
    pos = torch.arange(2 * k, device=cands.scores.device)  # (2k,)
    key = cands.is_eos.long() * (2 * k) + pos  # eos candidates sort last
    sel = key.topk(k, dim=1, largest=False).indices  # (n, k) in rank order
    beam = cands.beam.gather(1, sel)  # (n, k)
    slots = stable_slots(beam)  # (n, k) rank held by each slot
    sel = sel.gather(1, slots)
    rows.scores = cands.scores.gather(1, sel)  # (n, k)
    rows.next_beam = torch.where(rows.retired.unsqueeze(1), pos[:k], beam.gather(1, slots))
    rows.next_tok = cands.tok.gather(1, sel)  # (n, k)


def stable_slots(parent: torch.Tensor) -> torch.Tensor:
    """A permutation (n, k): slot s holds rank slots[s]. Each parent's best child takes the
    parent's own slot, the other children the free slots in rank order, so most rows of the
    decoder state stay in place and reordering copies only the others (the search itself
    never depends on slot order: it ranks by score)."""
    n, k = parent.shape
    ranks = torch.arange(k, device=parent.device).expand(n, k)
    earlier = torch.ones(k, k, dtype=torch.bool, device=parent.device).tril(-1)  # [i, j]: j < i
    first = ~((parent.unsqueeze(2) == parent.unsqueeze(1)) & earlier).any(2)  # (n, k)
    taken = torch.zeros(n, k, dtype=torch.long, device=parent.device)
    taken.scatter_add_(1, parent, first.long())  # (n, k) > 0: a best child sits there
    free = (taken.clamp(max=1) * k + ranks).argsort(1)  # free slots first, ascending
    nth_other = ((~first).long().cumsum(1) - 1).clamp(min=0)  # (n, k) index among the others
    slot_of_rank = torch.where(first, parent, free.gather(1, nth_other))
    return torch.empty_like(parent).scatter_(1, slot_of_rank, ranks)


def reorder_hyps(hyps: Hyps, order: torch.Tensor, tok: torch.Tensor) -> Hyps:
    """Follow the surviving hypotheses (order: old row of each new one) and append their token."""
    tokens = torch.cat([hyps.tokens.index_select(0, order), tok.view(-1, 1)], 1)
    attn = None if hyps.attn is None else hyps.attn.index_select(0, order)
    return Hyps(tokens, attn)


@dataclass(frozen=True)
class LengthNorm:
    """What a finished hypothesis's log-prob is divided by. GNMT's ((5 + L) / 6) ** alpha, or
    under transformers' rule (`plain`) L ** alpha; L counts eos, except for an eos forced at the
    length limit without `forced_eos` (transformers ends such a hypothesis without one)."""

    alpha: float
    plain: bool = False
    forced_eos: bool = False

    def __call__(self, t: int, max_len: torch.Tensor) -> list[float]:
        """Per row, the divisor of a hypothesis ending at step t (t tokens, eos included)."""
        if not self.plain:
            return [gnmt_length_penalty(t, self.alpha)] * max_len.numel()
        cut = (max_len < t).tolist() if not self.forced_eos else [False] * max_len.numel()
        return [float(t - c) ** self.alpha for c in cut]  # as transformers: a float power


def _normalized(scores: torch.Tensor, divisors: list[float]) -> torch.Tensor:
    """scores (n, k) divided row by row; by one Python number when the rows share it, as the
    scores always were (a scalar divisor rounds as its reciprocal times, not as a division)."""
    if len(set(divisors)) == 1:
        return scores / divisors[0]
    return scores / torch.tensor(divisors, device=scores.device).unsqueeze(1)


def _just_ended(
    rows: BeamRows, cands: _Candidates, t: int, norm: LengthNorm
) -> tuple[int, torch.Tensor, list[float], torch.Tensor] | None:
    """The candidates among the top k that just produced eos in a sentence still searching:
    (k, their mask (n, k), each row's divisor, the top k's normalized scores); None if none."""
    k = cands.beam.size(1) // 2
    fin = cands.is_eos[:, :k] & ~rows.retired.unsqueeze(1)  # (n, k)
    if not bool(fin.any()):
        return None
    lps = norm(t, rows.max_len)
    return k, fin, lps, _normalized(cands.scores[:, :k], lps)


def _collect_beam(
    finished: list[list[Hypothesis]],
    rows: BeamRows,
    cands: _Candidates,
    hyps: Hyps,
    t: int,
    norm: LengthNorm,
    src_len: list[int],
) -> None:
    """Move the hypotheses that just produced eos among the top k into their sentence's
    finished list, and update its n best normalized scores."""
    ended = _just_ended(rows, cands, t, norm)
    if ended is None:
        return
    k, fin_mask, lps, normalized = ended
    scored = torch.where(fin_mask, normalized, NEG_INF)  # (n, k)
    kept = rows.top_fin.size(1)
    rows.top_fin = torch.cat([rows.top_fin, scored], 1).topk(kept, dim=1).values  # (n, kept)
    raw, beams, origin = cands.scores.tolist(), cands.beam.tolist(), rows.origin.tolist()
    for j, c in fin_mask.nonzero().tolist():  # (sentence row, candidate rank)
        row, i = j * k + beams[j][c], origin[j]
        tokens = hyps.tokens[row].tolist()
        finished[i].append(
            make_hypothesis(tokens, raw[j][c], lps[j], hyps.attn, row, t, src_len[i])
        )


MASKED = -1.0e9  # transformers' additive mask for candidates that may not be chosen


def _next_ranked(rows: BeamRows, cands: _Candidates, k: int) -> None:
    """transformers' next beam: the k best candidates with the finished ones masked, in rank
    order (the next step's ranking then breaks ties as transformers does)."""
    masked = cands.scores + cands.is_eos.float() * MASKED
    top, sel = masked.topk(k, dim=1)  # (n, k)
    pos = torch.arange(k, device=sel.device)
    rows.scores = top
    rows.next_beam = torch.where(rows.retired.unsqueeze(1), pos, cands.beam.gather(1, sel))
    rows.next_tok = cands.tok.gather(1, sel)


def _collect_ranked(
    finished: list[list[Hypothesis | None]],
    rows: BeamRows,
    cands: _Candidates,
    hyps: Hyps,
    t: int,
    norm: LengthNorm,
    src_len: list[int],
) -> None:
    """transformers' finished list: the k best of the kept ones and the candidates among the
    top k that just ended (the others masked), merged by one torch.topk; `finished[i]` holds
    sentence i's k slots in that order (None: a masked placeholder)."""
    ended = _just_ended(rows, cands, t, norm)
    if ended is None:
        return
    k, fin, lps, normalized = ended
    new = normalized + (~fin).float() * MASKED
    rows.top_fin, pick = torch.cat([rows.top_fin, new], 1).topk(k, dim=1)
    raw, beams, done = cands.scores.tolist(), cands.beam.tolist(), fin.tolist()
    origin = rows.origin.tolist()
    for j, order in enumerate(pick.tolist()):
        i = origin[j]
        kept = finished[i] + [None] * (k - len(finished[i]))
        slots: list[Hypothesis | None] = []
        for p in order:
            c = p - k
            if c < 0 or not done[j][c]:
                slots.append(kept[p] if c < 0 else None)
                continue
            row = j * k + beams[j][c]
            tokens = hyps.tokens[row].tolist()
            slots.append(make_hypothesis(tokens, raw[j][c], lps[j], hyps.attn, row, t, src_len[i]))
        finished[i] = slots
