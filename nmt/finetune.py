"""Starting from a trained model (fine-tuning, domain adaptation, continued training).

Two steps, as in fairseq, Marian and OpenNMT: `nmt preprocess --spm-from DIR` encodes the new corpus
with the SentencePiece models of DIR (a MODEL_DIR or a DATA_DIR), so every id means the same piece
to the trained weights; `nmt train --init-from MODEL_DIR` then starts from that model's weights with
a fresh optimizer, schedule and step count. The pieces are checked one by one before any weights
load, so a corpus encoded with other SentencePiece models is a one-line error, not a silent
scramble of the embeddings.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nmt.dataset import MANIFEST, read_manifest
from nmt.errors import NmtError
from nmt.textio import read_json_object
from nmt.vocab import Tokenizer

MODEL_META = "vocab.json"  # nmt.modeldir writes it into every MODEL_DIR


@dataclass(frozen=True)
class SpmSource:
    """The SentencePiece models of a MODEL_DIR or DATA_DIR, and the languages they were made for."""

    dir: Path
    src: Path
    tgt: Path
    src_lang: str
    tgt_lang: str
    spm_type: str | None  # unigram or bpe where the folder records it (a DATA_DIR's manifest)

    @property
    def joint(self) -> bool:
        """One model for both sides."""
        return self.src == self.tgt


def spm_source(directory: str | Path) -> SpmSource:
    """Find the SentencePiece models of a model directory (vocab.json) or data directory
    (manifest.json); a folder that is neither, or a missing model file, is a one-line error."""
    d = Path(directory)
    if (d / MODEL_META).is_file():
        meta = read_json_object(d / MODEL_META)
        names = meta.get("src_spm"), meta.get("tgt_spm")
    elif (d / MANIFEST).is_file():
        meta = read_manifest(d)
        spm = meta.get("spm")
        names = (spm.get("src"), spm.get("tgt")) if isinstance(spm, dict) else (None, None)
    elif d.is_dir():
        raise NmtError(
            f"{d}: neither a model directory ({MODEL_META}) nor a data directory ({MANIFEST})"
        )
    else:
        raise NmtError(f"{d}: directory not found")
    if not all(isinstance(n, str) and n for n in names):
        raise NmtError(f"{d}: names no SentencePiece models")
    src, tgt = (d / str(n) for n in names)
    for path in (src, tgt):
        if not path.is_file():
            raise NmtError(f"{path}: SentencePiece model not found")
    kind = meta.get("spm_type")
    return SpmSource(
        d, src, tgt, str(meta.get("src_lang", "")), str(meta.get("tgt_lang", "")),
        kind if isinstance(kind, str) else None,
    )  # fmt: skip


def check_same_vocabulary(init_dir: Path, data_dir: Path, data_spm: tuple[Path, Path]) -> None:
    """The corpus must be encoded with the pieces the initial weights were trained on."""
    theirs = spm_source(init_dir)
    for side, ours, init in zip(
        ("source", "target"), data_spm, (theirs.src, theirs.tgt), strict=True
    ):
        if not Tokenizer.load(ours).same_pieces(Tokenizer.load(init)):
            raise NmtError(
                f"{data_dir}: its {side} vocabulary differs from {init_dir}'s (preprocess the "
                f"corpus with --spm-from {init_dir})"
            )


def init_weights(
    model: Any, init_dir: str | Path, checkpoint: str, data_dir: Path, data_spm: tuple[Path, Path]
) -> dict[str, Any]:
    """Load MODEL_DIR's checkpoint into the freshly built `model`, after checking vocabularies;
    returns what was loaded ({"init_from", "checkpoint", "step"}) for the log and metrics."""
    from nmt.modeldir import checkpoint_path, load_weights, weights_step

    init_dir = Path(init_dir)
    if not (init_dir / MODEL_META).is_file():
        spm_source(init_dir)  # names what the folder is (missing, or a DATA_DIR)
        raise NmtError(f"{init_dir}: not a model directory (--init-from takes a MODEL_DIR)")
    check_same_vocabulary(init_dir, data_dir, data_spm)
    path = checkpoint_path(init_dir, checkpoint)
    load_weights(model, path, what="the model section of this run")
    return {"init_from": str(init_dir), "checkpoint": str(path), "step": weights_step(path)}
