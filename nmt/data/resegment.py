"""Subword regularisation (Kudo 2018): every epoch trains on a new segmentation of the training
data, sampled from the SentencePiece model (unigram: from its lattice with smoothing `alpha`;
BPE: BPE-dropout with probability `alpha`). A small corpus is then seen under many
segmentations; validation, test and translation keep the single best one. A sentence holding
<unk> keeps its own segmentation: its text cannot be encoded back to the same ids.

An epoch's sample is a deterministic function of (seed, epoch, side), so a resumed run trains on
the segmentation it left, and every DDP rank on the same one. With the update step on a GPU the
next epoch is sampled in the background while this one trains (SentencePiece releases the GIL).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

import numpy as np
import sentencepiece as spm

from nmt.data.encoding import flatten, seq_lengths
from nmt.data.vocab import UNK_ID, Tokenizer
from nmt.dirs.data import Split, TokenArray

T = TypeVar("T")
_SEED_LOCK = threading.Lock()  # SentencePiece's sampling seed is process-wide


class Ragged:
    """Token sequences in memory, indexed like a TokenArray: ids plus offsets."""

    def __init__(self, seqs: Sequence[Sequence[int]], dtype: np.dtype) -> None:
        self.lengths = seq_lengths(seqs)
        self.offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
        np.cumsum(self.lengths, out=self.offsets[1:])
        self.ids = flatten(seqs, self.lengths, dtype)

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> np.ndarray:
        return self.ids[self.offsets[i] : self.offsets[i + 1]]


@dataclass
class Segmentation:
    """One epoch's training data: source and target sequences with their lengths."""

    src: Ragged | TokenArray
    tgt: Ragged | TokenArray

    @property
    def src_len(self) -> np.ndarray:
        """Source lengths, for bucketing."""
        return np.asarray(self.src.lengths)

    @property
    def tgt_len(self) -> np.ndarray:
        """Target lengths, for bucketing."""
        return np.asarray(self.tgt.lengths)


def sampler_seed(seed: int, epoch: int, side: int) -> int:
    """SentencePiece's generator seed for one side of one epoch (a nonzero uint32)."""
    state = np.random.SeedSequence([seed % 2**32, epoch, side, 0x5EC]).generate_state(1)[0]
    return int(state) or 1


def _on_fresh_thread(seed: int, work: Callable[[], T]) -> T:
    """Run `work` on a new thread, its SentencePiece generator seeded with `seed`.

    SentencePiece seeds a thread's generator from the process-wide seed when that thread first
    samples (its batch encoder also samples on threads of its own, new every call), so the seed
    is set right before the thread starts and the caller waits for it."""
    out: list[T] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            out.append(work())
        except BaseException as e:  # noqa: BLE001 - re-raised on the calling thread
            error.append(e)

    with _SEED_LOCK:  # the seed is process-wide: one sampler at a time
        spm.set_random_generator_seed(seed)
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        thread.join()
    if error:
        raise error[0]
    return out[0]


def _side(tok: Tokenizer, arr: TokenArray) -> tuple[Tokenizer, list[str], dict[int, list[int]]]:
    """One side's tokenizer, its sentences as text, and the canonical ids of those with <unk>."""
    canonical = [np.asarray(s).tolist() for s in arr]
    unknown = {i: ids for i, ids in enumerate(canonical) if UNK_ID in ids}
    return tok, tok.sp.decode(canonical), unknown


def _with_unknowns(sampled: list[list[int]], unknown: dict[int, list[int]]) -> list[list[int]]:
    """`sampled` with the sentences holding <unk> put back as they were: <unk> decodes to ' ⁇ ',
    which encodes to a word boundary and a piece the sentence never had."""
    for i, ids in unknown.items():
        sampled[i] = ids
    return sampled


class Resegmenter:
    """Samples each epoch's segmentation of a training split.

    `background`: sample the next epoch while this one trains (the trainer does on a GPU). Beside
    a CPU training on every core it cost more than it hid (2 cores of an Intel Xeon with AMX: the 50-step
    windows with an epoch boundary ran 6,400-6,900 target tokens/s, the others 8,300-9,400), and
    other processes may share the cores, so there each epoch waits for its own sample instead
    (~2.5 s for Multi30k's 29k pairs, ~5% of an epoch on 2 cores)."""

    def __init__(
        self,
        tokenizers: tuple[Tokenizer, Tokenizer],
        train: Split,
        alpha: float,
        background: bool = False,
    ) -> None:
        src_tok, tgt_tok = tokenizers
        self.alpha = alpha
        self.background = background
        self.dtype = train.src.ids.dtype
        # The canonical ids decode to SentencePiece's normalised text, which encodes back to them
        # (but for <unk>: see _with_unknowns).
        self.sides: list[tuple[Tokenizer, list[str], dict[int, list[int]]]] = [
            _side(tok, arr) for tok, arr in ((src_tok, train.src), (tgt_tok, train.tgt))
        ]
        self._pool = ThreadPoolExecutor(1) if background else None
        self._next: tuple[tuple[int, int], Future[Segmentation]] | None = None

    def sample(self, seed: int, epoch: int) -> Segmentation:
        """Epoch `epoch`'s sampled segmentation of both sides (a function of seed and epoch)."""
        src, tgt = (
            Ragged(
                _with_unknowns(
                    _on_fresh_thread(
                        sampler_seed(seed, epoch, side),
                        partial(tok.sample_batch, texts, self.alpha),
                    ),
                    unknown,
                ),
                self.dtype,
            )
            for side, (tok, texts, unknown) in enumerate(self.sides)
        )
        return Segmentation(src, tgt)

    def epoch(self, seed: int, epoch: int) -> Segmentation:
        """Epoch `epoch`'s segmentation: prefetched when it was the one expected, and in the
        background mode the next one started."""
        if self._pool is None:
            return self.sample(seed, epoch)
        ahead, self._next = self._next, None
        if ahead is not None and ahead[0] != (seed, epoch):
            ahead[1].exception()  # not the epoch asked for: let it finish, then drop it
            ahead = None
        seg = ahead[1].result() if ahead is not None else self.sample(seed, epoch)
        self._next = ((seed, epoch + 1), self._pool.submit(self.sample, seed, epoch + 1))
        return seg
