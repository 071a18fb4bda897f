"""Model registry: `build(config, vocab)` picks the architecture by `model.type`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn
from torch.overrides import TorchFunctionMode

from nmt.config import ModelConfig
from nmt.data.vocab import VocabInfo
from nmt.errors import NmtError
from nmt.models.seq2seq import Seq2Seq
from nmt.models.transformer import Transformer

# Every registered architecture: an nn.Module that implements the decoding contract (Decoder).
Model = Seq2Seq | Transformer
# model.type -> constructor, called with that type's config class (nmt.config.MODEL_CONFIGS).
MODELS: dict[str, Callable[[Any, VocabInfo], Model]] = {
    "seq2seq": Seq2Seq,
    "transformer": Transformer,
}


def build(cfg: ModelConfig, vocab: VocabInfo, init: bool = True) -> Model:
    """The model named by `cfg.type`, freshly initialised; `init=False` leaves its weights
    unset (random fills skipped) for a caller that loads every one of them next: drawing
    transformer-base's 48M random values took 0.5 s of every `nmt translate`."""
    if cfg.type not in MODELS:
        raise NmtError(f"unknown model.type {cfg.type!r} (choices: {', '.join(MODELS)})")
    if init:
        return MODELS[cfg.type](cfg, vocab)
    with _NoRandomFills():
        return MODELS[cfg.type](cfg, vocab)


class _NoRandomFills(TorchFunctionMode):
    """Skips the in-place random fills of weight initialisation (torch.nn.init and the tensor
    methods it calls); everything else, such as a sinusoid table, is computed as usual."""

    FILLS = frozenset(
        "uniform_ normal_ trunc_normal_ kaiming_uniform_ kaiming_normal_ xavier_uniform_ "
        "xavier_normal_ orthogonal_ sparse_".split()
    )

    def __torch_function__(
        self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        if getattr(func, "__name__", "") in self.FILLS:
            return args[0] if args else (kwargs or {})["tensor"]
        return func(*args, **(kwargs or {}))


def count_parameters(model: nn.Module) -> int:
    """Number of trainable values; a tied matrix counts once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


__all__ = ["MODELS", "Model", "VocabInfo", "build", "count_parameters"]
