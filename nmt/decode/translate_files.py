"""Translating files and stdin (`nmt translate`): one result per input line, in order, batch by
batch so memory stays bounded, into a file written atomically or stdout."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Callable
from typing import Any

from nmt.decode.constraints import Glossary, parse_jsonl_line
from nmt.decode.engine import Engine, Translation
from nmt.decode.lines import (
    BATCH_LINES,
    check_inputs,
    check_output,
    count_lines,
    format_translation,
    is_regular,
    limit_warning,
    read_batches,
    warn_to_stderr,
)
from nmt.decode.options import DecodeOptions, given_options
from nmt.decode.paragraphs import sentence_splitting, split_notice, translate_lines
from nmt.errors import NmtError
from nmt.textio import atomic_write

# (exit stack, total lines) -> the per-batch advance(n) of a progress bar
Progress = Callable[[contextlib.ExitStack, int], Callable[[int], None]]


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
    `on_notice` hears, per input, how many lines the default split into sentences (if any);
    translations stopped at the length limit are named on stderr, per input, at the end."""
    opts = given_options(options, fields)
    paths = check_inputs(inputs, fmt, errors, opts.with_attention, opts.nbest, buffer_size)
    check_output(output)
    opts = dataclasses.replace(opts, scores=fmt == "jsonl")
    resolved = translator.resolve_options(opts)  # bad options fail before any input is read
    segmenter, several = sentence_splitting(split_sentences, opts, translator.languages[0])
    if glossary is not None:
        glossary.check(
            translator.tgt_tok.encode, translator.tgt_tok.unk_id
        )  # before any input is read
    notes: list[str] = []
    cut_short: list[tuple[Callable[[str], None], str]] = []  # (warn, message) per input
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(atomic_write(output)) if output else sys.stdout
        advance = None
        if progress is not None and all(is_regular(p) for p in paths):
            advance = progress(stack, sum(count_lines(p) for p in paths))
        for path in paths:
            name = "<stdin>" if path == "-" else path
            warn = warn_to_stderr(name)
            first, splits, at_limit = 1, list[int](), list[int]()  # split lines; cut-short ones
            for batch in read_batches(path, errors, buffer_size or BATCH_LINES):
                results = _translate_batch(
                    translator, batch, opts, name, first, input_format == "jsonl",
                    segmenter=segmenter, several=several, tgt_lang=translator.languages[1],
                    on_warning=warn, progress=advance, glossary=glossary, on_split=splits.append,
                )  # fmt: skip
                at_limit += [first + n for n, tr in enumerate(results) if tr.at_limit]
                first += len(batch)
                out.writelines(
                    format_translation(tr, fmt, opts.nbest, opts.with_attention) for tr in results
                )
                out.flush()
            if several and (split := sum(splits)) > 0:
                notes.append(split_notice(name, split, first - 1))
            if at_limit:
                cut_short.append((warn, limit_warning(at_limit, first - 1, resolved)))
    for warn, message in cut_short:  # after the progress bar has closed
        warn(message)
    if on_notice is not None:
        for note in notes:
            on_notice(note)


def _translate_batch(
    translator: Engine,
    batch: list[str],
    opts: DecodeOptions,
    name: str,
    first: int,
    jsonl: bool,
    **kwargs: Any,
) -> list[Translation]:
    """One batch of input lines (JSONL records when `jsonl`), from line `first` of `name`,
    through `translate_lines` (`kwargs`); an error in a line's constraints names the file too."""
    constraints = None
    if jsonl:
        records = [parse_jsonl_line(r, name, first + n) for n, r in enumerate(batch)]
        batch, constraints = [t for t, _ in records], [c for _, c in records]
    try:
        return translate_lines(
            translator, batch, opts, first_line=first, constraints=constraints, **kwargs
        )
    except NmtError as e:
        raise NmtError(f"{name}: {e}") from None
