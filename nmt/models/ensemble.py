"""Several trained models decoding as one: the next-token distribution is the average of
theirs (probabilities, not log-probabilities, as fairseq and Marian ensemble), so an ensemble
is just another `Decoder` and search code does not know it has one.

Members may differ in architecture and size; they must share the vocabulary (the same
SentencePiece models: `nmt.engines.translator` checks the pieces). Attention, where asked for, is the
members' mean when their (layers, heads) agree, else the first member's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from nmt.errors import NmtError
from nmt.models.base import Decoder


@dataclass
class EnsembleEncoderOut:
    """Each member's encoder output, in member order."""

    outs: list[Any]


@dataclass
class EnsembleState:
    """Each member's decoder state, in member order."""

    states: list[Any]


def _mean_attention(attns: Sequence[torch.Tensor | None]) -> torch.Tensor | None:
    """The members' mean attention where their shapes agree, else the first member's."""
    first = attns[0]
    if first is None or any(a is None or a.shape != first.shape for a in attns):
        return first
    return torch.stack([a.float() for a in attns if a is not None]).mean(0)


class Ensemble(nn.Module):
    """Average of the members' next-token probabilities, behind the one decoding contract."""

    def __init__(self, models: Sequence[Decoder]) -> None:
        super().__init__()
        if not models:
            raise NmtError("an ensemble needs at least one model")
        vocabs = {(m.vocab.src_size, m.vocab.tgt_size, m.vocab.joint) for m in models}
        if len(vocabs) > 1:
            raise NmtError(
                "the models of an ensemble must share one vocabulary, got (source, target) sizes "
                + ", ".join(f"({m.vocab.src_size}, {m.vocab.tgt_size})" for m in models)
            )
        self.members = nn.ModuleList(models)  # type: ignore[arg-type]
        self.vocab = models[0].vocab
        limits = [m.max_positions for m in models if m.max_positions > 0]
        self.max_positions = min(limits) if limits else 0  # 0: no member has a limit
        # Any member with fp32 parts makes the translator decode under autocast.
        self.autocast_inference = any(m.autocast_inference for m in models)
        # the kinds every member gives (the members' mean, or the first's when shapes differ)
        self.attention_kinds = tuple(
            k for k in models[0].attention_kinds if all(k in m.attention_kinds for m in models)
        )
        self.has_attention = bool(self.attention_kinds)
        self._log_n = math.log(len(models))
        self.train(models[0].training)  # as loaded (eval to decode)

    def _decoders(self) -> list[Decoder]:
        return list(self.members)  # type: ignore[arg-type]

    def _average(self, log_probs: list[torch.Tensor]) -> torch.Tensor:
        """log(mean(p_i)) from each member's log-probs (B, ..., V)."""
        if len(log_probs) == 1:
            return log_probs[0]
        # Pairwise logaddexp, in place on the first member's fresh scores: one elementwise pass
        # per member over (B, V), where stack + logsumexp made five.
        acc = log_probs[0]
        inplace = not acc.requires_grad
        for lp in log_probs[1:]:
            acc = torch.logaddexp(acc, lp, out=acc) if inplace else torch.logaddexp(acc, lp)
        return acc.sub_(self._log_n) if inplace else acc - self._log_n

    def encode(self, src: torch.Tensor, src_lengths: torch.Tensor) -> EnsembleEncoderOut:
        """Every member encodes the batch."""
        return EnsembleEncoderOut([m.encode(src, src_lengths) for m in self._decoders()])

    def init_state(self, encoder_out: EnsembleEncoderOut) -> EnsembleState:
        """Every member's initial decoder state."""
        return EnsembleState(
            [m.init_state(e) for m, e in zip(self._decoders(), encoder_out.outs, strict=True)]
        )

    def decode_step(
        self,
        prev_tokens: torch.Tensor,
        encoder_out: EnsembleEncoderOut,
        state: EnsembleState,
        need_attn: bool = False,
        normalize: bool = True,
    ) -> tuple[torch.Tensor, EnsembleState, torch.Tensor | None]:
        """Log of the members' mean next-token probability (B, V) float32. Members always
        normalize: raw logits of different models are not on one scale, so `normalize=False`
        returns the same log-probs (a valid argmax either way)."""
        scores, states, attns = [], [], []
        for m, e, s in zip(self._decoders(), encoder_out.outs, state.states, strict=True):
            lp, s, a = m.decode_step(prev_tokens, e, s, need_attn=need_attn, normalize=True)
            scores.append(lp)
            states.append(s)
            attns.append(a)
        attn = _mean_attention(attns) if need_attn else None
        return self._average(scores), EnsembleState(states), attn

    def reorder_encoder_out(
        self, encoder_out: EnsembleEncoderOut, order: torch.Tensor
    ) -> EnsembleEncoderOut:
        """Select / repeat rows of every member's encoder output."""
        return EnsembleEncoderOut(
            [
                m.reorder_encoder_out(e, order)
                for m, e in zip(self._decoders(), encoder_out.outs, strict=True)
            ]
        )

    def repeat_encoder_out(self, encoder_out: EnsembleEncoderOut, k: int) -> EnsembleEncoderOut:
        """Beam expansion for every member (each shares or copies as it does alone)."""
        return EnsembleEncoderOut(
            [
                m.repeat_encoder_out(e, k)
                for m, e in zip(self._decoders(), encoder_out.outs, strict=True)
            ]
        )

    def reorder_state(self, state: EnsembleState, order: torch.Tensor) -> EnsembleState:
        """Every member's state follows the surviving hypotheses."""
        return EnsembleState(
            [m.reorder_state(s, order) for m, s in zip(self._decoders(), state.states, strict=True)]
        )

    def forward(
        self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor
    ) -> torch.Tensor:
        """Teacher forcing: the ensemble's log-probs (B, T, V), usable wherever logits are
        (a log-softmax of them returns them unchanged)."""
        return self._average(
            [
                torch.log_softmax(m.forward(src, src_lengths, tgt_in).float(), -1)
                for m in self._decoders()
            ]
        )

    def forward_with_attention(
        self,
        src: torch.Tensor,
        src_lengths: torch.Tensor,
        tgt_in: torch.Tensor,
        kind: str = "cross",
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probs (B, T, V) and attention (B, layers, heads, T, S): the members' mean where
        their shapes agree, else the first member's."""
        log_probs: list[torch.Tensor] = []
        attns: list[torch.Tensor | None] = []
        for m in self._decoders():
            logits, attn = m.forward_with_attention(src, src_lengths, tgt_in, kind)
            log_probs.append(torch.log_softmax(logits.float(), -1))
            attns.append(attn)
        mean = _mean_attention(attns)
        assert mean is not None  # every member returns attention here
        return self._average(log_probs), mean
