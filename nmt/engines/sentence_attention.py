"""One sentence's attention from a loaded `Translator` (`nmt attention`, `nmt serve`'s
/attention): searched, or force-decoded for a given target."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch

from nmt.decode.engine import check_attention_kind
from nmt.decode.options import DecodeOptions
from nmt.errors import NmtError


def _warn(message: str) -> None:
    warnings.warn(message, stacklevel=3)


def _check_utf8(text: str | None, what: str) -> None:
    """Refuse text that came from bytes that were not UTF-8 (a command-line argument keeps
    them as lone surrogates), naming the byte, before SentencePiece fails on it."""
    if text is None:
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        code = ord(text[e.start])
        byte = f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"U+{code:04X}"
        raise NmtError(
            f"the {what} is not valid UTF-8 ({byte} at character {e.start + 1})"
        ) from None


def sentence_attention(
    translator: Any,
    source: str,
    target: str | None,
    options: DecodeOptions,
    kind: str,
) -> tuple[np.ndarray, list[str], list[str], str]:
    """`Translator.attention` of the loaded `translator` (nmt.engines.translator, which imports
    this module): (layers, heads, rows, columns), the column pieces, the row pieces and the
    translation."""
    for given, what in ((source, "source sentence"), (target, "target")):
        _check_utf8(given, what)
    check_attention_kind(kind)
    silent = target is None  # the search encodes it again, and warns there
    (ids,) = translator.encode_sources([source], 1, (lambda _: None) if silent else _warn)
    if not ids:  # blank, or nothing left after normalisation (control characters)
        raise NmtError("the source sentence is empty")
    if target is None:
        (tr,) = translator.translate([source], options, nbest=1, with_attention=kind == "cross")
        hyp = tr.hypotheses[0]
        if kind == "cross":
            assert hyp.attention is not None  # asked for with_attention
            weights = np.transpose(hyp.attention, (1, 2, 0, 3))  # (L, H, T, S)
            eos = translator.tgt_tok.eos_piece
            return weights, tr.source_tokens, hyp.tokens + [eos], hyp.text
        tgt, text = [translator.tgt_tok.piece_to_id(p) for p in hyp.tokens], hyp.text
    else:
        tgt = translator.tgt_tok.encode(target)
        if 0 < translator.max_source < len(tgt):  # Seq2Seq has no position limit (max_source -1)
            _warn(f"target has {len(tgt)} subword tokens, truncated to {translator.max_source}")
            tgt = tgt[: translator.max_source]
        text = translator.tgt_tok.decode(tgt)
    dev = translator.device
    src = torch.tensor([ids + [translator.model.vocab.eos_id]], device=dev)  # (1, S)
    tgt_in = torch.tensor([[translator.model.vocab.bos_id] + tgt], device=dev)  # (1, T)
    with torch.inference_mode(), translator.autocast():
        lengths = torch.tensor([src.size(1)], device=dev)  # (1,)
        _, attn = translator.model.forward_with_attention(src, lengths, tgt_in, kind)
    weights = attn[0].float().cpu().numpy()  # (L, H, rows, columns)
    inputs = [translator.tgt_tok.id_to_piece(i) for i in tgt_in[0].tolist()]  # bos y1 .. yn
    pieces = [translator.src_tok.id_to_piece(i) for i in ids] + [translator.src_tok.eos_piece]
    rows = {"cross": inputs[1:] + [translator.tgt_tok.eos_piece], "self": pieces}.get(kind, inputs)
    return weights, (pieces if kind == "cross" else rows), rows, text
