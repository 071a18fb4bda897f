"""What every translation engine returns and offers, whether it runs our PyTorch models
(`Translator`) or a CTranslate2 export (`CT2Translator`). Torch-free."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from nmt.config import DecodingConfig
from nmt.data.vocab import Tokenizer
from nmt.decode.options import DecodeOptions, OptionError, ResolvedOptions
from nmt.errors import NmtError

FORCED_FLOOR = -1000.0  # floor for a forced eos the model calls (near) impossible
# the attention an engine may give (nmt.models.base.ATTENTION_KINDS): source-target, the
# encoder's self-attention, the decoder's masked self-attention
ATTENTION_KINDS = ("cross", "self", "decoder")


def gnmt_length_penalty(length: Any, alpha: float) -> Any:
    """GNMT length penalty ((5 + L) / 6) ** alpha (Wu et al. 2016), of an int or a tensor."""
    return ((5.0 + length) / 6.0) ** alpha


@dataclass
class TextHypothesis:
    """One translation candidate: detokenized text, target pieces (no eos), scores."""

    text: str
    tokens: list[str]
    score: float
    log_prob: float
    attention: np.ndarray | None = None  # (len(tokens) + 1, layers, heads, len(source_tokens))
    # the search stopped it at the length limit (max_len_a * source + max_len_b, or the model's
    # positions), not at eos: it may be cut short
    at_limit: bool = False


@dataclass
class Translation:
    """The result for one input line; `hypotheses` best first (empty input: one empty one)."""

    source: str
    hypotheses: list[TextHypothesis]
    source_tokens: list[str] = field(default_factory=list)  # pieces the model saw, eos last
    sentences: list[Translation] | None = None  # a line cut into pieces: each one's result

    @property
    def text(self) -> str:
        """The best translation."""
        return self.hypotheses[0].text if self.hypotheses else ""

    @property
    def at_limit(self) -> bool:
        """Whether the best translation (one of its pieces, for a cut line) stopped at the
        length limit: such a line may be missing its end."""
        return bool(self.hypotheses) and self.hypotheses[0].at_limit

    def to_json(self, with_attention: bool = False) -> dict[str, Any]:
        """The JSONL record; attention is the last layer's head mean, target x source rows;
        `at_limit`: the hypothesis stopped at the length limit, not at its end."""
        record: dict[str, Any] = {"source": self.source, "hypotheses": []}
        if with_attention:
            record["source_tokens"] = self.source_tokens
        for h in self.hypotheses:
            item: dict[str, Any] = {
                "translation": h.text,
                "score": round(h.score, 6),
                "log_prob": round(h.log_prob, 6),
                "tokens": h.tokens,
                "at_limit": h.at_limit,
            }
            if with_attention:
                att = None if h.attention is None else h.attention[:, -1].mean(1)  # (T, S)
                item["attention"] = (
                    [] if att is None else np.round(att.astype(np.float64), 4).tolist()
                )
            record["hypotheses"].append(item)
        if self.sentences is not None:
            record["sentences"] = [s.to_json(with_attention) for s in self.sentences]
        return record


def translate_chunks(
    translate: Callable[..., list[Translation]],
    lines: Iterable[str],
    options: DecodeOptions | None,
    buffer_size: int,
    first_line: int,
    kwargs: dict[str, Any],
) -> Iterator[Translation]:
    """An engine's `translate_stream`: `translate` on chunks of `buffer_size` lines, numbered
    on from `first_line`, yielding in input order (memory bounded by the chunk)."""
    if buffer_size < 1:
        raise NmtError(f"--buffer-size must be at least 1, got {buffer_size}")
    chunk: list[str] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) >= buffer_size:
            yield from translate(chunk, options, first_line=first_line, **kwargs)
            first_line += len(chunk)
            chunk = []
    if chunk:
        yield from translate(chunk, options, first_line=first_line, **kwargs)


def check_attention_kind(kind: str) -> None:
    """Refuse an attention kind no engine gives (`kind` names the option)."""
    if kind not in ATTENTION_KINDS:
        raise OptionError("{kind} must be cross, self or decoder, got {got!r}", got=kind)


@dataclass(frozen=True)
class Capabilities:
    """What an engine can do besides beam and greedy search, said in one place, so that callers
    (the CLI, the server) never ask which engine or architecture they hold."""

    sampling: bool  # nmt's keyed samples (`--sampling`)
    attention: tuple[str, ...]  # the kinds an attention query gives (cross, self, decoder)
    with_attention: bool  # cross-attention alongside translations (`--with-attention`)
    slots: int = 1  # batches decoded at once, each on a worker process of its own
    constraints: bool = False  # lexically constrained search


class Engine(Protocol):
    """The calls `nmt translate`, `nmt rescore`, `nmt serve` and the library make of an engine.

    `options` say how to decode, `fields` (DecodeOptions fields) on top of them; unset ones
    come from the model's `decoding` defaults; `constraints`: target phrases per line that its
    translations must contain (where `capabilities.constraints`)."""

    src_tok: Tokenizer  # the source SentencePiece model (lowercasing included)
    tgt_tok: Tokenizer  # the target one: what it writes (lowercase, for a lowercased model)
    max_source: int  # the longest source in subwords the model takes (eos excluded; < 1: any)
    languages: tuple[str | None, str | None]  # (source, target) language codes, from its metadata

    @property
    def capabilities(self) -> Capabilities: ...

    def start_workers(self) -> None: ...

    @property
    def decoding(self) -> DecodingConfig: ...

    def translate(
        self,
        lines: Iterable[str],
        options: DecodeOptions | None = None,
        *,
        first_line: int = 1,
        on_warning: Callable[[str], None] | None = None,
        progress: Callable[[int], None] | None = None,
        keys: Sequence[int] | None = None,
        constraints: Sequence[Sequence[str]] | None = None,
        **fields: Any,
    ) -> list[Translation]: ...

    def translate_stream(
        self,
        lines: Iterable[str],
        options: DecodeOptions | None = None,
        *,
        buffer_size: int = 1000,
        first_line: int = 1,
        **kwargs: Any,
    ) -> Iterator[Translation]: ...

    def resolve_options(
        self, options: DecodeOptions | None = None, **fields: Any
    ) -> ResolvedOptions: ...

    def attention(
        self,
        source: str,
        target: str | None = None,
        options: DecodeOptions | None = None,
        kind: str = "cross",
        **fields: Any,
    ) -> tuple[np.ndarray, list[str], list[str], str]:
        """One sentence's attention of `kind` (one of `capabilities.attention`): (layers, heads,
        rows, columns), the column pieces, the row pieces and the translation; searched with
        `options` (`fields` on top), or force-decoded for `target`."""
        ...

    def check_constraints(
        self, lines: Sequence[str], constraints: Sequence[Sequence[str]], **fields: Any
    ) -> None:
        """Refuse, naming the line, what `translate` would refuse of these lines' constraints
        (with the options `fields`), before any of them is decoded."""
        ...

    def score_ids(
        self, src: list[list[int]], tgt: list[list[int]], batch_tokens: int | None = None
    ) -> list[list[float]]: ...

    def encode_sources(
        self, lines: list[str], first_line: int, warn: Callable[[str], None]
    ) -> list[list[int]]: ...

    def describe(self) -> dict[str, Any]: ...

    def close(self) -> None: ...

    def __enter__(self) -> Engine: ...

    def __exit__(self, *exc: object) -> None: ...
