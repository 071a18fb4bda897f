"""Translating files and stdin (`nmt translate`): one result per input line, in order, batch by
batch so memory stays bounded, into a file written atomically or stdout."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import IO, Any, Protocol

from nmt.data.sentences import Segmenter
from nmt.data.vocab import Tokenizer
from nmt.decode.constraints import (
    CONSTRAINTS_REFUSED,
    Glossary,
    check_constraint_options,
    check_input_format,
    parse_jsonl_line,
)
from nmt.decode.engine import Engine
from nmt.decode.lines import (
    BATCH_LINES,
    check_inputs,
    check_output,
    count_lines,
    format_translation,
    is_regular,
    limit_warning,
    read_batches,
    unknown_lines,
    unknown_warning,
    warn_to_stderr,
)
from nmt.decode.options import DecodeOptions, ResolvedOptions, given_options
from nmt.decode.paragraphs import (
    sentence_splitting,
    source_languages,
    split_notice,
    target_token,
    translate_lines,
)
from nmt.errors import NmtError
from nmt.textio import atomic_write

# (exit stack, total lines) -> the per-batch advance(n) of a progress bar
Progress = Callable[[contextlib.ExitStack, int], Callable[[int], None]]


@dataclass
class _Found:
    """What translating one input found: its lines, how many the default split into sentences,
    and the numbers of those stopped at the length limit and of those holding pieces the
    model's vocabulary lacks."""

    lines: int = 0
    split: int = 0
    at_limit: list[int] = field(default_factory=list)
    unknown: list[int] = field(default_factory=list)


def translate_files(
    translator: Engine,
    inputs: list[str] | None,
    output: str | None = None,
    options: DecodeOptions | None = None,
    *,
    fmt: str = "text",
    errors: str = "strict",
    buffer_size: int | None = None,
    progress: Progress | None = None,
    split_sentences: bool | None = None,
    input_format: str = "text",
    glossary: Glossary | None = None,
    on_notice: Callable[[str], None] | None = None,
    target_lang: str | None = None,
    **fields: Any,
) -> None:
    """Translate files (or stdin, '-') into `output` (atomically) or stdout, one result per input
    line, in order, batch by batch so memory stays bounded: full batches of `buffer_size` lines
    from files, what has arrived from a pipe or terminal, each flushed as soon as it is done.

    `options` (`fields` on top) go to the translator's `translate`, scores only for jsonl;
    `progress(stack, total_lines)` returns the per-batch `advance(n)` when every input is a
    regular file. `split_sentences` True translates each line's sentences and joins them
    (nmt.decode.paragraphs), False translates whole lines, None (the default) splits the lines
    of several sentences when the search gives one translation per line; a line over the model's
    source limit is cut at its best boundaries either way, never truncated. `input_format`
    "jsonl" reads {"text", "constraints"} objects (nmt.decode.constraints); a `glossary` gives
    each line (each sentence, when split) the target terms of its source terms as constraints.
    `target_lang`: a multilingual model's target language (nmt.decode.paragraphs.target_token).
    `on_notice` hears, per input, how many lines the default split into sentences (if any);
    translations stopped at the length limit, and lines holding pieces the model's vocabulary
    lacks (an imported model's), are named on stderr, per input, at the end."""
    opts = given_options(options, fields)
    paths = check_inputs(inputs, fmt, errors, opts.with_attention, opts.nbest, buffer_size)
    check_output(output)
    check_input_format(input_format)
    opts = dataclasses.replace(opts, scores=fmt == "jsonl")
    resolved = translator.resolve_options(opts)  # bad options fail before any input is read
    if glossary is not None:
        check_glossary(translator, resolved)
    segmenter, several = sentence_splitting(split_sentences, opts, translator.languages[0])
    target_token(source_languages(translator.src_tok), target_lang)  # as the options
    if glossary is not None:  # before any input is read
        glossary.check(translator.tgt_tok.encode, translator.tgt_tok.unk_id)
    jsonl = input_format == "jsonl"
    how = _How(translator, opts, fmt, jsonl, segmenter, several, glossary, target_lang)
    found: list[tuple[str, _Found]] = []
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(atomic_write(output)) if output else sys.stdout
        if progress is not None and all(is_regular(p) for p in paths):
            how.advance = progress(stack, sum(count_lines(p) for p in paths))
        for path in paths:
            name = "<stdin>" if path == "-" else path
            batches = read_batches(path, errors, buffer_size or BATCH_LINES)
            found.append((name, _translate_input(how, batches, name, out)))
    for name, seen in found:  # after the progress bar has closed
        warn = warn_to_stderr(name)
        if seen.at_limit:
            warn(limit_warning(seen.at_limit, seen.lines, resolved))
        if seen.unknown:
            warn(unknown_warning(seen.unknown, seen.lines))
    for name, seen in found:
        if several and seen.split > 0 and on_notice is not None:
            on_notice(split_notice(name, seen.split, seen.lines))


class HasTokenizers(Protocol):
    """An opened model or export directory: its (source, target) tokenizers."""

    @property
    def tokenizers(self) -> tuple[Tokenizer, Tokenizer]: ...


def check_target(opened: HasTokenizers, name: str, target_lang: str | None = None) -> str | None:
    """The token of `target_lang` for the model of `opened` (named `name`; an ensemble's first),
    checked before it loads: a multilingual model needs one, any other takes none."""
    return target_token(source_languages(opened.tokenizers[0]), target_lang, name)


def check_glossary(engine: Engine, options: ResolvedOptions) -> None:
    """Refuse a glossary the engine cannot apply: no constrained search, or a search that is not
    a beam."""
    if not engine.capabilities.constraints:
        raise NmtError(f"--glossary: {CONSTRAINTS_REFUSED}")
    check_constraint_options(options, "--glossary:")


def check_engine(engine: Engine, options: DecodeOptions, name: str, glossary: bool = False) -> None:
    """Refuse at once, naming the model `name`, what the opened engine cannot decode as
    `options` ask (with a `glossary`): constraints from an engine without a constrained search,
    attention from a model without any, sampling from an `nmt export`."""
    if glossary and not engine.capabilities.constraints:
        raise NmtError(f"--glossary: {CONSTRAINTS_REFUSED}")
    if options.with_attention:
        require_attention(engine, name)
    if options.sampling is not None and not engine.capabilities.sampling:
        raise NmtError(
            f"{name}: --sampling needs a model directory (an `nmt export` directory decodes with "
            "CTranslate2's search)"
        )


def require_attention(engine: Engine, name: str) -> None:
    """One line instead of a failed search when the model (named `name`) has no attention."""
    if not engine.capabilities.with_attention:
        raise NmtError(f"{name}: this model has no attention (model.attention: none)")


@dataclass
class _How:
    """How every input of one `translate_files` call is translated and written."""

    translator: Engine
    opts: DecodeOptions
    fmt: str
    jsonl: bool  # input lines are {"text", "constraints"} records
    segmenter: Segmenter | None
    several: bool  # split only the lines of several sentences
    glossary: Glossary | None
    target_lang: str | None
    advance: Callable[[int], None] | None = None  # the progress bar's


def _translate_input(how: _How, batches: Iterable[list[str]], name: str, out: IO[str]) -> _Found:
    """Translate one input (`name`), batch by batch, into `out`, each batch flushed as soon as it
    is done; what it found."""
    warn, found, splits = warn_to_stderr(name), _Found(), list[int]()
    for batch in batches:
        first = found.lines + 1
        texts, constraints = batch, None
        if how.jsonl:
            records = [parse_jsonl_line(r, name, first + n) for n, r in enumerate(batch)]
            texts, constraints = [t for t, _ in records], [c for _, c in records]
        try:
            results = translate_lines(
                how.translator,
                texts,
                how.opts,
                segmenter=how.segmenter,
                several=how.several,
                tgt_lang=how.translator.languages[1],
                target_lang=how.target_lang,
                first_line=first,
                on_warning=warn,
                progress=how.advance,
                constraints=constraints,
                glossary=how.glossary,
                on_split=splits.append,
            )
        except NmtError as e:  # an error in a line's constraints names the file too
            raise NmtError(f"{name}: {e}") from None
        found.at_limit += [first + n for n, tr in enumerate(results) if tr.at_limit]
        found.unknown += unknown_lines(how.translator, texts, first)
        found.lines += len(batch)
        fmt, nbest, attention = how.fmt, how.opts.nbest, how.opts.with_attention
        out.writelines(format_translation(tr, fmt, nbest, attention) for tr in results)
        out.flush()
    found.split = sum(splits)
    return found
