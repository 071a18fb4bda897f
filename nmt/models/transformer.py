"""The Transformer (Vaswani et al. 2017) behind the incremental-decoding contract of base.py.

Incremental state: one preallocated self-attention key/value cache for all decoder layers,
written in place one position a step and grown in chunks of CACHE_CHUNK positions; the
encoder-decoder keys/values are computed once per sentence in `encode`. Reordering (beams
changing rows) is one row gather into a reused second buffer: a fresh multi-megabyte tensor
per step costs more in page faults than the copy itself.

The sublayers call their leaf modules (Linear, LayerNorm) through `.forward`: a decoder step
makes ~50 such calls, and `nn.Module.__call__`'s hook handling cost ~5 us each (2-3% of a greedy
search at d128); nmt registers no hooks on them.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from nmt.config import TransformerConfig
from nmt.data.vocab import VocabInfo
from nmt.errors import NmtError
from nmt.models.attention import MultiHeadAttention
from nmt.models.base import ATTENTION_KINDS, make_embeddings, step_scores
from nmt.models.dropout import Dropout

KV = tuple[torch.Tensor, torch.Tensor]
# What forward_with_attention can return: encoder-decoder (source-target) attention, the
# encoder's self-attention (source x source), the decoder's masked self-attention (target x target)
CACHE_CHUNK = 8  # positions added to the cache at a time: reordering copies the whole capacity


@dataclass
class TransformerEncoderOut:
    """Encoder output plus everything the decoder derives from it once per sentence."""

    memory: torch.Tensor  # (B, S, d)
    mask: torch.Tensor | None  # (B, 1, 1, S) bool, True on real tokens; None when nothing is padded
    lengths: torch.Tensor  # (B,)
    cross_kv: list[KV]  # per decoder layer: k, v (B, H, S, Dh)
    group: int = 1  # decoder rows per encoder row: beam search's k hypotheses share one copy


@dataclass
class TransformerState:
    """Self-attention caches of every decoder layer and the number of steps taken.

    `kv` (capacity, 2 * layers, B, H, Dh) holds at each position layer i's key at 2i and value
    at 2i + 1, filled up to `step`. Position-major, so the filled part kv[:step] is one
    contiguous block: reordering is one row gather over it (not one per layer and kind), and a
    layer's keys kv[:t, 2i].permute(1, 2, 0, 3) are a (B, H, t, Dh) view whose (B, H) strides
    merge (matmul reads it without a copy). `spare` is a same-shaped buffer reordering writes
    into. The buffers are updated in place, so a state is used once: pass on the one
    decode_step / reorder_state returns (as search does), never an older one.
    """

    kv: torch.Tensor | None = None
    step: int = 0
    spare: torch.Tensor | None = None

    def ensure_capacity(self, like: torch.Tensor, layers: int, heads: int) -> torch.Tensor:
        """The cache, grown by CACHE_CHUNK positions when full; `like` (B, 1, d) is this step's
        input: its rows, device and dtype (bf16 weights: a bf16 cache)."""
        kv, t = self.kv, self.step
        if kv is not None and t < kv.size(0):
            return kv
        b, _, d = like.shape
        grown = like.new_empty(t + CACHE_CHUNK, 2 * layers, b, heads, d // heads)
        if kv is not None:
            grown[:t] = kv[:t]
        self.kv, self.spare = grown, None
        return grown

    def select(self, order: torch.Tensor) -> TransformerState:
        """The state of rows `order`: the filled positions gathered into the spare buffer,
        which then swaps roles with the current one (no fresh multi-megabyte tensor a step).
        When most rows stay where they are (beam search keeps a parent's best child in its
        slot), only the moved rows are copied, in place."""
        kv, t = self.kv, self.step
        if kv is None:
            return TransformerState(None, t)
        filled = kv[:t].view(t * kv.size(1), kv.size(2), -1)  # (t * 2L, B, H * Dh)
        if order.numel() == kv.size(2):
            moved = (order != torch.arange(order.numel(), device=order.device)).nonzero()
            if 2 * moved.numel() <= order.numel():
                moved = moved.squeeze(1)
                filled.index_copy_(1, moved, filled.index_select(1, order[moved]))
                return TransformerState(kv, t, self.spare)
        shape = (kv.size(0), kv.size(1), order.numel(), *kv.shape[3:])
        spare = self.spare
        out = spare if spare is not None and spare.shape == shape else kv.new_empty(shape)
        torch.index_select(filled, 1, order, out=out[:t].view(t * shape[1], shape[2], -1))
        return TransformerState(out, t, kv if kv.shape == shape else None)


def _select_rows(x: torch.Tensor, order: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """x's rows `order` along `dim`, gathered as whole contiguous rows (a 2-D index_select is
    several times faster than a 4-D one on CPU)."""
    x = x.contiguous()
    lead = x.shape[:dim]
    flat = x.view(*lead, x.size(dim), -1)
    return flat.index_select(dim, order).view(*lead, order.numel(), *x.shape[dim + 1 :])


def _whole_groups(order: torch.Tensor, g: int) -> torch.Tensor | None:
    """The encoder rows (n',) when `order` (n' * g,) lists whole groups g*i .. g*i + g - 1."""
    if order.numel() % g:
        return None
    groups = order.view(-1, g)
    first = groups[:, :1]
    offsets = torch.arange(g, device=order.device)
    if bool((first % g == 0).all()) and bool((groups == first + offsets).all()):
        return torch.div(first.squeeze(1), g, rounding_mode="floor")
    return None


def _select_encoder_rows(
    enc: TransformerEncoderOut, rows: torch.Tensor, group: int
) -> TransformerEncoderOut:
    """Encoder rows `rows`, each shared by `group` decoder rows."""
    mask = enc.mask
    return TransformerEncoderOut(
        memory=_select_rows(enc.memory, rows),
        mask=None if mask is None else mask.index_select(0, rows),
        lengths=enc.lengths.index_select(0, rows),
        cross_kv=[(_select_rows(k, rows), _select_rows(v, rows)) for k, v in enc.cross_kv],
        group=group,
    )


def sinusoids(length: int, dim: int) -> torch.Tensor:
    """The paper's fixed positional encodings (length, dim): sin on even, cos on odd channels."""
    pos = torch.arange(length, dtype=torch.float32).unsqueeze(1)  # (L, 1)
    freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(length, dim)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq[: dim // 2])
    return table


def sinusoid_halves(length: int, dim: int) -> torch.Tensor:
    """Marian's table (length, dim): the same frequencies, sin in the first ceil(dim / 2)
    channels and cos in the rest, computed in float64 as Marian's converters do."""
    pos = torch.arange(length, dtype=torch.float64).unsqueeze(1)  # (L, 1)
    j = torch.arange(dim, dtype=torch.float64)
    angle = pos / torch.pow(torch.tensor(10000.0, dtype=torch.float64), 2 * (j // 2) / dim)
    return torch.cat([torch.sin(angle[:, 0::2]), torch.cos(angle[:, 1::2])], 1).float()


POSITION_TABLES = {"sinusoidal": sinusoids, "sinusoidal-halves": sinusoid_halves}
ACTIVATIONS = {"relu": torch.relu, "gelu": F.gelu, "swish": F.silu}


class FeedForward(nn.Module):
    """Position-wise two-layer network. No dropout on the inner activations (as fairseq's
    default): on CPU, drawing a mask for the 4x wider hidden layer costs more than it helps."""

    def __init__(self, d_model: int, ff_dim: int, activation: str) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d_model, ff_dim), nn.Linear(ff_dim, d_model)
        self.act = ACTIVATIONS[activation]
        for lin in (self.fc1, self.fc2):
            nn.init.xavier_uniform_(lin.weight)
            nn.init.zeros_(lin.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1.forward(x)
        return self.fc2.forward(self.act(h))


class _Sublayers(nn.Module):
    """Residual wiring shared by both layer types: pre-norm (x + f(LN(x))) or post (LN(x + f(x)))."""

    def __init__(self, cfg: TransformerConfig, n: int) -> None:
        super().__init__()
        self.pre = cfg.norm == "pre"
        self.norms = nn.ModuleList(nn.LayerNorm(cfg.d_model) for _ in range(n))
        self.drop = Dropout(cfg.dropout)
        self.ff = FeedForward(cfg.d_model, cfg.ff_dim, cfg.activation)

    def _in(self, x: torch.Tensor, i: int) -> torch.Tensor:
        return self.norms[i].forward(x) if self.pre else x  # .forward: see the module notes

    def _out(self, x: torch.Tensor, h: torch.Tensor, i: int) -> torch.Tensor:
        x = x + (self.drop(h) if self.training else h)  # a module call fewer per decoder step
        return x if self.pre else self.norms[i].forward(x)

    def _feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        i = len(self.norms) - 1
        return self._out(x, self.ff.forward(self._in(x, i)), i)


class EncoderLayer(_Sublayers):
    """Self-attention + feed-forward."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__(cfg, 2)
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.heads, cfg.attention_dropout)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """All source positions (B, S, d), and their self-attention (B, H, S, S) if asked for."""
        h, weights = self.self_attn(self._in(x, 0), mask=mask, need_weights=need_weights)
        return self._feed_forward(self._out(x, h, 0)), weights


class DecoderLayer(_Sublayers):
    """Causal self-attention + encoder-decoder attention + feed-forward."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__(cfg, 3)
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.heads, cfg.attention_dropout)
        self.cross_attn = MultiHeadAttention(
            cfg.d_model, cfg.heads, cfg.attention_dropout, cross=True
        )

    def forward(
        self, x: torch.Tensor, kv: KV, mask: torch.Tensor | None, weights: str | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Teacher-forced pass over all target positions (B, T, d); `weights` "cross" also returns
        the encoder-decoder attention (B, H, T, S), "self" the masked self-attention (B, H, T, T)."""
        h, self_w = self.self_attn(self._in(x, 0), causal=True, need_weights=weights == "self")
        x = self._out(x, h, 0)
        need = weights == "cross"
        h, cross_w = self.cross_attn(self._in(x, 1), kv=kv, mask=mask, need_weights=need)
        return self._feed_forward(self._out(x, h, 1)), self_w if weights == "self" else cross_w

    def step(
        self,
        x: torch.Tensor,
        cache: torch.Tensor,
        t: int,
        kv: KV,
        mask: torch.Tensor | None,
        need_weights: bool,
        group: int = 1,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One position (B, 1, d) at step t; its key/value are written into `cache` (capacity,
        2, B, H, Dh) in place; every `group` consecutive rows attend to one row of the encoder
        keys/values `kv`."""
        h = self.self_attn.step(self._in(x, 0), cache, t)
        x = self._out(x, h, 0)
        h, weights = self.cross_attn.step_cross(self._in(x, 1), kv, mask, group, need_weights)
        return self._feed_forward(self._out(x, h, 1)), weights


def _stack_layers(weights: list[torch.Tensor | None]) -> torch.Tensor:
    """Each layer's attention weights (B, H, T, S) on a new layer axis: (B, L, H, T, S)."""
    return torch.stack([w for w in weights if w is not None], 1)


class Transformer(nn.Module):
    """Encoder-decoder Transformer; pre-norm by default, post-norm (the paper's) as an option."""

    sinusoids: torch.Tensor  # (max_positions, d) buffer, when positions are sinusoidal
    output_bias: torch.Tensor | None  # (V,) buffer with model.output_bias, else None
    attention_kinds = ATTENTION_KINDS  # cross, the encoder's self, the decoder's masked self
    autocast_inference = False  # bf16 decoding casts the weights (and so the cache) once

    def __init__(self, cfg: TransformerConfig, vocab: VocabInfo) -> None:
        super().__init__()
        if cfg.d_model % cfg.heads:
            raise NmtError(
                f"model.d_model {cfg.d_model} is not divisible by model.heads {cfg.heads}"
            )
        self.cfg, self.vocab, self.max_positions = cfg, vocab, cfg.max_positions
        d = cfg.d_model
        self.scale = math.sqrt(d) if cfg.scale_embeddings else 1.0
        self.src_embed, self.tgt_embed = make_embeddings(vocab, d, cfg.tie_embeddings)
        self.output = nn.Linear(d, vocab.tgt_size, bias=False)
        # fixed, as Marian's final_logits_bias: saved with the weights, never trained
        self.register_buffer(
            "output_bias", torch.zeros(vocab.tgt_size) if cfg.output_bias else None
        )
        if cfg.positions == "learned":
            self.positions: nn.Embedding | None = nn.Embedding(cfg.max_positions, d)
        else:
            self.positions = None
            table = POSITION_TABLES[cfg.positions](cfg.max_positions, d)
            self.register_buffer("sinusoids", table, persistent=False)
        self.drop = Dropout(cfg.dropout)
        self.encoder_layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.encoder_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.decoder_layers))
        pre = cfg.norm == "pre"
        self.encoder_norm = nn.LayerNorm(d) if pre else nn.Identity()
        self.decoder_norm = nn.LayerNorm(d) if pre else nn.Identity()
        self._init_embeddings()
        if cfg.tie_embeddings:
            self.output.weight = self.tgt_embed.weight

    def _init_embeddings(self) -> None:
        """N(0, d^-1/2) so that scaled embeddings have unit variance; padding rows stay zero."""
        shared = self.src_embed is self.tgt_embed
        for emb in [self.tgt_embed] if shared else [self.src_embed, self.tgt_embed]:
            nn.init.normal_(emb.weight, 0.0, self.cfg.d_model**-0.5)
            with torch.no_grad():
                emb.weight[self.vocab.pad_id].zero_()
        if not self.cfg.tie_embeddings:
            nn.init.normal_(self.output.weight, 0.0, self.cfg.d_model**-0.5)
        if self.positions is not None:
            nn.init.normal_(self.positions.weight, 0.0, self.cfg.d_model**-0.5)

    def _embed(self, emb: nn.Embedding, tokens: torch.Tensor, start: int = 0) -> torch.Tensor:
        """Scaled token embeddings plus positions start..start+T-1: (B, T) -> (B, T, d)."""
        t = tokens.size(1)
        if start + t > self.max_positions:
            raise NmtError(
                f"sequence of {start + t} tokens exceeds model.max_positions {self.max_positions}"
            )
        x = emb(tokens) * self.scale  # (B, T, d)
        if self.positions is not None:
            x = x + self.positions.weight[start : start + t]
        else:
            x = x + self.sinusoids[start : start + t].to(x.dtype)
        return self.drop(x) if self.training else x

    def encode(self, src: torch.Tensor, src_lengths: torch.Tensor) -> TransformerEncoderOut:
        """Run the encoder and precompute each decoder layer's cross-attention keys/values."""
        return self._encode(src, src_lengths, need_weights=False)[0]

    def _encode(
        self, src: torch.Tensor, src_lengths: torch.Tensor, need_weights: bool
    ) -> tuple[TransformerEncoderOut, list[torch.Tensor | None]]:
        """`encode`, and if `need_weights` each encoder layer's self-attention (B, H, S, S)."""
        s = src.size(1)
        mask = None
        if bool((src_lengths < s).any()):
            mask = (torch.arange(s, device=src.device) < src_lengths.unsqueeze(1))[:, None, None]
        x = self._embed(self.src_embed, src)  # (B, S, d)
        attns = []
        for layer in self.encoder_layers:
            x, w = layer(x, mask, need_weights)
            attns.append(w)
        memory = self.encoder_norm(x)  # (B, S, d)
        cross_kv = [layer.cross_attn.project_kv(memory) for layer in self._decoders()]
        return TransformerEncoderOut(memory, mask, src_lengths, cross_kv), attns

    def _decoders(self) -> list[DecoderLayer]:
        """The decoder layers with their type (a ModuleList yields plain Modules)."""
        return cast(list[DecoderLayer], list(self.decoder_layers))

    def init_state(self, encoder_out: TransformerEncoderOut) -> TransformerState:
        """Empty caches: nothing decoded yet (allocated at the first step)."""
        return TransformerState()

    def decode_step(
        self,
        prev_tokens: torch.Tensor,
        encoder_out: TransformerEncoderOut,
        state: TransformerState,
        need_attn: bool = False,
        normalize: bool = True,
    ) -> tuple[torch.Tensor, TransformerState, torch.Tensor | None]:
        """Log-probs (B, V) float32 of the next token given the previous one (B,); raw logits
        with `normalize=False` (the same argmax, one pass over (B, V) fewer)."""
        t = state.step
        x = self._embed(self.tgt_embed, prev_tokens.unsqueeze(1), start=t)  # (B, 1, d)
        layers = self._decoders()
        kv = state.ensure_capacity(x, len(layers), self.cfg.heads)
        attns = []
        for i, layer in enumerate(layers):
            cache = kv[:, 2 * i : 2 * i + 2]  # (capacity, 2, B, H, Dh): keys, values
            x, w = layer.step(
                x, cache, t, encoder_out.cross_kv[i], encoder_out.mask, need_attn, encoder_out.group
            )
            attns.append(w)
        logits = self.project(self.decoder_norm(x[:, 0])).float()  # (B, V)
        scores = step_scores(logits, normalize)
        attn = _stack_layers(attns)[:, :, :, 0] if need_attn else None  # (B, L, H, S)
        return scores, TransformerState(kv, t + 1, state.spare), attn

    def reorder_encoder_out(
        self, encoder_out: TransformerEncoderOut, order: torch.Tensor
    ) -> TransformerEncoderOut:
        """Select / repeat decoder rows (dropping finished sentences). A shared (grouped)
        encoder output stays shared when `order` keeps whole groups, as beam search's does."""
        g = encoder_out.group
        if g > 1:
            whole = _whole_groups(order, g)
            if whole is not None:
                return _select_encoder_rows(encoder_out, whole, g)
            order = torch.div(order, g, rounding_mode="floor")  # one encoder row per decoder row
        return _select_encoder_rows(encoder_out, order, 1)

    def repeat_encoder_out(
        self, encoder_out: TransformerEncoderOut, k: int
    ) -> TransformerEncoderOut:
        """Beam expansion without copies: k consecutive decoder rows share each sentence's
        encoder keys/values, and cross-attention scores their k queries in one product."""
        return dataclasses.replace(encoder_out, group=encoder_out.group * k)

    def reorder_state(self, state: TransformerState, order: torch.Tensor) -> TransformerState:
        """Reorder the self-attention caches to follow the surviving hypotheses."""
        return state.select(order)

    def project(self, hidden: torch.Tensor) -> torch.Tensor:
        """The output layer: features (..., d) to logits (..., V), with the fixed bias if any."""
        logits = self.output(hidden)
        return logits if self.output_bias is None else logits + self.output_bias.to(logits.dtype)

    def forward(
        self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor
    ) -> torch.Tensor:
        """Teacher forcing: logits (B, T, V)."""
        return self.project(self.features(src, src_lengths, tgt_in))

    def features(
        self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor
    ) -> torch.Tensor:
        """Teacher forcing up to the output projection: (B, T, d) (nmt.train.loss fuses the rest)."""
        return self._teacher_forced(src, src_lengths, tgt_in, kind=None)[0]

    def forward_with_attention(
        self,
        src: torch.Tensor,
        src_lengths: torch.Tensor,
        tgt_in: torch.Tensor,
        kind: str = "cross",
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher forcing: logits (B, T, V) and the attention of every layer and head of `kind`
        (ATTENTION_KINDS): "cross" (B, L, H, T, S), the encoder's "self" (B, L_enc, H, S, S), or
        the decoder's masked self-attention "decoder" (B, L, H, T, T), exactly 0 on the future."""
        if kind not in ATTENTION_KINDS:
            raise ValueError(f"unknown attention kind {kind!r} (choices: cross, self, decoder)")
        hidden, attns = self._teacher_forced(src, src_lengths, tgt_in, kind)
        return self.project(hidden), _stack_layers(attns)  # (B, L, H, rows, columns)

    def _teacher_forced(
        self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor, kind: str | None
    ) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
        """Features (B, T, d) and each layer's attention of `kind` (none: no weights computed)."""
        enc, enc_attns = self._encode(src, src_lengths, need_weights=kind == "self")
        x = self._embed(self.tgt_embed, tgt_in)  # (B, T, d)
        part = {"cross": "cross", "decoder": "self"}.get(kind or "")
        attns = []
        for layer, kv in zip(self.decoder_layers, enc.cross_kv, strict=True):
            x, w = layer(x, kv, enc.mask, part)
            attns.append(w)
        return self.decoder_norm(x), enc_attns if kind == "self" else attns  # (B, T, d)
