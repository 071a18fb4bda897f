"""OPUS-MT (Marian) vocabularies in Hugging Face form: SentencePiece pieces mapped to ids by vocab.json.

A Marian model segments text with its side's SentencePiece model (`source.spm`, `target.spm`) and
looks each piece up in `vocab.json` (`target_vocab.json` for the target side of separate
vocabularies), so its ids are the vocabulary's, special pieces included (`</s>` is 0 in some models,
43311 in others). `VocabTokenizer` gives the ids, pieces and text that transformers' `MarianTokenizer`
gives (checked against transformers 5.25 by tests/test_marian_tokenizer.py):

- the special pieces (`</s>`, `<unk>`, `<pad>`) written in the text are cut out first and map to
  their own ids; each stretch between them is segmented on its own (SentencePiece trims its edges);
- a stretch that starts with `>>` and holds a `<<` begins with a language code (`>>fra<<`), which
  is one piece, looked up whole;
- a piece is looked up by its text, so a character SentencePiece does not know still has an id
  when vocab.json holds it (`à` in an English target model), else it is `<unk>`;
- decoding drops the special ids (`<unk>` too), joins the pieces with the *source* SentencePiece
  model for a shared vocabulary (the target one for separate vocabularies), turns every `▁` left
  into a space and trims the ends; no Moses normalisation and no clean-up of spaces is applied
  (MarianTokenizer 5.25 never calls its Moses normaliser, and `clean_up_tokenization_spaces`
  defaults to false: a tokenizer_config.json that sets it true is not matched).

The special pieces are cut with a regular expression, longest first: the same cut as
transformers' trie for pieces that do not overlap, as `</s>`, `<unk>` and `<pad>` do not. With
separate vocabularies every special piece has its own vocabulary's id on each side; MarianTokenizer
gives a special piece written in target text, and the eos it appends, the *source* vocabulary's id
(the same id when both vocabularies put the piece at one id, as tested).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path
from typing import Any

import sentencepiece as spm

from nmt.data.vocab import Tokenizer, load_processor
from nmt.errors import NmtError

WORD_MARK = "\u2581"  # SentencePiece's word boundary


@dataclass(frozen=True)
class SpecialPieces:
    """The special pieces of a model, as its tokenizer_config.json names them."""

    unk: str = "<unk>"
    eos: str = "</s>"
    pad: str = "<pad>"

    def all(self) -> tuple[str, ...]:
        """The distinct special pieces (eos, unk, pad)."""
        return tuple(dict.fromkeys((self.eos, self.unk, self.pad)))


def _language_code(text: str) -> tuple[str | None, str]:
    """A leading `>>xx<<` language code (up to the first `<<`) and the text after it."""
    if not text.startswith(">>"):
        return None, text
    end = text.find("<<")
    if end < 0:
        return None, text
    return text[: end + 2], text[end + 2 :]


def language_token(lang: str) -> str:
    """A target language as the token a multilingual vocabulary holds for it: `fra` and
    `>>fra<<` are both `>>fra<<`."""
    lang = lang.strip()
    return lang if lang.startswith(">>") and lang.endswith("<<") else f">>{lang}<<"


def language_name(token: str) -> str:
    """A language token's code: `>>fra<<` is `fra`."""
    return token.removeprefix(">>").removesuffix("<<")


class VocabTokenizer(Tokenizer):
    """One side of a Marian model: its SentencePiece model for segmenting, its vocabulary for ids.

    Ids are MarianTokenizer's without the eos it appends (callers add eos themselves). `decoder` is
    the SentencePiece model that joins pieces back into text (the source one for a shared
    vocabulary, on both sides, as MarianTokenizer does); `codes` says whether the vocabulary's
    `>>xx<<` entries are language codes (a shared vocabulary's)."""

    def __init__(
        self,
        processor: spm.SentencePieceProcessor,
        vocabulary: Sequence[str],
        specials: SpecialPieces = SpecialPieces(),
        path: Path | None = None,
        decoder: spm.SentencePieceProcessor | None = None,
        codes: bool = True,
    ) -> None:
        self.sp = processor
        self.path = path
        self.lowercase = False
        self.specials = specials
        self._pieces = list(vocabulary)
        self._ids = {piece: i for i, piece in enumerate(self._pieces)}
        self._decoder = decoder if decoder is not None else processor
        self._codes = codes
        self._special_set = frozenset(specials.all())
        self._special_ids = frozenset(self._ids[p] for p in self._special_set)
        alternatives = sorted(self._special_set, key=len, reverse=True)
        self._split = re.compile("(" + "|".join(map(re.escape, alternatives)) + ")")
        # SentencePiece id -> vocabulary id (its unknown id is looked up by the piece's text)
        self._table = self._lookup(
            [processor.id_to_piece(k) for k in range(processor.get_piece_size())]
        )

    @classmethod
    def load(cls, path: str | Path, lowercase: bool = False) -> Tokenizer:
        """Not for a Marian vocabulary: it needs both SentencePiece models and vocab.json."""
        raise TypeError("a Marian vocabulary is loaded with nmt.data.marian_vocab.load_vocab_pair")

    @property
    def vocab_size(self) -> int:
        """Number of ids: the entries of vocab.json."""
        return len(self._pieces)

    @property
    def eos_piece(self) -> str:
        """The end-of-sentence piece, as outputs and attention labels show it."""
        return self.specials.eos

    @property
    def unk_id(self) -> int:
        """The vocabulary's id of the unknown piece."""
        return self._ids[self.specials.unk]

    @property
    def eos_id(self) -> int:
        """The vocabulary's id of the end-of-sentence piece."""
        return self._ids[self.specials.eos]

    @property
    def pad_id(self) -> int:
        """The vocabulary's id of the padding piece (Marian's decoder also starts from it)."""
        return self._ids[self.specials.pad]

    @property
    def languages(self) -> list[str]:
        """The `>>xx<<` language codes the vocabulary holds, sorted (none for separate vocabularies,
        like MarianTokenizer's supported_language_codes)."""
        if not self._codes:
            return []
        return sorted(p for p in self._pieces if p.startswith(">>") and p.endswith("<<"))

    def id_to_piece(self, i: int) -> str:
        """The vocabulary's piece of one id."""
        i = int(i)
        if not 0 <= i < len(self._pieces):
            raise IndexError(f"id {i} is outside the vocabulary (0 to {len(self._pieces) - 1})")
        return self._pieces[i]

    def piece_to_id(self, piece: str) -> int:
        """The vocabulary's id of a piece; the unknown id when it has none."""
        return self._ids.get(piece, self.unk_id)

    def _needs_split(self, text: str) -> bool:
        """Whether a line holds a special piece or starts with `>>` (the exact, slower path)."""
        return text.startswith(">>") or any(s in text for s in self._special_set)

    def _stretches(self, text: str) -> list[tuple[str | None, str]]:
        """The line cut at special pieces: (special piece, "") or (language code or None, text)."""
        out: list[tuple[str | None, str]] = []
        for part in self._split.split(text):
            if part in self._special_set:
                out.append((part, ""))
            elif part:
                out.append(_language_code(part))
        return out

    def _spm_ids(self, texts: list[str], alpha: float | None, threads: int) -> list[list[int]]:
        """Vocabulary ids of SentencePiece's segmentations (sampled with `alpha`). A piece
        SentencePiece does not know is looked up by its text (vocab.json may hold it): such lines,
        and sampled ones, go through the piece strings."""
        if alpha is not None:
            pieces = self.sp.encode(
                texts,
                out_type=str,
                enable_sampling=True,
                alpha=alpha,
                nbest_size=-1,
                num_threads=threads,
            )
            return [self._lookup(p) for p in pieces]
        raw = self.sp.encode(texts, out_type=int, num_threads=threads)
        table, unknown = self._table, self.sp.unk_id()
        out = [[table[k] for k in ids] for ids in raw]
        for i, ids in enumerate(raw):
            if unknown in ids:
                out[i] = self._lookup(self.sp.encode(texts[i], out_type=str))
        return out

    def _lookup(self, pieces: list[str]) -> list[int]:
        """The vocabulary ids of pieces, the unknown id for those it lacks."""
        get, unk = self._ids.get, self.unk_id
        return [get(p, unk) for p in pieces]

    def _exact_ids(self, text: str, alpha: float | None = None) -> list[int]:
        """Ids of one line holding special pieces or language codes."""
        ids: list[int] = []
        for head, rest in self._stretches(text):
            if head is not None:
                ids.append(self._ids.get(head, self.unk_id))
            if rest:
                ids.extend(self._spm_ids([rest], alpha, 1)[0])
        return ids

    def _ids_of(self, texts: list[str], alpha: float | None, threads: int) -> list[list[int]]:
        """Ids of many lines: SentencePiece's batch for plain lines, the exact path for the rest."""
        out = self._spm_ids(texts, alpha, threads)
        for i, text in enumerate(texts):
            if self._needs_split(text):
                out[i] = self._exact_ids(text, alpha)
        return out

    def encode(self, text: str) -> list[int]:
        """MarianTokenizer's ids of one line, without its trailing eos."""
        return (
            self._exact_ids(text) if self._needs_split(text) else self._spm_ids([text], None, 1)[0]
        )

    def encode_batch(self, texts: list[str], threads: int | None = None) -> list[list[int]]:
        """MarianTokenizer's ids of many lines, without eos, segmented on several threads."""
        return self._ids_of(list(texts), None, threads or -1)

    def sample_batch(self, texts: list[str], alpha: float) -> list[list[int]]:
        """Sampled segmentations (subword regularisation) mapped through the vocabulary, on one
        thread; special pieces and language codes stay whole."""
        return self._ids_of(list(texts), alpha, 1)

    def pieces(self, text: str) -> list[str]:
        """The pieces of `encode` (MarianTokenizer.tokenize): a piece the vocabulary lacks is shown
        as written, not as `<unk>`."""
        out: list[str] = []
        for head, rest in self._stretches(text):
            if head is not None:
                out.append(head)
            if rest:
                out.extend(self.sp.encode(rest, out_type=str))
        return out

    def unknown_lines(self, texts: Iterable[str], threads: int | None = None) -> int:
        """How many lines hold a piece missing from the vocabulary (`unknown_indices`)."""
        return len(self.unknown_indices(texts, threads))

    def unknown_indices(self, texts: Iterable[str], threads: int | None = None) -> list[int]:
        """The indices of the lines holding a piece missing from the vocabulary (a character
        SentencePiece does not know, a piece vocab.json lacks, an unknown language code), each
        read as `<unk>`; a `<unk>` written in the text is not counted."""
        texts = list(texts)
        found = []
        for i, (text, ids) in enumerate(zip(texts, self.encode_batch(texts, threads), strict=True)):
            unks = ids.count(self.unk_id)
            if unks and self.specials.unk in text:
                unks -= sum(head == self.specials.unk for head, _ in self._stretches(text))
            if unks > 0:
                found.append(i)
        return found

    def _piece_of(self, i: int) -> str:
        """An id's piece for decoding: past the vocabulary, the decoding model's piece (`<unk>` for
        an empty one); IndexError past that model too."""
        if 0 <= i < len(self._pieces):
            return self._pieces[i]
        return self._decoder.id_to_piece(i) or self.specials.unk

    def decode(self, ids: Iterable[int], skip_special: bool = True) -> str:
        """MarianTokenizer.decode(ids, skip_special_tokens=skip_special): the special ids
        (`<unk>` included) dropped, or kept as their pieces each followed by a space."""
        skip = self._special_ids if skip_special else frozenset()
        pieces = [self._piece_of(i) for i in map(int, ids) if i not in skip]
        parts: list[str] = []
        for special, run in groupby(pieces, key=self._special_set.__contains__):
            if special:
                parts.extend(piece + " " for piece in run)
            else:
                parts.append(self._decoder.decode_pieces(list(run)))
        return "".join(parts).replace(WORD_MARK, " ").strip()

    def same_pieces(self, other: Tokenizer) -> bool:
        """Whether every id means the same piece to both vocabularies."""
        size = self.vocab_size
        return size == other.vocab_size and all(
            self.id_to_piece(i) == other.id_to_piece(i) for i in range(size)
        )

    def extends(self, other: Tokenizer) -> bool:
        """Whether this vocabulary is `other` with pieces appended."""
        return self.vocab_size > other.vocab_size and all(
            self.id_to_piece(i) == other.id_to_piece(i) for i in range(other.vocab_size)
        )

    def __repr__(self) -> str:
        return f"VocabTokenizer({self.path}, vocab_size={self.vocab_size})"


def _read_vocab(path: Path, specials: SpecialPieces) -> list[str]:
    """vocab.json as its pieces in id order; the ids must be 0 to n-1, the special pieces present."""
    if not path.is_file():
        raise NmtError(f"{path}: vocabulary file not found")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise NmtError(f"{path}: not a JSON file ({e})") from None
    if not isinstance(data, dict) or any(type(v) is not int for v in data.values()):  # no bools
        raise NmtError(f"{path}: not a vocabulary (a JSON object of piece -> integer id)")
    pieces: list[str | None] = [None] * len(data)
    for piece, i in data.items():
        if not 0 <= i < len(pieces) or pieces[i] is not None:
            raise NmtError(
                f"{path}: ids must be 0 to {len(pieces) - 1}, each once; id {i} "
                f"({piece!r}) is {'repeated' if 0 <= i < len(pieces) else 'out of range'}"
            )
        pieces[i] = piece
    for name in ("unk", "eos", "pad"):
        if getattr(specials, name) not in data:
            raise NmtError(f"{path}: special piece {getattr(specials, name)!r} ({name}) is missing")
    return [p for p in pieces if p is not None]


def load_vocab_pair(
    src_spm: Path,
    tgt_spm: Path,
    vocab: Path,
    target_vocab: Path | None = None,
    specials: SpecialPieces = SpecialPieces(),
) -> tuple[VocabTokenizer, VocabTokenizer]:
    """The (source, target) tokenizers of a Marian model in Hugging Face form.

    `vocab` is vocab.json; `target_vocab` is target_vocab.json for a model with separate vocabularies
    (tokenizer_config.json's `"separate_vocabs": true`). A shared vocabulary decodes with the source
    SentencePiece model on both sides, as MarianTokenizer does."""
    src_sp, tgt_sp = load_processor(Path(src_spm)), load_processor(Path(tgt_spm))
    src_pieces = _read_vocab(Path(vocab), specials)
    if target_vocab is None:
        return (
            VocabTokenizer(src_sp, src_pieces, specials, Path(src_spm), src_sp),
            VocabTokenizer(tgt_sp, src_pieces, specials, Path(tgt_spm), src_sp),
        )
    tgt_pieces = _read_vocab(Path(target_vocab), specials)
    return (
        VocabTokenizer(src_sp, src_pieces, specials, Path(src_spm), src_sp, codes=False),
        VocabTokenizer(tgt_sp, tgt_pieces, specials, Path(tgt_spm), tgt_sp, codes=False),
    )


def imported_pair(path: Path, meta: dict[str, Any]) -> tuple[VocabTokenizer, VocabTokenizer]:
    """The tokenizers of an imported model directory, as its vocab.json names their files."""
    target = path / meta["target_pieces"] if meta.get("target_pieces") else None
    specials = SpecialPieces(**meta["special_pieces"])
    return load_vocab_pair(
        path / meta["src_spm"], path / meta["tgt_spm"], path / meta["pieces"], target, specials
    )
