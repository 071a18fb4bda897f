"""What training reads from DATA_DIR, and validation: teacher-forced loss and perplexity, greedy
decoding, and BLEU computed through nmt.eval.scoring (the line carries the signature `nmt score` prints).

BLEU is scored on detokenized text against the raw valid references (never the cleaned ids).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch
from torch import nn

from nmt.data import batching
from nmt.data.vocab import Tokenizer, VocabInfo
from nmt.dirs.data import DataDir, Split
from nmt.engines.workers import decode_workers, map_batches
from nmt.models.base import Decoder, Trainable
from nmt.train.loss import chunked_nll


@dataclass
class ValidSet:
    """The valid split, the references BLEU is computed against, and the target detokenizer."""

    split: Split
    refs: list[str]  # raw lines, possibly capped at training.valid_max_sentences
    tgt_tok: Tokenizer
    ids: VocabInfo | None = None  # the special ids batches are made with (None: nmt's own)


@dataclass
class ValidResult:
    """One validation: mean NLL per target token, its perplexity, corpus BLEU and its signature."""

    loss: float
    ppl: float
    bleu: float
    signature: str

    def score(self, metric: str) -> float:
        """The figure early stopping and the best checkpoint go by: BLEU, or else the loss."""
        return self.bleu if metric == "bleu" else self.loss


@dataclass
class Data:
    """What training reads from DATA_DIR."""

    train: Split
    valid: ValidSet | None  # None: no valid split (or an empty one), so no validation
    vocab: VocabInfo
    source: DataDir  # the folder, opened once: its languages and SentencePiece models


def load_data(source: DataDir, valid_max: int = 0) -> Data:
    """Train split, valid split with its raw references, and vocabulary facts."""
    _ = source.languages  # first: a manifest that names none is a one-line error
    valid = load_valid(source, valid_max)
    return Data(source.split("train"), valid, source.vocab_info, source)


def load_valid(source: DataDir, max_sentences: int = 0) -> ValidSet | None:
    """The valid split with its references; None when DATA_DIR has none (no validation)."""
    if not source.has("valid"):
        return None  # a damaged valid split is an error (DataDir.split), not "no validation"
    split = source.split("valid")
    tgt_tok = source.tokenizers[1]
    refs = references(source, split, tgt_tok)
    if max_sentences > 0 and len(refs) > max_sentences:
        refs = refs[:max_sentences]
    ids = source.vocab_info if source.tokenizer_from else None  # a model's own special ids
    return ValidSet(split, refs, tgt_tok, ids) if refs else None


def references(source: DataDir, valid: Split, tgt_tok: Tokenizer) -> list[str]:
    """Raw valid references (what BLEU is computed against), or detokenized ids as fallback."""
    from nmt.textio import read_lines

    path = source.text("valid", source.languages[1])
    if path.exists():
        refs = list(read_lines(path))
        if len(refs) == len(valid.tgt):
            return refs
    return [tgt_tok.decode(valid.tgt[i].tolist()) for i in range(len(valid.tgt))]


def over_limit(valid: ValidSet, max_positions: int) -> int:
    """Valid pairs a side of which (with eos / bos) exceeds `max_positions` (0: no limit)."""
    if max_positions <= 0:
        return 0
    n = len(valid.refs)
    src = np.asarray(valid.split.src.lengths)[:n] + 1
    tgt = np.asarray(valid.split.tgt.lengths)[:n] + 1
    return int(((src > max_positions) | (tgt > max_positions)).sum())


def teacher_forced_nll(
    model: nn.Module, batch: batching.Batch, pad_id: int
) -> tuple[torch.Tensor, int]:
    """Summed NLL of a batch's targets and their count: through the model's features and chunks
    of logits (a whole (B, T, V) float32 logits tensor and its log-softmax were most of
    validation's peak memory), with the model's fixed output bias, if any."""
    net = cast(Trainable, model)  # every registered model has its features and projection
    hidden = net.features(batch.src, batch.src_lengths, batch.tgt_in)  # (B, T, d)
    return chunked_nll(hidden, net.output.weight, batch.tgt_out, pad_id, net.output_bias)


def validate(
    model: nn.Module,
    valid: ValidSet,
    device: torch.device,
    autocast: Callable[[], Any],
    max_tokens: int,
    max_len_a: float,
    max_len_b: int,
    should_stop: Callable[[], bool] = lambda: False,
    workers: int = 0,
) -> ValidResult | None:
    """Teacher-forced loss/perplexity and greedy sacreBLEU on the valid set; None if interrupted.

    Pairs longer than the model's positions are cut for the loss and the decode (see
    `over_limit`); BLEU still compares against the raw references. Batches run on `workers`
    threads (`nmt.engines.workers`; 0: auto); the loss is summed in batch order, so it never depends
    on which finished first."""
    from nmt.decode.options import ResolvedOptions
    from nmt.decode.search.greedy import greedy_search
    from nmt.eval import scoring

    n = len(valid.refs)
    src, tgt = valid.split.src, valid.split.tgt
    pad = cast(Decoder, model).vocab.pad_id  # the model's own
    ids = {} if valid.ids is None else {"ids": valid.ids}
    # tokens only: BLEU needs no scores
    options = ResolvedOptions(max_len_a=max_len_a, max_len_b=max_len_b, scores=False)
    decoder = cast(Decoder, model)  # every registered model satisfies the decoding contract
    limit = int(decoder.max_positions or 0)  # 0: the architecture has no position limit
    # Sized by the longer side: the loss pads targets to the batch's longest (a long target
    # among a thousand short sources would otherwise make a batch many times max_tokens).
    lengths = np.maximum(np.asarray(src.lengths)[:n], np.asarray(tgt.lengths)[:n])
    if limit:
        lengths = np.minimum(lengths, limit - 1)
    # Not translation's even split for the workers: the batches, and so the summed loss and a
    # resumed run's figures, must not depend on the thread count.
    batches = batching.source_batches(lengths, max_tokens)

    def run(idx: np.ndarray) -> tuple[float, int, list[str]]:
        """One batch's summed NLL, its target tokens and its detokenized greedy outputs."""
        batch = batching.collate(src, tgt, idx, limit, **ids).to(device)
        with torch.no_grad():  # grad mode and autocast are thread-local: set on this thread
            with autocast():
                nll, count = teacher_forced_nll(model, batch, pad)
                out = greedy_search(decoder, batch.src, batch.src_lengths, options)
        return float(nll), count, [valid.tgt_tok.decode(h.tokens) for h in out]

    was_training = model.training
    model.eval()
    done: dict[int, tuple[float, int, list[str]]] = {}
    try:
        for b, result in map_batches(run, batches, decode_workers(workers, device, len(batches))):
            if should_stop():
                return None
            done[b] = result
    finally:
        model.train(was_training)
    hyps: list[str] = [""] * n
    nll_sum, tokens = 0.0, 0
    for b, idx in enumerate(batches):
        nll, count, texts = done[b]
        nll_sum += nll
        tokens += count
        for i, hyp in zip(idx.tolist(), texts, strict=True):
            hyps[i] = hyp
    loss = nll_sum / max(1, tokens)
    # same numbers and signature as nmt score (--lowercase for a lowercased corpus: case:lc)
    bleu = scoring.score(hyps, [valid.refs], ["bleu"], lowercase=valid.tgt_tok.lowercase)[0]
    return ValidResult(loss, math.exp(min(loss, 50.0)), bleu.score, bleu.signature)
