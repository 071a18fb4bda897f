"""RNN encoder-decoder with attention (Bahdanau et al. 2015) behind the contract of base.py.

Encoder: bidirectional GRU/LSTM over packed sequences; its states are the attention memory.
Decoder step t: attend from the previous top hidden state s_{t-1} (keys projected once per
sentence), feed [e(y_{t-1}); c_t] to the RNN, read out tanh(W [s_t; c_t; e(y_{t-1})]) and project
to the vocabulary. The context is recomputed from the previous state at every step, so the
incremental state is the recurrent state alone.

`attention: none` is the attention-free baseline of Cho et al. (2014): the context is one fixed
vector for the whole sentence, the last encoder layer's final states [h_fwd; h_bwd] (the same
vector the bridge turns into the decoder's initial state), fed at every step to the RNN and the
readout exactly where the attentional model feeds c_t. Only the per-step context differs, so the
two are compared at (nearly) equal sizes; the fixed vector is the whole source the decoder sees.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import cast

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from nmt.config import Seq2SeqConfig
from nmt.data.vocab import VocabInfo
from nmt.errors import NmtError
from nmt.models.attention import make_rnn_attention
from nmt.models.base import make_embeddings, step_scores
from nmt.models.dropout import Dropout
from nmt.models.recurrence import bidirectional, fixed_input_gru

NO_ATTENTION = "this model has no attention (model.attention: none)"


def _fp32_rnn(x: torch.Tensor) -> contextlib.AbstractContextManager:
    """Run recurrences and the per-step attention in float32 on CPU: oneDNN has no bf16 LSTM on
    CPUs without native bf16, and each step's small products are bound by latency and memory,
    not arithmetic: under bf16 autocast every step would cast the whole (B, S, 2H) memory and its
    gradient again. GPU autocast is left as it is."""
    if _cpu_autocast(x):
        return torch.autocast("cpu", enabled=False)
    return contextlib.nullcontext()


def _cpu_autocast(x: torch.Tensor) -> bool:
    """Whether x is on the CPU under autocast (where _fp32_rnn turns it off)."""
    return x.device.type == "cpu" and torch.is_autocast_enabled("cpu")


@dataclass
class RNNEncoderOut:
    """Encoder states and what the decoder derives from them once per sentence."""

    memory: torch.Tensor  # (B, S, M) attention values; attention none: the summary, (B, 1, 2H)
    proj_keys: torch.Tensor  # (B, S, A) attention keys, already projected (none: = memory)
    mask: torch.Tensor  # (B, S) bool, True on real tokens (none: (B, 1) all True)
    lengths: torch.Tensor  # (B,)
    final: tuple[torch.Tensor, ...]  # last-layer final states [fwd; bwd], (B, 2H) each (h[, c])


@dataclass
class RNNState:
    """Decoder recurrent state: h (and c for LSTM), (layers, B, H) each."""

    hidden: tuple[torch.Tensor, ...]


class Seq2Seq(nn.Module):
    """Bidirectional RNN encoder, attentional RNN decoder with input feeding of the context."""

    autocast_inference = True  # bf16 decoding keeps fp32 weights: the recurrences run in fp32
    output_bias: torch.Tensor | None = None  # no fixed output bias (an imported Transformer's)

    def __init__(self, cfg: Seq2SeqConfig, vocab: VocabInfo) -> None:
        super().__init__()
        self.cfg, self.vocab = cfg, vocab
        self.max_positions = 0  # an RNN has no position limit: no cuts, no drops, no cap
        e, h = cfg.embed_dim, cfg.hidden_size
        self.lstm = cfg.rnn_type == "lstm"
        rnn = nn.LSTM if self.lstm else nn.GRU
        self.src_embed, self.tgt_embed = make_embeddings(vocab, e, cfg.tie_embeddings)
        self.encoder = rnn(
            e,
            h,
            cfg.encoder_layers,
            batch_first=True,
            bidirectional=True,
            dropout=cfg.dropout if cfg.encoder_layers > 1 else 0.0,
        )
        # Dot attention needs keys of the decoder's size: map the 2H encoder states to H once.
        self.memory_proj = nn.Linear(2 * h, h, bias=False) if cfg.attention == "dot" else None
        mem = h if self.memory_proj is not None else 2 * h
        self.has_attention = cfg.attention != "none"
        self.attention_kinds: tuple[str, ...] = ("cross",) if self.has_attention else ()
        self.attention = make_rnn_attention(cfg.attention, h, mem) if self.has_attention else None
        self.bridge = nn.ModuleList(
            nn.Linear(2 * h, cfg.decoder_layers * h) for _ in range(2 if self.lstm else 1)
        )
        self.decoder = rnn(
            e + mem,
            h,
            cfg.decoder_layers,
            batch_first=True,
            dropout=cfg.dropout if cfg.decoder_layers > 1 else 0.0,
        )
        self.readout = nn.Linear(h + mem + e, e)
        self.output = nn.Linear(e, vocab.tgt_size, bias=False)
        if cfg.tie_embeddings:
            self.output.weight = self.tgt_embed.weight
        self.drop = Dropout(cfg.dropout)

    def encode(self, src: torch.Tensor, src_lengths: torch.Tensor) -> RNNEncoderOut:
        """Bidirectional encoding of the real tokens only (packed), keys projected once."""
        s = src.size(1)
        x = self.drop(self.src_embed(src))  # (B, S, E)
        with _fp32_rnn(x):
            if self.lstm:
                packed = pack_padded_sequence(
                    x.float(), src_lengths.cpu(), batch_first=True, enforce_sorted=False
                )
                packed_out, final = self.encoder(packed)
                out, _ = pad_packed_sequence(packed_out, batch_first=True, total_length=s)
            else:  # unpacked: a packed GRU's backward grows with the square of the length
                out, final = bidirectional(cast(nn.GRU, self.encoder), x.float(), src_lengths)
        finals = final if self.lstm else (final,)
        last = tuple(torch.cat([f[-2], f[-1]], dim=-1) for f in finals)  # (B, 2H) each
        if self.attention is None:  # the fixed-length summary is all the decoder will see
            summary = self.drop(last[0]).unsqueeze(1)  # (B, 1, 2H)
            mask = torch.ones(summary.shape[:2], dtype=torch.bool, device=src.device)  # (B, 1)
            return RNNEncoderOut(summary, summary, mask, src_lengths, last)
        memory = self.drop(out)  # (B, S, 2H), zero at padding
        if self.memory_proj is not None:
            memory = self.memory_proj(memory)  # (B, S, H)
        mask = torch.arange(s, device=src.device) < src_lengths.unsqueeze(1)  # (B, S)
        proj_keys = self.attention.project_keys(memory)
        if _cpu_autocast(x):  # the steps attend in float32: cast once here, not at every step
            memory, proj_keys = memory.float(), proj_keys.float()
        return RNNEncoderOut(memory, proj_keys, mask, src_lengths, last)

    def init_state(self, encoder_out: RNNEncoderOut) -> RNNState:
        """Bridge: tanh(W [h_fwd; h_bwd]) of the last encoder layer, for every decoder layer."""
        layers, h = self.cfg.decoder_layers, self.cfg.hidden_size
        hidden = []
        for bridge, final in zip(self.bridge, encoder_out.final, strict=True):
            b = final.size(0)
            init = torch.tanh(bridge(final)).view(b, layers, h).transpose(0, 1)  # (L, B, H)
            hidden.append(init.float().contiguous())  # the recurrence runs in fp32
        return RNNState(tuple(hidden))

    def _step(
        self, emb: torch.Tensor, enc: RNNEncoderOut, state: RNNState
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, RNNState]:
        """One decoder step from emb (B, E): top hidden (B, H), context (B, M), weights (B, S)
        (None without attention: the context is the fixed summary)."""
        if self.attention is None:
            context, weights = enc.memory[:, 0], None  # (B, 2H)
        else:
            query = state.hidden[0][-1]  # (B, H) previous top-layer state, float32
            with _fp32_rnn(emb):
                context, weights = self.attention(query, enc.proj_keys, enc.memory, enc.mask)
        rnn_in = torch.cat([emb, context.to(emb.dtype)], dim=-1).unsqueeze(1)  # (B, 1, E+M)
        hx = state.hidden if self.lstm else state.hidden[0]
        with _fp32_rnn(rnn_in):
            out, hx = self.decoder(rnn_in.float(), hx)
        hidden = tuple(hx) if self.lstm else (hx,)
        return out[:, 0], context, weights, RNNState(hidden)

    def _readout(self, h: torch.Tensor, context: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        """Readout tanh(W [s; c; e]) (dropped out): what the output projection sees, (..., E)."""
        r = torch.tanh(self.readout(torch.cat([self.drop(h), context.to(h.dtype), emb], dim=-1)))
        return self.drop(r)

    def _logits(self, h: torch.Tensor, context: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        """The readout then the output projection: (..., V)."""
        return self.output(self._readout(h, context, emb))

    def decode_step(
        self,
        prev_tokens: torch.Tensor,
        encoder_out: RNNEncoderOut,
        state: RNNState,
        need_attn: bool = False,
        normalize: bool = True,
    ) -> tuple[torch.Tensor, RNNState, torch.Tensor | None]:
        """Log-probs (B, V) float32 of the next token (raw logits with `normalize=False`);
        attention as (B, 1, 1, S) (always None for attention none: no weights to show)."""
        emb = self.drop(self.tgt_embed(prev_tokens))  # (B, E)
        h, context, weights, state = self._step(emb, encoder_out, state)
        logits = self._logits(h, context, emb).float()  # (B, V)
        scores = step_scores(logits, normalize)
        attn = weights[:, None, None] if need_attn and weights is not None else None  # (B,1,1,S)
        return scores, state, attn

    def reorder_encoder_out(self, encoder_out: RNNEncoderOut, order: torch.Tensor) -> RNNEncoderOut:
        """Select / repeat sentences (beam expansion, dropping finished ones)."""
        return RNNEncoderOut(
            memory=encoder_out.memory.index_select(0, order),
            proj_keys=encoder_out.proj_keys.index_select(0, order),
            mask=encoder_out.mask.index_select(0, order),
            lengths=encoder_out.lengths.index_select(0, order),
            final=tuple(f.index_select(0, order) for f in encoder_out.final),
        )

    def repeat_encoder_out(self, encoder_out: RNNEncoderOut, k: int) -> RNNEncoderOut:
        """Each sentence k times in a row (beam expansion): plain copies, they are small."""
        rows = torch.arange(encoder_out.memory.size(0), device=encoder_out.memory.device)
        return self.reorder_encoder_out(encoder_out, rows.repeat_interleave(k))

    def reorder_state(self, state: RNNState, order: torch.Tensor) -> RNNState:
        """Reorder the recurrent state to follow the surviving hypotheses."""
        return RNNState(tuple(h.index_select(1, order) for h in state.hidden))

    def forward(
        self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor
    ) -> torch.Tensor:
        """Teacher forcing: logits (B, T, V)."""
        return self.output(self._teacher_forcing(src, src_lengths, tgt_in)[0])

    def features(
        self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor
    ) -> torch.Tensor:
        """Teacher forcing up to the output projection: (B, T, E) (nmt.train.loss fuses the rest)."""
        return self._teacher_forcing(src, src_lengths, tgt_in)[0]

    def forward_with_attention(
        self,
        src: torch.Tensor,
        src_lengths: torch.Tensor,
        tgt_in: torch.Tensor,
        kind: str = "cross",
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher forcing: logits (B, T, V) and the attention weights (B, 1, 1, T, S); a user
        error for attention none, which has no weights to return, and for a kind other than
        "cross" (recurrences attend to the source only)."""
        if kind != "cross":
            raise NmtError(
                f"a seq2seq model has only source-target attention (kind 'cross'), no {kind!r} "
                "attention"
            )
        features, weights = self._teacher_forcing(src, src_lengths, tgt_in)
        if weights is None:
            raise NmtError(NO_ATTENTION)
        return self.output(features), weights

    def _fixed_context(
        self, emb: torch.Tensor, enc: RNNEncoderOut, state: RNNState
    ) -> torch.Tensor:
        """Teacher forcing without attention: the context is the same at every step, so the
        decoder's inputs are all known at once and its recurrence runs over the whole target in
        one pass, not one call per step (the steps of _step, the same function); a GRU computes
        the context's share of its input gates once per sentence. Features (B, T, E)."""
        context = enc.memory.expand(-1, emb.size(1), -1)  # (B, T, 2H)
        if not self.lstm:  # the context's share of the input gates once per sentence
            with _fp32_rnn(emb):
                out = fixed_input_gru(
                    cast(nn.GRU, self.decoder),
                    emb.float(),
                    enc.memory[:, 0].float(),
                    state.hidden[0],
                )
            return self._readout(out, context, emb)
        rnn_in = torch.cat([emb, context.to(emb.dtype)], dim=-1)  # (B, T, E+2H)
        with _fp32_rnn(rnn_in):
            out, _ = self.decoder(rnn_in.float(), state.hidden)
        return self._readout(out, context, emb)

    def _teacher_forcing(
        self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Readout features (B, T, E) and weights (B, 1, 1, T, S) or None. With attention the
        recurrence runs step by step; the readout runs once over all steps."""
        enc = self.encode(src, src_lengths)
        state = self.init_state(enc)
        emb = self.drop(self.tgt_embed(tgt_in))  # (B, T, E)
        if self.attention is None:
            return self._fixed_context(emb, enc, state), None
        hs, contexts, weights = [], [], []
        # unbind, not emb[:, t]: each slice's backward writes a zero (B, T, E) gradient and adds
        # it up, T times an update; unbind's backward stacks the T gradients once.
        for emb_t in emb.unbind(1):
            h, context, w, state = self._step(emb_t, enc, state)
            hs.append(h)
            contexts.append(context)
            if w is not None:
                weights.append(w)
        features = self._readout(torch.stack(hs, 1), torch.stack(contexts, 1), emb)  # (B, T, E)
        if not weights:
            return features, None
        return features, torch.stack(weights, 1)[:, None, None]  # (B, 1, 1, T, S)
