"""Forced decoding: how likely a model finds given translations (`nmt rescore`).

The log-probability of a target given its source, summed over its subwords and eos, is what n-best
reranking with a second model (right-to-left, the reverse direction, an ensemble), corpus filtering
(dual conditional cross-entropy, Junczys-Dowmunt 2018) and model comparison read: fairseq calls it
`--score-reference`, Marian `marian-scorer`, CTranslate2 `score_batch`. One teacher-forced pass per
batch of pairs, no search; an ensemble scores with its mixture (log of the mean probability). Both
engines score through their `score_ids`: `Translator`'s is `nmt.engines.forced`, an `nmt export`'s
(`CT2Translator`) is CTranslate2's `score_batch`.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nmt.decode.lines import BATCH_LINES, check_inputs, check_output, count_lines, is_regular
from nmt.errors import NmtError
from nmt.textio import atomic_write, read_lines

if TYPE_CHECKING:
    from nmt.decode.engine import Engine


@dataclass
class PairScore:
    """A target's log-probability under the model, subword by subword (eos last)."""

    log_prob: float  # sum over the target's subwords and eos
    tokens: list[str]  # target pieces, eos last
    token_log_probs: list[float]

    @property
    def per_token(self) -> float:
        """Mean log-probability per predicted token (eos included): comparable across lengths."""
        return self.log_prob / len(self.tokens)

    def to_json(self) -> dict[str, Any]:
        """The record of `nmt rescore --format jsonl` and of `nmt serve`'s POST /score."""
        return {
            "log_prob": round(self.log_prob, 6),
            "per_token": round(self.per_token, 6),
            "tokens": self.tokens,
            "token_log_probs": [round(x, 6) for x in self.token_log_probs],
        }


def rescore(
    translator: Engine,
    sources: Sequence[str],
    targets: Sequence[str],
    batch_tokens: int | None = None,
    first_line: int = 1,
    on_warning: Callable[[str], None] | None = None,
) -> list[PairScore]:
    """Score each target given its source; one PairScore per pair, in input order. Sources and
    targets longer than the model's positions are cut (with a warning naming the line)."""
    if len(sources) != len(targets):
        raise NmtError(f"{len(sources)} sources but {len(targets)} targets")
    warn = on_warning or _ignore
    src = translator.encode_sources(list(sources), first_line, warn)
    tgt = [translator.tgt_tok.encode(t) for t in targets]
    limit = translator.max_source  # target positions: bos + tokens, like the source's + eos
    for i, ids in enumerate(tgt):
        if limit > 0 and len(ids) > limit:
            n = len(ids)
            warn(
                f"line {first_line + i}: target has {n} subword tokens, scored on its first {limit}"
            )
            tgt[i] = ids[:limit]
    lps = translator.score_ids(src, tgt, batch_tokens)
    return [
        PairScore(
            sum(lp),
            [translator.tgt_tok.id_to_piece(t) for t in ids] + [translator.tgt_tok.eos_piece],
            lp,
        )
        for ids, lp in zip(tgt, lps, strict=True)
    ]


def _ignore(message: str) -> None:
    """No warnings."""


# ---- files (`nmt rescore`) -----------------------------------------------------------------


def format_score(score: PairScore, fmt: str, average: bool) -> str:
    """One output line: the log-probability (text; the per-token mean with `average`), or a JSON
    object with every field (jsonl)."""
    if fmt == "text":
        return f"{score.per_token if average else score.log_prob:.6f}\n"
    return json.dumps(score.to_json(), ensure_ascii=False) + "\n"


def rescore_files(
    translator: Engine,
    source: str,
    target: str,
    output: str | None = None,
    *,
    fmt: str = "text",
    average: bool = False,
    batch_tokens: int | None = None,
    progress: Callable[[contextlib.ExitStack, int], Callable[[int], None]] | None = None,
    on_warning: Callable[[str], None] | None = None,
) -> int:
    """Score the pairs of two parallel files into `output` (atomically) or stdout, one line per
    pair, streaming; returns the number of pairs. Files of different lengths are an error naming
    both (before anything is written when both are regular files). `progress(stack, total)`
    returns the per-chunk `advance(n)`."""
    check_inputs([source, target], fmt)  # the formats and file checks `nmt translate` has
    check_output(output)
    total = None
    if is_regular(source) and is_regular(target):
        total, other = count_lines(source), count_lines(target)
        if total != other:
            raise _mismatch(source, total, target, other)
    n = 0
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(atomic_write(output)) if output else sys.stdout
        advance = progress(stack, total) if progress is not None and total is not None else None
        for src_lines, tgt_lines in _paired_chunks(source, target, BATCH_LINES):
            scores = rescore(
                translator,
                src_lines,
                tgt_lines,
                batch_tokens,
                first_line=n + 1,
                on_warning=on_warning,
            )
            out.writelines(format_score(s, fmt, average) for s in scores)
            out.flush()  # a reader gone (`| head`) is found here, inside the command
            n += len(scores)
            if advance:
                advance(len(scores))
    return n


def _paired_chunks(source: str, target: str, size: int) -> Iterator[tuple[list[str], list[str]]]:
    """Lists of at most `size` lines of both files, side by side; unequal lengths are an error."""
    src, tgt = read_lines(source), read_lines(target)
    n = 0
    while True:
        s, t = list(itertools.islice(src, size)), list(itertools.islice(tgt, size))
        if len(s) != len(t):
            rest_s, rest_t = sum(1 for _ in src), sum(1 for _ in tgt)
            raise _mismatch(source, n + len(s) + rest_s, target, n + len(t) + rest_t)
        if not s:
            return
        n += len(s)
        yield s, t


def _mismatch(source: str, n_src: int, target: str, n_tgt: int) -> NmtError:
    """The error for parallel files of different lengths."""
    return NmtError(
        f"{source} has {n_src} lines but {target} has {n_tgt} (rescore needs one target per "
        "source line)"
    )
