"""The one decoding contract every architecture implements, so search, training and
visualization never ask which model they have.

    enc   = model.encode(src, src_lengths)              # src: (B, S) long, src_lengths: (B,) long
    state = model.init_state(enc)                       # per-sentence decoder state
    log_probs, state, attn = model.decode_step(prev, enc, state, need_attn=False)
                                                        # prev: (B,) long -> log_probs: (B, V) float32
    logits, state, attn = model.decode_step(prev, enc, state, normalize=False)
                                                        # raw scores, same argmax: for searches that
                                                        # need the best token but no probabilities
                                                        # attn: (B, layers, heads, S) or None
    enc   = model.reorder_encoder_out(enc, order)       # order: (B',) long; selects / repeats rows
    enc   = model.repeat_encoder_out(enc, k)            # each row k times in a row (beam search);
                                                        # a model may share one copy among the k
    state = model.reorder_state(state, order)
    logits = model(src, src_lengths, tgt_in)            # teacher forcing: (B, T, V)
    logits, attn = model.forward_with_attention(src, src_lengths, tgt_in)
                                                        # attn: (B, layers, heads, T, S)

Target sequences are `[bos] y1 .. yn` in, `y1 .. yn [eos]` out. Sources carry no bos, and end with eos.
Token ids are fixed for every model: pad 0, unk 1, bos 2, eos 3.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

import torch

from nmt.data.vocab import VocabInfo

# Attention a model can show (`forward_with_attention`): source-target, encoder self-attention,
# masked decoder self-attention. A model without one of them refuses it with a one-line error.
ATTENTION_KINDS = ("cross", "self", "decoder")


def make_embeddings(
    vocab: VocabInfo, dim: int, tie: bool
) -> tuple[torch.nn.Embedding, torch.nn.Embedding]:
    """Source and target embeddings; with `tie` and a joint vocabulary they are one module."""
    from nmt.errors import NmtError

    tgt = torch.nn.Embedding(vocab.tgt_size, dim, padding_idx=vocab.pad_id)
    if not (tie and vocab.joint):
        return torch.nn.Embedding(vocab.src_size, dim, padding_idx=vocab.pad_id), tgt
    if vocab.src_size != vocab.tgt_size:
        raise NmtError(
            f"a joint vocabulary needs equal sizes, got {vocab.src_size} and {vocab.tgt_size}"
        )
    return tgt, tgt


def step_scores(logits: torch.Tensor, normalize: bool) -> torch.Tensor:
    """decode_step's output from its fresh (B, V) float32 logits: log-probs, or the logits as
    they are. Normalized in place outside autograd: a second (B, V) tensor each step cost
    13-20% of the log-softmax on CPU (beam 5 at 320-640 rows x 8k)."""
    if not normalize:
        return logits
    if logits.requires_grad:
        return torch.log_softmax(logits, dim=-1)
    return torch.ops.aten._log_softmax.out(logits, -1, False, out=logits)


class Decoder(Protocol):
    """What search code relies on; both Seq2Seq and Transformer satisfy it."""

    vocab: VocabInfo
    max_positions: int  # longest sequence it takes (0: no limit); search output capped at this - 1
    attention_kinds: tuple[str, ...]  # what forward_with_attention gives (of ATTENTION_KINDS)
    autocast_inference: bool  # decodes in bf16 under autocast around fp32 parts, not cast whole
    training: bool  # in training mode (nn.Module's flag)

    def parameters(self, recurse: bool = True) -> Iterator[torch.nn.Parameter]: ...

    def encode(self, src: torch.Tensor, src_lengths: torch.Tensor) -> Any: ...

    def init_state(self, encoder_out: Any) -> Any: ...

    def decode_step(
        self,
        prev_tokens: torch.Tensor,
        encoder_out: Any,
        state: Any,
        need_attn: bool = False,
        normalize: bool = True,
    ) -> tuple[torch.Tensor, Any, torch.Tensor | None]: ...

    def reorder_encoder_out(self, encoder_out: Any, order: torch.Tensor) -> Any: ...

    def repeat_encoder_out(self, encoder_out: Any, k: int) -> Any: ...

    def reorder_state(self, state: Any, order: torch.Tensor) -> Any: ...

    def forward(
        self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor
    ) -> torch.Tensor: ...

    def forward_with_attention(
        self,
        src: torch.Tensor,
        src_lengths: torch.Tensor,
        tgt_in: torch.Tensor,
        kind: str = "cross",
    ) -> tuple[torch.Tensor, torch.Tensor]: ...


class Trainable(Decoder, Protocol):
    """What training's loss and validation rely on beside decoding; every registered
    architecture has it: the decoder's last hidden states, the output projection they go through
    (its weight may be the target embeddings'), and a fixed output bias (an imported model's)."""

    output: torch.nn.Linear  # hidden states -> target vocabulary scores
    tgt_embed: torch.nn.Embedding
    output_bias: torch.Tensor | None  # (V,) added to the scores, or None

    def features(
        self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor
    ) -> torch.Tensor: ...
