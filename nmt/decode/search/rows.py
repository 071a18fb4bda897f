"""What every search shares: its results (`Hypothesis`), the per-sentence state of the sentences
still in the batch (`ActiveRows` and greedy's and beam search's own), the prologue (encode, limits)
and the masking of each step (pad, bos, repeated n-grams, min_len, forced eos)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Self

import torch

from nmt.decode.engine import FORCED_FLOOR
from nmt.decode.options import ResolvedOptions
from nmt.models.base import Decoder

NEG_INF = float("-inf")
# Dropping finished sentences copies the whole encoder output and cache, so it waits until 1/N
# of the active sentences are finished (they ride along meanwhile; results are unchanged).
RETIRE_EVERY = 5


@dataclass
class Hypothesis:
    """One search result: token ids without eos, normalized score, raw log-probability."""

    tokens: list[int]
    score: float
    log_prob: float
    attention: torch.Tensor | None = None  # (len(tokens) + 1, layers, heads, S)


def max_lengths(model: Decoder, src_lengths: torch.Tensor, a: float, b: float) -> torch.Tensor:
    """Per-sentence maximum number of output tokens (B,) of sources of `src_lengths` (eos
    included): `ResolvedOptions.output_limit`, the one rule of every engine."""
    limits = ResolvedOptions(max_len_a=a, max_len_b=b)
    positions = int(model.max_positions) if model.max_positions else None
    return torch.tensor(
        [limits.output_limit(n - 1, positions) for n in src_lengths.tolist()], dtype=torch.long
    )


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
class Start:
    """The prologue of every search: encoder output, decoder state, limits."""

    enc: Any
    state: Any
    max_len: torch.Tensor  # (B,)
    banned: torch.Tensor  # ids never emitted: pad, bos, the model's bad words
    src_len: list[int]
    eos: int
    prev: torch.Tensor  # (B,) bos
    forced_free: bool = False  # the eos forced at the limit scores 0 (transformers' rule)


def start_search(
    model: Decoder, src: torch.Tensor, src_lengths: torch.Tensor, opts: ResolvedOptions
) -> Start:
    """Encode the batch and set up what every step needs: the maximum lengths (opts.max_len_a,
    max_len_b) and how the eos forced there scores (opts.stop)."""
    vocab, device = model.vocab, src.device
    enc = model.encode(src, src_lengths)
    return Start(
        enc=enc,
        state=model.init_state(enc),
        max_len=max_lengths(model, src_lengths, opts.max_len_a, opts.max_len_b).to(device),
        banned=torch.tensor(vocab.banned, device=device),
        src_len=src_lengths.tolist(),
        eos=vocab.eos_id,
        prev=torch.full((src.size(0),), vocab.bos_id, dtype=torch.long, device=device),
        forced_free=opts.stop == "transformers",
    )


def mask_step(
    lp: torch.Tensor,
    t: int,
    opts: ResolvedOptions,
    start: Start,
    at_max: torch.Tensor | None,
    history: torch.Tensor,
) -> None:
    """In place on lp (rows, V), each row continuing its `history` (rows, t): the banned ids
    never; no token that repeats an n-gram (opts.no_repeat_ngram_size); eos not before
    opts.min_len; eos forced (with the model's own log-prob, floored, or 0 under transformers'
    rule) on the rows `at_max`."""
    eos, min_len = start.eos, opts.min_len
    lp.index_fill_(1, start.banned, NEG_INF)
    ban_repeats(lp, history, opts.no_repeat_ngram_size)
    eos_lp = None
    if at_max is not None:  # the model's own log-prob (floored), or 0 as transformers forces it
        eos_lp = (
            torch.zeros_like(lp[:, eos])
            if start.forced_free
            else lp[:, eos].clamp(min=FORCED_FLOOR)
        )
    if t < min_len:
        lp[:, eos] = NEG_INF
    if at_max is None or eos_lp is None:
        return
    forced = at_max.nonzero().squeeze(1)  # rows at their maximum length
    if forced.numel():
        lp.index_fill_(0, forced, NEG_INF)
        lp[forced, eos] = eos_lp[forced]


def ban_repeats(lp: torch.Tensor, history: torch.Tensor, n: int) -> None:
    """In place on lp (rows, V): NEG_INF on every token that would complete an n-gram its row's
    `history` (rows, t) already holds, i.e. that follows an earlier occurrence of the row's last
    n - 1 tokens (n = 1: every token already written; n = 0: none). fairseq's, CTranslate2's
    and transformers' `no_repeat_ngram_size`."""
    t = history.size(1)
    if n <= 0 or t < n:
        return
    if n == 1:
        lp.scatter_(1, history, NEG_INF)
        return
    grams = history.unfold(1, n, 1)  # (rows, t - n + 1, n): every n-gram written
    suffix = history[:, t - n + 1 :].unsqueeze(1)  # (rows, 1, n - 1): what the next one starts with
    row, at = (grams[:, :, :-1] == suffix).all(2).nonzero(as_tuple=True)
    lp[row, grams[row, at, -1]] = NEG_INF


def append_attention(hist: torch.Tensor | None, attn: torch.Tensor | None) -> torch.Tensor | None:
    """Add one step's attention (rows, L, H, S) to the history (rows, t, L, H, S)."""
    if attn is None:
        return hist
    step = attn.unsqueeze(1).float()  # (rows, 1, L, H, S)
    return step if hist is None else torch.cat([hist, step], 1)


def make_hypothesis(
    tokens: list[int], raw: float, lp: float, attn: torch.Tensor | None, row: int, t: int, s: int
) -> Hypothesis:
    """A finished result; its attention is row `row`'s history cut to its t predictions and s
    source columns."""
    own = None if attn is None else attn[row, :t, :, :, :s].clone()  # (t, L, H, s)
    return Hypothesis(tokens, raw / lp, raw, own)
