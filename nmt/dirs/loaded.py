"""A model built from a model directory's config and loaded with one of its checkpoints."""

from __future__ import annotations

from typing import Any

from nmt.config import Config
from nmt.data.vocab import VocabInfo
from nmt.dirs.model import ModelDir
from nmt.dirs.weights import load_weights


def load_model(
    model_dir: ModelDir, checkpoint: str = "default", device: str = "cpu"
) -> tuple[Any, Config, VocabInfo, dict[str, Any]]:
    """The model MODEL_DIR's config describes, with the weights of `checkpoint` (default, best,
    last, averaged or a file), in eval mode on `device`; returns (model, cfg, vocab, meta)."""
    from nmt.models import build

    model = build(model_dir.config.model, model_dir.vocab, init=False)  # every weight from the file
    load_weights(model, model_dir.checkpoint(checkpoint), device="cpu")
    model.to(device).eval()
    return model, model_dir.config, model_dir.vocab, model_dir.meta
