"""Lines that are more than one sentence, or longer than the model takes: each line is cut into
pieces (its sentences with `--split-sentences`; any line over the model's source limit at its
best boundaries, nmt.data.sentences.fit), the pieces of every line are translated in the same
batches, and each line's translations are joined back into one output line. Input line N is
output line N whatever happens inside it; a line that needs neither goes to the engine as it is,
so its translation is byte-identical to translating it alone. Torch-free: it runs on any engine.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Sequence
from typing import Any

from nmt.data.marian_vocab import language_name, language_token
from nmt.data.sentences import Pieces, Segmenter, fit
from nmt.decode.constraints import Glossary
from nmt.decode.engine import Engine, TextHypothesis, Translation
from nmt.decode.options import DecodeOptions, OptionError
from nmt.errors import NmtError


def fits(line: str, limit: int) -> bool:
    """A quick bound: a line of n characters encodes to at most 2n + 1 pieces (a word-start
    piece and one piece per character), so a short line fits without being encoded."""
    return 2 * len(line) + 1 <= limit


def plan(
    lines: Sequence[str],
    engine: Engine,
    segmenter: Segmenter | None,
    several: bool = False,
    whole: Sequence[bool] | None = None,
    reserve: int = 0,
) -> list[Pieces | None]:
    """Per line, its pieces, or None where the line goes to the engine as it is (no sentence
    splitting asked, or with `several` a line of one sentence, or `whole` says so; and it fits
    the model's source limit, which an RNN has not, less `reserve` tokens written before each
    piece: a target-language token)."""
    limit = engine.max_source - reserve if engine.max_source > 0 else sys.maxsize

    def count(text: str) -> int:
        return len(engine.src_tok.encode(text))

    out: list[Pieces | None] = []
    for i, line in enumerate(lines):
        keep = whole is not None and whole[i]
        pieces = segmenter.split(line) if segmenter is not None and not keep else None
        if pieces is None or (several and len(pieces.sentences) < 2):
            if not line.strip() or fits(line, limit) or count(line.strip()) <= limit:
                out.append(None)
                continue
            body = line.strip()
            start = line.index(body[0])
            pieces = Pieces(line[:start], [body], line[start + len(body) :])
        fitted = [
            p for s in pieces.sentences for p in ([s] if fits(s, limit) else fit(s, count, limit))
        ]
        cut = len(fitted) > len(pieces.sentences)
        out.append(dataclasses.replace(pieces, sentences=fitted, cut=cut))
    return out


def sentence_splitting(
    mode: bool | None, options: DecodeOptions, lang: str | None
) -> tuple[Segmenter | None, bool]:
    """What `--split-sentences` (True), `--whole-lines` (False) or neither (None, the default)
    means for a run: (the segmenter or None, whether it splits only lines of several
    sentences). The default splits a line that holds several sentences, as long as the search
    gives one translation per line (no n-best list, attention or sampling); a line of one
    sentence then reaches the model as it is (docs/benchmarks.md, "Paragraphs")."""
    if mode is False:
        return None, False
    if mode is True:
        check_split_options(options)
        return Segmenter(lang), False
    one_each = options.nbest == 1 and not options.with_attention and options.sampling is None
    return (Segmenter(lang), True) if one_each else (None, False)


def split_notice(name: str, split: int, lines: int) -> str:
    """The line that says how many lines the default split into sentences: a test set of
    several sentences a line is translated otherwise than its lines' length suggests."""
    return (
        f"{name}: {split:,} of {lines:,} lines hold several sentences: each was translated "
        "sentence by sentence and joined (--whole-lines translates lines whole)"
    )


def check_split_options(options: DecodeOptions, flag: str = "--split-sentences") -> None:
    """One search result per line is what joining gives: refuse n-best lists, attention and
    sampling (`flag` names the option in the message: the server's field is another)."""
    if options.nbest > 1:
        raise NmtError(f"{flag} gives one translation per line: use nbest 1")
    if options.with_attention:
        raise NmtError(f"{flag} joins several translations: attention needs it off")
    if options.sampling is not None:
        raise NmtError(f"{flag} takes beam or greedy search, not sampling")


def source_languages(tokenizer: Any) -> list[str]:
    """The target-language tokens (`>>fra<<`) a model's source vocabulary holds: a multilingual
    model's source lines start with one of them (no tokens: any other model, and None, the
    tokenizer of a stand-in engine that has none)."""
    return [] if tokenizer is None else list(tokenizer.languages)


def target_token(
    languages: Sequence[str], target_lang: str | None, model: str = "the model"
) -> str | None:
    """The token of `target_lang` (`fra` or `>>fra<<`) among a model's `languages`, or None for
    a model that has none. A multilingual model needs one and only it takes one: a missing or
    unknown language, or one given to another model, is an `OptionError` naming `target_lang`
    (`--target-lang` on the command line) and listing the model's languages."""
    names = ", ".join(language_name(t) for t in languages)
    if target_lang is None:
        if not languages:
            return None
        template = "{model} is multilingual: choose the target language with {target_lang} "
        raise OptionError(template + "(one of: {names})", model=model, names=names)
    if not languages:
        template = "{target_lang} {got!r}: {model} is not multilingual (its vocabulary holds no "
        raise OptionError(template + ">>xx<< target-language tokens)", got=target_lang, model=model)
    token = language_token(target_lang)
    if token not in languages:
        template = "{target_lang} {got!r}: {model} has no such target language (one of: {names})"
        raise OptionError(template, got=target_lang, model=model, names=names)
    return token


def prefixed(lines: Sequence[str], token: str | None) -> list[str]:
    """Each non-blank line after the target-language `token`, as a multilingual model reads its
    sources (MarianTokenizer takes a leading `>>fra<<` as one piece); blank lines stay blank,
    and no token leaves every line as it is."""
    if token is None:
        return list(lines)
    return [f"{token} {line}" if line.strip() else line for line in lines]


def with_target(tokenizer: Any, lines: Sequence[str], target_lang: str | None) -> list[str]:
    """`lines` as the model with this source `tokenizer` reads them in `target_lang` (checked by
    `target_token`); as they are when none is given."""
    if target_lang is None:
        return list(lines)
    return prefixed(lines, target_token(source_languages(tokenizer), target_lang))


def translate_lines(
    engine: Engine,
    lines: Sequence[str],
    options: DecodeOptions,
    *,
    segmenter: Segmenter | None = None,
    several: bool = False,
    tgt_lang: str | None = None,
    target_lang: str | None = None,
    first_line: int = 1,
    on_warning: Callable[[str], None] | None = None,
    progress: Callable[[int], None] | None = None,
    keys: Sequence[int] | None = None,
    constraints: Sequence[Sequence[str]] | None = None,
    glossary: Glossary | None = None,
    on_split: Callable[[int], None] | None = None,
    **fields: Any,
) -> list[Translation]:
    """One Translation per line, in order: `engine.translate` on every line that needs no
    cutting, and on the pieces of those that do (their sentences with a `segmenter`; any line
    over the model's limit), joined back with the target language's separator (`tgt_lang`). A
    cut line's Translation keeps its pieces' Translations (`sentences`, in JSONL) and sums their
    scores. With `several`, only the lines of several sentences are split.
    `target_lang` (`fra` or `>>fra<<`) is the target language of a multilingual model, which
    needs one (`target_token`): its token starts every line and every piece the engine gets.
    `keys` (sampling keys, one per line) give each piece its line's key; `constraints` (target
    phrases per line) keep their line whole; a `glossary` gives each piece the target terms of
    the source terms in it; `on_split(n)` hears how many lines were split into sentences;
    `fields` go to `engine.translate` as they are."""
    token = target_token(source_languages(engine.src_tok), target_lang)
    if segmenter is not None and not several:
        check_split_options(options)
    whole = None if constraints is None else [bool(c) for c in constraints]
    planned = plan(lines, engine, segmenter, several, whole, reserve=int(token is not None))
    if on_split is not None:
        on_split(sum(1 for p in planned if p is not None and not p.cut and len(p.sentences) > 1))
    counts = [1 if p is None else len(p.sentences) for p in planned]
    flat = [s for line, p in zip(lines, planned, strict=True) for s in _texts(line, p)]
    flat_keys = (
        None if keys is None else [k for k, n in zip(keys, counts, strict=True) for _ in range(n)]
    )
    wanted = piece_constraints(engine, planned, flat, constraints, glossary, first_line)
    if any(wanted):
        fields = {**fields, "constraints": wanted}
    as_given = all(p is None for p in planned)
    results = engine.translate(
        prefixed(flat, token),
        options=options,
        first_line=first_line,
        on_warning=on_warning,
        progress=progress if as_given else None,
        keys=flat_keys,
        **fields,
    )
    if token is not None:  # each result names its text as given, without the token
        results = [
            dataclasses.replace(r, source=text) for r, text in zip(results, flat, strict=True)
        ]
    if as_given:
        return results
    out = _joined_back(lines, planned, results, engine.max_source, first_line, on_warning, tgt_lang)
    if progress is not None:
        progress(len(lines))
    return out


def _texts(line: str, pieces: Pieces | None) -> list[str]:
    """What the engine translates of one line: the line itself, or its pieces."""
    return [line] if pieces is None else pieces.sentences


def _joined_back(
    lines: Sequence[str],
    planned: Sequence[Pieces | None],
    results: Sequence[Translation],
    limit: int,
    first_line: int,
    on_warning: Callable[[str], None] | None,
    tgt_lang: str | None,
) -> list[Translation]:
    """One Translation per line from the engine's `results` for the lines and pieces in order:
    a cut line's pieces joined back (and named in a warning when it was too long)."""
    out: list[Translation] = []
    at = 0
    for i, (line, pieces) in enumerate(zip(lines, planned, strict=True)):
        if pieces is None:
            out.append(results[at])
            at += 1
            continue
        parts = results[at : at + len(pieces.sentences)]
        at += len(pieces.sentences)
        if pieces.cut and on_warning is not None:
            on_warning(
                f"line {first_line + i}: longer than the model's {limit} source "
                f"subwords: translated in {len(parts)} pieces cut at punctuation or spaces"
            )
        out.append(joined(line, pieces, parts, tgt_lang))
    return out


def piece_constraints(
    engine: Engine,
    planned: Sequence[Pieces | None],
    flat: Sequence[str],
    constraints: Sequence[Sequence[str]] | None,
    glossary: Glossary | None,
    first_line: int,
) -> list[list[str]]:
    """The target phrases of each piece in `flat` (a whole line's own `constraints`; the
    `glossary` terms found in the piece); a line with constraints that had to be cut is refused."""
    wanted: list[list[str]] = []
    at = 0
    for i, pieces in enumerate(planned):
        given = list(constraints[i]) if constraints is not None else []
        if given and pieces is not None:
            raise NmtError(
                f"line {first_line + i}: longer than the model's {engine.max_source} source "
                "subwords, so it is translated in pieces, and its constraints cannot be placed "
                "in them: give its sentences on lines of their own"
            )
        n = 1 if pieces is None else len(pieces.sentences)
        for text in flat[at : at + n]:
            terms = glossary.constraints(text, engine.src_tok.lowercase) if glossary else []
            wanted.append(list(dict.fromkeys(given + terms)))
        at += n
    return wanted


def joined(
    line: str, pieces: Pieces, parts: Sequence[Translation], tgt_lang: str | None
) -> Translation:
    """One line's Translation from its pieces': their best texts joined, tokens concatenated,
    scores summed."""
    best = [p.hypotheses[0] for p in parts]
    hyp = TextHypothesis(
        text=pieces.join([h.text for h in best], tgt_lang),
        tokens=[t for h in best for t in h.tokens],
        score=sum(h.score for h in best),
        log_prob=sum(h.log_prob for h in best),
        at_limit=any(h.at_limit for h in best),
    )
    source_tokens = [t for p in parts for t in p.source_tokens]
    return Translation(line, [hyp], source_tokens, sentences=list(parts))
