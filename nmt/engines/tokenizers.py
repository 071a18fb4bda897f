"""The check that an ensemble's members decode with the same SentencePiece models (same pieces,
same casing)."""

from __future__ import annotations

from nmt.data.vocab import vocabulary_difference
from nmt.dirs.model import ModelDir
from nmt.errors import NmtError


def check_same_vocabulary(first: ModelDir, other: ModelDir) -> None:
    """An ensemble member must map ids to the same pieces as the first model, on both sides,
    and see the same input (nmt.data.vocab.vocabulary_difference)."""
    toks, theirs = first.tokenizers, other.tokenizers
    differs = vocabulary_difference(theirs, toks, extended_ok=False)
    if differs == "lowercase":
        raise NmtError(
            f"{other.path}: trained on {'lowercased' if theirs[0].lowercase else 'cased'} text, "
            f"{first.path} on {'lowercased' if toks[0].lowercase else 'cased'} (an ensemble's "
            "models must see the same input)"
        )
    if differs is not None:
        raise NmtError(
            f"{other.path}: its {differs} vocabulary differs from {first.path}'s (the models of "
            "an ensemble must share their SentencePiece models)"
        )
