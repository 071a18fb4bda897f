"""Translate a test set and score it (`nmt evaluate`): the one place where a model meets the
metrics, so `nmt.eval.scoring` itself needs sacrebleu alone."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

from nmt.data.sentences import Segmenter
from nmt.decode.engine import Engine
from nmt.decode.lines import (
    check_model_dirs,
    model_dirs,
    one_line,
    warn_cut_short,
    warn_to_stderr,
    warn_unknown,
)
from nmt.decode.options import DecodeOptions
from nmt.decode.paragraphs import (
    sentence_splitting,
    source_languages,
    split_notice,
    target_token,
    translate_lines,
)
from nmt.errors import NmtError
from nmt.eval.scoring import (
    TOKENIZERS,
    Options,
    Result,
    check_lengths,
    check_options,
    parse_metrics,
    read_text,
    score,
)
from nmt.textio import atomic_write


def _check_inputs(
    dirs: Sequence[str | Path],
    src: str | Path,
    ref_paths: Sequence[str | Path],
    opts: Options,
) -> tuple[list[str], list[list[str]]]:
    """Source and reference lines, refused when missing, empty or misaligned (no model needed)."""
    if opts.tokenize is not None and opts.tokenize not in TOKENIZERS:
        raise NmtError(f"unknown tokenizer {opts.tokenize!r} (choose from {', '.join(TOKENIZERS)})")
    check_model_dirs(dirs)
    src_lines = read_text(src)
    if not src_lines:
        raise NmtError(f"{src}: empty source file")
    refs = [read_text(p) for p in ref_paths]
    check_lengths(src_lines, refs, hyp_name=str(src), ref_names=[str(p) for p in ref_paths])
    return src_lines, refs


def evaluate(
    model_dir: str | Path | Sequence[str | Path],
    src: str | Path,
    ref_paths: Sequence[str | Path],
    hyp_out: str | Path | None = None,
    metrics: Sequence[str] = ("bleu",),
    options: Options | None = None,
    device: str = "auto",
    checkpoint: str = "default",
    precision: str = "auto",
    progress: Callable[[int, int], None] | None = None,
    decoding: DecodeOptions | None = None,
    split_sentences: bool | None = None,
    on_notice: Callable[[str], None] | None = None,
    target_lang: str | None = None,
) -> list[Result]:
    """Translate `src` with the model (several directories: their ensemble) and score it; every
    input is checked before the model loads.

    `decoding` says how to translate (None, or an unset option: the model config's value;
    scores are never computed, only the text is scored); `progress(n_done_now, n_total)` is
    called as batches finish. Lines are translated as `nmt translate` does (nmt.decode.paragraphs:
    `split_sentences` True, False or None for the default, and long lines cut, not truncated;
    `on_notice` hears how many lines the default split into sentences, if any; `target_lang`:
    a multilingual model's target language, checked against the model once it has loaded).
    Lines holding pieces the model's vocabulary lacks are named on stderr, as translations
    stopped at the length limit are.
    """
    metric_names = parse_metrics(metrics)
    opts = options or Options()
    check_options(metric_names, opts)
    dirs = model_dirs(model_dir)
    src_lines, refs = _check_inputs(dirs, src, ref_paths, opts)
    how = dataclasses.replace(decoding or DecodeOptions(), scores=False)  # only text is scored

    from nmt.dirs import open_dirs
    from nmt.engines.loading import open_translator  # torch only for a model directory

    translator = open_translator(open_dirs(dirs), device, checkpoint, precision)
    advance = None if progress is None else lambda n: progress(n, len(src_lines))
    with translator:  # its worker processes end with the translation
        languages = source_languages(translator.src_tok)
        target_token(languages, target_lang, str(dirs[0]))  # naming the directory
        hyps, split = _translate(
            translator, src_lines, str(src), how, split_sentences, advance, target_lang
        )
    if split > 0 and on_notice is not None:
        on_notice(split_notice(str(src), split, len(src_lines)))
    if translator.tgt_tok.lowercase:  # it writes lowercased text: cased BLEU would only punish that
        opts = dataclasses.replace(opts, lowercase=True)  # the signature says case:lc
    if len(hyps) != len(src_lines):  # the translator's contract; never score a shifted file
        raise NmtError(f"translator returned {len(hyps)} lines for {len(src_lines)} inputs")
    if hyp_out is not None:
        with atomic_write(hyp_out) as f:
            f.writelines(h + "\n" for h in hyps)
    return score(hyps, refs, metric_names, options=opts)


def _translate(
    translator: Engine,
    lines: list[str],
    name: str,
    how: DecodeOptions,
    split_sentences: bool | None,
    advance: Callable[[int], None] | None,
    target_lang: str | None,
) -> tuple[list[str], int]:
    """The translations of `lines` (of file `name`) as `nmt translate` writes them, and how many
    lines the default split into sentences; the warnings of `nmt translate` on stderr."""
    segmenter, several = sentence_splitting(split_sentences, how, None)
    if segmenter is not None:
        segmenter = Segmenter(translator.languages[0])  # the model's own source language
    splits: list[int] = []
    translations = translate_lines(
        translator,
        lines,
        how,
        segmenter=segmenter,
        several=several,
        tgt_lang=translator.languages[1],
        target_lang=target_lang,
        on_warning=warn_to_stderr(name),
        progress=advance,
        on_split=splits.append,
    )
    warn_cut_short(translator, how, name, translations)
    warn_unknown(translator, name, lines)
    return [one_line(h.text) for h in translations], sum(splits) if several else 0
