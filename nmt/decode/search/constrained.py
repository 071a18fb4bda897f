"""Lexically constrained beam search: every finished hypothesis holds each of its sentence's
constraints (target phrases as subword ids) somewhere in its tokens, by dynamic beam allocation
(Post and Vilar 2018) in the round-robin form of Hu et al. (2019).

A hypothesis's bank is the number of constraint tokens it has produced: those of the constraints
it holds, plus the longest unfinished start of one it is in the middle of (a phrase abandoned
half-way gives its tokens back). Each step the candidates are the 2k best continuations of the
beam, each live hypothesis's own best token, and every token that continues or starts one of its
missing constraints; they are ranked best first within their bank, and the beam takes the best of
the fullest bank, then the best of the next, and so on round the banks, so hypotheses that placed
more of the constraints survive beside better-scoring ones that have not yet. eos is blocked until
a hypothesis holds every constraint (forced at the maximum length all the same, where the caller
checks what is missing). Without constraints it ranks as `beam_search` does.

Constraint bookkeeping is per hypothesis in Python: a few small sets a step, next to a decoder
step that costs far more."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch

from nmt.data.vocab import Tokenizer
from nmt.decode.constraints import check_constraint_options, constraint_ids
from nmt.decode.engine import gnmt_length_penalty
from nmt.decode.options import ResolvedOptions, check_rows
from nmt.decode.search.beam import BeamLoop, Hyps, beam_rows, stable_slots
from nmt.decode.search.rows import (
    NEG_INF,
    BeamRows,
    Hypothesis,
    append_attention,
    make_hypothesis,
    mask_step,
    max_lengths,
    start_search,
)
from nmt.decode.search.stop import StopRule, stop_rule
from nmt.decode.search.topk import max_rows, topk_rows
from nmt.errors import NmtError
from nmt.models.base import Decoder

Phrase = tuple[int, ...]


class Progress(NamedTuple):
    """Where one hypothesis stands: the constraints it holds, its last tokens (as many as the
    longest constraint), and what follows from them, worked out once when it is made: the
    start of each missing phrase the tail ends with (phrase, tokens) and its bank."""

    met: frozenset[int]
    tail: Phrase = ()
    started: tuple[tuple[Phrase, int], ...] = ()
    bank: int = 0


class SentenceConstraints:
    """One sentence's constraints (distinct, non-empty phrases) and the moves they allow."""

    def __init__(self, phrases: Sequence[Sequence[int]]) -> None:
        self.phrases: list[Phrase] = list(dict.fromkeys(tuple(p) for p in phrases if p))
        self.total = sum(len(p) for p in self.phrases)  # the fullest bank
        self.width = max((len(p) for p in self.phrases), default=0)
        self.tokens = {t for p in self.phrases for t in p}  # any other token begins nothing
        self.start = Progress(frozenset())
        self._held: dict[frozenset[int], tuple[int, set[int]]] = {}  # by the set held

    def done(self, progress: Progress) -> bool:
        """Holds every constraint: eos is allowed."""
        return len(progress.met) == len(self.phrases)

    def after(self, progress: Progress, tok: int) -> Progress:
        """The progress once `tok` is produced: a constraint is held once its last token lands;
        the bank counts the held phrases' tokens and the longest started one's."""
        tail = (progress.tail + (tok,))[-self.width :] if self.width else ()
        met = progress.met
        if tok not in self.tokens:  # no phrase ends or begins here
            return Progress(met, tail, (), self._held_by(met)[0])
        for i, phrase in enumerate(self.phrases):
            if i not in met and tail[-len(phrase) :] == phrase:
                met = met | {i}
        started = []
        for i, p in enumerate(self.phrases):
            if i not in met:
                n = min(len(p) - 1, len(tail))
                while n and tail[-n:] != p[:n]:
                    n -= 1
                if n:
                    started.append((p, n))
        bank = self._held_by(met)[0] + max((n for _, n in started), default=0)
        return Progress(met, tail, tuple(started), bank)

    def wanted(self, progress: Progress) -> set[int]:
        """The tokens that start a missing constraint or continue one begun."""
        return {p[n] for p, n in progress.started} | self._held_by(progress.met)[1]

    def held(self, met: frozenset[int]) -> int:
        """The tokens of the phrases `met` holds: the bank of a hypothesis that begins none."""
        return self._held_by(met)[0]

    def _held_by(self, met: frozenset[int]) -> tuple[int, set[int]]:
        """The tokens of the phrases `met` holds, and the first tokens of the others."""
        known = self._held.get(met)
        if known is None:
            held = sum(len(self.phrases[i]) for i in met)
            firsts = {p[0] for i, p in enumerate(self.phrases) if i not in met}
            known = self._held[met] = (held, firsts)
        return known


def lines_constraint_ids(
    model: Decoder,
    tgt_tok: Tokenizer,
    constraints: Sequence[Sequence[str]] | None,
    encoded: list[list[int]],
    opts: ResolvedOptions,
    first_line: int,
) -> list[list[list[int]]] | None:
    """Each line's constraints (target phrases) as subword ids (None: no line has any), checked
    against the search and each line's maximum output length (`encoded`: the source ids)."""
    if constraints is None or not any(constraints):
        return None
    if len(constraints) != len(encoded):
        raise NmtError(f"{len(constraints)} constraint lists for {len(encoded)} lines")
    check_constraint_options(opts)
    lengths = torch.tensor([len(ids) + 1 for ids in encoded])
    rooms = max_lengths(model, lengths, opts.max_len_a, opts.max_len_b).tolist()
    return [
        constraint_ids(c, tgt_tok.encode, first_line, i, room, tgt_tok.unk_id) if c and ids else []
        for i, (c, ids, room) in enumerate(zip(constraints, encoded, rooms, strict=True))
    ]


@dataclass
class _Choice:
    """One sentence's step: the next beam (parent slot, token, log-prob, progress) and the
    hypotheses that end here (parent slot, log-prob)."""

    beam: list[tuple[int, int, float, Progress]]
    ended: list[tuple[int, float]]


@torch.inference_mode()
def constrained_beam_search(
    model: Decoder,
    src: torch.Tensor,
    src_lengths: torch.Tensor,
    constraints: Sequence[Sequence[Sequence[int]]],
    options: ResolvedOptions | None = None,
    stop: StopRule | None = None,
) -> list[list[Hypothesis]]:
    """Beam search where sentence i's results hold every phrase of `constraints[i]` (subword
    ids); per sentence the `options.nbest` best finished hypotheses by normalized score that
    hold every constraint (fewer where the search found fewer; where it found none, the best of
    those the maximum length forced to end: the caller checks). Stops as `beam_search` does (`stop`, else `options.stop`)."""
    opts = options or ResolvedOptions()
    rule = stop or stop_rule(opts.stop)
    need_attn, nbest = opts.with_attention, opts.nbest
    alpha, k = float(opts.length_penalty), opts.beam_size
    check_rows(k, False, nbest, False)
    start = start_search(model, src, src_lengths, opts)
    sents = [SentenceConstraints(c) for c in constraints]
    rows = beam_rows(start.max_len, k, nbest, alpha)
    bsz = src.size(0)
    progress = [s.start for s in sents for _ in range(k)]  # per decoder row
    loop = BeamLoop.begin(model, start, k)
    finished: list[list[tuple[bool, Hypothesis]]] = [[] for _ in range(bsz)]
    prev, t = start.prev, 0
    while True:
        lp, loop.state, attn = model.decode_step(prev, loop.enc, loop.state, need_attn=need_attn)
        if t == 0:
            lp, attn = loop.widen(lp, attn, bsz, k)
        at_max = rows.at_max(t, k)
        mask_step(lp, t, opts, start, at_max, loop.hyps.tokens)
        origin = rows.origin.tolist()
        _block_eos(
            lp, [sents[origin[r // k]].done(p) for r, p in enumerate(progress)], at_max, start.eos
        )
        lp.add_(rows.scores.view(-1, 1))  # (n*k, V) total log-prob of each continuation
        choices = _choose(lp, rows, [sents[i] for i in origin], progress, k, start.eos)
        loop.hyps.attn = append_attention(loop.hyps.attn, attn if need_attn else None)
        t += 1
        _collect(finished, choices, rows, sents, progress, loop.hyps, t, alpha, start.src_len)
        progress = _next_beam(rows, choices, k)
        done = rows.retired | rule.done(rows, t, alpha) | (rows.max_len < t)  # (n,)
        if bool(done.all()):
            break
        rows, keep = loop.advance(rows, done, k)
        if keep is not None:
            progress = [progress[j * k + s] for j in keep.tolist() for s in range(k)]
        prev = rows.next_tok.reshape(-1)
    return [_results(sent, nbest) for sent in finished]


def _results(finished: list[tuple[bool, Hypothesis]], nbest: int) -> list[Hypothesis]:
    """The n best that hold every constraint (fewer where fewer ended so), else the best that
    the maximum length forced to end without them."""
    held = [h for ok, h in finished if ok] or [h for _, h in finished]
    return sorted(held, key=lambda h: -h.score)[:nbest]


def _block_eos(lp: torch.Tensor, done: list[bool], at_max: torch.Tensor | None, eos: int) -> None:
    """eos only for hypotheses that hold every constraint, or that must end now."""
    blocked = ~torch.tensor(done, dtype=torch.bool, device=lp.device)  # (rows,)
    if at_max is not None:
        blocked &= ~at_max
    lp[blocked, eos] = NEG_INF


def _choose(
    total: torch.Tensor,
    rows: BeamRows,
    sents: list[SentenceConstraints],
    progress: list[Progress],
    k: int,
    eos: int,
) -> list[_Choice]:
    """Each sentence's next beam and ended hypotheses from `total` (n*k, V), the log-prob of
    every continuation: candidates gathered (see the module's docstring), ranked round the banks."""
    n, vsize = rows.scores.size(0), total.size(1)
    top_s, top_i = topk_rows(total.view(n, k * vsize), 2 * k)  # (n, 2k)
    best_s, best_t = max_rows(total)  # (n*k,) each hypothesis's own best continuation
    wanted = [(r, tok) for r, p in enumerate(progress) for tok in sents[r // k].wanted(p)]
    if wanted:
        at = torch.tensor(wanted, device=total.device)  # (m, 2)
        wanted_s = total[at[:, 0], at[:, 1]].tolist()
    else:
        wanted_s = []
    pairs: list[dict[tuple[int, int], float]] = [{} for _ in range(n)]
    for j, (scores, idx) in enumerate(zip(top_s.tolist(), top_i.tolist(), strict=True)):
        for s, i in zip(scores, idx, strict=True):
            pairs[j][(i // vsize, i % vsize)] = s
    for r, (s, tok) in enumerate(zip(best_s.tolist(), best_t.tolist(), strict=True)):
        pairs[r // k][(r % k, tok)] = s
    for (r, tok), s in zip(wanted, wanted_s, strict=True):
        pairs[r // k][(r % k, tok)] = s
    retired = rows.retired.tolist()
    return [
        _Choice([], [])
        if retired[j]
        else _rank(pairs[j], sents[j], progress[j * k : j * k + k], k, eos)
        for j in range(n)
    ]


def _rank(
    cands: dict[tuple[int, int], float],
    sent: SentenceConstraints,
    progress: list[Progress],
    k: int,
    eos: int,
) -> _Choice:
    """Round the banks, fullest first: the best candidate of each bank, then the second best of
    each, ...; the first k of that order that end are finished, the first k that go on the beam."""
    banks: dict[int, list[tuple[float, int, int, Progress | None]]] = {}
    held = [sent.held(p.met) for p in progress]  # a token of no phrase leaves this bank
    for (slot, tok), score in cands.items():
        if score == NEG_INF:
            continue
        if tok == eos or tok not in sent.tokens:  # its progress is made only if it is chosen
            after, bank = (progress[slot] if tok == eos else None), held[slot]
        else:
            after = sent.after(progress[slot], tok)
            bank = after.bank
        banks.setdefault(bank, []).append((score, slot, tok, after))
    order = []
    for bank, members in banks.items():
        members.sort(key=lambda m: (-m[0], m[1], m[2]))
        order += [(rank, -bank, m) for rank, m in enumerate(members)]
    order.sort(key=lambda o: (o[0], o[1]))
    ranked = [m for *_, m in order]
    ended = [(slot, score) for score, slot, tok, _ in ranked[:k] if tok == eos]
    beam = [
        (slot, tok, score, after or sent.after(progress[slot], tok))
        for score, slot, tok, after in ranked
        if tok != eos
    ][:k]
    return _Choice(beam, ended)


def _collect(
    finished: list[list[tuple[bool, Hypothesis]]],
    choices: list[_Choice],
    rows: BeamRows,
    sents: list[SentenceConstraints],
    progress: list[Progress],
    hyps: Hyps,
    t: int,
    alpha: float,
    src_len: list[int],
) -> None:
    """Move each sentence's ended hypotheses into its finished list (with whether they hold
    every constraint), and update its n best normalized scores."""
    lp_now = gnmt_length_penalty(t, alpha)
    k = rows.scores.size(1)
    top = rows.top_fin.tolist()
    for j, choice in enumerate(choices):
        i = int(rows.origin[j])
        for slot, raw in choice.ended:
            row = j * k + slot
            tokens = hyps.tokens[row].tolist()
            hyp = make_hypothesis(tokens, raw, lp_now, hyps.attn, row, t, src_len[i])
            held = sents[i].done(progress[row])
            finished[i].append((held, hyp))
            if held:  # the stopping rule waits for n that hold every constraint
                top[j] = sorted([*top[j], hyp.score], reverse=True)[: len(top[j])]
    rows.top_fin = torch.tensor(top, device=rows.top_fin.device)


def _next_beam(rows: BeamRows, choices: list[_Choice], k: int) -> list[Progress]:
    """Set each sentence's next beam (an empty slot is a dead hypothesis) and return the
    progress of each new decoder row."""
    n = len(choices)
    parents = [[0] * k for _ in range(n)]
    tokens = [[0] * k for _ in range(n)]
    scores = [[NEG_INF] * k for _ in range(n)]
    progress: list[Progress] = []
    for j, choice in enumerate(choices):
        filled = choice.beam + [(s, 0, NEG_INF, Progress(frozenset())) for s in range(k)]
        for s, (parent, token, score, after) in enumerate(filled[:k]):
            parents[j][s], tokens[j][s], scores[j][s] = parent, token, score
            progress.append(after)
    device = rows.scores.device
    ranked = torch.tensor(parents, device=device)  # (n, k) in rank order
    slots = stable_slots(ranked)  # each parent's best child in its own slot: fewer rows copied
    rows.next_beam = ranked.gather(1, slots)
    rows.next_tok = torch.tensor(tokens, device=device).gather(1, slots)
    rows.scores = torch.tensor(scores, device=device).gather(1, slots)
    at = slots.tolist()
    return [progress[j * k + r] for j in range(n) for r in at[j]]
