"""Model registry: `build(config, vocab)` picks the architecture by `model.type`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from nmt.config import ModelConfig
from nmt.errors import NmtError
from nmt.models.base import VocabInfo
from nmt.models.seq2seq import Seq2Seq
from nmt.models.transformer import Transformer

# Every registered architecture: an nn.Module that implements the decoding contract (Decoder).
Model = Seq2Seq | Transformer
# model.type -> constructor, called with that type's config class (nmt.config.MODEL_CONFIGS).
MODELS: dict[str, Callable[[Any, VocabInfo], Model]] = {
    "seq2seq": Seq2Seq,
    "transformer": Transformer,
}


def build(cfg: ModelConfig, vocab: VocabInfo) -> Model:
    """The model named by `cfg.type`, freshly initialised."""
    if cfg.type not in MODELS:
        raise NmtError(f"unknown model.type {cfg.type!r} (choices: {', '.join(MODELS)})")
    return MODELS[cfg.type](cfg, vocab)


def count_parameters(model: nn.Module) -> int:
    """Number of trainable values; a tied matrix counts once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


__all__ = ["MODELS", "Model", "VocabInfo", "build", "count_parameters"]
