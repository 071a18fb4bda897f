"""Model registry: `build(config, vocab)` picks the architecture by `model.type`."""

from __future__ import annotations

from torch import nn

from nmt.config import ModelConfig
from nmt.errors import NmtError
from nmt.models.base import VocabInfo
from nmt.models.seq2seq import Seq2Seq
from nmt.models.transformer import Transformer

MODELS: dict[str, type[nn.Module]] = {"seq2seq": Seq2Seq, "transformer": Transformer}


def build(cfg: ModelConfig, vocab: VocabInfo) -> nn.Module:
    """The model named by `cfg.type`, freshly initialised."""
    if cfg.type not in MODELS:
        raise NmtError(f"unknown model.type {cfg.type!r} (choices: {', '.join(MODELS)})")
    return MODELS[cfg.type](cfg, vocab)


def count_parameters(model: nn.Module) -> int:
    """Number of trainable values; a tied matrix counts once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


__all__ = ["MODELS", "VocabInfo", "build", "count_parameters"]
