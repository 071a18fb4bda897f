"""The SentencePiece models a model directory decodes with, and the check that an ensemble's
members share them (same pieces, same casing)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nmt.data.vocab import Tokenizer, vocabulary_difference
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
    """An ensemble member must map ids to the same pieces as the first model, on both sides,
    and see the same input (nmt.data.vocab.vocabulary_difference)."""
    theirs = model_tokenizers(other, meta)
    differs = vocabulary_difference(theirs, toks, extended_ok=False)
    if differs == "lowercase":
        raise NmtError(
            f"{other}: trained on {'lowercased' if theirs[0].lowercase else 'cased'} text, "
            f"{first} on {'lowercased' if toks[0].lowercase else 'cased'} (an ensemble's models "
            "must see the same input)"
        )
    if differs is not None:
        raise NmtError(
            f"{other}: its {differs} vocabulary differs from {first}'s (the models of an "
            "ensemble must share their SentencePiece models)"
        )
