"""Where a corpus's SentencePiece models come from when it reuses a trained model's pieces
(`nmt preprocess --spm-from DIR`, `nmt train --init-from`): a MODEL_DIR or a DATA_DIR."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from nmt.dirs.data import DataDir
from nmt.dirs.model import ModelDir
from nmt.errors import NmtError


@dataclass(frozen=True)
class SpmSource:
    """The SentencePiece models of a MODEL_DIR or DATA_DIR, and the languages they were made for."""

    dir: Path
    src: Path
    tgt: Path
    src_lang: str
    tgt_lang: str
    spm_type: str | None  # unigram or bpe where the folder records it (a DATA_DIR's manifest)
    lowercase: bool = False  # the pieces were learnt on lowercased text (`--lowercase`)

    @property
    def joint(self) -> bool:
        """One model for both sides."""
        return self.src == self.tgt


def spm_source(opened: ModelDir | DataDir) -> SpmSource:
    """The SentencePiece models of a model directory or a data directory; one that names none,
    or a missing model file, is a one-line error."""
    d = opened.path
    if isinstance(opened, DataDir):
        meta = opened.manifest
        spm = meta.get("spm")
        names = (spm.get("src"), spm.get("tgt")) if isinstance(spm, dict) else (None, None)
        lowercase = opened.lowercase
    elif isinstance(opened, ModelDir):
        meta = opened.meta
        names = meta.get("src_spm"), meta.get("tgt_spm")
        lowercase = meta.get("lowercase", False)
    else:  # not asked for: open_dir opens only the kinds named
        raise NmtError(f"{d}: names no SentencePiece models")
    if not all(isinstance(n, str) and n for n in names):
        raise NmtError(f"{d}: names no SentencePiece models")
    src, tgt = (d / str(n) for n in names)
    for path in (src, tgt):
        if not path.is_file():
            raise NmtError(f"{path}: SentencePiece model not found")
    kind = meta.get("spm_type")
    return SpmSource(
        dir=d,
        src=src,
        tgt=tgt,
        src_lang=str(meta.get("src_lang", "")),
        tgt_lang=str(meta.get("tgt_lang", "")),
        spm_type=kind if isinstance(kind, str) else None,
        lowercase=lowercase is True,
    )


def lowercase_mismatch(spm_dir: Path, lowercased: bool) -> str:
    """Why --spm-from's pieces do not fit: they were learnt on text cased unlike this corpus."""
    if lowercased:
        return f"--spm-from {spm_dir} was preprocessed with --lowercase: add --lowercase"
    return f"--spm-from {spm_dir} was preprocessed without --lowercase: drop --lowercase"


def copy_models(source: SpmSource, out: Path, langs: tuple[str, str]) -> tuple[Path, Path]:
    """Copy --spm-from's model(s) into `out` under a data folder's names (spm.model, or
    spm.<lang>.model per side); returns their (source, target) paths."""
    src, tgt = langs
    models = (
        (out / "spm.model",) * 2
        if source.joint
        else (out / f"spm.{src}.model", out / f"spm.{tgt}.model")
    )
    for origin, dst in zip((source.src, source.tgt), models, strict=True):
        for suffix in (".model", ".vocab"):  # the .vocab beside it is for people to read
            if origin.with_suffix(suffix).is_file():
                shutil.copyfile(origin.with_suffix(suffix), dst.with_suffix(suffix))
    return models[0], models[1]
