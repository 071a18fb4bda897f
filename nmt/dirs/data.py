"""Reading a preprocessed DATA_DIR: its manifest, token arrays read by sentence, and tokenizers.

DATA_DIR layout (docs/formats.md): manifest.json, spm.model (or spm.<lang>.model), and per split and
language `<split>.<lang>.ids` (token ids, no bos/eos) and `<split>.<lang>.idx` (int64 offsets, n+1), so
sentence i is ids[idx[i]:idx[i+1]]. Valid and test splits also keep their raw lines in
`<split>.<lang>.txt`, because BLEU is computed against untokenized references. `nmt.data.preprocess`
builds it; `write_manifest` writes its manifest.
"""

from __future__ import annotations

import functools
import json
import os
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from nmt.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer, VocabInfo
from nmt.errors import NmtError, check_format_version

DATA_FORMAT = 1  # the manifest's "format" is nmt-data/<this>: the layout this nmt writes
FORMAT = f"nmt-data/{DATA_FORMAT}"
MANIFEST = "manifest.json"


class TokenArray:
    """Variable-length token sequences in one id file, read a sentence at a time (pread).

    Only the lengths live in memory (int32, 4 bytes a sentence). A memory map would be simpler,
    but its pages count towards the process's RSS as they are touched, 64 KiB at a time: 15,000
    random sentences of a 10M-pair corpus took 1.2 GB, and a long run would hold the whole corpus.
    """

    def __init__(self, ids_path: Path, idx_path: Path, dtype: npt.DTypeLike) -> None:
        self.ids_path, self.idx_path = ids_path, idx_path
        self.dtype = np.dtype(dtype)
        self._n_ids = _count(ids_path, self.dtype)
        self._n_offsets = _count(idx_path, _OFFSET)
        self._files: dict[str, Any] = {}
        if self._n_offsets == 0 or self._offsets(self._n_offsets - 1, 1)[0] != self._n_ids:
            raise NmtError(f"{ids_path}: corrupt (offsets in {idx_path.name} do not match the ids)")

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without its open files (each process opens its own)."""
        return {**self.__dict__, "_files": {}}

    def close(self) -> None:
        """Close the files (reading again reopens them)."""
        files, self._files = getattr(self, "_files", {}), {}
        for f in files.values():
            if hasattr(f, "close"):
                f.close()

    def __del__(self) -> None:
        self.close()

    def _file(self, path: Path) -> Any:
        """One of the two files, opened on first use; without pread (Windows), a read-only map.
        Threads may race to open it: setdefault keeps one, and the loser closes its own."""
        f = self._files.get(path.name)
        if f is None:
            new = open(path, "rb") if _PREAD is not None else _memmap(path, np.uint8)  # noqa: SIM115
            f = self._files.setdefault(path.name, new)
            if f is not new and hasattr(new, "close"):
                new.close()
        return f

    def _reader(self, path: Path) -> Callable[[int, int], bytes]:
        """read(nbytes, byte_offset) on one of the two files (holding the file, so its
        descriptor stays open while the reader lives)."""
        f = self._file(path)
        pread = _PREAD
        if pread is not None:
            fd = f.fileno()

            def read(nbytes: int, at: int, _file: Any = f) -> bytes:
                return pread(fd, nbytes, at)

            return read

        def read_map(nbytes: int, at: int) -> bytes:
            return bytes(f[at : at + nbytes].tobytes())

        return read_map

    def _offsets(self, first: int, count: int) -> np.ndarray:
        """Offsets first .. first+count-1 from the index file."""
        data = self._reader(self.idx_path)(count * 8, first * 8)
        if len(data) != count * 8:
            raise NmtError(f"{self.idx_path}: truncated while reading (run nmt preprocess again)")
        return np.frombuffer(data, dtype=_OFFSET)

    def __len__(self) -> int:
        return self._n_offsets - 1

    def __getitem__(self, i: int) -> np.ndarray:
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"sentence {i} out of range ({len(self)} sentences)")
        return self.rows([i])[0]

    def rows(self, indices: Iterable[int]) -> list[np.ndarray]:
        """Sentences `indices` (0 <= i < len), two reads each: what one batch reads, so the loop
        is kept tight (a batch of 150 pairs takes about 2 ms)."""
        read_idx, read_ids = self._reader(self.idx_path), self._reader(self.ids_path)
        unpack, size, dtype, n_ids = _PAIR.unpack, self.dtype.itemsize, self.dtype, self._n_ids
        out = []
        for i in indices:
            raw = read_idx(16, int(i) * 8)
            if len(raw) != 16:
                raise NmtError(f"{self.idx_path}: no sentence {i} (truncated?)")
            start, end = unpack(raw)
            if not 0 <= start <= end <= n_ids:
                raise NmtError(f"{self.idx_path}: corrupt offsets at sentence {i}")
            data = read_ids((end - start) * size, start * size)
            if len(data) != (end - start) * size:
                raise NmtError(f"{self.ids_path}: truncated (run nmt preprocess again)")
            out.append(np.frombuffer(data, dtype))
        return out

    def __iter__(self) -> Iterator[np.ndarray]:
        return (self[i] for i in range(len(self)))

    @functools.cached_property
    def lengths(self) -> np.ndarray:
        """Token count of every sentence (int32), for length bucketing without touching the ids;
        read in blocks, so only the result stays in memory."""
        out = np.empty(len(self), dtype=np.int32)
        for a in range(0, len(self), _BLOCK):
            b = min(a + _BLOCK, len(self))
            out[a:b] = np.diff(self._offsets(a, b - a + 1))
        return out

    @property
    def ids(self) -> np.ndarray:
        """The whole id file, memory-mapped: for bulk reads only (training reads by sentence)."""
        return _memmap(self.ids_path, self.dtype)

    @property
    def num_tokens(self) -> int:
        """Total tokens in the array."""
        return self._n_ids


_OFFSET = np.dtype("<i8")
_PAIR = struct.Struct("<qq")  # two consecutive offsets: a sentence's start and end
_BLOCK = 1 << 20  # offsets per block when reading the lengths (8 MiB)
_PREAD = getattr(os, "pread", None)


def _count(path: Path, dtype: np.dtype) -> int:
    """Values in a raw array file; a missing or cut file is a user error naming it."""
    if not path.is_file():
        raise NmtError(f"{path}: missing from the data folder")
    size = path.stat().st_size
    if size % dtype.itemsize:  # a cut copy
        raise NmtError(
            f"{path}: corrupt ({size} bytes is not a whole number of {dtype.itemsize}-byte values; "
            "run nmt preprocess again)"
        )
    return size // dtype.itemsize


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
    if _count(path, np.dtype(dtype)) == 0:
        return np.empty(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r")


class DataDir:
    """A preprocessed data folder, opened once: its manifest read and checked (a wrong folder is
    a one-line error), the files it records, its languages, and its vocabulary (the tokenizer
    pair, loaded at first use). What training and the tools take instead of a path."""

    def __init__(self, path: str | Path) -> None:
        """Open a data folder: its manifest read and checked now."""
        self.path = Path(path)
        _ = self.manifest

    @classmethod
    def at(cls, path: str | Path) -> DataDir:
        """The data folder at `path`, its manifest read at first use."""
        data = cls.__new__(cls)
        data.path = Path(path)
        return data

    @functools.cached_property
    def manifest(self) -> dict[str, Any]:
        """Its manifest.json, checked for a format this nmt reads."""
        return _parse_manifest(self.path)

    @property
    def languages(self) -> tuple[str, str]:
        """(source, target) language codes."""
        src, tgt = self.manifest.get("src_lang"), self.manifest.get("tgt_lang")
        if not src or not tgt:
            raise NmtError(f"{self.path / MANIFEST}: no source/target languages")
        return src, tgt

    @property
    def lowercase(self) -> bool:
        """Whether its text was lowercased (`nmt preprocess --lowercase`)."""
        return lowercased(self.manifest)

    @property
    def spm_paths(self) -> tuple[Path, Path]:
        """The (source, target) SentencePiece models (the same file for a joint vocabulary)."""
        spm = self.manifest["spm"]
        return self.path / spm["src"], self.path / spm["tgt"]

    def has(self, split: str) -> bool:
        """Whether the manifest lists `split`."""
        return split in self.manifest["splits"]

    def split(self, split: str) -> Split:
        """Open one split (train, valid, or a test name) without reading it into memory."""
        m = self.manifest
        if split not in m["splits"]:
            raise NmtError(f"{self.path}: no split {split!r} (have: {', '.join(m['splits'])})")
        files = m["splits"][split]["files"]
        dtype = np.dtype(m["dtype"]).newbyteorder("<")
        src, tgt = (
            TokenArray(self.path / files[lang]["ids"], self.path / files[lang]["idx"], dtype)
            for lang in (m["src_lang"], m["tgt_lang"])
        )
        if len(src) != len(tgt):
            raise NmtError(
                f"{self.path}: split {split} has {len(src)} source but {len(tgt)} target lines"
            )
        return Split(split, src, tgt)

    def text(self, split: str, lang: str) -> Path:
        """The raw lines of a valid or test split in `lang` (which may be absent)."""
        return self.path / f"{split}.{lang}.txt"

    @functools.cached_property
    def tokenizers(self) -> tuple[Tokenizer, Tokenizer]:
        """(source, target) tokenizers; the same object twice for a joint vocabulary (an
        imported model's pair for `nmt preprocess --tokenizer-from` of one)."""
        files = self.manifest.get("tokenizer_from", {}).get("files")
        if files:
            from nmt.data.marian_vocab import imported_pair

            return imported_pair(self.path, files)
        return Tokenizer.pair(*self.spm_paths, self.lowercase)

    @property
    def tokenizer_from(self) -> dict[str, Any] | None:
        """Which model's tokenizer encoded the corpus (`--tokenizer-from`): its directory,
        kind and vocabulary facts; None when it was not."""
        entry = self.manifest.get("tokenizer_from")
        return entry if isinstance(entry, dict) else None

    @property
    def vocab_info(self) -> VocabInfo:
        """What a model needs to know about the vocabulary: its sizes and special ids (a
        `--tokenizer-from` model's own, else nmt's fixed ones)."""
        m = self.manifest
        ids = m.get("special_ids") or {}
        return VocabInfo(
            src_size=m["vocab_size"]["src"],
            tgt_size=m["vocab_size"]["tgt"],
            joint=m["joint"],
            pad_id=ids.get("pad", PAD_ID),
            unk_id=ids.get("unk", UNK_ID),
            bos_id=ids.get("bos", BOS_ID),
            eos_id=ids.get("eos", EOS_ID),
            lowercase=self.lowercase,
            never=tuple(m.get("never", ())),
        )


def write_manifest(data_dir: Path, manifest: dict[str, Any]) -> None:
    """Write DATA_DIR/manifest.json (no atomic rename: `nmt preprocess` builds the folder in a
    temporary one renamed into place whole)."""
    with open(data_dir / MANIFEST, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2, ensure_ascii=False)
        f.write("\n")


def _parse_manifest(data_dir: Path) -> dict[str, Any]:
    """The manifest of a preprocessed data folder; a wrong folder is a user error."""
    path = data_dir / MANIFEST
    if not path.is_file():
        raise NmtError(
            f"{data_dir}: not a preprocessed data folder (no {MANIFEST}; run nmt preprocess)"
        )
    try:
        manifest: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise NmtError(f"{path}: invalid JSON ({e})") from None
    found = manifest.get("format")
    kind, _, version = str(found).partition("/")
    if kind == "nmt-data" and version.isdigit() and int(version) > DATA_FORMAT:
        check_format_version(path, int(version), DATA_FORMAT, "data")
    if found != FORMAT:
        raise NmtError(f"{path}: unsupported data format {found!r} (need {FORMAT})")
    return manifest


def lowercased(manifest: dict[str, Any]) -> bool:
    """Whether a data folder's text was lowercased (`nmt preprocess --lowercase`; older
    manifests have no such option and were not)."""
    return bool(manifest.get("options", {}).get("lowercase", False))
