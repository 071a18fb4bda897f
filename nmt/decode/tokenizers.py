"""The SentencePiece models a model directory decodes with, and the check that an ensemble's
members share them (same pieces, same casing)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nmt.data.vocab import Tokenizer
from nmt.errors import NmtError


def model_tokenizers(model_dir: Path, meta: dict[str, Any]) -> tuple[Tokenizer, Tokenizer]:
    """MODEL_DIR's source and target SentencePiece models (one object when they are one file)."""
    lc = meta.get("lowercase", False) is True  # `nmt preprocess --lowercase`: cased input meets it
    src_tok = Tokenizer.load(model_dir / meta["src_spm"], lc)
    if meta["tgt_spm"] == meta["src_spm"]:
        return src_tok, src_tok
    return src_tok, Tokenizer.load(model_dir / meta["tgt_spm"], lc)


def check_same_vocabulary(
    first: Path, toks: tuple[Tokenizer, Tokenizer], other: Path, meta: dict[str, Any]
) -> None:
    """An ensemble member must map ids to the same pieces as the first model, on both sides."""
    for side, tok, theirs in zip(
        ("source", "target"), toks, model_tokenizers(other, meta), strict=True
    ):
        if not tok.same_pieces(theirs):
            raise NmtError(
                f"{other}: its {side} vocabulary differs from {first}'s (the models of an "
                "ensemble must share their SentencePiece models)"
            )
        if tok.lowercase != theirs.lowercase:
            raise NmtError(
                f"{other}: trained on {'lowercased' if theirs.lowercase else 'cased'} text, "
                f"{first} on {'lowercased' if tok.lowercase else 'cased'} (an ensemble's models "
                "must see the same input)"
            )
