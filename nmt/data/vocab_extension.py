"""Vocabulary extension for fine-tuning (`nmt preprocess --spm-from DIR --extend-vocab N`).

A reused SentencePiece model cannot write characters it never saw: a parent trained on English and
German turns every Czech ř, ě or ů into <unk>, in the data and in every translation. Extension
appends pieces to the reused model, after all of its own, so every existing id keeps its piece
(the parent's weights still mean the same thing; `nmt.train.finetune` gives the new ids rows of their
own). Only pieces that hold a character the reused model cannot encode are added: text without
such characters is encoded exactly as before, piece for piece, so the parent's languages are not
disturbed. The pieces come from a SentencePiece model of the reused model's type and size learnt
on the new corpus (its size the reused model's plus the limit): every new character, then the most
probable pieces holding one. `--extend-all` offers every piece the new corpus wants instead
(whole words of the new language made of old letters), less those that would change how this
corpus's text in the reused model's own languages encodes (checked on up to 50,000 of its lines,
until they encode exactly as before).

The model file is a protobuf message whose field 1 repeats the pieces; a repeated field may
continue anywhere in the message, so appending encoded pieces to the file's bytes extends the list
without a protobuf library.
"""

from __future__ import annotations

import itertools
import struct
import tempfile
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sentencepiece as spm

from nmt.data.spm_source import SpmSource
from nmt.data.vocab import UNK_ID, Tokenizer, train_spm
from nmt.errors import NmtError

NORMAL = 1  # SentencePiece's ModelProto.SentencePiece.Type.NORMAL
KEEP_SAMPLE = 50_000  # lines of the reused languages' text checked to encode as before
MAX_ROUNDS = 20  # pieces dropped, then checked again, at most this often


@dataclass(frozen=True)
class Extension:
    """What was appended to one SentencePiece model."""

    added: int  # pieces appended (ids parent_size .. parent_size + added - 1)
    characters: list[str]  # the characters the reused model could not encode, most frequent first
    parent_size: int


def unknown_characters(tokenizer: Tokenizer, lines: Iterable[str]) -> list[str]:
    """Characters of `lines` that `tokenizer` encodes as <unk>, most frequent first: those of
    the normalised text (NFKC), which is what pieces match (decomposed ř is r + U+030C as typed)."""
    counts: Counter[str] = Counter()
    for line in lines:
        counts.update(tokenizer.normalized_characters(line))
    unknown = [
        c for c, _ in counts.most_common() if not c.isspace() and UNK_ID in tokenizer.encode(c)
    ]
    return unknown


def new_pieces(
    parent: Tokenizer,
    child: Tokenizer,
    characters: Sequence[str],
    limit: int,
    model_type: str,
    every_piece: bool = False,
) -> list[tuple[str, float]]:
    """Up to `limit` (piece, score) pairs to append to `parent`: each new character, then the
    child's most probable pieces holding one (`every_piece`: its most probable pieces the parent
    lacks, new characters or not). Unigram pieces keep the child's log-probabilities; BPE pieces
    score below every parent merge, in the child's order."""
    known = {parent.id_to_piece(i) for i in range(parent.vocab_size)}
    chosen = [c for c in characters if c not in known][:limit]
    first, wanted = set(chosen), set(characters)
    scored = []
    for i in range(child.vocab_size):
        piece = child.id_to_piece(i)
        if child.sp.is_control(i) or child.sp.is_unknown(i) or piece in known:
            continue
        if piece not in first and (every_piece or wanted & set(piece)):
            scored.append((child.sp.get_score(i), i, piece))
    scored.sort(key=lambda x: (-x[0], x[1]))
    chosen += [p for _, _, p in scored[: max(0, limit - len(chosen))]]
    child_score = {child.id_to_piece(i): child.sp.get_score(i) for i in range(child.vocab_size)}
    if model_type == "bpe":
        floor = min(parent.sp.get_score(i) for i in range(parent.vocab_size))
        return [(p, floor - 1.0 - k) for k, p in enumerate(chosen)]
    lowest = min(child_score.values())
    return [(p, child_score.get(p, lowest)) for p in chosen]


def extend_model(model: Path, pieces: Sequence[tuple[str, float]]) -> None:
    """Append `pieces` to the SentencePiece model file `model` (and rewrite its `.vocab`
    listing), checking that the result loads and keeps every existing id."""
    before = Tokenizer.load(model)
    data = model.read_bytes() + b"".join(_piece_field(p, s) for p, s in pieces)
    processor = spm.SentencePieceProcessor()
    try:
        processor.load_from_serialized_proto(data)
    except RuntimeError as e:  # a piece SentencePiece refuses (a duplicate, say)
        raise NmtError(f"{model}: the extended SentencePiece model does not load ({e})") from None
    after = Tokenizer(processor, model)
    if after.vocab_size != before.vocab_size + len(pieces) or not all(
        after.id_to_piece(i) == before.id_to_piece(i) for i in range(before.vocab_size)
    ):
        raise NmtError(f"{model}: extending it would move existing pieces")
    model.write_bytes(data)
    listing = "".join(
        f"{after.id_to_piece(i)}\t{processor.get_score(i):g}\n" for i in range(after.vocab_size)
    )
    model.with_suffix(".vocab").write_text(listing, encoding="utf-8")


def extend_for(
    model: Path,
    text: Sequence[Path],
    limit: int,
    model_type: str,
    character_coverage: float = 1.0,
    sample: int = 500_000,
    threads: int | None = None,
    keep: Sequence[Path] | None = None,
) -> Extension:
    """Extend `model` in place with up to `limit` pieces for the characters of the files `text`
    it cannot encode (nothing when it encodes them all). With `keep` (files in the languages
    `model` was made for), every piece the new text wants is a candidate, less those that would
    change how the lines of `keep` encode."""
    parent = Tokenizer.load(model)
    characters = unknown_characters(parent, _lines(text))
    if (not characters and keep is None) or limit <= 0:
        return Extension(0, characters, parent.vocab_size)
    with tempfile.TemporaryDirectory(prefix=".extend-", dir=model.parent) as tmp:
        size = parent.vocab_size + limit
        child_model = train_spm(
            list(text), Path(tmp) / "child", size, model_type, character_coverage, sample, threads
        )
        child = Tokenizer.load(child_model)
        pieces = new_pieces(parent, child, characters, limit, model_type, keep is not None)
    if keep:
        pieces = _sparing(model, pieces, list(itertools.islice(_lines(keep), KEEP_SAMPLE)))
    extend_model(model, pieces)
    return Extension(len(pieces), characters, parent.vocab_size)


def _sparing(
    model: Path, pieces: list[tuple[str, float]], lines: list[str]
) -> list[tuple[str, float]]:
    """`pieces` less every piece the extended model would use on `lines` (text the model
    already encodes), repeated until those lines encode exactly as before."""
    parent = Tokenizer.load(model)
    encoded = parent.encode_batch(lines, threads=1)
    kept = [(line, ids) for line, ids in zip(lines, encoded, strict=True) if UNK_ID not in ids]
    lines, before = [line for line, _ in kept], [ids for _, ids in kept]  # new letters may change
    base = model.read_bytes()
    for _ in range(MAX_ROUNDS):
        processor = spm.SentencePieceProcessor()
        processor.load_from_serialized_proto(base + b"".join(_piece_field(p, s) for p, s in pieces))
        after = processor.encode(lines, out_type=int, num_threads=1)
        used = {i for a, b in zip(after, before, strict=True) if a != b for i in a}
        drop = {processor.id_to_piece(i) for i in used if i >= parent.vocab_size}
        if not drop:
            return pieces
        pieces = [(p, s) for p, s in pieces if p not in drop]
    raise NmtError(f"{model}: no extension leaves its own languages' text as it was")


def model_type(model: Path) -> str:
    """unigram or bpe, as the model file's trainer_spec (field 2) says in its model_type (field
    3; 1 unigram, 2 bpe): a MODEL_DIR records no type and the processor does not expose it."""
    spec = _field(model.read_bytes(), 2)
    kind = _field(spec, 3) if isinstance(spec, bytes) else None
    names = {1: "unigram", 2: "bpe"}
    if not isinstance(kind, int) or kind not in names:
        raise NmtError(f"{model}: not a unigram or BPE SentencePiece model (model_type {kind!r})")
    return names[kind]


def _field(data: bytes, number: int) -> bytes | int | None:
    """The first value of field `number` in a protobuf message (varint or length-delimited)."""
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        wire = key & 7
        if wire == 0:
            value, pos = _read_varint(data, pos)
            found: bytes | int = value
        elif wire == 2:
            size, pos = _read_varint(data, pos)
            found, pos = data[pos : pos + size], pos + size
        elif wire in (1, 5):
            found, pos = data[pos : pos + (8 if wire == 1 else 4)], pos + (8 if wire == 1 else 4)
        else:
            return None
        if key >> 3 == number:
            return found
    return None


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """A base-128 varint at `pos`: (value, next position)."""
    value = shift = 0
    while True:
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if not byte & 0x80:
            return value, pos


def _lines(paths: Sequence[Path]) -> Iterable[str]:
    """The lines of plain UTF-8 text files (preprocess's cleaned train sides)."""
    for path in paths:
        with open(path, encoding="utf-8") as f:
            yield from f


def _piece_field(piece: str, score: float) -> bytes:
    """One `pieces` entry (field 1 of ModelProto): piece (1), score (2, float), type (3)."""
    text = piece.encode("utf-8")
    body = b"\x0a" + _varint(len(text)) + text + b"\x15" + struct.pack("<f", score)
    body += b"\x18" + _varint(NORMAL)
    return b"\x0a" + _varint(len(body)) + body


def _varint(n: int) -> bytes:
    """Protobuf's base-128 varint."""
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def extend_copied(
    models: tuple[Path, Path],
    clean: tuple[Path, Path],
    langs: tuple[str, str],
    source: SpmSource,
    limit: int,
    extend_all: bool,
    coverage: float,
    sample: int,
    threads: int,
) -> dict[str, Any]:
    """`--extend-vocab` on the models copied from `source`: append pieces for the characters they
    cannot encode, learnt from the cleaned train side(s) each model encodes; the manifest's record."""
    kind = source.spm_type or model_type(models[0])
    made_for = {source.src_lang, source.tgt_lang}  # the reused models' own languages
    sides: list[tuple[Path, list[Path], list[Path]]]
    if models[0] == models[1]:
        own = [c for c, lang in zip(clean, langs, strict=True) if lang in made_for]
        sides = [(models[0], list(clean), own)]
    else:
        sides = [
            (models[0], [clean[0]], [clean[0]] if langs[0] == source.src_lang else []),
            (models[1], [clean[1]], [clean[1]] if langs[1] == source.tgt_lang else []),
        ]

    def extend(model: Path, text: list[Path], own: list[Path]) -> Extension:
        keep = own if extend_all else None
        return extend_for(model, text, limit, kind, coverage, sample, threads, keep=keep)

    done = [extend(*side) for side in sides]
    entries = [
        {
            "added": e.added,
            "from_size": e.parent_size,
            "characters": "".join(e.characters),
            "all_pieces": extend_all,
            "checked_languages": [p.suffix[1:] for p in own] if extend_all else None,
        }
        for e, (_, _, own) in zip(done, sides, strict=True)
    ]
    return {"src": entries[0], "tgt": entries[-1]}
