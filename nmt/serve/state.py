"""What `nmt serve` holds and does between the HTTP layer (nmt.serve.app) and the batcher: its
`Settings`, the loaded model (`ServerState`), what a checked request becomes for the batcher
(`Work`, with options that keep unlike requests in separate batches), and the batcher's decoding
job, which answers in the records of `nmt translate --format jsonl` and `nmt rescore`."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nmt.data.marian_vocab import language_name
from nmt.data.sentences import Segmenter
from nmt.data.vocab import Tokenizer
from nmt.decode.constraints import Glossary
from nmt.decode.engine import Engine
from nmt.decode.options import MAX_SAMPLES, DecodeOptions, OptionError
from nmt.decode.paragraphs import (
    sentence_splitting,
    source_languages,
    target_token,
    translate_lines,
)
from nmt.errors import NmtError
from nmt.serve.attention_query import (
    AttentionBody,
    AttentionQuery,
    attention_kinds,
    attention_records,
    unavailable,
)
from nmt.serve.batcher import Decode, MicroBatcher
from nmt.serve.fields import Context, Limits, bad
from nmt.serve.request import ScoreBody, TranslateBody, parse

SCORE = "score"  # the batcher options of a /score job: forced decoding, batched apart
log = logging.getLogger("nmt.serve")


@dataclass(frozen=True)
class SplitSentences:
    """The batcher options of /translate lines to split into sentences (`split_sentences`, or
    by default those of several sentences: `several`), batched apart from whole lines."""

    options: DecodeOptions
    several: bool


@dataclass(frozen=True)
class Terms:
    """The batcher options of /translate lines with constraints or a glossary: the search (a
    DecodeOptions or SplitSentences) and the request's glossary; the items are (line, its
    phrases) pairs. Batched apart, so lines without them translate as they would alone."""

    how: DecodeOptions | SplitSentences
    glossary: Glossary | None


@dataclass(frozen=True)
class Target:
    """The batcher options of /translate lines of a multilingual model: their search (a
    DecodeOptions, SplitSentences or Terms) and the target-language token written before each
    line and sentence; batched apart by language."""

    how: DecodeOptions | SplitSentences | Terms
    token: str


@dataclass(frozen=True)
class Work:
    """A checked request as the batcher takes it: its items, their options and their lengths."""

    items: list[Any]  # lines, or /score's and /attention's (source, target) pairs
    options: Hashable  # a DecodeOptions, SCORE, or an AttentionQuery
    lengths: list[int]  # padded tokens per item (eos included)


@dataclass(frozen=True)
class Settings:
    """Server limits and batching (the `nmt serve` options)."""

    model_dir: str = ""  # for /info (languages, name); "" when the factory builds a model itself
    members: tuple[str, ...] = ()  # an ensemble's model directories (model_dir is the first)
    checkpoint: str = "default"  # as nmt translate: an export takes only its own
    max_batch_tokens: int | None = None  # padded source tokens per decoder call; None: model config
    max_wait_ms: float = 10.0
    max_request_lines: int = 256
    max_line_chars: int = 2000
    timeout: float = 60.0  # seconds a request may wait for its translation
    target_lang: str | None = None  # a multilingual model's, for requests that name none

    def check(self) -> None:
        """Refuse impossible values with the option's name, before any model is loaded."""
        checks = [
            (self.max_batch_tokens is None or self.max_batch_tokens >= 1, "--max-batch-tokens", 1),
            (self.max_wait_ms >= 0, "--max-wait-ms", 0),
            (self.max_request_lines >= 1, "--max-request-lines", 1),
            (self.max_line_chars >= 1, "--max-line-chars", 1),
            (self.timeout > 0, "--timeout", "above 0"),
            (  # a lone request waits max_wait for company: it must leave time to decode
                self.max_wait_ms < self.timeout * 1000,
                "--max-wait-ms",
                f"below --timeout ({self.timeout:g} s = {self.timeout * 1000:g} ms)",
            ),
        ]
        for ok, flag, low in checks:
            if not ok:
                value = getattr(self, flag[2:].replace("-", "_"))
                bound = low if isinstance(low, str) else f"at least {low}"
                raise NmtError(f"{flag} must be {bound}, got {value}")

    @property
    def limits(self) -> Limits:
        """What one request may hold."""
        return Limits(self.max_request_lines, self.max_line_chars)


class ServerState:
    """The loaded translator and its batcher (None while loading), or the load error."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.translator: Engine | None = None
        self.batcher: MicroBatcher | None = None
        self.error: str | None = None
        self.info: dict[str, Any] = {}
        self.sampling_ok = False  # the engine draws nmt's keyed samples (not an export)
        self.name = model_name(settings.model_dir)

    async def load(self, factory: Callable[[], Engine]) -> None:
        """Build the translator on a thread (the loop keeps answering /health), then batch."""
        translator: Engine | None = None
        try:
            translator = await asyncio.to_thread(_loaded, factory)
            budget = self.settings.max_batch_tokens or translator.decoding.batch_tokens
            self.info = model_info(translator, self.settings, budget, self.name)
            self.sampling_ok = self.info["sampling"] is not None
            slots = translator.capabilities.slots
            decode = _decoder(translator, budget, slots > 1)
            batcher = MicroBatcher(decode, budget, self.settings.max_wait_ms, slots)
        except Exception as e:  # noqa: BLE001 - shown by /health and /translate instead of dying
            if translator is not None:
                translator.close()  # its worker processes
            self.error = f"the model failed to load: {e}"
            log.error(self.error)
            return
        batcher.start()
        self.translator, self.batcher = translator, batcher
        log.info("model loaded: %s", self.name)

    def ready(self) -> MicroBatcher:
        """The batcher, or a 503 saying why there is none yet."""
        if self.batcher is None:
            raise bad(
                503, self.error or "the model is still loading; retry when GET /health is ready"
            )
        return self.batcher

    @property
    def engine(self) -> Engine:
        """The loaded engine: asked for only once `ready` has answered."""
        if self.translator is None:
            raise bad(503, self.error or "the model is still loading")
        return self.translator

    def context(self) -> Context:
        """What a body is checked against: the limits and the loaded model."""
        constraints_ok = self.engine.capabilities.constraints
        return Context(self.settings.limits, self.engine.decoding, self.sampling_ok, constraints_ok)

    def translation(self, body: bytes) -> Work:
        """A /translate body checked and tokenised (CPU work: run it off the event loop)."""
        req = parse(TranslateBody, body, self.context())
        lines = req.lines()
        token = self.target(req.target_lang)
        options = req.options(self.engine.decoding)
        segmenter, several = sentence_splitting(req.split_sentences, options, None)
        how = SplitSentences(options, several) if segmenter is not None else options
        lengths = _lengths(self.engine, lines, reserve=token is not None)
        phrases, glossary = req.line_constraints(), req.glossary_terms()
        if phrases is None and glossary is None:
            return Work(lines, how if token is None else Target(how, token), lengths)
        wanted = [list(p) for p in phrases or [[]] * len(lines)]
        lower = self.engine.src_tok.lowercase
        terms = [glossary.constraints(x, lower) if glossary else [] for x in lines]
        joined = [w + t for w, t in zip(wanted, terms, strict=True)]
        search = {"beam_size": options.beam_size, "length_penalty": options.length_penalty}
        try:  # the request alone: a refusal never fails a batch it would share
            self.engine.check_constraints(lines, joined, **search)
        except NmtError as e:
            raise bad(422, str(e)) from None
        pairs = list(zip(lines, [tuple(w) for w in wanted], strict=True))
        terms_how = Terms(how, glossary)
        return Work(pairs, terms_how if token is None else Target(terms_how, token), lengths)

    def target(self, asked: str | None) -> str | None:
        """The token of a request's `target_lang` (the server's `--target-lang` when it names
        none), which a multilingual model needs and no other takes: 422 naming the choices."""
        languages = source_languages(self.engine.src_tok)
        try:
            return target_token(languages, asked or self.settings.target_lang)
        except OptionError as e:
            raise bad(422, e.render(repr)) from None

    def scoring(self, body: bytes) -> Work:
        """A /score body checked and tokenised (CPU work: run it off the event loop)."""
        pairs = parse(ScoreBody, body, self.context()).pairs()
        return Work(pairs, SCORE, _pair_lengths(self.engine, pairs))

    def attending(self, body: bytes) -> Work:
        """A /attention body checked, against the model too (400 for an export or a model
        without attention), and tokenised (CPU work: run it off the event loop)."""
        req = parse(AttentionBody, body, self.context())
        why = unavailable(self.engine)
        if why is not None:
            raise bad(400, why)
        query = req.query(self.engine.decoding)
        if req.target is None:
            return Work([(req.text, None)], query, _lengths(self.engine, [req.text]))
        pairs = [(req.text, req.target)]
        return Work(pairs, query, _pair_lengths(self.engine, pairs))


def _loaded(factory: Callable[[], Engine]) -> Engine:
    """The translator with its decoding processes forked now, while no request is decoding
    (a fork copies other threads' locks as they are at that moment)."""
    translator = factory()
    try:
        translator.start_workers()
    except BaseException:
        translator.close()
        raise
    return translator


def model_name(model_dir: str) -> str:
    """How answers name the model: its directory's last two path parts ("run1/model")."""
    return "/".join(Path(model_dir).resolve().parts[-2:]) if model_dir else "model"


def _decoder(translator: Engine, budget: int, share: bool = False) -> Decode:
    """The worker thread's job: translate lines (or score pairs) into JSONL-shaped records, the
    records of `nmt translate --format jsonl` and `nmt rescore --format jsonl`; or a sentence's
    attention (a `Refusal` when the model cannot give it)."""

    segmenter = Segmenter(translator.languages[0])

    def decode(items: list[Any], options: Hashable, keys: list[int], slots: int) -> list[Any]:
        if isinstance(options, AttentionQuery):
            return attention_records(translator, items, options)
        target = options.token if isinstance(options, Target) else None
        if isinstance(options, Target):
            options = options.how
        terms: dict[str, Any] = {}
        if isinstance(options, Terms):
            terms = {"constraints": [list(p) for _, p in items], "glossary": options.glossary}
            items, options = [line for line, _ in items], options.how
        split = options if isinstance(options, SplitSentences) else None
        if isinstance(options, SplitSentences):
            options = options.options
        if not isinstance(options, DecodeOptions):  # SCORE
            from nmt.decode.rescore import rescore

            sources, targets = [s for s, _ in items], [t for _, t in items]
            scores = rescore(translator, sources, targets, budget, on_warning=log.warning)
            return [score.to_json() for score in scores]
        sampled = keys if options.sampling is not None else None
        parts: dict[str, Any] = {"parts": slots} if share else {}  # the workers it holds
        out = translate_lines(
            translator,
            items,
            options,
            segmenter=segmenter if split else None,
            several=split is not None and split.several,
            tgt_lang=translator.languages[1],
            on_warning=log.warning,
            keys=sampled,
            batch_tokens=budget,
            target_lang=target,
            **parts,
            **terms,
        )
        return [tr.to_json(options.with_attention) for tr in out]

    return decode


def model_info(translator: Engine, settings: Settings, budget: int, name: str) -> dict[str, Any]:
    """GET /info: what is served (engine, languages, architecture), its decoding defaults, what
    it can do (sampling: model directories only; the kinds POST /attention gives) and the
    limits."""
    source, target = translator.languages if settings.model_dir else (None, None)
    languages = {"source": source, "target": target}
    from nmt import __version__

    return {
        "nmt_version": __version__,
        "model": name,
        "model_dir": str(Path(settings.model_dir).resolve()) if settings.model_dir else None,
        "checkpoint": settings.checkpoint,
        "ensemble": [model_name(d) for d in settings.members] or None,
        "languages": languages,
        "target_languages": [language_name(t) for t in source_languages(translator.src_tok)],
        "target_lang": settings.target_lang,
        **translator.describe(),
        "decoding": dataclasses.asdict(translator.decoding),
        "sampling": {"max_samples": MAX_SAMPLES} if translator.capabilities.sampling else None,
        "attention_kinds": attention_kinds(translator),
        "limits": {
            "max_batch_tokens": budget,
            "max_wait_ms": settings.max_wait_ms,
            "max_request_lines": settings.max_request_lines,
            "max_line_chars": settings.max_line_chars,
            "timeout_s": settings.timeout,
        },
    }


def _lengths(
    translator: Engine, lines: list[str], tokenizer: Tokenizer | None = None, reserve: bool = False
) -> list[int]:
    """Tokens per line as the model will see them (eos included, a target-language token too
    with `reserve`, truncation applied), by the source tokenizer unless another is given."""
    limit = translator.max_source
    ids = (tokenizer or translator.src_tok).encode_batch(lines, threads=1)
    return [1 + reserve + (min(len(x), limit) if limit > 0 else len(x)) for x in ids]


def _pair_lengths(translator: Engine, pairs: list[tuple[str, str]]) -> list[int]:
    """Padded tokens per pair: the longer of its source and target as the model sees them."""
    src = _lengths(translator, [s for s, _ in pairs])
    tgt = _lengths(translator, [t for _, t in pairs], translator.tgt_tok)
    return [max(s, t) for s, t in zip(src, tgt, strict=True)]
