"""Greedy search, sampling and beam search over the decoding contract of nmt/models/base.py.

All three are batched over sentences (beam search flattens batch x beam into rows), advance
one token a step through `decode_step` and its cache (the prefix is never recomputed), and drop
finished sentences from the active batch (in groups: see RETIRE_EVERY). They never ask which
architecture they drive.

Conventions shared by both:
- A hypothesis of n tokens costs n + 1 predictions (its tokens and eos); its length for the GNMT
  length penalty lp(L) = ((5 + L) / 6) ** alpha is L = n + 1, and `score = log_prob / lp(L)`.
- The maximum length of sentence i is n <= floor(a * |src_i| + b) tokens, where |src_i| is the
  source length without its eos, capped so every position fits `model.max_positions` (at
  NO_LENGTH_CAP without one); at that length eos is forced (with the model's log-probability).
- pad and bos are never produced.
- eos is forbidden while fewer than `min_len` tokens have been produced (min_len is capped at
  the maximum length, so forced eos wins).
- `attention` (when asked) is (n + 1, layers, heads, |src_i| + 1): one row per prediction, eos
  included, one column per source token, eos included.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, Self

import torch

from nmt.decode.engine import FORCED_FLOOR, gnmt_length_penalty
from nmt.errors import NmtError
from nmt.models.base import Decoder

NEG_INF = float("-inf")
# Dropping finished sentences copies the whole encoder output and cache, so it waits until 1/N
# of the active sentences are finished (they ride along meanwhile; results are unchanged).
RETIRE_EVERY = 5
BLOCK = 64  # columns per block of the two-stage top-k / argmax over a vocabulary-wide row
NO_LENGTH_CAP = 100_000  # most output tokens of a model with no position limit (fairseq's RNNs)


class SearchOptionError(NmtError, ValueError):
    """A bad search option: shown to CLI users as an error, a ValueError to library callers."""


@dataclass
class Hypothesis:
    """One search result: token ids without eos, normalized score, raw log-probability."""

    tokens: list[int]
    score: float
    log_prob: float
    attention: torch.Tensor | None = None  # (len(tokens) + 1, layers, heads, S)


def max_lengths(model: Decoder, src_lengths: torch.Tensor, a: float, b: float) -> torch.Tensor:
    """Per-sentence maximum number of output tokens (B,), so the eos position still fits.

    Capped while still a float: a huge a or b (1e300, inf) converted to int64 first wrapped to
    INT64_MIN, and the floor of 1 then cut every translation to one token."""
    cap = int(model.max_positions) - 1 if model.max_positions else NO_LENGTH_CAP
    n = torch.floor(a * (src_lengths - 1).to(torch.float64) + b)
    return n.clamp(1, cap).long()


# ---- top-k over vocabulary-wide rows ----------------------------------------------------------


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


# ---- stopping rules of beam search --------------------------------------------------------


class StopRule(Protocol):
    """Decides when a sentence's beam search may end before its maximum length."""

    name: str

    def done(self, rows: BeamRows, t: int, alpha: float) -> torch.Tensor:
        """(n,) bool: after t tokens no live hypothesis can still beat the n-th best finished."""
        ...


class ExactStop:
    """Exact under the length penalty: a live hypothesis with log-prob s <= 0 after t tokens can
    only finish with s' <= s at a length L in [t + 1, max + 1], so its normalized score is at
    most s / max(lp(t + 1), lp(max + 1)) (lp is monotonic in L for any alpha)."""

    name = "exact"

    def done(self, rows: BeamRows, t: int, alpha: float) -> torch.Tensor:
        """Stop when even the most favourable future length cannot lift the best live one."""
        lp_far = rows.lp_max.clamp(min=gnmt_length_penalty(t + 1, alpha))  # (n,)
        return rows.top_fin[:, -1] >= rows.best_live() / lp_far


class EarlyStop:
    """Trades exactness for speed, as most toolkits do by default: the bound assumes a live
    hypothesis would end at its next step, s / lp(t + 1). Without a length penalty it is exact."""

    name = "early"

    def done(self, rows: BeamRows, t: int, alpha: float) -> torch.Tensor:
        """Stop when the best live one, ended at the next step, cannot win."""
        lp_next = torch.full_like(rows.lp_max, gnmt_length_penalty(t + 1, alpha))  # (n,)
        return rows.top_fin[:, -1] >= rows.best_live() / lp_next


STOP_RULES: dict[str, type[ExactStop] | type[EarlyStop]] = {"exact": ExactStop, "early": EarlyStop}


def stop_rule(name: str) -> StopRule:
    """The stopping rule called `name` ('exact' or 'early')."""
    if name not in STOP_RULES:
        raise SearchOptionError(f"stop must be 'exact' or 'early', got {name!r}")
    return STOP_RULES[name]()


# ---- what both searches share -----------------------------------------------------------------


@dataclass
class ActiveRows:
    """Per-sentence tensors of the sentences still in the batch; `select` keeps some of them."""

    origin: torch.Tensor  # (n,) input index of each active sentence
    max_len: torch.Tensor  # (n,) maximum output tokens
    scores: torch.Tensor  # greedy: (n,) log-probs so far; beam: (n, k) live beam log-probs
    first_max: int = field(init=False)  # first step at which some row must end

    def __post_init__(self) -> None:
        self.first_max = int(self.max_len.min())

    def select(self, keep: torch.Tensor) -> Self:
        """The rows `keep` (n',) of every tensor field, in that order."""
        picked: dict[str, Any] = {
            f.name: value[keep]
            for f in dataclasses.fields(self)
            if f.init and isinstance(value := getattr(self, f.name), torch.Tensor)
        }
        return dataclasses.replace(self, **picked)

    def at_max(self, t: int, k: int) -> torch.Tensor | None:
        """(n*k,) bool: decoder rows that must end now (None while no sentence can)."""
        if t < self.first_max:
            return None
        at = self.max_len == t  # (n,)
        return at.repeat_interleave(k) if k > 1 else at


@dataclass
class GreedyRows(ActiveRows):
    """Greedy's rows: one per sentence, with the prefix and attention history."""

    history: torch.Tensor  # (n, t)
    alive: torch.Tensor  # (n,) still searching
    attn: torch.Tensor | None = None  # (n, t, L, H, S)


@dataclass
class BeamRows(ActiveRows):
    """Beam search's sentences: n-best scores so far and the choice of the step just taken."""

    lp_max: torch.Tensor  # (n,) lp(max_len + 1)
    top_fin: torch.Tensor  # (n, nbest) sorted
    retired: torch.Tensor  # (n,) done, not dropped
    next_beam: torch.Tensor  # (n, k) source beam
    next_tok: torch.Tensor  # (n, k) its token

    def best_live(self) -> torch.Tensor:
        """(n,) log-prob of each sentence's best live hypothesis (dead ones are -inf)."""
        return self.scores.amax(1)


@dataclass
class _Start:
    """The prologue of both searches: encoder output, decoder state, limits."""

    enc: Any
    state: Any
    max_len: torch.Tensor  # (B,)
    banned: torch.Tensor  # (2,) pad and bos
    src_len: list[int]
    eos: int
    prev: torch.Tensor  # (B,) bos


def _start(model: Decoder, src: torch.Tensor, src_lengths: torch.Tensor, a: float, b: float):
    """Encode the batch and set up what every step needs."""
    vocab, device = model.vocab, src.device
    enc = model.encode(src, src_lengths)
    return _Start(
        enc=enc,
        state=model.init_state(enc),
        max_len=max_lengths(model, src_lengths, a, b).to(device),
        banned=torch.tensor([vocab.pad_id, vocab.bos_id], device=device),
        src_len=src_lengths.tolist(),
        eos=vocab.eos_id,
        prev=torch.full((src.size(0),), vocab.bos_id, dtype=torch.long, device=device),
    )


def _mask_step(
    lp: torch.Tensor, t: int, min_len: int, start: _Start, at_max: torch.Tensor | None
) -> None:
    """In place on lp (rows, V): pad and bos never; eos not before min_len; eos forced (with
    the model's own log-prob, floored) on the rows `at_max`."""
    eos = start.eos
    lp.index_fill_(1, start.banned, NEG_INF)
    eos_lp = lp[:, eos].clamp(min=FORCED_FLOOR) if at_max is not None else None  # (rows,)
    if t < min_len:
        lp[:, eos] = NEG_INF
    if at_max is None or eos_lp is None:
        return
    forced = at_max.nonzero().squeeze(1)  # rows at their maximum length
    if forced.numel():
        lp.index_fill_(0, forced, NEG_INF)
        lp[forced, eos] = eos_lp[forced]


def _append_attention(hist: torch.Tensor | None, attn: torch.Tensor | None) -> torch.Tensor | None:
    """Add one step's attention (rows, L, H, S) to the history (rows, t, L, H, S)."""
    if attn is None:
        return hist
    step = attn.unsqueeze(1).float()  # (rows, 1, L, H, S)
    return step if hist is None else torch.cat([hist, step], 1)


def _hypothesis(
    tokens: list[int], raw: float, lp: float, attn: torch.Tensor | None, row: int, t: int, s: int
) -> Hypothesis:
    """A finished result; its attention is row `row`'s history cut to its t predictions and s
    source columns."""
    own = None if attn is None else attn[row, :t, :, :, :s].clone()  # (t, L, H, s)
    return Hypothesis(tokens, raw / lp, raw, own)


@torch.inference_mode()
def greedy_search(
    model: Decoder,
    src: torch.Tensor,
    src_lengths: torch.Tensor,
    max_len_a: float = 1.2,
    max_len_b: float = 10,
    min_len: int = 0,
    need_attn: bool = False,
    length_penalty_alpha: float = 1.0,
    scores: bool = True,
) -> list[Hypothesis]:
    """Pick the most likely token each step; one Hypothesis per sentence, in input order.

    `length_penalty_alpha` only normalizes the reported score; it never changes the choice.
    `scores=False` picks from raw logits (the same tokens without a log-softmax pass over the
    vocabulary each step) and reports NaN scores: for output that prints none.
    """

    def best(lp: torch.Tensor, origin: torch.Tensor, t: int) -> tuple[torch.Tensor, torch.Tensor]:
        return max_rows(lp)

    start = _start(model, src, src_lengths, max_len_a, max_len_b)
    return _token_by_token(model, start, best, min_len, need_attn, length_penalty_alpha, scores)


@dataclass(frozen=True)
class Sampling:
    """Draw each token from the model's distribution instead of taking the best one (sampled
    back-translation, diverse n-best lists): softmax(log-probs / temperature), cut to the
    `top_k` most likely tokens (0: all) and to the smallest set of them holding `top_p` of the
    probability (nucleus sampling; 1: all). Every draw is a function of (seed, key, step) only,
    the key naming the sentence and sample (nmt.decode.translator: line number and sample index), so a
    line draws the same tokens whatever batch, worker or buffer decodes it."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.temperature > 0 or math.isinf(self.temperature):
            raise SearchOptionError(f"temperature must be > 0, got {self.temperature}")
        if self.top_k < 0:
            raise SearchOptionError(f"top-k must be >= 0 (0: all tokens), got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise SearchOptionError(f"top-p must be in (0, 1], got {self.top_p}")

    def draw(self, lp: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """Token ids (n,) drawn from the rows of lp (n, V) by inverse CDF at uniforms u (n,)."""
        logits = lp.float() / self.temperature if self.temperature != 1.0 else lp.float()
        vocab = logits.size(1)
        if 0 < self.top_k < vocab:  # the k best, renormalized (then top-p among them)
            values, idx = topk_rows(logits, self.top_k)
            return _inverse_cdf(torch.softmax(values, 1), idx, u, self.top_p)
        if self.top_p >= 1.0:
            return _inverse_cdf(torch.softmax(logits, 1), None, u, 1.0)
        return self._nucleus(logits, u)

    def _nucleus(self, logits: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
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
            held = (
                probs.sum(1) >= self.top_p if k < vocab else torch.ones_like(rows, dtype=torch.bool)
            )
            done = rows[held]
            if done.numel():
                tok[done] = _inverse_cdf(probs[held], idx[held], u[done], self.top_p)
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


@torch.inference_mode()
def sample_search(
    model: Decoder,
    src: torch.Tensor,
    src_lengths: torch.Tensor,
    keys: torch.Tensor,
    sampling: Sampling,
    nsamples: int = 1,
    max_len_a: float = 1.2,
    max_len_b: float = 10,
    min_len: int = 0,
    need_attn: bool = False,
    length_penalty_alpha: float = 1.0,
) -> list[list[Hypothesis]]:
    """`nsamples` sampled translations per sentence (keys (B,): one per sentence; sample j of
    sentence i draws with (keys[i], j), so sample 0 is what nsamples=1 draws), best score first.
    Scores are the model's own log-probabilities of the drawn tokens (before temperature and
    cuts)."""
    if nsamples < 1:
        raise SearchOptionError(f"the number of samples must be at least 1, got {nsamples}")
    if nsamples > 1:  # each sample is a row of its own (the encoder runs once per row)
        src, src_lengths = (
            src.repeat_interleave(nsamples, 0),
            src_lengths.repeat_interleave(nsamples),
        )
    row_keys = keys.to(src.device).long().repeat_interleave(nsamples)  # (B * nsamples,)
    row_samples = torch.arange(nsamples, device=src.device).repeat(keys.numel())

    def draw(lp: torch.Tensor, origin: torch.Tensor, t: int) -> tuple[torch.Tensor, torch.Tensor]:
        u = uniforms(sampling.seed, row_keys[origin], t, row_samples[origin])
        tok = sampling.draw(lp, u)
        return lp.gather(1, tok.unsqueeze(1)).squeeze(1), tok

    start = _start(model, src, src_lengths, max_len_a, max_len_b)
    hyps = _token_by_token(model, start, draw, min_len, need_attn, length_penalty_alpha, True)
    grouped = [hyps[i : i + nsamples] for i in range(0, len(hyps), nsamples)]
    return [sorted(g, key=lambda h: -h.score) for g in grouped]


# (lp (n, V), origin (n,), step t) -> (chosen log-probs (n,), chosen tokens (n,))
Pick = Callable[[torch.Tensor, torch.Tensor, int], tuple[torch.Tensor, torch.Tensor]]


def _token_by_token(
    model: Decoder,
    start: _Start,
    pick: Pick,
    min_len: int,
    need_attn: bool,
    length_penalty_alpha: float,
    scores: bool,
) -> list[Hypothesis]:
    """Greedy's loop: one token per row per step, chosen by `pick`; one Hypothesis per row."""
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
        _mask_step(lp, t, min_len, start, rows.at_max(t, 1))  # lp: (n, V) log-probs or logits
        tok_lp, tok = pick(lp, rows.origin, t)  # (n,), (n,)
        if scores:
            rows.scores = rows.scores + tok_lp
        rows.history = torch.cat([rows.history, tok.unsqueeze(1)], 1)
        rows.attn = _append_attention(rows.attn, attn if need_attn else None)
        t += 1
        prev = tok
        done = (tok == start.eos) & rows.alive  # (n,)
        if not bool(done.any()):
            continue
        origin, final, toks = rows.origin.tolist(), rows.scores.tolist(), rows.history.tolist()
        lp_norm = gnmt_length_penalty(t, length_penalty_alpha)
        for r in done.nonzero().squeeze(1).tolist():  # rows that just produced eos
            i = origin[r]
            results[i] = _hypothesis(toks[r][:-1], final[r], lp_norm, rows.attn, r, t, src_len[i])
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


@dataclass
class _Candidates:
    """The 2k best continuations of each sentence's k live hypotheses, best first."""

    scores: torch.Tensor  # (n, 2k) raw log-probs
    beam: torch.Tensor  # (n, 2k) which live hypothesis each extends
    tok: torch.Tensor  # (n, 2k) the token it adds
    is_eos: torch.Tensor  # (n, 2k) ends in eos (and is possible)


@dataclass
class _Hyps:
    """Per-hypothesis history, rows (n*k) in sentence-major order."""

    tokens: torch.Tensor  # (n*k, t)
    attn: torch.Tensor | None = None  # (n*k, t, L, H, S)


def _check_beam_options(beam_size: int, nbest: int) -> None:
    """Refuse sizes no search can honour."""
    if beam_size < 1:
        raise SearchOptionError(f"beam_size must be at least 1, got {beam_size}")
    if not 1 <= nbest <= beam_size:
        raise SearchOptionError(f"nbest must be between 1 and beam_size ({beam_size}), got {nbest}")


@torch.inference_mode()
def beam_search(
    model: Decoder,
    src: torch.Tensor,
    src_lengths: torch.Tensor,
    beam_size: int = 5,
    length_penalty: float = 1.0,
    max_len_a: float = 1.2,
    max_len_b: float = 10,
    min_len: int = 0,
    nbest: int = 1,
    need_attn: bool = False,
    stop: str | StopRule = "exact",
) -> list[list[Hypothesis]]:
    """Beam search; per sentence the `nbest` best finished hypotheses by normalized score.

    Each step the 2k best continuations of the k live hypotheses are ranked; those among the
    top k that end in eos are finished, and the k best others form the next beam (so eos never
    starves the beam). A sentence stops when `stop` says no live hypothesis can still beat the
    worst of its n best finished ones (ExactStop: the result is the same as searching on to
    the maximum length; EarlyStop: faster, not exact), or at its maximum length.
    """
    rule = stop_rule(stop) if isinstance(stop, str) else stop
    _check_beam_options(beam_size, nbest)
    alpha, k = float(length_penalty), beam_size
    start = _start(model, src, src_lengths, max_len_a, max_len_b)
    rows = _beam_rows(start.max_len, k, nbest, alpha)
    bsz, device = src.size(0), src.device
    hyps = _Hyps(torch.empty(bsz * k, 0, dtype=torch.long, device=device))
    finished: list[list[Hypothesis]] = [[] for _ in range(bsz)]
    enc, state, prev, t = start.enc, start.state, start.prev, 0
    while True:
        n = rows.origin.numel()
        lp, state, attn = model.decode_step(prev, enc, state, need_attn=need_attn)  # (n*k, V)
        if t == 0:  # all k beams start identical: one row per sentence so far, now k each
            expand = torch.arange(bsz, device=device).repeat_interleave(k)  # (B*k,)
            enc = model.repeat_encoder_out(enc, k)
            state = model.reorder_state(state, expand)
            lp = lp.index_select(0, expand)
            attn = None if attn is None else attn.index_select(0, expand)
        _mask_step(lp, t, min_len, start, rows.at_max(t, k))
        cands = _rank(lp, rows.scores, k, start.eos)
        hyps.attn = _append_attention(hyps.attn, attn if need_attn else None)
        t += 1
        _collect_beam(finished, rows, cands, hyps, t, alpha, start.src_len)
        _next_beam(rows, cands, k)
        done = rows.retired | rule.done(rows, t, alpha) | (rows.max_len < t)  # (n,)
        n_done = int(done.sum())
        if n_done == n:
            break
        rows.retired = done
        base = torch.arange(n, device=device).unsqueeze(1) * k  # (n, 1) old row offset
        if n_done * RETIRE_EVERY >= n:
            keep = (~done).nonzero().squeeze(1)  # (n',)
            rows, base = rows.select(keep), base[keep]
            enc = model.reorder_encoder_out(enc, (base + torch.arange(k, device=device)).view(-1))
        order = (base + rows.next_beam).view(-1)  # (n'*k,) old row of each new hypothesis
        state = model.reorder_state(state, order)
        hyps = _reorder_hyps(hyps, order, rows.next_tok)
        prev = rows.next_tok.reshape(-1)
    return [sorted(sent, key=lambda h: -h.score)[:nbest] for sent in finished]


def _beam_rows(max_len: torch.Tensor, k: int, nbest: int, alpha: float) -> BeamRows:
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


def _rank(lp: torch.Tensor, scores: torch.Tensor, k: int, eos: int) -> _Candidates:
    """The 2k best (hypothesis, token) pairs per sentence; lp (n*k, V) is spent."""
    vsize = lp.size(1)
    n = scores.size(0)
    cand = lp.add_(scores.view(-1, 1)).view(n, k * vsize)  # (n, k*V)
    top_s, top_i = topk_rows(cand, 2 * k)  # (n, 2k)
    top_beam = torch.div(top_i, vsize, rounding_mode="floor")  # (n, 2k)
    top_tok = top_i - top_beam * vsize  # (n, 2k)
    return _Candidates(top_s, top_beam, top_tok, (top_tok == eos) & (top_s > NEG_INF))


def _next_beam(rows: BeamRows, cands: _Candidates, k: int) -> None:
    """The k best non-eos candidates form the next beam, each in its parent's slot where it can
    (see _stable_slots); a retired sentence's slots stay where they are."""
    pos = torch.arange(2 * k, device=cands.scores.device)  # (2k,)
    key = cands.is_eos.long() * (2 * k) + pos  # eos candidates sort last
    sel = key.topk(k, dim=1, largest=False).indices  # (n, k) in rank order
    beam = cands.beam.gather(1, sel)  # (n, k)
    slots = _stable_slots(beam)  # (n, k) rank held by each slot
    sel = sel.gather(1, slots)
    rows.scores = cands.scores.gather(1, sel)  # (n, k)
    rows.next_beam = torch.where(rows.retired.unsqueeze(1), pos[:k], beam.gather(1, slots))
    rows.next_tok = cands.tok.gather(1, sel)  # (n, k)


def _stable_slots(parent: torch.Tensor) -> torch.Tensor:
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


def _reorder_hyps(hyps: _Hyps, order: torch.Tensor, tok: torch.Tensor) -> _Hyps:
    """Follow the surviving hypotheses (order: old row of each new one) and append their token."""
    tokens = torch.cat([hyps.tokens.index_select(0, order), tok.view(-1, 1)], 1)
    attn = None if hyps.attn is None else hyps.attn.index_select(0, order)
    return _Hyps(tokens, attn)


def _collect_beam(
    finished: list[list[Hypothesis]],
    rows: BeamRows,
    cands: _Candidates,
    hyps: _Hyps,
    t: int,
    alpha: float,
    src_len: list[int],
) -> None:
    """Move the hypotheses that just produced eos among the top k into their sentence's
    finished list, and update its n best normalized scores."""
    k = cands.beam.size(1) // 2
    fin_mask = cands.is_eos[:, :k] & ~rows.retired.unsqueeze(1)  # (n, k)
    if not bool(fin_mask.any()):
        return
    lp_now = gnmt_length_penalty(t, alpha)
    norm = torch.where(fin_mask, cands.scores[:, :k] / lp_now, NEG_INF)  # (n, k)
    nbest = rows.top_fin.size(1)
    rows.top_fin = torch.cat([rows.top_fin, norm], 1).topk(nbest, dim=1).values  # (n, nbest)
    raw, beams, origin = cands.scores.tolist(), cands.beam.tolist(), rows.origin.tolist()
    for j, c in fin_mask.nonzero().tolist():  # (sentence row, candidate rank)
        row, i = j * k + beams[j][c], origin[j]
        tokens = hyps.tokens[row].tolist()
        finished[i].append(_hypothesis(tokens, raw[j][c], lp_now, hyps.attn, row, t, src_len[i]))
