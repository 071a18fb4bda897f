"""`nmt import`: a Hugging Face Marian directory (or hub id) as an ordinary nmt model directory:
config.yaml, vocab.json with the model's own special ids, the SentencePiece files and the
piece -> id vocabularies copied, and checkpoints/best.safetensors. Built beside the destination
and renamed into place, so a refused import writes nothing."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import torch

from nmt.data.marian_vocab import VocabTokenizer, load_vocab_pair
from nmt.dirs.model import CONFIG, MODEL_FORMAT, ModelDir
from nmt.errors import NmtError
from nmt.pretrained.marian import MarianDir, model_config, nmt_config, open_marian, special_ids
from nmt.pretrained.npz import as_marian_dir, is_release
from nmt.pretrained.weights import embedding_rows, read_checkpoint, to_nmt
from nmt.textio import atomic_write, building_dir, check_out_dir

PIECES, TARGET_PIECES = "pieces.json", "target_pieces.json"
HUB_HINT = "pass a local directory holding config.json, the weights and the tokenizer files"


def resolve_source(source: str) -> Path:
    """SOURCE as a directory: an existing local one wins; else a hub id fetched (or found in the
    cache) through huggingface_hub. Offline or without the package, one line naming the id."""
    if Path(source).is_dir():
        return Path(source)
    if source.count("/") != 1 or source.startswith((".", "/")) or Path(source).exists():
        raise NmtError(f"{source}: not a directory, and not a hub id (OWNER/NAME)")
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise NmtError(
            f"{source}: no such directory, and huggingface_hub is not installed to fetch it "
            f"(pip install 'nmt[hub]'), or {HUB_HINT}"
        ) from None
    try:
        files = ["*.json", "*.spm", "model.safetensors", "pytorch_model.bin"]
        return Path(snapshot_download(source, local_files_only=_offline(), allow_patterns=files))
    except Exception as e:  # noqa: BLE001 - the hub's many errors all mean "not reachable here"
        from huggingface_hub.constants import HF_HUB_CACHE

        why = f"offline (HF_HUB_OFFLINE) and not in the cache {HF_HUB_CACHE}"
        if not _offline():
            why = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'no answer'}"
        raise NmtError(f"{source}: cannot fetch this hub id: {why}; {HUB_HINT}") from None


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def _copy(src: Path, dst: Path) -> None:
    with atomic_write(dst, "wb") as out, src.open("rb") as f:
        shutil.copyfileobj(f, out)


def _check_sizes(m: MarianDir, src: VocabTokenizer, tgt: VocabTokenizer, state: dict) -> None:
    """The vocabularies must fit the checkpoint's embeddings, row for row."""
    for name, tok, rows in (
        (m.vocab, src, embedding_rows(state, m.weights, "encoder")),
        (m.target_vocab or m.vocab, tgt, embedding_rows(state, m.weights, "decoder")),
    ):
        if tok.vocab_size != rows:
            raise NmtError(
                f"{name}: {tok.vocab_size} pieces, but the model's embeddings have {rows} rows"
            )


def _write_meta(out: Path, m: MarianDir, vocab_fields: dict, languages: list[str]) -> None:
    """vocab.json: languages, the model's ids, and the tokenizer's files."""
    src_lang, tgt_lang = m.languages
    meta = {
        "format": MODEL_FORMAT,
        "src_lang": src_lang,
        "tgt_lang": tgt_lang,
        "src_spm": "source.spm",
        "tgt_spm": "target.spm",
        "pieces": PIECES,
        "target_pieces": TARGET_PIECES if m.target_vocab else None,
        "special_pieces": vars(m.specials),
        "languages": languages,
        "imported_from": "marian",
        **vocab_fields,
    }
    ModelDir.at(out).write_vocab_json(meta)


def import_marian(source: str, out_dir: Path, force: bool = False) -> ModelDir:
    """Import a Marian model (a Hugging Face directory, a hub id, or an original Marian release:
    an .npz, or a directory with decoder.yml or an .npz) into `out_dir`; returns it opened."""
    check_out_dir(out_dir, force)
    if is_release(Path(source)):
        with tempfile.TemporaryDirectory(prefix="nmt-import-") as scratch:
            m, checkpoint = as_marian_dir(Path(source), Path(scratch))
            return _import(m, checkpoint, m.weights, out_dir, force)
    m = open_marian(resolve_source(source))
    return _import(m, read_checkpoint(m.weights), m.path / "config.json", out_dir, force)


def _import(
    m: MarianDir, checkpoint: dict[str, torch.Tensor], where: Path, out_dir: Path, force: bool
) -> ModelDir:
    """Write the model directory of a Marian model read as its config and tensors."""
    cfg = model_config(where, m.config)
    src_tok, tgt_tok = load_vocab_pair(
        m.source_spm, m.target_spm, m.vocab, m.target_vocab, m.specials
    )
    shared = m.config.get("share_encoder_decoder_embeddings", True) is not False
    _check_sizes(m, src_tok, tgt_tok, checkpoint)
    state = to_nmt(checkpoint, m.weights, cfg, shared)
    vocab = special_ids(m, src_tok.vocab_size, tgt_tok.vocab_size)
    vocab = type(vocab)(**{**vars(vocab), "unk_id": tgt_tok.unk_id})
    with building_dir(out_dir, force) as tmp:
        _save_weights(tmp, cfg, vocab, state, m.weights)
        for src, name in (
            (m.source_spm, "source.spm"),
            (m.target_spm, "target.spm"),
            (m.vocab, PIECES),
            (m.target_vocab, TARGET_PIECES),
        ):
            if src is not None:
                _copy(src, tmp / name)
        nmt_config(m, cfg).save(tmp / CONFIG)
        _write_meta(tmp, m, vars(vocab) | {"never": list(vocab.never)}, src_tok.languages)
    return ModelDir(out_dir)


def _save_weights(tmp: Path, cfg, vocab, state: dict, path: Path) -> None:
    """Build nmt's model, load every tensor into it (a shape that disagrees is one line naming the
    checkpoint), and save it as checkpoints/best.safetensors."""
    from nmt.dirs.weights import put_weights, save_weights
    from nmt.models import build

    model = build(cfg, vocab, init=False)
    put_weights(model, state, path, "the model config.json describes")
    building = ModelDir.at(tmp)
    building.checkpoints.mkdir()
    save_weights(model, building.weights("best"))
