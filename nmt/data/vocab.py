"""SentencePiece subword vocabularies with the project's fixed special ids (pad 0, unk 1, bos 2, eos 3)."""

from __future__ import annotations

import os
import random
import re
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import sentencepiece as spm

from nmt.errors import NmtError
from nmt.runtime import usable_cpus

# Fixed for every model. Defined here, torch-free, so preprocessing workers never load torch.
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3

SPECIAL_PIECES = {"pad": "<pad>", "unk": "<unk>", "bos": "<s>", "eos": "</s>"}
EOS_PIECE = SPECIAL_PIECES["eos"]
SPECIAL_IDS = {"pad": PAD_ID, "unk": UNK_ID, "bos": BOS_ID, "eos": EOS_ID}
_SKIP_ON_DECODE = frozenset({PAD_ID, BOS_ID, EOS_ID})


@dataclass(frozen=True)
class VocabInfo:
    """Vocabulary facts a model needs: sizes, whether source and target share one vocabulary."""

    src_size: int
    tgt_size: int
    joint: bool = True
    pad_id: int = PAD_ID
    unk_id: int = UNK_ID
    bos_id: int = BOS_ID
    eos_id: int = EOS_ID
    lowercase: bool = False  # text lowercased before encoding (`nmt preprocess --lowercase`)
    never: tuple[int, ...] = ()  # target ids search never emits beside pad and bos (bad words)

    @property
    def banned(self) -> tuple[int, ...]:
        """Target ids no search emits: pad, the decoder's start token and the `never` ids."""
        return tuple(sorted({self.pad_id, self.bos_id, *self.never}))


# A file, a list of files (trained jointly), or sentences.
SpmText = str | Path | Sequence[str | Path] | Iterable[str]
SAMPLE_SEED = 0x5B5  # seeds the sentence sample, so a large corpus gives the same model every run
_BLOCK = 1 << 20


def _too_small_message(err: str, vocab_size: int) -> str | None:
    """Turn SentencePiece's 'smaller than required_chars' assertion into a sentence a user can act on."""
    m = re.search(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)", err)
    if not m:
        return None
    need = int(m.group(2))
    return (
        f"vocabulary size {vocab_size} is too small: the training text needs {need} pieces "
        f"(its characters, the word boundary and 4 special pieces); use --vocab-size {need} or more"
    )


def _trainer_args(
    model_prefix: Path,
    vocab_size: int,
    model_type: str,
    character_coverage: float,
    input_sentence_size: int,
    threads: int | None,
    seed_sentencepiece_size: int,
) -> dict[str, Any]:
    """SentencePieceTrainer arguments with the fixed special pieces and ids."""
    return {
        "model_prefix": str(model_prefix),
        "vocab_size": vocab_size,
        "model_type": model_type,
        "character_coverage": character_coverage,
        "input_sentence_size": input_sentence_size,
        "shuffle_input_sentence": True,
        "seed_sentencepiece_size": seed_sentencepiece_size,
        "hard_vocab_limit": False,
        "byte_fallback": False,
        "normalization_rule_name": "nmt_nfkc",
        "pad_id": PAD_ID,
        "unk_id": UNK_ID,
        "bos_id": BOS_ID,
        "eos_id": EOS_ID,
        "pad_piece": SPECIAL_PIECES["pad"],
        "unk_piece": SPECIAL_PIECES["unk"],
        "bos_piece": SPECIAL_PIECES["bos"],
        "eos_piece": SPECIAL_PIECES["eos"],
        "num_threads": threads or usable_cpus(),
        "minloglevel": 2,
    }


def _trainer_input(text: SpmText, tmp_dir: Path) -> tuple[list[str], str | None]:
    """SentencePiece's `input` (files, as a list) and the temporary file written, if any."""
    if isinstance(text, (str, Path)):
        return [str(text)], None  # a list: the wrapper CSV-quotes it, so a comma in a path works
    if (
        isinstance(text, Sequence)
        and all(isinstance(t, (str, Path)) for t in text)
        and text
        and (all(Path(t).is_file() for t in text))
    ):
        return [str(t) for t in text], None
    fd, tmp_input = tempfile.mkstemp(prefix=".spm-input.", suffix=".txt", dir=tmp_dir)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        for line in text:
            f.write(str(line).replace("\n", " ") + "\n")
    return [tmp_input], tmp_input


def _count_lines(path: str) -> int:
    """Lines in a file as a binary line iterator sees them (a last line without newline counts)."""
    count, last = 0, b"\n"
    with open(path, "rb") as f:
        while block := f.read(_BLOCK):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")


def _python_rng(seed: int) -> np.random.Generator:
    """numpy's generator on the very Mersenne Twister state `random.Random(seed)` starts from:
    its `random()` draws the same doubles (two 32-bit outputs each, combined alike)."""
    _, state, _ = random.Random(seed).getstate()
    bits = np.random.MT19937()
    bits.state = {
        "bit_generator": "MT19937",
        "state": {"key": np.array(state[:-1], dtype=np.uint32), "pos": state[-1]},
    }
    return np.random.Generator(bits)


def _line_blocks(path: str) -> Iterator[tuple[bytes, np.ndarray]]:
    """A file's whole lines a block at a time, with the offset where each starts and the last
    ends (a last line without newline is a line, as a binary line iterator sees it)."""
    with open(path, "rb") as f:
        tail = b""
        while block := f.read(_BLOCK):
            data = tail + block
            cut = data.rfind(b"\n") + 1
            data, tail = data[:cut], data[cut:]
            if cut:
                newlines = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
                yield data, np.concatenate(([0], newlines + 1))
        if tail:
            yield tail, np.array([0, len(tail)])


def _sampled_input(files: list[str], size: int, tmp_dir: Path) -> tuple[list[str], str | None]:
    """`files`, or, when they hold more than `size` lines, a temporary file of `size` of their
    lines drawn with a fixed seed (selection sampling: streaming, corpus order, no lines held).

    Line i of `total` is kept when u * (total - i) < wanted, u being the i-th `random.Random`
    double: drawn a block at a time, only the lines under the block's first `wanted` are looked
    at one by one (wanted only falls, so no other line can be kept)."""
    total = sum(_count_lines(path) for path in files)
    if size <= 0 or total <= size:
        return files, None
    rng, wanted, left = _python_rng(SAMPLE_SEED), size, total
    fd, tmp = tempfile.mkstemp(prefix=".spm-sample.", suffix=".txt", dir=tmp_dir)
    try:
        with os.fdopen(fd, "wb") as out:
            for path in files:
                for data, starts in _line_blocks(path):
                    n = len(starts) - 1
                    r = rng.random(n) * np.arange(left, left - n, -1, dtype=np.int64)
                    kept = []
                    for i in np.flatnonzero(r < wanted).tolist():
                        if r[i] < wanted:
                            line = data[starts[i] : starts[i + 1]]
                            kept.append(line if line.endswith(b"\n") else line + b"\n")
                            wanted -= 1
                    out.write(b"".join(kept))
                    left -= n
    except BaseException:
        os.unlink(tmp)
        raise
    return [tmp], tmp


def train_spm(
    text: SpmText,
    model_prefix: str | Path,
    vocab_size: int,
    model_type: str = "unigram",
    character_coverage: float = 1.0,
    input_sentence_size: int = 500_000,
    threads: int | None = None,
    seed_sentencepiece_size: int = 1_000_000,
) -> Path:
    """Train a SentencePiece model with fixed special ids, sampling at most `input_sentence_size`
    sentences so memory stays flat on large corpora (with a fixed seed, so the model is the same
    every run); returns the `.model` path.

    `text` is a file, a list of files (trained jointly), or an iterable of sentences (small data).
    A vocabulary larger than the text supports shrinks instead of failing (hard_vocab_limit=False),
    so tiny corpora work with any requested size.
    """
    if model_type not in ("unigram", "bpe"):
        raise NmtError(f"unknown SentencePiece model type {model_type!r} (choose unigram or bpe)")
    if vocab_size < 8:
        raise NmtError(f"vocabulary size must be at least 8, got {vocab_size}")
    model_prefix = Path(model_prefix)
    model_prefix.parent.mkdir(parents=True, exist_ok=True)
    kwargs = _trainer_args(
        model_prefix,
        vocab_size,
        model_type,
        character_coverage,
        input_sentence_size,
        threads,
        seed_sentencepiece_size,
    )
    temporary: list[str] = []
    try:
        files, tmp_input = _trainer_input(text, model_prefix.parent)
        if tmp_input:
            temporary.append(tmp_input)
        # SentencePiece's own sampler is unseeded (a new model every run): train on ours, whole
        kwargs["input"], tmp_sample = _sampled_input(
            files, input_sentence_size, model_prefix.parent
        )
        if tmp_sample:
            temporary.append(tmp_sample)
            kwargs["input_sentence_size"] = 0
        spm.SentencePieceTrainer.train(**kwargs)
    except RuntimeError as e:
        msg = _too_small_message(str(e), vocab_size)
        raise NmtError(msg or f"SentencePiece training failed: {str(e).splitlines()[0]}") from None
    finally:
        for path in temporary:
            os.unlink(path)
    return model_prefix.with_name(model_prefix.name + ".model")


def load_processor(path: Path) -> spm.SentencePieceProcessor:
    """A SentencePiece model file; a missing or unreadable one is a one-line NmtError."""
    if not path.is_file():
        raise NmtError(f"{path}: SentencePiece model not found")
    sp = spm.SentencePieceProcessor()
    try:
        sp.load(str(path))
    except (OSError, RuntimeError) as e:
        first = (str(e).splitlines() or [type(e).__name__])[0]
        raise NmtError(f"{path}: not a SentencePiece model ({first})") from None
    return sp


T = TypeVar("T", str, list[str])  # one sentence or a batch


class Tokenizer:
    """A loaded SentencePiece model: text <-> ids without bos/eos (callers add those).

    With `lowercase` (a model preprocessed with `--lowercase`) every text is lowercased before it
    is encoded, so cased input meets the pieces the model was trained on."""

    def __init__(
        self,
        processor: spm.SentencePieceProcessor,
        path: Path | None = None,
        lowercase: bool = False,
    ) -> None:
        self.sp = processor
        self.path = path
        self.lowercase = lowercase
        if self.sp.pad_id() != PAD_ID or self.sp.bos_id() != BOS_ID or self.sp.eos_id() != EOS_ID:
            raise NmtError(
                f"{path}: SentencePiece model has special ids pad={self.sp.pad_id()} "
                f"bos={self.sp.bos_id()} eos={self.sp.eos_id()}, expected pad={PAD_ID} "
                f"bos={BOS_ID} eos={EOS_ID}"
            )

    @classmethod
    def load(cls, path: str | Path, lowercase: bool = False) -> Tokenizer:
        """Load a `.model` file; a missing or corrupt file is a user error, not a crash."""
        return cls(load_processor(Path(path)), Path(path), lowercase)

    @classmethod
    def pair(cls, src: Path, tgt: Path, lowercase: bool = False) -> tuple[Tokenizer, Tokenizer]:
        """A directory's (source, target) models: one object twice when they are one file (a
        joint vocabulary). What every directory kind loads its tokenizers with."""
        first = cls.load(src, lowercase)
        return first, first if Path(tgt) == Path(src) else cls.load(tgt, lowercase)

    @property
    def vocab_size(self) -> int:
        """Number of ids, special pieces included."""
        return self.sp.get_piece_size()

    def _cased(self, text: T) -> T:
        """Text(s) as the model was trained on them (lowercased for a `--lowercase` model)."""
        if not self.lowercase:
            return text
        return text.lower() if isinstance(text, str) else [t.lower() for t in text]

    def encode(self, text: str) -> list[int]:
        """Subword ids of one sentence, no bos/eos."""
        return self.sp.encode(self._cased(text), out_type=int)

    def encode_batch(self, texts: list[str], threads: int | None = None) -> list[list[int]]:
        """Subword ids of many sentences, encoded on several threads by SentencePiece itself."""
        return self.sp.encode(self._cased(texts), out_type=int, num_threads=threads or -1)

    def sample_batch(self, texts: list[str], alpha: float) -> list[list[int]]:
        """Sampled segmentations (subword regularisation: unigram lattice sampling smoothed by
        alpha, or BPE-dropout), on one thread, from SentencePiece's seeded generator."""
        return self.sp.encode(
            self._cased(texts),
            out_type=int,
            enable_sampling=True,
            alpha=alpha,
            nbest_size=-1,
            num_threads=1,
        )

    def pieces(self, text: str) -> list[str]:
        """Subword pieces of one sentence (for inspection and attention plots)."""
        return self.sp.encode(self._cased(text), out_type=str)

    def id_to_piece(self, i: int) -> str:
        """The piece string of one id."""
        return self.sp.id_to_piece(int(i))

    @property
    def unk_id(self) -> int:
        """The id a piece outside the vocabulary gets."""
        return UNK_ID

    @property
    def languages(self) -> list[str]:
        """The target-language tokens (`>>fra<<`) of a multilingual vocabulary: none here."""
        return []

    @property
    def eos_piece(self) -> str:
        """The piece of the end-of-sentence id, as outputs and attention labels show it."""
        return EOS_PIECE

    def piece_to_id(self, piece: str) -> int:
        """The id of one piece (unk's when the vocabulary lacks it)."""
        return int(self.sp.piece_to_id(piece))

    def unknown_indices(self, texts: Iterable[str], threads: int | None = None) -> list[int]:
        """The indices of the lines holding a piece the vocabulary lacks, where this tokenizer
        tells them apart: none for a SentencePiece model (it covers its own pieces)."""
        return []

    def same_pieces(self, other: Tokenizer) -> bool:
        """Whether every id means the same piece to both models (what a model's weights assume)."""
        size = self.vocab_size
        return size == other.vocab_size and all(
            self.sp.id_to_piece(i) == other.sp.id_to_piece(i) for i in range(size)
        )

    def extends(self, other: Tokenizer) -> bool:
        """Whether this model is `other` with pieces appended (`--extend-vocab`): every id of
        `other` means the same piece here, and there are more."""
        return self.vocab_size > other.vocab_size and all(
            self.sp.id_to_piece(i) == other.sp.id_to_piece(i) for i in range(other.vocab_size)
        )

    def decode(self, ids: Iterable[int]) -> str:
        """Detokenized text; pad, bos and eos are dropped so raw model output can be passed in."""
        return self.sp.decode([int(i) for i in ids if int(i) not in _SKIP_ON_DECODE])

    def decode_batch(self, batch: Iterable[Iterable[int]]) -> list[str]:
        """Detokenize many sentences."""
        return [self.decode(ids) for ids in batch]

    def normalized_characters(self, text: str) -> str:
        """The text as pieces are matched against it (nmt_nfkc: decomposed letters composed),
        with spaces for SentencePiece's word marks and no <unk> surface."""
        return self.sp.normalize(self._cased(text)).replace("\u2581", " ")

    def normalize(self, text: str) -> str:
        """The text as the model sees it (nmt_nfkc, whitespace collapsed): what decode(encode(x)) returns."""
        return self.decode(self.encode(text))

    def __repr__(self) -> str:
        lc = ", lowercase=True" if self.lowercase else ""
        return f"Tokenizer({self.path}, vocab_size={self.vocab_size}{lc})"


def vocabulary_difference(
    ours: tuple[Tokenizer, Tokenizer], theirs: tuple[Tokenizer, Tokenizer], extended_ok: bool
) -> str | None:
    """The one vocabulary check: how a pair of (source, target) tokenizers differs from the
    pair a model was trained with. "lowercase" when one lowercases its text and the other does
    not, else the first side ("source", "target") whose ids mean other pieces; None when they
    agree. `extended_ok`: ours may be theirs with pieces appended (`--extend-vocab`)."""
    if any(a.lowercase != b.lowercase for a, b in zip(ours, theirs, strict=True)):
        return "lowercase"
    for side, a, b in zip(("source", "target"), ours, theirs, strict=True):
        if not (a.same_pieces(b) or (extended_ok and a.extends(b))):
            return side
    return None
