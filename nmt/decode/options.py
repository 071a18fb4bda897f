"""Decoding options: `DecodeOptions` as a caller gives them (None: the model's `decoding` config
default), `ResolvedOptions` once filled in and checked, and the `decoding` defaults of a model
directory or an `nmt export` read without torch, so the CLI refuses a bad option before a model
loads.

Every check raises `OptionError`, which knows the options it names: the library reads
`beam_size must be in [1, 200], got 0`, the command line `--beam-size must be ...`. The ranges
and choices are the ones `DecodingConfig` declares in its field metadata.
"""

from __future__ import annotations

import dataclasses
import math
import string
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from nmt.config import DecodingConfig
from nmt.errors import NmtError

MAX_SAMPLES = 200  # samples per line with sampling (as the beam's limit)
NO_LENGTH_CAP = 100_000  # most output tokens of a model with no position limit (fairseq's RNNs)
# The options a model's `decoding` config gives defaults for, in its order (the order of checks).
CONFIG_FIELDS = {f.name: f.metadata for f in dataclasses.fields(DecodingConfig)}


class HasDecoding(Protocol):
    """An opened model or export directory: what its decoding defaults are."""

    @property
    def decoding(self) -> DecodingConfig: ...


class OptionError(NmtError, ValueError):
    """A bad decoding option. `template` names options as `{field}` placeholders, filled by
    `render` with each audience's spelling of them; the other placeholders are `values`. Shown to
    CLI users as an error, a ValueError to library callers."""

    def __init__(self, template: str, **values: Any) -> None:
        names = {name for _, name, _, _ in string.Formatter().parse(template) if name}
        self.template, self.values = template, values
        self.fields = tuple(sorted(names - values.keys()))
        super().__init__(self.render(str))

    def render(self, spell: Callable[[str], str]) -> str:
        """The message with every option it names spelled by `spell` (a field name in, its name
        for the reader out: itself for the library, a flag for the command line)."""
        return self.template.format(**{f: spell(f) for f in self.fields}, **self.values)


@dataclass(frozen=True)
class Sampling:
    """Draw each token from the model's distribution instead of taking the best one (sampled
    back-translation, diverse n-best lists): softmax(log-probs / temperature), cut to the
    `top_k` most likely tokens (0: all) and to the smallest set of them holding `top_p` of the
    probability (nucleus sampling; 1: all). Every draw is a function of (seed, key, step) only,
    the key naming the sentence and sample (nmt.engines.translator: line number and sample
    index), so a line draws the same tokens whatever batch, worker or buffer decodes it
    (nmt.decode.search.sampling draws them)."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.temperature > 0 or math.isinf(self.temperature):
            raise OptionError("temperature must be > 0, got {got}", got=self.temperature)
        if self.top_k < 0:
            raise OptionError("top-k must be >= 0 (0: all tokens), got {got}", got=self.top_k)
        if not 0 < self.top_p <= 1:
            raise OptionError("top-p must be in (0, 1], got {got}", got=self.top_p)


@dataclass(frozen=True)
class ResolvedOptions:
    """Every decoding option set: what the searches take. `DecodeOptions.resolve` fills them
    from a model's defaults and checks them; built directly (tests, training's validation
    decode), they are taken as given, and unset ones are `DecodingConfig`'s defaults.

    Beam size 1 or `greedy` runs greedy search; `sampling` draws `nbest` samples per line
    instead. `scores=False` lets greedy search skip the log-probabilities (same text, NaN
    scores); `with_attention` keeps each hypothesis's attention.
    """

    beam_size: int = DecodingConfig.beam_size
    greedy: bool = False
    length_penalty: float = DecodingConfig.length_penalty
    nbest: int = 1
    max_len_a: float = DecodingConfig.max_len_a
    max_len_b: float = DecodingConfig.max_len_b
    min_len: int = DecodingConfig.min_len
    no_repeat_ngram_size: int = DecodingConfig.no_repeat_ngram_size
    batch_tokens: int = DecodingConfig.batch_tokens
    stop: str = DecodingConfig.stop
    forced_eos: bool = DecodingConfig.forced_eos
    with_attention: bool = False
    scores: bool = True
    sampling: Sampling | None = None

    @property
    def rows(self) -> int:
        """Rows searched per line: the beam size (1 with `greedy`), or `nbest` samples."""
        if self.sampling is not None:
            return self.nbest
        return 1 if self.greedy else self.beam_size

    def output_limit(self, source_subwords: int, max_positions: int | None) -> int:
        """Most output tokens (eos not counted) for a source of `source_subwords` (eos not
        counted either): floor(max_len_a * n + max_len_b), at least 1, at most max_positions - 1
        so that eos still has a position (NO_LENGTH_CAP without a position limit). Every engine
        asks here, so a line stops at the same length whichever decodes it. Capped while a float:
        a huge a or b (1e300, inf) converted to int64 first once wrapped to INT64_MIN."""
        cap = max_positions - 1 if max_positions else NO_LENGTH_CAP
        x = self.max_len_a * source_subwords + self.max_len_b
        return cap if x >= cap else max(1, math.floor(x))


@dataclass(frozen=True)
class DecodeOptions:
    """Decoding options as given: None takes the model's `decoding` config default (see
    `ResolvedOptions` for what each does). Hashable: equal options can share a batch."""

    beam_size: int | None = None
    greedy: bool = False
    length_penalty: float | None = None
    nbest: int = 1
    max_len_a: float | None = None
    max_len_b: float | None = None
    min_len: int | None = None
    no_repeat_ngram_size: int | None = None
    batch_tokens: int | None = None
    stop: str | None = None
    forced_eos: bool | None = None
    with_attention: bool = False
    scores: bool = True
    sampling: Sampling | None = None

    def resolve(self, defaults: DecodingConfig) -> ResolvedOptions:
        """The options with every unset one taken from `defaults`, checked: a search beside
        sampling, then each against its config key's range, then nbest against the search."""
        check_sampling(self.beam_size, self.greedy, self.sampling is not None)
        given = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for key in CONFIG_FIELDS:
            if given[key] is None:
                given[key] = getattr(defaults, key)
            check_field(key, given[key])
        check_rows(given["beam_size"], self.greedy, self.nbest, self.sampling is not None)
        return ResolvedOptions(**given)


def given_options(options: DecodeOptions | None, fields: dict[str, Any]) -> DecodeOptions:
    """A call's options: `options` (None: all unset) with `fields` on top, the keyword form
    `translate(lines, beam_size=5)` of the engines."""
    given = options or DecodeOptions()
    return dataclasses.replace(given, **fields) if fields else given


def sampling_options(
    on: bool,
    temperature: float | None,
    top_k: int | None,
    top_p: float | None,
    seed: int | None,
    beam_size: int | None = None,
    greedy: bool = False,
) -> Sampling | None:
    """The sampling settings of the command-line flags (`--sampling` `on`; None: its default),
    or None; a search (`beam_size`, `greedy`) beside them is refused first, and their flags
    without `--sampling` are refused too."""
    check_sampling(beam_size, greedy, on)
    if not on:
        if (temperature, top_k, top_p, seed) != (None, None, None, None):
            raise NmtError(
                "--temperature, --sampling-topk, --sampling-topp and --seed need --sampling"
            )
        return None
    default = Sampling()
    return Sampling(
        temperature=default.temperature if temperature is None else temperature,
        top_k=default.top_k if top_k is None else top_k,
        top_p=default.top_p if top_p is None else top_p,
        seed=default.seed if seed is None else seed,
    )


def check_field(key: str, value: Any) -> None:
    """An option against the range / choices its `decoding` config key declares."""
    meta = CONFIG_FIELDS[key]
    bounds, choices = meta.get("range"), meta.get("choices")
    if bounds is not None and value not in bounds:
        template = f"{{{key}}} must be {{requirement}}, got {{got}}"
        raise OptionError(template, requirement=bounds.requirement(value), got=value)
    if choices is not None and value not in choices:
        template = f"{{{key}}} must be {{choices}}, got {{got!r}}"
        raise OptionError(template, choices=" or ".join(choices), got=value)


def check_sampling(beam_size: int | None, greedy: bool, sampling: bool) -> None:
    """Sampling draws its own tokens: a search (a beam size other than 1, greedy) is refused."""
    if sampling and (beam_size not in (None, 1) or greedy):
        raise OptionError("{sampling} draws its own tokens: drop {beam_size} / {greedy}")


def check_rows(beam_size: int, greedy: bool, nbest: int, sampling: bool) -> None:
    """An nbest the search cannot give is refused: more than its beam (1 with `greedy`), or
    outside [1, MAX_SAMPLES] samples."""
    if sampling:
        if not 1 <= nbest <= MAX_SAMPLES:
            template = "{nbest} must be between 1 and {most} with {sampling}, got {got}"
            raise OptionError(template, most=MAX_SAMPLES, got=nbest)
        return
    k = 1 if greedy else beam_size
    if not 1 <= nbest <= k:
        template = "{nbest} must be between 1 and the beam size ({k}), got {got}"
        raise OptionError(template, k=k, got=nbest)


def decoding_defaults(model_dir: str | Path | HasDecoding) -> DecodingConfig:
    """The decoding section of a model directory's config.yaml (an `nmt export`'s manifest),
    read without torch, so option mistakes fail before any model loads; an opened directory
    (`ModelDir`, `ExportDir`) gives its own."""
    if not isinstance(model_dir, str | Path):
        return model_dir.decoding
    from nmt.dirs import open_model

    return open_model(model_dir).decoding


def check_search(model_dir: str | Path | HasDecoding, options: DecodeOptions) -> ResolvedOptions:
    """The options against the decoding defaults of the model (an ensemble's first), before it
    loads: an impossible combination fails at once, not once the first input has arrived."""
    return options.resolve(decoding_defaults(model_dir))
