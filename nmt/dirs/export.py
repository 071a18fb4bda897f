"""What an `nmt export` directory is: its manifest (written and read here), how to recognise one,
its tokenizers and vocabulary pieces, and the optional ctranslate2 import. Torch-free, so the
deployment path can read an export without torch.

An export of an imported (Marian) model carries what its model directory tokenizes with: both
SentencePiece models, the piece -> id vocabularies and the special pieces, named in the manifest
under the keys of the model's vocab.json (TOKENIZER_KEYS), so that `ExportDir.tokenizers` builds
the same `VocabTokenizer` pair as `ModelDir.tokenizers`. Exports of nmt's own models (and those
written before imports existed) hold only the SentencePiece models, with nmt's fixed ids."""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path
from typing import Any

from nmt import __version__
from nmt.config import DecodingConfig
from nmt.data.marian_vocab import VocabTokenizer, imported_pair
from nmt.data.vocab import Tokenizer
from nmt.dirs.model import ModelDir
from nmt.errors import NmtError, check_format_version, install_hint

EXPORT_MANIFEST = "nmt-export.json"
EXPORT_FORMAT = 1  # the manifest's "format_version": the layout this nmt writes (absent: 1)
PAD_PIECE = "<blank>"  # CTranslate2's name for padding; id 0 of nmt's own models
# manifest keys an imported model's tokenizer is built from (as in its vocab.json)
TOKENIZER_KEYS = ("pieces", "target_pieces", "special_pieces")


def require_ctranslate2() -> Any:
    """The ctranslate2 module, or a one-line error telling how to install it."""
    try:
        import ctranslate2
    except ImportError:
        raise NmtError(f"ctranslate2 is not installed: {install_hint('ct2')}") from None
    return ctranslate2


def read_export_manifest(export_dir: str | Path) -> dict[str, Any]:
    """OUT_DIR/nmt-export.json; a broken one is a one-line error naming it."""
    path = Path(export_dir) / EXPORT_MANIFEST
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise NmtError(f"{path}: file not found (is {export_dir} an nmt export?)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise NmtError(f"{path}: invalid JSON ({e})") from None
    if not isinstance(data, dict) or data.get("format") != "ctranslate2":
        raise NmtError(f"{path}: not an nmt CTranslate2 export manifest")
    check_format_version(path, data.get("format_version"), EXPORT_FORMAT, "export")
    return data


class ExportDir:
    """An `nmt export` directory opened once: its manifest read and checked, its languages,
    decoding defaults and SentencePiece models (loaded at first use)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.manifest = read_export_manifest(self.path)

    @property
    def languages(self) -> tuple[str | None, str | None]:
        """(source, target) language codes, where the model recorded them."""
        return self.manifest.get("src_lang"), self.manifest.get("tgt_lang")

    @property
    def checkpoint(self) -> str | None:
        """The name of the checkpoint it holds (best, averaged, ...), where recorded."""
        held = self.manifest.get("checkpoint")
        return held if isinstance(held, str) else None

    @property
    def decoding(self) -> DecodingConfig:
        """Its decoding defaults."""
        return export_decoding(self.manifest)

    @functools.cached_property
    def tokenizers(self) -> tuple[Tokenizer, Tokenizer]:
        """Its source and target tokenizers: SentencePiece models (one object when they are one
        file), or an imported model's pieces mapped through its vocabularies."""
        m, lc = self.manifest, self.manifest.get("lowercase", False) is True
        if m.get("pieces"):
            return imported_pair(self.path, m)
        return Tokenizer.pair(self.path / m["src_spm"], self.path / m["tgt_spm"], lc)


def export_pieces(tok: Tokenizer) -> list[str]:
    """The vocabulary CTranslate2 is given: every id's piece, in id order. nmt's own models name
    their id 0 (padding) `<blank>`, CTranslate2's padding; pieces must be unique."""
    pieces = [tok.id_to_piece(i) for i in range(tok.vocab_size)]
    if not isinstance(tok, VocabTokenizer):
        pieces[0] = PAD_PIECE
    if len(set(pieces)) != len(pieces):
        raise NmtError(f"{tok.path}: SentencePiece pieces are not unique (is {PAD_PIECE} a piece?)")
    return pieces


def export_decoding(manifest: dict[str, Any]) -> DecodingConfig:
    """An export manifest's decoding defaults (keys this version does not know ignored)."""
    saved = manifest.get("decoding", {})
    known = {f.name for f in dataclasses.fields(DecodingConfig)}
    return DecodingConfig(**{k: v for k, v in saved.items() if k in known})


def tokenizer_files(model: ModelDir) -> list[str]:
    """The files of a model directory's tokenizer an export copies: SentencePiece model(s), an
    imported model's piece -> id vocabularies."""
    meta = model.meta
    names = [meta["src_spm"], meta["tgt_spm"], meta.get("pieces"), meta.get("target_pieces")]
    return sorted({n for n in names if n})


def export_manifest(
    model: ModelDir, checkpoint: str, step: int | None, quantization: str
) -> dict[str, Any]:
    """What an export came from and how to decode with it (`ExportDir` reads it): the model's
    special ids (`vocab`), the target ids CTranslate2 must never emit (`suppress`), and for an
    imported model what builds its tokenizer (`pieces`, `target_pieces`, `special_pieces`)."""
    cfg, meta, vocab = model.config, model.meta, model.vocab
    imported = bool(meta.get("pieces"))
    return {
        "format": "ctranslate2",
        "format_version": EXPORT_FORMAT,
        "nmt_version": __version__,
        "source_model_dir": str(model.path.resolve()),
        "checkpoint": checkpoint,
        "step": step,
        "quantization": quantization,
        "src_lang": meta["src_lang"],
        "tgt_lang": meta["tgt_lang"],
        "src_spm": meta["src_spm"],
        "tgt_spm": meta["tgt_spm"],
        **{key: meta.get(key) for key in TOKENIZER_KEYS if imported},
        "lowercase": meta.get("lowercase", False) is True,  # lowercase input before SentencePiece
        "max_positions": cfg.model.max_positions,
        "vocab": dataclasses.asdict(vocab) | {"never": list(vocab.never)},
        # nmt's own models never predict pad or bos (CTranslate2 would renormalize around them);
        # an imported one gives its <pad> (the decoder start) some probability: banned, as
        # transformers' bad_words_ids and nmt's search ban it
        "suppress": list(vocab.banned if imported else vocab.never),
        "model": dataclasses.asdict(cfg.model),
        "decoding": dataclasses.asdict(cfg.decoding),
    }


def write_export_manifest(export_dir: Path, manifest: dict[str, Any]) -> None:
    """Write EXPORT_DIR/nmt-export.json."""
    text = json.dumps(manifest, indent=2) + "\n"
    (export_dir / EXPORT_MANIFEST).write_text(text, encoding="utf-8")


def is_export(model_dir: str | Path) -> bool:
    """Whether MODEL_DIR is an `nmt export` output rather than a training model directory."""
    return (Path(model_dir) / EXPORT_MANIFEST).is_file()
