"""Deployment formats: a model directory as a CTranslate2 directory (nmt.export.ctranslate2) or a
transformers one (nmt.export.huggingface)."""

from __future__ import annotations

from pathlib import Path

from nmt.dirs.model import ModelDir
from nmt.errors import NmtError
from nmt.export.ctranslate2 import FORMATS, QUANTIZATIONS, export_ctranslate2

HUGGINGFACE = "huggingface"


def check_export_options(fmt: str, quantization: str) -> None:
    """Refuse an unknown format, or a quantization CTranslate2 does not take, before the model
    directory is read."""
    if fmt == HUGGINGFACE:
        return
    if fmt not in FORMATS:
        # tests/test_export.py matches the first part of this line
        raise NmtError(
            f"--format must be {' or '.join(FORMATS)}, got {fmt!r} (the other format: huggingface)"
        )
    if quantization not in QUANTIZATIONS:
        raise NmtError(f"--quantization must be {', '.join(QUANTIZATIONS)}; got {quantization!r}")


def export(
    model_dir: ModelDir,
    out_dir: Path,
    fmt: str = "ctranslate2",
    quantization: str = "float32",
    checkpoint: str = "default",
    force: bool = False,
    quiet: bool = False,
) -> Path:
    """Export MODEL_DIR's checkpoint as `fmt` (ctranslate2 or huggingface) into OUT_DIR;
    returns OUT_DIR."""
    check_export_options(fmt, quantization)
    if fmt == HUGGINGFACE:
        from nmt.export.huggingface import export_huggingface

        return export_huggingface(model_dir, out_dir, checkpoint, force=force, quiet=quiet)
    return export_ctranslate2(model_dir, out_dir, quantization, checkpoint, force, quiet)
