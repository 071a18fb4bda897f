"""Reading a preprocessed DATA_DIR: its manifest, memory-mapped token arrays, and tokenizers.

DATA_DIR layout (see DESIGN.md): manifest.json, spm.model (or spm.<lang>.model), and per split and
language `<split>.<lang>.ids` (token ids, no bos/eos) and `<split>.<lang>.idx` (int64 offsets, n+1), so
sentence i is ids[idx[i]:idx[i+1]]. Valid and test splits also keep their raw lines in
`<split>.<lang>.txt`, because BLEU is computed against untokenized references. `nmt.data.preprocess`
writes it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from nmt.data.vocab import Tokenizer, VocabInfo
from nmt.errors import NmtError

FORMAT = "nmt-data/1"
MANIFEST = "manifest.json"


class TokenArray:
    """Variable-length token sequences over one memory-mapped id file: arr[i] is a view, not a copy."""

    def __init__(self, ids_path: Path, idx_path: Path, dtype: npt.DTypeLike) -> None:
        self.ids_path = ids_path
        self.offsets = _memmap(idx_path, "<i8")
        self.ids = _memmap(ids_path, dtype)
        if len(self.offsets) == 0 or int(self.offsets[-1]) != len(self.ids):
            raise NmtError(f"{ids_path}: corrupt (offsets in {idx_path.name} do not match the ids)")

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"sentence {i} out of range ({len(self)} sentences)")
        return self.ids[self.offsets[i] : self.offsets[i + 1]]

    def __iter__(self) -> Iterator[np.ndarray]:
        return (self[i] for i in range(len(self)))

    @functools.cached_property
    def lengths(self) -> np.ndarray:
        """Token count of every sentence (int64), for length bucketing without touching the ids."""
        return np.diff(self.offsets)

    @property
    def num_tokens(self) -> int:
        """Total tokens in the array."""
        return len(self.ids)


@dataclass
class Split:
    """One split of a data folder: aligned source and target token arrays."""

    name: str
    src: TokenArray
    tgt: TokenArray

    def __len__(self) -> int:
        return len(self.src)


def _memmap(path: Path, dtype: npt.DTypeLike) -> np.ndarray:
    """Map a raw little-endian array read-only; numpy cannot map an empty file, so use an empty array."""
    if not path.is_file():
        raise NmtError(f"{path}: missing from the data folder")
    size, itemsize = path.stat().st_size, np.dtype(dtype).itemsize
    if size % itemsize:  # a cut copy: numpy's error would name no file
        raise NmtError(
            f"{path}: corrupt ({size} bytes is not a whole number of {itemsize}-byte values; "
            "run nmt preprocess again)"
        )
    if size == 0:
        return np.empty(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r")


def read_manifest(data_dir: str | Path) -> dict[str, Any]:
    """The manifest of a preprocessed data folder; a wrong folder is a user error."""
    path = Path(data_dir) / MANIFEST
    if not path.is_file():
        raise NmtError(
            f"{data_dir}: not a preprocessed data folder (no {MANIFEST}; run nmt preprocess)"
        )
    try:
        manifest: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise NmtError(f"{path}: invalid JSON ({e})") from None
    if manifest.get("format") != FORMAT:
        raise NmtError(
            f"{path}: unsupported data format {manifest.get('format')!r} (need {FORMAT})"
        )
    return manifest


def load(data_dir: str | Path, split: str) -> Split:
    """Memory-map one split (train, valid, or a test name) without reading the corpus into memory."""
    data_dir = Path(data_dir)
    m = read_manifest(data_dir)
    if split not in m["splits"]:
        raise NmtError(f"{data_dir}: no split {split!r} (have: {', '.join(m['splits'])})")
    files = m["splits"][split]["files"]
    dtype = np.dtype(m["dtype"]).newbyteorder("<")
    src, tgt = (
        TokenArray(data_dir / files[lang]["ids"], data_dir / files[lang]["idx"], dtype)
        for lang in (m["src_lang"], m["tgt_lang"])
    )
    if len(src) != len(tgt):
        raise NmtError(
            f"{data_dir}: split {split} has {len(src)} source but {len(tgt)} target lines"
        )
    return Split(split, src, tgt)


def tokenizers(data_dir: str | Path) -> tuple[Tokenizer, Tokenizer]:
    """(source, target) tokenizers of a data folder; the same object twice for a joint vocabulary."""
    data_dir = Path(data_dir)
    m = read_manifest(data_dir)
    lc = lowercased(m)
    src = Tokenizer.load(data_dir / m["spm"]["src"], lc)
    tgt = (
        src
        if m["spm"]["tgt"] == m["spm"]["src"]
        else Tokenizer.load(data_dir / m["spm"]["tgt"], lc)
    )
    return src, tgt


def lowercased(manifest: dict[str, Any]) -> bool:
    """Whether a data folder's text was lowercased (`nmt preprocess --lowercase`; older
    manifests have no such option and were not)."""
    return bool(manifest.get("options", {}).get("lowercase", False))


def vocab_info(data_dir: str | Path) -> VocabInfo:
    """What a model needs to know about the vocabulary of a data folder."""
    m = read_manifest(data_dir)
    return VocabInfo(
        src_size=m["vocab_size"]["src"],
        tgt_size=m["vocab_size"]["tgt"],
        joint=m["joint"],
        lowercase=lowercased(m),
    )
