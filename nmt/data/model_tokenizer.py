"""`nmt preprocess --tokenizer-from MODEL_DIR`: a corpus encoded with an existing model's tokenizer.

An imported model (`nmt import`) segments with its SentencePiece models and maps pieces to ids
through its own vocabularies (`nmt.data.marian_vocab`), with its own special ids; an nmt model
has SentencePiece models with nmt's fixed ids (as `--spm-from` reuses them). Either way no
SentencePiece is learnt: the corpus gets the model's ids, and the manifest's `tokenizer_from`
records which model's tokenizer it was (its special ids and sizes), so `nmt train --init-from`
can check that the weights it loads fit the ids. The tokenizer files are copied into DATA_DIR.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nmt.data.marian_vocab import VocabTokenizer, imported_pair
from nmt.data.spm_source import SpmSource, spm_source
from nmt.data.vocab import Tokenizer, VocabInfo
from nmt.dirs.model import MODEL_META, ModelDir
from nmt.errors import NmtError

MANIFEST_KEY = "tokenizer_from"  # manifest.json: which model's tokenizer encoded the corpus
IMPORTED_FILES = ("src_spm", "tgt_spm", "pieces", "target_pieces")  # vocab.json's file names
IMPORTED_KEYS = ("special_pieces", "languages", "imported_from")  # copied into a trained model


@dataclass(frozen=True)
class ModelTokenizer:
    """The tokenizer of a MODEL_DIR: its vocabulary facts and, for an imported model, the
    vocab.json entries naming its tokenizer files (`files`, empty for an nmt model)."""

    dir: Path
    vocab: VocabInfo
    meta: dict[str, Any]
    spm: SpmSource | None  # an nmt model's SentencePiece models (None: an imported model)

    @property
    def imported(self) -> bool:
        """Whether pieces map to ids through the model's own vocabularies (`nmt import`)."""
        return self.spm is None

    def files(self) -> dict[str, Any]:
        """The imported tokenizer's entries (file names, special pieces, languages)."""
        return {k: self.meta.get(k) for k in (*IMPORTED_FILES, *IMPORTED_KEYS)}

    def record(self) -> dict[str, Any]:
        """The manifest's `tokenizer_from` entry."""
        kind = "imported" if self.imported else "sentencepiece"
        entry = {"model": str(self.dir), "kind": kind, "vocab": vocab_fields(self.vocab)}
        return {**entry, "files": self.files()} if self.imported else entry


def vocab_fields(vocab: VocabInfo) -> dict[str, Any]:
    """A VocabInfo as JSON fields (`never` as a list)."""
    return dataclasses.asdict(vocab) | {"never": list(vocab.never)}


def model_tokenizer(model: ModelDir) -> ModelTokenizer:
    """The tokenizer of MODEL_DIR: its SentencePiece models, or an imported model's files."""
    meta, d = model.meta, model.path
    if not meta.get("pieces"):
        return ModelTokenizer(d, model.vocab, meta, spm_source(model))
    for key in IMPORTED_FILES:
        name = meta.get(key)
        if name and not (d / str(name)).is_file():
            raise NmtError(f"{d / str(name)}: tokenizer file not found ({MODEL_META} names it)")
    return ModelTokenizer(d, model.vocab, meta, None)


def copy_tokenizer(source: ModelTokenizer, out: Path) -> dict[str, Any]:
    """Copy an imported model's tokenizer files into `out` under their names; its entries."""
    files = source.files()
    for key in IMPORTED_FILES:
        if files.get(key):
            shutil.copyfile(source.dir / files[key], out / files[key])
    return files


@functools.lru_cache(maxsize=2)
def imported_tokenizers(folder: str, files: str) -> tuple[VocabTokenizer, VocabTokenizer]:
    """The (source, target) tokenizers of an imported model's files in `folder` (`files`: their
    entries as JSON), loaded once per process (encoding workers load them on first use)."""
    return imported_pair(Path(folder), json.loads(files))


def unknown_lines(tok: Tokenizer, texts: Sequence[str], ids: Sequence[Sequence[int]]) -> int:
    """How many of `texts` (encoded as `ids`) hold pieces the vocabulary lacks (`<unk>`); 0 for
    a SentencePiece tokenizer. Only lines whose ids hold `<unk>` are checked again."""
    if not isinstance(tok, VocabTokenizer):
        return 0
    unk = tok.unk_id
    maybe = [t for t, i in zip(texts, ids, strict=True) if unk in i]
    return tok.unknown_lines(maybe, 1) if maybe else 0


def tokenizer_from(model: ModelDir, lowercase: bool) -> ModelTokenizer:
    """`--tokenizer-from`: the model's tokenizer, checked against `--lowercase` (an imported
    model reads text as it is; an nmt model as it was preprocessed)."""
    found = model_tokenizer(model)
    model_lc = found.spm.lowercase if found.spm is not None else False
    if model_lc != lowercase:
        how = "add --lowercase" if model_lc else "drop --lowercase"
        kind = "was preprocessed with --lowercase" if model_lc else "does not lowercase its text"
        raise NmtError(f"--tokenizer-from {found.dir} {kind}: {how}")
    return found


def manifest_fields(source: ModelTokenizer) -> dict[str, Any]:
    """The manifest's vocabulary entries for a corpus encoded with `source`'s tokenizer."""
    v = source.vocab
    return {
        "joint": v.joint,
        "vocab_size": {"src": v.src_size, "tgt": v.tgt_size},
        "requested_vocab_size": None,
        "special_ids": {"pad": v.pad_id, "unk": v.unk_id, "bos": v.bos_id, "eos": v.eos_id},
        "never": list(v.never),
        MANIFEST_KEY: source.record(),
    }
